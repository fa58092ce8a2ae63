"""Claims on a shared Postgres cache (gradetrail_lib.cache.claims): runs that start
together on an empty cache send each request once, lose no answer, and a claimant killed
with -9 holds the others up no longer than the claims' time to live."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.cache.claims import DEFAULT_TTL_S
from gradetrail_lib.cache.location import open_cache
from gradetrail_lib.cache.postgres import PostgresClaims
from tests.cache.conftest import direct
from tests.conftest import read_results, write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer, last_user_message

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _close_pools() -> object:
    yield
    from gradetrail_lib.cache.postgres import close_pools

    close_pools()


def start_run(spec: Path, root: Path, postgres_url: str, cwd: Path) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-m", "gradetrail_lib.cli", "run", str(spec), "--results", str(root),
         "--concurrency", "8"],
        cwd=cwd, env={**os.environ, "GRADETRAIL_CACHE": postgres_url},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_four_runs_started_together_on_an_empty_cache_send_each_request_once(
    tmp_path: Path, postgres_url: str
) -> None:
    n, runs = 100, 4
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    with FakeLLMServer(latency_s=0.2) as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        started = [start_run(spec, tmp_path / f"r{i}", postgres_url, tmp_path) for i in range(runs)]
        for proc in started:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
        sent = [last_user_message(r["body"]) for r in server.requests]
    assert len(set(sent)) == n
    ratio = len(sent) / n
    print(f"{runs} runs at once on an empty Postgres cache: {len(sent)} calls for {n} "
          f"distinct requests ({ratio:.3f}x)")  # fmt: skip
    assert ratio <= 1.05
    assert direct(postgres_url, "SELECT count(*), count(DISTINCT key) FROM responses") == [(n, n)]
    for i in range(runs):  # no answer lost: every run's every sample has its response
        records = read_results(tmp_path / f"r{i}")
        assert len(records) == n and all(r["response"] for r in records)
    assert direct(postgres_url, "SELECT count(*) FROM claims") == [(0,)]  # all released


def test_a_claimant_killed_with_minus_9_is_taken_over_after_the_time_to_live(
    tmp_path: Path, postgres_url: str
) -> None:
    n = 6
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    open_cache(postgres_url)  # its tables, claims among them, before the run's
    with FakeLLMServer(latency_s=120.0) as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        victim = start_run(spec, tmp_path / "victim", postgres_url, tmp_path)
        deadline = time.monotonic() + 120
        while direct(postgres_url, "SELECT count(*) FROM claims") != [(n,)]:
            assert victim.poll() is None and time.monotonic() < deadline, "no claims taken"
            time.sleep(0.2)
        os.kill(victim.pid, signal.SIGKILL)  # its claims stay, no longer renewed
        victim.wait()
        killed_at = time.monotonic()
        server.latency_s = 0.05
        run_spec(spec, results_root=tmp_path / "taker", cache=postgres_url)
        waited = time.monotonic() - killed_at
    records = read_results(tmp_path / "taker")
    assert len(records) == n and all(r["response"] for r in records)
    # Held up until the dead claims lapsed (they were renewed up to a third of the time
    # to live before the kill), and not much longer.
    assert DEFAULT_TTL_S * 2 / 3 - 1 <= waited <= DEFAULT_TTL_S + 10, waited
    assert direct(postgres_url, "SELECT count(*) FROM claims") == [(0,)]


def test_of_claimants_of_one_key_exactly_one_holds_it_until_it_lapses(postgres_url: str) -> None:
    cache = open_cache(postgres_url)
    first, second = PostgresClaims(cache, ttl_s=1.0), PostgresClaims(cache, ttl_s=1.0)
    keys = [f"{i:064x}" for i in range(5)]
    assert first.claim(keys) == set(keys)
    assert second.claim(keys) == set()
    assert first.claim(keys[:2]) == set(keys[:2])  # its own: held again, renewed
    time.sleep(1.5)  # lapsed, not renewed
    assert second.claim(keys) == set(keys)
    second.release()
    assert direct(postgres_url, "SELECT count(*) FROM claims") == [(0,)]
