"""`run --batch`: a run's cache misses go through the fake server's batch APIs (the
target on Anthropic's, the judge on OpenAI's), the answers land in the cache, and a
re-run, an error row, an expired batch and a request whose provider has no batch API
each go the way the issue says. The killed-process cases are in test_batch_kill.py."""

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradetrail_lib.backends import batch as batch_backend
from gradetrail_lib.backends import build_backend
from gradetrail_lib.backends.batch import BatchesPending, BatchMode, BatchOptions
from gradetrail_lib.cache.batches import BatchStore
from gradetrail_lib.cache.location import open_cache
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.run import CompletedRun, RunOptions, run_model
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import run_cli
from tests.support.batch_runs import JUDGE, TARGET, N, project, serve_batches
from tests.support.fake_llm_server import FakeLLMServer


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    with serve_batches() as srv:
        yield srv


def run(
    tmp_path: Path,
    spec: Path,
    mode: BatchMode,
    notes: list[str] | None = None,
    timeout_s: float = 60.0,
    cache_name: str = "c.duckdb",
    batch_samples: int | None = None,
    results: str = "results",
) -> CompletedRun:
    loaded = load_spec(spec)
    options = RunOptions(
        batch_samples=batch_samples,
        batch=mode,
        batch_options=BatchOptions(
            poll_s=0.02,
            poll_max_s=0.05,
            timeout_s=timeout_s,
            notify=(notes.append if notes is not None else lambda _line: None),
        ),
    )
    return run_model(
        plan(loaded, loaded.spec.models[0]),
        open_cache(cache_name if "://" in cache_name else tmp_path / cache_name),
        build_backend("local", concurrency=2),
        tmp_path / results,
        options,
    )


