"""A spec whose model comes from another asset of the same `dg` project (`models: - {provider:
openai_compatible, name: candidate, asset: served_model}`), behind a two-asset upstream
(`checkpoint` → `served_model`, as a fine-tuning job would materialize the served model's
name and URL), beside a model the spec lists (`oracle`). The spec's `model` asset resolves
each partition's model, its hash the data version: a new checkpoint makes `candidate`'s
`responses` stale (not `oracle`'s) and Dagster's own automation requests it; the same
checkpoint again leaves it fresh. The model answers from the loopback fake server, which
records the model each request named. The project is made by `create-dagster` and listed
by `dg` (in a slow test of its own); the materializations run in process against one instance (as
test_dagster_upstream.py's)."""

import json
from pathlib import Path

import dagster as dg
import pytest

from gradetrail_lib.cli import main
from tests.assets.test_dagster_upstream import dependencies, dg_listed_dependencies, dg_project
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.staleness import StaleStatus, resolver_for

SPEC = """name: tune
dataset: {path: sums.jsonl}
prompt: "Q: {{ a }} + {{ b }}"
models:
  - {provider: scripted, name: oracle, answer_field: answer}
  - {provider: openai_compatible, name: candidate, asset: served_model}
params: {temperature: 0, max_tokens: 16}
scorer: {type: numeric}
"""
ROWS = "".join(
    json.dumps({"id": f"s{i}", "a": i, "b": 2 * i, "answer": str(3 * i)}) + "\n" for i in range(3)
)
UPSTREAM = '''from pathlib import Path

import dagster as dg

HERE = Path(__file__).parent


@dg.asset
def checkpoint() -> int:
    """The fine-tuning job's latest checkpoint (here: the number in a file)."""
    return int((HERE / "checkpoint.txt").read_text())


@dg.asset
def served_model(checkpoint: int) -> dict:
    """Where the checkpoint is served: the model's name and the server's URL."""
    url = (HERE / "endpoint.txt").read_text().strip()
    return {"model": f"openai_compatible/ckpt-{checkpoint}", "base_url": url}
'''


@pytest.fixture
def server() -> FakeLLMServer:
    with FakeLLMServer() as srv:
        yield srv


def checkpoint_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: FakeLLMServer, name: str
) -> Path:
    return dg_project(
        tmp_path, monkeypatch, name,
        defs_files={"upstream.py": UPSTREAM, "checkpoint.txt": "7\n",
                    "endpoint.txt": f"{server.base_url}/v1\n"},
        spec_files={"tune.yaml": SPEC, "sums.jsonl": ROWS},
    )  # fmt: skip


@pytest.mark.slow
def test_dg_lists_the_model_asset_behind_its_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: FakeLLMServer
) -> None:
    """What the in-process test reads from the definitions, `dg list defs` shows (a
    process of `dg`'s own: about 4 s, so in CI's run only)."""
    project = checkpoint_project(tmp_path, monkeypatch, server, "listed_checkpoint_evals")
    deps = dg_listed_dependencies(project, tmp_path / "home")
    assert deps["tune/model"] == ["served_model"] and deps["served_model"] == ["checkpoint"]


