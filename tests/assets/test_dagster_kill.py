"""A Dagster run killed (SIGKILL) while the responses asset sends, then materialized again
in another process: only what was in flight is sent again (each response was cached as it
arrived), and every sample ends scored (issue 15 item 11)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb

from gradetrail_assets.build import build_definitions
from gradetrail_lib.cache.responses import ResponseCache
from tests.assets.test_dagster_scorers import settings
from tests.conftest import dagster_home, write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer, last_user_message

MODEL = "fake-1"
N, CONCURRENCY = 40, 4

# The responses step of the partition, as `dagster dev` would run it: a process of its
# own on an instance in a folder (argv: project, instance folder, concurrency).
CHILD = """
import sys
from pathlib import Path

import dagster as dg

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import GradetrailResource

project, home, concurrency = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
settings = GradetrailResource(
    database=str(project / "gradetrail.duckdb"),
    results_dir=str(project / "results"),
    concurrency=concurrency,
)
defs = build_definitions(project / "specs", settings)
with dg.instance_for_test(temp_dir=home) as instance:
    instance.add_dynamic_partitions("add__models", ["fake-1"])
    defs.resolve_job_def("add__eval").execute_in_process(
        instance=instance,
        partition_key="fake-1",
        asset_selection=[dg.AssetKey(["add", "dataset"]), dg.AssetKey(["add", "responses"])],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(project / "storage"))},
    )
"""


def received(server: FakeLLMServer) -> int:
    return sum(1 for r in server.requests if r["status"] == 200)


def test_a_run_killed_during_responses_sends_again_only_what_was_in_flight(
    tmp_path: Path, dagster_home_template: Path
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", N)
    home = dagster_home(dagster_home_template, tmp_path / "dagster_home")
    database = tmp_path / "gradetrail.duckdb"
    # Rounds of CONCURRENCY calls 0.15 s apart: the kill comes halfway, 0.75 s before the
    # step would end, and the test polls every 10 ms.
    with FakeLLMServer(latency_s=0.15) as server:
        write_spec(specs / "add.yaml", base_url=f"{server.base_url}/v1")
        with open(tmp_path / "child.log", "w") as log:
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(tmp_path), str(home), str(CONCURRENCY)],
                cwd=tmp_path,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + 120
            while received(server) < N // 2 and time.monotonic() < deadline:
                assert child.poll() is None, (tmp_path / "child.log").read_text()[-3000:]
                time.sleep(0.01)
            sent_before_kill = received(server)
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        assert child.returncode == -signal.SIGKILL
        assert N // 2 <= sent_before_kill < N, "the responses step ended before it was killed"

        cached = ResponseCache(database).count()
        # Sent but not answered: at most what was in flight. An answer received is in the
        # cache's journal at once, which opening the cache (above) stored.
        assert sent_before_kill - CONCURRENCY <= cached < N
        server.reset_counts()

        # The same instance (it holds the killed run) from another process: this one.
        storage = dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))
        with dg.instance_for_test(temp_dir=str(home)) as instance:
            result = (
                build_definitions(specs, settings(tmp_path))
                .resolve_job_def("add__eval")
                .execute_in_process(
                    instance=instance,
                    partition_key=MODEL,
                    asset_selection=[
                        dg.AssetKey(["add", s]) for s in ("dataset", "responses", "scores", "stats")
                    ],
                    resources={"io_manager": storage},
                )
            )
        assert result.success

        # Nothing paid for is sent again: the calls are the ones not cached, each once.
        assert server.calls == N - cached
        prompts = [last_user_message(r["body"]) for r in server.requests]
        assert len(set(prompts)) == len(prompts)
        responses = result.asset_materializations_for_node("add__responses")[0].metadata
        assert (responses["cache_hits"].value, responses["provider_calls"].value) == (
            cached,
            N - cached,
        )
    assert ResponseCache(database).count() == N

    # Every sample scored, in the run directory and in the tables.
    scores = result.asset_materializations_for_node("add__scores")[0].metadata
    assert scores["samples"].value == N
    assert scores["outcomes"].value == {
        "scored": N, "provider_error": 0, "scorer_error": 0, "judge_error": 0,
    }  # fmt: skip
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["provider_error_rate"] and checks["dataset_hash_matches"]
    stats = result.asset_materializations_for_node("add__stats")[0].metadata
    assert stats["n"].value == N
    with duckdb.connect(str(database)) as db:
        assert db.execute("SELECT count(*), count(score) FROM scores").fetchone() == (N, N)
