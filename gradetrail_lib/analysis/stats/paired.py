"""Paired comparison of two result sets (two models, or two runs) on the same samples.

Pairs are joined on (sample id, repeat). Each pair contributes a binary outcome per
side (pass = scored and score >= threshold) and a score difference B - A (an unscored
sample scores 0, as it fails the pass rate). The verdict needs two things
(`paired_verdict`): the paired interval on the mean difference excludes zero, and the
paired test rejects at the same level; the side the interval favours wins, else "no
winner", and a one-line note says when the two disagree.

Pass/fail scores (every score 0 or 1) without repeats take Newcombe's hybrid score
interval for a difference of paired proportions (Newcombe 1998, "Improved confidence
intervals for the difference between binomial proportions based on paired data",
Statistics in Medicine 17, method 10), whose coverage is known where the bootstrap's is
not (with few discordant pairs the bootstrap named a winner twice as often as its level
allows), and the exact McNemar test. Other scores without repeats take the paired
bootstrap and a sign-flip test over the pairs: the bootstrap alone named a winner 6.5-
6.9 % of the time under the null at 20-50 pairs, with the test 4.4-5.1 %
(docs/statistics.md). McNemar's p is shown beside them, as it reads pass/fail only.
Graded differences carry a warning with fewer than 30 pairs (cases, with repeats) or
10 effective differences, where the paired bootstrap is not known to cover.

With repeats (a case with more than one pair) cases are the units, for any score type:
the repeats of a case are correlated (a case that favours one model tends to favour it
on every repeat), so a test or interval over (case, repeat) pairs is too sure: McNemar
over the pairs rejected a true null 17-39 % of the time at alpha = 0.05 in our
simulation. The interval is a cluster bootstrap of the per-case mean differences
(`stats.clusters`) and the test a sign-flip permutation test over them
(`sign_flip_test`, `cluster-sign-flip`); McNemar's p is not computed.
"""

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal

from gradetrail_lib.analysis.stats.clusters import (
    CLUSTER,
    cluster_mean_estimate,
    cluster_proportion,
    group_by,
    is_clustered,
)
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE, ProportionMethod
from gradetrail_lib.analysis.stats.intervals import (
    BootstrapSettings,
    Estimate,
    Interval,
    mean_of,
    paired_warning,
    wilson_bounds,
)
from gradetrail_lib.analysis.stats.power import DEFAULT_POWER, MdeMethod, comparison_mde
from gradetrail_lib.analysis.stats.run_stats import percent
from gradetrail_lib.errors import NotComparable
from gradetrail_lib.results.sheet import ScoreSheet
from gradetrail_lib.results.totals import scored_mean
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD, Manifest, TraceRecord

Verdict = Literal["A", "B", "no winner"]
Key = tuple[str, int]
EXAMPLES = 5


