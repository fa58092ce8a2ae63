"""Config pieces every part of a spec shares: strict models, the sampling parameters, and
the Python functions a spec names by `ref` (`path/to/file.py:function`, relative to the
spec, or `package.module:function`), which Python scorers and Python tools load here; the
source file is what the scorer hash and the run identity cover."""

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thinking(Strict):
    """Anthropic's extended thinking: `{type: enabled, budget_tokens: N}`."""

    type: Literal["enabled"]
    # Anthropic's minimum; the budget is part of max_tokens (checked by Params).
    budget_tokens: int = Field(ge=1024)


class PromptCache(Strict):
    """`cache: {prefix: true, ttl: 5m|1h}`: mark the prompt's prefix that every sample
    shares (the system prompt, few-shot examples) for the provider's prompt cache
    (Anthropic's `cache_control`; OpenAI caches prefixes by itself)."""

    prefix: bool = True
    ttl: Literal["5m", "1h"] = "5m"


# Params that change how a request is billed, never its answer: kept out of the request
# key (`providers.request`) and of the hashes that say what a run is.
UNKEYED_PARAMS = frozenset({"cache"})


class Params(Strict):
    """Sampling parameters. Every field that is set enters the request key, but `cache`
    (`UNKEYED_PARAMS`)."""

    temperature: float | None = None
    max_tokens: int = Field(default=512, ge=1)
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    # OpenAI's reasoning models (o-series, gpt-5*): how hard they think.
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    # Anthropic's extended thinking.
    thinking: Thinking | None = None
    cache: PromptCache | None = None
    # Provider-specific body fields (e.g. llama.cpp's repeat_penalty), sent as given.
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _budget_within_max_tokens(self) -> "Params":
        # Anthropic counts the thinking budget in max_tokens and refuses a budget that
        # leaves nothing for the answer.
        if self.thinking is not None and self.thinking.budget_tokens >= self.max_tokens:
            raise ValueError(
                f"thinking.budget_tokens ({self.thinking.budget_tokens}) must be less than "
                f"max_tokens ({self.max_tokens}): the budget is part of max_tokens"
            )
        # Anthropic refuses a changed temperature, and top_p under 0.95, with thinking on.
        if self.thinking is not None and self.temperature not in (None, 1):
            raise ValueError("with thinking, leave temperature unset (Anthropic refuses it)")
        if self.thinking is not None and self.top_p is not None and self.top_p < 0.95:
            raise ValueError("with thinking, top_p must be at least 0.95 (Anthropic refuses less)")
        return self

    @field_validator("extra")
    @classmethod
    def _no_shadowing(cls, extra: dict[str, JsonValue]) -> dict[str, JsonValue]:
        reserved = {*cls.model_fields, "model", "messages", "system", "stream"} - {"extra"}
        clash = sorted(reserved & set(extra))
        if clash:
            raise ValueError(f"{', '.join(clash)} cannot be set through extra")
        return extra


class ScorerLoadError(ValueError):
    """A `ref` that names no loadable function (reported at its spec line)."""


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


def load_function(
    ref: str, base_dir: Path, arguments: tuple[str, ...] | None
) -> Callable[..., Any]:
    """The function `ref` names; with `arguments`, it may ask for no other keyword
    without a default (a scorer's); None takes any (a tool's, called with its arguments)."""
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
    if arguments is None:
        return function
    wanted = inspect.signature(function).parameters
    unknown = [
        p.name
        for p in wanted.values()
        if p.name not in arguments
        and p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    ]
    if unknown:
        raise ScorerLoadError(
            f"{name}() asks for {', '.join(unknown)}; a scorer may ask for " + ", ".join(arguments)
        )
    return function
