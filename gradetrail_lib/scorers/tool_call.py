"""The tools an agent called, in order, with their arguments, against the sample's
expected calls (`expected: {tool_calls: [{name, arguments}]}`, or a list in `field`)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import canonical_json
from gradetrail_lib.providers.base import Message
from gradetrail_lib.scorers.base import BaseScorer, CallOutcome, Score, ScoreInput, clip
from gradetrail_lib.scorers.registry import ScorerConfig


class Config(ScorerConfig):
    type: Literal["tool_call"]
    field: str = "expected"
    # `exact`: the same calls in the same order; `prefix`: the expected ones first, more
    # calls allowed after them.
    match: Literal["exact", "prefix"] = "exact"


def build(config: Config, base_dir: Path) -> "ToolCallMatch":
    return ToolCallMatch(config)


def _expected(sample: Sample, field: str) -> Any:
    value = sample.fields.get(field)
    if isinstance(value, dict):
        value = value.get("tool_calls")
    return value


def _call(call: dict[str, Any]) -> str:
    return f"{call.get('name')}({canonical_json(call.get('arguments', {}))})"


class ToolCallMatch(BaseScorer):
    type = "tool_call"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name = config.name

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        expected = _expected(sample, self.config.field)
        if not isinstance(expected, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) for c in expected
        ):
            raise InputError(
                dataset_path,
                sample.line,
                self.config.field,
                f"sample {sample.id!r}: expected tool calls as "
                f"{{{self.config.field}: {{tool_calls: [{{name, arguments}}]}}}}",
            )

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        expected = [_call(c) for c in _expected(item.sample, self.config.field)]
        made = [_call(c) for step in item.record.trajectory for c in step.tool_calls]
        compared = made[: len(expected)] if self.config.match == "prefix" else made
        if compared == expected:
            return Score(1.0, f"called {', '.join(made) or 'no tool'} as expected")
        for i, (want, got) in enumerate(zip(expected, made, strict=False)):
            if want != got:
                return Score(0.0, f"call {i + 1}: expected {clip(want)}, got {clip(got)}")
        if len(made) < len(expected):
            return Score(0.0, f"made {len(made)} of {len(expected)} expected calls; next "
                              f"expected {clip(expected[len(made)])}")  # fmt: skip
        return Score(0.0, f"made {len(made)} calls, {len(expected)} expected; then "
                          f"{clip(made[len(expected)])}")  # fmt: skip
