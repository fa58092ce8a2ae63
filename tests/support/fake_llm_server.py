"""A fake LLM provider API server for end-to-end tests and benchmarks.

It speaks real HTTP/1.1 on 127.0.0.1 and imitates these provider endpoints:

* ``POST /v1/chat/completions`` -- OpenAI Chat Completions shape,
* ``POST /v1/responses``        -- OpenAI Responses shape (``input`` items and
  ``instructions`` in, ``output`` items out: a reasoning summary when ``reasoning`` is
  asked for, the message, ``function_call`` items; ``incomplete`` at
  ``max_output_tokens``); a Chat Completions field, or a ``function_call_output`` whose
  ``call_id`` no earlier ``function_call`` has, is a 400,
* ``POST /v1/messages``         -- Anthropic Messages shape,
* ``POST /v1beta/models/{model}:generateContent`` -- Gemini shape (``contents`` in,
  ``candidates`` out, errors as ``{"error": {"code", "message", "status"}}``),
* ``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` -- Azure
  OpenAI: the Chat Completions shape; without ``api-version`` a 404, as Azure answers,
* ``POST /v1/completions``      -- vLLM's completions with ``echo`` and ``logprobs``: the
  prompt's tokens (``fake_tokens``: whitespace-led words) with their log-probabilities
  (``fake_logprob``) and text offsets, then one generated token (``" ok"``),
* ``GET  /v1/models``           -- OpenAI list shape, or the Anthropic one when the
  request carries an ``anthropic-version`` header,
* ``GET  /v1beta/models``       -- Gemini list shape,
* the OpenAI, Azure OpenAI and Anthropic batch APIs (``tests.support.fake_batches``,
  knobs and accounting on :attr:`FakeLLMServer.batches`).

A completion's answer comes from the ``responder``: a function of the request body that
returns a text, or ``{"text": str, "tool_calls": [{"name": str, "arguments": dict}]}`` to
call tools. Tool calls are rendered in the shape of the endpoint hit (OpenAI
``message.tool_calls`` with ids ``call_<n>`` and finish reason ``tool_calls``; Anthropic
``tool_use`` blocks with ids ``toolu_<n>`` and stop reason ``tool_use``; Gemini
``functionCall`` parts without ids, finish reason ``STOP`` as the API does), ``n`` counting
up over the server's life so every id is unique. The responder gets the request body as
sent (a Gemini body has ``contents``, not ``messages``). ``tests.support.agent_scripts``
reads the conversation of any format back, to script tool-using trajectories with one
responder.

Control endpoints (mainly for when the server runs in another process):

* ``GET  /_stats``  -- ``{"calls": n, "calls_by_path": {...}, "max_inflight": m,
  "batch_requests": custom_ids submitted in batches, "batch_duplicates": how many of them
  were submitted before, "batches": n}``
* ``POST /_reset``  -- same as :meth:`FakeLLMServer.reset_counts`
* ``POST /_config`` -- JSON object with any of ``latency_s``, ``models``, ``served_model``,
  ``script`` (list of Fault objects as dicts) and ``fail_always`` (Fault dict or null).

The server is built on asyncio streams with a small hand-written HTTP/1.1 parser (request
line, headers, Content-Length or chunked body, keep-alive, ``Connection: close``) so that it
adds next to no overhead at a few hundred concurrent keep-alive connections. In-process use
runs the event loop in a background daemon thread::

    with FakeLLMServer(latency_s=0.2) as srv:
        httpx.post(f"{srv.base_url}/v1/chat/completions", json={...})
        assert srv.calls == 1

From another process::

    python -m tests.support.fake_llm_server --port 0 --latency 0.2 --port-file /tmp/port

Usage fields (both completion shapes, as the providers report them; a token is a word):

* prompt caching: OpenAI caches by itself, so a request whose messages but the last were
  seen before (``prompt_cache_min_tokens`` words or more) reports them as
  ``usage.prompt_tokens_details.cached_tokens``; Anthropic caches what a request marks, so
  the prefix up to its last ``cache_control`` block is written the first time
  (``cache_creation_input_tokens``, split by ``ttl`` in ``usage.cache_creation``) and read
  after (``cache_read_input_tokens``), its ``input_tokens`` the rest of the prompt;
* reasoning: a request with ``reasoning_effort`` (OpenAI) spends ``REASONING_TOKENS`` of it
  before the answer (``usage.completion_tokens_details.reasoning_tokens``, counted in
  ``completion_tokens``); one with ``thinking: {type: enabled, budget_tokens}`` (Anthropic)
  starts with a ``thinking`` block of ``thinking_tokens`` words (at most the budget), counted
  in ``output_tokens``. Reasoning that reaches the token limit leaves the answer empty
  (finish ``length`` / ``max_tokens``).

Credentials: the ``authorization`` / ``x-api-key`` / ``api-key`` / ``x-goog-api-key`` header
values are never printed or stored; :attr:`FakeLLMServer.requests` entries record their
presence and a SHA-256 fingerprint only (see :meth:`FakeLLMServer.key_was_sent`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from types import TracebackType
from typing import Any

from tests.support.fake_batches import FakeBatches

__all__ = [
    "ANTHROPIC_MESSAGES_PATH",
    "AZURE_CHAT_PATH",
    "COMPLETION_PATHS",
    "DEFAULT_MODELS",
    "Fault",
    "FakeLLMServer",
    "GEMINI_GENERATE_PATH",
    "OPENAI_CHAT_PATH",
    "RESPONSES_PATH",
    "Responder",
    "ResponderReply",
    "default_responder",
    "media_digest",
    "media_of",
    "last_user_message",
    "main",
]

log = logging.getLogger(__name__)

OPENAI_CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
ANTHROPIC_MESSAGES_PATH = "/v1/messages"
MODELS_PATH = "/v1/models"
GEMINI_MODELS_PATH = "/v1beta/models"
#: Path templates (format with ``model=`` / ``deployment=``).
GEMINI_GENERATE_PATH = "/v1beta/models/{model}:generateContent"
AZURE_CHAT_PATH = "/openai/deployments/{deployment}/chat/completions"
COMPLETION_PATHS = frozenset({OPENAI_CHAT_PATH, ANTHROPIC_MESSAGES_PATH})
_GEMINI_PATH_RE = re.compile(r"^/v1beta/models/([^/:]+):generateContent$")
_AZURE_PATH_RE = re.compile(r"^/openai/deployments/([^/]+)/chat/completions$")
DEFAULT_MODELS: tuple[str, ...] = ("fake-model",)

#: A text, or ``{"text": str, "tool_calls": [{"name": str, "arguments": dict}]}``.
ResponderReply = str | dict[str, Any]
Responder = Callable[[dict[str, Any]], ResponderReply]

#: Header values that are credentials: recorded as present/absent, never stored.
_SECRET_HEADERS = frozenset(
    {"authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization", "cookie"}
)
_REDACTED = "<redacted>"
_MAX_BODY = 64 * 1024 * 1024
_STREAM_LIMIT = 256 * 1024  # max size of the request head (request line + headers)
_QA_RE = re.compile(r"^[ \t]*Q:[ \t]*(-?\d+)[ \t]*\+[ \t]*(-?\d+)[ \t]*$", re.MULTILINE)
_REASONS: dict[int, str] = {s.value: s.phrase for s in HTTPStatus}
#: Reasoning tokens an OpenAI request spends per ``reasoning_effort``.
REASONING_TOKENS: dict[str, int] = {"none": 0, "minimal": 0, "low": 4, "medium": 8, "high": 16}
_THINKING_WORD = "hmm"

# (OpenAI error type, Anthropic error type) per status.
_ERROR_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("invalid_request_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("invalid_request_error", "not_found_error"),
    405: ("invalid_request_error", "invalid_request_error"),
    408: ("timeout", "timeout_error"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_exceeded", "rate_limit_error"),
    500: ("server_error", "api_error"),
    502: ("server_error", "api_error"),
    503: ("server_error", "overloaded_error"),
    529: ("server_error", "overloaded_error"),
}
# Gemini's error `status` (the gRPC code's name) per HTTP status.
_GEMINI_STATUSES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_DEFAULT_MESSAGES: dict[int, str] = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    403: "Permission denied.",
    404: "Not found.",
    429: "Rate limit reached. Please try again later.",
    500: "The server had an error while processing your request.",
    503: "The engine is currently overloaded, please try again later.",
    529: "Overloaded.",
}


# --------------------------------------------------------------------------- faults


@dataclass
class Fault:
    """An injected failure for one completion call (or every call, via ``fail_always``).

    * ``status``: HTTP status to answer with (429, 500, 401, ...).
    * ``headers``: extra response headers, e.g. ``{"retry-after": "1"}``.
    * ``body``: raw response body; ``None`` means a JSON error in the provider's shape
      (``{"error": {"message": ..., "type": ...}}``) carrying ``message``.
    * ``delay_s``: hang this long before answering (or before dropping the connection).
    * ``close``: drop the connection with a TCP reset instead of answering.

    Faults are answered without the server's normal ``latency_s``.
    """

    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    delay_s: float = 0.0
    close: bool = False
    message: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        return cls(
            status=int(data.get("status", 500)),
            headers={str(k): str(v) for k, v in dict(data.get("headers") or {}).items()},
            body=None if data.get("body") is None else str(data["body"]),
            delay_s=float(data.get("delay_s", 0.0)),
            close=bool(data.get("close", False)),
            message=None if data.get("message") is None else str(data["message"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------- responders


def _text_of(content: Any) -> str:
    """Text of a message ``content``: a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return ""


