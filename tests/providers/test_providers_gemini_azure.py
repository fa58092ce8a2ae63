"""Providers `gemini` and `azure_openai`, each one module plus its registration: their
request and response shapes (tools included), errors, keys, retries and request keys
against httpx.MockTransport, and specs run end to end against the loopback fake server."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import hash_json
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.base import (
    Endpoint,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
)
from gradetrail_lib.providers.caller import adapter_for, call_model
from gradetrail_lib.providers.model_listing import list_models
from gradetrail_lib.providers.policy import RetryPolicy
from gradetrail_lib.providers.pricing import load_prices
from gradetrail_lib.providers.registry import ModelConfig, Watch
from gradetrail_lib.providers.request import RequestBuilder, key_base_url, request_key
from gradetrail_lib.spec.spec import Params, load_spec
from tests.agents.test_agent import agent, project, records_by_id
from tests.conftest import run_cli, write_addition_dataset, write_spec
from tests.support.agent_scripts import conversation
from tests.support.fake_llm_server import FakeLLMServer, Fault

GEMINI_KEY = "AIza-test-gemini-0123456789abcdef"
AZURE_KEY = "azure-test-key-0123456789abcdef"
GEMINI_BASE = "https://generativelanguage.test"
AZURE_BASE = "https://res.openai.azure.test"

TOOLS: list[dict[str, Any]] = [
    {
        "name": "add",
        "description": "Adds two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
    {"name": "now", "description": "", "parameters": {"type": "object", "properties": {}}},
]

CONVERSATION: list[Message] = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "What is 2 + 3, and the time?"},
    {
        "role": "assistant",
        "content": "Let me see.",
        "tool_calls": [
            {"id": "call_0", "name": "add", "arguments": {"a": 2, "b": 3}},
            {"id": "call_1", "name": "now", "arguments": {}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "name": "add", "content": "5"},
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "name": "now",
        "content": "no clock",
        "is_error": True,
    },
]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", AZURE_KEY)


def gemini_request(
    messages: list[Message] | None = None,
    *,
    params: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    model: str = "gemini-2.5-flash",
) -> ModelRequest:
    return ModelRequest(
        key="k" * 64,
        endpoint=Endpoint("gemini", model, GEMINI_BASE, "GEMINI_API_KEY"),
        messages=messages or [{"role": "user", "content": "Q: 2 + 3"}],
        params={"max_tokens": 64} if params is None else params,
        tools=tools,
        tool_choice=tool_choice,
    )


def azure_request(
    *, api_version: str = "2024-10-21", tools: list[dict[str, Any]] | None = None
) -> ModelRequest:
    endpoint = Endpoint(
        "azure_openai", "gpt4o-prod", AZURE_BASE, "AZURE_OPENAI_API_KEY",
        (("api_version", api_version),),
    )  # fmt: skip
    return ModelRequest(
        key="k" * 64,
        endpoint=endpoint,
        messages=[{"role": "user", "content": "Q: 2 + 3"}],
        params={"max_tokens": 64},
        tools=tools,
        tool_choice="auto" if tools else None,
    )


def gemini_body(
    parts: list[dict[str, Any]] | None = None,
    finish: str | None = "STOP",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"text": "Answer: 5"}] if parts is None else parts,
                },
                "finishReason": finish,
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 3}
        if usage is None
        else usage,
        "modelVersion": "gemini-2.5-flash-001",
    }


def openai_body(text: str = "Answer: 5") -> dict[str, Any]:
    return {
        "model": "gpt-4o-2024-11-20",
        "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
    }


def call(
    request: ModelRequest, replies: Sequence[httpx.Response], policy: RetryPolicy | None = None
) -> tuple[ModelResponse | ProviderError, list[httpx.Request], list[float]]:
    """One `call_model`; `replies` answered in order (the last one repeats)."""
    seen: list[httpx.Request] = []
    sleeps: list[float] = []

    def handler(http_request: httpx.Request) -> httpx.Response:
        seen.append(http_request)
        return replies[min(len(seen), len(replies)) - 1]

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def go() -> ModelResponse | ProviderError:
        async with httpx.MockTransport(handler) as transport:
            try:
                return await call_model(
                    transport, request, policy or RetryPolicy(), sleep=fake_sleep,
                    rng=random.Random(0),
                )  # fmt: skip
            except ProviderError as exc:
                return exc

    return asyncio.run(go()), seen, sleeps


def built(request: ModelRequest, key: str | None = "key") -> httpx.Request:
    return adapter_for(request.endpoint.provider).build(request, key)


# --------------------------------------------------------------------- gemini: build


def test_gemini_request_shape() -> None:
    request = gemini_request(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q: 2 + 3"}],
        params={
            "temperature": 0.0, "max_tokens": 64, "top_p": 0.9, "stop": ["\n"], "seed": 7,
            "safetySettings": [], "generationConfig": {"topK": 3},
        },
    )  # fmt: skip
    http = built(request, GEMINI_KEY)
    assert http.method == "POST"
    assert str(http.url) == f"{GEMINI_BASE}/v1beta/models/gemini-2.5-flash:generateContent"
    assert http.headers["x-goog-api-key"] == GEMINI_KEY
    assert "authorization" not in http.headers
    assert json.loads(http.read()) == {
        "contents": [{"role": "user", "parts": [{"text": "Q: 2 + 3"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {
            "temperature": 0.0,
            "maxOutputTokens": 64,
            "topP": 0.9,
            "stopSequences": ["\n"],
            "seed": 7,
            "topK": 3,
        },
        "safetySettings": [],
    }


def test_gemini_extra_fields_cannot_replace_the_conversation() -> None:
    request = gemini_request(params={"max_tokens": 8, "contents": [], "systemInstruction": 1})
    body = json.loads(built(request).read())
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Q: 2 + 3"}]}]
    assert body["systemInstruction"] == 1  # none built here: the extra field stays


def test_gemini_build_of_a_tool_conversation() -> None:
    body = json.loads(built(gemini_request(CONVERSATION, tools=TOOLS, tool_choice="auto")).read())
    assert body["systemInstruction"] == {"parts": [{"text": "Use the tools."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "What is 2 + 3, and the time?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Let me see."},
                {"functionCall": {"name": "add", "args": {"a": 2, "b": 3}}},
                {"functionCall": {"name": "now", "args": {}}},
            ],
        },
        {
            # A run of tool results is one user content; a failed tool's is an error.
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "add", "response": {"output": "5"}}},
                {"functionResponse": {"name": "now", "response": {"error": "no clock"}}},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "functionDeclarations": [
                TOOLS[0],
                # No properties: declared without parameters (the API refuses an empty object).
                {"name": "now"},
            ]
        }
    ]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


@pytest.mark.parametrize(
    ("choice", "mode"), [("auto", "AUTO"), ("required", "ANY"), ("none", "NONE")]
)
def test_gemini_tool_choice(choice: str, mode: str) -> None:
    body = json.loads(built(gemini_request(tools=TOOLS, tool_choice=choice)).read())
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": mode}}
    plain = json.loads(built(gemini_request(tools=TOOLS)).read())
    assert "toolConfig" not in plain and "tools" in plain
    assert "tools" not in json.loads(built(gemini_request(tools=[])).read())


def test_gemini_conversation_reads_back_as_the_neutral_messages() -> None:
    body = json.loads(
        built(gemini_request(CONVERSATION, tools=TOOLS, tool_choice="required")).read()
    )
    convo = conversation(body)
    assert convo.system == "Use the tools."
    assert convo.messages == [
        {k: v for k, v in m.items() if k != "is_error"} for m in CONVERSATION[1:]
    ]
    assert convo.tools == ["add", "now"] and convo.tool_choice == "required"


# --------------------------------------------------------------------- gemini: parse


def test_gemini_response_text_usage_and_served_model() -> None:
    response, requests, _ = call(gemini_request(), [httpx.Response(200, json=gemini_body())])
    assert isinstance(response, ModelResponse)
    assert (response.text, response.stop_reason) == ("Answer: 5", "stop")
    assert (response.input_tokens, response.output_tokens) == (11, 3)
    assert response.served_model == "gemini-2.5-flash-001"
    assert response.tool_calls == [] and len(requests) == 1


def test_gemini_thoughts_are_not_the_answer_but_are_billed_as_output() -> None:
    parts = [{"text": "Let me think...", "thought": True}, {"text": "Answer: "}, {"text": "5"}]
    usage = {"promptTokenCount": 11, "candidatesTokenCount": 3, "thoughtsTokenCount": 40}
    parsed = adapter_for("gemini").parse(gemini_body(parts, usage=usage))
    assert parsed.text == "Answer: 5"
    assert (parsed.input_tokens, parsed.output_tokens) == (11, 43)
    assert parsed.reasoning_tokens == 40 and parsed.cached_input_tokens == 0
    cached = {**usage, "cachedContentTokenCount": 8}
    assert adapter_for("gemini").parse(gemini_body(parts, usage=cached)).cached_input_tokens == 8


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "other"),
        ("OTHER", "other"),
        (None, "other"),
    ],
)
def test_gemini_finish_reasons(finish: str | None, expected: str) -> None:
    assert adapter_for("gemini").parse(gemini_body(finish=finish)).stop_reason == expected


def test_gemini_function_calls_stop_for_tool_use_with_ids_by_place() -> None:
    parts = [
        {"text": "Adding."},
        {"functionCall": {"name": "add", "args": {"a": 1, "b": 2}}},
        {"functionCall": {"name": "now"}},
        {"functionCall": {"id": "fc-9", "name": "add", "args": "not an object"}},
    ]
    parsed = adapter_for("gemini").parse(gemini_body(parts, finish="STOP"))
    assert parsed.stop_reason == "tool_use"
    assert parsed.text == "Adding."
    assert parsed.tool_calls == [
        {"id": "call_0", "name": "add", "arguments": {"a": 1, "b": 2}},
        {"id": "call_1", "name": "now", "arguments": {}},
        {"id": "fc-9", "name": "add", "arguments": {"_unparsed": "not an object"}},
    ]


def test_gemini_blocked_prompt_is_a_content_filter_stop() -> None:
    body = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5}}
    parsed = adapter_for("gemini").parse(body)
    assert (parsed.text, parsed.stop_reason) == ("", "content_filter")
    assert (parsed.input_tokens, parsed.output_tokens) == (5, 0)


@pytest.mark.parametrize("content", [b"[]", b'{"candidates": [{"content": {"parts": ["x"]}}]}'])
def test_gemini_malformed_200_is_fatal(content: bytes) -> None:
    error, _, _ = call(gemini_request(), [httpx.Response(200, content=content)])
    assert isinstance(error, ProviderError) and error.kind == "fatal"
    assert error.message.startswith("unexpected response body")


def test_gemini_function_response_round_trip() -> None:
    """A functionCall answer, its result sent back as a functionResponse, then the answer."""
    answers = [
        gemini_body([{"functionCall": {"name": "add", "args": {"a": 2, "b": 3}}}]),
        gemini_body([{"text": "The sum is 5."}]),
    ]
    messages: list[Message] = [{"role": "user", "content": "Q: 2 + 3"}]
    first, _, _ = call(
        gemini_request(messages, tools=TOOLS), [httpx.Response(200, json=answers[0])]
    )
    assert isinstance(first, ModelResponse) and first.stop_reason == "tool_use"
    (tool_call,) = first.tool_calls
    messages += [
        {"role": "assistant", "content": first.text, "tool_calls": first.tool_calls},
        {"role": "tool", "tool_call_id": tool_call["id"], "name": "add", "content": "5"},
    ]
    second, sent, _ = call(
        gemini_request(messages, tools=TOOLS), [httpx.Response(200, json=answers[1])]
    )
    assert isinstance(second, ModelResponse) and second.text == "The sum is 5."
    assert json.loads(sent[0].content)["contents"][1:] == [
        {"role": "model", "parts": [{"functionCall": {"name": "add", "args": {"a": 2, "b": 3}}}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "add", "response": {"output": "5"}}}],
        },
    ]


# -------------------------------------------------------------- gemini: errors, keys


def gemini_error(status: int, grpc: str, message: str, **extra: Any) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"code": status, "message": message, "status": grpc, **extra}}
    )


def test_gemini_error_body_is_read_and_the_key_redacted() -> None:
    reply = gemini_error(
        400, "INVALID_ARGUMENT", f"API key {GEMINI_KEY} not valid. Please pass a valid API key."
    )
    error, requests, _ = call(gemini_request(), [reply])
    assert isinstance(error, ProviderError) and error.kind == "fatal" and error.status == 400
    assert (
        error.message
        == "HTTP 400: INVALID_ARGUMENT: API key [redacted] not valid. Please pass a valid API key."
    )
    assert GEMINI_KEY not in error.message and len(requests) == 1


def test_gemini_429_waits_as_its_retry_info_says_then_succeeds() -> None:
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}
    limited = gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", details=[retry_info])
    response, requests, sleeps = call(
        gemini_request(), [limited, httpx.Response(200, json=gemini_body())]
    )
    assert isinstance(response, ModelResponse) and response.attempts == 2
    assert len(requests) == 2 and len(sleeps) == 1 and 7.0 <= sleeps[0] <= 7.1
    # A retry-after header, when there is one, is what counts.
    limited.headers["retry-after"] = "2"
    _, _, sleeps = call(gemini_request(), [limited, httpx.Response(200, json=gemini_body())])
    assert 2.0 <= sleeps[0] <= 2.1


@pytest.mark.parametrize("status", [500, 503])
def test_gemini_server_errors_are_retried(status: int) -> None:
    error, requests, sleeps = call(
        gemini_request(), [gemini_error(status, "UNAVAILABLE", "busy")], RetryPolicy(max_attempts=3)
    )
    assert isinstance(error, ProviderError) and error.kind == "transient"
    assert error.message == f"HTTP {status}: UNAVAILABLE: busy (after 3 attempts)"
    assert len(requests) == 3 and len(sleeps) == 2


@pytest.mark.parametrize(
    ("request_of", "env"),
    [(gemini_request, "GEMINI_API_KEY"), (azure_request, "AZURE_OPENAI_API_KEY")],
)
def test_a_missing_key_is_fatal_and_names_the_variable(
    request_of: Any, env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(env)
    error, requests, _ = call(request_of(), [httpx.Response(200, json=gemini_body())])
    assert isinstance(error, ProviderError) and error.kind == "fatal"
    assert error.message == f"environment variable {env} is not set (it holds the key)"
    assert requests == []


# ---------------------------------------------------------------------- azure: build


def test_azure_request_shape_and_api_version_in_the_url() -> None:
    http = built(azure_request(tools=TOOLS[:1]), AZURE_KEY)
    assert str(http.url) == (
        f"{AZURE_BASE}/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"
    )
    assert http.headers["api-key"] == AZURE_KEY
    assert "authorization" not in http.headers
    body = json.loads(http.read())
    # The OpenAI adapter's body, tools included.
    assert body == {
        "model": "gpt4o-prod",
        "messages": [{"role": "user", "content": "Q: 2 + 3"}],
        "max_tokens": 64,
        "tools": [{"type": "function", "function": TOOLS[0]}],
        "tool_choice": "auto",
    }
    preview = built(azure_request(api_version="2025-04-01-preview"))
    assert preview.url.params["api-version"] == "2025-04-01-preview"


def test_azure_errors_keys_and_retries_are_openais() -> None:
    echoed = httpx.Response(401, json={"error": {"code": "401", "message": f"bad key {AZURE_KEY}"}})
    error, _, _ = call(azure_request(), [echoed])
    assert isinstance(error, ProviderError)
    assert error.message == "HTTP 401: bad key [redacted]"
    limited = httpx.Response(
        429, json={"error": {"message": "slow down"}}, headers={"retry-after": "3"}
    )
    response, requests, sleeps = call(
        azure_request(), [limited, httpx.Response(200, json=openai_body())]
    )
    assert isinstance(response, ModelResponse) and response.text == "Answer: 5"
    assert len(requests) == 2 and 3.0 <= sleeps[0] <= 3.1


# --------------------------------------------------------------- azure: config, key


def azure_model(**changes: Any) -> ModelConfig:
    return ModelConfig.model_validate(
        {"provider": "azure_openai", "name": "gpt4o-prod", "base_url": AZURE_BASE, **changes}
    )


def test_azure_api_version_enters_the_request_key_for_azure_only() -> None:
    messages: list[Message] = [{"role": "user", "content": "hi"}]
    params = {"max_tokens": 8}
    default = RequestBuilder(azure_model(), Params(max_tokens=8))
    assert default.endpoint.settings == (("api_version", "2024-10-21"),)
    assert default.endpoint.api_key_env == "AZURE_OPENAI_API_KEY"
    key = default._key_of(0)(messages)
    # The documented form, with "settings" beside the usual fields.
    assert key == hash_json(
        {
            "v": 1, "provider": "azure_openai", "model": "gpt4o-prod", "base_url": AZURE_BASE,
            "messages": messages, "params": params, "settings": {"api_version": "2024-10-21"},
        }
    )  # fmt: skip
    other = RequestBuilder(azure_model(api_version="2025-04-01-preview"), Params(max_tokens=8))
    assert other._key_of(0)(messages) != key
    # Every other provider's key is as it was: no "settings".
    openai = RequestBuilder(ModelConfig(provider="openai", name="gpt-5"), Params(max_tokens=8))
    assert openai.endpoint.settings == ()
    assert openai._key_of(0)(messages) == request_key(
        "openai", "gpt-5", "https://api.openai.com/v1", messages, params
    )
    assert key_base_url(ModelConfig(provider="gemini", name="gemini-2.5-pro")) == (
        "https://generativelanguage.googleapis.com"
    )


AZURE_SPEC = """name: add
dataset: {path: data/add.jsonl}
prompt: "Q: {{ a }} + {{ b }}"
models:
  - {provider: openai, name: gpt-5}
  - {provider: gemini, name: gemini-2.5-flash}
  - MODEL