@dataclass(frozen=True)
class PairedComparison:
    scorer: str
    label_a: str
    label_b: str
    n: int
    threshold: float
    confidence: float
    pass_rate_a: Estimate
    pass_rate_b: Estimate
    # The score over all n pairs with unscored samples at 0: the two terms of `difference`
    # (a paired difference needs a number for every pair).
    mean_a: float
    mean_b: float
    difference: Estimate  # mean of B - A over the pairs, with the paired interval
    both_pass: int
    both_fail: int
    a_only: int
    b_only: int
    # Exact McNemar over the pairs; None with repeats, where the pairs are not independent.
    mcnemar_p: float | None
    # The paired test (`MCNEMAR`, `SIGN_FLIP`, `CLUSTER_SIGN_FLIP`) and its p; a winner
    # needs it to reject as well as the interval to exclude zero (`paired_verdict`).
    test: str
    p_value: float
    verdict: Verdict
    unscored_a: int
    unscored_b: int
    notes: tuple[str, ...] = ()
    # The distinct cases (sample ids) of the n pairs: fewer than n with repeats, when
    # the intervals resample cases.
    cases: int | None = None
    # The minimum detectable effect: the smallest difference this comparison could have
    # detected with 80 % power (`stats.power`), and how it was worked out: "connor-exact"
    # for pass/fail pairs, "se" (2.8 standard errors of the paired difference) otherwise.
    mde: float | None = None
    mde_method: MdeMethod | None = None
    # The mean score as every surface gives it: over the scored samples of the pairs only
    # (`scored_mean`: None when none is scored), their number beside it.
    scored_mean_a: float | None = None
    scored_mean_b: float | None = None

    @property
    def scored_a(self) -> int:
        return self.n - self.unscored_a

    @property
    def scored_b(self) -> int:
        return self.n - self.unscored_b

    @property
    def clustered(self) -> bool:
        return self.cases is not None and self.cases < self.n

    def test_label(self) -> str:
        return TEST_LABELS.get(self.test, self.test)

    def winner_label(self) -> str:
        return {"A": self.label_a, "B": self.label_b}.get(self.verdict, "no winner")

    def detectable(self, difference: float) -> bool | None:
        """Whether a difference of this size (either direction) was within this
        comparison's 80 % power; None when no minimum detectable effect is known."""
        if self.mde_method is None:
            return None
        return self.mde is not None and abs(difference) >= self.mde

    def mde_text(self) -> str | None:
        """One sentence on the minimum detectable effect when no winner is named, so that
        "no winner" is not read as "no difference"; None when there is a winner."""
        if self.verdict != "no winner" or self.mde_method is None:
            return None
        alpha = f"alpha = {1 - self.confidence:.3g} two-sided"
        if self.mde is None:
            return (
                f"minimum detectable effect: none; no difference of any size could be "
                f"detected with {percent(DEFAULT_POWER)} power on {self.n} pairs "
                f"({self.mde_method}, {alpha}), so no winner says nothing about a difference"
            )
        return (
            f"minimum detectable effect: {self.mde:.3f} (the smallest difference this "
            f"comparison could detect with {percent(DEFAULT_POWER)} power; "
            f"{self.mde_method}, {alpha}): no winner is not evidence of no difference"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "a": self.label_a,
            "b": self.label_b,
            "n": self.n,
            "cases": self.cases,
            "threshold": self.threshold,
            "confidence": self.confidence,
            "pass_rate_a": self.pass_rate_a.to_json(),
            "pass_rate_b": self.pass_rate_b.to_json(),
            # Over the scored samples, as the run's summary gives it (n: `scored_*`).
            "mean_score_a": self.scored_mean_a,
            "mean_score_b": self.scored_mean_b,
            "scored_a": self.scored_a,
            "scored_b": self.scored_b,
            # The terms of the difference: every pair, an unscored sample as 0.
            "paired_mean_a": self.mean_a,
            "paired_mean_b": self.mean_b,
            "difference_b_minus_a": self.difference.to_json(),
            "counts": {
                "both_pass": self.both_pass,
                "both_fail": self.both_fail,
                "a_only": self.a_only,
                "b_only": self.b_only,
            },
            "mcnemar_p": self.mcnemar_p,
            "paired_test": {"method": self.test, "p": self.p_value},
            "verdict": self.verdict,
            "winner": self.winner_label(),
            "unscored_a": self.unscored_a,
            "unscored_b": self.unscored_b,
            "unscored_policy": "unscored samples count as failures with score 0",
            "notes": list(self.notes),
            "minimum_detectable_effect": {
                "value": self.mde,
                "method": self.mde_method,
                "power": DEFAULT_POWER,
            },
        }


NEWCOMBE = "newcombe-paired"
MCNEMAR = "mcnemar-exact"
SIGN_FLIP = "sign-flip"
CLUSTER_SIGN_FLIP = CLUSTER + SIGN_FLIP
TEST_LABELS = {
    MCNEMAR: "exact McNemar test",
    SIGN_FLIP: "sign-flip test",
    CLUSTER_SIGN_FLIP: "cluster sign-flip test",
}
# Up to this many non-zero differences the sign-flip test enumerates all 2^n sign
# patterns (8,192 at 13); above, 2^n exceeds the Monte Carlo's 9,999 resamples.
SIGN_FLIP_EXACT_MAX = 13