def _is_tool_results(content: Any) -> bool:
    """An Anthropic user message that only carries tool results (OpenAI's ``role: tool``)."""
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def _is_function_responses(parts: Any) -> bool:
    """A Gemini user content that only carries function responses (OpenAI's ``role: tool``)."""
    return (
        isinstance(parts, list)
        and bool(parts)
        and all(isinstance(p, dict) and "functionResponse" in p for p in parts)
    )


def _function_response_text(part: dict[str, Any]) -> str:
    response = part["functionResponse"].get("response")
    if isinstance(response, dict):
        for key in ("output", "error"):
            if key in response:
                value = response[key]
                return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(response)


def last_user_message(body: dict[str, Any]) -> str:
    """Text of the last ``role == "user"`` message of a chat/messages request ("" if none).
    An Anthropic user message of tool results only is not one (in OpenAI's shape those are
    ``role: tool`` messages), nor is a Gemini content of function responses only, so every
    format gives the same text."""
    items = body.get("input")
    if isinstance(items, list):  # the Responses API
        for item in reversed(items):
            if isinstance(item, dict) and item.get("role") == "user":
                return _text_of(item.get("content"))
        return ""
    contents = body.get("contents")
    if isinstance(contents, list):  # Gemini
        for content in reversed(contents):
            if not isinstance(content, dict) or content.get("role", "user") != "user":
                continue
            if not _is_function_responses(content.get("parts")):
                return _text_of(content.get("parts"))
        return ""
    messages = body.get("messages")
    if isinstance(messages, list):
        for msg in reversed(messages):
            if (
                isinstance(msg, dict)
                and msg.get("role") == "user"
                and not _is_tool_results(msg.get("content"))
            ):
                return _text_of(msg.get("content"))
    return ""


# ------------------------------------------------------------------ media parts

_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
    "application/pdf": (b"%PDF-",),
}
_IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")


def _decoded(media_type: Any, data: Any, allowed: tuple[str, ...]) -> bytes:
    """The bytes of an inline medium, checked: a type among `allowed`, valid base64, and
    bytes that begin as that type's do."""
    if media_type not in allowed:
        raise ValueError(f"media type {media_type!r} is not one of {', '.join(allowed)}")
    if not isinstance(data, str):
        raise ValueError("inline media data must be a base64 string")
    decoded = base64.b64decode(data, validate=True)
    if not decoded.startswith(_MAGIC[media_type]):
        raise ValueError(f"the bytes are not {media_type}")
    return decoded


def _data_url_bytes(url: Any, allowed: tuple[str, ...]) -> bytes | str:
    """An OpenAI ``data:`` URL's bytes, or an https URL itself."""
    if isinstance(url, str) and url.startswith("https://"):
        return url
    match = re.fullmatch(r"data:([^;,]+);base64,(.*)", url or "", re.DOTALL)
    if match is None:
        raise ValueError("a media URL must be https:// or data:TYPE;base64,...")
    return _decoded(match.group(1), match.group(2), allowed)


