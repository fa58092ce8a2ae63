"""The run history and the ways of driving runs, through the real CLI: every completed
run appends an entry to `<results>/.history.jsonl`; `gradetrail list` prints it newest
first (filtered, or as JSON); `gate --baseline previous` picks the most recent earlier
run of the same spec and model whose results differ and whose directory still holds it;
`run FOLDER` runs every spec (a summary each, the worst exit status; one bad spec and
nothing is called); `--models provider/name` runs models the spec does not list (cached
and recorded like the spec's); `run_spec` takes a spec in memory (a code-first eval)."""

import glob
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradetrail_lib.errors import InputError
from gradetrail_lib.history.entries import HISTORY_FILE, HistoryEntry, append_entry, read_history
from tests.conftest import run_cli, write_addition_dataset
from tests.conftest import write_spec as write_fake_spec
from tests.support.fake_llm_server import FakeLLMServer

N = 20


def write_data(root: Path) -> None:
    """Per sample: `answer` (right), `wrong` (wrong on even ids), `other` (wrong on ids
    divisible by 4): scripted models answering from each field score 20, 10 and 15."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "id": f"s{i:02d}",
            "answer": f"a{i}",
            "wrong": "nope" if i % 2 == 0 else f"a{i}",
            "other": "nope" if i % 4 == 0 else f"a{i}",
        }
        for i in range(N)
    ]
    (root / "data" / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_spec(
    path: Path, field: str = "answer", *, name: str = "g", models: tuple[str, ...] = ("x",)
) -> Path:
    """Spec `name` whose scripted models answer from `field` (another field: another
    spec hash, so another identity and run directory)."""
    write_data(path.parent)
    listed = "".join(
        f"  - {{provider: scripted, name: {m}, answer_field: {field}}}\n" for m in models
    )
    path.write_text(
        f"name: {name}\n"
        "dataset: {path: data/d.jsonl}\n"
        "prompt: 'say {{ answer }}'\n"
        f"models:\n{listed}"
        "params: {temperature: 0, max_tokens: 8}\n"
        "scorer: {type: exact, field: answer}\n"
    )
    return path


def gt(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=tmp_path)


def run(tmp_path: Path, spec: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return gt(
        tmp_path, "run", str(spec), "--results", str(tmp_path / "results"),
        "--cache", str(tmp_path / "c.duckdb"), *extra,
    )  # fmt: skip


def run_dir(done: subprocess.CompletedProcess[str]) -> Path:
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("Run: ")]
    return Path(line.split(" -> ", 1)[1])


def run_field(tmp_path: Path, field: str) -> Path:
    return run_dir(run(tmp_path, write_spec(tmp_path / "g.yaml", field)))


def history(tmp_path: Path) -> list[HistoryEntry]:
    return read_history(tmp_path / "results")


def baseline_line(out: str) -> str:
    (line,) = [x for x in out.splitlines() if x.startswith("baseline: ")]
    return line


def test_each_run_appends_an_entry_with_its_figures(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    spec = write_spec(tmp_path / "g.yaml", "wrong", models=("x", "y"))
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit",
         "-qm", "spec"], check=True,
    )  # fmt: skip
    sha = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    first = run(tmp_path, spec)
    assert first.returncode == 0, first.stderr
    entries = history(tmp_path)
    assert [(e.spec, e.model) for e in entries] == [("g", "x"), ("g", "y")]
    x = entries[0]
    manifest = json.loads((tmp_path / "results" / x.run_dir / "manifest.json").read_text())
    assert x.identity == manifest["identity"] and x.finished_at == manifest["finished_at"]
    assert x.started_at == manifest["started_at"] and x.provider == "scripted"
    assert x.run_dir == f"g-x-{x.identity[:12]}"
    assert (x.primary_scorer, x.samples, x.mean_score) == ("score", N, 0.5)
    assert (x.pass_rate.passed, x.pass_rate.n, x.pass_rate.value) == (10, N, 0.5)
    assert x.pass_rate.low is not None and x.pass_rate.high is not None
    assert x.pass_rate.low < 0.5 < x.pass_rate.high and x.pass_rate.method == "wilson"
    assert (x.git_sha, x.git_dirty) == (sha, manifest["git"]["dirty"])
    # A cached re-run is an entry of its own, with the same results.
    again = run(tmp_path, spec, "--model", "x")
    assert again.returncode == 0, again.stderr
    entries = history(tmp_path)
    assert len(entries) == 3
    assert entries[2].fingerprint == x.fingerprint and entries[2].finished_at > x.finished_at
    # The history is hidden from `results/*`: only run directories are listed there.
    assert (tmp_path / "results" / HISTORY_FILE).is_file()
    assert all(Path(p).is_dir() for p in glob.glob(str(tmp_path / "results" / "*")))


def test_list_prints_newest_first_filters_and_json(tmp_path: Path) -> None:
    run(tmp_path, write_spec(tmp_path / "g.yaml", "answer", models=("x", "y")))
    run(tmp_path, write_spec(tmp_path / "h.yaml", "wrong", name="h"))
    run(tmp_path, write_spec(tmp_path / "g.yaml", "answer", models=("x", "y")), "--model", "x")
    root = str(tmp_path / "results")
    listed = gt(tmp_path, "list", root)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ["g/x", "h/x", "g/y", "g/x"]
    entries = history(tmp_path)
    newest = entries[-1]
    assert newest.identity[:12] in lines[0] and newest.run_dir in lines[0]
    assert "score pass 1.000 (95% CI 0.839-1.000, n=20)" in lines[0]
    assert "pass 0.500 (95% CI 0.299-0.701, n=20)" in lines[1]
    assert "git no-git" in lines[0]
    # The first g/x run's directory now holds the later one.
    assert lines[3].endswith("(replaced)") and not lines[0].endswith(")")
    only = gt(tmp_path, "list", root, "--spec", "g", "--model", "x")
    assert [line.split()[2] for line in only.stdout.splitlines()] == ["g/x", "g/x"]
    as_json = gt(tmp_path, "list", root, "--model", "y", "--json")
    assert as_json.returncode == 0, as_json.stderr
    (y,) = json.loads(as_json.stdout)
    assert (y["spec"], y["model"], y["state"]) == ("g", "y", "current")
    assert y["pass_rate"]["n"] == N and y["path"] == str(Path(root) / y["run_dir"])
    none = gt(tmp_path, "list", root, "--spec", "nothing")
    assert none.returncode == 0 and none.stdout == "" and "no matching runs" in none.stderr


def test_list_reports_a_bad_history_line_and_a_missing_root(tmp_path: Path) -> None:
    run(tmp_path, write_spec(tmp_path / "g.yaml"))
    path = tmp_path / "results" / HISTORY_FILE
    with open(path, "a") as out:
        out.write('{"spec": "g"}\n')
    bad = gt(tmp_path, "list", str(tmp_path / "results"))
    assert bad.returncode == 2
    assert f"{path}:2: model: missing (and " in bad.stderr
    gone = gt(tmp_path, "list", str(tmp_path / "nowhere"))
    assert gone.returncode == 2 and "no such directory" in gone.stderr


def test_gate_previous_picks_the_last_run_whose_results_differ(tmp_path: Path) -> None:
    a1 = run_field(tmp_path, "answer")
    b1 = run_field(tmp_path, "wrong")
    gated = gt(tmp_path, "gate", str(b1), "--baseline", "previous")
    assert gated.returncode == 1, gated.stdout + gated.stderr  # 20/20 -> 10/20 regressed
    first = history(tmp_path)[0]
    assert baseline_line(gated.stdout) == (
        f"baseline: {a1} (previous run of g/x, finished {first.finished_at})"
    )
    assert "FAIL" in gated.stdout
    # An identical re-run: the run it replaced is passed over (same results), not compared.
    b2 = run_field(tmp_path, "wrong")
    assert b2 == b1
    again = gt(tmp_path, "gate", str(b2), "--baseline", "previous", "--json")
    assert again.returncode == 1, again.stderr
    decision = json.loads(again.stdout)  # the JSON stays parseable; the line is on stderr
    assert decision["baseline"]["run_dir"] == str(a1) and decision["passed"] is False
    assert decision["baseline"]["chosen"] == "previous"
    (skipped,) = decision["baseline"]["skipped"]
    assert skipped.startswith(b1.name) and "identical" in skipped
    assert f"baseline: {a1} (previous run of g/x" in again.stderr
    assert f"passed over: {b1.name}" in again.stderr
    # The first run has no earlier one: exit 2, and why.
    earliest = gt(tmp_path, "gate", str(a1), "--baseline", "previous")
    assert earliest.returncode == 2
    assert "no earlier run of g/x" in earliest.stderr
    assert "records no run of g/x before this one" in earliest.stderr
    # An explicit directory still works.
    explicit = gt(tmp_path, "gate", str(a1), "--baseline", str(b1))
    assert explicit.returncode == 0, explicit.stdout + explicit.stderr
    assert "baseline: " not in explicit.stdout


def test_gate_previous_skips_replaced_and_removed_directories(tmp_path: Path) -> None:
    b1 = run_field(tmp_path, "wrong")
    a1 = run_field(tmp_path, "answer")
    c1 = run_field(tmp_path, "other")
    assert run_field(tmp_path, "answer") == a1  # a later run of a1's identity replaces it
    gated = gt(tmp_path, "gate", str(c1), "--baseline", "previous")
    assert gated.returncode == 0, gated.stdout + gated.stderr  # 15/20 against 10/20
    assert baseline_line(gated.stdout).startswith(f"baseline: {b1} (previous run of g/x")
    (passed_over,) = [x for x in gated.stdout.splitlines() if x.startswith("passed over: ")]
    assert a1.name in passed_over and "now holds a later run of that identity" in passed_over
    # The baseline's directory removed: nothing is left to pick.
    for file in b1.iterdir():
        file.unlink()
    b1.rmdir()
    none = gt(tmp_path, "gate", str(c1), "--baseline", "previous")
    assert none.returncode == 2, none.stdout
    assert "now holds a later run" in none.stderr and "its directory is gone" in none.stderr


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    run(tmp_path, write_spec(tmp_path / "g.yaml"))
    (entry,) = history(tmp_path)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from gradetrail_lib.history.entries import HistoryEntry, append_entry
        entry = HistoryEntry.model_validate_json(sys.argv[1])
        for i in range(300):
            append_entry(Path({str(tmp_path / "results")!r}),
                         entry.model_copy(update={{"run_dir": f"{{sys.argv[2]}}-{{i}}"}}))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, entry.model_dump_json(), tag])
        for tag in ("p", "q")
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    entries = history(tmp_path)  # every line parses
    assert len(entries) == 601
    assert {e.run_dir for e in entries[1:]} == {f"{t}-{i}" for t in "pq" for i in range(300)}
    append_entry(tmp_path / "results", entry)
    assert len(history(tmp_path)) == 602


def test_a_folder_runs_every_spec_and_exits_with_the_worst(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs / "good.yaml", "answer", name="good", models=("x", "y"))
    write_spec(specs / "broken.yml", "answer", name="broken")
    (specs / "raises.py").write_text("def fn(response):\n    raise ValueError('no')\n")
    broken = specs / "broken.yml"
    broken.write_text(
        broken.read_text().replace(
            "scorer: {type: exact, field: answer}", 'scorer: {type: python, ref: "raises.py:fn"}'
        )
    )
    (specs / "notes.txt").write_text("not a spec")
    done = run(tmp_path, specs)
    assert done.returncode == 1, done.stdout + done.stderr  # broken scored nothing
    out = done.stdout
    spec_lines = [x for x in out.splitlines() if x.startswith("Spec: ")]
    assert spec_lines == [f"Spec: broken ({broken})", f"Spec: good ({specs / 'good.yaml'})"]
    runs = [x.split(" -> ")[0] for x in out.splitlines() if x.startswith("Run: ")]
    assert runs == ["Run: broken/x", "Run: good/x", "Run: good/y"]
    assert out.count("Samples: 20") == 3
    assert out.splitlines()[-1] == "Specs: 2; exit status 1, the worst of (broken 1, good 0)"
    assert [(e.spec, e.model) for e in history(tmp_path)] == [
        ("broken", "x"), ("good", "x"), ("good", "y")
    ]  # fmt: skip
    # --model in a folder: the specs that have it; the others are skipped, and said so.
    only_y = run(tmp_path, specs, "--model", "y")
    assert only_y.returncode == 0, only_y.stdout + only_y.stderr
    assert f"Skipped: {broken} (spec has no model 'y')" in only_y.stdout
    assert [x.split(" -> ")[0] for x in only_y.stdout.splitlines() if "Run: " in x] == [
        "Run: good/y"
    ]


def test_a_folder_with_a_bad_spec_calls_nothing(tmp_path: Path, fake_server: FakeLLMServer) -> None:
    specs = tmp_path / "specs"
    write_addition_dataset(specs / "data" / "add.jsonl", 6)
    write_fake_spec(specs / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    bad = write_spec(specs / "zbad.yaml", name="zbad")
    bad.write_text(bad.read_text() + "colour: blue\n")
    missing = write_spec(specs / "ymissing.yaml", name="ymissing")
    missing.write_text(missing.read_text().replace("data/d.jsonl", "data/none.jsonl"))
    twin = write_spec(specs / "twin.yaml", name="add")
    done = run(tmp_path, specs)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{bad}:8: colour: unknown key" in done.stderr  # every bad spec, by file and line
    assert "none.jsonl" in done.stderr
    assert f"{twin}: name: 'add' is already used by {specs / 'add.yaml'}" in done.stderr
    assert fake_server.calls == 0 and "Run: " not in done.stdout
    assert not (tmp_path / "results").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = run(tmp_path, empty)
    assert nothing.returncode == 2 and "no spec in this folder" in nothing.stderr


def test_models_adds_a_model_cached_and_recorded(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 8)
    url = f"{fake_server.base_url}/v1"
    spec = write_fake_spec(tmp_path / "add.yaml", base_url=url)
    flags = ("--models", "openai_compatible/fake-2,openai_compatible/fake-3", "--base-url", url)
    first = run(tmp_path, spec, *flags)
    assert first.returncode == 0, first.stdout + first.stderr
    runs = [x.split(" -> ")[0] for x in first.stdout.splitlines() if x.startswith("Run: ")]
    assert runs == ["Run: add/fake-2", "Run: add/fake-3"]  # not the spec's fake-1
    assert fake_server.calls == 16
    assert {r["body"]["model"] for r in fake_server.requests} == {"fake-2", "fake-3"}
    second = run(tmp_path, spec, *flags)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("Cache hits: 8/8") == 2 and fake_server.calls == 16
    entries = history(tmp_path)
    assert [e.model for e in entries] == ["fake-2", "fake-3", "fake-2", "fake-3"]
    assert entries[0].fingerprint == entries[2].fingerprint
    manifest = json.loads((tmp_path / "results" / entries[0].run_dir / "manifest.json").read_text())
    assert manifest["model"]["base_url"] == url and manifest["model"]["requested"] == "fake-2"
    listed = gt(tmp_path, "list", str(tmp_path / "results"), "--model", "fake-2")
    assert len(listed.stdout.splitlines()) == 2
    # The spec's own model by provider/name keeps its settings (its base_url).
    own = run(tmp_path, spec, "--models", "openai_compatible/fake-1")
    assert own.returncode == 0, own.stderr
    assert "Run: add/fake-1" in own.stdout and fake_server.calls == 24
    # Bad entries are usage errors before anything runs.
    for bad, message in (
        (("--models", "openai_compatible/fake-9"), "openai_compatible needs base_url"),
        (("--models", "nope/x"), "expected provider/name"),
        (("--models", "fake-9"), "expected provider/name"),
        (("--base-url", url), "give --models"),
        (("--models", "openai/x", "--model", "fake-1"), "not allowed with"),
    ):
        refused = run(tmp_path, spec, *bad)
        assert refused.returncode == 2, (bad, refused.stdout)
        assert message in refused.stderr, (bad, refused.stderr)
    assert fake_server.calls == 24


CODE_FIRST = """
from pathlib import Path

