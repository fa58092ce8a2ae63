"""Claims on a shared cache (gradetrail_lib.cache.claims), for both stores that offer
them: a Postgres database and a DuckDB file (its claims in a SQLite file beside it). Runs
that start together on an empty cache send each request once and lose no answer; a run
waiting for another's claim waits no longer than that request; a claimant killed with -9
holds the others up no longer than the claims' time to live (on a DuckDB file's machine,
not even that: its process is seen gone)."""

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.cache.claims import DEFAULT_TTL_S, POLL_S, Claims, FileClaims, claims_path
from gradetrail_lib.cache.location import open_cache, parse_location
from gradetrail_lib.engine.api import RunHooks, RunRequest, run_request
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.responses import Progress
from gradetrail_lib.spec.spec import load_spec
from tests.cache.conftest import direct
from tests.conftest import read_results, start_cli_process, write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer, Fault, last_user_message
from tests.support.plans import whole
from tests.support.threads import InThread
from tests.support.together import run_span, run_together

pytestmark = pytest.mark.timeout(300)


def claims_held(location: str) -> int:
    """How many claims the cache at `location` holds now."""
    path = parse_location(location).path
    if path is None:
        return int(direct(location, "SELECT count(*) FROM claims")[0][0])
    if not claims_path(path).exists():
        return 0
    with closing(sqlite3.connect(claims_path(path))) as connection:
        tables = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'claims'"
        if connection.execute(tables).fetchone()[0] == 0:
            return 0  # a run made the file a moment ago, and not yet its table
        return int(connection.execute("SELECT count(*) FROM claims").fetchone()[0])


def claims_of(location: str, ttl_s: float) -> Claims:
    """A new owner's claims on the cache at `location`."""
    cache = open_cache(location)
    path = parse_location(location).path
    if path is not None:
        return FileClaims(claims_path(path), ttl_s=ttl_s)
    from gradetrail_lib.cache.postgres import PostgresCache, PostgresClaims

    assert isinstance(cache, PostgresCache)
    return PostgresClaims(cache, ttl_s=ttl_s)


def start_run(
    spec: Path, root: Path, location: str, cwd: Path, concurrency: int = 8
) -> "subprocess.Popen[str]":
    return start_cli_process(
        "run", str(spec), "--results", str(root), "--concurrency", str(concurrency),
        cwd=cwd, env={"GRADETRAIL_CACHE": location},
    )  # fmt: skip


def wait_for_claims(location: str, n: int, run: "subprocess.Popen[str] | InThread") -> None:
    deadline = time.monotonic() + 120
    while claims_held(location) != n:
        alive = run.is_alive() if isinstance(run, InThread) else run.poll() is None
        assert alive and time.monotonic() < deadline, "no claims taken"
        time.sleep(0.05)


def test_four_runs_started_together_on_an_empty_cache_send_each_request_once(
    tmp_path: Path, cache_location: str
) -> None:
    n, runs = 100, 4
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    # 100 requests of 0.1 s, 8 at a time: the run that claims them sends for 1.25 s.
    with FakeLLMServer(latency_s=0.1) as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        # One run in a process of its own (two processes share the cache), three in
        # threads of this one.
        run_together(spec, tmp_path, cache_location, processes=1, threads=runs - 1)
        sent = [last_user_message(r["body"]) for r in server.requests]
    # Together: every run started (before its lookup) before any had finished.
    spans = [run_span(tmp_path / f"r{i}") for i in range(runs)]
    assert max(s for s, _ in spans) < min(f for _, f in spans), spans
    assert len(set(sent)) == n
    ratio = len(sent) / n
    store = "Postgres" if parse_location(cache_location).path is None else "DuckDB file"
    print(f"{runs} runs at once on an empty {store} cache: "
          f"{len(sent)} calls for {n} distinct requests ({ratio:.3f}x)")  # fmt: skip
    assert ratio <= 1.05
    stored = direct(cache_location, "SELECT count(*), count(DISTINCT key) FROM responses")
    # Each key once: Postgres keys its table; the DuckDB file's log keeps a row per call.
    rows = n if parse_location(cache_location).path is None else len(sent)
    assert stored == [(rows, n)]
    for i in range(runs):  # no answer lost: every run's every sample has its response
        records = read_results(tmp_path / f"r{i}")
        assert len(records) == n and all(r["response"] for r in records)
    assert claims_held(cache_location) == 0  # all released


