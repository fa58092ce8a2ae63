"""Dagster on Postgres (step 14, item 4): an instance configured by deploy/dagster.yaml as
shipped, on the throwaway Postgres. Two partitions materialized at once by the
multiprocess executor, as two `dagster asset materialize` runs, share a Postgres response
cache: every answer is stored once and none is missing, and a judge request both
partitions make is sent once (claimed by one, the other waits for its answer). The
nightly schedule and the model-release sensor are evaluated against that instance, their
partitions kept in Postgres."""

import json
import shutil
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from gradetrail_assets.build import build_definitions
from gradetrail_assets.factory import DB_POOL
from gradetrail_assets.resources import GradetrailResource
from tests.conftest import REPO
from tests.support.dagster_runs import materialize, run_records, wait_all, write_spec
from tests.support.eval_runs import JUDGE_PROMPT, responder
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

N = 12
MODELS = ("fake-1", "fake-2")
# The steps that use the cache: responses (the target's calls), scores (the judge's).
SELECTED = ("responses", "scores")
# Both partitions' targets answer alike, so both send the judge the same requests.
JUDGED = """scorers:
  - {{name: num, type: numeric}}
  - name: judge
    type: judge
    prompt_file: judge.j2
    model: {{provider: openai_compatible, name: fake-judge, base_url: "{base_url}"}}
"""


