"""A CLI run against the fake server with prompt caching and reasoning: the calls' usage in
the records, the savings and reasoning tokens in the summary, the manifest, `cost` and the
report, all priced by the price list."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli, write_addition_dataset
from tests.support.fake_llm_server import REASONING_TOKENS, FakeLLMServer

N = 6
SYSTEM = "You add two whole numbers and answer with the sum only, nothing else at all."
PREFIX = len(SYSTEM.split())  # words: the fake server's tokens
M = 1e6


def spec(tmp_path: Path, url: str, provider: str, model: str, params: str) -> Path:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    path = tmp_path / f"{provider}.yaml"
    path.write_text(
        f"""name: add-{provider}
dataset: {{path: data/add.jsonl}}
system: "{SYSTEM}"
prompt: "Q: {{{{ a }}}} + {{{{ b }}}}"
models:
  - {{provider: {provider}, name: {model}, base_url: "{url}", api_key_env: GT_TEST_KEY}}
params: {{{params}}}
scorer: {{type: numeric}}
"""
    )
    return path


def run(tmp_path: Path, path: Path, *args: str) -> tuple[str, Path]:
    env = {"GT_TEST_KEY": "sk-test-usage-0123456789", "GRADETRAIL_CACHE": str(tmp_path / "c.db")}
    done = run_cli("run", str(path), "--results", str(tmp_path / "results"), *args,
                   cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = sorted(
        (p for p in (tmp_path / "results").iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime
    )
    return done.stdout, runs[-1]


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
    return data


@pytest.fixture
def server(fake_server: FakeLLMServer) -> FakeLLMServer:
    fake_server.prompt_cache_min_tokens = 1  # the prompts here are short
    return fake_server


def test_anthropic_prompt_cache_and_thinking_through_the_cli(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    url = f"{server.base_url}/v1"
    path = spec(tmp_path, url, "anthropic", "claude-haiku-4-5",
                "max_tokens: 2048, thinking: {type: enabled, budget_tokens: 1024}, "
                "cache: {prefix: true, ttl: 5m}")  # fmt: skip
    stdout, run_dir = run(tmp_path, path)
    # The system prompt (every sample's) was marked; the first call wrote it, the rest read it.
    bodies = [r["body"] for r in server.requests]
    assert all(b["system"][0]["cache_control"] == {"type": "ephemeral"} for b in bodies)
    calls = [r["calls"][0] for r in records(run_dir)]
    usages = [c["usage"] for c in calls]
    assert sorted(u["cache_write_input_tokens"] for u in usages) == [0] * (N - 1) + [PREFIX]
    assert sorted(u["cached_input_tokens"] for u in usages) == [0] + [PREFIX] * (N - 1)
    thinking = " ".join(["hmm"] * server.thinking_tokens)
    for record, call in zip(records(run_dir), calls, strict=True):
        assert call["usage"]["thinking"] == thinking and "hmm" not in record["response"]
        assert call["input_tokens"] == PREFIX + 4  # all of the input, cache included
        assert call["usage"]["batch"] is False
    # Priced at haiku's v2 rates: $1 input, $0.10 cache read, $1.25 5-minute write, $5 out.
    tokens_in = sum(c["input_tokens"] for c in calls)
    tokens_out = sum(c["output_tokens"] for c in calls)
    read, written = PREFIX * (N - 1), PREFIX
    cost = ((tokens_in - read - written) * 1.0 + read * 0.1 + written * 1.25 + tokens_out * 5) / M
    saved = (read * (1.0 - 0.1) - written * (1.25 - 1.0)) / M
    target = manifest(run_dir)["target"]
    assert target["cost_paid_usd"] == pytest.approx(cost)
    assert target["cache_saved_usd"] == pytest.approx(saved)
    assert (target["cached_input_tokens"], target["cache_write_input_tokens"]) == (read, written)
    assert target["batch_calls"] == 0 and target["batch_saved_usd"] == 0
    assert (
        f"Saved: prompt caching saved ${saved:.6f} ({read} tokens read from the cache, "
        f"{written} written)"
    ) in stdout
    env = {"GRADETRAIL_CACHE": str(tmp_path / "c.db")}
    priced = run_cli("cost", str(run_dir), "--json", cwd=tmp_path, env=env)
    assert priced.returncode == 0, priced.stderr
    (model,) = json.loads(priced.stdout)["models"]
    assert model["cost_usd"] == pytest.approx(cost)
    assert model["cache_saved_usd"] == pytest.approx(saved) and model["batch_saved_usd"] == 0
    text = run_cli("cost", str(run_dir), cwd=tmp_path, env=env)
    assert f"prompt caching saved ${saved:.6f} ({read} tokens read, {written} written)" in (
        text.stdout
    )
    report = tmp_path / "report.html"
    made = run_cli("report", str(run_dir), "--output", str(report), cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    assert f"prompt caching saved ${saved:.6f}" in report.read_text()


def test_openai_reasoning_and_automatic_cache_through_the_cli(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    url = f"{server.base_url}/v1"
    path = spec(tmp_path, url, "openai", "gpt-5-mini", "max_tokens: 64, reasoning_effort: low")
    stdout, run_dir = run(tmp_path, path)
    bodies = [r["body"] for r in server.requests]
    assert all(b["max_completion_tokens"] == 64 and "max_tokens" not in b for b in bodies)
    reasoning = REASONING_TOKENS["low"] * N
    calls = [r["calls"][0] for r in records(run_dir)]
    assert sum(c["usage"]["reasoning_tokens"] for c in calls) == reasoning
    tokens_out = sum(c["output_tokens"] for c in calls)
    assert f"{tokens_out} out ({reasoning} reasoning)" in stdout
    target = manifest(run_dir)["target"]
    assert target["reasoning_tokens"] == reasoning
    # OpenAI cached the shared system message after the first call, by itself.
    read = PREFIX * (N - 1)
    assert target["cached_input_tokens"] == read and target["cache_write_input_tokens"] == 0
    tokens_in = sum(c["input_tokens"] for c in calls)
    # gpt-5-mini: $0.25 input, $0.025 cached, $2 out (reasoning priced as output).
    cost = ((tokens_in - read) * 0.25 + read * 0.025 + tokens_out * 2.0) / M
    assert target["cost_paid_usd"] == pytest.approx(cost)
    # A second run answers from the response cache: the same usage, nothing paid again.
    server.reset_counts()
    again, second = run(tmp_path, path)
    assert server.calls == 0
    assert manifest(second)["target"]["reasoning_tokens"] == reasoning
    assert manifest(second)["target"]["cost_usd"] == pytest.approx(cost)
    assert f"({reasoning} reasoning)" in again


def test_a_model_that_spends_max_tokens_reasoning_is_truncated(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    url = f"{server.base_url}/v1"
    limit = REASONING_TOKENS["high"] - 1  # reasoning alone goes past the limit
    path = spec(tmp_path, url, "openai", "o3", f"max_tokens: {limit}, reasoning_effort: high")
    _, run_dir = run(tmp_path, path)
    for record in records(run_dir):
        assert (record["response"], record["stop_reason"]) == ("", "max_tokens")
        assert record["failure_mode"] == "truncated"
        assert record["calls"][0]["usage"]["reasoning_tokens"] == limit