def newcombe_paired_interval(
    both_pass: int, a_only: int, b_only: int, both_fail: int, confidence: float
) -> Interval:
    """Newcombe's hybrid score interval (his method 10) for p_B - p_A of paired pass/fail
    outcomes: the Wilson intervals of the two pass rates, combined with the correlation
    of the pairs (phi, corrected towards zero as Newcombe does when it is positive)."""
    n = both_pass + a_only + b_only + both_fail
    p_a, p_b = (both_pass + a_only) / n, (both_pass + b_only) / n
    low_a, high_a = wilson_bounds(both_pass + a_only, n, confidence)
    low_b, high_b = wilson_bounds(both_pass + b_only, n, confidence)
    # Rows: B passes or fails; columns: A passes or fails.
    cross = both_pass * both_fail - b_only * a_only
    margins = (
        (both_pass + b_only) * (a_only + both_fail) * (both_pass + a_only) * (b_only + both_fail)
    )
    phi = 0.0
    if margins > 0:
        phi = (max(cross - n / 2, 0.0) if cross > 0 else cross) / math.sqrt(margins)
    difference = p_b - p_a
    below = math.sqrt(
        max((p_b - low_b) ** 2 - 2 * phi * (p_b - low_b) * (high_a - p_a) + (high_a - p_a) ** 2, 0)
    )
    above = math.sqrt(
        max((high_b - p_b) ** 2 - 2 * phi * (high_b - p_b) * (p_a - low_a) + (p_a - low_a) ** 2, 0)
    )
    return Interval(
        low=max(difference - below, -1.0),
        high=min(difference + above, 1.0),
        confidence=confidence,
        method=NEWCOMBE,
    )


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar: the discordant pairs split as Binomial(b + c, 1/2) under
    the null. With no discordant pair there is no evidence either way: p = 1."""
    discordant = a_only + b_only
    if discordant == 0:
        return 1.0
    # The binomial(n, 1/2) is symmetric, so scipy's two-sided binomtest p (the outcomes
    # no more likely than the one seen) is twice the smaller tail; the tail is the
    # binomial cdf, a few microseconds where binomtest takes a millisecond (a ranking
    # runs a test per pair; tests hold the two equal). scipy.special, not scipy.stats,
    # whose import costs a second (see stats.intervals).
    from scipy.special import bdtr

    return min(1.0, 2.0 * float(bdtr(min(a_only, b_only), discordant, 0.5)))


def sign_flip_test(
    differences: Sequence[float], settings: BootstrapSettings | None = None
) -> float:
    """Two-sided p of a sign-flip permutation test of "the mean difference is zero", over
    per-case mean differences (cases are the units). Under the null each case's
    difference is as likely to be d as -d, so every pattern of signs is equally likely.

    A zero difference is the same under either sign and is left out. With at most
    `SIGN_FLIP_EXACT_MAX` non-zero differences every sign pattern is enumerated (exact);
    otherwise `settings.n_resamples` random patterns from `settings.seed` (scipy's
    Monte Carlo p, which counts the observed pattern, so p is never 0)."""
    nonzero = [float(d) for d in differences if d != 0]
    if len(nonzero) < 2:
        # Both signs of one difference are as extreme as it (scipy needs two values).
        return 1.0
    import numpy as np

    data = np.asarray(nonzero)
    if len(nonzero) > SIGN_FLIP_EXACT_MAX:
        return _monte_carlo_sign_flip(data, settings or BootstrapSettings())
    from scipy.stats import permutation_test  # see stats.intervals

    # n_resamples of at least 2^n makes scipy enumerate every sign pattern.
    result = permutation_test(
        (data,), mean_of, permutation_type="samples", vectorized=True,
        n_resamples=2 ** len(nonzero), alternative="two-sided",
    )  # fmt: skip
    return min(1.0, float(result.pvalue))


def _monte_carlo_sign_flip(data: Any, settings: BootstrapSettings) -> float:
    """scipy's `monte_carlo_test` p for random sign patterns, computed as it computes it
    (the same draws from `settings.seed`, the mean of each, the same count with its
    relative tolerance, + 1 over n_resamples + 1 each side, twice the smaller side): its
    checks and broadcasting took 0.5 ms a call, twice the test itself, and a ranking of
    K models runs K(K-1)/2 of them (tests/analysis/test_stats_paired.py holds the two
    equal). Random sign patterns are drawn directly (scipy's permutation_test draws
    them by indexing, several times slower)."""
    import numpy as np

    rng = np.random.default_rng(settings.seed)
    n_resamples = settings.n_resamples
    observed = mean_of(data)
    signs = rng.choice([-1.0, 1.0], size=(n_resamples, len(data)))
    null = mean_of(signs * np.abs(data))
    # The relative tolerance scipy allows for values equal in theory but not in floats.
    gamma = abs(np.finfo(float).eps * 100 * observed)
    below = (np.count_nonzero(null <= observed + gamma) + 1.0) / (n_resamples + 1.0)
    above = (np.count_nonzero(null >= observed - gamma) + 1.0) / (n_resamples + 1.0)
    return min(1.0, max(0.0, float(min(below, above) * 2)))


def paired_verdict(interval: Interval, p: float | None, alpha: float) -> Verdict:
    """The side the interval on B - A favours when it excludes zero and the test (p; None
    when the interval alone decides) rejects at the same alpha, else "no winner". The
    one rule `compare`, `gate` and every view of a comparison follow."""
    favoured: Verdict = "no winner"
    if interval.low > 0:
        favoured = "B"
    elif interval.high < 0:
        favoured = "A"
    if p is not None and p >= alpha:
        return "no winner"
    return favoured


# Records, or their sheet on the compared scorer (`stats.sheet`).
Scored = Sequence[TraceRecord] | ScoreSheet


def _sheet(side: Scored, scorer: str) -> ScoreSheet:
    return side if isinstance(side, ScoreSheet) else ScoreSheet.of(side, scorer)


def _keyed(sheet: ScoreSheet, label: str) -> dict[Key, int]:
    """Each sample's position, by (id, repeat)."""
    keyed: dict[Key, int] = {}
    for position, key in enumerate(zip(sheet.ids, sheet.repeats, strict=True)):
        if key in keyed:
            raise NotComparable(f"{label} has sample {key[0]!r} (repeat {key[1]}) twice")
        keyed[key] = position
    return keyed


