"""OpenAI Chat Completions, also spoken by vLLM, llama.cpp server and Ollama.

Neutral messages (see `request`) are already Chat Completions messages except for tool
use: an assistant's `tool_calls` become `{"id", "type": "function", "function": {"name",
"arguments": <JSON string>}}` (its content null when it has no text), and a `tool` message
becomes `{"role": "tool", "tool_call_id", "content"}`. A request without tool use sends its
messages as they are, so its body is what it was before tools existed.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from gradetrail_lib.providers.adapter import json_post, resolved_messages
from gradetrail_lib.providers.base import ParsedBody, StopReason
from gradetrail_lib.providers.media import MB, MediaLimits, data_url
from gradetrail_lib.providers.registry import Listing, RefusedParam

if TYPE_CHECKING:
    import httpx

    from gradetrail_lib.providers.base import Endpoint, Message, ModelRequest

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "stop",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
}

_TOOL_FIELDS = ("name", "description", "parameters")

# OpenAI's reasoning models (the o-series: o1, o3, o4-mini...; gpt-5 and its variants)
# refuse `max_tokens` and take `max_completion_tokens` (which also bounds their reasoning
# tokens); the spec says `max_tokens` for every model, so the adapter renames it for them.
_COMPLETION_TOKENS_MODELS = re.compile(r"^(o\d|gpt-5)")


def wants_max_completion_tokens(model: str) -> bool:
    return _COMPLETION_TOKENS_MODELS.match(model) is not None


# OpenAI's API has no extended thinking (its reasoning models take reasoning_effort).
REFUSED_PARAMS = (
    RefusedParam("thinking", "OpenAI's Chat Completions API (use reasoning_effort)", "OpenAI"),
)

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_openai_duration(value: str) -> float | None:
    """OpenAI's reset headers look like "1s", "6m0s", "20ms", "1h2m3.5s"."""
    parts = _DURATION_PART.findall(value.strip())
    if not parts or "".join(n + u for n, u in parts) != value.strip():
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _chat_message(message: Message) -> Message:
    """One neutral message as a Chat Completions message."""
    role = message["role"]
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message["tool_call_id"],
            "content": message["content"],
        }
    if role == "assistant" and "tool_calls" in message:
        if not message["tool_calls"]:  # the API refuses an empty list
            return {k: v for k, v in message.items() if k != "tool_calls"}
        return {
            "role": "assistant",
            "content": message.get("content") or None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": _arguments_json(call)},
                }
                for call in message["tool_calls"]
            ],
        }
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [chat_part(p) for p in content]}
    return message


def _arguments_json(call: dict[str, Any]) -> str:
    arguments = call["arguments"]
    # Arguments that were not JSON go back as the model wrote them (see parse_arguments).
    if isinstance(arguments, dict) and list(arguments) == ["_unparsed"]:
        raw = arguments["_unparsed"]
        if isinstance(raw, str):
            return raw
    return json.dumps(arguments, ensure_ascii=False)


# OpenAI's documented limits for Chat Completions: 50 MB of images and 500 of them a
# request; files (PDF) up to 32 MB and 100 pages a request. An image URL is fetched by
# OpenAI; a file part has no URL form, so a document is always inlined.
OPENAI_MEDIA = MediaLimits(
    image_bytes=50 * MB, images=500, document_bytes=32 * MB, documents=100, pages=100,
    image_urls=True,
)  # fmt: skip
# A server speaking the Chat Completions form (vLLM, llama.cpp, Ollama): it may not
# reach the internet, so every image and document is inlined.
COMPATIBLE_MEDIA = MediaLimits(
    image_bytes=50 * MB, images=500, document_bytes=32 * MB, documents=100, pages=100
)


def chat_part(part: dict[str, Any]) -> dict[str, Any]:
    """One resolved content part (`media.sent_messages`) in Chat Completions' form."""
    if part["type"] == "image":
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    if part["type"] == "document":
        return {"type": "file", "file": {"filename": part["name"], "file_data": data_url(part)}}
    return {"type": "text", "text": part["text"]}


def chat_messages(messages: list[Message]) -> list[Message]:
    """The messages to send: the list itself when none of them is about tool use or
    holds parts (media)."""
    for message in messages:
        if (
            message["role"] == "tool"
            or "tool_calls" in message
            or isinstance(message.get("content"), list)
        ):
            return [_chat_message(m) for m in messages]
    return messages


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {k: tool[k] for k in _TOOL_FIELDS if k in tool}}
        for tool in tools
    ]


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments: the JSON object its string holds. A string that is not one
    is kept as `{"_unparsed": raw}`, for the caller to answer with a tool error."""
    if isinstance(raw, dict):  # some OpenAI-compatible servers send the object itself
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    try:
        arguments = json.loads(raw)
    except (TypeError, ValueError):
        arguments = None
    if isinstance(arguments, dict):
        return arguments
    return {"_unparsed": raw if isinstance(raw, str) else json.dumps(raw)}


def parse_tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") or []
    return [
        {
            "id": call.get("id") or f"call_{i}",
            "name": call["function"]["name"],
            "arguments": parse_arguments(call["function"].get("arguments")),
        }
        for i, call in enumerate(calls)
    ]


def bearer(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


# `GET /models`: every model at once, `{"data": [{"id": ...}, ...]}`.
LISTING = Listing(headers=bearer, ids=lambda body: [str(m["id"]) for m in body["data"]])


class OpenAIChatAdapter:
    def url(self, endpoint: Endpoint) -> str:
        return f"{endpoint.base_url}/chat/completions"

    def headers(self, api_key: str | None) -> dict[str, str]:
        return bearer(api_key)

    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request:
        return json_post(self.url(request.endpoint), self.headers(api_key), self.body(request))

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The request's JSON body (also a batch line's `body`)."""
        body: dict[str, Any] = {
            "model": request.endpoint.model,
            "messages": chat_messages(resolved_messages(request)),
            **request.params,
        }
        if "max_tokens" in body and wants_max_completion_tokens(request.endpoint.model):
            body["max_completion_tokens"] = body.pop("max_tokens")
        # An empty list is left out as None is: the API refuses `"tools": []`.
        if request.tools:
            body["tools"] = chat_tools(request.tools)
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
        return body

    def parse(self, body: Any) -> ParsedBody:
        choice = body["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        usage = body.get("usage") or {}
        # Parts of prompt_tokens and completion_tokens: the prompt read from OpenAI's
        # automatic prompt cache, and the reasoning tokens (billed as output, not shown).
        prompt_details = usage.get("prompt_tokens_details") or {}
        completion_details = usage.get("completion_tokens_details") or {}
        return ParsedBody(
            text=content,
            served_model=body.get("model"),
            stop_reason=_STOP_REASONS.get(choice.get("finish_reason") or "", "other"),
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            tool_calls=parse_tool_calls(message),
            cached_input_tokens=prompt_details.get("cached_tokens") or 0,
            reasoning_tokens=completion_details.get("reasoning_tokens") or 0,
        )

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        waits = [
            parse_openai_duration(headers[name])
            for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
            if name in headers
        ]
        known = [w for w in waits if w is not None]
        return max(known) if known else None
