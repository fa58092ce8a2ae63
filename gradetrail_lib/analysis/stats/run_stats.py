"""The figures for one result set and one scorer: pass rate and mean score with
intervals, outcome and failure-mode counts, tokens, cost and latency percentiles.

How samples that were not scored count (provider or scorer error): they are failures
in the pass rate, whose n is every sample, and they are left out of the mean score,
whose n is the scored samples only; `unscored` reports how many there were, so
neither figure hides them.

When a case has more than one record (repeats), both intervals resample cases rather
than records (`stats.clusters`): the estimate is still over every record, its n the
records and `clusters` the cases. Without repeats the figures are the unclustered ones.
"""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gradetrail_lib.analysis.stats.clusters import cluster_mean_estimate, cluster_proportion
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE, ProportionMethod
from gradetrail_lib.analysis.stats.intervals import (
    BootstrapSettings,
    Estimate,
    mean_estimate,
    proportion,
)
from gradetrail_lib.results.totals import Totalled, totals_of
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD

LATENCY_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Latency:
    """Seconds per answered call. A cache hit carries the latency of the call that
    paid for it, so the figures describe the model, not how warm the cache was."""

    n: int
    p50: float | None
    p90: float | None
    p99: float | None

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "p50": self.p50, "p90": self.p90, "p99": self.p99}


@dataclass(frozen=True)
class RunStats:
    scorer: str
    samples: int
    outcomes: dict[str, int]
    failure_modes: dict[str, int]
    unscored: int
    truncated: int
    threshold: float
    pass_rate: Estimate
    mean_score: Estimate
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency: Latency
    cache_hits: int

    def to_json(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "samples": self.samples,
            "outcomes": self.outcomes,
            "failure_modes": self.failure_modes,
            "unscored": self.unscored,
            "truncated": self.truncated,
            "threshold": self.threshold,
            "pass_rate": self.pass_rate.to_json(),
            "mean_score": self.mean_score.to_json(),
            "tokens": {"input": self.input_tokens, "output": self.output_tokens},
            "cost_usd": self.cost_usd,
            "latency_s": self.latency.to_json(),
            "cache_hits": self.cache_hits,
        }


def latency_of(values: Sequence[float]) -> Latency:
    """Percentiles interpolated linearly between order statistics (numpy's default;
    the standard library's "inclusive" method, so a run summary needs no numpy)."""
    if not values:
        return Latency(0, None, None, None)
    if len(values) == 1:
        only = float(values[0])
        return Latency(1, only, only, only)
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    p50, p90, p99 = (float(cuts[p - 1]) for p in LATENCY_PERCENTILES)
    return Latency(len(values), p50, p90, p99)


@dataclass(frozen=True)
class ScorerEstimates:
    """One scorer's pass rate and mean score, each with its interval and n."""

    pass_rate: Estimate
    mean_score: Estimate
    unscored: int


def scorer_estimates(
    records: Totalled,
    scorer: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
) -> ScorerEstimates:
    totals = totals_of(records, [scorer])
    scores = totals.scores(scorer)
    unscored = totals.samples - len(scores)
    if totals.clustered():
        return ScorerEstimates(
            pass_rate=cluster_proportion(
                totals.case_passes(scorer, threshold), confidence, method, settings
            ),
            mean_score=cluster_mean_estimate(
                totals.case_scores(scorer), confidence, method=method, settings=settings
            ),
            unscored=unscored,
        )
    return ScorerEstimates(
        pass_rate=proportion(totals.passed(scorer, threshold), totals.samples, confidence, method),
        mean_score=mean_estimate(scores, confidence, method=method, settings=settings),
        unscored=unscored,
    )


def run_stats(
    records: Totalled,
    scorer: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
) -> RunStats:
    """The figures of `scorer` (a name the records' `scores` hold)."""
    totals = totals_of(records, [scorer])
    figures = scorer_estimates(
        totals, scorer, threshold=threshold, confidence=confidence, method=method,
        settings=settings,
    )  # fmt: skip
    target = totals.target.totals()
    return RunStats(
        scorer=scorer,
        samples=totals.samples,
        outcomes=totals.outcome_counts(),
        failure_modes=totals.failure_mode_counts(),
        unscored=figures.unscored,
        truncated=totals.truncated,
        threshold=threshold,
        pass_rate=figures.pass_rate,
        mean_score=figures.mean_score,
        input_tokens=target.input_tokens,
        output_tokens=target.output_tokens,
        cost_usd=target.cost_usd,
        latency=latency_of(totals.latencies),
        cache_hits=target.cache_hits,
    )


def describe(estimate: Estimate, digits: int = 4, *, unit: str = "") -> str:
    """`0.7500 (95% CI 0.4682-0.9111, wilson, n=12)`; k/n first for a proportion;
    `n=60, 12 cases` when clustered by case; `unit` names what n counts (`n=12 cases`);
    `; warning: ...` before the closing parenthesis when the interval has one."""
    n_text = estimate.n_text + (f" {unit}" if unit else "")
    if estimate.value is None or estimate.interval is None:
        return f"n/a ({n_text})"
    ci = estimate.interval
    head = f"{estimate.successes}/{estimate.n} = " if estimate.successes is not None else ""
    return (
        f"{head}{estimate.value:.{digits}f} ({percent(ci.confidence)} CI "
        f"{ci.low:.{digits}f}-{ci.high:.{digits}f}, {ci.method}, {n_text}"
        f"{estimate.warning_text})"
    )


def percent(confidence: float) -> str:
    """0.95 -> "95%", 0.975 -> "97.5%" (not rounded to a level the user did not ask for)."""
    return f"{confidence * 100:g}%"
