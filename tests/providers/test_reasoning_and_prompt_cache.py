"""Prompt caching and reasoning models: what the adapters send (cache_control marks,
max_completion_tokens, reasoning_effort, thinking), what they read back (cached, written and
reasoning tokens, thinking text) from the fake server's two API shapes, and that the
prompt-cache marker stays out of the request key and the spec hash."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradetrail_lib.backends.transport import shared_ssl_context
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.anthropic_messages import AnthropicMessagesAdapter
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse, PromptCacheMark
from gradetrail_lib.providers.caller import call_model
from gradetrail_lib.providers.openai_chat import OpenAIChatAdapter, wants_max_completion_tokens
from gradetrail_lib.providers.policy import RetryPolicy
from gradetrail_lib.spec.identity import requests_hash, spec_hash
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import write_addition_dataset
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.plans import whole

SYSTEM = "You add numbers. " * 8  # 32 words: the shared prefix
FEW_SHOT_Q = "Q: 1 + 1"
FEW_SHOT_A = "Answer: 2"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-0123456789")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")


def request(
    provider: str,
    base_url: str,
    *,
    model: str = "m",
    params: dict[str, Any] | None = None,
    question: str = "Q: 2 + 3",
    mark: PromptCacheMark | None = None,
) -> ModelRequest:
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": FEW_SHOT_Q},
        {"role": "assistant", "content": FEW_SHOT_A},
        {"role": "user", "content": question},
    ]
    return ModelRequest(
        key="k" * 64,
        endpoint=Endpoint(provider, model, base_url, f"{provider.upper()}_API_KEY"),
        messages=messages,
        params={"max_tokens": 64} if params is None else params,
        prompt_cache=mark,
    )


def call(request: ModelRequest) -> ModelResponse:
    async def go() -> ModelResponse:
        async with httpx.AsyncHTTPTransport(verify=shared_ssl_context()) as transport:
            policy = RetryPolicy(max_attempts=1)
            return await call_model(transport, request, policy, rng=random.Random(0))

    return asyncio.run(go())


def sent_body(request: ModelRequest, adapter: Any) -> dict[str, Any]:
    built = adapter.build(request, "key")
    body: dict[str, Any] = json.loads(built.read())
    return body


# -- Anthropic: the marker


def test_the_last_shared_message_is_marked_with_cache_control() -> None:
    adapter = AnthropicMessagesAdapter()
    mark = PromptCacheMark(messages=3, ttl="5m")
    body = sent_body(request("anthropic", "http://x", mark=mark), adapter)
    # Three shared messages: the system text, the few-shot question and its answer; the
    # answer's turn is marked (a 5-minute write is the default: no ttl named).
    assert body["system"] == SYSTEM
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": FEW_SHOT_A, "cache_control": {"type": "ephemeral"}}],
    }
    assert body["messages"][0] == {"role": "user", "content": FEW_SHOT_Q}
    assert body["messages"][2] == {"role": "user", "content": "Q: 2 + 3"}
    # Only the system message shared, for an hour: the system text becomes a marked block.
    only_system = PromptCacheMark(messages=1, ttl="1h")
    body = sent_body(request("anthropic", "http://x", mark=only_system), adapter)
    assert body["system"] == [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    assert all(isinstance(m["content"], str) for m in body["messages"])
    # No marker: the body is what it was.
    assert sent_body(request("anthropic", "http://x"), adapter)["system"] == SYSTEM


def test_anthropic_cache_writes_then_reads_are_parsed_and_input_counts_all_of_it(
    fake_server: FakeLLMServer,
) -> None:
    fake_server.prompt_cache_min_tokens = 10
    url = f"{fake_server.base_url}/v1"
    mark = PromptCacheMark(messages=3, ttl="5m")
    first = call(request("anthropic", url, mark=mark))
    prefix = len(SYSTEM.split()) + len(FEW_SHOT_Q.split()) + len(FEW_SHOT_A.split())
    total = prefix + len(["Q:", "2", "+", "3"])
    assert (first.input_tokens, first.cache_write_input_tokens, first.cached_input_tokens) == (
        total, prefix, 0
    )  # fmt: skip
    second = call(request("anthropic", url, mark=mark, question="Q: 4 + 4"))
    assert (second.input_tokens, second.cached_input_tokens) == (total, prefix)
    assert second.cache_write_input_tokens == 0 and second.text == "Answer: 8"
    hour = call(request("anthropic", url, mark=PromptCacheMark(messages=3, ttl="1h")))
    assert (hour.cache_write_1h_input_tokens, hour.cache_write_input_tokens) == (prefix, 0)
    unmarked = call(request("anthropic", url))
    assert (unmarked.cached_input_tokens, unmarked.cache_write_input_tokens) == (0, 0)


# -- OpenAI: automatic caching, reasoning


def test_openai_cached_tokens_are_read_from_prompt_tokens_details(
    fake_server: FakeLLMServer,
) -> None:
    fake_server.prompt_cache_min_tokens = 10
    url = f"{fake_server.base_url}/v1"
    first = call(request("openai", url))
    second = call(request("openai", url, question="Q: 4 + 4"))
    prefix = len(SYSTEM.split()) + len(FEW_SHOT_Q.split()) + len(FEW_SHOT_A.split())
    assert first.cached_input_tokens == 0
    assert second.cached_input_tokens == prefix and second.input_tokens == prefix + 4


@pytest.mark.parametrize(
    ("model", "renamed"),
    [("gpt-5", True), ("gpt-5-mini", True), ("o3", True), ("o4-mini", True),
     ("gpt-4.1", False), ("gpt-4o-mini", False), ("qwen2.5-7b", False)],
)  # fmt: skip
def test_reasoning_models_get_max_completion_tokens(model: str, renamed: bool) -> None:
    assert wants_max_completion_tokens(model) is renamed
    body = sent_body(request("openai", "http://x", model=model), OpenAIChatAdapter())
    assert ("max_completion_tokens" in body, "max_tokens" in body) == (renamed, not renamed)
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 64


def test_openai_reasoning_tokens_are_recorded_and_part_of_the_output(
    fake_server: FakeLLMServer,
) -> None:
    url = f"{fake_server.base_url}/v1"
    params = {"max_tokens": 64, "reasoning_effort": "high"}
    got = call(request("openai", url, model="gpt-5", params=params))
    sent = fake_server.requests[-1]["body"]
    assert sent["reasoning_effort"] == "high" and sent["max_completion_tokens"] == 64
    assert got.text == "Answer: 5" and got.reasoning_tokens == 16
    assert got.output_tokens == 16 + 2 and got.stop_reason == "stop"


def test_a_truncation_inside_reasoning_is_max_tokens_with_no_text(
    fake_server: FakeLLMServer,
) -> None:
    url = f"{fake_server.base_url}/v1"
    params = {"max_tokens": 10, "reasoning_effort": "high"}
    got = call(request("openai", url, model="o3", params=params))
    assert (got.text, got.stop_reason, got.reasoning_tokens, got.output_tokens) == (
        "", "max_tokens", 10, 10
    )  # fmt: skip
    thinking = {"type": "enabled", "budget_tokens": 1024}
    fake_server.thinking_tokens = 50
    anthropic = call(request("anthropic", url, params={"max_tokens": 20, "thinking": thinking}))
    assert (anthropic.text, anthropic.stop_reason, anthropic.output_tokens) == (
        "", "max_tokens", 20
    )  # fmt: skip


def test_anthropic_thinking_is_kept_out_of_the_answer(fake_server: FakeLLMServer) -> None:
    url = f"{fake_server.base_url}/v1"
    thinking = {"type": "enabled", "budget_tokens": 1024}
    got = call(request("anthropic", url, params={"max_tokens": 2048, "thinking": thinking}))
    assert fake_server.requests[-1]["body"]["thinking"] == thinking
    assert got.text == "Answer: 5"
    assert got.thinking == " ".join(["hmm"] * fake_server.thinking_tokens)
    # Anthropic reports no thinking count of its own: its output_tokens hold them.
    assert got.output_tokens == fake_server.thinking_tokens + 2 and got.reasoning_tokens == 0


# -- the spec: validation, the key, the identity


def spec_file(tmp_path: Path, params: str, provider: str = "anthropic", model: str = "m") -> Path:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 3)
    path = tmp_path / f"spec-{abs(hash((params, provider)))}.yaml"
    path.write_text(
        f"""name: add