def _openai_media(part: dict[str, Any]) -> bytes | str | None:
    kind = part.get("type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise ValueError("a text part needs text")
        return None
    if kind == "image_url":
        return _data_url_bytes((part.get("image_url") or {}).get("url"), _IMAGE_TYPES)
    if kind == "file":
        file = part.get("file") or {}
        if not isinstance(file.get("filename"), str):
            raise ValueError("a file part needs file.filename")
        return _data_url_bytes(file.get("file_data"), ("application/pdf",))
    raise ValueError(f"unknown content part type {kind!r}")


def _anthropic_media(block: dict[str, Any]) -> bytes | str | None:
    kind = block.get("type")
    if kind in ("text", "tool_use", "tool_result", "thinking"):
        return None
    if kind not in ("image", "document"):
        raise ValueError(f"unknown content block type {kind!r}")
    source = block.get("source") or {}
    if source.get("type") == "url" and str(source.get("url", "")).startswith("https://"):
        return str(source["url"])
    if source.get("type") != "base64":
        raise ValueError(f"an {kind} block's source must be base64 or url")
    allowed = _IMAGE_TYPES if kind == "image" else ("application/pdf",)
    return _decoded(source.get("media_type"), source.get("data"), allowed)


def _gemini_media(part: dict[str, Any]) -> bytes | str | None:
    if "inline_data" in part:
        inline = part["inline_data"]
        return _decoded(
            inline.get("mime_type"), inline.get("data"), (*_IMAGE_TYPES, "application/pdf")
        )
    if not set(part) & {"text", "functionCall", "functionResponse"}:
        raise ValueError(f"unknown part {sorted(part)}")
    return None


def _responses_media(part: dict[str, Any]) -> bytes | str | None:
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        if not isinstance(part.get("text"), str):
            raise ValueError(f"an {kind} part needs text")
        return None
    if kind == "input_image":
        return _data_url_bytes(part.get("image_url"), _IMAGE_TYPES)
    if kind == "input_file":
        if not isinstance(part.get("filename"), str):
            raise ValueError("an input_file part needs filename")
        return _data_url_bytes(part.get("file_data"), ("application/pdf",))
    raise ValueError(f"unknown input content type {kind!r}")


def check_responses_body(body: dict[str, Any]) -> None:
    """A Responses API request's shape: no Chat Completions fields, input items each a
    message or a function call or its output (an output answering a call made before)."""
    for name in ("messages", "max_tokens", "max_completion_tokens", "reasoning_effort"):
        if name in body:
            raise ValueError(f"Unsupported parameter: '{name}' (a Chat Completions field)")
    calls: set[str] = set()
    for item in body["input"]:
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                raise ValueError(f"an input message's role {item.get('role')!r}")
            if not isinstance(item.get("content"), str | list):
                raise ValueError("an input message's content must be a text or a list")
        elif kind == "function_call":
            if not isinstance(item.get("arguments"), str) or not item.get("call_id"):
                raise ValueError("a function_call item needs call_id and arguments (a string)")
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                raise ValueError(
                    f"No tool call found for output with call_id {item.get('call_id')}"
                )
            if not isinstance(item.get("output"), str):
                raise ValueError("a function_call_output's output must be a string")
        else:
            raise ValueError(f"unknown input item type {kind!r}")
    reasoning = body.get("reasoning")
    if reasoning is not None and reasoning.get("effort") not in REASONING_TOKENS:
        raise ValueError(f"reasoning.effort {reasoning.get('effort')!r}")
    for tool in body.get("tools") or []:
        if tool.get("type") != "function" or "function" in tool or not tool.get("name"):
            raise ValueError("a Responses tool is {type: function, name, parameters}")


_OPENAI_PARTS = frozenset({"text", "image_url", "file"})
_ANTHROPIC_BLOCKS = frozenset({"text", "image", "document", "tool_use", "tool_result", "thinking"})


def media_of(body: dict[str, Any], api: str | None = None) -> list[bytes | str]:
    """The images and documents of a request (bytes inline, or the URL sent), in order;
    a ValueError naming what is wrong with a part's shape. `api` (openai, azure,
    anthropic, gemini) holds each part to that API's types; without it a part's type
    says which API's it is."""
    found: list[bytes | str] = []
    if isinstance(body.get("input"), list):  # the Responses API
        for item in body["input"]:
            content = item.get("content") if isinstance(item, dict) else None
            for part in content if isinstance(content, list) else []:
                medium = _responses_media(part)
                if medium is not None:
                    found.append(medium)
        return found
    contents = body.get("contents")
    if isinstance(contents, list):  # Gemini
        for content in contents:
            for part in (content or {}).get("parts") or []:
                medium = _gemini_media(part)
                if medium is not None:
                    found.append(medium)
        return found
    allowed = {"anthropic": _ANTHROPIC_BLOCKS, "openai": _OPENAI_PARTS, "azure": _OPENAI_PARTS}
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type")
            if api in allowed and kind not in allowed[api]:
                raise ValueError(f"content part type {kind!r} is not one of {api}'s")
            anthropic = api == "anthropic" or (api is None and kind in _ANTHROPIC_BLOCKS)
            medium = _anthropic_media(part) if anthropic else _openai_media(part)
            if medium is not None:
                found.append(medium)
    return found


def media_digest(medium: bytes | str) -> str:
    """What the fake answers about a medium: the sha256 of its bytes (of the URL's text
    for a URL, which it does not fetch)."""
    data = medium.encode() if isinstance(medium, str) else medium
    return hashlib.sha256(data).hexdigest()


def default_responder(body: dict[str, Any]) -> str:
    """``"Media: <sha256>, ..."`` (each image's or document's, in order) when the request
    shows media; else ``"Answer: <a+b>"`` if the last user message has a line
    ``Q: <a> + <b>`` (the last such line wins), else ``"Echo: <content>"``."""
    media = media_of(body)
    if media:
        return "Media: " + ", ".join(media_digest(m) for m in media)
    content = last_user_message(body)
    matches = _QA_RE.findall(content)
    if matches:
        a, b = matches[-1]
        return f"Answer: {int(a) + int(b)}"
    return f"Echo: {content}"


def _prompt_words(body: dict[str, Any]) -> int:
    n = len(_text_of(body.get("system")).split())
    n += len(_text_of(body.get("instructions")).split())
    for item in body.get("input") or []:  # the Responses API
        if isinstance(item, dict):
            n += len(_text_of(item.get("content")).split())
            n += len(str(item.get("output") or "").split())
    instruction = body.get("systemInstruction")
    if isinstance(instruction, dict):  # Gemini
        n += len(_text_of(instruction.get("parts")).split())
    contents = body.get("contents")
    if isinstance(contents, list):
        for content in contents:
            parts = content.get("parts") if isinstance(content, dict) else None
            n += len(_text_of(parts).split())
            for part in parts if isinstance(parts, list) else []:
                if isinstance(part, dict) and "functionResponse" in part:
                    n += len(_function_response_text(part).split())
    messages = body.get("messages")
    if isinstance(messages, list):
        for msg in messages:
            if isinstance(msg, dict):
                content = msg.get("content")
                n += len(_text_of(content).split())
                if isinstance(content, list):  # Anthropic tool results, as OpenAI counts them
                    for block in content:
                        if isinstance(block, dict) and block.get("type") == "tool_result":
                            n += len(_text_of(block.get("content")).split())
    return n


def _reply_parts(reply: ResponderReply) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """A responder's reply as (text, [(tool name, arguments), ...])."""
    if isinstance(reply, dict):
        calls = [
            (str(call["name"]), dict(call.get("arguments") or {}))
            for call in reply.get("tool_calls") or []
        ]
        return str(reply.get("text") or ""), calls
    return str(reply), []


def _max_tokens(body: dict[str, Any]) -> int | None:
    config = body.get("generationConfig")
    gemini = config.get("maxOutputTokens") if isinstance(config, dict) else None
    values = (gemini, body.get("max_tokens"), body.get("max_completion_tokens"),
              body.get("max_output_tokens"))  # fmt: skip
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


# ------------------------------------------------------------------------- HTTP bits


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class _Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] | None = None
    reset: bool = False  # drop the connection (TCP RST) instead of answering


