"""A spec's `tools:` entries: what the model is offered, and where each result comes from."""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, JsonValue, ValidationInfo, field_validator, model_validator

from gradetrail_lib.config import Strict, load_function, source_path
from gradetrail_lib.sandbox import SandboxMode, bwrap_problem
from gradetrail_lib.scorers.schemas import schema_problem

_NO_PARAMETERS: dict[str, JsonValue] = {"type": "object", "properties": {}}


@dataclass(frozen=True, kw_only=True)
class Builtin:
    """A tool gradetrail runs itself, in the sandbox: the language its one argument is
    written in, that argument's name, and what the model is told."""

    language: str
    argument: str
    description: str

    def parameters(self) -> dict[str, JsonValue]:
        return {
            "type": "object",
            "properties": {self.argument: {"type": "string"}},
            "required": [self.argument],
        }


# The built-in tools by name (`builtin: python`); each names a `sandbox.LANGUAGES` entry.
BUILTIN_TOOLS: dict[str, Builtin] = {
    "python": Builtin(
        language="python",
        argument="code",
        description=(
            "Run a Python program (standard library only, no network) in this task's "
            "working directory, which keeps its files between calls. Returns its exit "
            "status and the end of its stdout and stderr: print what you want to see."
        ),
    ),
    "bash": Builtin(
        language="bash",
        argument="command",
        description=(
            "Run a bash script (no network) in this task's working directory, which keeps "
            "its files between calls. Returns its exit status and the end of its stdout "
            "and stderr."
        ),
    ),
}
BuiltinName = Literal["python", "bash"]
# The defaults of a builtin's sandbox, filled in at load so that they enter the spec's
# hash (and so the run's identity), as the code scorer's do.
BUILTIN_DEFAULTS: dict[str, JsonValue] = {"timeout_s": 10.0, "memory_mb": 512, "sandbox": "bwrap"}
_SANDBOX_KEYS = ("timeout_s", "memory_mb", "sandbox", "files")
_FILE_NAME = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9_.-]{1,128}$")


class ToolConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=lambda: dict(_NO_PARAMETERS))
    ref: str | None = Field(default=None, description="a Python function; default: scripted")
    # A tool gradetrail runs in the sandbox (see BUILTIN_TOOLS), with its limits, and the
    # files each case's working directory starts with: file name -> the sample field
    # holding its text. None for any other tool, so their hashes stay as they were.
    builtin: BuiltinName | None = None
    timeout_s: float | None = Field(default=None, gt=0, le=3600)
    memory_mb: int | None = Field(default=None, ge=32)
    sandbox: SandboxMode | None = None
    case_files: dict[str, str] | None = Field(default=None, alias="files")

    @model_validator(mode="before")
    @classmethod
    def _builtin_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("builtin"), str):
            return data
        if data["builtin"] not in BUILTIN_TOOLS:  # its own error names the builtins
            return {"name": data["builtin"], **data}
        builtin = BUILTIN_TOOLS[data["builtin"]]
        given = sorted(k for k in ("ref", "parameters") if k in data)
        if given:
            raise ValueError(
                f"a builtin tool takes no {' or '.join(given)}: its parameter is "
                f"{builtin.argument!r} and gradetrail runs it"
            )
        return {
            "name": data["builtin"],
            "description": builtin.description,
            "parameters": builtin.parameters(),
            **BUILTIN_DEFAULTS,
            **data,
        }

    @model_validator(mode="after")
    def _check_builtin(self, info: ValidationInfo) -> "ToolConfig":
        if self.builtin is None:
            given = [k for k in _SANDBOX_KEYS if getattr(self, _attribute(k)) is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: only for a builtin tool (builtin: python)")
            return self
        # A spec being loaded from its file: refuse it now when its sandbox cannot start,
        # rather than fail every call (as the code scorer does).
        if (info.context or {}).get("base_dir") is not None and self.sandbox == "bwrap":
            problem = bwrap_problem()
            if problem is not None:
                raise ValueError(
                    f"the {self.name} tool's sandbox cannot run: {problem}; "
                    "`sandbox: none` runs the model's code unsandboxed on this machine"
                )
        return self

    @field_validator("case_files")
    @classmethod
    def _check_case_files(cls, files: dict[str, str] | None) -> dict[str, str] | None:
        bad = sorted(n for n in files or {} if not _FILE_NAME.match(n))
        if bad:
            raise ValueError(
                f"file names must be plain names (letters, digits, _ . -), not {', '.join(bad)}"
            )
        return files

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

    @property
    def runs_code(self) -> Builtin | None:
        return None if self.builtin is None else BUILTIN_TOOLS[self.builtin]

    def files(self, base_dir: Path) -> dict[str, Path]:
        if self.ref is None:
            return {}
        return {self.ref.rpartition(":")[0]: source_path(self.ref, base_dir)}

    def definition(self) -> dict[str, Any]:
        """What the model is offered (and what enters the request key)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _attribute(key: str) -> str:
    return "case_files" if key == "files" else key
