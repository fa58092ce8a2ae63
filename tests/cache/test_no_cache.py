"""Within a run a request key is sent once, with the cache or without: `--no-cache` only
skips reading and writing the cache file. What the records, the manifest and the summary
count: calls (distinct requests this run sent), cache hits (an earlier run's answers) and
shared records (the answer of a request this run sent for another record)."""

import json
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.analysis.summary import format_cost, format_summary
from gradetrail_lib.backends import build_backend
from gradetrail_lib.cache.memory import MemoryCache
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.run import CompletedRun, RunOptions, run_model
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse
from gradetrail_lib.results.totals import CallCounter
from gradetrail_lib.results.trace import ModelCall
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import run_cli
from tests.support.fake_llm_server import FakeLLMServer, default_responder

N, DISTINCT = 10, 3
SHARED = N - DISTINCT


def responder(body: dict[str, Any]) -> str:
    return "GRADE: C" if body.get("model") == "judge-1" else default_responder(body)


def calls_by_model(server: FakeLLMServer) -> dict[str, int]:
    counts: dict[str, int] = {}
    for request in server.requests:
        model = str(request["body"].get("model"))
        counts[model] = counts.get(model, 0) + 1
    return counts


def project(tmp_path: Path, base_url: str) -> Path:
    """N samples over DISTINCT prompts (sample i asks what sample i % 3 asks), a priced
    target and a judge whose requests repeat as the target's answers do."""
    (tmp_path / "data").mkdir()
    with open(tmp_path / "data" / "add.jsonl", "w") as out:
        for i in range(N):
            a, b = i % DISTINCT, 2 * (i % DISTINCT) + 1
            out.write(json.dumps({"id": f"s{i:02d}", "a": a, "b": b, "answer": str(a + b)}) + "\n")
    (tmp_path / "judge.j2").write_text(
        "Reference: {{ answer }}\nResponse: {{ response }}\nEnd with GRADE: C or GRADE: I.\n"
    )
    spec = tmp_path / "add.yaml"
    spec.write_text(
        "name: add\ndataset: {path: data/add.jsonl}\nprompt: 'Q: {{ a }} + {{ b }}'\n"
        "model: {provider: anthropic, name: claude-haiku-4-5, "
        f'base_url: "{base_url}/v1", api_key_env: GT_KEY}}\n'
        "params: {temperature: 0, max_tokens: 16}\n"
        "scorers:\n"
        "  - {name: sum, type: numeric}\n"
        "  - name: judged\n"
        "    type: judge\n"
        "    prompt_file: judge.j2\n"
        f'    model: {{provider: openai_compatible, name: judge-1, base_url: "{base_url}/v1"}}\n'
        "    params: {temperature: 0, max_tokens: 8}\n"
    )
    return spec


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    with FakeLLMServer(responder=responder) as srv:
        yield srv


def run_in_batches(tmp_path: Path, spec: Path, cache: ResponseCache | None) -> CompletedRun:
    """The spec's run, two samples a batch: five batches, each prompt in several."""
    loaded = load_spec(spec)
    backend = build_backend("local", concurrency=2)
    return run_model(
        plan(loaded, loaded.spec.models[0]), cache, backend, tmp_path / "results",
        RunOptions(batch_samples=2),
    )  # fmt: skip


def assert_sent_once(done: CompletedRun) -> None:
    """Every record answered, none from the cache; DISTINCT calls, the rest shared."""
    target = done.manifest.target
    for totals in (done.manifest.target, done.manifest.judge):
        assert (totals.calls, totals.shared, totals.cache_hits) == (DISTINCT, SHARED, 0)
        assert totals.errors == 0
    records = done.records
    assert all(r.score_of("judged") == 1.0 and r.score_of("sum") == 1.0 for r in records)
    assert not any(c.cache_hit for r in records for c in r.calls)
    # This run paid each distinct request once; the shared records' answers cost it nothing.
    calls = [c for r in records for c in r.calls_of("target")]
    once = {c.request_key: c.cost_usd or 0.0 for c in calls}
    assert len(once) == DISTINCT and target.cost_paid_usd == pytest.approx(sum(once.values()))
    assert target.cost_usd == pytest.approx(sum(c.cost_usd or 0.0 for c in calls))
    assert target.cost_paid_usd is not None and 0 < target.cost_paid_usd < target.cost_usd
    summary = format_summary(done.totals, done.summary, 1.0)
    assert f"Cache hits: 0/{N}\n" in summary
    assert (
        f"Shared: {SHARED}/{N} reused the answer of an identical request sent in this run "
        f"(each request is sent once: {DISTINCT} sent)"
    ) in summary
    assert "reused (by shared requests)" in summary
    assert f"Judge: {DISTINCT} calls, 0 cache hits, {SHARED} shared, 0 errors" in summary