def test_a_run_waiting_for_anothers_claims_waits_no_longer_than_its_requests(
    tmp_path: Path, cache_location: str
) -> None:
    # The first run's requests take 2 s: long enough that the second run (started once
    # they are claimed) looks them up before they are answered, and short against the
    # claims' time to live (30 s), which a run waiting for them to lapse would take.
    n, latency_s = 6, 2.0
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    open_cache(cache_location)
    with FakeLLMServer(latency_s=latency_s) as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        first = start_run(spec, tmp_path / "first", cache_location, tmp_path)
        wait_for_claims(cache_location, n, first)
        claimed_at = time.monotonic()
        run_spec(spec, results_root=tmp_path / "second", cache=cache_location)
        waited = time.monotonic() - claimed_at
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        assert server.calls == n  # the second run sent nothing: it took the first's answers
    # Its claims were taken as the first run's requests left: held up for about those
    # requests (a look every 0.25 s), far from the claims' time to live (30 s).
    assert waited <= latency_s + 6, waited
    records = read_results(tmp_path / "second")
    assert len(records) == n and all(r["response"] for r in records)


# On Postgres the run waits out the claims' 30 s time to live: slow (CI runs it).
@pytest.mark.parametrize(
    "cache_location", ["duckdb", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)
def test_a_claimant_killed_with_minus_9_is_taken_over_within_the_bound(
    tmp_path: Path, cache_location: str
) -> None:
    n = 6
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    open_cache(cache_location)  # its tables, claims among them, before the run's
    with FakeLLMServer(latency_s=120.0) as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        victim = start_run(spec, tmp_path / "victim", cache_location, tmp_path)
        wait_for_claims(cache_location, n, victim)
        os.kill(victim.pid, signal.SIGKILL)  # its claims stay, no longer renewed
        victim.wait()
        killed_at = time.monotonic()
        server.latency_s = 0.05
        run_spec(spec, results_root=tmp_path / "taker", cache=cache_location)
        waited = time.monotonic() - killed_at
    records = read_results(tmp_path / "taker")
    assert len(records) == n and all(r["response"] for r in records)
    if parse_location(cache_location).path is None:
        # Held up until the dead claims lapsed (they were renewed up to a third of the
        # time to live before the kill), and not much longer.
        assert DEFAULT_TTL_S * 2 / 3 - 1 <= waited <= DEFAULT_TTL_S + 10, waited
    else:  # one machine: the dead process is seen gone at once
        assert waited <= 10, waited
    assert claims_held(cache_location) == 0


class LookedUp(RunHooks):
    """Set once the run's responses step has looked its requests up in the cache (its
    first progress), the moment before it claims the ones it found missing."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def progress(self, label: str) -> Progress:
        return lambda done, total: self.event.set()


def test_a_request_released_without_an_answer_is_sent_by_the_run_waiting_for_it(
    tmp_path: Path, cache_location: str
) -> None:
    n = 4
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    with FakeLLMServer() as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        loaded = load_spec(spec)
        keys = whole(plan(loaded, loaded.spec.models[0])).request_keys()
        # Held as by a run whose calls are failing: it stores no answer.
        holder = claims_of(cache_location, DEFAULT_TTL_S)
        assert holder.claim(keys) == set(keys)
        # The waiter needs no process of its own: a thread, which starts at once.
        looked_up = LookedUp()
        request = RunRequest(spec=spec, results_root=tmp_path / "waiter", cache=cache_location)
        waiter = InThread(run_request, request, looked_up)
        assert looked_up.event.wait(60)
        time.sleep(1.0)  # four looks (POLL_S) at the holder's claims
        assert waiter.is_alive() and server.calls == 0  # waiting for the holder's answers
        released_at = time.monotonic()
        holder.release()
        waiter.join(60)
        waited = time.monotonic() - released_at
        assert server.calls == n  # the waiter claimed them and sent them
    assert waited <= 5, waited
    records = read_results(tmp_path / "waiter")
    assert len(records) == n and all(r["response"] for r in records)
    assert claims_held(cache_location) == 0


def test_a_failed_requests_claim_is_released_at_its_failure_not_at_its_steps_end(
    tmp_path: Path, cache_location: str
) -> None:
    n, latency_s, fails_after_s = 10, 0.75, 1.25
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    open_cache(cache_location)
    with FakeLLMServer(latency_s=latency_s) as server:
        # The first call is answered 400 (not retried) after 1.25 s, while the first run's
        # step has 9 more requests of 0.75 s to send two at a time: about 3 s more, its
        # last sent 2.25 s after the failure.
        server.script = [Fault(status=400, delay_s=fails_after_s)]
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        # Neither run needs a process of its own: the first is a thread of this one.
        first = InThread(
            run_spec, spec, results_root=tmp_path / "first", cache=cache_location, concurrency=2
        )
        wait_for_claims(cache_location, n, first)
        run_spec(spec, results_root=tmp_path / "second", cache=cache_location)
        first.join(60)
        sent = server.requests
    (failed,) = [r for r in sent if r["fault"] is not None]
    failed_at = failed["received_at"] + fails_after_s
    prompt = last_user_message(failed["body"])
    (resent,) = [r for r in sent if r is not failed and last_user_message(r["body"]) == prompt]
    assert len(sent) == n + 1  # the second run sent that one request only
    # The second run claimed and sent it at its next look after the failure, before the
    # first run had even sent its last request (its step's end released it before).
    waited = resent["received_at"] - failed_at
    print(f"a failed request sent again {waited:.2f} s after its failure")
    assert waited <= POLL_S + 2.0, waited
    assert resent["received_at"] < max(r["received_at"] for r in sent if r is not resent)
    records = read_results(tmp_path / "second")
    assert len(records) == n and all(r["response"] for r in records)
    assert claims_held(cache_location) == 0


def test_of_claimants_of_one_key_exactly_one_holds_it_until_it_lapses(
    cache_location: str,
) -> None:
    # A time to live of 0.6 s: the three claims before the sleep take milliseconds.
    first, second = claims_of(cache_location, 0.6), claims_of(cache_location, 0.6)
    keys = [f"{i:064x}" for i in range(5)]
    assert first.claim(keys) == set(keys)
    assert second.claim(keys) == set()
    assert first.claim(keys[:2]) == set(keys[:2])  # its own: held again, renewed
    time.sleep(0.9)  # lapsed, not renewed
    assert second.claim(keys) == set(keys)
    assert first.claim(keys) == set()
    second.release()
    assert claims_held(cache_location) == 0


def test_a_judges_failed_call_releases_its_claim_while_the_stage_is_open(
    tmp_path: Path, cache_location: str
) -> None:
    from gradetrail_lib.backends.local import LocalBackend
    from gradetrail_lib.engine.scorer_calls import CallStage

    n = 3
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    cache = open_cache(cache_location)
    with FakeLLMServer() as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        loaded = load_spec(spec)
        requests = list(whole(plan(loaded, loaded.spec.models[0])).unique_requests.values())
        server.script = [Fault(status=400)]  # not retried
        stage = CallStage(cache, LocalBackend())
        stage.submit(requests[:1])
        # Claimed, sent and failed, and its claim gone while the stage still judges (it
        # used to stay until the stage closed, with the run's last answer).
        deadline = time.monotonic() + 20
        while server.calls < 1 or claims_held(cache_location) != 0:
            assert time.monotonic() < deadline, (server.calls, claims_held(cache_location))
            time.sleep(0.05)
        stage.submit(requests[1:])
        results = stage.close()
    assert list(results.errors) == [requests[0].key] and len(results.responses) == n - 1
    assert claims_held(cache_location) == 0


def test_releasing_some_keys_drops_those_claims_of_this_owner_only(cache_location: str) -> None:
    first, second = (
        claims_of(cache_location, DEFAULT_TTL_S),
        claims_of(cache_location, DEFAULT_TTL_S),
    )
    keys = [f"{i:064x}" for i in range(4)]
    assert first.claim(keys[:3]) == set(keys[:3])
    assert second.claim(keys) == {keys[3]}
    second.release([keys[0], keys[3]])  # keys[0] is the first owner's: it stays
    first.release([keys[1]])  # as a step whose call for it failed
    assert claims_held(cache_location) == 2
    assert second.claim(keys) == {keys[1], keys[3]}
    assert first.claim(keys) == {keys[0], keys[2]}  # its others still held (and usable)
    first.release()
    second.release()
    assert claims_held(cache_location) == 0


def test_a_file_claim_whose_process_is_gone_is_taken_over_before_it_lapses(
    tmp_path: Path,
) -> None:
    path = claims_path(tmp_path / "c.duckdb")
    keys = [f"{i:064x}" for i in range(3)]
    claimant = (
        "import sys; from pathlib import Path; from gradetrail_lib.cache.claims import FileClaims;"
        f" held = FileClaims(Path({str(path)!r}), ttl_s=600).claim({keys!r});"
        " sys.exit(0 if len(held) == 3 else 1)"
    )  # exits holding its claims, never released
    subprocess.run([sys.executable, "-c", claimant], check=True, timeout=60)
    alive = FileClaims(path, ttl_s=600)
    assert alive.claim(keys[:1]) == set(keys[:1])
    assert FileClaims(path, ttl_s=600).claim(keys) == set(keys[1:])  # the live one's stays


def test_two_runs_with_a_judge_at_once_pay_each_judge_request_once(
    tmp_path: Path, cache_location: str
) -> None:
    from tests.scorers.test_judge import calls_by_model, grading_responder, write_judged_spec

    n = 40
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    with FakeLLMServer(responder=grading_responder, latency_s=0.1) as server:
        spec = write_judged_spec(tmp_path, f"{server.base_url}/v1")
        run_together(spec, tmp_path, cache_location, processes=0, threads=2)
        calls = calls_by_model(server)
    print(f"two judged runs at once: {calls} for {n} samples")
    assert calls == {"fake-1": n, "judge-1": n}
    for i in range(2):
        records = read_results(tmp_path / f"r{i}")
        assert len(records) == n and all(r["scores"]["correct"] is not None for r in records)  # type: ignore[index]
    assert claims_held(cache_location) == 0


def test_two_agent_runs_at_once_pay_each_step_once(
    tmp_path: Path, cache_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.agents.test_agent import agent, project

    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    with FakeLLMServer(responder=agent, latency_s=0.2) as server:
        spec = project(tmp_path, f"{server.base_url}/v1")
        run_together(spec, tmp_path, cache_location, processes=0, threads=2)
        sent = server.calls
    assert sent == 2 + 2 + 2 + 2 + 2 + 3  # each case's steps, as one run alone sends them
    for i in range(2):
        assert len(read_results(tmp_path / f"r{i}")) == 6
    assert claims_held(cache_location) == 0


def test_answers_taken_from_another_runs_claims_report_progress_as_they_come(
    tmp_path: Path,
) -> None:
    from gradetrail_lib.backends.local import LocalBackend
    from gradetrail_lib.engine.responses import fetch_responses
    from gradetrail_lib.providers.base import ModelResponse

    n = 6
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    location = str(tmp_path / "c.duckdb")
    cache = open_cache(location)
    with FakeLLMServer() as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        loaded = load_spec(spec)
        batch = whole(plan(loaded, loaded.spec.models[0]))
        requests = list(batch.unique_requests.values())
        holder = claims_of(location, DEFAULT_TTL_S)  # another run, sending them all
        assert holder.claim([r.key for r in requests]) == {r.key for r in requests}
        seen: list[tuple[int, int]] = []
        step = threading.Thread(
            target=fetch_responses,
            args=(batch, cache, LocalBackend()),
            kwargs={"progress": lambda done, total: seen.append((done, total))},
        )
        step.start()
        deadline = time.monotonic() + 30
        while not seen:  # its lookup made (finding none) before the holder's first answers
            assert time.monotonic() < deadline and step.is_alive()
            time.sleep(0.05)
        answer = ModelResponse(text="1", served_model="fake-1", stop_reason="stop",
                               input_tokens=1, output_tokens=1, latency_s=0.1)  # fmt: skip
        cache.put_many([(r, answer) for r in requests[:2]])  # the holder's first answers
        deadline = time.monotonic() + 30
        while (2, n) not in seen:
            assert time.monotonic() < deadline, seen
            time.sleep(0.05)
        cache.put_many([(r, answer) for r in requests[2:]])
        holder.release()
        step.join(30)
        assert not step.is_alive() and server.calls == 0  # every answer the holder's
    assert seen[0] == (0, n) and seen[-1] == (n, n)


class _CommitThenCtrlC:
    """A claims file's connection whose COMMIT goes through and then a Ctrl-C lands, as a
    SIGINT does when it arrives while SQLite commits: Python raises it once the statement
    has returned."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self._real = real

    def execute(self, sql: str, *parameters: object) -> sqlite3.Cursor:
        cursor = self._real.execute(sql, *parameters)  # type: ignore[arg-type]
        if sql == "COMMIT":
            raise KeyboardInterrupt
        return cursor

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


def test_a_ctrl_c_just_after_a_claims_commit_stays_the_interrupt(tmp_path: Path) -> None:
    """The transaction is over, so ROLLBACK answers "no transaction is active": that error
    took the interrupt's place, and a run's Ctrl-C ended in a traceback and exit 1 instead
    of "interrupted" and 130 (test_batch_kill's Ctrl-C test, one time in four on a loaded
    machine)."""
    path = claims_path(tmp_path / "c.duckdb")
    claims = FileClaims(path, ttl_s=600)
    assert claims.claim(["a"]) == {"a"}  # its connection opened
    real = claims._connection
    assert real is not None
    claims._connection = _CommitThenCtrlC(real)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        claims.claim(["b"])
    claims._connection = real
    # Committed before the interrupt: held, and another claimant does not get it.
    assert FileClaims(path, ttl_s=600).claim(["b", "c"]) == {"c"}
