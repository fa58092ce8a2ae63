"""The built-in `python` and `bash` tools: the model's code run in the sandbox, in a
working directory each case keeps across its steps and loses when it ends; results in the
execution cache, so a replay runs no code; the shipped CSV agent, offline."""

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

import gradetrail_lib.agents.workspace as workspace_module
from gradetrail_lib import run_spec
from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.sandbox import bwrap_problem
from gradetrail_lib.spec.identity import requests_hash, run_identity
from gradetrail_lib.spec.spec import load_spec
from gradetrail_lib.spec.tools import ToolConfig
from tests.conftest import run_cli

REQUIRED = os.environ.get("GRADETRAIL_REQUIRE_BWRAP") == "1"
needs_bwrap = pytest.mark.skipif(
    not REQUIRED and bwrap_problem() is not None, reason=f"no sandbox: {bwrap_problem()}"
)
SHIPPED = Path(__file__).resolve().parents[2] / "specs" / "csv_stats.yaml"


def python(code: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "python", "arguments": {"code": code}}]}


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


SPEC = """name: t
dataset: {{path: data/t.jsonl}}
messages: [{{role: user, content: "Go {{{{ id }}}}"}}]
model: {{provider: scripted, name: oracle, answer_field: script}}
params: {{temperature: 0}}
tools:
  - {{builtin: python, files: {{in.csv: csv}}, timeout_s: {timeout}{extra}}}
  - {{builtin: bash, timeout_s: {timeout}}}
step_budget: 6
scorer: {{type: regex, pattern: done}}
"""


