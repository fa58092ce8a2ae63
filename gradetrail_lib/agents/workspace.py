"""The built-in tools (`builtin: python`, `builtin: bash`): each call runs the model's code
in the sandbox (`sandbox.run_program`), in a working directory that the case keeps across
its steps and that is removed when the case ends.

A call's outcome is cached in the execution cache (the code scorer's) under a key chained
through the case's history: the files the case starts with, then every earlier builtin
call's program, language, limits and sandbox, then this call's. The same key is the same
working directory before the call, so the cached outcome is what running it would give,
and a replay runs nothing. When a call is not cached, the earlier calls the cache answered
are run first, in order, to rebuild the directory it runs in.
"""

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradetrail_lib.cache.executions import Executions, execution_key
from gradetrail_lib.hashing import hash_json, sha256_hex
from gradetrail_lib.sandbox import LANGUAGES, Execution, Language, Limits, SandboxMode
from gradetrail_lib.sandbox.run import UNPRIVILEGED, run_program
from gradetrail_lib.spec.tools import ToolConfig

# The execution cache's "harness" of a tool call (the code scorer's are its harnesses).
HARNESS = "agent-tool"
WORKDIR_PREFIX = "gradetrail-tool-"


@dataclass(frozen=True, kw_only=True)
class SandboxedTool:
    """A builtin tool as it runs: its language, limits and sandbox."""

    name: str
    argument: str
    language: Language
    limits: Limits
    mode: SandboxMode

    @classmethod
    def of(cls, tool: ToolConfig) -> "SandboxedTool":
        builtin = tool.runs_code
        assert builtin is not None and tool.timeout_s is not None and tool.memory_mb is not None
        return cls(
            name=tool.name,
            argument=builtin.argument,
            language=LANGUAGES[builtin.language](),
            limits=Limits(timeout_s=tool.timeout_s, memory_mb=tool.memory_mb),
            mode=tool.sandbox or "bwrap",
        )

    def key(self, program: str) -> str:
        return execution_key(program, HARNESS, self.language, self.limits, self.mode)


@dataclass(frozen=True, kw_only=True)
class _Call:
    tool: SandboxedTool
    program: str


def result_text(execution: Execution) -> str:
    """What the model is shown: the exit status and the tails of stdout and stderr."""
    shown: dict[str, Any] = {"exit_status": execution.exit_code}
    if execution.status != "exited":
        shown["status"] = execution.status  # timeout, output_limit: killed
    shown["stdout"] = execution.stdout
    shown["stderr"] = execution.stderr
    return json.dumps(shown)


def _remove(path: Path) -> None:
    """Remove a working directory whatever the program did to its permissions."""

    def retry(function: Callable[..., Any], failed: str, _: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), stat.S_IRWXU)
            os.chmod(failed, stat.S_IRWXU)
        function(failed)

    if path.exists():
        shutil.rmtree(path, onerror=retry)


@dataclass
class Workspace:
    """One case's working directory: created at the first call that runs code, with the
    case's files in it, and removed by `close`."""

    files: dict[str, str]
    cache: Executions | None
    # The key of the directory's state so far (see the module's docstring).
    chain: str = ""
    path: Path | None = None
    # Calls the cache answered that have not run in `path` (run before the next miss).
    unrun: list[_Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.chain = hash_json(
            {"files": {name: sha256_hex(text) for name, text in sorted(self.files.items())}}
        )

    def run(self, tool: SandboxedTool, program: str) -> Execution:
        """Run one call (blocking), or answer it from the cache."""
        self.chain = key = hash_json({"after": self.chain, "call": tool.key(program)})
        call = _Call(tool=tool, program=program)
        if self.cache is not None:
            found = self.cache.get(key)
            if found is not None:
                self.unrun.append(call)
                return found
        for earlier in self.unrun:
            self._execute(earlier)
        self.unrun.clear()
        execution = self._execute(call)
        if self.cache is not None:
            self.cache.put(key, execution)
        return execution

    def _execute(self, call: _Call) -> Execution:
        return run_program(
            call.program, call.tool.language, call.tool.limits, call.tool.mode, self._folder()
        )

    def _folder(self) -> Path:
        if self.path is None:
            path = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            self.path = path
            for name, text in self.files.items():
                (path / name).write_text(text)
            if os.geteuid() == 0:
                # The program runs as UNPRIVILEGED (sandbox.run): it owns the directory and
                # its files; 0711 lets bwrap, root without capabilities, enter it.
                for item in [path, *path.iterdir()]:
                    os.chown(item, UNPRIVILEGED, UNPRIVILEGED)
                path.chmod(0o711)
        return self.path

    def close(self) -> None:
        if self.path is not None:
            _remove(self.path)
            self.path = None
