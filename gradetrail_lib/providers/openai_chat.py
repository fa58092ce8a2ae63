"""OpenAI Chat Completions, also spoken by vLLM, llama.cpp server and Ollama."""

import re
from typing import Any

import httpx

from gradetrail_lib.providers.adapter import json_post
from gradetrail_lib.providers.base import ParsedBody, StopReason
from gradetrail_lib.request import ModelRequest

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "stop",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
}

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_openai_duration(value: str) -> float | None:
    """OpenAI's reset headers look like "1s", "6m0s", "20ms", "1h2m3.5s"."""
    parts = _DURATION_PART.findall(value.strip())
    if not parts or "".join(n + u for n, u in parts) != value.strip():
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


class OpenAIChatAdapter:
    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request:
        headers: dict[str, str] = {}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        body: dict[str, Any] = {
            "model": request.endpoint.model,
            "messages": request.messages,
            **request.params,
        }
        return json_post(f"{request.endpoint.base_url}/chat/completions", headers, body)

    def parse(self, body: Any) -> ParsedBody:
        choice = body["choices"][0]
        content = choice["message"].get("content") or ""
        usage = body.get("usage") or {}
        return ParsedBody(
            text=content,
            served_model=body.get("model"),
            stop_reason=_STOP_REASONS.get(choice.get("finish_reason") or "", "other"),
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
        )

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        waits = [
            parse_openai_duration(headers[name])
            for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
            if name in headers
        ]
        known = [w for w in waits if w is not None]
        return max(known) if known else None
