"""OpenAI's Responses API (`provider: openai`, `api: responses`): its body (instructions,
input items, reasoning, max_output_tokens, function tools, media parts), its answers
(text without the reasoning summary, tool calls, usage priced with reasoning and cached
tokens, truncation), agents and batches, run against the loopback fake server."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.base import Endpoint, ModelRequest
from gradetrail_lib.providers.media import MediaSource, media_part
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.providers.request import endpoint_settings, key_base_url, request_key
from gradetrail_lib.spec.spec import load_spec
from tests.agents.test_agent import agent, project, records_by_id
from tests.conftest import write_addition_dataset
from tests.support.fake_llm_server import REASONING_TOKENS, FakeLLMServer
from tests.support.media_files import pdf, png

KEY = "sk-test-responses-0123456789"
N = 6


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GT_KEY", KEY)


def spec_file(tmp_path: Path, base_url: str, *, params: str, model: str = "gpt-5") -> Path:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    spec = tmp_path / "add.yaml"
    spec.write_text(
        f"""name: add
dataset: {{path: data/add.jsonl}}
system: Answer with the sum.
prompt: "Q: {{{{ a }}}} + {{{{ b }}}}"
models:
  - {{provider: openai, name: {model}, api: responses, base_url: "{base_url}/v1"}}
