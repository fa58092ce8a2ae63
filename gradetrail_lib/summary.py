"""Run totals from the trace records: counts per outcome, each scorer's figures, and the
calls of the target and of the judges apart (tokens, cost paid and reused, cache hits)."""

from collections.abc import Sequence
from dataclasses import dataclass

from gradetrail_lib.call_totals import call_totals
from gradetrail_lib.pricing import format_usd
from gradetrail_lib.stats.clusters import repeated
from gradetrail_lib.stats.repeats import (
    case_outcomes,
    describe_at_k,
    max_trials,
    pass_at_k_points,
    repeat_stats,
)
from gradetrail_lib.stats.run_stats import (
    describe,
    failure_mode_counts,
    outcome_counts,
    scorer_estimates,
)
from gradetrail_lib.stats_defaults import DEFAULT_THRESHOLD
from gradetrail_lib.trace import CallTotals, ScorerFigures, TraceRecord


@dataclass(frozen=True)
class RunSummary:
    samples: int
    outcomes: dict[str, int]
    failure_modes: dict[str, int]
    # Per scorer, in spec order; the first is the primary one.
    scorers: dict[str, ScorerFigures]
    target: CallTotals
    judge: CallTotals

    @property
    def primary(self) -> str:
        return next(iter(self.scorers))

    @property
    def any_scored(self) -> bool:
        return any(f.scored for f in self.scorers.values())

    @property
    def cache_hits(self) -> int:
        return self.target.cache_hits


def scorer_figures(
    records: Sequence[TraceRecord], name: str, kind: str, threshold: float = DEFAULT_THRESHOLD
) -> ScorerFigures:
    scores = [s for r in records if (s := r.score_of(name)) is not None]
    pass_at, pass_hat = pass_at_k_points(records, name, threshold)
    return ScorerFigures(
        type=kind,
        n=len(records),
        scored=len(scores),
        errors=sum(r.error_of(name) is not None for r in records),
        mean=sum(scores) / len(scores) if scores else None,
        passed=sum(s >= threshold for s in scores),
        pass_at_k=pass_at,
        pass_hat_k=pass_hat,
    )


def summarize(records: Sequence[TraceRecord], scorers: Sequence[tuple[str, str]]) -> RunSummary:
    """`scorers` are (name, type) pairs in spec order."""
    return RunSummary(
        samples=len(records),
        outcomes=outcome_counts(records),
        failure_modes=failure_mode_counts(records),
        scorers={name: scorer_figures(records, name, kind) for name, kind in scorers},
        target=call_totals(records, "target"),
        judge=call_totals(records, "judge"),
    )


def format_cost(totals: CallTotals) -> str:
    """`$0.0000 paid; $0.98 reused from cache` (step by step: what this run paid apart)."""
    if totals.cost_usd is None:
        return "unknown (a price is missing from the price list)"
    reused = totals.cost_usd - (totals.cost_paid_usd or 0.0)
    return f"{format_usd(totals.cost_paid_usd)} paid; {format_usd(reused)} reused from cache"


def format_summary(records: Sequence[TraceRecord], summary: RunSummary, wall_s: float) -> str:
    """What `gradetrail run` prints: every scorer's mean and pass rate with interval and n;
    with repeats, then each scorer's pass@1, pass@n and pass^n over cases."""
    counts = ", ".join(f"{k}={v}" for k, v in summary.outcomes.items())
    lines = [f"Samples: {summary.samples} ({counts})"]
    # (Grouping 100,000 records into cases costs ~0.3 s: only when there are repeats.)
    cases = case_outcomes(records, summary.primary) if repeated(records) else []
    trials = max_trials(cases)
    if trials > 1:
        lines.append(
            f"Repeats: {trials} per case, {len(cases)} cases; intervals resample cases. "
            "pass@k: the chance one of k repeats passes (Chen et al. 2021's unbiased "
            "estimator); pass^k: that all k pass"
        )
    for index, (name, figures) in enumerate(summary.scorers.items()):
        stats = scorer_estimates(records, name, threshold=DEFAULT_THRESHOLD)
        primary = " (primary)" if index == 0 else ""
        unscored = f"; {stats.unscored} unscored count as failures" if stats.unscored else ""
        lines.append(
            f"Scorer {name} [{figures.type}]{primary}: mean {describe(stats.mean_score)}; "
            f"pass rate (score >= {DEFAULT_THRESHOLD:g}) {describe(stats.pass_rate)}{unscored}"
        )
        if trials > 1:
            ks = (1, trials)
            at_k = repeat_stats(records, name, ks=ks, threshold=DEFAULT_THRESHOLD)
            lines.append(f"  {describe_at_k(at_k, ks)}")
    target, judge = summary.target, summary.judge
    # Per model call: one a sample, or one each step of an agent's case.
    target_calls = sum(1 for r in records for c in r.calls if c.role == "target")
    lines += [
        f"Tokens: {target.input_tokens} in / {target.output_tokens} out",
        f"Cost: {format_cost(target)}",
        f"Cache hits: {target.cache_hits}/{target_calls}",
    ]
    if judge.calls or judge.cache_hits or judge.errors:
        lines.append(
            f"Judge: {judge.calls} calls, {judge.cache_hits} cache hits, {judge.errors} errors; "
            f"tokens {judge.input_tokens} in / {judge.output_tokens} out; "
            f"cost {format_cost(judge)}"
        )
    lines.append(f"Wall time: {wall_s:.2f}s")
    return "\n".join(lines)
