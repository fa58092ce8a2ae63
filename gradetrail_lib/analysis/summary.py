"""Run totals from the trace records: counts per outcome, each scorer's figures, and the
calls of the target and of the judges apart (tokens, cost paid and reused, cache hits)."""

from collections.abc import Sequence
from dataclasses import dataclass

from gradetrail_lib.analysis.stats.repeats import (
    case_outcomes,
    describe_at_k,
    max_trials,
    pass_at_k_points,
    repeat_stats,
)
from gradetrail_lib.analysis.stats.run_stats import describe, scorer_estimates
from gradetrail_lib.providers.pricing import format_usd
from gradetrail_lib.results.defaults import DEFAULT_THRESHOLD
from gradetrail_lib.results.totals import RunTotals, Totalled, totals_of
from gradetrail_lib.results.trace import CallTotals, ScorerFigures


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
    totals: RunTotals, name: str, kind: str, threshold: float = DEFAULT_THRESHOLD
) -> ScorerFigures:
    scores = totals.scores(name)
    pass_at, pass_hat = pass_at_k_points(totals, name, threshold)
    return ScorerFigures(
        type=kind,
        n=totals.samples,
        scored=len(scores),
        errors=totals.errors[name],
        mean=sum(scores) / len(scores) if scores else None,
        passed=totals.passed(name, threshold),
        pass_at_k=pass_at,
        pass_hat_k=pass_hat,
    )


def summarize(records: Totalled, scorers: Sequence[tuple[str, str]]) -> RunSummary:
    """`scorers` are (name, type) pairs in spec order."""
    totals = totals_of(records, [name for name, _ in scorers])
    return RunSummary(
        samples=totals.samples,
        outcomes=totals.outcome_counts(),
        failure_modes=totals.failure_mode_counts(),
        scorers={name: scorer_figures(totals, name, kind) for name, kind in scorers},
        target=totals.target.totals(),
        judge=totals.judge.totals(),
    )


LOCAL_COST = "no price (local model)"


def format_cost(totals: CallTotals, *, local: bool = False) -> str:
    """`$0.0000 paid; $0.98 reused from cache` (step by step: what this run paid apart).
    `local`: the calls were a local model's, which has no price (its $0 would read as
    free, its unknown as a price list's gap)."""
    if local:
        return LOCAL_COST
    reused = totals.reused_usd
    if reused is None:
        return "unknown (a price is missing from the price list)"
    paid = format_usd(totals.cost_paid_usd)
    if not totals.shared:
        return f"{paid} paid; {format_usd(reused)} reused from cache"
    whence = "by shared requests" if not totals.cache_hits else "from cache and by shared requests"
    return f"{paid} paid; {format_usd(reused)} reused ({whence})"


def format_savings(totals: CallTotals) -> str | None:
    """What batch and prompt caching saved this run's own calls, or None when no call went
    by batch or touched a prompt cache."""
    parts = []
    if totals.batch_calls:
        parts.append(
            f"batch saved {format_usd(totals.batch_saved_usd)} "
            f"({totals.batch_calls} calls by batch)"
        )
    if totals.cached_input_tokens or totals.cache_write_input_tokens:
        parts.append(
            f"prompt caching saved {format_usd(totals.cache_saved_usd)} "
            f"({totals.cached_input_tokens} tokens read from the cache, "
            f"{totals.cache_write_input_tokens} written)"
        )
    return "; ".join(parts) or None


def format_tokens(totals: CallTotals) -> str:
    """`12 in / 30 out`, and the reasoning (thinking) tokens among the output apart."""
    reasoning = f" ({totals.reasoning_tokens} reasoning)" if totals.reasoning_tokens else ""
    return f"{totals.input_tokens} in / {totals.output_tokens} out{reasoning}"


def format_summary(records: Totalled, summary: RunSummary, wall_s: float) -> str:
    """What `gradetrail run` prints: every scorer's mean and pass rate with interval and n;
    with repeats, then each scorer's pass@1, pass@n and pass^n over cases."""
    counts = ", ".join(f"{k}={v}" for k, v in summary.outcomes.items())
    lines = [f"Samples: {summary.samples} ({counts})"]
    totals = totals_of(records, list(summary.scorers))
    cases = case_outcomes(totals, summary.primary) if totals.clustered() else []
    trials = max_trials(cases)
    if trials > 1:
        lines.append(
            f"Repeats: {trials} per case, {len(cases)} cases; intervals resample cases. "
            "pass@k: the chance one of k repeats passes (Chen et al. 2021's unbiased "
            "estimator); pass^k: that all k pass"
        )
    for index, (name, figures) in enumerate(summary.scorers.items()):
        stats = scorer_estimates(totals, name, threshold=DEFAULT_THRESHOLD)
        primary = " (primary)" if index == 0 else ""
        unscored = f"; {stats.unscored} unscored count as failures" if stats.unscored else ""
        lines.append(
            f"Scorer {name} [{figures.type}]{primary}: mean {describe(stats.mean_score)}; "
            f"pass rate (score >= {DEFAULT_THRESHOLD:g}) {describe(stats.pass_rate)}{unscored}"
        )
        if trials > 1:
            ks = (1, trials)
            at_k = repeat_stats(totals, name, ks=ks, threshold=DEFAULT_THRESHOLD)
            lines.append(f"  {describe_at_k(at_k, ks)}")
    target, judge = summary.target, summary.judge
    # Per model call: one a sample, or one each step of an agent's case.
    target_calls = totals.target_calls
    lines += [
        f"Tokens: {format_tokens(target)}",
        f"Cost: {format_cost(target, local=totals.target.local)}",
    ]
    saved = format_savings(target)
    if saved is not None and not totals.target.local:
        lines.append(f"Saved: {saved}")
    lines.append(f"Cache hits: {target.cache_hits}/{target_calls}")
    if target.shared:
        lines.append(
            f"Shared: {target.shared}/{target_calls} reused the answer of an identical request "
            f"sent in this run (each request is sent once: {target.calls} sent)"
        )
    if judge.calls or judge.cache_hits or judge.errors:
        shared = f", {judge.shared} shared" if judge.shared else ""
        lines.append(
            f"Judge: {judge.calls} calls, {judge.cache_hits} cache hits{shared}, "
            f"{judge.errors} errors; tokens {format_tokens(judge)}; "
            f"cost {format_cost(judge, local=totals.judge.local)}"
        )
        judge_saved = format_savings(judge)
        if judge_saved is not None and not totals.judge.local:
            lines.append(f"Judge saved: {judge_saved}")
    lines.append(f"Wall time: {wall_s:.2f}s")
    return "\n".join(lines)