params: {params}
scorer: {{type: numeric}}
"""
    )
    return spec


def test_a_spec_runs_through_responses_with_reasoning_then_from_the_cache(
    tmp_path: Path,
) -> None:
    with FakeLLMServer() as srv:
        params = "{temperature: 1, max_tokens: 2000, reasoning_effort: low}"
        spec = spec_file(tmp_path, srv.base_url, params=params)
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls_by_path == {"/v1/responses": N}
        assert all(r["status"] == 200 for r in srv.requests)
        body = srv.requests[0]["body"]
        assert body["instructions"] == "Answer with the sum."
        assert body["input"] == [{"role": "user", "content": "Q: 0 + 1"}]
        assert body["reasoning"] == {"effort": "low", "summary": "auto"}
        assert body["max_output_tokens"] == 2000 and body["store"] is False
        assert "messages" not in body and "max_tokens" not in body
        record = done.records[0]
        # The summary is kept out of the response; the reasoning tokens are counted.
        assert record.response == "Answer: 1" and "Thought" not in (record.response or "")
        call = record.target
        assert call is not None and call.usage is not None
        assert call.usage.reasoning_tokens == REASONING_TOKENS["low"]
        assert call.usage.thinking == f"Thought {REASONING_TOKENS['low']} tokens."
        assert call.cost_usd is not None and call.cost_usd > 0  # gpt-5 is priced
        assert done.manifest.target.reasoning_tokens == REASONING_TOKENS["low"] * N
        # The fake answers "Answer: a+b"; every fourth stored answer is off by one.
        assert [r.score_of("score") for r in done.records] == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0]

        (again,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == N and again.manifest.target.cache_hits == N


def test_max_output_tokens_truncation_is_recorded_as_truncated(tmp_path: Path) -> None:
    with FakeLLMServer(responder=lambda body: "one two three four five six") as srv:
        spec = spec_file(tmp_path, srv.base_url, params="{temperature: 0, max_tokens: 3}")
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.requests[0]["body"]["max_output_tokens"] == 3
        assert all(r.truncated for r in done.records)
        assert done.records[0].response == "one two three"


def test_an_agent_runs_through_function_call_items_and_replays(tmp_path: Path) -> None:
    with FakeLLMServer(responder=agent) as srv:
        spec = project(tmp_path, f"{srv.base_url}/v1", "openai")
        spec.write_text(
            spec.read_text().replace("name: agent-1,", "name: agent-1, api: responses,")
        )
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        sent = srv.calls
        assert all(r["status"] == 200 for r in srv.requests), [r["status"] for r in srv.requests]
        by_id = records_by_id(done)
        paris = by_id["paris"]
        assert (paris.outcome, paris.failure_mode) == ("scored", None)
        assert paris.response == "It is sunny in Paris."
        assert paris.trajectory[0].tool_results[0].content == '{"condition": "sunny"}'
        assert by_id["atlantis"].failure_mode == "tool_error"
        assert by_id["loop"].failure_mode == "thrash"
        # The second request carries the call and its output as items (the fake refuses
        # an output whose call_id no earlier function_call has).
        second = next(r["body"] for r in srv.requests if len(r["body"]["input"]) > 1)
        kinds = [item.get("type", "message") for item in second["input"]]
        assert kinds == ["message", "function_call", "function_call_output"]
        assert second["tools"][0]["type"] == "function" and "name" in second["tools"][0]
        (again,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == sent and again.manifest.target.cache_hits == sent


def test_a_batch_goes_to_the_responses_endpoint(tmp_path: Path) -> None:
    with FakeLLMServer() as srv:
        srv.batches.duration_s = 0.0
        spec = spec_file(tmp_path, srv.base_url, params="{temperature: 0, max_tokens: 64}")
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db", batch="all")
        (batch,) = srv.batches.batches.values()
        assert batch.endpoint == "/v1/responses"
        assert {line["url"] for line in batch.lines} == {"/v1/responses"}
        assert "input" in batch.lines[0]["body"]
        assert done.manifest.target.batch_calls == N
        assert [r.score_of("score") for r in done.records] == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0]
        assert srv.calls_by_path.get("/v1/responses", 0) == 0  # nothing sent one by one


def test_chat_keys_are_unchanged_and_responses_keys_differ() -> None:
    chat = ModelConfig(provider="openai", name="gpt-5")
    responses = ModelConfig(provider="openai", name="gpt-5", api="responses")
    messages = [{"role": "user", "content": "hi"}]
    params = {"max_tokens": 8}
    plain = request_key("openai", "gpt-5", key_base_url(chat), messages, params)
    assert endpoint_settings(chat) == {} and endpoint_settings(ModelConfig(
        provider="openai", name="gpt-5", api="chat")) == {}  # fmt: skip
    assert endpoint_settings(responses) == {"api": "responses"}
    keyed = request_key(
        "openai", "gpt-5", key_base_url(responses), messages, params,
        settings=endpoint_settings(responses),
    )  # fmt: skip
    assert keyed != plain
    # The families served only by the Responses API default to it.
    assert endpoint_settings(ModelConfig(provider="openai", name="o3-pro")) == {"api": "responses"}
    assert endpoint_settings(ModelConfig(provider="openai", name="gpt-5-codex")) == {
        "api": "responses"
    }
    with pytest.raises(ValueError, match="api is a setting of provider openai only"):
        ModelConfig(provider="anthropic", name="claude", api="responses")


def test_media_parts_are_input_image_and_input_file() -> None:
    image, doc = png(2, 2, (1, 2, 3)), pdf(1)
    parts = [media_part(image, "image/png"), media_part(doc, "application/pdf")]
    media = {
        parts[0]["sha256"]: MediaSource(data=image),
        parts[1]["sha256"]: MediaSource(data=doc, name="form.pdf"),
    }
    endpoint = Endpoint("openai", "gpt-5", "https://api.test/v1", None, (("api", "responses"),))
    request = ModelRequest(
        "k", endpoint, [{"role": "user", "content": [{"type": "text", "text": "?"}, *parts]}],
        {"max_tokens": 5}, media=media,
    )  # fmt: skip
    body = registry.get("openai").adapter.body(request)  # type: ignore[union-attr]
    content = body["input"][0]["content"]
    assert content == [
        {"type": "input_text", "text": "?"},
        {"type": "input_image",
         "image_url": "data:image/png;base64," + base64.b64encode(image).decode()},
        {"type": "input_file", "filename": "form.pdf",
         "file_data": "data:application/pdf;base64," + base64.b64encode(doc).decode()},
    ]  # fmt: skip
    assert json.dumps(body).count("base64") == 2


@pytest.mark.parametrize("param", ["seed: 7", "stop: ['\\n']"])
def test_stop_and_seed_are_refused_at_load_naming_file_line_and_field(
    tmp_path: Path, param: str
) -> None:
    spec = spec_file(tmp_path, "http://127.0.0.1:9", params=f"{{max_tokens: 64, {param}}}")
    with pytest.raises(InputError) as raised:
        load_spec(spec)
    error = raised.value
    name = param.split(":")[0]
    assert f"{name} is not a parameter of OpenAI's Responses API" in str(error)
    assert str(spec) in str(error) and error.field == "params" and error.line == 7
    # The same parameters go to Chat Completions, which takes them.
    spec.write_text(spec.read_text().replace(" api: responses,", ""))
    assert load_spec(spec).spec.params.max_tokens == 64
