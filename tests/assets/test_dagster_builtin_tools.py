"""The built-in tools in Dagster: the responses asset runs the cases' code once, in the
sandbox, and the scores asset, which replays every trajectory, runs none (both reach the
execution cache beside the response cache)."""

import json
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

import gradetrail_lib.agents.workspace as workspace_module
from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import GradetrailResource
from tests.agents.test_builtin_tools import SHIPPED, needs_bwrap

CALLS = 9  # the shipped CSV agent's tool calls: 2 + 3 + 2 + 2


@needs_bwrap
def test_responses_run_the_code_and_scores_replay_it_from_the_cache(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    real = workspace_module.run_program

    def counted(program: str, *args: Any) -> Any:
        ran.append(program)
        return real(program, *args)

    monkeypatch.setattr(workspace_module, "run_program", counted)
    specs = tmp_path / "specs"
    (specs / "data").mkdir(parents=True)
    (specs / "scorers").mkdir()
    shutil.copy(SHIPPED, specs / SHIPPED.name)
    shutil.copy(SHIPPED.parent / "data" / "csv_stats.jsonl", specs / "data")
    shutil.copy(SHIPPED.parent / "scorers" / "tool_output.py", specs / "scorers")
    defs = build_definitions(
        specs,
        GradetrailResource(
            database=str(tmp_path / "gradetrail.duckdb"), results_dir=str(tmp_path / "results")
        ),
    )
    instance.add_dynamic_partitions("csv_stats__models", ["oracle"])

    def materialize(steps: tuple[str, ...]) -> dg.ExecuteInProcessResult:
        result = defs.resolve_job_def("csv_stats__eval").execute_in_process(
            instance=instance,
            partition_key="oracle",
            asset_selection=[dg.AssetKey(["csv_stats", s]) for s in steps],
            resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "io"))},
        )
        assert result.success
        return result

    materialize(("dataset", "responses"))
    assert len(ran) == CALLS
    scores = materialize(("scores",))
    assert len(ran) == CALLS  # the replay's tool results came from the execution cache
    event = scores.asset_materializations_for_node("csv_stats__scores")[0]
    run_dir = Path(str(event.metadata["run_dir"].value))
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["scores"]["computed"]["score"] for r in records] == [1.0] * 4
