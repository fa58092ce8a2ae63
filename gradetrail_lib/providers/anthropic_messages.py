"""Anthropic Messages API.

Neutral messages (see `request`) are translated: system messages are joined into the
`system` field; an assistant's `tool_calls` become content blocks (a text block when it has
text, then a `tool_use` block per call); a run of `tool` messages becomes one user message
of `tool_result` blocks. A request without tool use sends its other messages as they are,
so its body is what it was before tools existed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gradetrail_lib.providers.adapter import json_post, resolved_messages, split_turns
from gradetrail_lib.providers.base import ParsedBody, StopReason
from gradetrail_lib.providers.media import MB, MediaLimits
from gradetrail_lib.providers.registry import Listing

if TYPE_CHECKING:
    import httpx

    from gradetrail_lib.providers.base import Message, ModelRequest, PromptCacheMark

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


_TOOL_CHOICES = {
    "auto": {"type": "auto"},
    "required": {"type": "any"},
    "none": {"type": "none"},
}


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    blocks.extend(
        {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
        for c in message["tool_calls"]
    )
    return blocks


def split_messages(messages: list[Message]) -> tuple[list[str], list[Message]]:
    """The system texts, and the other messages in the Messages API's shape."""
    return split_turns(
        messages,
        tool_result=_tool_result_block,
        results_turn=lambda blocks: {"role": "user", "content": blocks},
        turn=_turn,
    )


def _tool_result_block(message: Message) -> dict[str, Any]:
    block = {
        "type": "tool_result",
        "tool_use_id": message["tool_call_id"],
        "content": message["content"],
    }
    if message.get("is_error"):
        block["is_error"] = True
    return block


# Anthropic's documented limits: an image of at most 5 MB (100 a request); PDFs within
# the 32 MB request and 100 pages. It fetches an image's or a PDF's URL itself.
ANTHROPIC_MEDIA = MediaLimits(
    image_bytes=5 * MB, images=100, document_bytes=32 * MB, documents=100, pages=100,
    image_urls=True, document_urls=True,
)  # fmt: skip


def content_block(part: dict[str, Any]) -> dict[str, Any]:
    """One resolved content part (`media.sent_messages`) as a Messages API block: an
    `image` or `document` block whose source is the URL or the base64 bytes."""
    if part["type"] == "text":
        return {"type": "text", "text": part["text"]}
    if "url" in part:
        source = {"type": "url", "url": part["url"]}
    else:
        source = {"type": "base64", "media_type": part["media_type"], "data": part["data"]}
    return {"type": part["type"], "source": source}


def _turn(message: Message) -> Message:
    if isinstance(message.get("content"), list):
        return {"role": message["role"], "content": [content_block(p) for p in message["content"]]}
    if message["role"] == "assistant" and message.get("tool_calls"):
        return {"role": "assistant", "content": _assistant_blocks(message)}
    if "tool_calls" in message:  # an empty list: the key is not the API's
        return {k: v for k, v in message.items() if k != "tool_calls"}
    return message


def mark_prompt_cache(body: dict[str, Any], messages: list[Message], mark: PromptCacheMark) -> None:
    """Puts `cache_control` on the last message every sample shares (`mark.messages` of
    the neutral messages): the system text when that message is a system one, otherwise
    its turn's last content block (a text's content becomes one text block)."""
    control: dict[str, Any] = {"type": "ephemeral"}
    if mark.ttl != "5m":  # the default lifetime; only a longer one is named
        control["ttl"] = mark.ttl
    shared = messages[: mark.messages]
    if not shared:
        return
    if shared[-1]["role"] == "system":
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": control}]
        return
    position = sum(1 for m in shared if m["role"] != "system") - 1
    turn = body["messages"][position]
    content = turn["content"]
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": content}]
        if isinstance(content, str)
        else [dict(block) for block in content]
    )
    blocks[-1]["cache_control"] = control
    # A copy: the turn may be the neutral message itself (`_turn` passes plain ones on).
    body["messages"][position] = {**turn, "content": blocks}


def anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        entry = {"name": tool["name"]}
        if "description" in tool:
            entry["description"] = tool["description"]
        entry["input_schema"] = tool.get("parameters") or {"type": "object", "properties": {}}
        out.append(entry)
    return out


def parse_tool_use(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"id": block["id"], "name": block["name"], "arguments": _arguments(block.get("input"))}
        for block in content
        if block["type"] == "tool_use"
    ]


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if value is None:
        return {}
    # The API's input is always an object; anything else is kept for a tool error.
    return {"_unparsed": value if isinstance(value, str) else json.dumps(value)}


def seconds_until(timestamp: str, now: datetime | None = None) -> float | None:
    """Seconds from now until an RFC 3339 timestamp (Anthropic's reset headers)."""
    try:
        when = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def api_headers(api_key: str | None) -> dict[str, str]:
    headers = {"anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


def _next_page(body: Any) -> dict[str, str] | None:
    if body.get("has_more") and body.get("last_id"):
        return {"limit": "1000", "after_id": str(body["last_id"])}
    return None


# `GET /models`, a page at a time (has_more, last_id).
LISTING = Listing(
    headers=api_headers,
    ids=lambda body: [str(m["id"]) for m in body["data"]],
    query={"limit": "1000"},
    next_query=_next_page,
)


class AnthropicMessagesAdapter:
    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request:
        url = f"{request.endpoint.base_url}/messages"
        return json_post(url, api_headers(api_key), self.body(request))

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The request's JSON body (also a batch request's `params`)."""
        system, messages = split_messages(resolved_messages(request))
        params = dict(request.params)
        if "stop" in params:
            params["stop_sequences"] = params.pop("stop")
        body: dict[str, Any] = {"model": request.endpoint.model, "messages": messages, **params}
        if system:
            body["system"] = "\n\n".join(system)
        if request.prompt_cache is not None:
            mark_prompt_cache(body, request.messages, request.prompt_cache)
        if request.tools:
            body["tools"] = anthropic_tools(request.tools)
            if request.tool_choice is not None:
                choice = request.tool_choice
                body["tool_choice"] = dict(_TOOL_CHOICES.get(choice) or {"type": choice})
        return body

    def parse(self, body: Any) -> ParsedBody:
        content = body.get("content", [])
        text = "".join(block.get("text", "") for block in content if block["type"] == "text")
        # Extended thinking's blocks: the model's reasoning, kept apart from the answer.
        thoughts = [b.get("thinking", "") for b in content if b["type"] == "thinking"]
        usage = body.get("usage") or {}
        plain = usage.get("input_tokens")
        read = usage.get("cache_read_input_tokens") or 0
        written = usage.get("cache_creation_input_tokens") or 0
        # The split of the writes by lifetime, when the API gives it; otherwise they are
        # 5-minute writes (the default lifetime).
        split = usage.get("cache_creation") or {}
        written_1h = split.get("ephemeral_1h_input_tokens") or 0
        return ParsedBody(
            text=text,
            served_model=body.get("model"),
            stop_reason=_STOP_REASONS.get(body.get("stop_reason") or "", "other"),
            # Anthropic's input_tokens leaves out the tokens read from and written to the
            # prompt cache; gradetrail's counts all of the input (see ModelResponse).
            input_tokens=None if plain is None else plain + read + written,
            output_tokens=usage.get("output_tokens"),
            tool_calls=parse_tool_use(content),
            cached_input_tokens=read,
            cache_write_input_tokens=written - written_1h,
            cache_write_1h_input_tokens=written_1h,
            thinking="\n\n".join(thoughts) if thoughts else None,
        )

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        waits = [seconds_until(headers[h]) for h in _RESET_HEADERS if h in headers]
        known = [w for w in waits if w is not None]
        return max(known) if known else None
