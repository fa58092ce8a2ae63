"""End to end: the `gradetrail run` command against a real loopback HTTP server."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib import load_run
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.results.trace import TraceRecord
from tests.conftest import (
    read_results,
    run_cli,
    run_cli_process,
    start_cli_process,
    write_addition_dataset,
    write_spec,
)
from tests.support.fake_llm_server import FakeLLMServer, Fault, default_responder

N = 12
SECRET = "sk-test-0123456789abcdef-never-in-a-file"


@pytest.mark.parametrize("provider", ["openai_compatible", "anthropic"])
def test_cache_makes_reruns_and_rescoring_free(
    tmp_path: Path, fake_server: FakeLLMServer, provider: str
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    env = {"GRADETRAIL_CACHE": str(tmp_path / "cache.duckdb")}
    extra = ""
    if provider == "anthropic":
        env["GT_TEST_KEY"] = SECRET
        extra = ", api_key_env: GT_TEST_KEY"
    spec = write_spec(
        tmp_path / "add.yaml",
        base_url=f"{fake_server.base_url}/v1",
        provider=provider,
        extra_model=extra,
    )
    path = "/v1/messages" if provider == "anthropic" else "/v1/chat/completions"

    cold = run_cli("run", str(spec), cwd=tmp_path, env=env)
    assert cold.returncode == 0, cold.stderr
    assert fake_server.calls_by_path == {path: N}
    counts = f"scored={N}, provider_error=0, scorer_error=0, judge_error=0"
    assert f"Samples: {N} ({counts}: outcomes by the primary scorer" in cold.stdout
    assert f"Cache hits: 0/{N}" in cold.stdout
    cold_rows = _rows(tmp_path / run_dir_of(cold))
    scores = [r.score_of("score") for r in cold_rows]
    assert scores == [0.0 if i % 4 == 0 else 1.0 for i in range(N)]
    if provider == "anthropic":
        assert fake_server.key_was_sent(SECRET)

    warm = run_cli("run", str(spec), cwd=tmp_path, env=env)
    assert warm.returncode == 0, warm.stderr
    assert fake_server.calls == N, "an identical re-run must not call the provider"
    assert f"Cache hits: {N}/{N}" in warm.stdout

    # Only the scorer changes: zero calls, different scores.
    write_spec(
        tmp_path / "add.yaml",
        base_url=f"{fake_server.base_url}/v1",
        provider=provider,
        extra_model=extra,
        scorer="{type: regex, pattern: 'Answer: 1'}",
    )
    rescored = run_cli("run", str(spec), cwd=tmp_path, env=env)
    assert rescored.returncode == 0, rescored.stderr
    assert fake_server.calls == N
    rows = _rows(tmp_path / run_dir_of(rescored))
    expected = [1.0 if str(r.response).startswith("Answer: 1") else 0.0 for r in rows]
    assert [r.score_of("score") for r in rows] == expected
    assert expected != [r.score_of("score") for r in cold_rows]

    # The prompt changes: every sample is a new request.
    write_spec(
        tmp_path / "add.yaml",
        base_url=f"{fake_server.base_url}/v1",
        provider=provider,
        extra_model=extra,
        prompt="Please.\n  Q: {{ a }} + {{ b }}",
    )
    edited = run_cli("run", str(spec), cwd=tmp_path, env=env)
    assert edited.returncode == 0, edited.stderr
    assert fake_server.calls == 2 * N

    # The key reached the server but no file, and no output.
    for file in tmp_path.rglob("*"):
        if file.is_file():
            assert SECRET.encode() not in file.read_bytes(), file
    for proc in (cold, warm, rescored, edited):
        assert SECRET not in proc.stdout + proc.stderr


def _rows(run_dir: Path) -> list[TraceRecord]:
    return load_run(run_dir).records


def run_dir_of(done: subprocess.CompletedProcess[str]) -> Path:
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("Run: ")]
    return Path(line.split(" -> ", 1)[1])


# `gradetrail run ARGS`, then `gradetrail run ARGS --no-cache` in the same process, each
# followed by the HTTP modules imported so far.
RUN_AND_LIST_HTTP_MODULES = """
import sys
from gradetrail_lib.cli import main
for extra in ([], ["--no-cache"]):
    code = main(sys.argv[1:] + extra)
    print("modules:", sorted(m for m in ("httpx", "httptools") if m in sys.modules), flush=True)
    if code:
        sys.exit(code)
