"""Paired comparison of two result sets (two models, or two runs) on the same samples.

Pairs are joined on (sample id, repeat). Each pair contributes a binary outcome per
side (pass = scored and score >= threshold) to an exact McNemar test, and a score
difference B - A (an unscored sample scores 0, as it fails the pass rate) to an interval
on the mean difference. The verdict follows the interval: the side it favours when it
excludes zero, else "no winner".

Pass/fail scores (every score 0 or 1) without repeats take Newcombe's hybrid score
interval for a difference of paired proportions (Newcombe 1998, "Improved confidence
intervals for the difference between binomial proportions based on paired data",
Statistics in Medicine 17, method 10), whose coverage is known where the bootstrap's is
not (with few discordant pairs the bootstrap named a winner twice as often as its level
allows). Even it can exclude zero where the exact McNemar test does not reject, so for
these scores a winner is named only when both agree, and a one-line note says when they
do not. Other scores keep the paired bootstrap.

With repeats (a case with more than one pair) the paired bootstrap and the pass-rate
intervals resample cases, each case's pairs together (`stats.clusters`): the repeats of
a case are correlated, so resampling pairs would be too sure. McNemar still counts the
(case, repeat) pairs, which treats the repeats as independent; a note says so.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gradetrail_lib.analysis.stats.clusters import (
    cluster_mean_estimate,
    cluster_proportion,
    group_by,
    is_clustered,
)
from gradetrail_lib.analysis.stats.intervals import (
    BootstrapSettings,
    Estimate,
    Interval,
    wilson_bounds,
)
from gradetrail_lib.analysis.stats.power import DEFAULT_POWER, MdeMethod, comparison_mde
from gradetrail_lib.analysis.stats.run_stats import percent
from gradetrail_lib.errors import NotComparable
from gradetrail_lib.results.defaults import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD, ProportionMethod
from gradetrail_lib.results.sheet import ScoreSheet
from gradetrail_lib.results.trace import Manifest, TraceRecord

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
    # Mean score over all n pairs with unscored samples at 0: the two terms of `difference`.
    mean_a: float
    mean_b: float
    difference: Estimate  # mean of B - A over the pairs, with the paired interval
    both_pass: int
    both_fail: int
    a_only: int
    b_only: int
    mcnemar_p: float
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

    @property
    def clustered(self) -> bool:
        return self.cases is not None and self.cases < self.n

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
            "mean_score_a": self.mean_a,
            "mean_score_b": self.mean_b,
            "difference_b_minus_a": self.difference.to_json(),
            "counts": {
                "both_pass": self.both_pass,
                "both_fail": self.both_fail,
                "a_only": self.a_only,
                "b_only": self.b_only,
            },
            "mcnemar_p": self.mcnemar_p,
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
    from scipy.stats import binomtest  # scipy only where needed: see stats.intervals

    return float(binomtest(a_only, discordant, 0.5).pvalue)


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
    sheet_a, sheet_b = _sheet(records_a, scorer), _sheet(records_b, scorer)
    in_b = pair_up(sheet_a, sheet_b, labels)
    n = len(in_b)
    scores_a = list(sheet_a.scores)
    scores_b = [sheet_b.scores[i] for i in in_b]
    # NaN (unscored) fails every threshold and counts 0 (as TraceRecord.passes and .value).
    pass_a = [s >= threshold for s in scores_a]
    pass_b = [s >= threshold for s in scores_b]
    both_pass = sum(x and y for x, y in zip(pass_a, pass_b, strict=True))
    a_only = sum(x and not y for x, y in zip(pass_a, pass_b, strict=True))
    b_only = sum(y and not x for x, y in zip(pass_a, pass_b, strict=True))
    values_a = [0.0 if s != s else s for s in scores_a]
    values_b = [0.0 if s != s else s for s in scores_b]
    # One group per case (a single pair each without repeats: the unclustered figures).
    cases = group_by(range(n), lambda i: sheet_a.ids[i])
    p = mcnemar_exact(a_only, b_only)
    binary = not is_clustered(cases) and all(v in (0.0, 1.0) for v in (*values_a, *values_b))
    if binary:
        difference = Estimate(
            value=(b_only - a_only) / n,
            n=n,
            interval=newcombe_paired_interval(
                both_pass, a_only, b_only, n - both_pass - a_only - b_only, confidence
            ),
        )
    else:
        difference = cluster_mean_estimate(
            [[values_b[i] - values_a[i] for i in case] for case in cases],
            confidence, bounds=(-1.0, 1.0), method=method, settings=settings,
        )  # fmt: skip
    assert difference.interval is not None  # n >= 1 was checked by pair_up
    favoured: Verdict = "no winner"
    if difference.interval.low > 0:
        favoured = "B"
    elif difference.interval.high < 0:
        favoured = "A"
    alpha = 1 - confidence
    if binary:
        # Pass/fail: the interval and the exact test must agree to name a winner.
        verdict: Verdict = favoured if p < alpha else "no winner"
        agreement = _binary_agreement_note(favoured, p, alpha)
    else:
        verdict = favoured
        agreement = _agreement_note(verdict, p, confidence)
    all_notes = list(notes) + agreement
    if is_clustered(cases):
        all_notes.append(
            f"{n} pairs of {len(cases)} cases (repeats): the intervals resample cases; "
            "McNemar counts every (case, repeat) pair as independent, so its p may be "
            "too small"
        )

    mde, mde_method = comparison_mde(
        binary=binary,
        discordant=a_only + b_only,
        case_differences=[[values_b[i] - values_a[i] for i in case] for case in cases],
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
        mcnemar_p=p,
        verdict=verdict,
        unscored_a=sum(s != s for s in scores_a),
        unscored_b=sum(s != s for s in scores_b),
        notes=tuple(all_notes),
        cases=len(cases),
        mde=mde,
        mde_method=mde_method,
    )


def _binary_agreement_note(favoured: Verdict, p: float, alpha: float) -> list[str]:
    """For pass/fail scores a winner needs both the interval and the exact test."""
    if favoured != "no winner" and p >= alpha:
        return [
            f"the {NEWCOMBE} interval excludes zero but the exact McNemar test does not "
            f"reject (p = {p:.4g} >= {alpha:.4g}), so no winner is named"
        ]
    if favoured == "no winner" and p < alpha:
        return [
            f"the exact McNemar test rejects (p = {p:.4g}) but the {NEWCOMBE} interval "
            "contains zero, so no winner is named"
        ]
    return []


def _agreement_note(verdict: Verdict, p: float, confidence: float) -> list[str]:
    """The bootstrap can be optimistic at small n and McNemar sees only pass/fail, so
    when the two disagree the reader should know rather than trust one silently."""
    alpha = 1 - confidence
    if verdict != "no winner" and p >= alpha:
        return [
            f"the exact McNemar test does not confirm the verdict at this level "
            f"(p = {p:.4g} >= {alpha:.4g}); the bootstrap interval may be optimistic at "
            "this n, or the difference lies in partial scores rather than pass/fail"
        ]
    if verdict == "no winner" and p < alpha:
        return [
            f"the exact McNemar test finds a pass/fail difference (p = {p:.4g}) that the "
            "interval on the mean score difference does not"
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
