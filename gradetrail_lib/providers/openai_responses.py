"""OpenAI's Responses API (`POST /v1/responses`), spoken by provider `openai` for a model
with `api: responses` (and by default for the families served only there:
`responses_only`).

Neutral messages (see `request`) become its input items: system messages are joined into
`instructions`; a user message is `{"role": "user", "content": text}`, or with media its
parts (`input_text`, `input_image` with a URL or a `data:` URL, `input_file` with a
filename and a `data:` URL); an assistant's text is an assistant message and each of its
tool calls a `function_call` item (`call_id`, `name`, `arguments` as a JSON string); a
tool's result is a `function_call_output` item. `max_tokens` is sent as
`max_output_tokens` and `reasoning_effort` as `reasoning: {effort, summary: "auto"}`; the
reasoning summary is kept as the record's `thinking`, never in the response text. An
answer cut by `max_output_tokens` (status `incomplete`) stops with `max_tokens`, which
the record calls truncated. `store` is false: nothing is kept on OpenAI's side.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gradetrail_lib.providers.adapter import json_post, resolved_messages, split_turns
from gradetrail_lib.providers.base import ParsedBody, StopReason
from gradetrail_lib.providers.media import data_url
from gradetrail_lib.providers.openai_chat import (
    OpenAIChatAdapter,
    _arguments_json,
    bearer,
    parse_arguments,
    parse_openai_duration,
)

if TYPE_CHECKING:
    import httpx

    from gradetrail_lib.providers.base import Endpoint, Message, ModelRequest

# Model families OpenAI serves through the Responses API only (o1-pro, o3-pro, the codex
# models, deep research, computer use): `api` defaults to `responses` for them.
_RESPONSES_ONLY = re.compile(r"^(o\d+-pro|o\d+(-mini)?-deep-research|computer-use)|codex")

_INCOMPLETE: dict[str, StopReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "content_filter",
}


def responses_only(model: str) -> bool:
    return _RESPONSES_ONLY.search(model) is not None


def _user_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        if part["type"] == "image":
            parts.append({"type": "input_image", "image_url": data_url(part)})
        elif part["type"] == "document":
            parts.append(
                {"type": "input_file", "filename": part["name"], "file_data": data_url(part)}
            )
        else:
            parts.append({"type": "input_text", "text": part["text"]})
    return parts


def _items(message: Message) -> list[dict[str, Any]]:
    """One neutral message (not a system or tool one) as input items."""
    if message["role"] != "assistant":
        return [{"role": message["role"], "content": _user_content(message["content"])}]
    items: list[dict[str, Any]] = []
    if message.get("content"):
        items.append({"role": "assistant", "content": message["content"]})
    items.extend(
        {
            "type": "function_call",
            "call_id": call["id"],
            "name": call["name"],
            "arguments": _arguments_json(call),
        }
        for call in message.get("tool_calls") or []
    )
    return items


def input_items(messages: list[Message]) -> tuple[list[str], list[dict[str, Any]]]:
    """The system texts (the `instructions`), and the other messages as input items."""
    system, groups = split_turns(
        messages,
        tool_result=lambda m: {
            "type": "function_call_output",
            "call_id": m["tool_call_id"],
            "output": m["content"],
        },
        results_turn=lambda outputs: {"outputs": outputs},
        turn=lambda m: {"items": _items(m)},
    )
    items: list[dict[str, Any]] = []
    for group in groups:
        items.extend(group["outputs"] if "outputs" in group else group["items"])
    return system, items


def responses_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            **{k: tool[k] for k in ("name", "description", "parameters") if k in tool},
        }
        for tool in tools
    ]


def is_responses_body(body: Any) -> bool:
    """Whether an answer is a Responses API one (`output` items), not Chat Completions'."""
    return isinstance(body, dict) and ("output" in body or body.get("object") == "response")


