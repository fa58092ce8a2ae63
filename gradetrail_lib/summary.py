"""Run totals: counts per outcome, mean score, tokens, cost, cache hits."""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from gradetrail_lib.pricing import format_usd, sum_costs
from gradetrail_lib.records import RowLike, records


@dataclass(frozen=True)
class RunSummary:
    samples: int
    outcomes: dict[str, int]
    failure_modes: dict[str, int]
    scored: int
    mean_score: float | None
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    cache_hits: int

    @property
    def any_scored(self) -> bool:
        return self.scored > 0


OUTCOMES = ("scored", "provider_error", "scorer_error")


def summarize(rows: Sequence[RowLike]) -> RunSummary:
    """Counts and totals of a run, from ResultRows or the JSON rows of results.jsonl."""
    recs = records(rows)
    outcomes = Counter(r.outcome for r in recs)
    scores = [r.score for r in recs if r.scored and r.score is not None]
    answered = [r for r in recs if r.answered]
    return RunSummary(
        samples=len(recs),
        outcomes={k: outcomes.get(k, 0) for k in OUTCOMES},
        failure_modes=dict(sorted(Counter(r.failure_mode for r in recs if r.failure_mode).items())),
        scored=len(scores),
        mean_score=sum(scores) / len(scores) if scores else None,
        input_tokens=sum(r.input_tokens or 0 for r in answered),
        output_tokens=sum(r.output_tokens or 0 for r in answered),
        cost_usd=sum_costs([r.cost_usd for r in answered]),
        cache_hits=sum(r.cache_hit for r in recs),
    )


def format_summary(rows: Sequence[RowLike], wall_s: float) -> str:
    """The summary `gradetrail run` prints; the mean and pass rate carry interval and n."""
    from gradetrail_lib.stats import describe, run_stats  # here: stats imports this module

    stats = run_stats(rows)  # counts and totals included: no second summarize()
    counts = ", ".join(f"{k}={v}" for k, v in stats.outcomes.items())
    unscored = f"; {stats.unscored} unscored count as failures" if stats.unscored else ""
    return "\n".join(
        [
            f"Samples: {stats.samples} ({counts})",
            f"Mean score: {describe(stats.mean_score)}",
            f"Pass rate (score >= {stats.threshold:g}): {describe(stats.pass_rate)}{unscored}",
            f"Tokens: {stats.input_tokens} in / {stats.output_tokens} out",
            f"Cost: {format_usd(stats.cost_usd)}",
            f"Cache hits: {stats.cache_hits}/{stats.samples}",
            f"Wall time: {wall_s:.2f}s",
        ]
    )
