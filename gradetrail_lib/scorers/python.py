"""Python scorers: a plain function named by `ref`, its source file hashed.

`ref` is `path/to/file.py:function` (relative to the spec) or `package.module:function`.
The function asks for what it wants by keyword, among `sample` (the dataset row, a dict),
`response` (the final text) and `record` (the trace record so far); it may be async; it
returns a bool, a number in [0, 1], or a `(score, reason)` pair.
"""

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator

from gradetrail_lib.scorers.base import BaseScorer, CallOutcome, Score, ScoreInput
from gradetrail_lib.scorers.registry import ScorerConfig

ARGUMENTS = ("sample", "response", "record")


class ScorerLoadError(ValueError):
    """A `ref` that names no loadable function (reported at its spec line)."""


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
            load_function(ref, Path(base_dir))
        return ref

    def source_path(self, base_dir: Path) -> Path:
        return source_path(self.ref, base_dir)

    def files(self, base_dir: Path) -> dict[str, Path]:
        return {self.ref.rpartition(":")[0]: self.source_path(base_dir)}


def build(config: Config, base_dir: Path) -> "PythonScorer":
    return PythonScorer(config, base_dir)


def _is_file_ref(source: str) -> bool:
    return source.endswith(".py") or "/" in source


def source_path(ref: str, base_dir: Path) -> Path:
    """The file whose content the scorer hash covers."""
    source = ref.rpartition(":")[0]
    if _is_file_ref(source):
        path = (base_dir / source).resolve()
        if not path.is_file():
            raise ScorerLoadError(f"no such file: {path}")
        return path
    try:
        found = importlib.util.find_spec(source)
    except (ImportError, ValueError) as exc:
        raise ScorerLoadError(f"cannot find module {source!r}: {exc}") from exc
    if found is None or not found.origin or not Path(found.origin).is_file():
        raise ScorerLoadError(f"cannot find module {source!r}")
    return Path(found.origin)


@cache
def _load_file(path: Path, digest: str) -> ModuleType:
    # Keyed on the content: an edited file is loaded again (a long-lived Dagster process).
    name = f"gradetrail_scorer_{digest[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ScorerLoadError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ScorerLoadError(f"{path} raised {type(exc).__name__} on import: {exc}") from exc
    return module


def load_function(ref: str, base_dir: Path) -> Callable[..., Any]:
    source, _, name = ref.rpartition(":")
    path = source_path(ref, base_dir)
    if _is_file_ref(source):
        module = _load_file(path, hashlib.sha256(path.read_bytes()).hexdigest())
    else:
        try:
            module = importlib.import_module(source)
        except Exception as exc:
            raise ScorerLoadError(
                f"importing {source!r} raised {type(exc).__name__}: {exc}"
            ) from exc
    function: Callable[..., Any] | None = getattr(module, name, None)
    if function is None or not callable(function):
        raise ScorerLoadError(f"{source} has no function {name!r}")
    wanted = inspect.signature(function).parameters
    unknown = [
        p.name
        for p in wanted.values()
        if p.name not in ARGUMENTS
        and p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    ]
    if unknown:
        raise ScorerLoadError(
            f"{name}() asks for {', '.join(unknown)}; a scorer may ask for " + ", ".join(ARGUMENTS)
        )
    return function


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
        self._function = load_function(config.ref, base_dir)
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
