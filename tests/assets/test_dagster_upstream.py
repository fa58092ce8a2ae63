"""A spec whose dataset is another asset of the same `dg` project (`dataset: {asset:
questions}`), behind a two-asset upstream (`raw_questions` → `questions`): the eval's
`dataset` depends on it, reads its value through the IO manager, and its content hash is
the data version. The upstream re-materialized with the same rows leaves `responses`
fresh; with other rows `responses` turns stale, and Dagster's own automation requests the
`dataset` partitions again. The project is made by `create-dagster` and listed by `dg`
(in a slow test of its own); the materializations run in process against one instance
(faster than `dg launch`, which tests/assets/test_dg_project.py runs)."""

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from gradetrail_lib.cli import main
from tests.assets.test_dg_project import BIN, dg_json, environment, run
from tests.support.staleness import StaleStatus, resolver_for

MODEL = "oracle"
SPEC = """name: qa
dataset: {asset: questions}
prompt: "Q: {{ question }}"
models:
  - {provider: scripted, name: oracle, answer_field: answer}
params: {temperature: 0, max_tokens: 16}
scorer: {type: numeric}
"""
UPSTREAM = '''import json
from pathlib import Path

import dagster as dg

RAW = Path(__file__).parent / "raw.jsonl"


@dg.asset
def raw_questions() -> list:
    return [json.loads(line) for line in RAW.read_text().splitlines() if line.strip()]


@dg.asset
def questions(raw_questions: list) -> list:
    """The rows the eval reads: ids given, the ones marked `drop` left out."""
    return [
        {"id": f"q{i}", "question": f"{r['a']} + {r['b']}", "answer": str(r["a"] + r["b"])}
        for i, r in enumerate(raw_questions)
        if not r.get("drop")
    ]
'''


def raw_rows(n: int) -> str:
    return "".join(json.dumps({"a": i, "b": 2 * i}) + "\n" for i in range(n))


def dg_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, *,
    defs_files: dict[str, str], spec_files: dict[str, str],
) -> Path:  # fmt: skip
    """A fresh `dg` project `name` made by `create-dagster` in `tmp_path`, with
    `defs_files` in its defs folder (the upstream assets), `spec_files` in its `specs/`
    and gradetrail's Component over that folder (its cache and results in `tmp_path`);
    its `src` is put on sys.path (so each test's project needs a package name of its own:
    a module imported once stays imported)."""
    if not (BIN / "create-dagster").exists():
        pytest.skip("create-dagster is not installed (pip install -e '.[dev]')")
    env = environment(tmp_path / name, tmp_path / "home")
    run([str(BIN / "create-dagster"), "project", name, "--no-uv-sync"], cwd=tmp_path, env=env)
    folder = tmp_path / name
    defs = folder / "src" / name / "defs"
    for name, text in defs_files.items():
        (defs / name).write_text(text)
    (folder / "specs").mkdir()
    for name, text in spec_files.items():
        (folder / "specs" / name).write_text(text)
    evals = defs / "evals"
    evals.mkdir()
    (evals / "defs.yaml").write_text(
        "type: gradetrail_assets.GradetrailComponent\n"
        "attributes:\n"
        '  specs: ["{{ context.project_root }}/specs"]\n'
        f"  cache: {tmp_path / 'cache.duckdb'}\n"
        f"  results: {tmp_path / 'results'}\n"
    )
    monkeypatch.syspath_prepend(str(folder / "src"))
    return folder


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return dg_project(
        tmp_path, monkeypatch, "upstream_evals",
        defs_files={"upstream.py": UPSTREAM, "raw.jsonl": raw_rows(4)},
        spec_files={"qa.yaml": SPEC},
    )  # fmt: skip