def _examples(keys: set[Key]) -> str:
    ids = sorted(k[0] if k[1] == 0 else f"{k[0]}#{k[1]}" for k in keys)
    more = f", ... ({len(ids) - EXAMPLES} more)" if len(ids) > EXAMPLES else ""
    return ", ".join(ids[:EXAMPLES]) + more


def pair_up(
    side_a: ScoreSheet,
    side_b: ScoreSheet,
    labels: tuple[str, str] = ("A", "B"),
) -> list[int]:
    """Where each of A's samples is in B, in A's order; NotComparable unless both sides
    hold the same samples."""
    a = _keyed(side_a, labels[0])
    b = _keyed(side_b, labels[1])
    if a.keys() != b.keys():
        only_a, only_b = set(a) - set(b), set(b) - set(a)
        parts = []
        for side, label, missing in (("A", labels[0], only_a), ("B", labels[1], only_b)):
            detail = f" ({_examples(missing)})" if missing else ""
            parts.append(f"{len(missing)} only in {side} [{label}]{detail}")
        raise NotComparable(
            "the result sets hold different samples, so they cannot be paired: "
            + "; ".join(parts)
            + f". A paired comparison needs the same sample ids on both sides "
            f"({len(set(a) & set(b))} are shared)."
        )
    if not a:
        raise NotComparable("both result sets are empty: nothing to compare")
    return [b[k] for k in a]


