"""Figures for a run with repeats: per-case pass rates, pass@k and pass^k.

A case (sample id) run n times with c passes (pass = scored and score >= threshold; an
unscored repeat fails, as everywhere) has

* pass@k = 1 - C(n-c, k) / C(n, k): the chance that at least one of k repeats drawn
  without replacement from its n passes. This is the unbiased estimator of Chen et al.
  (2021, "Evaluating Large Language Models Trained on Code", eq. 1) of the chance that
  k independent attempts include a pass;
* pass^k = C(c, k) / C(n, k): the chance that all k drawn repeats pass, the unbiased
  estimator of "pass^k: all k trials pass" (Yao et al. 2024, tau-bench), a measure of
  reliability rather than of reach;

and both equal c/n, its pass rate, at k = 1. A run's figure is the mean over cases, and
its interval resamples cases (the per-case values are the cluster units; see
`stats.clusters`), with `mean_interval`'s rules: a bootstrap of the per-case values, the
proportion's interval over cases when each is 0 or 1, the bound when all are equal.

A case with fewer than k repeats has no pass@k estimate: it is left out of that k's
mean, and `skipped` says how many were (every case has n repeats in a complete run, so
this happens only for records gathered from runs of different repeats). A k that no
case reaches has no figure (value None, n = 0). k below 1 is an error.

The point values need no scipy (`pass_at_k_points`, for the manifest); the intervals do.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gradetrail_lib.analysis.stats.clusters import CLUSTER
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE, ProportionMethod
from gradetrail_lib.analysis.stats.intervals import BootstrapSettings, Estimate, mean_interval
from gradetrail_lib.results.totals import Totalled, totals_of
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD


@dataclass(frozen=True)
class CaseOutcome:
    """One case's repeats: how many there were, how many passed; its id when the totals
    were taken from records in memory (a streamed run keeps no ids)."""

    id: str | None
    trials: int
    passes: int

    @property
    def rate(self) -> float:
        return self.passes / self.trials


def _check(n: int, c: int, k: int) -> None:
    if k < 1 or n < 1 or not 0 <= c <= n:
        raise ValueError(f"need k >= 1, n >= 1 and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"k={k} exceeds the n={n} trials: no unbiased estimate")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al.'s unbiased pass@k for one case: 1 - C(n-c, k) / C(n, k), exact in
    integers (math.comb) before the one division."""
    _check(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one case, all k pass: C(c, k) / C(n, k)."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def case_outcomes(
    records: Totalled, scorer: str, threshold: float = DEFAULT_THRESHOLD
) -> list[CaseOutcome]:
    """Per case (first-seen order): its records and those passing `scorer`."""
    totals = totals_of(records, [scorer])
    ids = totals.case_ids
    return [
        CaseOutcome(ids[i] if ids is not None else None, len(group), sum(group))
        for i, group in enumerate(totals.case_passes(scorer, threshold))
    ]


def has_repeats(records: Totalled) -> bool:
    """Whether some case has more than one record (then intervals resample cases)."""
    return totals_of(records, []).clustered()


def max_trials(cases: Sequence[CaseOutcome]) -> int:
    return max((c.trials for c in cases), default=0)


def pass_at_k_points(
    records: Totalled, scorer: str, threshold: float = DEFAULT_THRESHOLD
) -> tuple[dict[int, float], dict[int, float]]:
    """pass@k and pass^k for k = 1..n (the most repeats of a case), each the mean over
    the cases with at least k repeats; both empty when no case has two records."""
    totals = totals_of(records, [scorer])
    if not totals.clustered():
        return {}, {}
    cases = case_outcomes(totals, scorer, threshold)
    n = max_trials(cases)
    if n < 2:
        return {}, {}
    at: dict[int, float] = {}
    hat: dict[int, float] = {}
    for k in range(1, n + 1):
        usable = [c for c in cases if c.trials >= k]
        at[k] = math.fsum(pass_at_k(c.trials, c.passes, k) for c in usable) / len(usable)
        hat[k] = math.fsum(pass_hat_k(c.trials, c.passes, k) for c in usable) / len(usable)
    return at, hat