from gradetrail_lib import run_spec


def shouts(response, sample):
    return response == sample["answer"].upper(), "upper-case answer"


SPEC = {
    "name": "shout",
    "dataset": {"path": "data/d.jsonl"},
    "prompt": "say {{ answer }}",
    "model": {"provider": "scripted", "name": "x", "answer_field": "answer"},
    "params": {"temperature": 0, "max_tokens": 8},
    "scorers": [
        {"name": "exact", "type": "exact", "field": "answer"},
        {"name": "shouts", "type": "python", "ref": "shout_eval.py:shouts"},
    ],
}

if __name__ == "__main__":
    here = Path(__file__).parent
    (done,) = run_spec(SPEC, base_dir=here, results_root=here / "results",
                       cache=here / "c.duckdb")
    print(done.run_dir.name, done.summary.scorers["exact"].passed,
          done.summary.scorers["shouts"].passed)
"""


def test_a_code_first_eval_runs_an_in_memory_spec(tmp_path: Path) -> None:
    import gradetrail_lib
    from gradetrail_lib import load_run, run_spec

    assert {"load_run", "run_spec", "Spec", "ModelConfig", "TraceRecord"} <= set(
        gradetrail_lib.__all__
    )
    # Every public name is importable from the package root, and is what its home defines.
    from gradetrail_lib.engine.api import run_spec as defined

    assert run_spec is defined
    for name in gradetrail_lib.__all__:
        assert getattr(gradetrail_lib, name) is not None
    write_data(tmp_path)
    (tmp_path / "shout_eval.py").write_text(CODE_FIRST)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "shout_eval.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    name, exact, shouts = done.stdout.split()
    assert (exact, shouts) == (str(N), "0")
    loaded = load_run(tmp_path / "results" / name)
    assert loaded.manifest.scorer_names == ["exact", "shouts"]
    assert loaded.manifest.scorer_files  # the module's source is in the identity
    assert [e.spec for e in history(tmp_path)] == ["shout"]
    # In process: the same spec as a mapping, another model by provider/name.
    spec = {
        "name": "mem",
        "dataset": {"path": "data/d.jsonl"},
        "prompt": "say {{ answer }}",
        "model": {"provider": "scripted", "name": "x", "answer_field": "answer"},
        "scorer": {"type": "exact", "field": "answer"},
    }
    kwargs = {"base_dir": tmp_path, "results_root": tmp_path / "results", "cache": tmp_path / "c"}
    (mem,) = run_spec(spec, **kwargs)
    assert mem.summary.scorers["score"].passed == N
    assert mem.manifest.spec.path == str(tmp_path / "<in-memory spec>")
    with pytest.raises(InputError) as caught:
        run_spec({**spec, "colour": "blue"}, **kwargs)
    assert (caught.value.field, caught.value.message) == ("colour", "unknown key")
    assert [e.spec for e in history(tmp_path)] == ["shout", "mem"]


def test_run_spec_takes_a_folder_and_models_by_provider_and_name(tmp_path: Path) -> None:
    from gradetrail_lib import run_spec
    from gradetrail_lib.providers.registry import ModelConfig

    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs / "a.yaml", name="a")
    write_spec(specs / "b.yaml", "wrong", name="b")
    kwargs = {"results_root": tmp_path / "results", "cache": tmp_path / "c.duckdb"}
    done = run_spec(specs, **kwargs)
    assert [(d.manifest.spec.name, d.summary.scorers["score"].passed) for d in done] == [
        ("a", N), ("b", N // 2)
    ]  # fmt: skip
    other = ModelConfig(provider="scripted", name="z", answer_field="other")
    more = run_spec(specs / "a.yaml", models=["x", other], **kwargs)
    assert [d.manifest.model.requested for d in more] == ["x", "z"]
    assert more[1].summary.scorers["score"].passed == 15
    assert [e.label for e in history(tmp_path)] == ["a/x", "b/x", "a/x", "a/z"]