@dataclass(frozen=True)
class PairedSamples:
    """Two result sets joined on (sample id, repeat), in A's order: each pair's value
    (the score, an unscored sample at 0) and pass/fail on each side, and the pairs of
    each case (one group per sample id; a single pair each without repeats)."""

    values_a: list[float]
    values_b: list[float]
    pass_a: list[bool]
    pass_b: list[bool]
    cases: list[list[int]]
    unscored_a: int
    unscored_b: int
    # The mean over each side's scored pairs only (`scored_mean`), as a run's summary.
    scored_mean_a: float | None = None
    scored_mean_b: float | None = None

    @property
    def n(self) -> int:
        return len(self.values_a)

    # Computed once (a ranking asks each pair's several times): the fields never change.
    @cached_property
    def clustered(self) -> bool:
        return is_clustered(self.cases)

    @cached_property
    def binary(self) -> bool:
        """Pass/fail scores (every value 0 or 1) without repeats: Newcombe and McNemar."""
        return not self.clustered and {*self.values_a, *self.values_b} <= {0.0, 1.0}

    # Counted by map over the pass/fail lists, with no Python loop (for bools, x > y is
    # x and not y).
    @cached_property
    def a_only(self) -> int:
        return _count(operator.gt, self.pass_a, self.pass_b)

    @cached_property
    def b_only(self) -> int:
        return _count(operator.lt, self.pass_a, self.pass_b)

    @cached_property
    def both_pass(self) -> int:
        return _count(operator.and_, self.pass_a, self.pass_b)

    def case_differences(self) -> list[list[float]]:
        """B - A of each pair, grouped by case."""
        return [[self.values_b[i] - self.values_a[i] for i in case] for case in self.cases]

    @cached_property
    def case_means(self) -> list[float]:
        """Each case's mean difference B - A, in the order of `cases`: what the sign-flip
        test and a ranking read. Without repeats a case's one pair's difference (its
        mean, exactly), without the lists of `case_differences`."""
        values_a, values_b = self.values_a, self.values_b
        if not self.clustered:
            return [values_b[i] - values_a[i] for (i,) in self.cases]
        return [math.fsum(d) / len(d) for d in self.case_differences()]


def _count(test: Callable[[bool, bool], bool], a: Sequence[bool], b: Sequence[bool]) -> int:
    """How many pairs (a[i], b[i]) pass `test`."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} outcomes on one side and {len(b)} on the other")
    return sum(map(test, a, b))


def paired_samples(
    records_a: Scored,
    records_b: Scored,
    scorer: str,
    *,
    labels: tuple[str, str] = ("A", "B"),
    threshold: float = DEFAULT_THRESHOLD,
) -> PairedSamples:
    """Join two result sets on (sample id, repeat); NotComparable unless both hold the
    same samples."""
    sheet_a, sheet_b = _sheet(records_a, scorer), _sheet(records_b, scorer)
    in_b = pair_up(sheet_a, sheet_b, labels)
    scores_a = list(sheet_a.scores)
    scores_b = [sheet_b.scores[i] for i in in_b]
    # NaN (unscored) fails every threshold and counts 0 (as TraceRecord.passes and .value).
    return PairedSamples(
        values_a=[0.0 if s != s else s for s in scores_a],
        values_b=[0.0 if s != s else s for s in scores_b],
        pass_a=[s >= threshold for s in scores_a],
        pass_b=[s >= threshold for s in scores_b],
        cases=_cases(sheet_a.ids),
        unscored_a=sum(s != s for s in scores_a),
        unscored_b=sum(s != s for s in scores_b),
        scored_mean_a=scored_mean(scores_a),
        scored_mean_b=scored_mean(scores_b),
    )


def _cases(ids: Sequence[str]) -> list[list[int]]:
    """The positions of each sample id, ids in first-seen order: a position each where
    the ids are distinct (no repeats), the common case, found without grouping."""
    if len(set(ids)) == len(ids):
        return [[i] for i in range(len(ids))]
    return group_by(range(len(ids)), ids.__getitem__)


@dataclass(frozen=True)
class PairedTest:
    """The paired test of "no difference" (`MCNEMAR`, `SIGN_FLIP`, `CLUSTER_SIGN_FLIP`),
    its two-sided p, and the side its statistic leans to: "B" (B - A above 0), "A", or
    None when it leans to neither (no discordant pair, a mean difference of 0)."""

    test: str
    p_value: float
    leans: Literal["A", "B"] | None


def paired_test(samples: PairedSamples, settings: BootstrapSettings | None = None) -> PairedTest:
    """The test `compare` names a winner with: exact McNemar on pass/fail pairs without
    repeats, else the sign-flip test over each case's mean difference."""
    if samples.binary:
        a_only, b_only = samples.a_only, samples.b_only
        statistic = float(b_only - a_only)
        test, p = MCNEMAR, mcnemar_exact(a_only, b_only)
    else:
        # Each case's mean difference (its one pair's difference without repeats).
        means = samples.case_means
        statistic = math.fsum(means)
        test = CLUSTER_SIGN_FLIP if samples.clustered else SIGN_FLIP
        p = sign_flip_test(means, settings)
    leans: Literal["A", "B"] | None = None
    if statistic > 0:
        leans = "B"
    elif statistic < 0:
        leans = "A"
    return PairedTest(test=test, p_value=p, leans=leans)


