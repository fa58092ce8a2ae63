"""Provider calls over HTTP with the shared policy (`policy`) applied.

Transient failures (429, 408, 409, 425, 5xx, timeouts, connection errors) are retried
with exponential backoff and full jitter; a `retry-after` header (seconds or HTTP date)
or a provider's rate-limit reset header sets the wait instead. Statuses in
`FATAL_STATUSES` fail at once. Error texts never hold the API key.
"""

import asyncio
import json
import os
import random
import time
from collections.abc import Awaitable, Callable

import httpx

from gradetrail_lib.providers import registry
from gradetrail_lib.providers.adapter import Adapter
from gradetrail_lib.providers.base import FATAL_STATUSES, ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.policy import AttemptGate, RetryPolicy, parse_retry_after

Sleep = Callable[[float], Awaitable[None]]

# Jitter needs no reproducibility, and a Random() per call costs more than the call's parsing.
_JITTER = random.Random()


def redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


def adapter_for(provider: str, kind: str = "chat") -> Adapter:
    entry = registry.get(provider)
    adapter = entry.loglikelihood_adapter if kind == "loglikelihood" else entry.adapter
    if adapter is None and kind != "chat":
        raise ValueError(f"provider {provider} does not serve {kind} requests")
    if adapter is None:
        raise ValueError(f"provider {provider} answers in-process; it has no adapter")
    return adapter


def api_key_for(request: ModelRequest) -> str | None:
    env = request.endpoint.api_key_env
    key = os.environ.get(env) if env else None
    if not key and registry.get(request.endpoint.provider).key_required:
        raise ProviderError("fatal", f"environment variable {env} is not set (it holds the key)")
    return key or None


def _error_detail(
    response: httpx.Response, adapter: Adapter, api_key: str | None
) -> tuple[str, float | None]:
    """The error's text (redacted, cut) and the wait its body asks for, if any."""
    wait = None
    try:
        body = response.json()
        error_info = getattr(adapter, "error_info", None)
        if error_info is not None:
            text, wait = error_info(body)
        else:
            detail = body.get("error", body) if isinstance(body, dict) else body
            if isinstance(detail, dict):
                detail = detail.get("message", detail)
            text = str(detail)
    except (json.JSONDecodeError, UnicodeDecodeError):
        text = response.text
    # Redact before cutting: a cut through an echoed key would leave part of it unredacted.
    return " ".join(redact(text, api_key).split())[:300], wait


def classify(response: httpx.Response, adapter: Adapter, api_key: str | None) -> ProviderError:
    status = response.status_code
    detail, body_wait = _error_detail(response, adapter, api_key)
    message = f"HTTP {status}: {detail}" if detail else f"HTTP {status}"
    # Only the statuses listed in the module docstring are worth a retry; anything else
    # (other 4xx, and 3xx, which httpx does not follow here) would fail the same way again.
    if status in FATAL_STATUSES or not (status >= 500 or status in (408, 409, 425, 429)):
        return ProviderError("fatal", message, status)
    wait = None
    if "retry-after" in response.headers:
        wait = parse_retry_after(response.headers["retry-after"])
    if wait is None and status == 429:
        wait = adapter.reset_after_s(response.headers)
    if wait is None:
        wait = body_wait
    return ProviderError("transient", message, status, retry_after_s=wait)


