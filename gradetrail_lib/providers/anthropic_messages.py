"""Anthropic Messages API."""

from datetime import UTC, datetime
from typing import Any

import httpx

from gradetrail_lib.providers.adapter import json_post
from gradetrail_lib.providers.base import ParsedBody, StopReason
from gradetrail_lib.request import ModelRequest

ANTHROPIC_VERSION = "2023-06-01"

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "max_tokens",
    "tool_use": "tool_use",
    "refusal": "content_filter",
}

_RESET_HEADERS = (
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
)


def seconds_until(timestamp: str, now: datetime | None = None) -> float | None:
    """Seconds from now until an RFC 3339 timestamp (Anthropic's reset headers)."""
    try:
        when = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class AnthropicMessagesAdapter:
    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        system = [m["content"] for m in request.messages if m["role"] == "system"]
        params = dict(request.params)
        if "stop" in params:
            params["stop_sequences"] = params.pop("stop")
        body: dict[str, Any] = {
            "model": request.endpoint.model,
            "messages": [m for m in request.messages if m["role"] != "system"],
            **params,
        }
        if system:
            body["system"] = "\n\n".join(system)
        return json_post(f"{request.endpoint.base_url}/messages", headers, body)

    def parse(self, body: Any) -> ParsedBody:
        text = "".join(
            block.get("text", "") for block in body.get("content", []) if block["type"] == "text"
        )
        usage = body.get("usage") or {}
        return ParsedBody(
            text=text,
            served_model=body.get("model"),
            stop_reason=_STOP_REASONS.get(body.get("stop_reason") or "", "other"),
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
        )

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        waits = [seconds_until(headers[h]) for h in _RESET_HEADERS if h in headers]
        known = [w for w in waits if w is not None]
        return max(known) if known else None
