"""Dagster's steps as Ray jobs (GRADETRAIL_DAGSTER_EXECUTOR=ray, dagster-ray's
`ray_executor`) on a two-node Ray cluster started on this machine: a backfill of 2 specs x
2 models, one `dagster asset materialize` run per partition, all at once, gives the same
records as the in-process executor, and its steps ran on both nodes. (Four runs of two
steps are 8 Ray jobs, more than either node takes at once; a third spec, as before, only
added 4 more of the same.)

A step on Ray costs ~5 s of its own (a Ray job: a supervisor process, then `dagster api
execute_step` importing Dagster and loading the definitions), so the backfill runs the
two steps that make the records, `responses` (the target's calls) and `scores` (the
run directory); `stats` and `report` only read that directory (tests/assets/
test_dagster_graph.py covers them)."""

import json
import logging
import time
from pathlib import Path

import dagster as dg
import pytest

from gradetrail_assets.build import build_definitions
from gradetrail_assets.executors import EXECUTOR_ENV, executor_from_environment
from gradetrail_assets.resources import GradetrailResource
from gradetrail_lib.errors import UsageError
from tests.support.dagster_runs import materialize, run_records, wait_all, write_spec
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.optional import need
from tests.support.ray_cluster import RayCluster

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

SPECS = ("alpha", "beta")
MODELS = ("fake-1", "fake-2")
N = 3
SELECTED = ("responses", "scores")


def in_process_backfill(root: Path, specs: Path, instance: dg.DagsterInstance) -> None:
    settings = GradetrailResource(
        database=str(root / "in_process.duckdb"), results_dir=str(root / "in_process")
    )
    defs = build_definitions(specs, settings)
    for spec in SPECS:
        instance.add_dynamic_partitions(f"{spec}__models", list(MODELS))
        for model in MODELS:
            result = defs.resolve_job_def(f"{spec}__eval").execute_in_process(
                instance=instance,
                partition_key=model,
                asset_selection=[dg.AssetKey([spec, step]) for step in SELECTED],
                resources={"io_manager": dg.FilesystemIOManager(base_dir=str(root / "io"))},
            )
            assert result.success


def test_a_backfill_on_ray_gives_the_records_of_the_in_process_executor(
    tmp_path: Path,
    ray_cluster: RayCluster,
    fake_server: FakeLLMServer,
    instance: dg.DagsterInstance,
) -> None:
    from ray.job_submission import JobStatus, JobSubmissionClient

    specs = tmp_path / "specs"
    for i, spec in enumerate(SPECS):
        write_spec(specs, spec, base_url=f"{fake_server.base_url}/v1", models=MODELS, n=N,
                   offset=10 * i)  # fmt: skip
    in_process_backfill(tmp_path, specs, instance)
    assert fake_server.calls == len(SPECS) * len(MODELS) * N
    fake_server.reset_counts()

    # The deployment's way: a persistent instance, one run per partition launched by the
    # CLI, the definitions from the environment, every step a Ray job.
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with dg.DagsterInstance.from_config(str(home)) as ray_instance:
        for spec in SPECS:
            ray_instance.add_dynamic_partitions(f"{spec}__models", list(MODELS))
    env = {
        **ray_cluster.env,
        "RAY_ADDRESS": ray_cluster.address,
        "DAGSTER_HOME": str(home),
        "GRADETRAIL_DAGSTER_EXECUTOR": "ray",
        "GRADETRAIL_SPECS": str(specs),
        "GRADETRAIL_CACHE": str(tmp_path / "ray.duckdb"),
        "GRADETRAIL_RESULTS": str(tmp_path / "on_ray"),
    }
    started = time.perf_counter()
    runs = [materialize(s, m, cwd=tmp_path, env=env, steps=SELECTED) for s in SPECS for m in MODELS]
    wait_all(runs)
    print(f"backfill on Ray: {time.perf_counter() - started:.1f}s")

    # Each call was sent by a step on Ray (a cache of its own), and every record is the
    # in-process executor's, ids, responses, scores and run identities alike.
    assert fake_server.calls == len(SPECS) * len(MODELS) * N
    on_ray, in_process = run_records(tmp_path / "on_ray"), run_records(tmp_path / "in_process")
    assert len(in_process) == len(SPECS) * len(MODELS)
    assert on_ray == in_process

    # One Ray job per step of every run, all succeeded, spread over both nodes.
    client = JobSubmissionClient(ray_cluster.dashboard_url)
    jobs = [j for j in client.list_jobs() if (j.submission_id or "").startswith("dagster-step-")]
    assert len(jobs) == len(SPECS) * len(MODELS) * len(SELECTED)
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    assert len({j.driver_node_id for j in jobs}) == 2


def test_the_executor_is_chosen_by_name_and_an_unknown_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert executor_from_environment({}) is None  # Dagster's default, as before
    assert executor_from_environment({EXECUTOR_ENV: "multiprocess"}) is dg.multiprocess_executor
    assert executor_from_environment({EXECUTOR_ENV: "in_process"}) is dg.in_process_executor
    specs = tmp_path / "specs"
    write_spec(specs, "alpha", base_url="http://127.0.0.1:1/v1", models=MODELS, n=1)
    monkeypatch.setenv(EXECUTOR_ENV, "threads")
    with pytest.raises(UsageError) as refused:
        build_definitions(specs, GradetrailResource(database=str(tmp_path / "c.duckdb")))
    assert str(refused.value) == (
        "GRADETRAIL_DAGSTER_EXECUTOR='threads': unknown executor; use one of in_process, "
        "multiprocess, ray (or leave it unset for Dagster's default)"
    )


def test_ray_steps_get_gradetrail_variables_by_name_and_a_password_is_never_config(
    caplog: pytest.LogCaptureFixture,
) -> None:
    need("dagster_ray")
    env = {
        EXECUTOR_ENV: "ray",
        "GRADETRAIL_CACHE": "postgresql://gt:s3cret-pw@db.example:5432/gt",
        "GRADETRAIL_SPECS": "/srv/specs",
        "OPENAI_API_KEY": "sk-not-forwarded",
    }
    with caplog.at_level(logging.WARNING, logger="gradetrail_assets"):
        executor = executor_from_environment(env)
    assert executor is not None and executor.name == "gradetrail_ray"
    # The executor's resolved config, as a run would use it: names, never values.
    resolved = executor.config_schema.resolve_config({})  # type: ignore[attr-defined]
    ray_config = resolved.value["config"]["ray"]
    assert ray_config["env_vars"] == [
        "GRADETRAIL_CACHE", "GRADETRAIL_DAGSTER_EXECUTOR", "GRADETRAIL_SPECS",
    ]  # fmt: skip
    assert ray_config["num_cpus"] == 1.0
    assert "s3cret-pw" not in json.dumps(resolved.value)
    assert "PGPASSWORD" in caplog.text and "s3cret-pw" not in caplog.text