def _json_reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> _Reply:
    return _Reply(status, json.dumps(payload).encode(), "application/json", headers)


def _api_of(path: str) -> str | None:
    """Which API a completion path speaks: openai, anthropic, gemini or azure."""
    if path == OPENAI_CHAT_PATH:
        return "openai"
    if path == RESPONSES_PATH:
        return "responses"
    if path == ANTHROPIC_MESSAGES_PATH:
        return "anthropic"
    if _GEMINI_PATH_RE.match(path):
        return "gemini"
    if _AZURE_PATH_RE.match(path):
        return "azure"
    return None


def _error_payload(path: str, status: int, message: str | None) -> dict[str, Any]:
    oa_type, an_type = _ERROR_TYPES.get(
        status, ("server_error", "api_error") if status >= 500 else ("invalid_request_error",) * 2
    )
    msg = message or _DEFAULT_MESSAGES.get(status) or _REASONS.get(status, "Error")
    if _api_of(path) == "gemini" or path == GEMINI_MODELS_PATH:
        grpc = _GEMINI_STATUSES.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")
        return {"error": {"code": status, "message": msg, "status": grpc}}
    if path == ANTHROPIC_MESSAGES_PATH:
        return {"type": "error", "error": {"type": an_type, "message": msg}}
    return {"error": {"message": msg, "type": oa_type, "param": None, "code": None}}


def _error_reply(path: str, status: int, message: str | None = None) -> _Reply:
    return _json_reply(status, _error_payload(path, status, message))


def _encode_response(reply: _Reply, keep_alive: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Unknown')}",
        f"content-type: {reply.content_type}",
        f"content-length: {len(reply.body)}",
        "connection: keep-alive" if keep_alive else "connection: close",
    ]
    if reply.headers:
        lines.extend(f"{k}: {v}" for k, v in reply.headers.items())
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1") + reply.body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadRequest(400, "Invalid chunk size.") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        total += size
        if total > _MAX_BODY:
            raise _BadRequest(413, "Request body too large.")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise _BadRequest(400, "Invalid chunk terminator.")


