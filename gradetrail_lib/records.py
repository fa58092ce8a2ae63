"""One shape for a sample's result, whether it is a ResultRow in memory or a JSON row
read back from results.jsonl, so every statistic works on both."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gradetrail_lib.pipeline import ResultRow
from gradetrail_lib.stats_defaults import DEFAULT_THRESHOLD


# Not frozen, for speed: one per sample (see pipeline.ResultRow).
@dataclass
class SampleRecord:
    id: str
    # Position among runs of the same sample; 0 until specs can repeat samples.
    repeat: int
    score: float | None
    outcome: str
    failure_mode: str | None
    stop_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    latency_s: float | None
    cost_usd: float | None
    answered: bool
    cache_hit: bool

    @property
    def scored(self) -> bool:
        return self.outcome == "scored" and self.score is not None

    def passes(self, threshold: float = DEFAULT_THRESHOLD) -> bool:
        """Unscored samples (provider or scorer error) never pass: no answer is not a
        right answer, and dropping them would flatter a model that errors on hard cases."""
        return self.scored and self.score is not None and self.score >= threshold

    @property
    def value(self) -> float:
        """The score used where every sample needs a number (paired differences):
        an unscored sample counts as 0, consistently with `passes`."""
        return self.score if self.scored and self.score is not None else 0.0

    @property
    def truncated(self) -> bool:
        return self.failure_mode == "truncated" or self.stop_reason == "max_tokens"


RowLike = ResultRow | SampleRecord | Mapping[str, Any]


def record(row: RowLike) -> SampleRecord:
    if isinstance(row, SampleRecord):
        return row
    if isinstance(row, ResultRow):
        return SampleRecord(
            id=row.id,
            repeat=0,
            score=row.score,
            outcome=row.outcome,
            failure_mode=row.failure_mode,
            stop_reason=row.stop_reason,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            latency_s=row.latency_s,
            cost_usd=row.cost_usd,
            answered=row.response is not None,
            cache_hit=row.cache_hit,
        )
    usage = row.get("usage") or {}
    score = row.get("score")
    latency = row.get("latency_s")
    cost = row.get("cost_usd")
    return SampleRecord(
        id=str(row["id"]),
        repeat=int(row.get("repeat") or 0),
        score=None if score is None else float(score),
        outcome=str(row["outcome"]),
        failure_mode=row.get("failure_mode"),
        stop_reason=row.get("stop_reason"),
        input_tokens=usage.get("input_tokens", row.get("input_tokens")),
        output_tokens=usage.get("output_tokens", row.get("output_tokens")),
        latency_s=None if latency is None else float(latency),
        cost_usd=None if cost is None else float(cost),
        answered=row.get("response") is not None,
        cache_hit=bool(row.get("cache_hit")),
    )


def records(rows: Sequence[RowLike]) -> list[SampleRecord]:
    return [record(r) for r in rows]