def test_with_the_cache_a_run_sends_each_request_once_and_a_rerun_sends_none(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    cache = ResponseCache(tmp_path / "c.duckdb")
    cold = run_in_batches(tmp_path, spec, cache)
    assert calls_by_model(server) == {"claude-haiku-4-5": DISTINCT, "judge-1": DISTINCT}
    assert_sent_once(cold)

    warm = run_in_batches(tmp_path, spec, cache)
    assert server.calls == 2 * DISTINCT, "the re-run sends nothing"
    target, judge = warm.manifest.target, warm.manifest.judge
    assert (target.calls, target.shared, target.cache_hits) == (0, 0, N)
    assert (judge.calls, judge.shared, judge.cache_hits) == (0, 0, N)
    assert all(c.cache_hit for r in warm.records for c in r.calls)
    assert target.cost_paid_usd == 0.0
    assert target.cost_usd == pytest.approx(cold.manifest.target.cost_usd)
    summary = format_summary(warm.totals, warm.summary, 1.0)
    assert f"Cache hits: {N}/{N}\n" in summary and "Shared:" not in summary
    assert "reused from cache" in summary


def test_without_the_cache_file_a_run_still_sends_each_request_once_and_writes_nothing(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    spec = project(tmp_path, server.base_url)
    for rerun in (1, 2):  # nothing read: the second run sends again, once a request
        assert_sent_once(run_in_batches(tmp_path, spec, None))
        sent = rerun * DISTINCT
        assert calls_by_model(server) == {"claude-haiku-4-5": sent, "judge-1": sent}
    assert not list(tmp_path.glob("*.duckdb")) and not (tmp_path / ".gradetrail").exists()

    # From Python and from the CLI alike: no cache file, not even an empty one.
    server.reset_counts()
    (done,) = run_spec(spec, results_root=tmp_path / "py", cache=tmp_path / "py.duckdb",
                       read_cache=False)  # fmt: skip
    assert done.manifest.target.calls == DISTINCT and not (tmp_path / "py.duckdb").exists()
    cli = run_cli(
        "run", str(spec), "--cache", str(tmp_path / "cli.duckdb"), "--no-cache",
        "--results", str(tmp_path / "cli"), cwd=tmp_path, env={"GT_KEY": "sk-fake-not-a-secret"},
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert not (tmp_path / "cli.duckdb").exists()
    assert calls_by_model(server) == {"claude-haiku-4-5": 2 * DISTINCT, "judge-1": 2 * DISTINCT}
    assert f"Shared: {SHARED}/{N} reused the answer" in cli.stdout


def test_a_cached_answer_this_run_sent_is_not_a_cache_hit_in_a_later_batch(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    """The file cache holds what batch 1 sent when batch 2 looks; the record says this
    run sent it (no cache hit), and `gradetrail cost` agrees on what was paid."""
    spec = project(tmp_path, server.base_url)
    done = run_in_batches(tmp_path, spec, ResponseCache(tmp_path / "c.duckdb"))
    batch_two = [r for r in done.records if r.id in ("s03", "s04")]  # prompts of batch 1
    assert [c.cache_hit for r in batch_two for c in r.calls] == [False] * 4
    report = run_cli("cost", str(done.run_dir), "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    target = next(m for m in json.loads(report.stdout)["models"] if m["role"] == "target")
    assert target["paid_usd"] == pytest.approx(done.manifest.target.cost_paid_usd)
    assert target["reused_from_cache_usd"] == 0.0
    assert target["shared_usd"] == pytest.approx(done.manifest.target.reused_usd)
    text = run_cli("cost", str(done.run_dir), cwd=tmp_path).stdout
    assert "shared (a request sent once)" in text


def test_the_memory_cache_holds_answers_without_the_raw_body() -> None:
    cache = MemoryCache()
    request = ModelRequest("k1", Endpoint("openai", "m", "", None), [], {})
    with cache.writer() as writer:
        writer.put(request, ModelResponse("first", "m", "stop", 1, 1, 0.1, 1, {"big": "body"}))
        writer.put(request, ModelResponse("second", "m", "stop", 1, 1, 0.1))
    assert cache.count() == 1 and cache.cached_keys(["k1", "k2"]) == {"k1"}
    (found,) = cache.lookup(["k1", "k2"]).values()
    assert (found.text, found.raw) == ("first", {})


def _call(key: str, *, hit: bool = False, error: str | None = None) -> ModelCall:
    return ModelCall(
        role="target",
        request_key=key,
        provider="anthropic",
        model="claude-haiku-4-5",
        served_model=None,
        input_tokens=10,
        output_tokens=2,
        latency_s=0.1,
        cost_usd=None if error else 0.001,
        cache_hit=hit,
        stop_reason=None if error else "stop",
        error=error,
    )


def test_calls_shared_records_and_cache_hits_are_told_apart_in_record_order() -> None:
    """Batch 1: k1 twice, k2 failed twice (one call each). Batch 2: k1 again (shared),
    k2 sent again and answered (a call of its own), k3 from an earlier run (a hit)."""
    counter = CallCounter()
    calls = [_call("k1"), _call("k1"), _call("k2", error="HTTP 500"), _call("k2", error="HTTP 500"),
             _call("k1"), _call("k2"), _call("k2"), _call("k3", hit=True)]  # fmt: skip
    for call in calls:
        counter.add(call)
    totals = counter.totals()
    assert (totals.calls, totals.shared, totals.cache_hits, totals.errors) == (3, 4, 1, 2)
    assert totals.cost_paid_usd == pytest.approx(0.002)  # k1's call and k2's answered one
    assert totals.cost_usd == pytest.approx(0.006) and totals.reused_usd == pytest.approx(0.004)
    text = "$0.002000 paid; $0.004000 reused (from cache and by shared requests)"
    assert format_cost(totals) == text
