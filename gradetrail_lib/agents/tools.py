"""Tools an agent may call: their spec entries, and running them.

A tool's result comes from the sample (`tool_results: {<tool>: [{arguments, result}]}`,
matched on the arguments) unless the tool names a Python function by `ref`
(`tools/weather.py:weather` relative to the spec, or `package.module:function`), called
with the arguments as keywords, sync or async; its source is hashed like a Python
scorer's. A builtin tool (`builtin: python|bash`) runs the model's code in the sandbox, in
the case's working directory (`agents.workspace`). A call that matches no scripted
result, names no tool, breaks the tool's parameter schema or makes the function raise is
a tool error: the model is shown the error as the tool's result, and the case remembers
it.
"""

import asyncio
import inspect
import json
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradetrail_lib.agents.workspace import SandboxedTool, Workspace, result_text
from gradetrail_lib.cache.executions import Executions
from gradetrail_lib.config import load_function
from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import canonical_json
from gradetrail_lib.sandbox import SandboxUnavailable
from gradetrail_lib.spec.tools import ToolConfig

SCRIPTED_FIELD = "tool_results"


@dataclass
class ToolOutcome:
    content: str
    error: str | None = None
    documents: list[dict[str, Any]] = field(default_factory=list)


def _as_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, sort_keys=True)


def _documents(result: Any) -> list[dict[str, Any]]:
    docs = result.get("documents") if isinstance(result, dict) else None
    if not isinstance(docs, list):
        return []
    return [
        {"id": str(d["id"]), "text": str(d.get("text", ""))}
        for d in docs
        if isinstance(d, dict) and "id" in d
    ]


def _failed(message: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": message}), message)


class Toolbox:
    """The spec's tools, ready to run for any sample."""

    def __init__(self, tools: list[ToolConfig], base_dir: Path) -> None:
        self.tools = {t.name: t for t in tools}
        self._functions = {
            t.name: load_function(t.ref, base_dir, arguments=None) for t in tools if t.ref
        }
        self._validators: dict[str, Any] = {}
        self._sandboxed = {t.name: SandboxedTool.of(t) for t in tools if t.builtin is not None}
        # The files each case's working directory starts with: name -> sample field.
        self.case_files = {
            name: source for t in tools for name, source in (t.case_files or {}).items()
        }
        # Set by the run (`use_exec_cache`); None runs every call (`--no-exec-cache`).
        self.exec_cache: Executions | None = None

    def use_exec_cache(self, cache: Executions | None) -> None:
        self.exec_cache = cache

    def check(self, sample: Sample, dataset_path: str) -> None:
        """Raises the InputError a case's files would (a field missing or not text)."""
        for name, source in self.case_files.items():
            value = sample.fields.get(source)
            if not isinstance(value, str):
                problem = "has no field" if source not in sample.fields else "has no text in"
                raise InputError(
                    dataset_path,
                    sample.line,
                    source,
                    f"sample {sample.id!r} {problem} {source!r} (the tools' file {name!r})",
                )

    def workspace(self, sample: Sample) -> Workspace | None:
        """A case's working directory for the builtin tools (None without any)."""
        if not self._sandboxed:
            return None
        files = {name: str(sample.fields[source]) for name, source in self.case_files.items()}
        return Workspace(files=files, cache=self.exec_cache)

    def definitions(self) -> list[dict[str, Any]]:
        return [t.definition() for t in self.tools.values()]

    def _argument_problem(self, name: str, arguments: dict[str, Any]) -> str | None:
        import jsonschema

        validator = self._validators.get(name)
        if validator is None:
            validator = jsonschema.Draft202012Validator(self.tools[name].parameters)
            self._validators[name] = validator
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        return None if error is None else error.message

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        sample: Sample,
        workspace: Workspace | None = None,
    ) -> ToolOutcome:
        if name not in self.tools:
            return _failed(f"no tool named {name!r} (tools: {', '.join(sorted(self.tools))})")
        if "_unparsed" in arguments:
            return _failed(f"the arguments of {name} are not JSON: {arguments['_unparsed']!r}")
        problem = self._argument_problem(name, arguments)
        if problem is not None:
            return _failed(f"{name}: arguments do not fit its parameters: {problem}")
        sandboxed = self._sandboxed.get(name)
        if sandboxed is not None:
            assert workspace is not None, "a case with builtin tools has a workspace"
            return await _run_code(sandboxed, str(arguments[sandboxed.argument]), workspace)
        function = self._functions.get(name)
        if function is None:
            return self._scripted(name, arguments, sample)
        try:
            result = function(**arguments)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # the tool's failure is the model's observation
            return _failed(f"{name} raised {type(exc).__name__}: {exc}")
        return ToolOutcome(_as_text(result), None, _documents(result))

    def _scripted(self, name: str, arguments: dict[str, Any], sample: Sample) -> ToolOutcome:
        scripted = sample.fields.get(SCRIPTED_FIELD) or {}
        wanted = canonical_json(arguments)
        for entry in scripted.get(name, []) if isinstance(scripted, dict) else []:
            if isinstance(entry, dict) and canonical_json(entry.get("arguments", {})) == wanted:
                result = entry.get("result")
                return ToolOutcome(_as_text(result), None, _documents(result))
        return _failed(f"no scripted result for {name}({wanted})")


async def _run_code(tool: SandboxedTool, program: str, workspace: Workspace) -> ToolOutcome:
    loop = asyncio.get_running_loop()
    try:
        execution = await loop.run_in_executor(None, workspace.run, tool, program)
    except SandboxUnavailable as exc:
        return _failed(f"{tool.name}: the sandbox cannot run: {exc}")
    return ToolOutcome(result_text(execution))


async def call_all(
    toolbox: Toolbox,
    calls: list[dict[str, Any]],
    sample: Sample,
    workspace: Workspace | None = None,
) -> list[ToolOutcome]:
    """A step's tool calls, run in their order (a later call may depend on an earlier)."""
    outcomes = []
    for call in calls:
        pending: Awaitable[ToolOutcome] = toolbox.call(
            call["name"], call["arguments"], sample, workspace
        )
        outcomes.append(await pending)
    return outcomes