params: {max_tokens: 16}
scorer: {type: numeric}
"""


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "{provider: azure_openai, name: gpt4o-prod}",
            "models[2]: azure_openai needs base_url (the resource's endpoint, "
            "e.g. https://NAME.openai.azure.com)",
        ),
        (
            "{provider: openai, name: gpt-4.1, api_version: '2024-10-21'}",
            "models[2]: api_version is a setting of provider azure_openai only",
        ),
        (
            f"{{provider: azure_openai, name: d, base_url: '{AZURE_BASE}', api_version: latest}}",
            "models[2]: api_version 'latest' is not an Azure OpenAI API version "
            "(like 2024-10-21 or 2025-04-01-preview)",
        ),
    ],
)
def test_azure_models_are_checked_at_load_with_file_and_line(
    tmp_path: Path, model: str, message: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(AZURE_SPEC.replace("MODEL", model))
    with pytest.raises(InputError) as caught:
        load_spec(path)
    assert str(caught.value) == f"{path}:7: {message}"


def test_the_new_providers_are_choices_listings_and_prices() -> None:
    assert registry.names()[-2:] == ("gemini", "azure_openai")
    assert "gemini" in registry.listing_names() and "azure_openai" not in registry.listing_names()
    prices = load_prices()
    assert prices.cost("gemini", "gemini-2.5-pro", 100_000, 1_000_000) == pytest.approx(10.125)
    # A million tokens of input is above Pro's 200k-token tier (v2): $2.50 in, $15 out.
    assert prices.cost("gemini", "gemini-2.5-pro", 1_000_000, 1_000_000) == pytest.approx(17.5)
    assert load_prices("v1").cost("gemini", "gemini-2.5-pro", 10**6, 10**6) == pytest.approx(11.25)
    assert prices.cost("gemini", "gemini-2.5-flash", 1_000_000, 0) == pytest.approx(0.3)
    assert prices.cost("gemini", "gemini-2.5-flash-lite", 0, 1_000_000) == pytest.approx(0.4)
    assert prices.cost("azure_openai", "gpt4o-prod", 10, 10) is None  # a deployment: unknown


def test_gemini_listing_pages_through_and_keeps_generating_models() -> None:
    pages = {
        None: {
            "models": [
                {
                    "name": "models/gemini-2.5-pro",
                    "supportedGenerationMethods": ["generateContent"],
                },
                {
                    "name": "models/text-embedding-004",
                    "supportedGenerationMethods": ["embedContent"],
                },
            ],
            "nextPageToken": "p2",
        },
        "p2": {"models": [{"name": "models/gemini-2.5-flash"}]},
    }
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=pages[request.url.params.get("pageToken")])

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        ids = list_models(Watch(provider="gemini", match="gemini-*"), client)
    assert ids == ["gemini-2.5-pro", "gemini-2.5-flash"]
    assert [str(r.url.copy_with(query=None)) for r in seen] == [
        "https://generativelanguage.googleapis.com/v1beta/models"
    ] * 2
    assert seen[0].headers["x-goog-api-key"] == GEMINI_KEY
    assert seen[1].url.params["pageToken"] == "p2"


# ------------------------------------------------------ end to end, loopback fake server


N = 6


def e2e_spec(tmp_path: Path, provider: str, base_url: str, model: str) -> Path:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    extra = ", api_version: '2025-04-01-preview'" if provider == "azure_openai" else ""
    return write_spec(
        tmp_path / "add.yaml", base_url=base_url, provider=provider, model=model, extra_model=extra
    )


@pytest.mark.parametrize(
    ("provider", "model", "key", "header"),
    [
        ("gemini", "gemini-2.5-flash", GEMINI_KEY, "x-goog-api-key"),
        ("azure_openai", "gpt4o-prod", AZURE_KEY, "api-key"),
    ],
)
def test_a_spec_runs_end_to_end_then_entirely_from_the_cache(
    tmp_path: Path, provider: str, model: str, key: str, header: str
) -> None:
    with FakeLLMServer() as srv:
        spec = e2e_spec(tmp_path, provider, srv.base_url, model)
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == N
        assert done.manifest.target.calls == N and done.manifest.target.cache_hits == 0
        # The fake answers "Answer: a+b"; every fourth stored answer is off by one.
        assert [r.score_of("score") for r in done.records] == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0]
        assert srv.key_was_sent(key)
        sent = srv.requests[0]
        assert sent["headers"][header] == "<redacted>" and not sent["has_authorization"]
        if provider == "gemini":
            assert sent["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
            assert sent["body"]["generationConfig"] == {"temperature": 0.0, "maxOutputTokens": 16}
            call_record = done.records[0].target
            assert call_record is not None and call_record.cost_usd is not None  # priced
        else:
            assert sent["path"] == "/openai/deployments/gpt4o-prod/chat/completions"
            assert sent["query"] == {"api-version": "2025-04-01-preview"}

        (again,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == N  # zero calls: every answer from the cache
        assert again.manifest.target.calls == 0 and again.manifest.target.cache_hits == N
        assert [r.scores for r in again.records] == [r.scores for r in done.records]


@pytest.mark.parametrize(
    ("provider", "model"), [("gemini", "gemini-2.5-flash"), ("azure_openai", "gpt4o-prod")]
)
def test_a_429_then_200_is_retried_through_the_fake_server(
    tmp_path: Path, provider: str, model: str
) -> None:
    with FakeLLMServer() as srv:
        srv.script = [Fault(429, headers={"retry-after": "0"})]
        spec = e2e_spec(tmp_path, provider, srv.base_url, model)
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == N + 1
        assert [r["status"] for r in srv.requests].count(429) == 1
        assert all(r.target is not None and r.target.error is None for r in done.records)
        assert done.manifest.target.calls == N  # one call each; the 429 was retried within


def test_the_fake_server_answers_in_each_providers_error_shape() -> None:
    with FakeLLMServer() as srv:
        srv.script = [Fault(503, message="overloaded")]
        gemini = httpx.post(
            f"{srv.base_url}/v1beta/models/m:generateContent", json={"contents": []}
        )
        assert gemini.json() == {
            "error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}
        }
        # Azure without api-version: 404, as Azure answers.
        azure = httpx.post(
            f"{srv.base_url}/openai/deployments/d/chat/completions", json={"messages": []}
        )
        assert azure.status_code == 404


def test_a_gemini_watch_lists_the_fake_servers_models() -> None:
    with FakeLLMServer(models=["gemini-9-pro", "fake-1"]) as srv:
        watch = Watch(provider="gemini", match="gemini-*", base_url=srv.base_url)
        assert list_models(watch) == ["gemini-9-pro", "fake-1"]
        assert srv.calls_by_path == {"/v1beta/models": 1}


def test_azure_through_the_cli_keeps_the_key_out_of_every_output(tmp_path: Path) -> None:
    with FakeLLMServer() as srv:
        spec = e2e_spec(tmp_path, "azure_openai", srv.base_url, "gpt4o-prod")
        args = [
            "run",
            str(spec),
            "--cache",
            str(tmp_path / "c.db"),
            "--results",
            str(tmp_path / "r"),
        ]
        cold = run_cli(*args, cwd=tmp_path)
        warm = run_cli(*args, cwd=tmp_path)
        assert cold.returncode == 0, cold.stderr
        assert warm.returncode == 0, warm.stderr
        assert f"Cache hits: {N}/{N}" in warm.stdout
        assert srv.calls == N
    for proc in (cold, warm):
        assert AZURE_KEY not in proc.stdout + proc.stderr
    for file in tmp_path.rglob("*"):
        if file.is_file():
            assert AZURE_KEY.encode() not in file.read_bytes(), file


def test_a_gemini_tool_using_agent_spec_runs_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GT_KEY", GEMINI_KEY)
    with FakeLLMServer(responder=agent) as srv:
        spec = project(tmp_path, srv.base_url, "gemini")
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        sent = srv.calls
        by_id = records_by_id(done)
        paris = by_id["paris"]
        assert (paris.outcome, paris.failure_mode) == ("scored", None)
        assert paris.score_of("calls") == 1.0 and paris.score_of("answer") == 1.0
        assert paris.trajectory[0].tool_calls == [
            {"id": "call_0", "name": "weather", "arguments": {"city": "Paris"}}
        ]
        assert paris.trajectory[0].tool_results[0].content == '{"condition": "sunny"}'
        assert paris.response == "It is sunny in Paris."
        assert by_id["atlantis"].failure_mode == "tool_error"
        assert by_id["loop"].failure_mode == "thrash"
        assert by_id["budget"].failure_mode == "budget_exhausted"
        assert sent == 2 + 2 + 2 + 2 + 2 + 3
        # The tool results went back as functionResponse parts.
        last = srv.requests[-1]["body"]
        assert any("functionResponse" in p for c in last["contents"] for p in c["parts"])
        assert last["tools"][0]["functionDeclarations"][0]["name"] == "weather"
        assert srv.key_was_sent(GEMINI_KEY)

        (again,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == sent
        assert again.manifest.target.calls == 0 and again.manifest.target.cache_hits == sent
        assert [r.scores for r in again.records] == [r.scores for r in done.records]
