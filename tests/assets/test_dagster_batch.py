"""Batch under Dagster: the nightly schedule tags its runs to go by batch (unless
GRADETRAIL_NIGHTLY_BATCH=0), the resource's setting or the run's tag sends the
`responses` step's misses (and the judges' in `scores`) as batches, its batch ids logged,
and a re-materialization after a failed wait resumes the recorded batches."""

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import BATCH_TAG, GradetrailResource
from tests.support.batch_runs import MODEL_PARTITION, N, project, serve_batches
from tests.support.fake_llm_server import FakeLLMServer

STEPS = ("dataset", "responses", "scores")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    with serve_batches() as srv:
        yield srv


def defs_for(tmp_path: Path, server: FakeLLMServer, **settings: object) -> dg.Definitions:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    project(specs, server.base_url)
    resource = GradetrailResource(
        database=str(tmp_path / "db.duckdb"),
        results_dir=str(tmp_path / "results"),
        batch_poll_s=0.02,
        batch_poll_max_s=0.05,
        **settings,  # type: ignore[arg-type]
    )
    return build_definitions(specs, resource)


def materialize(
    defs: dg.Definitions, instance: dg.DagsterInstance, tmp_path: Path, tags: dict[str, str]
) -> dg.ExecuteInProcessResult:
    instance.add_dynamic_partitions("add__models", [MODEL_PARTITION])
    return defs.resolve_job_def("add__eval").execute_in_process(
        instance=instance,
        partition_key=MODEL_PARTITION,
        asset_selection=[dg.AssetKey(["add", s]) for s in STEPS],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))},
        tags=tags,
        raise_on_error=False,
    )


def logged(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult) -> list[str]:
    return [entry.user_message for entry in instance.all_logs(result.run_id)]


@pytest.mark.parametrize(("variable", "tag"), [(None, "all"), ("0", "off"), ("1", "all")])
def test_the_nightly_schedule_goes_by_batch_unless_turned_off(
    tmp_path: Path,
    instance_on_files: dg.DagsterInstance,
    server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    variable: str | None,
    tag: str,
) -> None:
    if variable is not None:
        monkeypatch.setenv("GRADETRAIL_NIGHTLY_BATCH", variable)
    defs = defs_for(tmp_path, server)
    instance_on_files.add_dynamic_partitions("add__models", [MODEL_PARTITION])
    tick = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    schedule = defs.resolve_schedule_def("add__nightly")
    requests = schedule(
        dg.build_schedule_context(instance=instance_on_files, scheduled_execution_time=tick)
    )
    assert isinstance(requests, list) and requests
    assert all(r.tags[BATCH_TAG] == tag for r in requests)


def test_a_run_tagged_batch_sends_targets_then_judges_by_batch_and_logs_the_ids(
    tmp_path: Path, instance: dg.DagsterInstance, server: FakeLLMServer
) -> None:
    result = materialize(defs_for(tmp_path, server), instance, tmp_path, {BATCH_TAG: "all"})
    assert result.success
    assert server.calls == 0
    batches = list(server.batches.batches.values())
    assert [b.api for b in batches] == ["anthropic", "openai"]
    messages = logged(instance, result)
    for batch in batches:
        assert any(m.startswith(f"batch {batch.id}: submitted") for m in messages), batch.id
    event = instance.get_latest_materialization_event(dg.AssetKey(["add", "responses"]))
    assert event is not None and event.asset_materialization is not None
    metadata = event.asset_materialization.metadata
    paid, saved = metadata["cost_usd"], metadata["cost_saved_usd"]
    assert isinstance(paid, dg.FloatMetadataValue) and isinstance(saved, dg.FloatMetadataValue)
    # Half price by batch: what was saved is what was paid.
    assert paid.value is not None and paid.value > 0
    assert saved.value == pytest.approx(paid.value)
    event = instance.get_latest_materialization_event(dg.AssetKey(["add", "scores"]))
    assert event is not None and event.asset_materialization is not None
    scores = event.asset_materialization.metadata
    assert isinstance(scores["cost_saved_usd"], dg.FloatMetadataValue)
    assert isinstance(scores["cost_paid_usd"], dg.FloatMetadataValue)
    assert scores["cost_saved_usd"].value == pytest.approx(scores["cost_paid_usd"].value)


def test_the_resources_setting_targets_batches_the_targets_only(
    tmp_path: Path, instance: dg.DagsterInstance, server: FakeLLMServer
) -> None:
    defs = defs_for(tmp_path, server, batch="targets")
    assert materialize(defs, instance, tmp_path, {}).success
    event = instance.get_latest_materialization_event(dg.AssetKey(["add", "responses"]))
    assert event is not None and event.asset_materialization is not None
    assert "cost_saved_usd" in event.asset_materialization.metadata
    assert [b.api for b in server.batches.batches.values()] == ["anthropic"]
    assert server.calls == N  # the judge's


def test_a_rematerialization_after_a_failed_wait_resumes_the_recorded_batch(
    tmp_path: Path, instance: dg.DagsterInstance, server: FakeLLMServer
) -> None:
    server.batches.delay_s = 60.0  # still running at the timeout, however loaded the machine
    defs = defs_for(tmp_path, server, batch_timeout_s=0.3)
    failed = materialize(defs, instance, tmp_path, {BATCH_TAG: "all"})
    assert not failed.success
    assert len(server.batches.batches) == 1
    # The provider finishes it 0.3 s from now, as the re-materialization waits on it (or
    # before); the judges' batch to come takes 0.1 s.
    (pending,) = server.batches.batches.values()
    pending.ends = time.time() + 0.3
    server.batches.delay_s = 0.1
    resumed = materialize(defs_for(tmp_path, server), instance, tmp_path, {BATCH_TAG: "all"})
    assert resumed.success
    assert [b.api for b in server.batches.batches.values()] == ["anthropic", "openai"]
    submitted = server.batches.submitted
    assert len(submitted) == len(set(submitted)) == 2 * N