def project(
    tmp_path: Path, scripts: dict[str, list[Any]], *, timeout: float = 5, extra: str = ""
) -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    rows = [{"id": k, "csv": "a,b\n1,2\n3,4\n", "script": v} for k, v in scripts.items()]
    (tmp_path / "data" / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "t.yaml"
    spec.write_text(SPEC.format(timeout=timeout, extra=extra))
    return spec


def unsandboxed(spec: Path) -> Path:
    """`spec` with both tools at `sandbox: none`: for the tests of what is refused before
    anything runs, which hold with or without bwrap."""
    spec.write_text(spec.read_text().replace("timeout_s: 5}", "timeout_s: 5, sandbox: none}"))
    return spec


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Path | None]]:
    """Every program a tool runs, with its working directory (made under tmp_path/tmp)."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    seen: list[tuple[str, Path | None]] = []
    real = workspace_module.run_program

    def counted(program: str, *args: Any) -> Any:
        seen.append((program, args[-1]))
        return real(program, *args)

    monkeypatch.setattr(workspace_module, "run_program", counted)
    return seen


def tool_outputs(record: Any) -> list[dict[str, Any]]:
    return [json.loads(t.content) for s in record.trajectory for t in s.tool_results]


@needs_bwrap
def test_the_shipped_csv_agent_runs_offline_and_a_replay_runs_no_code(
    tmp_path: Path, ran: list[tuple[str, Path | None]]
) -> None:
    kwargs: dict[str, Any] = {"results_root": tmp_path / "r", "cache": tmp_path / "c.db"}
    (first,) = run_spec(SHIPPED, **kwargs)
    by_id = {r.id: r for r in first.records}
    assert sorted(by_id) == ["max-rain", "mean-price", "median-age", "stdev-score"]
    for record in first.records:
        assert record.failure_mode is None
        # The answer, and the number the sandbox printed (what the code computed).
        assert record.score_of("answer") == 1.0 and record.score_of("computed") == 1.0
    # Step 1 wrote stats.json from the case's data.csv; a later step read it back.
    median = tool_outputs(by_id["median-age"])
    assert median[0] == {"exit_status": 0, "stdout": "wrote stats.json from 6 rows\n", "stderr": ""}
    assert median[1]["stdout"].split("\n")[:2] == ["data.csv", "stats.json"]
    assert median[2]["stdout"] == "38.5\n"
    assert len(ran) == 9
    # One directory per case, all gone, nothing else left behind.
    folders = {folder for _, folder in ran}
    assert len(folders) == 4 and all(f is not None and not f.exists() for f in folders)
    assert list((tmp_path / "tmp").iterdir()) == []

    (second,) = run_spec(SHIPPED, **kwargs)
    assert len(ran) == 9  # every tool result came from the cache: no code ran
    assert [tool_outputs(r) for r in second.records] == [tool_outputs(r) for r in first.records]
    assert [r.scores for r in second.records] == [r.scores for r in first.records]
    run_spec(SHIPPED, **kwargs, exec_cache=False)
    assert len(ran) == 18


@needs_bwrap
def test_files_last_across_a_cases_steps_and_never_reach_another_case(
    tmp_path: Path, ran: list[tuple[str, Path | None]]
) -> None:
    read_note = "print(open('note.txt').read())"
    spec = project(
        tmp_path,
        {
            "writer": [
                python("open('note.txt', 'w').write('step 1')\nprint(len(open('in.csv').read()))"),
                bash("ls; echo $HOME; ls /work 2>&1 | head -1; exit 3"),
                python(read_note),
                "done",
            ],
            "reader": [python(read_note), "done"],
        },
    )
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    writer, reader = (tool_outputs(r) for r in done.records)
    assert writer[0]["stdout"] == "12\n"  # the case's file was there before step 1
    listed = writer[1]["stdout"].splitlines()
    # The directory holds the case's files, not the programs; no home, no project.
    assert listed[:3] == ["in.csv", "note.txt", ""] and "No such file" in listed[3]
    assert writer[1]["exit_status"] == 3
    assert writer[2] == {"exit_status": 0, "stdout": "step 1\n", "stderr": ""}
    assert reader[0]["exit_status"] == 1 and "FileNotFoundError" in reader[0]["stderr"]
    assert all(r.score_of("score") == 1.0 for r in done.records)
    assert list((tmp_path / "tmp").iterdir()) == []


@needs_bwrap
def test_a_changed_later_call_rebuilds_the_directory_from_the_earlier_ones(
    tmp_path: Path, ran: list[tuple[str, Path | None]]
) -> None:
    write = python("open('n.txt', 'w').write('7')")
    scripts = {"a": [write, python("print(int(open('n.txt').read()) + 1)"), "done"]}
    kwargs: dict[str, Any] = {"results_root": tmp_path / "r", "cache": tmp_path / "c.db"}
    run_spec(project(tmp_path, scripts), **kwargs)
    assert len(ran) == 2
    scripts["a"][1] = python("print(int(open('n.txt').read()) * 2)")
    (done,) = run_spec(project(tmp_path, scripts), **kwargs)
    # Step 1 was cached but its file is needed: it ran again, then the new step 2.
    codes = [step["tool_calls"][0]["arguments"]["code"] for step in scripts["a"][:2]]
    assert [program for program, _ in ran[2:]] == codes
    assert tool_outputs(done.records[0])[1]["stdout"] == "14\n"
    # Another timeout is another sandbox: nothing cached applies.
    run_spec(project(tmp_path, scripts, timeout=6), **kwargs)
    assert len(ran) == 6


@needs_bwrap
def test_a_timeout_is_the_models_observation_and_the_case_goes_on(
    tmp_path: Path, ran: list[tuple[str, Path | None]]
) -> None:
    spec = project(tmp_path, {"a": [python("while True: pass"), "done"]}, timeout=1)
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    (output,) = tool_outputs(done.records[0])
    assert output["status"] == "timeout" and output["exit_status"] is None
    assert done.records[0].score_of("score") == 1.0


@needs_bwrap  # a spec whose tool is sandboxed loads only where the sandbox starts
def test_sandbox_settings_enter_the_identity_and_other_tools_keep_their_hashes(
    tmp_path: Path,
) -> None:
    five = load_spec(project(tmp_path, {"a": ["done"]}))
    six = load_spec(project(tmp_path, {"a": ["done"]}, timeout=6))
    assert run_identity(five, "d") != run_identity(six, "d")
    model = five.spec.models[0]
    assert requests_hash(five, model) != requests_hash(six, model)
    python_tool = five.spec.tools[0]  # type: ignore[index]
    assert (python_tool.name, python_tool.timeout_s, python_tool.memory_mb) == ("python", 5, 512)
    assert python_tool.sandbox == "bwrap" and python_tool.case_files == {"in.csv": "csv"}
    # A tool that is not builtin dumps as it did before builtins existed.
    plain = ToolConfig(name="w").model_dump(mode="json", exclude_none=True)
    assert sorted(plain) == ["description", "name", "parameters"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{builtin: ruby}", "Input should be 'python' or 'bash'"),
        ("{builtin: python, ref: 'x.py:f'}", "a builtin tool takes no ref"),
        ("{builtin: python, parameters: {type: object}}", "takes no parameters"),
        ("{name: w, timeout_s: 3}", "timeout_s: only for a builtin tool"),
        ("{builtin: python, files: {../x: csv}}", "file names must be plain names"),
    ],
)
def test_a_bad_builtin_entry_is_refused_with_file_line_and_field(
    tmp_path: Path, entry: str, message: str
) -> None:
    # Unsandboxed: what is refused here is refused before anything runs, bwrap or not.
    spec = project(tmp_path, {"a": ["done"]}, extra=", sandbox: none")
    text = spec.read_text().replace("  - {builtin: bash, timeout_s: 5}", f"  - {entry}")
    spec.write_text(text)
    with pytest.raises(InputError) as raised:
        load_spec(spec)
    error = raised.value
    assert message in str(error)
    assert (
        error.path.endswith("t.yaml")
        and error.line == 8
        and (error.field or "").startswith("tools")
    )
    done = run_cli("run", str(spec), "--results", "r", "--cache", "c.db", cwd=tmp_path)
    assert done.returncode != 0 and "t.yaml:8" in done.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "c.db").exists()


def test_a_case_without_its_files_field_is_refused_before_anything_runs(tmp_path: Path) -> None:
    spec = unsandboxed(project(tmp_path, {"a": ["done"], "b": ["done"]}))
    data = tmp_path / "data" / "t.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    del rows[1]["csv"]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=r"has no field 'csv' \(the tools' file 'in.csv'\)") as e:
        run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    assert (e.value.path, e.value.line, e.value.field) == ("data/t.jsonl", 2, "csv")
    assert not (tmp_path / "r").exists() and not (tmp_path / "c.db").exists()


def test_a_bad_script_step_names_its_field(tmp_path: Path) -> None:
    spec = unsandboxed(project(tmp_path, {"a": [{"tool_calls": "python"}, "done"]}))
    with pytest.raises(InputError, match="step 0 of 'script' has tool_calls that are not"):
        run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")


def test_without_bwrap_a_builtin_is_refused_unless_it_says_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran: list[tuple[str, Path | None]]
) -> None:
    monkeypatch.setattr("gradetrail_lib.sandbox.run.shutil.which", lambda name, **_: None)
    monkeypatch.setattr("gradetrail_lib.sandbox.run.find_bwrap", lambda: None)
    bwrap_problem.cache_clear()
    write, read = python("open('f', 'w').write('x')"), python("print(open('f').read())")
    scripts = {"a": [write, read, "done"]}
    try:
        with pytest.raises((InputError, InputErrors), match="t.yaml:7: tools.0.: the python"):
            load_spec(project(tmp_path, scripts))
        spec = project(tmp_path, scripts, extra=", sandbox: none")
        spec.write_text(spec.read_text().replace("{builtin: bash, timeout_s: 5}", "{name: w}"))
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    finally:
        bwrap_problem.cache_clear()
    assert tool_outputs(done.records[0])[1]["stdout"] == "x\n"
    warning = "tool 'python' runs model-written code unsandboxed (`sandbox: none`)"
    assert warning in done.manifest.warnings
    assert list((tmp_path / "tmp").iterdir()) == []