@pytest.fixture
def dagster_home(
    tmp_path: Path, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """A DAGSTER_HOME holding deploy/dagster.yaml, its database a fresh one on the
    session's Postgres (Dagster's own; the cache gets another); the variables that point
    at it are set here and returned for the runs' processes."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    database = postgres_server.create_database().rsplit("/", 1)[1]
    env = {
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(postgres_server.port),
        "DAGSTER_PG_DB": database,
        "DAGSTER_PG_USERNAME": "postgres",
        "DAGSTER_PG_PASSWORD": "",  # the throwaway server trusts loopback
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def pg_instance(env: dict[str, str]) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(env["DAGSTER_HOME"])


def write_project(root: Path, base_url: str, watch: bool = False) -> Path:
    specs = root / "specs"
    write_spec(specs, "add", base_url=base_url, models=MODELS, n=N,
               scorers=JUDGED.format(base_url=base_url))  # fmt: skip
    (specs / "judge.j2").write_text(JUDGE_PROMPT)
    if watch:
        with open(specs / "add.yaml", "a") as out:
            out.write(
                f"watch: {{provider: openai_compatible, match: 'fake-*', base_url: '{base_url}'}}\n"
            )
    return specs


def test_the_shipped_config_puts_storage_and_the_run_queue_on_postgres(
    dagster_home: dict[str, str],
) -> None:
    from dagster_postgres import (
        PostgresEventLogStorage,
        PostgresRunStorage,
        PostgresScheduleStorage,
    )

    with pg_instance(dagster_home) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)
        # What the daemon's queue reads (not the coordinator's own defaults).
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None and queue.max_concurrent_runs == 4
        assert queue.tag_concurrency_limits == [
            {"key": "gradetrail/trigger", "value": "model_release", "limit": 1}
        ]


def test_two_partitions_at_once_store_every_answer_once_in_the_postgres_cache(
    tmp_path: Path, dagster_home: dict[str, str], postgres_url: str
) -> None:
    with FakeLLMServer(latency_s=0.01, responder=responder) as server:
        specs = write_project(tmp_path, f"{server.base_url}/v1")
        with pg_instance(dagster_home) as instance:
            instance.add_dynamic_partitions("add__models", list(MODELS))
            # Dagster makes a pool's row on first use, and two runs starting at once on a
            # fresh database may both insert it (a unique violation fails one of them), so
            # the pool is set up front, as docs/dagster.md tells a deployment to do.
            instance.event_log_storage.initialize_concurrency_limit_to_default(DB_POOL)
        env = {
            **dagster_home,
            "GRADETRAIL_DAGSTER_EXECUTOR": "multiprocess",
            "GRADETRAIL_SPECS": str(specs),
            "GRADETRAIL_CACHE": postgres_url,
            "GRADETRAIL_RESULTS": str(tmp_path / "results"),
        }
        started = time.perf_counter()
        wait_all([materialize("add", m, cwd=tmp_path, env=env, steps=SELECTED) for m in MODELS])
        print(f"two partitions at once: {time.perf_counter() - started:.1f}s")
        sent = Counter(
            (r["body"]["model"], json.dumps(r["body"]["messages"])) for r in server.requests
        )

    # The runs, their steps (each in its own process) and materializations are in Postgres.
    with pg_instance(dagster_home) as instance:
        runs = instance.get_runs()
        assert sorted(r.tags["dagster/partition"] for r in runs) == sorted(MODELS)
        assert {r.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}
        for run in runs:
            starts = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
            pids = {e.dagster_event.pid for e in starts if e.dagster_event is not None}
            assert len(pids) == len(SELECTED)  # the multiprocess executor: a process a step
        scored = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["add", "scores"])), limit=10
        ).records
        assert sorted(r.partition_key or "" for r in scored) == sorted(MODELS)

    # Every answer the records use is in the cache, each key stored once.
    records = run_records(tmp_path / "results")
    assert len(records) == len(MODELS)
    used = {
        (call["role"], call["request_key"])
        for run in records.values()
        for record in run
        for call in record["calls"]
    }
    import psycopg  # the `postgres` extra: the fixtures skip these tests without it

    with psycopg.connect(postgres_url) as connection:
        stored = dict(connection.execute("SELECT key, count(*) FROM responses GROUP BY key"))
    assert set(stored.values()) == {1}
    assert {key for _, key in used} == set(stored)
    judge_keys = {key for role, key in used if role == "judge"}
    # The two partitions' targets differ (their models); their judge requests are the same.
    assert len(stored) == len(MODELS) * N + N and len(judge_keys) == N
    for run in records.values():
        assert [r["scores"]["judge"]["score"] for r in run] == [1.0] * N

    # Every request was sent once: a judge request both partitions found missing at the
    # same moment is claimed by one, and the other takes its answer (cache.claims).
    targets = {k: v for k, v in sent.items() if k[0] != "fake-judge"}
    assert len(targets) == len(MODELS) * N and set(targets.values()) == {1}
    judged = [v for k, v in sent.items() if k[0] == "fake-judge"]
    assert len(judged) == N and set(judged) == {1}


def test_the_nightly_schedule_and_the_release_sensor_against_the_postgres_instance(
    tmp_path: Path, dagster_home: dict[str, str], fake_server: FakeLLMServer
) -> None:
    fake_server.models = ["fake-1", "fake-2", "other"]
    specs = write_project(tmp_path, f"{fake_server.base_url}/v1", watch=True)
    defs = build_definitions(specs, GradetrailResource(database=str(tmp_path / "c.duckdb")))

    with pg_instance(dagster_home) as instance:
        # The spec's models become partitions, kept in Postgres.
        added = defs.resolve_sensor_def("gradetrail_spec_models")(
            dg.build_sensor_context(instance=instance)
        )
        assert isinstance(added, dg.SensorResult)
        (request,) = added.dynamic_partitions_requests
        assert isinstance(request, dg.AddDynamicPartitionsRequest)
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))

        releases = defs.resolve_sensor_def("gradetrail_model_releases")
        first = releases(dg.build_sensor_context(instance=instance))
        assert isinstance(first, dg.SensorResult) and first.run_requests == []
        fake_server.models = [*fake_server.models, "fake-3"]
        second = releases(dg.build_sensor_context(instance=instance, cursor=first.cursor))
        assert isinstance(second, dg.SensorResult)
        assert [(r.partition_key, r.job_name) for r in second.run_requests] == [
            ("fake-3", "add__eval")
        ]
        assert second.run_requests[0].tags == {"gradetrail/trigger": "model_release"}
        (new,) = second.dynamic_partitions_requests
        assert isinstance(new, dg.AddDynamicPartitionsRequest)
        instance.add_dynamic_partitions(new.partitions_def_name, list(new.partition_keys))

    # Another instance on the same database (another machine) sees those partitions: the
    # nightly schedule requests all three, and a retried tick the same run keys.
    tick = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    schedule = defs.resolve_schedule_def("add__nightly")
    with pg_instance(dagster_home) as other:
        requests = schedule(
            dg.build_schedule_context(instance=other, scheduled_execution_time=tick)
        )
        again = schedule(dg.build_schedule_context(instance=other, scheduled_execution_time=tick))
    assert isinstance(requests, list) and isinstance(again, list)
    assert sorted(r.partition_key or "" for r in requests) == ["fake-1", "fake-2", "fake-3"]
    assert [r.run_key for r in requests] == [r.run_key for r in again]
    assert {r.tags["gradetrail/batch"] for r in requests} == {"all"}
