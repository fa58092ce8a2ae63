"""The Dagster responses asset lists how many images and documents a spec's prompts
showed (the shipped charts spec: five PNGs), and says nothing of media otherwise."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg

from gradetrail_assets.build import build_definitions
from tests.assets.test_dagster_scorers import settings

REPO = Path(__file__).resolve().parents[2]


def test_the_responses_metadata_counts_the_media(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(REPO / "specs" / "charts.yaml", specs / "charts.yaml")
    shutil.copytree(REPO / "specs" / "data" / "charts", specs / "data" / "charts")
    shutil.copy(REPO / "specs" / "data" / "charts.jsonl", specs / "data" / "charts.jsonl")
    instance.add_dynamic_partitions("charts__models", ["oracle"])
    defs = build_definitions(specs, settings(tmp_path))

    def materialize() -> dg.ExecuteInProcessResult:
        result = defs.resolve_job_def("charts__eval").execute_in_process(
            instance=instance,
            partition_key="oracle",
            asset_selection=[dg.AssetKey(["charts", s]) for s in ("dataset", "responses")],
            resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))},
        )
        assert result.success
        return result

    def data_version(result: dg.ExecuteInProcessResult) -> str:
        (dataset,) = result.asset_materializations_for_node("charts__dataset")
        return str(dataset.tags["dagster/data_version"])

    result = materialize()
    (responses,) = result.asset_materializations_for_node("charts__responses")
    assert responses.metadata["media"] == dg.IntMetadataValue(5)
    assert responses.metadata["requests"] == dg.IntMetadataValue(5)
    # The dataset's data version covers its images: editing one changes it (the JSONL
    # file is unchanged), and the same files give the same version again.
    first = data_version(result)
    assert data_version(materialize()) == first
    chart = specs / "data" / "charts" / "chart-2.png"
    chart.write_bytes((REPO / "specs" / "data" / "charts" / "chart-3.png").read_bytes())
    assert data_version(materialize()) != first