def test_a_new_checkpoint_makes_its_responses_stale_and_automation_asks_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance,
    server: FakeLLMServer,
) -> None:  # fmt: skip
    project = checkpoint_project(tmp_path, monkeypatch, server, "checkpoint_evals")
    defs = dg.load_from_defs_folder(path_within_project=project)
    deps = dependencies(defs)
    assert deps["tune/model"] == ["served_model"] and deps["served_model"] == ["checkpoint"]
    assert deps["tune/responses"] == ["tune/dataset", "tune/model"]
    io = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))}
    upstream = [defs.resolve_assets_def(k) for k in ("checkpoint", "served_model")]
    eval_job = defs.resolve_job_def("tune__eval")
    partitions = ["oracle", "candidate"]
    instance.add_dynamic_partitions("tune__models", partitions)
    responses = dg.AssetKey(["tune", "responses"])
    requested_calls = 0

    def materialize_upstream() -> None:
        assert dg.materialize(upstream, instance=instance, resources=io).success

    def materialize_eval(partition: str, steps: list[str]) -> dg.ExecuteInProcessResult:
        result = eval_job.execute_in_process(
            instance=instance, partition_key=partition, resources=io,
            asset_selection=[dg.AssetKey(["tune", s]) for s in steps],
        )  # fmt: skip
        assert result.success
        return result

    def status(partition: str) -> StaleStatus:
        return resolver_for(defs, instance).get_status(responses, partition_key=partition)

    def models_sent() -> list[str]:
        """The model each request named since the last look."""
        nonlocal requested_calls
        sent = [r["body"]["model"] for r in server.requests[requested_calls:]]
        requested_calls = len(server.requests)
        return sent

    def manifest_of(result: dg.ExecuteInProcessResult) -> dict:
        return json.loads(
            (Path(result.output_for_node("tune__scores")) / "manifest.json").read_text()
        )

    watched = dg.AssetSelection.assets(["tune", "model"], responses)

    def tick(cursor: object) -> tuple[object, dict[str, set[str]]]:
        ticked = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, asset_selection=watched, cursor=cursor
        )
        asked = {
            step: ticked.get_requested_partitions(dg.AssetKey(["tune", step]))
            for step in ("model", "responses")
        }
        return ticked.cursor, asked

    materialize_upstream()
    cursor, _ = tick(None)  # a first tick keeps the cursor the next ones compare with
    materialize_eval("oracle", ["dataset", "model", "responses"])
    first = materialize_eval("candidate", ["dataset", "model", "responses", "scores"])
    assert models_sent() == ["ckpt-7"] * 3
    model = manifest_of(first)["model"]
    assert model["requested"] == "ckpt-7" and model["provider"] == "openai_compatible"
    assert model["base_url"] == f"{server.base_url}/v1"
    assert {p: status(p) for p in partitions} == dict.fromkeys(partitions, StaleStatus.FRESH)
    cursor, _ = tick(cursor)

    # The same checkpoint again: new materializations upstream, the same model, so
    # `model` comes out with the same data version and responses stays fresh.
    materialize_upstream()
    materialize_eval("candidate", ["model"])
    assert status("candidate") == StaleStatus.FRESH
    cursor, asked = tick(cursor)
    assert not asked["responses"]

    # A new checkpoint: `candidate`'s model changes, its responses turn stale and the
    # automation asks for them; `oracle`'s stay fresh and are not asked for.
    (project / "src" / "checkpoint_evals" / "defs" / "checkpoint.txt").write_text("8\n")
    materialize_upstream()
    cursor, asked = tick(cursor)
    # (Eager follows the upstream; `oracle`'s `model` was asked for at the last tick,
    # which here ran nothing, and a request counts as handled.)
    assert "candidate" in asked["model"]
    for p in partitions:
        materialize_eval(p, ["model"])
    assert status("candidate") == StaleStatus.STALE and status("oracle") == StaleStatus.FRESH
    cursor, asked = tick(cursor)
    assert asked["responses"] == {"candidate"}

    again = materialize_eval("candidate", ["responses", "scores"])
    assert models_sent() == ["ckpt-8"] * 3
    assert manifest_of(again)["model"]["requested"] == "ckpt-8"
    assert status("candidate") == StaleStatus.FRESH


def test_the_cli_refuses_an_asset_model_naming_the_entry_and_runs_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tune.yaml").write_text(SPEC)
    (tmp_path / "sums.jsonl").write_text(ROWS)
    cache, results = tmp_path / "c.duckdb", tmp_path / "results"
    argv = ["run", str(tmp_path / "tune.yaml"), "--cache", str(cache), "--results", str(results)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'tune.yaml'}" in err and "models[1].asset" in err
    assert "value of Dagster asset 'served_model'" in err
    assert not cache.exists() and not results.exists()
    # The spec's other model runs as usual.
    assert main([*argv, "--model", "oracle"]) == 0
