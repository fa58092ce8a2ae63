"""The provider adapters and the shared call policy, against httpx.MockTransport (no network).

Every call goes through `call_model` with a fake `sleep` that records the requested waits,
so retries cost no time and the backoff can be asserted exactly.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

import gradetrail_lib
from gradetrail_lib.errors import RunAborted
from gradetrail_lib.providers.adapter import json_post
from gradetrail_lib.providers.anthropic_messages import ANTHROPIC_VERSION, seconds_until
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.caller import call_model
from gradetrail_lib.providers.openai_chat import parse_openai_duration
from gradetrail_lib.providers.policy import AbortTracker, RetryPolicy, parse_retry_after

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"
BASE_URL = "https://api.test/v1"
KEY_ENVS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
PROVIDERS = ["openai", "anthropic"]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)


def make_request(
    provider: str = "openai",
    *,
    messages: list[dict[str, str]] | None = None,
    params: dict[str, Any] | None = None,
    api_key_env: str | None = "default",
    model: str = "test-model",
) -> ModelRequest:
    env = KEY_ENVS.get(provider) if api_key_env == "default" else api_key_env
    return ModelRequest(
        key="k" * 64,
        endpoint=Endpoint(provider, model, BASE_URL, env),
        messages=messages or [{"role": "user", "content": "Q: 2 + 3"}],
        params={"max_tokens": 64} if params is None else params,
    )


def openai_body(
    text: str = "Answer: 5", finish_reason: str | None = "stop", model: str = "served-oa"
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


def anthropic_body(
    text: str = "Answer: 5", stop_reason: str | None = "end_turn", model: str = "served-an"
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 3},
    }


def ok_response(provider: str) -> httpx.Response:
    body = openai_body() if provider == "openai" else anthropic_body()
    return httpx.Response(200, json=body)


def error_response(
    status: int, message: str = "boom", headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message}}, headers=headers)


@dataclass
class Outcome:
    result: ModelResponse | ProviderError
    requests: list[httpx.Request] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)

    @property
    def response(self) -> ModelResponse:
        assert isinstance(self.result, ModelResponse), self.result
        return self.result

    @property
    def error(self) -> ProviderError:
        assert isinstance(self.result, ProviderError), self.result
        return self.result

    def body(self, i: int = 0) -> Any:
        return json.loads(self.requests[i].content)


def call(
    request: ModelRequest,
    replies: Sequence[httpx.Response | Exception],
    policy: RetryPolicy | None = None,
) -> Outcome:
    """Run one `call_model`; `replies` are answered in order (the last one repeats)."""
    seen: list[httpx.Request] = []
    sleeps: list[float] = []

    def handler(http_request: httpx.Request) -> httpx.Response:
        seen.append(http_request)
        reply = replies[min(len(seen), len(replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def go() -> ModelResponse | ProviderError:
        async with httpx.MockTransport(handler) as transport:
            try:
                return await call_model(
                    transport,
                    request,
                    policy or RetryPolicy(),
                    sleep=fake_sleep,
                    rng=random.Random(0),
                )
            except ProviderError as exc:
                return exc

    result = asyncio.run(go())
    return Outcome(result, seen, sleeps)


# ------------------------------------------------------------------------ success


def test_openai_success_and_request_shape() -> None:
    request = make_request(
        "openai",
        messages=[
            {"role": "system", "content": "You add."},
            {"role": "user", "content": "Q: 2 + 3"},
        ],
        params={"max_tokens": 64, "temperature": 0.0, "stop": ["\n"], "seed": 7},
    )
    out = call(request, [ok_response("openai")])

    r = out.response
    assert r.text == "Answer: 5"
    assert r.served_model == "served-oa"
    assert r.stop_reason == "stop"
    assert (r.input_tokens, r.output_tokens) == (11, 3)
    assert r.latency_s > 0
    assert r.attempts == 1
    assert r.raw["id"] == "chatcmpl-1"
    assert out.sleeps == []

    (sent,) = out.requests
    assert sent.method == "POST"
    assert str(sent.url) == f"{BASE_URL}/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert "x-api-key" not in sent.headers
    assert out.body() == {
        "model": "test-model",
        "messages": request.messages,  # the system message stays in the list
        "max_tokens": 64,
        "temperature": 0.0,
        "stop": ["\n"],
        "seed": 7,
    }


def test_json_post_body_is_byte_for_byte_what_httpx_json_would_send() -> None:
    body = {"messages": [{"role": "user", "content": 'Grüße, 東京 \u2028 "q"'}], "t": 0.5}
    ours = json_post(f"{BASE_URL}/chat/completions", {"x-api-key": "k"}, body)
    theirs = httpx.Request(
        "POST",
        f"{BASE_URL}/chat/completions",
        json=body,
        headers={"x-api-key": "k", "User-Agent": f"gradetrail/{gradetrail_lib.__version__}"},
    )
    assert ours.read() == theirs.content
    # The same headers, whatever their order: Host and Content-Length as httpx adds them,
    # and gradetrail's User-Agent.
    assert sorted(ours.headers.multi_items()) == sorted(theirs.headers.multi_items())
    assert ours.headers["host"] == httpx.URL(BASE_URL).netloc.decode()
    with pytest.raises(ValueError):  # NaN is not JSON: refused as httpx refuses it
        json_post(BASE_URL, {}, {"t": float("nan")})


@pytest.mark.parametrize(
    ("finish_reason", "expected"),
    [
        ("stop", "stop"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("content_filter", "content_filter"),
        ("something_new", "other"),
        (None, "other"),
    ],
)
def test_openai_stop_reasons(finish_reason: str | None, expected: str) -> None:
    body = openai_body(finish_reason=finish_reason)
    out = call(make_request("openai"), [httpx.Response(200, json=body)])
    assert out.response.stop_reason == expected


def test_openai_null_content_and_missing_usage() -> None:
    body = openai_body(finish_reason="tool_calls")
    body["choices"][0]["message"]["content"] = None
    del body["usage"]
    del body["model"]
    r = call(make_request("openai"), [httpx.Response(200, json=body)]).response
    assert r.text == ""
    assert r.stop_reason == "tool_use"
    assert r.served_model is None
    assert (r.input_tokens, r.output_tokens) == (None, None)


def test_openai_compatible_without_key_sends_no_auth() -> None:
    out = call(make_request("openai_compatible", api_key_env=None), [ok_response("openai")])
    assert out.response.text == "Answer: 5"
    assert "authorization" not in out.requests[0].headers


def test_openai_compatible_key_from_custom_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_VLLM_KEY", "vllm-secret-42")
    out = call(
        make_request("openai_compatible", api_key_env="MY_VLLM_KEY"), [ok_response("openai")]
    )
    assert out.requests[0].headers["authorization"] == "Bearer vllm-secret-42"


def test_anthropic_success_and_request_shape() -> None:
    request = make_request(
        "anthropic",
        messages=[
            {"role": "system", "content": "You add."},
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Q: 2 + 3"},
            {"role": "assistant", "content": "Answer:"},
        ],
        params={"max_tokens": 64, "temperature": 0.5, "stop": ["\n\n", "Q:"]},
    )
    body = anthropic_body()
    body["content"] = [
        {"type": "text", "text": "Answer: "},
        {"type": "tool_use", "id": "t1", "name": "calc", "input": {}},
        {"type": "text", "text": "5"},
    ]
    out = call(request, [httpx.Response(200, json=body)])

    r = out.response
    assert r.text == "Answer: 5"  # text blocks joined, other blocks skipped
    assert r.served_model == "served-an"
    assert r.stop_reason == "stop"
    assert (r.input_tokens, r.output_tokens) == (11, 3)
    assert r.latency_s > 0
    assert r.attempts == 1

    (sent,) = out.requests
    assert str(sent.url) == f"{BASE_URL}/messages"
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY
    assert sent.headers["anthropic-version"] == ANTHROPIC_VERSION == "2023-06-01"
    assert "authorization" not in sent.headers
    assert out.body() == {
        "model": "test-model",
        "system": "You add.\n\nBe brief.",
        "messages": [
            {"role": "user", "content": "Q: 2 + 3"},
            {"role": "assistant", "content": "Answer:"},
        ],
        "max_tokens": 64,
        "temperature": 0.5,
        "stop_sequences": ["\n\n", "Q:"],
    }
    # The request itself is not changed by building the body.
    assert request.params["stop"] == ["\n\n", "Q:"]


def test_anthropic_without_system_has_no_system_field() -> None:
    out = call(make_request("anthropic"), [ok_response("anthropic")])
    assert "system" not in out.body()
    assert "stop_sequences" not in out.body()


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "max_tokens"),
        ("tool_use", "tool_use"),
        ("refusal", "content_filter"),
        ("pause_turn", "other"),
        (None, "other"),
    ],
)
def test_anthropic_stop_reasons(stop_reason: str | None, expected: str) -> None:
    body = anthropic_body(stop_reason=stop_reason)
    out = call(make_request("anthropic"), [httpx.Response(200, json=body)])
    assert out.response.stop_reason == expected


# ----------------------------------------------------------------- rate limits


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_retry_after_seconds(provider: str) -> None:
    replies = [error_response(429, headers={"retry-after": "2"}), ok_response(provider)]
    out = call(make_request(provider), replies)
    assert out.response.attempts == 2
    assert len(out.requests) == 2
    (wait,) = out.sleeps
    assert 2.0 <= wait <= 2.1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_retry_after_http_date(provider: str) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    retry_after = format_datetime(when, usegmt=True)
    replies = [error_response(429, headers={"retry-after": retry_after}), ok_response(provider)]
    out = call(make_request(provider), replies)
    assert out.response.attempts == 2
    (wait,) = out.sleeps
    assert 28.0 <= wait <= 30.1  # the date has whole seconds


def test_429_openai_reset_header() -> None:
    replies = [
        error_response(429, headers={"x-ratelimit-reset-requests": "1m0s"}),
        ok_response("openai"),
    ]
    out = call(make_request("openai"), replies)
    assert out.response.attempts == 2
    (wait,) = out.sleeps
    assert 60.0 <= wait <= 60.1


def test_429_openai_reset_headers_longest_wins() -> None:
    headers = {"x-ratelimit-reset-requests": "20ms", "x-ratelimit-reset-tokens": "6.5s"}
    out = call(
        make_request("openai"), [error_response(429, headers=headers), ok_response("openai")]
    )
    (wait,) = out.sleeps
    assert 6.5 <= wait <= 6.6


def test_429_anthropic_reset_header() -> None:
    reset = (datetime.now(UTC) + timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    replies = [
        error_response(429, headers={"anthropic-ratelimit-requests-reset": reset}),
        ok_response("anthropic"),
    ]
    out = call(make_request("anthropic"), replies)
    assert out.response.attempts == 2
    (wait,) = out.sleeps
    assert 4.0 <= wait <= 5.1


def test_retry_after_beats_reset_header() -> None:
    headers = {"retry-after": "3", "x-ratelimit-reset-requests": "1m0s"}
    out = call(
        make_request("openai"), [error_response(429, headers=headers), ok_response("openai")]
    )
    (wait,) = out.sleeps
    assert 3.0 <= wait <= 3.1


def test_server_wait_is_capped() -> None:
    policy = RetryPolicy(max_server_wait_s=10.0)
    replies = [error_response(429, headers={"retry-after": "3600"}), ok_response("openai")]
    out = call(make_request("openai"), replies, policy)
    (wait,) = out.sleeps
    assert 10.0 <= wait <= 10.1


def test_429_without_any_header_uses_backoff() -> None:
    policy = RetryPolicy(base_delay_s=0.5)
    out = call(make_request("openai"), [error_response(429), ok_response("openai")], policy)
    (wait,) = out.sleeps
    assert 0.0 <= wait <= 0.5


def test_503_retry_after_is_honoured() -> None:
    replies = [error_response(503, headers={"retry-after": "4"}), ok_response("anthropic")]
    out = call(make_request("anthropic"), replies)
    (wait,) = out.sleeps
    assert 4.0 <= wait <= 4.1


# ------------------------------------------------------------ transient failures


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [500, 502, 503, 529, 408, 409, 425])
def test_transient_status_then_success(provider: str, status: int) -> None:
    policy = RetryPolicy(base_delay_s=0.5)
    out = call(make_request(provider), [error_response(status), ok_response(provider)], policy)
    assert out.response.attempts == 2
    assert out.response.text == "Answer: 5"
    assert len(out.requests) == 2
    (wait,) = out.sleeps
    assert 0.0 <= wait <= 0.5


@pytest.mark.parametrize("provider", PROVIDERS)
def test_503_until_max_attempts(provider: str) -> None:
    policy = RetryPolicy(max_attempts=7, base_delay_s=1.0, max_delay_s=8.0)
    out = call(make_request(provider), [error_response(503, "overloaded")], policy)

    err = out.error
    assert err.kind == "transient"
    assert err.status == 503
    assert "overloaded" in err.message
    assert err.message.endswith("(after 7 attempts)")
    assert str(err) == err.message
    assert len(out.requests) == 7
    # One wait between attempts; wait k is full jitter over [0, min(8, 1 * 2**(k-1))].
    assert len(out.sleeps) == 6
    caps = [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    for wait, cap in zip(out.sleeps, caps, strict=True):
        assert 0.0 <= wait <= cap
    # The waits are drawn from the given rng, in order.
    rng = random.Random(0)
    assert out.sleeps == [rng.uniform(0, cap) for cap in caps]


def test_backoff_grows_exponentially_with_full_jitter() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=30.0)
    rng = random.Random(0)
    for attempt in range(1, 10):
        cap = min(30.0, 0.5 * 2 ** (attempt - 1))
        waits = [policy.delay_s(attempt, None, rng) for _ in range(500)]
        assert all(0.0 <= w <= cap for w in waits)
        assert max(waits) > 0.9 * cap  # the whole range is used ...
        assert min(waits) < 0.1 * cap  # ... from near zero (full jitter)
        assert len(set(waits)) == len(waits)
    # A server wait gets at most 0.1 s of jitter on top.
    server_waits = [policy.delay_s(1, 2.0, rng) for _ in range(200)]
    assert all(2.0 <= w <= 2.1 for w in server_waits)
    assert len(set(server_waits)) > 1


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "exc",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.ConnectError("connection refused"),
        httpx.RemoteProtocolError("server disconnected"),
        httpx.ReadError("connection reset by peer"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_network_failure_then_success(provider: str, exc: Exception) -> None:
    out = call(make_request(provider), [exc, ok_response(provider)])
    assert out.response.attempts == 2
    assert len(out.requests) == 2
    assert len(out.sleeps) == 1


def test_timeout_until_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3, timeout_s=12.5)
    out = call(make_request("openai"), [httpx.ReadTimeout("slow")], policy)
    err = out.error
    assert err.kind == "transient"
    assert err.status is None
    assert err.message == "timeout after 12.5s (after 3 attempts)"
    assert len(out.requests) == 3


def test_connection_error_until_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=2)
    out = call(make_request("openai"), [httpx.ConnectError("refused")], policy)
    assert out.error.kind == "transient"
    assert out.error.message == "connection error: ConnectError: refused (after 2 attempts)"


def test_request_carries_the_policy_timeout() -> None:
    out = call(make_request("openai"), [ok_response("openai")], RetryPolicy(timeout_s=42.0))
    timeout = out.requests[0].extensions["timeout"]
    assert timeout == {"connect": 42.0, "read": 42.0, "write": 42.0, "pool": 42.0}


# ---------------------------------------------------------------- fatal failures


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 413, 422, 418, 301])
def test_fatal_status_fails_fast(provider: str, status: int) -> None:
    out = call(make_request(provider), [error_response(status, "nope"), ok_response(provider)])
    err = out.error
    assert err.kind == "fatal"
    assert err.status == status
    assert err.message == f"HTTP {status}: nope"
    assert len(out.requests) == 1
    assert out.sleeps == []


def test_fatal_after_transient_says_how_many_attempts() -> None:
    out = call(make_request("openai"), [error_response(500), error_response(400, "bad")])
    assert out.error.kind == "fatal"
    assert out.error.message == "HTTP 400: bad (after 2 attempts)"
    assert len(out.requests) == 2


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (httpx.Response(401, json={"error": {"message": "bad key"}}), "HTTP 401: bad key"),
        (httpx.Response(401, json={"error": "bad key"}), "HTTP 401: bad key"),
        (httpx.Response(401, json={"detail": "bad key"}), "HTTP 401: {'detail': 'bad key'}"),
        (
            httpx.Response(401, text="<html>\n  Bad   key\n</html>"),
            "HTTP 401: <html> Bad key </html>",
        ),
        (httpx.Response(401), "HTTP 401"),
    ],
)
def test_error_detail_shapes(response: httpx.Response, expected: str) -> None:
    assert call(make_request("openai"), [response]).error.message == expected


def test_error_detail_is_cut_to_300_chars() -> None:
    out = call(make_request("openai"), [error_response(400, "x" * 1000)])
    assert out.error.message == "HTTP 400: " + "x" * 300


# --------------------------------------------------------------------- secrets


def _assert_no_key(err: ProviderError, key: str) -> None:
    for text in (err.message, str(err), repr(err), repr(err.args)):
        assert key not in text
    # Not even a long piece of it.
    assert key[:12] not in err.message


@pytest.mark.parametrize("provider", PROVIDERS)
def test_key_echoed_in_fatal_error_is_redacted(provider: str) -> None:
    key = OPENAI_KEY if provider == "openai" else ANTHROPIC_KEY
    out = call(make_request(provider), [error_response(401, f"Incorrect API key provided: {key}")])
    err = out.error
    assert err.kind == "fatal"
    assert "Incorrect API key provided: [redacted]" in err.message
    _assert_no_key(err, key)


def test_key_from_custom_env_is_redacted_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "custom-secret-value-9876543210"
    monkeypatch.setenv("MY_GATEWAY_KEY", key)
    request = make_request("openai_compatible", api_key_env="MY_GATEWAY_KEY")

    # Echoed in a JSON error, retried to exhaustion.
    out = call(request, [error_response(500, f"upstream rejected {key}")], RetryPolicy(3))
    _assert_no_key(out.error, key)
    assert "(after 3 attempts)" in out.error.message
    # Echoed in a plain-text body.
    out = call(request, [httpx.Response(403, text=f"forbidden for key={key}!")])
    assert out.error.message == "HTTP 403: forbidden for key=[redacted]!"
    # Echoed in a connection error text.
    out = call(request, [httpx.ConnectError(f"proxy said no to {key}")], RetryPolicy(1))
    _assert_no_key(out.error, key)
    # Echoed right where the detail is cut at 300 characters.
    for pad in range(280, 300):
        out = call(request, [error_response(400, "x" * pad + key)])
        _assert_no_key(out.error, key)
        assert key[:4] not in out.error.message


@pytest.mark.parametrize("provider", PROVIDERS)
def test_missing_key_is_fatal_without_a_request(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = KEY_ENVS[provider]
    monkeypatch.delenv(env)
    out = call(make_request(provider), [ok_response(provider)])
    err = out.error
    assert err.kind == "fatal"
    assert env in err.message
    assert OPENAI_KEY not in err.message and ANTHROPIC_KEY not in err.message
    assert out.requests == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_empty_or_custom_missing_key_is_fatal(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENVS[provider], "")
    out = call(make_request(provider), [ok_response(provider)])
    assert out.error.kind == "fatal"
    assert KEY_ENVS[provider] in out.error.message
    assert out.requests == []

    monkeypatch.delenv("TEAM_KEY_ENV", raising=False)
    out = call(make_request(provider, api_key_env="TEAM_KEY_ENV"), [ok_response(provider)])
    assert out.error.kind == "fatal"
    assert "TEAM_KEY_ENV" in out.error.message
    assert out.requests == []


# ------------------------------------------------------------- malformed bodies


_NOT_AN_OBJECT = [
    b"not json at all",
    b"<html>502 Bad Gateway</html>",
    b"\xff\xfe\x00garbage",
    b"",
    b"null",
    b"[]",
    b'"a string"',
    b"42",
]
MALFORMED = [("openai", c) for c in _NOT_AN_OBJECT] + [("anthropic", c) for c in _NOT_AN_OBJECT]
MALFORMED += [
    ("openai", b"{}"),
    ("openai", b'{"choices": []}'),
    ("openai", b'{"choices": [{}]}'),
    ("openai", b'{"choices": [{"message": "not an object"}]}'),
    ("openai", b'{"choices": [{"message": {"content": "x"}}], "usage": [1]}'),
    ("anthropic", b'{"content": [{"text": "block without a type"}]}'),
    ("anthropic", b'{"content": ["not a block"]}'),
    ("anthropic", b'{"content": [{"type": "text", "text": "x"}], "usage": "none"}'),
]


@pytest.mark.parametrize(("provider", "content"), MALFORMED)
def test_malformed_200_is_fatal(provider: str, content: bytes) -> None:
    out = call(make_request(provider), [httpx.Response(200, content=content)])
    err = out.error
    assert err.kind == "fatal"
    assert err.status == 200
    assert err.message.startswith("unexpected response body: ")
    assert len(out.requests) == 1
    assert out.sleeps == []


# ------------------------------------------------------------------ abort rule


def _err(status: int | None = 401, message: str = "HTTP 401: bad key") -> ProviderError:
    return ProviderError("fatal", message, status)


def test_abort_after_three_identical_errors() -> None:
    tracker = AbortTracker(3)
    tracker.failure(_err())
    tracker.failure(_err())
    with pytest.raises(RunAborted, match="3 identical errors in a row: HTTP 401: bad key"):
        tracker.failure(_err())


def test_success_resets_the_count() -> None:
    tracker = AbortTracker(3)
    for _ in range(5):
        tracker.failure(_err())
        tracker.failure(_err())
        tracker.success()
    tracker.failure(_err())
    tracker.failure(_err())
    with pytest.raises(RunAborted):
        tracker.failure(_err())


def test_different_errors_do_not_accumulate() -> None:
    tracker = AbortTracker(3)
    a, b = _err(401, "HTTP 401: bad key"), _err(400, "HTTP 400: bad request")
    c = _err(401, "HTTP 401: other text")  # same status, different message
    for e in (a, a, b, b, a, a, c, c, a, a, b):
        tracker.failure(e)
    tracker.failure(b)
    with pytest.raises(RunAborted):
        tracker.failure(b)


def test_abort_limit_is_configurable() -> None:
    tracker = AbortTracker(1)
    with pytest.raises(RunAborted):
        tracker.failure(_err())


# ------------------------------------------------------------------ unit parsers


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2", 2.0),
        (" 2 ", 2.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("-3", 0.0),
        ("Fri, 02 Jan 2026 03:04:35 GMT", 30.0),
        ("Fri, 02 Jan 2026 03:04:05 GMT", 0.0),
        ("Fri, 02 Jan 2026 03:00:00 GMT", 0.0),  # in the past
        ("Fri, 02 Jan 2026 04:04:05 +0100", 0.0),  # offsets are honoured
        ("Fri, 02 Jan 2026 03:05:05 -0000", 60.0),
        ("", None),
        ("soon", None),
        ("Fri, 99 Foo 2026", None),
    ],
)
def test_parse_retry_after(value: str, expected: float | None) -> None:
    got = parse_retry_after(value, now=NOW)
    assert got == expected if expected is None else got == pytest.approx(expected)


def test_parse_retry_after_defaults_to_now() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=100), usegmt=True)
    got = parse_retry_after(when)
    assert got is not None and 98.0 <= got <= 100.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1s", 1.0),
        ("0s", 0.0),
        ("20ms", 0.02),
        ("1m0s", 60.0),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("2h", 7200.0),
        ("1.5m", 90.0),
        (" 7s ", 7.0),
        ("", None),
        ("5", None),
        ("soon", None),
        ("1m 0s", None),
        ("1x", None),
        ("s", None),
    ],
)
def test_parse_openai_duration(value: str, expected: float | None) -> None:
    got = parse_openai_duration(value)
    assert got == expected if expected is None else got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-02T03:04:10Z", 5.0),
        ("2026-01-02T03:04:05.5Z", 0.5),
        ("2026-01-02T03:04:10+00:00", 5.0),
        ("2026-01-02T04:04:10+01:00", 5.0),
        ("2026-01-02T03:04:10", 5.0),  # no offset: taken as UTC
        ("2026-01-02T03:00:00Z", 0.0),  # in the past
        ("not a time", None),
        ("", None),
    ],
)
def test_seconds_until(value: str, expected: float | None) -> None:
    got = seconds_until(value, now=NOW)
    assert got == expected if expected is None else got == pytest.approx(expected)


def test_provider_error_survives_pickling() -> None:
    # Ray workers return errors pickled; the message may have been extended after
    # construction, and the signature decides the abort rule in the driver.
    import pickle

    error = ProviderError("transient", "HTTP 503: overloaded", 503, retry_after_s=1.5)
    error.message = f"{error.message} (after 6 attempts)"
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ProviderError
    assert (copy.kind, copy.message, copy.status, copy.retry_after_s) == (
        "transient",
        "HTTP 503: overloaded (after 6 attempts)",
        503,
        1.5,
    )
    assert str(copy) == error.message
    assert copy.signature == error.signature
