"""Every scorer type, by its `type:` name. A new scorer is one module here plus its name
in `SCORER_MODULES`: the module defines `Config` (a `ScorerConfig` with a `type` literal)
and `build(config, base_dir) -> Scorer`.

Modules are cheap to import (a scorer with a heavy dependency, such as jsonschema, loads
it when built), because the spec's validation needs every `Config` up front.
"""

from functools import cache
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import Field, PrivateAttr

from gradetrail_lib.config import Strict

SCORER_MODULES = (
    "exact",
    "regex",
    "numeric",
    "json_schema",
    "json_valid",
    "rouge_l",
    "tool_call",
    "python",
    "judge",
    "code",
    "choice",
)

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
DEFAULT_NAME = "score"


class ScorerConfig(Strict):
    """Fields every scorer has. `name` is unique within a spec; `scorer:` defaults it."""

    name: str = Field(default=DEFAULT_NAME, pattern=NAME_PATTERN)
    # Where the spec holds it (`scorer` or `scorers[i]`), for error messages.
    _where: str = PrivateAttr(default="scorer")

    @property
    def where(self) -> str:
        return self._where

    def files(self, base_dir: Path) -> dict[str, Path]:
        """Files the scorer reads, by the name the spec gives them (hashed into the
        scorer hash and the run identity)."""
        return {}


@cache
def modules() -> dict[str, ModuleType]:
    loaded = {}
    for name in SCORER_MODULES:
        module = import_module(f"gradetrail_lib.scorers.{name}")
        type_name = module.Config.model_fields["type"].annotation.__args__[0]
        loaded[type_name] = module
    return loaded


def config_types() -> tuple[type[ScorerConfig], ...]:
    return tuple(m.Config for m in modules().values())


def build_scorer(config: ScorerConfig, base_dir: Path) -> Any:
    """The scorer a config describes; `base_dir` resolves the files it names."""
    type_name = getattr(config, "type")  # noqa: B009 (every Config has one; the base has not)
    return modules()[type_name].build(config, base_dir)