def test_an_upstream_assets_new_content_makes_responses_stale_and_the_same_does_not(
    project: Path, instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    defs = dg.load_from_defs_folder(path_within_project=project)
    deps = dependencies(defs)
    assert deps["qa/dataset"] == ["questions"] and deps["questions"] == ["raw_questions"]
    io = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))}
    upstream = [defs.resolve_assets_def(k) for k in ("raw_questions", "questions")]
    eval_job = defs.resolve_job_def("qa__eval")
    instance.add_dynamic_partitions("qa__models", [MODEL])
    responses = dg.AssetKey(["qa", "responses"])

    def materialize_upstream() -> None:
        assert dg.materialize(upstream, instance=instance, resources=io).success

    def materialize_eval(steps: list[str]) -> dg.ExecuteInProcessResult:
        result = eval_job.execute_in_process(
            instance=instance, partition_key=MODEL, resources=io,
            asset_selection=[dg.AssetKey(["qa", s]) for s in steps],
        )  # fmt: skip
        assert result.success
        return result

    def status() -> StaleStatus:
        return resolver_for(defs, instance).get_status(responses, partition_key=MODEL)

    materialize_upstream()
    first = materialize_eval(["dataset", "responses", "scores", "stats", "report"])
    fetched = first.output_for_node("qa__responses")
    assert fetched.calls == 4
    assert status() == StaleStatus.FRESH
    run_dir = Path(first.output_for_node("qa__scores"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["dataset"]["path"] == "asset:questions" and manifest["samples"] == 4

    # The same rows again: the upstream has new materializations (new data versions of
    # its own), the eval's dataset the same content hash, so responses stays fresh.
    materialize_upstream()
    materialize_eval(["dataset"])
    assert status() == StaleStatus.FRESH

    # Other rows (a raw row marked `drop`): Dagster's automation asks for the dataset
    # partition again (eager), whose new content hash makes responses stale.
    # (A first tick keeps the cursor the next one compares with.)
    cursor = dg.evaluate_automation_conditions(defs=defs, instance=instance).cursor
    raw = project / "src" / "upstream_evals" / "defs" / "raw.jsonl"
    raw.write_text(raw.read_text().replace('{"a": 3', '{"drop": true, "a": 3'))
    materialize_upstream()
    ticked = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    requested = ticked.get_requested_partitions(dg.AssetKey(["qa", "dataset"]))
    assert requested == {MODEL}
    materialize_eval(["dataset"])
    assert status() == StaleStatus.STALE

    again = materialize_eval(["responses", "scores"])
    assert again.output_for_node("qa__responses").calls == 0  # its 3 rows are cached
    rerun = json.loads((Path(again.output_for_node("qa__scores")) / "manifest.json").read_text())
    assert rerun["samples"] == 3 and rerun["identity"] != manifest["identity"]
    assert status() == StaleStatus.FRESH


def dependencies(defs: dg.Definitions) -> dict[str, list[str]]:
    """Each asset's upstream keys, as `dg list defs` lists them (`dependency_keys`)."""
    graph = defs.resolve_asset_graph()
    return {
        key.to_user_string(): sorted(k.to_user_string() for k in graph.get(key).parent_keys)
        for key in graph.get_all_asset_keys()
    }


def dg_listed_dependencies(project: Path, home: Path) -> dict[str, list[str]]:
    """Each asset's upstream keys as `dg list defs` lists them in a process of `dg`'s own,
    once they are checked to be what the definitions say in process (`dependencies`)."""
    listed = dg_json(["list", "defs"], cwd=project, env=environment(project, home))
    deps = {a["asset_key"]: sorted(a["dependency_keys"]) for a in listed["assets"]}
    assert deps == dependencies(dg.load_from_defs_folder(path_within_project=project))
    return deps


@pytest.mark.slow
def test_dg_lists_the_eval_behind_its_upstream_assets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the in-process test reads from the definitions, `dg list defs` shows (a
    process of `dg`'s own: about 4 s, so in CI's run only). The project's package has a
    name of its own (see `dg_project`)."""
    project = dg_project(
        tmp_path, monkeypatch, "listed_upstream_evals",
        defs_files={"upstream.py": UPSTREAM, "raw.jsonl": raw_rows(4)},
        spec_files={"qa.yaml": SPEC},
    )  # fmt: skip
    deps = dg_listed_dependencies(project, tmp_path / "home")
    assert deps["qa/dataset"] == ["questions"] and deps["questions"] == ["raw_questions"]


def test_the_cli_refuses_an_asset_dataset_naming_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "qa.yaml"
    spec.write_text(SPEC)
    assert main(["run", str(spec), "--cache", str(tmp_path / "c.duckdb")]) == 2
    err = capsys.readouterr().err
    assert str(spec) in err and "dataset.asset" in err and "is a Dagster asset" in err
    assert not (tmp_path / "c.duckdb").exists() and not (tmp_path / "results").exists()
    # A bad combination is refused where the spec is read.
    spec.write_text(SPEC.replace("{asset: questions}", "{asset: questions, format: csv}"))
    assert main(["run", str(spec)]) == 2
    assert "not with asset" in capsys.readouterr().err
    done = subprocess.run(
        [sys.executable, "-m", "gradetrail_lib.cli", "plan", str(spec)],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