def test_run_batch_sends_the_target_then_the_judge_by_batch_and_caches_every_answer(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    notes: list[str] = []
    done = run(tmp_path, spec, "all", notes)
    assert server.calls == 0, "nothing went the synchronous way"
    batches = list(server.batches.batches.values())
    assert [b.api for b in batches] == ["anthropic", "openai"]  # the target's, then the judge's
    assert [len(b.lines) for b in batches] == [N, N]
    assert len(server.batches.submitted) == len(set(server.batches.submitted)) == 2 * N
    records = done.records
    assert all(r.score_of("sum") == 1.0 and r.score_of("judged") == 1.0 for r in records)
    assert done.manifest.target.calls == N and done.manifest.judge.calls == N
    assert f"model anthropic/{TARGET}: sent by batch" in notes
    assert f"model openai/{JUDGE}: sent by batch" in notes
    assert any(line.startswith("batches: ") and f"{N}/{N} done" in line for line in notes)
    # Every answer is in the cache, marked as answered by batch (priced at its rate): a
    # re-run sends nothing, by batch or otherwise.
    cache = ResponseCache(tmp_path / "c.duckdb")
    assert cache.count() == 2 * N
    keys = [c.request_key for r in records for c in r.calls]
    cached = cache.lookup(keys)
    assert len(cached) == 2 * N and all(response.batch for response in cached.values())
    again = run(tmp_path, spec, "all")
    assert len(server.batches.batches) == 2 and server.calls == 0
    assert again.manifest.target.cache_hits == N and again.manifest.judge.cache_hits == N
    states = [
        (r.provider, r.state, r.done, r.total) for r in BatchStore(tmp_path / "c.duckdb").all()
    ]
    assert states == [("anthropic", "ended", N, N), ("openai", "ended", N, N)]


def test_run_batch_on_a_postgres_cache_resubmits_only_the_unanswered_and_reruns_free(
    tmp_path: Path, server: FakeLLMServer, postgres_url: str
) -> None:
    from gradetrail_lib.cache.postgres import close_pools

    spec = project(tmp_path, server.base_url)
    server.batches.expire_after = [2]  # the first batch runs 2 of its N, then expires
    done = run(tmp_path, spec, "all", cache_name=postgres_url)
    first, second, judge = server.batches.batches.values()
    assert [line["custom_id"] for line in second.lines] == [
        line["custom_id"] for line in first.lines[2:]
    ]
    assert len(judge.lines) == N and server.calls == 0
    assert all(r.outcome == "scored" for r in done.records)
    cache = open_cache(postgres_url)
    assert cache.count() == 2 * N
    states = [(r.provider, r.state) for r in cache.batch_store().all()]
    assert sorted(states) == [("anthropic", "ended"), ("anthropic", "expired"), ("openai", "ended")]
    again = run(tmp_path, spec, "all", cache_name=postgres_url, results="again")
    assert len(server.batches.batches) == 3 and server.calls == 0
    assert again.manifest.target.cache_hits == N and again.manifest.judge.cache_hits == N
    close_pools()


def test_batch_targets_sends_the_judge_the_ordinary_way(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    done = run(tmp_path, spec, "targets")
    assert [b.api for b in server.batches.batches.values()] == ["anthropic"]
    assert server.calls == N  # the judge's, one by one
    assert all(r.score_of("judged") == 1.0 for r in done.records)


def test_a_model_whose_provider_has_no_batch_api_goes_the_ordinary_way_said_once(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url, judge_provider="openai_compatible")
    notes: list[str] = []
    done = run(tmp_path, spec, "all", notes)
    assert [b.api for b in server.batches.batches.values()] == ["anthropic"]
    assert server.calls == N
    said = [n for n in notes if "openai_compatible" in n]
    assert said == [
        f"model openai_compatible/{JUDGE}: provider openai_compatible has no batch API; "
        "sent the ordinary way"
    ]
    assert all(r.score_of("judged") == 1.0 for r in done.records)


def test_a_request_the_batch_fails_is_that_samples_provider_error_and_is_not_cached(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    server.batches.error_for = lambda body: (
        "prompt is too long" if "Q: 2 + 1000" in json.dumps(body) else None
    )
    done = run(tmp_path, spec, "all")
    failed = [r for r in done.records if r.outcome == "provider_error"]
    assert [r.id for r in failed] == ["s2"]
    target = failed[0].target
    assert target is not None and target.error is not None and "prompt is too long" in target.error
    assert ResponseCache(tmp_path / "c.duckdb").count() == 2 * N - 2  # its answer and judging
    # The next run sends that request again (alone), as an error is never cached.
    server.batches.error_for = None
    before = len(server.batches.submitted)
    rerun = run(tmp_path, spec, "all")
    assert len(server.batches.submitted) - before == 2  # s2's target, then its judging
    assert all(r.outcome == "scored" for r in rerun.records)


def test_an_expired_batch_resubmits_only_what_it_did_not_answer(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    server.batches.expire_after = [2]  # the first batch runs 2 of its N, then expires
    done = run(tmp_path, spec, "all")
    first, second, judge = server.batches.batches.values()
    answered = [line["custom_id"] for line in first.lines[:2]]
    assert [line["custom_id"] for line in second.lines] == [
        line["custom_id"] for line in first.lines[2:]
    ]
    assert not set(answered) & {line["custom_id"] for line in second.lines}
    assert len(judge.lines) == N
    assert all(r.outcome == "scored" for r in done.records)


def test_how_requests_are_sent_does_not_change_the_run_identity(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    # (Two results roots: one identity, so one run directory name.)
    by_batch = run(tmp_path, spec, "all", cache_name="a.duckdb", results="a")
    ordinary = run(tmp_path, spec, "off", cache_name="b.duckdb", results="b")
    assert server.calls == 2 * N  # the second run's
    assert by_batch.manifest.identity == ordinary.manifest.identity
    assert [r.response for r in by_batch.records] == [r.response for r in ordinary.records]
    # Only the price differs: half, by the price list's batch discount for the target.
    batch_target, sync_target = by_batch.manifest.target, ordinary.manifest.target
    assert (batch_target.batch_calls, sync_target.batch_calls) == (N, 0)
    assert sync_target.cost_paid_usd is not None and sync_target.cost_paid_usd > 0
    assert batch_target.cost_paid_usd == pytest.approx(sync_target.cost_paid_usd / 2)
    assert batch_target.batch_saved_usd == pytest.approx(sync_target.cost_paid_usd / 2)
    assert all(c.usage_or_default.batch for r in by_batch.records for c in r.calls)
    assert not any(c.usage_or_default.batch for r in ordinary.records for c in r.calls)


def test_past_the_batch_timeout_the_run_stops_and_a_rerun_resumes_the_batch(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    server.batches.delay_s = 60.0  # still running at the timeout, however loaded the machine
    with pytest.raises(BatchesPending, match="keep running"):
        run(tmp_path, spec, "all", timeout_s=0.2)
    assert len(server.batches.batches) == 1
    assert not (tmp_path / "results").exists() or not any(
        p for p in (tmp_path / "results").iterdir() if not p.name.startswith(".")
    )
    # The provider finishes it 0.3 s from now, as the re-run waits on it (or before).
    (pending,) = server.batches.batches.values()
    pending.ends = time.time() + 0.3
    server.batches.delay_s = 0.1  # and the judges' batch to come
    done = run(tmp_path, spec, "all")
    assert [b.api for b in server.batches.batches.values()] == ["anthropic", "openai"]
    assert len(server.batches.submitted) == len(set(server.batches.submitted)) == 2 * N
    assert all(r.outcome == "scored" for r in done.records)


def test_batch_with_no_cache_is_refused_and_nothing_is_written(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    cache = tmp_path / "c.duckdb"
    result = run_cli(
        "run", str(spec), "--batch", "--no-cache", "--cache", str(cache),
        "--results", str(tmp_path / "results"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--batch needs the cache file" in result.stderr and "drop --no-cache" in result.stderr
    assert not cache.exists() and not (tmp_path / "results").exists()
    assert server.batches.submitted == [] and server.calls == 0


def test_the_cli_runs_by_batch_lists_the_batches_and_cancels_one(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    cache = tmp_path / "c.duckdb"
    env = {"GRADETRAIL_BATCH": "1", "GRADETRAIL_BATCH_POLL_S": "0.05"}
    result = run_cli(
        "run", str(spec), "--cache", str(cache), "--results", str(tmp_path / "results"),
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"model anthropic/{TARGET}: sent by batch" in result.stderr
    assert server.calls == 0 and len(server.batches.batches) == 2
    listed = run_cli("batches", "--cache", str(cache), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 3 and all(" ended " in line for line in lines[1:])
    assert all(f"{N}/{N}" in line for line in lines[1:])
    # A batch still running, cancelled by its id.
    server.batches.delay_s = 60
    store = BatchStore(cache)
    result = run_cli(
        "run", str(spec), "--cache", str(tmp_path / "other.duckdb"), "--batch",
        "--batch-timeout", "0.2s", "--results", str(tmp_path / "results2"), cwd=tmp_path,
        env={"GRADETRAIL_BATCH_POLL_S": "0.05"},
    )  # fmt: skip
    assert result.returncode == 1 and "keep running" in result.stderr
    assert "gradetrail batches --cache" in result.stderr
    [running] = [r for r in BatchStore(tmp_path / "other.duckdb").all()]
    assert running.batch_id is not None and running.state == "running"
    cancelled = run_cli(
        "batches", "cancel", running.batch_id, "--cache", str(tmp_path / "other.duckdb"),
        cwd=tmp_path,
    )  # fmt: skip
    assert cancelled.returncode == 0, cancelled.stderr
    assert server.batches.batches[running.batch_id].cancelled_at is not None
    [after] = BatchStore(tmp_path / "other.duckdb").all()
    assert after.state == "cancelled"
    assert len(store.all()) == 2


def test_a_spec_with_tools_runs_its_steps_the_ordinary_way_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.agents.test_agent import agent
    from tests.agents.test_agent import project as agent_project

    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    with FakeLLMServer(responder=agent) as srv:
        spec = agent_project(tmp_path, f"{srv.base_url}/v1", "anthropic")
        notes: list[str] = []
        done = run(tmp_path, spec, "all", notes)
        assert srv.batches.submitted == [] and srv.calls == 2 + 2 + 2 + 2 + 2 + 3
    assert notes == [
        "model anthropic/agent-1: the spec has tools: its steps are sent the ordinary way, "
        "not by batch (each step depends on the answer to the last)"
    ]
    assert {r.id: r.outcome for r in done.records}["paris"] == "scored"


def test_a_run_in_parts_submits_every_parts_targets_before_waiting(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    # The targets' batches take 0.5 s each; the judges' after them, the fixture's 0.1 s
    # (when they start is not what this test is about).
    target_delay = 0.5
    server.batches.delays = [target_delay] * 3
    done = run(tmp_path, spec, "all", batch_samples=2)
    batches = list(server.batches.batches.values())
    # Three parts of two samples: the targets' three batches first, at once; then each
    # part's judging, once its targets are back.
    assert [b.api for b in batches] == ["anthropic"] * 3 + ["openai"] * 3
    targets = batches[:3]
    assert [round(b.ends - b.created, 3) for b in targets] == [target_delay] * 3
    # In turn, the third would be created at least two delays after the first.
    spread = targets[-1].created - targets[0].created
    assert spread < 2 * target_delay, "the parts' batches wait in turn"
    assert len(server.batches.submitted) == len(set(server.batches.submitted)) == 2 * N
    assert all(r.outcome == "scored" for r in done.records)


def test_the_providers_limits_split_a_run_into_several_batches(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from gradetrail_lib.providers import registry
    from gradetrail_lib.providers.batch import BatchLimits

    anthropic = registry.get("anthropic")
    assert anthropic.batch is not None
    small = dataclasses.replace(
        anthropic.batch, limits=BatchLimits(max_requests=4, max_bytes=10**6)
    )
    monkeypatch.setitem(
        registry.providers(), "anthropic", dataclasses.replace(anthropic, batch=small)
    )
    server.batches.max_requests = N  # the fake refuses a larger batch
    done = run(tmp_path, project(tmp_path, server.base_url), "all")
    assert [len(b.lines) for b in server.batches.batches.values()] == [4, 2, N]
    assert all(r.outcome == "scored" for r in done.records)


def test_a_batch_the_provider_refuses_is_its_requests_provider_error(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    server.batches.max_requests = 2
    done = run(tmp_path, project(tmp_path, server.base_url), "all")
    assert server.batches.batches == {} and server.calls == 0
    assert {r.outcome for r in done.records} == {"provider_error"}
    target = done.records[0].target
    assert target is not None and target.error is not None
    assert target.error.startswith("batch not submitted: batch creation: HTTP 400")
    # Its claims (submitted ahead, then tried again) never reached the provider: their keys
    # are free for the next run.
    assert {c.state for c in BatchStore(tmp_path / "c.duckdb").all()} == {"abandoned"}


def test_run_spec_takes_batch_and_refuses_it_without_the_cache(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gradetrail_lib import run_spec
    from gradetrail_lib.errors import UsageError

    monkeypatch.setenv("GRADETRAIL_BATCH_POLL_S", "0.02")
    spec = project(tmp_path, server.base_url)
    with pytest.raises(UsageError, match="batch needs the cache file"):
        run_spec(spec, results_root=tmp_path / "r", read_cache=False, batch="all")
    assert not (tmp_path / "r").exists() and server.batches.submitted == []
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db", batch="all")
    assert server.calls == 0 and len(server.batches.batches) == 2
    assert all(r.outcome == "scored" for r in done.records)


def test_a_poll_or_a_download_that_fails_transiently_is_tried_again(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failed download is tried again after 10 ms, then 20 ms (not 1 s, then 2 s): that
    # it is tried again is the point here.
    monkeypatch.setattr(batch_backend, "RETRY_WAIT_S", 0.01)
    server.batches.status_errors = 3
    server.batches.results_errors = 2
    done = run(tmp_path, project(tmp_path, server.base_url), "all")
    assert server.batches.status_errors == 0 and server.batches.results_errors == 0
    assert len(server.batches.submitted) == len(set(server.batches.submitted)) == 2 * N
    assert all(r.outcome == "scored" for r in done.records)


def test_without_the_key_a_run_by_batch_stops_before_claiming_anything(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gradetrail_lib.errors import GradetrailError

    monkeypatch.delenv("GT_KEY")
    with pytest.raises(GradetrailError, match="environment variable GT_KEY is not set"):
        run(tmp_path, project(tmp_path, server.base_url), "all")
    assert BatchStore(tmp_path / "c.duckdb").all() == [] and server.batches.submitted == []
