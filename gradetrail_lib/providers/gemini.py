"""Provider `gemini`: Google's Gemini API, `POST {base_url}/v1beta/models/{name}:generateContent`
with the key in the `x-goog-api-key` header.

Neutral messages (see `request`) are translated: system messages are joined into
`systemInstruction`; user and assistant messages become `contents` of role `user` and
`model` with a `text` part; an assistant's `tool_calls` become `functionCall` parts (after
its text), and a run of `tool` messages becomes one `user` content of `functionResponse`
parts, the result as `{"output": text}` (`{"error": text}` for a failed tool). Tools are
offered as `tools: [{"functionDeclarations": [...]}]` and the choice as `toolConfig`.

The sampling parameters go in `generationConfig` (temperature, maxOutputTokens, topP,
stopSequences, seed); `extra` fields join the body as they are (`safetySettings`...), a
`generationConfig` among them merged into ours, none replacing what is built here. The
API gives function calls no ids unless it has some: they are `call_<i>`, their place in
the answer, and a `functionResponse` is matched by its name.

`finishReason` is the API's even when the model calls functions (`STOP`): an answer with
function calls stops for `tool_use`. Output tokens are `candidatesTokenCount` plus
`thoughtsTokenCount` (a thinking model's thoughts are billed as output).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gradetrail_lib.providers.adapter import json_post, resolved_messages, split_turns
from gradetrail_lib.providers.base import ParsedBody, StopReason
from gradetrail_lib.providers.media import MB, MediaLimits
from gradetrail_lib.providers.registry import Listing, Provider, RefusedParam

if TYPE_CHECKING:
    import httpx

    from gradetrail_lib.providers.base import Message, ModelRequest

_STOP_REASONS: dict[str, StopReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}

# Our sampling parameters, by their generationConfig names.
_GENERATION_CONFIG = {
    "temperature": "temperature",
    "max_tokens": "maxOutputTokens",
    "top_p": "topP",
    "stop": "stopSequences",
    "seed": "seed",
}

_TOOL_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _model_path(name: str) -> str:
    # A tuned model is named with its collection ("tunedModels/x"); a base model is not.
    return name if "/" in name else f"models/{quote(name, safe='')}"


def _assistant_parts(message: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"text": message["content"]})
    parts.extend(
        {"functionCall": {"name": call["name"], "args": call["arguments"]}}
        for call in message.get("tool_calls") or []
    )
    return parts or [{"text": ""}]


def gemini_contents(messages: list[Message]) -> tuple[list[str], list[dict[str, Any]]]:
    """The system texts, and the other messages as Gemini `contents`."""
    return split_turns(
        messages,
        tool_result=_function_response,
        results_turn=lambda parts: {"role": "user", "parts": parts},
        turn=_content,
    )


def _function_response(message: Message) -> dict[str, Any]:
    outcome = "error" if message.get("is_error") else "output"
    return {
        "functionResponse": {
            "name": message.get("name", ""),
            "response": {outcome: message["content"]},
        }
    }


# Gemini's documented limits for inline data: the request within 20 MB, up to 3,600
# images and 1,000 document pages. Its `file_data` parts want files uploaded to its File
# API, so every image and document is sent inline.
GEMINI_MEDIA = MediaLimits(
    image_bytes=20 * MB, images=3600, document_bytes=20 * MB, documents=1000, pages=1000
)


def gemini_part(part: dict[str, Any]) -> dict[str, Any]:
    """One resolved content part (`media.sent_messages`) as a Gemini part."""
    if part["type"] == "text":
        return {"text": part["text"]}
    return {"inline_data": {"mime_type": part["media_type"], "data": part["data"]}}


def _content(message: Message) -> dict[str, Any]:
    if message["role"] == "assistant":
        return {"role": "model", "parts": _assistant_parts(message)}
    content = message["content"]
    if isinstance(content, list):
        return {"role": "user", "parts": [gemini_part(p) for p in content]}
    return {"role": "user", "parts": [{"text": content}]}


def _has_parameters(schema: Any) -> bool:
    # The API refuses an object schema with no properties: a tool without parameters
    # is declared without `parameters`.
    return isinstance(schema, dict) and bool(schema.get("properties"))


def function_declarations(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    declarations = []
    for tool in tools:
        entry: dict[str, Any] = {"name": tool["name"]}
        if tool.get("description"):
            entry["description"] = tool["description"]
        if _has_parameters(tool.get("parameters")):
            entry["parameters"] = tool["parameters"]
        declarations.append(entry)
    return declarations


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if value is None:
        return {}
    # `args` is always an object; anything else is kept for a tool error.
    return {"_unparsed": value if isinstance(value, str) else json.dumps(value)}


def parse_function_calls(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = [part["functionCall"] for part in parts if part.get("functionCall") is not None]
    return [
        {
            "id": call.get("id") or f"call_{i}",
            "name": call["name"],
            "arguments": _arguments(call.get("args")),
        }
        for i, call in enumerate(calls)
    ]


def _seconds(value: Any) -> float | None:
    """A protobuf Duration as JSON ("37s", "1.5s")."""
    match = _DURATION.match(value.strip()) if isinstance(value, str) else None
    return float(match.group(1)) if match else None


class GeminiAdapter:
    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request:
        headers = {"x-goog-api-key": api_key} if api_key else {}
        system, contents = gemini_contents(resolved_messages(request))
        config: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for name, value in request.params.items():
            if name in _GENERATION_CONFIG:
                config[_GENERATION_CONFIG[name]] = value
            else:
                extra[name] = value
        if isinstance(extra.get("generationConfig"), dict):
            config = {**config, **extra.pop("generationConfig")}
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        if config:
            body["generationConfig"] = config
        if request.tools:
            body["tools"] = [{"functionDeclarations": function_declarations(request.tools)}]
            if request.tool_choice is not None:
                mode = _TOOL_MODES.get(request.tool_choice, request.tool_choice.upper())
                body["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
        body = {**extra, **body}  # an extra field cannot replace the conversation
        endpoint = request.endpoint
        url = f"{endpoint.base_url}/v1beta/{_model_path(endpoint.model)}:generateContent"
        return json_post(url, headers, body)

    def parse(self, body: Any) -> ParsedBody:
        usage = body.get("usageMetadata") or {}
        input_tokens = usage.get("promptTokenCount")
        output_tokens = None
        if input_tokens is not None:  # counts of nothing are left out
            output_tokens = usage.get("candidatesTokenCount", 0) + usage.get(
                "thoughtsTokenCount", 0
            )
        candidates = body.get("candidates") or []
        if not candidates:  # the prompt was blocked (promptFeedback.blockReason)
            return ParsedBody(
                text="",
                served_model=body.get("modelVersion"),
                stop_reason="content_filter",
                input_tokens=input_tokens,
                output_tokens=output_tokens,
            )
        candidate = candidates[0]
        parts = (candidate.get("content") or {}).get("parts") or []
        # A thinking model's thought summaries are not its answer.
        text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
        calls = parse_function_calls(parts)
        reason = candidate.get("finishReason") or ""
        return ParsedBody(
            text=text,
            served_model=body.get("modelVersion"),
            stop_reason="tool_use" if calls else _STOP_REASONS.get(reason, "other"),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            tool_calls=calls,
            # Parts of the counts above: thinking (billed as output) and implicit caching.
            reasoning_tokens=usage.get("thoughtsTokenCount") or 0,
            cached_input_tokens=usage.get("cachedContentTokenCount") or 0,
        )

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        return None  # no rate-limit headers: a 429's wait is in its body (error_info)

    def error_info(self, body: Any) -> tuple[str, float | None]:
        """`{"error": {"code", "message", "status", "details"}}`: "STATUS: message", and
        the wait of a `google.rpc.RetryInfo` detail."""
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            return str(body), None
        message = str(error.get("message", ""))
        status = error.get("status")
        text = f"{status}: {message}" if status else message
        wait = None
        details = error.get("details")
        for detail in details if isinstance(details, list) else []:
            if isinstance(detail, dict) and str(detail.get("@type", "")).endswith(".RetryInfo"):
                wait = _seconds(detail.get("retryDelay"))
        return text, wait


def _listing_headers(api_key: str | None) -> dict[str, str]:
    return {"x-goog-api-key": api_key} if api_key else {}


def _listed_ids(body: Any) -> list[str]:
    """The models that answer generateContent (the list has embedding models too)."""
    return [
        str(m["name"]).removeprefix("models/")
        for m in body.get("models", [])
        if "generateContent" in m.get("supportedGenerationMethods", ["generateContent"])
    ]


def _next_page(body: Any) -> dict[str, str] | None:
    token = body.get("nextPageToken")
    return {"pageSize": "1000", "pageToken": str(token)} if token else None


PROVIDER = Provider(
    name="gemini",
    media=GEMINI_MEDIA,
    adapter=GeminiAdapter(),
    base_url="https://generativelanguage.googleapis.com",
    key_env="GEMINI_API_KEY",
    key_required=True,
    listing=Listing(
        headers=_listing_headers,
        ids=_listed_ids,
        path="/v1beta/models",
        query={"pageSize": "1000"},
        next_query=_next_page,
    ),
    refused_params=(
        RefusedParam("thinking", "the Gemini API", "Gemini"),
        RefusedParam("reasoning_effort", "the Gemini API", "Gemini"),
    ),
)