def paired_difference(
    samples: PairedSamples,
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
) -> Estimate:
    """The mean difference B - A with its paired interval: Newcombe's for pass/fail pairs
    without repeats, else the (cluster) interval of the per-case mean differences, with a
    warning where no method is known to cover."""
    n = samples.n
    if samples.binary:
        a_only, b_only, both_pass = samples.a_only, samples.b_only, samples.both_pass
        return Estimate(
            value=(b_only - a_only) / n,
            n=n,
            interval=newcombe_paired_interval(
                both_pass, a_only, b_only, n - both_pass - a_only - b_only, confidence
            ),
        )
    per_case = samples.case_differences()
    difference = cluster_mean_estimate(
        per_case, confidence, bounds=(-1.0, 1.0), method=method, settings=settings,
        choose=False,
    )  # fmt: skip
    assert difference.interval is not None
    # Few pairs or few non-zero differences: no method here is known to cover.
    warning = paired_warning(samples.case_means)
    return replace(difference, interval=replace(difference.interval, warning=warning))


def compare(
    records_a: Scored,
    records_b: Scored,
    scorer: str,
    *,
    labels: tuple[str, str] = ("A", "B"),
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
    notes: Sequence[str] = (),
) -> PairedComparison:
    samples = paired_samples(records_a, records_b, scorer, labels=labels, threshold=threshold)
    n = samples.n
    values_a, values_b = samples.values_a, samples.values_b
    pass_a, pass_b = samples.pass_a, samples.pass_b
    both_pass, a_only, b_only = samples.both_pass, samples.a_only, samples.b_only
    cases = samples.cases
    clustered = samples.clustered
    binary = samples.binary
    alpha = 1 - confidence
    # McNemar's p where pairs are independent (no repeats): the test for pass/fail
    # pairs, a figure beside the sign-flip test for graded ones.
    mcnemar = None if clustered else mcnemar_exact(a_only, b_only)
    difference = paired_difference(samples, confidence, method=method, settings=settings)
    assert difference.interval is not None  # n >= 1 was checked by pair_up
    tested = paired_test(samples, settings)
    test, p = tested.test, tested.p_value
    verdict = paired_verdict(difference.interval, p, alpha)
    agreement = _test_agreement_note(
        paired_verdict(difference.interval, None, alpha), difference.interval.method,
        TEST_LABELS[test], p, alpha,
    )  # fmt: skip
    if mcnemar is not None and not binary:
        agreement += _agreement_note(verdict, mcnemar, confidence)
    all_notes = list(notes) + agreement
    if clustered:
        all_notes.append(
            f"{n} pairs of {len(cases)} cases (repeats): the interval and the sign-flip "
            "test take cases as units (each case's mean difference), as a case's repeats "
            "are not independent"
        )

    mde, mde_method = comparison_mde(
        binary=binary,
        discordant=a_only + b_only,
        case_differences=samples.case_differences(),
        confidence=confidence,
    )

    def rate(passes: list[bool]) -> Estimate:
        return cluster_proportion(
            [[passes[i] for i in case] for case in cases], confidence, method, settings
        )

    return PairedComparison(
        scorer=scorer,
        label_a=labels[0],
        label_b=labels[1],
        n=n,
        threshold=threshold,
        confidence=confidence,
        pass_rate_a=rate(pass_a),
        pass_rate_b=rate(pass_b),
        mean_a=sum(values_a) / n,
        mean_b=sum(values_b) / n,
        difference=difference,
        both_pass=both_pass,
        both_fail=n - both_pass - a_only - b_only,
        a_only=a_only,
        b_only=b_only,
        mcnemar_p=mcnemar,
        test=test,
        p_value=p,
        verdict=verdict,
        unscored_a=samples.unscored_a,
        unscored_b=samples.unscored_b,
        notes=tuple(all_notes),
        cases=len(cases),
        mde=mde,
        mde_method=mde_method,
        scored_mean_a=samples.scored_mean_a,
        scored_mean_b=samples.scored_mean_b,
    )


