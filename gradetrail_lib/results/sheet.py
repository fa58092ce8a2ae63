"""A result set's scores on one scorer, sample by sample: all that a paired comparison
reads of it, a few bytes a record, where the records themselves take far more in memory
(docs/performance.md).

A sample's score is what `TraceRecord.score_of` says, NaN where that is None (no
response, or the scorer failed): NaN fails every pass threshold, and counts 0 where a
value is needed, as `TraceRecord.passes` and `TraceRecord.value` count it.
"""

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gradetrail_lib.results.trace import TraceRecord

NAN = float("nan")


@dataclass(frozen=True)
class ScoreSheet:
    """Per sample, in the result set's order: its id, its repeat and its score."""

    ids: Sequence[str]
    repeats: Sequence[int]
    scores: Sequence[float]

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def of(cls, records: Iterable[TraceRecord], scorer: str) -> "ScoreSheet":
        return sheets_of(records, [scorer])[scorer]


def sheets_of(records: Iterable[TraceRecord], scorers: Sequence[str]) -> dict[str, ScoreSheet]:
    """Each scorer's sheet of `records`, read once (a run directory's records stream)."""
    ids: list[str] = []
    repeats: list[int] = []
    scores: dict[str, array[float]] = {name: array("d") for name in scorers}
    for record in records:
        ids.append(record.id)
        repeats.append(record.repeat)
        for name, column in scores.items():
            value = record.score_of(name)
            column.append(NAN if value is None else value)
    return {name: ScoreSheet(ids, repeats, column) for name, column in scores.items()}
