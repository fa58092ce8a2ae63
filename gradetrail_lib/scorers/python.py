"""Python scorers: a plain function named by `ref`, its source file hashed.

`ref` is `path/to/file.py:function` (relative to the spec) or `package.module:function`.
The function asks for what it wants by keyword, among `sample` (the dataset row, a dict),
`response` (the final text) and `record` (the trace record so far); it may be async; it
returns a bool, a number in [0, 1], or a `(score, reason)` pair.
"""

import inspect
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator

from gradetrail_lib.config import load_function, source_path
from gradetrail_lib.scorers.base import BaseScorer, CallOutcome, Score, ScoreInput
from gradetrail_lib.scorers.registry import ScorerConfig

ARGUMENTS = ("sample", "response", "record")


class Config(ScorerConfig):
    type: Literal["python"]
    ref: str

    @field_validator("ref")
    @classmethod
    def _check_ref(cls, ref: str, info: ValidationInfo) -> str:
        source, _, function = ref.rpartition(":")
        if not source or not function:
            raise ValueError("ref must be 'file.py:function' or 'package.module:function'")
        base_dir = (info.context or {}).get("base_dir")
        if base_dir is not None:  # a spec being loaded from its file: load the function now
            load_function(ref, Path(base_dir), ARGUMENTS)
        return ref

    def source_path(self, base_dir: Path) -> Path:
        return source_path(self.ref, base_dir)

    def files(self, base_dir: Path) -> dict[str, Path]:
        return {self.ref.rpartition(":")[0]: self.source_path(base_dir)}


def build(config: Config, base_dir: Path) -> "PythonScorer":
    return PythonScorer(config, base_dir)


def to_score(value: Any) -> Score:
    """A scorer function's return value as a Score; anything else is its error."""
    reason = ""
    if isinstance(value, tuple):
        if len(value) != 2 or not isinstance(value[1], str):
            raise TypeError(f"returned a tuple that is not (score, reason): {value!r}")
        value, reason = value
    if isinstance(value, bool):
        return Score(1.0 if value else 0.0, reason or f"returned {value}")
    if isinstance(value, int | float):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"returned {value}, outside [0, 1]")
        return Score(float(value), reason or f"returned {value:g}")
    raise TypeError(
        f"returned {type(value).__name__}; a scorer returns a bool, a number "
        "in [0, 1] or a (score, reason) pair"
    )


class PythonScorer(BaseScorer):
    type = "python"

    def __init__(self, config: Config, base_dir: Path) -> None:
        self.name = config.name
        self._function = load_function(config.ref, base_dir, ARGUMENTS)
        parameters = inspect.signature(self._function).parameters
        self._wants = tuple(a for a in ARGUMENTS if a in parameters)
        self._is_async = inspect.iscoroutinefunction(self._function)

    def score(
        self, item: ScoreInput, calls: Sequence[CallOutcome | None]
    ) -> Score | Awaitable[Score]:
        given = {"sample": item.sample.fields, "response": item.response, "record": item.record}
        result = self._function(**{a: given[a] for a in self._wants})
        if self._is_async or inspect.isawaitable(result):
            return self._finish(result)
        return to_score(result)

    async def _finish(self, pending: Awaitable[Any]) -> Score:
        return to_score(await pending)
