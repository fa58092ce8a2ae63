"""The scorer interface: what a scorer is given, what it returns, and how it fails.

A scorer sees a `ScoreInput` (the dataset row, the final response, the record so far)
and, if it needs model calls (a judge), it names them first with `requests()`: the
pipeline sends them through the same cache and backend as the target's requests and
hands their outcomes to `score()`. So a judge is a scorer like any other.
"""

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.base import Message, ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.results.trace import ScoreErrorKind, TraceRecord

CallOutcome = ModelResponse | ProviderError


# Not frozen, for speed: one per sample and scorer.
@dataclass
class Score:
    value: float
    reason: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.value <= 1.0:
            raise ValueError(f"score {self.value} is outside [0, 1]")


class ScoreFailed(Exception):
    """No score for this (sample, scorer): `kind` says whose fault it was."""

    def __init__(self, kind: ScoreErrorKind, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        super().__init__(reason)


@dataclass
class ScoreInput:
    sample: Sample
    response: str
    # The record as built so far (target call, messages); its `scores` fill in as
    # scorers finish, in spec order.
    record: TraceRecord

    @property
    def messages(self) -> list[Message]:
        return self.record.messages


class Scorer(Protocol):
    name: str
    type: str
    # Whether `requests()` can name any call (so a run without such a scorer starts no
    # stage for them).
    makes_calls: bool

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        """Raise InputError when this sample cannot be scored at all (before any call)."""
        ...

    def requests(self, item: ScoreInput) -> list[ModelRequest]:
        """The model calls this scorer needs for the item (none for most scorers)."""
        ...

    def score(
        self, item: ScoreInput, calls: Sequence[CallOutcome | None]
    ) -> Score | Awaitable[Score]:
        """The score; `calls` holds the outcome of each request `requests()` named, in
        its order (None for a call that never finished).
        Raise ScoreFailed (or anything: a scorer_error) when there is none."""
        ...


class BaseScorer:
    """Defaults for scorers without model calls or per-sample checks."""

    name: str
    type: str
    makes_calls = False

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        return None

    def requests(self, item: ScoreInput) -> list[ModelRequest]:
        return []


def clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def field_value(sample: Sample, field: str, dataset_path: str) -> Any:
    if field not in sample.fields:
        raise InputError(
            dataset_path, sample.line, field, f"sample {sample.id!r} has no field {field!r}"
        )
    return sample.fields[field]
