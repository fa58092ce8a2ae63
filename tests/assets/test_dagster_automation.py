"""The nightly schedule and the sensors, evaluated with Dagster's own test contexts."""

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import GradetrailResource
from tests.conftest import write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer


def make_defs(tmp_path: Path, server: FakeLLMServer, watch: bool = True) -> dg.Definitions:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    write_addition_dataset(specs / "data" / "add.jsonl", 4)
    spec = write_spec(specs / "add.yaml", base_url=f"{server.base_url}/v1")
    if watch:
        with open(spec, "a") as out:
            out.write(
                "watch: {provider: openai_compatible, match: 'fake-2*', "
                f"base_url: '{server.base_url}/v1'}}\n"
            )
    settings = GradetrailResource(database=str(tmp_path / "db.duckdb"))
    return build_definitions(specs, settings)


def test_release_sensor_adds_one_partition_and_one_run_per_new_model(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    fake_server.models = ["fake-1", "fake-2-base", "other"]
    defs = make_defs(tmp_path, fake_server)
    sensor = defs.resolve_sensor_def("gradetrail_model_releases")

    # First look: what is listed now is the baseline, not a release.
    first = sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(first, dg.SensorResult)
    assert first.run_requests == []
    assert first.cursor is not None

    fake_server.models = [*fake_server.models, "fake-2-new", "unrelated-9"]
    second = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert isinstance(second, dg.SensorResult)
    assert [r.partition_key for r in second.run_requests] == ["fake-2-new"]
    assert second.run_requests[0].job_name == "add__eval"
    (added,) = second.dynamic_partitions_requests
    assert isinstance(added, dg.AddDynamicPartitionsRequest)
    assert list(added.partition_keys) == ["fake-2-new"]
    assert added.partitions_def_name == "add__models"
    # A sensor called directly does not apply its partition requests (docs/performance.md).
    instance.add_dynamic_partitions("add__models", list(added.partition_keys))

    third = sensor(dg.build_sensor_context(instance=instance, cursor=second.cursor))
    assert isinstance(third, dg.SensorResult)
    assert third.run_requests == [] and third.dynamic_partitions_requests == []


def test_release_sensor_skips_with_a_reason_when_the_provider_is_down(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    defs = make_defs(tmp_path, fake_server)
    sensor = defs.resolve_sensor_def("gradetrail_model_releases")
    fake_server.stop()
    result = sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(result, dg.SkipReason)
    assert "model listing failed" in (result.skip_message or "")
    assert "add:" in (result.skip_message or "")


def test_release_sensor_skips_when_unauthorized(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", 4)
    spec = write_spec(specs / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    with open(spec, "a") as out:
        out.write("watch: {provider: openai, match: 'gpt-*', api_key_env: GT_UNSET_KEY_VAR}\n")
    defs = build_definitions(specs, GradetrailResource(database=str(tmp_path / "db.duckdb")))
    result = defs.resolve_sensor_def("gradetrail_model_releases")(
        dg.build_sensor_context(instance=instance)
    )
    assert isinstance(result, dg.SkipReason)
    assert "GT_UNSET_KEY_VAR is not set" in (result.skip_message or "")


def test_spec_models_sensor_registers_listed_models_once(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    defs = make_defs(tmp_path, fake_server, watch=False)
    sensor = defs.resolve_sensor_def("gradetrail_spec_models")
    result = sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(result, dg.SensorResult)
    (added,) = result.dynamic_partitions_requests
    assert isinstance(added, dg.AddDynamicPartitionsRequest)
    assert list(added.partition_keys) == ["fake-1"]
    instance.add_dynamic_partitions("add__models", ["fake-1"])
    assert isinstance(sensor(dg.build_sensor_context(instance=instance)), dg.SkipReason)


def test_nightly_schedule_requests_every_partition_with_idempotent_run_keys(
    tmp_path: Path, instance_on_files: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    defs = make_defs(tmp_path, fake_server, watch=False)
    instance_on_files.add_dynamic_partitions("add__models", ["fake-1", "fake-2"])
    schedule = defs.resolve_schedule_def("add__nightly")
    assert schedule.cron_schedule == "0 2 * * *"
    assert schedule.execution_timezone == "UTC"
    tick = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    requests = schedule(
        dg.build_schedule_context(instance=instance_on_files, scheduled_execution_time=tick)
    )
    assert isinstance(requests, list)
    assert sorted(r.partition_key or "" for r in requests) == ["fake-1", "fake-2"]
    again = schedule(
        dg.build_schedule_context(instance=instance_on_files, scheduled_execution_time=tick)
    )
    assert isinstance(again, list)
    assert [r.run_key for r in requests] == [r.run_key for r in again]
    assert len({r.run_key for r in requests}) == 2
    next_night = schedule(
        dg.build_schedule_context(
            instance=instance_on_files,
            scheduled_execution_time=datetime(2026, 12, 3, 2, 0, tzinfo=UTC),
        )
    )
    assert isinstance(next_night, list)
    assert {r.run_key for r in next_night}.isdisjoint({r.run_key for r in requests})


def test_a_release_is_checked_against_the_incumbent_until_decided(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    """With `watch.incumbent` the sensor's run is the release job; materialized, the
    release asset runs the new model against the incumbent until the confidence sequence
    decides: the incumbent answers wrong on every other case, the release never, so the
    release is named better after the first chunk or two of 400 cases, and the metadata
    says so with the cases used and the cost."""
    from gradetrail_lib.results.runs import load_run
    from tests.support.fake_llm_server import default_responder

    def responder(body: dict[str, object]) -> str:
        answer = default_responder(body)  # type: ignore[arg-type]
        wrong = body.get("model") == "fake-1" and len(str(body)) % 2 == 0
        return "-1" if wrong else answer

    fake_server.responder = responder
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", 400, wrong_every=10**6)
    spec = write_spec(specs / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    with open(spec, "a") as out:
        out.write(
            "watch: {provider: openai_compatible, match: 'fake-2*', incumbent: fake-1, "
            f"base_url: '{fake_server.base_url}/v1'}}\n"
        )
    settings = GradetrailResource(
        database=str(tmp_path / "db.duckdb"), results_dir=str(tmp_path / "results")
    )
    defs = build_definitions(specs, settings)
    sensor = defs.resolve_sensor_def("gradetrail_model_releases")
    fake_server.models = ["fake-1"]
    first = sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(first, dg.SensorResult)
    fake_server.models = ["fake-1", "fake-2-new"]
    second = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert isinstance(second, dg.SensorResult)
    (request,) = second.run_requests
    assert (request.job_name, request.partition_key) == ("add__release", "fake-2-new")
    # The eval job does not hold the release asset; the release job holds only it.
    eval_keys = defs.resolve_job_def("add__eval").asset_layer.executable_asset_keys
    assert dg.AssetKey(["add", "release"]) not in eval_keys

    instance.add_dynamic_partitions("add__models", ["fake-2-new"])
    result = defs.resolve_job_def("add__release").execute_in_process(
        instance=instance, partition_key="fake-2-new"
    )
    assert result.success
    (event,) = result.asset_materializations_for_node("add__release")
    meta = event.metadata
    assert meta["verdict"].value == "B: fake-2-new"
    assert meta["method"].value == "betting-cs-wsr-2024"
    used = meta["samples_used"].value
    assert isinstance(used, int) and 0 < used < 400 and meta["samples_available"].value == 400
    assert meta["sequence_low"].value > 0  # type: ignore[operator]
    assert "cost_usd" in meta and "saved_usd" in meta
    # Only the cases used were sent, each once per model.
    sent = [r["body"].get("model") for r in fake_server.requests]
    assert sent.count("fake-2-new") == used and sent.count("fake-1") == used
    run = load_run(Path(str(meta["challenger_run"].value)))
    assert run.manifest.sequential is not None and run.manifest.sequential["verdict"] == "B"
