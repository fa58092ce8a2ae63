"""A run's summary: counts per outcome, each scorer's figures, and the calls of the target
and of the judges apart (tokens, cost paid and reused, cache hits).

It is the one source of these figures for every surface: `run` prints it, the manifest
stores it, and `compare`, `cost`, the report, the viewer and the Dagster assets read it
(from the manifest, `RunSummary.of`). So each figure has one definition:

* a sample's outcome is its primary scorer's (`TraceRecord.outcome`);
* a judge error is a sample a judge scorer gave no usable grade (its call failed, or its
  output had no grade: cut off at max_tokens, say), counted per judge scorer whether or
  not that scorer is the primary one (`ScorerFigures.judge_errors`);
* a scorer's mean is over its scored samples, its n those samples (`ScorerFigures.mean`,
  `.scored`); the pass rate's n is every sample, an unscored one failing;
* a local model's calls have no price: their cost is `LOCAL_COST` in text and null in
  JSON, never $0 (`CallTotals.local`).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gradetrail_lib.analysis.stats.repeats import (
    case_outcomes,
    describe_at_k,
    max_trials,
    pass_at_k_points,
    repeat_stats,
)
from gradetrail_lib.analysis.stats.run_stats import describe, scorer_estimates
from gradetrail_lib.providers.pricing import LOCAL_COST, format_usd
from gradetrail_lib.results.totals import RunTotals, Totalled, scored_mean, totals_of
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD, CallTotals, Manifest, ScorerFigures


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

    @property
    def answered(self) -> int:
        """Samples with an answer (the rest are provider errors): a judge's denominator."""
        return self.samples - self.outcomes.get("provider_error", 0)

    @property
    def judge_errors(self) -> dict[str, int]:
        """Per judge scorer (and any other that reported one), its judge errors."""
        return {
            name: f.judge_errors
            for name, f in self.scorers.items()
            if f.type == "judge" or f.judge_errors
        }

    @property
    def judge_error_count(self) -> int:
        """Judge errors over every judge scorer (a sample two judges failed counts twice)."""
        return sum(self.judge_errors.values())

    def to_json(self) -> dict[str, Any]:
        """The summary as `run --json` prints it: the manifest's figures (a local model's
        costs null, `local` true), with the judge errors per judge scorer beside them."""
        return {
            "samples": self.samples,
            "outcomes": self.outcomes,
            "outcomes_by": self.primary,
            "failure_modes": self.failure_modes,
            "scorers": {name: f.model_dump(mode="json") for name, f in self.scorers.items()},
            "judge_errors": self.judge_errors,
            "target": self.target.model_dump(mode="json"),
            "judge": self.judge.model_dump(mode="json"),
        }

    @classmethod
    def of(cls, manifest: Manifest) -> "RunSummary":
        """The summary a run stored in its manifest."""
        return cls(
            samples=manifest.samples,
            outcomes=dict(manifest.outcomes),
            failure_modes=dict(manifest.failure_modes),
            scorers=dict(manifest.scores),
            target=manifest.target,
            judge=manifest.judge,
        )


def scorer_figures(
    totals: RunTotals, name: str, kind: str, threshold: float = DEFAULT_THRESHOLD
) -> ScorerFigures:
    pass_at, pass_hat = pass_at_k_points(totals, name, threshold)
    scores = totals.scores(name)
    return ScorerFigures(
        type=kind,
        n=totals.samples,
        scored=len(scores),
        errors=totals.errors[name],
        judge_errors=totals.error_kinds[name]["judge_error"],
        mean=scored_mean(scores),
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


def format_cost(totals: CallTotals) -> str:
    """`$0.0000 paid; $0.98 reused from cache` (step by step: what this run paid apart).
    A local model's calls have no price (`LOCAL_COST`: its $0 would read as free, its
    unknown as a price list's gap)."""
    if totals.local:
        return LOCAL_COST
    reused = totals.reused_usd
    if reused is None:
        return "unknown (a price is missing from the price list)"
    paid = format_usd(totals.cost_paid_usd)
    if not totals.shared:
        return f"{paid} paid; {format_usd(reused)} reused from cache"
    whence = "by shared requests" if not totals.cache_hits else "from cache and by shared requests"
    return f"{paid} paid; {format_usd(reused)} reused ({whence})"


def all_local(totals: Iterable[CallTotals]) -> bool:
    """Every role among `totals` that made a call ran a local model (and one did): there
    is no price to give, only `LOCAL_COST`."""
    used = [t for t in totals if t.calls or t.cache_hits or t.shared]
    return bool(used) and all(t.local for t in used)


def format_total_cost(totals: CallTotals) -> str:
    """Every answered call's cost, in one figure (a table's cell): `$0.012000`, `unknown`
    (a price missing), or `LOCAL_COST`."""
    return LOCAL_COST if totals.local else format_usd(totals.cost_usd)


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


def format_outcomes(summary: RunSummary) -> str:
    """`scored=29, provider_error=1, scorer_error=0, judge_error=0: outcomes by the primary
    scorer city`: a sample's outcome is its primary scorer's; the judge errors of every
    judge scorer are `format_judge_errors`'s."""
    counts = ", ".join(f"{k}={v}" for k, v in summary.outcomes.items())
    return f"{counts}: outcomes by the primary scorer {summary.primary}"


def format_judge_errors(summary: RunSummary) -> str | None:
    """`1 (judged 1)`: the judge errors, per judge scorer; None without a judge scorer."""
    per = summary.judge_errors
    if not per:
        return None
    return f"{summary.judge_error_count} ({', '.join(f'{k} {v}' for k, v in per.items())})"


def format_summary(records: Totalled, summary: RunSummary, wall_s: float) -> str:
    """What `gradetrail run` prints: every scorer's mean and pass rate with interval and n;
    with repeats, then each scorer's pass@1, pass@n and pass^n over cases."""
    lines = [f"Samples: {summary.samples} ({format_outcomes(summary)})"]
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
        judged = f" ({figures.judge_errors} judge errors)" if figures.judge_errors else ""
        unscored = (
            f"; {stats.unscored} unscored count as failures{judged}" if stats.unscored else ""
        )
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
        f"Cost: {format_cost(target)}",
    ]
    saved = format_savings(target)
    if saved is not None and not target.local:
        lines.append(f"Saved: {saved}")
    lines.append(f"Cache hits: {target.cache_hits}/{target_calls}")
    if target.shared:
        lines.append(
            f"Shared: {target.shared}/{target_calls} reused the answer of an identical request "
            f"sent in this run (each request is sent once: {target.calls} sent)"
        )
    if judge.calls or judge.cache_hits or judge.errors or summary.judge_error_count:
        shared = f", {judge.shared} shared" if judge.shared else ""
        failed = f"; {judge.errors} calls failed" if judge.errors else ""
        lines.append(
            f"Judge: {judge.calls} calls, {judge.cache_hits} cache hits{shared}, "
            f"{summary.judge_error_count} errors (no usable grade{failed}); "
            f"tokens {format_tokens(judge)}; cost {format_cost(judge)}"
        )
        judge_saved = format_savings(judge)
        if judge_saved is not None and not judge.local:
            lines.append(f"Judge saved: {judge_saved}")
    lines.append(f"Wall time: {wall_s:.2f}s")
    return "\n".join(lines)