def _reset_connection(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER=0 so the peer sees a TCP reset (ECONNRESET)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


# ---------------------------------------------------------------------------- server


COMPLETIONS_PATH = "/v1/completions"


def fake_tokens(text: str) -> list[str]:
    """How the fake "tokenizes" a prompt: each word with the whitespace before it (and a
    trailing run of whitespace as a token of its own)."""
    return re.findall(r"\s*\S+|\s+$", text)


def fake_logprob(token: str) -> float:
    """The fake model's log-probability of a token: -0.5 per character."""
    return -0.5 * len(token)


def fake_top(token: str) -> dict[str, float]:
    """The top choices at a token: itself when it has at most 3 characters (so it is the
    greedy one), else `" the"` ahead of it."""
    if len(token) <= 3:
        return {token: fake_logprob(token)}
    return {" the": -0.1, token: fake_logprob(token)}


def echo_logprobs(body: dict[str, Any]) -> dict[str, Any]:
    """A vLLM completions answer with the prompt echoed and its log-probabilities."""
    prompt = body["prompt"]
    if not isinstance(prompt, str) or not body.get("echo"):
        raise _BadRequest(400, "the fake completions endpoint wants echo and a string prompt")
    tokens = [*fake_tokens(prompt), " ok"]
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    logprobs = [None, *(fake_logprob(t) for t in tokens[1:])]
    tops = [None, *(fake_top(t) for t in tokens[1:])]
    return {
        "id": "cmpl-fake",
        "object": "text_completion",
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "text": prompt + " ok",
                "logprobs": {
                    "tokens": tokens,
                    "token_logprobs": logprobs,
                    "top_logprobs": tops,
                    "text_offset": offsets,
                },
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": len(tokens) - 1, "completion_tokens": 1},
    }


class FakeLLMServer:
    """Fake OpenAI/Anthropic/Gemini/Azure API over real HTTP/1.1, its asyncio loop in a
    daemon thread.

    Mutable knobs (safe to change while running): ``latency_s``, ``responder``,
    ``served_model`` (overrides the ``model`` echoed back), ``models`` (listed by
    ``GET /v1/models``), ``script`` (list of :class:`Fault`, consumed in order by completion
    calls), ``fail_always`` (a :class:`Fault` used once ``script`` is empty) and
    ``inflight_cap`` (completion calls arriving while that many are in progress are
    answered 429 with ``retry-after: inflight_cap_retry_after``; None: no cap).

    Accounting (thread-safe reads): ``calls``, ``calls_by_path``, ``requests``,
    ``max_inflight``; cleared by :meth:`reset_counts`.
    """

    def __init__(
        self,
        latency_s: float = 0.0,
        responder: Responder | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Sequence[str] | None = None,
        served_model: str | None = None,
        backlog: int = 4096,
    ) -> None:
        self.latency_s = latency_s
        self.responder: Responder = responder or default_responder
        self.host = host
        self.port = port
        self.models: list[str] = list(DEFAULT_MODELS if models is None else models)
        self.served_model = served_model
        self.script: list[Fault] = []
        self.fail_always: Fault | None = None
        self.inflight_cap: int | None = None
        self.inflight_cap_retry_after = "0"
        self.backlog = backlog
        # Prompt caching (see the module's doc): the least prefix cached, the prefixes seen.
        self.prompt_cache_min_tokens = 1024
        self._prompt_prefixes: set[tuple[str, str]] = set()
        # Words of an Anthropic thinking block (at most the request's budget).
        self.thinking_tokens = 6

        self._lock = threading.Lock()
        self._calls = 0
        self._calls_by_path: dict[str, int] = {}
        self._requests: list[dict[str, Any]] = []
        self._inflight = 0
        self._max_inflight = 0
        self._seq = 0
        self._tool_seq = 0  # never reset: tool call ids stay unique over the server's life

        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._conns: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        # The batch APIs (OpenAI, Azure OpenAI, Anthropic): `tests.support.fake_batches`.
        self.batches = FakeBatches(self)

    # ----------------------------------------------------------------- lifecycle

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 10.0) -> FakeLLMServer:
        if self.running:
            return self
        self._ready.clear()
        self._start_error = None
        self._thread = threading.Thread(target=self._thread_main, name="FakeLLMServer", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("FakeLLMServer did not start in time")
        if self._start_error is not None:
            self._thread.join(timeout)
            self._thread = None
            raise RuntimeError(f"FakeLLMServer failed to start: {self._start_error!r}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        thread, loop, stop_event = self._thread, self._loop, self._stop_event
        if thread is None:
            return
        if loop is not None and stop_event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout)
        self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def serve_forever(self, on_ready: Callable[[FakeLLMServer], None] | None = None) -> None:
        """Run in the foreground (current thread) until SIGINT/SIGTERM. ``on_ready`` is
        called once the port is bound."""

        async def run() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._request_stop)
            await self._serve(on_ready)

        asyncio.run(run())
        if self._start_error is not None:
            raise RuntimeError(f"FakeLLMServer failed to start: {self._start_error!r}")

    def _request_stop(self) -> None:
        if self._stop_event is not None:
            self._stop_event.set()

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # pragma: no cover - surfaced through start()
            if not self._ready.is_set():
                self._start_error = exc
                self._ready.set()
            else:
                log.exception("FakeLLMServer loop crashed")

    async def _serve(self, on_ready: Callable[[FakeLLMServer], None] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        try:
            server = await asyncio.start_server(
                self._handle_connection,
                self.host,
                self.port,
                backlog=self.backlog,
                reuse_address=True,
                limit=_STREAM_LIMIT,
            )
        except BaseException as exc:
            self._start_error = exc
            self._ready.set()
            return
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        try:
            if on_ready is not None:
                on_ready(self)
            await self._stop_event.wait()
        finally:
            server.close()
            conns = list(self._conns.items())
            for task, writer in conns:
                writer.transport.abort()
                task.cancel()
            await asyncio.gather(*(t for t, _ in conns), return_exceptions=True)
            await server.wait_closed()

    # ---------------------------------------------------------------- accounting

    @property
    def calls(self) -> int:
        """Completion calls (chat + messages) received, including faulted ones."""
        with self._lock:
            return self._calls

    @property
    def calls_by_path(self) -> dict[str, int]:
        """Requests per API path (completion paths, ``/v1/models``, unknown paths)."""
        with self._lock:
            return dict(self._calls_by_path)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Completion requests in arrival order. Each entry has ``path``, ``method``, ``body``
        (parsed JSON or None), ``query`` (the query string's arguments), ``headers``
        (lower-cased; credentials redacted), ``has_authorization``, ``has_x_api_key``,
        ``key_sha256`` (SHA-256 of the bearer token, x-api-key, api-key or x-goog-api-key,
        or None), ``status`` (answered status, None for a dropped connection),
        ``fault`` (the :class:`Fault` applied, or None) and ``received_at`` (this
        process's ``time.monotonic()`` when the request was read)."""
        with self._lock:
            return list(self._requests)

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def max_inflight(self) -> int:
        """Highest number of completion calls in progress at once since the last reset."""
        return self._max_inflight

    def reset_counts(self) -> None:
        with self._lock:
            self._calls = 0
            self._calls_by_path = {}
            self._requests = []
            self._max_inflight = self._inflight

    def stats(self) -> dict[str, Any]:
        submitted = self.batches.submitted
        with self._lock:
            return {
                "calls": self._calls,
                "calls_by_path": dict(self._calls_by_path),
                "max_inflight": self._max_inflight,
                "batch_requests": len(submitted),
                "batch_duplicates": len(submitted) - len(set(submitted)),
                "batches": len(self.batches.batches),
            }

    def key_was_sent(self, key: str) -> bool:
        """Whether any recorded completion request carried ``key`` (as a bearer token, an
        ``x-api-key``, an ``api-key`` or an ``x-goog-api-key``), compared by fingerprint."""
        digest = hashlib.sha256(key.encode()).hexdigest()
        return any(r.get("key_sha256") == digest for r in self.requests)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            if self.script:
                return self.script.pop(0)
            return self.fail_always

    # ------------------------------------------------------------------ HTTP I/O

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns[task] = writer
        try:
            await self._connection_loop(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError):
            pass
        except asyncio.CancelledError:
            # Only happens at shutdown. Finish normally instead of re-raising: on Python 3.11
            # StreamReaderProtocol calls task.exception() on a cancelled handler task and
            # logs a spurious CancelledError traceback.
            pass
        except Exception:
            log.exception("FakeLLMServer: unexpected error in connection handler")
        finally:
            if task is not None:
                self._conns.pop(task, None)
            if not writer.is_closing():
                writer.close()

    async def _connection_loop(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # client closed the connection (possibly mid-head)
            except asyncio.LimitOverrunError:
                writer.write(_encode_response(_error_reply("", 431, "Headers too large."), False))
                return
            lines = head[:-4].split(b"\r\n")
            while lines and not lines[0]:  # tolerate stray CRLFs between requests
                lines.pop(0)
            try:
                method, target, version, headers = _parse_head(lines)
            except _BadRequest as exc:
                writer.write(_encode_response(_error_reply("", exc.status, exc.message), False))
                return

            conn = headers.get("connection", "").lower()
            keep_alive = "close" not in conn if version == "HTTP/1.1" else "keep-alive" in conn

            try:
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    raw = await _read_chunked(reader)
                else:
                    length = _content_length(headers)
                    raw = await reader.readexactly(length) if length else b""
            except _BadRequest as exc:
                writer.write(_encode_response(_error_reply("", exc.status, exc.message), False))
                return

            path, _, query = target.partition("?")
            path = path.rstrip("/") or "/"
            reply = await self._dispatch(method, path, headers, raw, query)
            if writer.is_closing():
                return
            if reply.reset:
                _reset_connection(writer)
                return
            writer.write(_encode_response(reply, keep_alive))
            await writer.drain()
            if not keep_alive:
                return

    # ------------------------------------------------------------------ routing

    async def _dispatch(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, query: str = ""
    ) -> _Reply:
        if FakeBatches.handles(path):
            return await self.batches.dispatch(method, path, headers, raw, query)
        if path == COMPLETIONS_PATH and method == "POST":
            self._count_path(path)
            with self._lock:
                self._calls += 1
            try:
                return _json_reply(200, echo_logprobs(json.loads(raw)))
            except (ValueError, KeyError, TypeError) as exc:
                return _error_reply(path, 400, f"Bad completions request: {exc}")
            except _BadRequest as exc:
                return _error_reply(path, exc.status, exc.message)
        if _api_of(path) is not None:
            if method != "POST":
                self._count_path(path)
                return _error_reply(path, 405, f"Method {method} not allowed.")
            return await self._completion(path, headers, raw, query)
        if path in (MODELS_PATH, GEMINI_MODELS_PATH):
            self._count_path(path)
            if method != "GET":
                return _error_reply(path, 405, f"Method {method} not allowed.")
            if path == GEMINI_MODELS_PATH:
                return self._list_gemini_models()
            return self._list_models(anthropic="anthropic-version" in headers)
        if path == "/_stats" and method == "GET":
            return _json_reply(200, self.stats())
        if path == "/_reset" and method == "POST":
            self.reset_counts()
            return _json_reply(200, {"ok": True})
        if path == "/_config" and method == "POST":
            return self._configure(raw)
        self._count_path(path)
        return _error_reply(path, 404, f"Unknown path {path}.")

    def _count_path(self, path: str) -> None:
        with self._lock:
            self._calls_by_path[path] = self._calls_by_path.get(path, 0) + 1

    def _list_gemini_models(self) -> _Reply:
        return _json_reply(
            200,
            {
                "models": [
                    {
                        "name": f"models/{m}",
                        "displayName": m,
                        "supportedGenerationMethods": ["generateContent", "countTokens"],
                    }
                    for m in self.models
                ]
            },
        )

    def _list_models(self, anthropic: bool) -> _Reply:
        models = list(self.models)
        if anthropic:
            return _json_reply(
                200,
                {
                    "data": [
                        {
                            "type": "model",
                            "id": m,
                            "display_name": m,
                            "created_at": "2026-01-01T00:00:00Z",
                        }
                        for m in models
                    ],
                    "has_more": False,
                    "first_id": models[0] if models else None,
                    "last_id": models[-1] if models else None,
                },
            )
        return _json_reply(
            200,
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models
                ],
            },
        )

    def _configure(self, raw: bytes) -> _Reply:
        try:
            cfg = json.loads(raw or b"{}")
            if not isinstance(cfg, dict):
                raise ValueError("expected a JSON object")
            if "latency_s" in cfg:
                self.latency_s = float(cfg["latency_s"])
            if "models" in cfg:
                self.models = [str(m) for m in cfg["models"]]
            if "served_model" in cfg:
                sm = cfg["served_model"]
                self.served_model = None if sm is None else str(sm)
            if "script" in cfg:
                script = [Fault.from_dict(f) for f in cfg["script"]]
                with self._lock:
                    self.script = script
            if "fail_always" in cfg:
                fa = cfg["fail_always"]
                self.fail_always = None if fa is None else Fault.from_dict(fa)
            if "prompt_cache_min_tokens" in cfg:
                self.prompt_cache_min_tokens = int(cfg["prompt_cache_min_tokens"])
            if "thinking_tokens" in cfg:
                self.thinking_tokens = int(cfg["thinking_tokens"])
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return _error_reply("/_config", 400, f"Bad config: {exc}")
        return _json_reply(200, {"ok": True})

    # -------------------------------------------------------------- completions

    async def _completion(
        self, path: str, headers: dict[str, str], raw: bytes, query: str = ""
    ) -> _Reply:
        api = _api_of(path)
        conversation = {"gemini": "contents", "responses": "input"}.get(api or "", "messages")
        body: dict[str, Any] | None = None
        parse_error: str | None = None
        error_status = 400
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            parse_error = f"Invalid JSON body: {exc}"
        else:
            if not isinstance(parsed, dict):
                parse_error = "Request body must be a JSON object."
            elif not isinstance(parsed.get(conversation), list):
                body = parsed
                parse_error = f"'{conversation}' must be a list."
            else:
                body = parsed
            if isinstance(parsed, dict) and parsed.get("stream"):
                parse_error = "The fake server does not support streaming."
            if parse_error is None and body is not None:
                try:
                    if api == "responses":
                        check_responses_body(body)
                    media_of(body, api)  # each format's media parts checked for their shape
                except (ValueError, TypeError, AttributeError) as exc:
                    parse_error = f"Invalid media part: {exc}"
        arguments = urllib.parse.parse_qs(query)
        if api == "azure" and not arguments.get("api-version"):
            parse_error, error_status = "Resource not found", 404  # as Azure answers

        fault = self._next_fault()
        if fault is None and self.inflight_cap is not None and self._inflight >= self.inflight_cap:
            fault = Fault(status=429, headers={"retry-after": self.inflight_cap_retry_after})
        entry = _request_entry(path, headers, body)
        entry["received_at"] = time.monotonic()
        entry["query"] = {k: v[-1] for k, v in arguments.items()}
        entry["fault"] = fault
        if fault is not None:
            entry["status"] = None if fault.close else fault.status
        else:
            entry["status"] = error_status if parse_error else 200
        with self._lock:
            self._calls += 1
            self._calls_by_path[path] = self._calls_by_path.get(path, 0) + 1
            self._requests.append(entry)
            self._seq += 1
            seq = self._seq
        self._inflight += 1  # only touched from the loop thread
        if self._inflight > self._max_inflight:
            self._max_inflight = self._inflight
        try:
            if fault is not None:
                if fault.delay_s > 0:
                    await asyncio.sleep(fault.delay_s)
                return self._fault_reply(path, fault)
            if parse_error is not None or body is None:
                return _error_reply(path, error_status, parse_error)
            latency = self.latency_s
            if latency > 0:
                await asyncio.sleep(latency)
            try:
                text, calls = _reply_parts(self.responder(body))
            except Exception as exc:
                entry["status"] = 500
                return _error_reply(path, 500, f"Responder failed: {exc!r}")
            prefix = "toolu_" if path == ANTHROPIC_MESSAGES_PATH else "call_"
            with self._lock:
                first = self._tool_seq + 1
                self._tool_seq += len(calls)
            tool_calls = [
                (f"{prefix}{first + i}", name, arguments)
                for i, (name, arguments) in enumerate(calls)
            ]
            usage = _Usage(
                cached=self._prompt_cache(path, body),
                thinking_tokens=self.thinking_tokens,
            )
            return _completion_reply(
                path, body, text, seq, self.served_model, tool_calls, usage=usage
            )
        finally:
            self._inflight -= 1

    def _prompt_cache(self, path: str, body: dict[str, Any]) -> tuple[int, int, str] | None:
        """The request's cacheable prefix as (its words, whether it was seen before, its
        ttl), or None when it has none; a prefix not seen before is remembered."""
        prefix = _cacheable_prefix(path, body)
        if prefix is None:
            return None
        key, words, ttl = prefix
        if words < max(self.prompt_cache_min_tokens, 1):
            return None
        with self._lock:
            seen = (ttl, key) in self._prompt_prefixes
            self._prompt_prefixes.add((ttl, key))
        return words, int(seen), ttl

    @staticmethod
    def _fault_reply(path: str, fault: Fault) -> _Reply:
        if fault.close:
            return _Reply(0, b"", reset=True)
        headers = {str(k): str(v) for k, v in fault.headers.items()}
        if fault.body is None:
            payload = _error_payload(path, fault.status, fault.message)
            return _json_reply(fault.status, payload, headers)
        try:
            json.loads(fault.body)
            ctype = "application/json"
        except ValueError:
            ctype = "text/plain; charset=utf-8"
        return _Reply(fault.status, fault.body.encode(), ctype, headers)


def _parse_head(lines: list[bytes]) -> tuple[str, str, str, dict[str, str]]:
    if not lines:
        raise _BadRequest(400, "Empty request.")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise _BadRequest(400, "Malformed request line.")
    method, target, version = (p.decode("latin-1") for p in parts)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise _BadRequest(400, "Malformed header line.")
        key = name.decode("latin-1").lower()
        val = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {val}" if key in headers else val
    return method, target, version, headers


def _content_length(headers: dict[str, str]) -> int:
    value = headers.get("content-length")
    if value is None:
        return 0
    try:
        length = int(value)
    except ValueError:
        raise _BadRequest(400, "Invalid Content-Length.") from None
    if length < 0:
        raise _BadRequest(400, "Invalid Content-Length.")
    if length > _MAX_BODY:
        raise _BadRequest(413, "Request body too large.")
    return length


def _request_entry(
    path: str, headers: dict[str, str], body: dict[str, Any] | None
) -> dict[str, Any]:
    key: str | None = None
    auth = headers.get("authorization")
    if auth is not None:
        key = auth[7:] if auth[:7].lower() == "bearer " else auth
    else:
        for name in ("x-api-key", "api-key", "x-goog-api-key"):
            if name in headers:
                key = headers[name]
                break
    return {
        "path": path,
        "method": "POST",
        "body": body,
        "headers": {k: (_REDACTED if k in _SECRET_HEADERS else v) for k, v in headers.items()},
        "has_authorization": auth is not None,
        "has_x_api_key": "x-api-key" in headers,
        "key_sha256": None if key is None else hashlib.sha256(key.encode()).hexdigest(),
    }


def _cacheable_prefix(path: str, body: dict[str, Any]) -> tuple[str, int, str] | None:
    """The prefix a provider's prompt cache would hold, as (what tells it apart, its
    words, its ttl): OpenAI's
    (automatic) every message but the last; Anthropic's the system and messages up to the
    last block marked ``cache_control``."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    if path in (OPENAI_CHAT_PATH,) or _AZURE_PATH_RE.match(path):
        if len(messages) < 2:
            return None
        shared = messages[:-1]
        words = sum(len(_text_of(m.get("content")).split()) for m in shared if isinstance(m, dict))
        return json.dumps(shared, sort_keys=True), words, "auto"
    if path != ANTHROPIC_MESSAGES_PATH:
        return None
    blocks: list[tuple[Any, dict[str, Any] | None]] = []
    system = body.get("system")
    if isinstance(system, list):
        blocks += [(b, b.get("cache_control")) for b in system if isinstance(b, dict)]
    elif system:
        blocks.append((system, None))
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            blocks += [(b, b.get("cache_control")) for b in content if isinstance(b, dict)]
        else:
            blocks.append((content, None))
    marked = [i for i, (_, control) in enumerate(blocks) if control]
    if not marked:
        return None
    last = marked[-1]
    control = blocks[last][1] or {}
    kept = [_text_of([b]) if isinstance(b, dict) else _text_of(b) for b, _ in blocks[: last + 1]]
    words = sum(len(text.split()) for text in kept)
    return json.dumps(kept), words, str(control.get("ttl") or "5m")


@dataclass(frozen=True)
class _Usage:
    """What the server's state adds to a reply's usage: the prompt cache's (prefix words,
    seen before, ttl), and the words of a thinking block."""

    cached: tuple[int, int, str] | None = None
    thinking_tokens: int = 0


def _completion_reply(
    path: str,
    body: dict[str, Any],
    text: str,
    seq: int,
    served_model: str | None,
    tool_calls: Sequence[tuple[str, str, dict[str, Any]]] = (),
    *,
    usage: _Usage | None = None,
) -> _Reply:
    """The answer ``text`` (cut to ``max_tokens`` words) and ``tool_calls`` (id, name,
    arguments) in the endpoint's shape. With tool calls the stop reason is the tool one.
    Reasoning or thinking comes first and counts against the limit."""
    usage = usage or _Usage()
    words = text.split()
    limit = _max_tokens(body)
    reasoning = 0
    effort = body.get("reasoning_effort")
    if path == RESPONSES_PATH:
        effort = (body.get("reasoning") or {}).get("effort")
    if isinstance(effort, str):
        reasoning = REASONING_TOKENS.get(effort, 0)
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        reasoning = min(usage.thinking_tokens, budget if isinstance(budget, int) else 0)
    if limit is not None:
        reasoning = min(reasoning, limit)
    room = None if limit is None else limit - reasoning
    truncated = room is not None and (len(words) > room or (reasoning and room == 0))
    if truncated:
        words = words[: max(room or 0, 0)]
        text = " ".join(words)
    prompt_tokens = _prompt_words(body)
    completion_tokens = (
        reasoning
        + len(words)
        + sum(
            len(name.split()) + len(json.dumps(arguments).split())
            for _, name, arguments in tool_calls
        )
    )
    gemini = _GEMINI_PATH_RE.match(path)
    if gemini:  # the model is in the path, not the body
        parts: list[dict[str, Any]] = [{"text": text}] if text or not tool_calls else []
        parts.extend(
            {"functionCall": {"name": name, "args": arguments}} for _, name, arguments in tool_calls
        )
        finish_reason = "MAX_TOKENS" if truncated and not tool_calls else "STOP"
        return _json_reply(
            200,
            {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": parts},
                        "finishReason": finish_reason,
                        "index": 0,
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": prompt_tokens,
                    "candidatesTokenCount": completion_tokens,
                    "totalTokenCount": prompt_tokens + completion_tokens,
                },
                "modelVersion": served_model or gemini.group(1),
                "responseId": f"fake{seq:08d}",
            },
        )
    model = served_model or str(body.get("model") or "fake-model")
    if path == RESPONSES_PATH:
        return _json_reply(
            200,
            _responses_object(
                body, text, seq, model, tool_calls, truncated, reasoning,
                prompt_tokens, completion_tokens, usage.cached,
            ),
        )  # fmt: skip
    if path == ANTHROPIC_MESSAGES_PATH:
        content: list[dict[str, Any]] = []
        if reasoning:
            content.append(
                {"type": "thinking", "thinking": " ".join([_THINKING_WORD] * reasoning),
                 "signature": f"sig{seq}"}
            )  # fmt: skip
        if text or not (tool_calls or reasoning):
            content.append({"type": "text", "text": text})
        content.extend(
            {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
            for call_id, name, arguments in tool_calls
        )
        stop_reason = "tool_use" if tool_calls else "max_tokens" if truncated else "end_turn"
        return _json_reply(
            200,
            {
                "id": f"msg_fake{seq:08d}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": _anthropic_usage(prompt_tokens, completion_tokens, usage.cached),
            },
        )
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["content"] = text or None
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for call_id, name, arguments in tool_calls
        ]
    finish_reason = "tool_calls" if tool_calls else "length" if truncated else "stop"
    return _json_reply(
        200,
        {
            "id": f"chatcmpl-fake{seq:08d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": _openai_usage(
                prompt_tokens, completion_tokens, usage.cached, reasoning if effort else None
            ),
        },
    )


def _responses_object(
    body: dict[str, Any],
    text: str,
    seq: int,
    model: str,
    tool_calls: Sequence[tuple[str, str, dict[str, Any]]],
    truncated: bool,
    reasoning: int,
    prompt_tokens: int,
    output_tokens: int,
    cached: tuple[int, int, str] | None,
) -> dict[str, Any]:
    """A Responses API answer: a reasoning item (its summary, when reasoning was asked
    for), the message, then a `function_call` item per call; `incomplete` when the text
    was cut at `max_output_tokens`."""
    output: list[dict[str, Any]] = []
    if body.get("reasoning") is not None:
        output.append(
            {"type": "reasoning", "id": f"rs_fake{seq:08d}",
             "summary": [{"type": "summary_text", "text": f"Thought {reasoning} tokens."}]}
        )  # fmt: skip
    if text or not tool_calls:
        output.append(
            {"type": "message", "id": f"msg_fake{seq:08d}", "role": "assistant",
             "status": "incomplete" if truncated else "completed",
             "content": [{"type": "output_text", "text": text, "annotations": []}]}
        )  # fmt: skip
    output.extend(
        {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
         "arguments": json.dumps(arguments), "status": "completed"}
        for call_id, name, arguments in tool_calls
    )  # fmt: skip
    incomplete = truncated and not tool_calls
    return {
        "id": f"resp_fake{seq:08d}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "model": model,
        "output": output,
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached[0] if cached and cached[1] else 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt_tokens + output_tokens,
        },
    }


def _openai_usage(
    prompt_tokens: int,
    completion_tokens: int,
    cached: tuple[int, int, str] | None,
    reasoning: int | None,
) -> dict[str, Any]:
    """OpenAI's usage; the details only when there is a cacheable prefix or reasoning (so
    the usage of a plain request stays as it was)."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached[0] if cached[1] else 0}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def _anthropic_usage(
    prompt_tokens: int, completion_tokens: int, cached: tuple[int, int, str] | None
) -> dict[str, Any]:
    """Anthropic's usage: `input_tokens` leaves out what was read from or written to the
    prompt cache."""
    if cached is None:
        return {"input_tokens": prompt_tokens, "output_tokens": completion_tokens}
    read = written = written_1h = 0
    if cached is not None:
        words, seen, ttl = cached
        if seen:
            read = words
        elif ttl == "1h":
            written = written_1h = words
        else:
            written = words
    return {
        "input_tokens": prompt_tokens - read - written,
        "output_tokens": completion_tokens,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": written - written_1h,
            "ephemeral_1h_input_tokens": written_1h,
        },
    }