@dataclass(frozen=True)
class AtK:
    """pass@k and pass^k at one k, each over `pass_at_k.n` cases; `skipped` cases had
    fewer than k repeats."""

    k: int
    pass_at_k: Estimate
    pass_hat_k: Estimate
    skipped: int

    def to_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "pass_at_k": self.pass_at_k.to_json(),
            "pass_hat_k": self.pass_hat_k.to_json(),
            "skipped_cases": self.skipped,
        }


@dataclass(frozen=True)
class RepeatStats:
    scorer: str
    threshold: float
    cases: int
    records: int
    trials: int  # the most repeats of any case (n)
    # The mean of the per-case pass rates (pass@1), over cases.
    case_pass_rate: Estimate
    at_k: list[AtK]
    case_rates: list[CaseOutcome]

    def get(self, k: int) -> AtK:
        for row in self.at_k:
            if row.k == k:
                return row
        raise KeyError(f"no figures for k={k} (have {[r.k for r in self.at_k]})")

    def to_json(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "threshold": self.threshold,
            "cases": self.cases,
            "records": self.records,
            "trials": self.trials,
            "case_pass_rate": self.case_pass_rate.to_json(),
            "at_k": [row.to_json() for row in self.at_k],
        }


def _over_cases(
    values: Sequence[float],
    confidence: float,
    method: ProportionMethod,
    settings: BootstrapSettings | None,
) -> Estimate:
    """The mean of per-case values, n = cases, its interval over cases."""
    if not values:
        return Estimate(None, 0, None)
    inner = mean_interval(values, confidence, method=method, settings=settings)
    interval = replace(inner, method=CLUSTER + inner.method)
    return Estimate(math.fsum(values) / len(values), len(values), interval)


def default_ks(trials: int) -> list[int]:
    """Every k from 1 to n up to n = 10; above, 1, 2, 5, 10 and n."""
    if trials <= 10:
        return list(range(1, trials + 1))
    return sorted({1, 2, 5, 10, trials})


def repeat_stats(
    records: Totalled,
    scorer: str,
    *,
    ks: Sequence[int] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
) -> RepeatStats:
    """Per-case pass rates, and pass@k and pass^k at each k of `ks` (default
    `default_ks(n)`), each with an interval over cases."""
    totals = totals_of(records, [scorer])
    cases = case_outcomes(totals, scorer, threshold)
    trials = max_trials(cases)
    chosen = default_ks(trials) if ks is None else sorted(set(ks))
    if any(k < 1 for k in chosen):
        raise ValueError(f"k must be at least 1, got {chosen}")
    rows = []
    for k in chosen:
        usable = [c for c in cases if c.trials >= k]
        at = [pass_at_k(c.trials, c.passes, k) for c in usable]
        hat = [pass_hat_k(c.trials, c.passes, k) for c in usable]
        rows.append(
            AtK(
                k,
                _over_cases(at, confidence, method, settings),
                _over_cases(hat, confidence, method, settings),
                len(cases) - len(usable),
            )
        )
    return RepeatStats(
        scorer=scorer,
        threshold=threshold,
        cases=len(cases),
        records=totals.samples,
        trials=trials,
        case_pass_rate=_over_cases([c.rate for c in cases], confidence, method, settings),
        at_k=rows,
        case_rates=cases,
    )


def describe_at_k(stats: RepeatStats, ks: Sequence[int], digits: int = 4) -> str:
    """`pass@1 0.6200 (95% CI ..., n=30 cases); pass@5 ...; pass^5 ...` (pass^1 is
    pass@1, so it is not repeated)."""
    from gradetrail_lib.analysis.stats.run_stats import describe

    parts = []
    for k in ks:
        row = stats.get(k)
        skipped = f", {row.skipped} cases with fewer repeats left out" if row.skipped else ""
        parts.append(f"pass@{k} {describe(row.pass_at_k, digits, unit='cases')}{skipped}")
    for k in ks:
        if k > 1:
            row = stats.get(k)
            parts.append(f"pass^{k} {describe(row.pass_hat_k, digits, unit='cases')}")
    return "; ".join(parts)
