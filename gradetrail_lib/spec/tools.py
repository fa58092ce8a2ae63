"""A spec's `tools:` entries: what the model is offered, and where each result comes from."""

from pathlib import Path
from typing import Any

from pydantic import Field, JsonValue, ValidationInfo, field_validator

from gradetrail_lib.config import Strict, load_function, source_path
from gradetrail_lib.scorers.schemas import schema_problem

_NO_PARAMETERS: dict[str, JsonValue] = {"type": "object", "properties": {}}


class ToolConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=lambda: dict(_NO_PARAMETERS))
    ref: str | None = Field(default=None, description="a Python function; default: scripted")

    @field_validator("parameters")
    @classmethod
    def _check_parameters(cls, parameters: dict[str, JsonValue]) -> dict[str, JsonValue]:
        problem = schema_problem(parameters)
        if problem is not None:
            raise ValueError(f"not a valid Draft 2020-12 schema: {problem}")
        if parameters.get("type") != "object":
            raise ValueError("a tool's parameters must be a schema of type object")
        return parameters

    @field_validator("ref")
    @classmethod
    def _check_ref(cls, ref: str | None, info: ValidationInfo) -> str | None:
        if ref is None:
            return None
        source, _, function = ref.rpartition(":")
        if not source or not function:
            raise ValueError("ref must be 'file.py:function' or 'package.module:function'")
        base_dir = (info.context or {}).get("base_dir")
        if base_dir is not None:
            load_function(ref, Path(base_dir), arguments=None)
        return ref

    def files(self, base_dir: Path) -> dict[str, Path]:
        if self.ref is None:
            return {}
        return {self.ref.rpartition(":")[0]: source_path(self.ref, base_dir)}

    def definition(self) -> dict[str, Any]:
        """What the model is offered (and what enters the request key)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}