# ------------------------------------------------------------------------------ CLI


def _write_port_file(path: str, port: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, path)  # atomic: readers never see a partial file


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fake_llm_server",
        description="Fake OpenAI/Anthropic/Gemini/Azure OpenAI API server (foreground).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per completion")
    parser.add_argument("--port-file", default=None, help="write the bound port here")
    parser.add_argument("--models", default=None, help="comma-separated model ids to list")
    parser.add_argument("--served-model", default=None, help="model name to answer with")
    parser.add_argument(
        "--batch-delay", type=float, default=0.0, help="seconds a batch takes to process"
    )
    parser.add_argument(
        "--responder", default=None, help="module:function answering each request (a Responder)"
    )
    args = parser.parse_args(argv)
    responder = None
    if args.responder:
        import importlib

        module, _, name = args.responder.partition(":")
        responder = getattr(importlib.import_module(module), name)

    models = [m for m in args.models.split(",") if m] if args.models else None
    srv = FakeLLMServer(
        latency_s=args.latency,
        responder=responder,
        host=args.host,
        port=args.port,
        models=models,
        served_model=args.served_model,
    )

    srv.batches.delay_s = args.batch_delay

    def on_ready(server: FakeLLMServer) -> None:
        if args.port_file:
            _write_port_file(args.port_file, server.port)
        print(f"fake LLM server listening on {server.base_url}", flush=True)

    srv.serve_forever(on_ready)
    return 0


if __name__ == "__main__":
    sys.exit(main())