class OpenAIResponsesAdapter:
    def url(self, endpoint: Endpoint) -> str:
        return f"{endpoint.base_url}/responses"

    def headers(self, api_key: str | None) -> dict[str, str]:
        return bearer(api_key)

    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request:
        return json_post(self.url(request.endpoint), self.headers(api_key), self.body(request))

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The request's JSON body (also a batch line's `body`)."""
        system, items = input_items(resolved_messages(request))
        params = dict(request.params)
        body: dict[str, Any] = {"model": request.endpoint.model, "input": items, "store": False}
        if system:
            body["instructions"] = "\n\n".join(system)
        if "max_tokens" in params:
            body["max_output_tokens"] = params.pop("max_tokens")
        effort = params.pop("reasoning_effort", None)
        if effort is not None:
            body["reasoning"] = {"effort": effort, "summary": "auto"}
        body.update(params)
        if request.tools:
            body["tools"] = responses_tools(request.tools)
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
        return body

    def parse(self, body: Any) -> ParsedBody:
        texts: list[str] = []
        summaries: list[str] = []
        calls: list[dict[str, Any]] = []
        for item in body.get("output") or []:
            kind = item.get("type")
            if kind == "message":
                texts.extend(
                    c.get("text") or ""
                    for c in item.get("content") or []
                    if c.get("type") == "output_text"
                )
            elif kind == "function_call":
                calls.append(
                    {
                        "id": item.get("call_id") or item.get("id") or f"call_{len(calls)}",
                        "name": item["name"],
                        "arguments": parse_arguments(item.get("arguments")),
                    }
                )
            elif kind == "reasoning":
                summaries.extend(
                    s.get("text") or "" for s in item.get("summary") or [] if isinstance(s, dict)
                )
        stop: StopReason = "tool_use" if calls else "stop"
        if body.get("status") == "incomplete":
            reason = (body.get("incomplete_details") or {}).get("reason") or ""
            stop = _INCOMPLETE.get(reason, "other")
        elif body.get("status") not in (None, "completed"):
            stop = "other"
        usage = body.get("usage") or {}
        input_details = usage.get("input_tokens_details") or {}
        output_details = usage.get("output_tokens_details") or {}
        return ParsedBody(
            text="".join(texts),
            served_model=body.get("model"),
            stop_reason=stop,
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            tool_calls=calls,
            cached_input_tokens=input_details.get("cached_tokens") or 0,
            reasoning_tokens=output_details.get("reasoning_tokens") or 0,
            thinking="\n\n".join(summaries) if summaries else None,
        )

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        waits = [
            parse_openai_duration(headers[name])
            for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
            if name in headers
        ]
        known = [w for w in waits if w is not None]
        return max(known) if known else None


def api_of(endpoint: Endpoint) -> str:
    """The OpenAI API a request goes to: `responses`, or `chat` (Chat Completions)."""
    return dict(endpoint.settings).get("api", "chat")


class OpenAIAdapter:
    """Provider `openai`'s adapter: Chat Completions, or the Responses API for a model
    whose endpoint says so (`api_of`). An answer is read by its own shape."""

    def __init__(self) -> None:
        self.chat = OpenAIChatAdapter()
        self.responses = OpenAIResponsesAdapter()

    def _for(self, endpoint: Endpoint) -> OpenAIChatAdapter | OpenAIResponsesAdapter:
        return self.responses if api_of(endpoint) == "responses" else self.chat

    def url(self, endpoint: Endpoint) -> str:
        return self._for(endpoint).url(endpoint)

    def path(self, endpoint: Endpoint) -> str:
        """The batch line's `url` and the batch's `endpoint`."""
        return "/v1/responses" if api_of(endpoint) == "responses" else "/v1/chat/completions"

    def headers(self, api_key: str | None) -> dict[str, str]:
        return bearer(api_key)

    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request:
        return self._for(request.endpoint).build(request, api_key)

    def body(self, request: ModelRequest) -> dict[str, Any]:
        return self._for(request.endpoint).body(request)

    def parse(self, body: Any) -> ParsedBody:
        if is_responses_body(body):
            return self.responses.parse(body)
        return self.chat.parse(body)

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        return self.chat.reset_after_s(headers)