def _test_agreement_note(
    favoured: Verdict, interval_method: str, test: str, p: float, alpha: float
) -> list[str]:
    """Where a winner needs both the interval and the test, one line when they disagree."""
    if favoured != "no winner" and p >= alpha:
        return [
            f"the {interval_method} interval excludes zero but the {test} does not "
            f"reject (p = {p:.4g} >= {alpha:.4g}), so no winner is named"
        ]
    if favoured == "no winner" and p < alpha:
        return [
            f"the {test} rejects (p = {p:.4g}) but the {interval_method} interval "
            "contains zero, so no winner is named"
        ]
    return []


def _agreement_note(verdict: Verdict, p: float, confidence: float) -> list[str]:
    """McNemar sees only pass/fail, the verdict the mean score: when the two disagree the
    reader should know rather than trust one silently."""
    alpha = 1 - confidence
    if verdict != "no winner" and p >= alpha:
        return [
            f"the exact McNemar test does not confirm the verdict at this level "
            f"(p = {p:.4g} >= {alpha:.4g}): the difference lies in partial scores rather "
            "than pass/fail"
        ]
    if verdict == "no winner" and p < alpha:
        return [
            f"the exact McNemar test finds a pass/fail difference (p = {p:.4g}) that the "
            "mean score difference does not show"
        ]
    return []


def _hash(manifest: Manifest, name: str, scorer: str) -> str | None:
    if name == "dataset hash":
        return manifest.dataset.hash
    try:
        return manifest.scorer(scorer).hash
    except KeyError:
        return None


def check_comparable(
    manifest_a: Manifest,
    manifest_b: Manifest,
    scorer: str,
    *,
    force: bool = False,
    labels: tuple[str, str] = ("A", "B"),
) -> list[str]:
    """Refuse runs whose scorer (this one: the others may differ) or dataset differ: their
    score differences would mix the models' difference with the scorer's or the data's.
    With `force`, return the same findings as notes to print next to the result."""
    problems = []
    for name in (f"scorer {scorer!r} hash", "dataset hash"):
        a, b = _hash(manifest_a, name, scorer), _hash(manifest_b, name, scorer)
        if a is None or b is None:
            missing = labels[0] if a is None else labels[1]
            problems.append(f"{missing} has no scorer {scorer!r}")
        elif a != b:
            problems.append(
                f"{name} differs: {labels[0]} has {str(a)[:12]}, {labels[1]} has {str(b)[:12]}"
            )
    if problems and not force:
        raise NotComparable(
            "refusing to compare: "
            + "; ".join(problems)
            + ". Scores from different scorers or datasets do not measure the same thing "
            "(use --force to compare anyway)."
        )
    return [f"compared despite a mismatch (forced): {p}" for p in problems]