async def call_model(
    transport: httpx.AsyncBaseTransport,
    request: ModelRequest,
    policy: RetryPolicy,
    *,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
    gate: AttemptGate | None = None,
) -> ModelResponse:
    """One request, with the retry policy applied. Raises ProviderError when it gives up.

    Straight to the transport, not through an httpx client: a client adds nothing these
    requests use (cookies, auth flows, redirects, hooks) and CPU on every request.
    `gate` (the adaptive limiter) admits each attempt and sees how it ended."""
    provider = registry.get(request.endpoint.provider)
    if request.kind == "loglikelihood" and provider.score_loglikelihood is not None:
        # In-process (the local model): off the event loop, which other calls share.
        return await asyncio.to_thread(_in_process, provider.score_loglikelihood, request)
    if provider.respond is not None:
        return provider.respond(request)
    rng = rng or _JITTER
    adapter = adapter_for(provider.name, request.kind)
    api_key = api_key_for(request)
    for attempt in range(1, policy.max_attempts + 1):
        if gate is None:
            outcome = await _attempt(transport, request, policy, adapter, api_key, attempt)
        else:
            ticket = await gate.acquire()
            try:
                outcome = await _attempt(transport, request, policy, adapter, api_key, attempt)
            except ProviderError as fatal:
                gate.done(ticket, fatal)
                raise
            except BaseException:
                gate.abandon(ticket)
                raise
            gate.done(ticket, outcome if isinstance(outcome, ProviderError) else None)
        if isinstance(outcome, ModelResponse):
            return outcome
        error = outcome
        if error.kind == "fatal" or attempt == policy.max_attempts:
            if attempt > 1:
                error.message = f"{error.message} (after {attempt} attempts)"
            raise error
        await sleep(policy.delay_s(attempt, error.retry_after_s, rng))
    raise AssertionError("unreachable")


def _in_process(
    answer: Callable[[ModelRequest], ModelResponse], request: ModelRequest
) -> ModelResponse:
    started = time.perf_counter()
    response = answer(request)
    response.latency_s = time.perf_counter() - started
    return response


async def _attempt(
    transport: httpx.AsyncBaseTransport,
    request: ModelRequest,
    policy: RetryPolicy,
    adapter: Adapter,
    api_key: str | None,
    attempt: int,
) -> ModelResponse | ProviderError:
    """One HTTP exchange: the response, or the error to retry or give up with (raised
    when the body of a success cannot be read)."""
    started = time.perf_counter()
    try:
        http_request = adapter.build(request, api_key)
        http_request.extensions["timeout"] = httpx.Timeout(policy.timeout_s).as_dict()
        response = await transport.handle_async_request(http_request)
        await response.aread()
    except httpx.TimeoutException:
        error = ProviderError("transient", f"timeout after {policy.timeout_s:g}s")
    except httpx.TransportError as exc:
        error = ProviderError(
            "transient", f"connection error: {type(exc).__name__}: {redact(str(exc), api_key)}"
        )
    else:
        latency = time.perf_counter() - started
        if response.is_success:
            try:
                body = response.json()
                # An adapter whose answer depends on what was asked (a log-likelihood's
                # split between context and continuation) reads the request too.
                parse_for = getattr(adapter, "parse_for", None)
                parsed = parse_for(request, body) if parse_for else adapter.parse(body)
            # ValueError covers bad JSON and undecodable bytes; AttributeError a body
            # of the wrong shape (a list or string where an object was expected).
            except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
                raise ProviderError(
                    "fatal", f"unexpected response body: {type(exc).__name__}", 200
                ) from exc
            return ModelResponse(
                text=parsed.text,
                served_model=parsed.served_model,
                stop_reason=parsed.stop_reason,
                input_tokens=parsed.input_tokens,
                output_tokens=parsed.output_tokens,
                latency_s=latency,
                attempts=attempt,
                raw=body,
                tool_calls=parsed.tool_calls,
                cached_input_tokens=parsed.cached_input_tokens,
                cache_write_input_tokens=parsed.cache_write_input_tokens,
                cache_write_1h_input_tokens=parsed.cache_write_1h_input_tokens,
                reasoning_tokens=parsed.reasoning_tokens,
                thinking=parsed.thinking,
                loglikelihood=parsed.loglikelihood,
                continuation_tokens=parsed.continuation_tokens,
                is_greedy=parsed.is_greedy,
            )
        error = classify(response, adapter, api_key)
    return error
