"""`run --batch` killed with SIGKILL at each stage (after the provider took the batch but
before the run recorded its id, while polling, while downloading the results), then run
again; and two processes on one cache at once. Each time: no custom_id is ever
submitted twice, and every answer ends in the cache.

The run that is killed (or interrupted) has a process of its own; the run again after it
goes in this process (`run_cli`), which saves a process's start-up per test: it only has
to find what the dead process left, and its owner is gone either way."""

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gradetrail_lib.cache.batches import BatchStore
from gradetrail_lib.cache.responses import ResponseCache
from tests.conftest import read_results, run_cli, start_cli_process
from tests.support.batch_runs import N, project, serve_batches
from tests.support.fake_llm_server import FakeLLMServer

ENV = {
    "GRADETRAIL_BATCH": "1",
    "GRADETRAIL_BATCH_POLL_S": "0.05",
    "GRADETRAIL_BATCH_POLL_MAX_S": "0.1",
}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    with serve_batches() as srv:
        yield srv


def arguments(tmp_path: Path, spec: Path, results: str = "results") -> list[str]:
    return [
        "run", str(spec), "--cache", str(tmp_path / "c.duckdb"),
        "--results", str(tmp_path / results),
    ]  # fmt: skip


def start(tmp_path: Path, spec: Path, results: str = "results") -> subprocess.Popen[str]:
    return start_cli_process(*arguments(tmp_path, spec, results), cwd=tmp_path, env=ENV)


def run_again(tmp_path: Path, spec: Path) -> None:
    """The same command again, in this process, to its end."""
    result = run_cli(*arguments(tmp_path, spec), cwd=tmp_path, env=ENV)
    assert result.returncode == 0, result.stderr


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def kill(process: subprocess.Popen[str]) -> None:
    process.kill()  # SIGKILL: no handler runs, nothing is flushed
    process.wait(timeout=30)
    assert process.returncode == -9


def finish(process: subprocess.Popen[str]) -> None:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err


def recorded(tmp_path: Path) -> list[tuple[str | None, str]]:
    if not (tmp_path / "c.duckdb").exists():
        return []
    return [(r.batch_id, r.state) for r in BatchStore(tmp_path / "c.duckdb").all()]


def assert_paid_once_and_cached(tmp_path: Path, srv: FakeLLMServer) -> None:
    submitted = srv.batches.submitted
    assert len(submitted) == len(set(submitted)) == 2 * N, "a custom_id was submitted twice"
    assert srv.calls == 0
    assert ResponseCache(tmp_path / "c.duckdb").count() == 2 * N
    records = read_results(tmp_path / "results")
    assert len(records) == N and all(r["outcome"] == "scored" for r in records)


@pytest.mark.parametrize("target", ["anthropic", "openai"])
def test_killed_after_the_provider_took_the_batch_before_its_id_was_recorded(
    tmp_path: Path,
    server: FakeLLMServer,
    target: str,
) -> None:
    spec = project(tmp_path, server.base_url, target_provider=target)
    server.batches.hold_create_s = 30  # the batch exists; its id is not answered yet
    process = start(tmp_path, spec)
    wait_for(lambda: len(server.batches.batches) == 1, "the batch's creation")
    kill(process)
    assert recorded(tmp_path) == [(None, "claimed")]
    server.batches.hold_create_s = 0
    server.batches.delay_s = 0.1
    run_again(tmp_path, spec)
    # Found by its claim (OpenAI: the batch's metadata; Anthropic: by listing), not resent.
    (found, _judge) = BatchStore(tmp_path / "c.duckdb").all()
    assert found.batch_id == next(iter(server.batches.batches))
    assert_paid_once_and_cached(tmp_path, server)


def test_killed_while_polling(tmp_path: Path, server: FakeLLMServer) -> None:
    spec = project(tmp_path, server.base_url)
    # Long enough that the run is still polling when it is killed, however loaded the
    # machine; the re-run then finds the batch ended.
    server.batches.delay_s = 60.0
    process = start(tmp_path, spec)
    wait_for(lambda: any(s == "running" for _, s in recorded(tmp_path)), "a recorded batch")
    kill(process)
    server.batches.end_running()
    server.batches.delay_s = 0.1  # the judges' batch to come
    run_again(tmp_path, spec)
    assert_paid_once_and_cached(tmp_path, server)


def test_killed_while_downloading_the_results(tmp_path: Path, server: FakeLLMServer) -> None:
    spec = project(tmp_path, server.base_url)
    server.batches.results_delay_s = 30
    process = start(tmp_path, spec)
    wait_for(lambda: server.batches.results_started == 1, "the results' download")
    kill(process)
    server.batches.results_delay_s = 0
    run_again(tmp_path, spec)
    assert_paid_once_and_cached(tmp_path, server)


def test_two_processes_on_one_cache_submit_each_request_once(
    tmp_path: Path,
    server: FakeLLMServer,
) -> None:
    spec = project(tmp_path, server.base_url)
    # The targets' batch takes 1 s: the window in which the second process, started
    # with the first, comes to the same requests. Both then wait on it and go on to the
    # judges within a poll (0.1 s) of each other: half a second covers that.
    server.batches.delay_s = 1.0
    first, second = start(tmp_path, spec, "results"), start(tmp_path, spec, "results2")
    wait_for(lambda: len(server.batches.batches) >= 1, "the targets' batch")
    server.batches.delay_s = 0.5
    finish(first)
    finish(second)
    assert_paid_once_and_cached(tmp_path, server)
    records = read_results(tmp_path / "results2")
    assert all(r["outcome"] == "scored" for r in records)


def test_ctrl_c_while_polling_leaves_the_batch_running_and_says_so(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    server.batches.delay_s = 30
    process = start(tmp_path, spec)
    wait_for(lambda: any(s == "running" for _, s in recorded(tmp_path)), "a recorded batch")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    [batch_id] = list(server.batches.batches)
    assert f"interrupted: batches {batch_id} keep running; run the same command again" in err
    assert server.batches.batches[batch_id].cancelled_at is None
    server.batches.batches[batch_id].ends = time.time()  # the provider finishes it
    server.batches.delay_s = 0.1  # and the judges' batch to come
    run_again(tmp_path, spec)
    assert_paid_once_and_cached(tmp_path, server)