dataset: {{path: data/add.jsonl}}
system: "{SYSTEM.strip()}"
prompt: "Q: {{{{ a }}}} + {{{{ b }}}}"
models:
  - {{provider: {provider}, name: {model}, base_url: "http://127.0.0.1:1/v1"}}
params:
{params}
scorer: {{type: numeric}}
"""
    )
    return path


def test_two_specs_differing_only_in_cache_share_keys_and_identity(tmp_path: Path) -> None:
    plain = load_spec(spec_file(tmp_path, "  max_tokens: 16"))
    cached = load_spec(spec_file(tmp_path, "  max_tokens: 16\n  cache: {prefix: true, ttl: 1h}"))
    model = plain.spec.models[0]
    plain_items = whole(plan(plain, model)).items
    cached_items = whole(plan(cached, cached.spec.models[0])).items
    assert [i.request.key for i in plain_items] == [i.request.key for i in cached_items]
    assert spec_hash(plain) == spec_hash(cached)
    assert requests_hash(plain, model) == requests_hash(cached, cached.spec.models[0])
    # The marker travels apart: after the system message, which every sample shares.
    assert {i.request.prompt_cache for i in cached_items} == {PromptCacheMark(messages=1, ttl="1h")}
    assert {i.request.prompt_cache for i in plain_items} == {None}
    assert "cache" not in cached_items[0].request.params
    # A param that changes the answer does change the key.
    thinking = load_spec(
        spec_file(tmp_path, "  max_tokens: 2048\n  thinking: {type: enabled, budget_tokens: 1024}")
    )
    keys = [i.request.key for i in whole(plan(thinking, thinking.spec.models[0])).items]
    assert set(keys).isdisjoint(i.request.key for i in plain_items)


@pytest.mark.parametrize(
    ("params", "provider", "field", "message"),
    [
        ("  thinking: {type: enabled, budget_tokens: 2048}", "anthropic", "params",
         "budget_tokens (2048) must be less than max_tokens (512)"),
        ("  max_tokens: 4096\n  thinking: {type: enabled, budget_tokens: 100}", "anthropic",
         "params.thinking.budget_tokens", "greater than or equal to 1024"),
        ("  reasoning_effort: extreme", "openai", "params.reasoning_effort", "minimal"),
        ("  reasoning_effort: high", "anthropic", "params",
         "reasoning_effort is not a parameter of the Anthropic Messages API"),
        ("  max_tokens: 4096\n  thinking: {type: enabled, budget_tokens: 1024}", "openai",
         "params", "thinking is not a parameter of OpenAI"),
        ("  cache: {prefix: true, ttl: 2h}", "anthropic", "params.cache.ttl", "5m"),
        ("  max_tokens: 4096\n  temperature: 0\n  thinking: {type: enabled, budget_tokens: 1024}",
         "anthropic", "params", "with thinking, leave temperature unset"),
        ("  max_tokens: 4096\n  top_p: 0.5\n  thinking: {type: enabled, budget_tokens: 1024}",
         "anthropic", "params", "top_p must be at least 0.95"),
    ],
)  # fmt: skip
def test_bad_reasoning_and_cache_params_name_file_line_and_field(
    tmp_path: Path, params: str, provider: str, field: str, message: str
) -> None:
    path = spec_file(tmp_path, params, provider)
    with pytest.raises(InputError) as raised:
        load_spec(path)
    error = raised.value
    text = str(error)
    assert str(path) in text and message in text, text
    assert error.field is not None and error.field.startswith(field), error.field
    assert error.line is not None and error.line >= 7  # the params block's lines


def test_thinking_with_tools_is_refused_at_its_line(tmp_path: Path) -> None:
    thinking = "  max_tokens: 2048\n  thinking: {type: enabled, budget_tokens: 1024}"
    path = spec_file(tmp_path, thinking)
    path.write_text(path.read_text() + "tools:\n  - name: search\n")
    with pytest.raises(InputError, match="thinking with tools is not supported") as raised:
        load_spec(path)
    assert raised.value.field is not None and raised.value.field.startswith("params")


def test_pricing_a_parsed_response_uses_its_usage() -> None:
    from gradetrail_lib.providers.pricing import call_cost, load_prices

    read = ModelResponse(
        text="ok", served_model="m", stop_reason="stop", input_tokens=1000,
        output_tokens=100, latency_s=0.1, cached_input_tokens=900, reasoning_tokens=60,
    )  # fmt: skip
    cost = call_cost(read, load_prices(), "openai", "gpt-5")
    assert cost.usd == pytest.approx((100 * 1.25 + 900 * 0.125 + 100 * 10.0) / 1e6)
    assert cost.cache_saved_usd == pytest.approx(900 * (1.25 - 0.125) / 1e6)
    batch = call_cost(replace(read, batch=True), load_prices(), "openai", "gpt-5")
    assert batch.usd == pytest.approx(cost.usd / 2)  # type: ignore[operator]