"""


def test_a_fully_cached_run_does_not_load_the_http_stack(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    # httpx (with the rich console its CLI imports) is a fifth of a cached run's start-up.
    # The cache is filled in this process; a fresh one runs the spec from the cache, then
    # with --no-cache: the second run sends, and the same check finds the modules loaded.
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    args = ["run", str(spec), "--cache", str(tmp_path / "cache.duckdb")]
    cold = run_cli(*args, cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert fake_server.calls == N
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_HTTP_MODULES, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    parts = re.split(r"^modules: (.*)$", done.stdout, flags=re.M)
    assert parts[1::2] == ["[]", "['httptools', 'httpx']"]
    warm, sent = parts[0], parts[2]
    assert f"Cache hits: {N}/{N}" in warm and f"Cache hits: 0/{N}" in sent
    assert fake_server.calls == 2 * N


def test_manifest_and_results_fields(tmp_path: Path, fake_server: FakeLLMServer) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 5)
    fake_server.served_model = "fake-1-2026-01-01"
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    done = run_cli("run", str(spec), "--cache", str(tmp_path / "c.duckdb"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert run_dir.name == f"add-fake-1-{manifest['identity'][:12]}"
    assert manifest["model"] == {
        "requested": "fake-1",
        "provider": "openai_compatible",
        "base_url": f"{fake_server.base_url}/v1",
        "served": ["fake-1-2026-01-01"],
    }
    assert any("differs from requested" in w for w in manifest["warnings"])
    assert manifest["samples"] == 5 and manifest["target"]["calls"] == 5
    assert manifest["target"]["cache_hits"] == 0 and manifest["judge"]["calls"] == 0
    assert manifest["target"]["cost_usd"] is None, "an unpriced model's cost is unknown, not $0"
    assert len(manifest["dataset"]["hash"]) == 64 and len(manifest["spec"]["hash"]) == 64
    assert manifest["schema_version"] == 2
    assert [s["name"] for s in manifest["scorers"]] == ["score"]
    rows = read_results(tmp_path / "results")
    assert set(rows[0]) == {
        "schema_version",
        "id",
        "repeat",
        "messages",
        "calls",
        "response",
        "stop_reason",
        "scores",
        "outcome",
        "failure_mode",
        "trajectory",
        "retrieval",
        "choices",  # a multiple-choice sample's log-likelihoods (null for a generation)
    }
    assert rows[0]["choices"] is None
    (call,) = rows[0]["calls"]
    assert call["role"] == "target" and len(call["request_key"]) == 64
    assert call["served_model"] == "fake-1-2026-01-01" and call["cache_hit"] is False
    assert set(rows[0]["scores"]["score"]) == {"score", "reason", "error"}
    assert "Cost: unknown" in done.stdout


def test_spec_error_names_file_line_field_and_calls_nothing(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 3)
    spec = write_spec(
        tmp_path / "add.yaml",
        base_url=f"{fake_server.base_url}/v1",
        scorer="{type: regex, flags: [SHOUTING]}",
    )
    done = run_cli("run", str(spec), cwd=tmp_path)
    assert done.returncode == 2
    assert f"{spec}:8: scorer.flags[0]:" in done.stderr
    assert fake_server.calls == 0
    assert not (tmp_path / "results").exists()


def test_missing_prompt_field_names_sample_and_field(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 3)
    spec = write_spec(
        tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1", prompt="Q: {{ c }}"
    )
    done = run_cli("run", str(spec), cwd=tmp_path)
    assert done.returncode == 2
    assert "data/add.jsonl:1: prompt: sample 's000': 'c' is undefined" in done.stderr
    assert fake_server.calls == 0


def test_repeated_fatal_errors_abort_the_run(tmp_path: Path, fake_server: FakeLLMServer) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 40)
    fake_server.fail_always = Fault(status=401)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    done = run_cli("run", str(spec), "--concurrency", "2", cwd=tmp_path)
    assert done.returncode == 1
    assert "aborted after 3 identical errors" in done.stderr
    assert fake_server.calls < 10


def test_missing_api_key_aborts_before_any_request(
    tmp_path: Path, fake_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 10)
    spec = write_spec(
        tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1", provider="anthropic"
    )
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    done = run_cli("run", str(spec), cwd=tmp_path)
    assert done.returncode == 1
    assert "ANTHROPIC_API_KEY is not set" in done.stderr
    assert fake_server.calls == 0


def test_kill_9_repays_only_what_was_in_flight(tmp_path: Path) -> None:
    """A run at concurrency 8 is killed (SIGKILL) 3 ms after the server sent a round of
    answers: sooner than the burst writer stores them (it waits for a pause of 5 ms). Each
    answer is journaled as it arrives, so the re-run sends again only the requests that
    had no answer when the process died: at most one per worker."""
    n, concurrency, kill_after = 96, 8, 40
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    cache_path = tmp_path / "cache.duckdb"
    proc: subprocess.Popen[bytes] | None = None
    answered = 0

    def answer_then_kill(body: dict[str, Any]) -> str:
        nonlocal answered
        answered += 1
        if answered == kill_after and proc is not None:  # the last answer of a round
            threading.Timer(0.003, os.kill, (proc.pid, signal.SIGKILL)).start()
        return default_responder(body)

    with FakeLLMServer(latency_s=0.05, responder=answer_then_kill) as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        args = ["run", str(spec), "--cache", str(cache_path), "--concurrency", str(concurrency)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "gradetrail_lib.cli", *args],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proc.wait(timeout=120)
        assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed"
        first = _prompts(server)
        assert kill_after <= len(first) < n

        server.responder = default_responder
        server.reset_counts()
        rerun = run_cli(*args, cwd=tmp_path)
        assert rerun.returncode == 0, rerun.stderr
        repaid = first & _prompts(server)
        assert len(repaid) <= concurrency, f"{len(repaid)} requests paid for twice"
        assert server.calls == n - (len(first) - len(repaid))
        assert f"Cache hits: {len(first) - len(repaid)}/{n}" in rerun.stdout
        assert len(read_results(tmp_path / "results")) == n
    assert not list((tmp_path / "cache.duckdb.journal").glob("*.jsonl")), "journals left"


def _prompts(server: FakeLLMServer) -> set[str]:
    return {str(r["body"]["messages"][-1]["content"]) for r in server.requests}


def test_two_processes_share_one_cache_file(tmp_path: Path) -> None:
    n = 60
    cache_path = tmp_path / "cache.duckdb"
    with FakeLLMServer(latency_s=0.01) as server:
        procs = []
        for name in ("a", "b"):
            root = tmp_path / name
            write_addition_dataset(root / "data" / "add.jsonl", n)
            spec = write_spec(
                root / "add.yaml",
                base_url=f"{server.base_url}/v1",
                prompt=f"[{name}] Q: {{{{ a }}}} + {{{{ b }}}}",
            )
            procs.append(
                start_cli_process(
                    "run", str(spec), "--cache", str(cache_path), "--concurrency", "8", cwd=root
                )
            )
        outputs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs
        assert server.calls == 2 * n
        assert ResponseCache(cache_path).count() == 2 * n
        for name in ("a", "b"):
            again = run_cli(
                "run",
                str(tmp_path / name / "add.yaml"),
                "--cache",
                str(cache_path),
                cwd=tmp_path / name,
            )
            assert f"Cache hits: {n}/{n}" in again.stdout
        assert server.calls == 2 * n


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "3"], "workers needs the ray backend"),
        (["--concurrency", "0"], "concurrency must be at least 1"),
        (["--backend", "spark"], "unknown backend 'spark'"),
    ],
)
def test_bad_flags_exit_2_before_any_call(
    tmp_path: Path, fake_server: FakeLLMServer, flags: list[str], message: str
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 3)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    done = run_cli("run", str(spec), *flags, cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr
    assert fake_server.calls == 0


def test_wall_time_is_the_whole_commands_and_the_phases_add_up(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 20)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    started = time.perf_counter()
    # A process of its own: the printed wall time counts the interpreter's start-up.
    done = run_cli_process("run", str(spec), "--cache", str(tmp_path / "c.duckdb"), cwd=tmp_path)
    measured = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("Wall time: ")]
    printed = float(line.removeprefix("Wall time: ").removesuffix("s"))
    # Python's start-up included: what `time gradetrail run` says, within a few percent.
    assert printed <= measured and printed >= 0.9 * measured - 0.05
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    timings = json.loads((run_dir / "manifest.json").read_text())["timings_s"]
    phases = ["startup", "load", "plan", "cache_lookup", "responses", "scoring", "write"]
    assert list(timings) == [*phases, "total"]
    assert abs(sum(timings[p] for p in phases) - timings["total"]) < 1e-9
    assert timings["total"] <= printed


def test_no_cache_against_a_warm_cache_calls_the_provider_again(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    cache = ["--cache", str(tmp_path / "cache.duckdb")]
    cold = run_cli("run", str(spec), *cache, cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr
    warm = run_cli("run", str(spec), *cache, cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    assert f"Cache hits: {N}/{N}" in warm.stdout
    assert fake_server.calls == N

    # The cache holds every response, yet --no-cache sends every request again.
    fresh = run_cli("run", str(spec), *cache, "--no-cache", cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert fake_server.calls == 2 * N, "--no-cache must not read the cache"
    assert f"Cache hits: 0/{N}" in fresh.stdout
    rows = _rows(tmp_path / run_dir_of(fresh))
    assert not any(call.cache_hit for r in rows for call in r.calls)

    # Its responses were still stored: a normal run after it is free.
    again = run_cli("run", str(spec), *cache, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert fake_server.calls == 2 * N
    assert f"Cache hits: {N}/{N}" in again.stdout
