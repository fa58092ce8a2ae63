"""The HTTP side of a provider: the adapter interface and the request builder they share.

No httpx at import: provider modules (loaded with every spec) import their adapters, and
a fully cached run must not pay for the HTTP stack. It is loaded by the first request.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from gradetrail_lib._version import __version__

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx

    from gradetrail_lib.providers.base import Message, ModelRequest, ParsedBody

USER_AGENT = f"gradetrail/{__version__}"


@lru_cache(maxsize=256)
def _parsed_url(url: str) -> httpx.URL:
    import httpx

    return httpx.URL(url)


def json_post(url: str, headers: dict[str, str], body: dict[str, Any]) -> httpx.Request:
    """A POST with a JSON body, built for the hot path. The body is encoded as httpx's
    `json=` would (compact, UTF-8, no NaN), and the request carries the headers httpx
    would add (Host, Content-Length) and gradetrail's User-Agent, with the body as a ready
    stream: httpx's own `content=` path (encoding, then preparing headers) was most of the
    cost of building a request (docs/performance.md). Like any streamed request, it is read
    (`aread`) to be sent."""
    # Imported on the first request, not with the module: a run the cache answers whole
    # never loads httpx (after the first request this is a dictionary lookup).
    import httpx

    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    data = content.encode("utf-8")
    parsed = _parsed_url(url)
    return httpx.Request(
        "POST",
        parsed,
        headers=[
            ("Host", parsed.netloc.decode("ascii")),
            ("Content-Length", str(len(data))),
            ("User-Agent", USER_AGENT),
            *headers.items(),
            ("content-type", "application/json"),
        ],
        stream=httpx.ByteStream(data),
    )


class Adapter(Protocol):
    """Translates between gradetrail requests and one provider's HTTP API.

    An adapter may also have `error_info(body) -> (message, retry_after_s)`, reading a
    failed response's JSON body its provider's way (`caller` reads `error.message`, or
    the body, otherwise)."""

    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request: ...

    def parse(self, body: Any) -> ParsedBody: ...

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        """Seconds until the provider's rate-limit window resets, from its own headers."""
        ...


def resolved_messages(request: ModelRequest) -> list[Message]:
    """The request's messages with their media parts' bytes (or URLs) filled in for its
    provider (`media.sent_messages`): the messages themselves for a text request."""
    if not request.media:
        return request.messages
    from gradetrail_lib.providers import registry
    from gradetrail_lib.providers.media import sent_messages

    limits = registry.get(request.endpoint.provider).media
    return sent_messages(request.messages, request.media, limits)


def split_turns(
    messages: list[Message],
    *,
    tool_result: Callable[[Message], dict[str, Any]],
    results_turn: Callable[[list[dict[str, Any]]], dict[str, Any]],
    turn: Callable[[Message], dict[str, Any]],
) -> tuple[list[str], list[dict[str, Any]]]:
    """The system texts, and the other messages as an API's turns: each by `turn`, except
    that a run of tool results (each by `tool_result`) is one user turn (`results_turn`),
    since APIs that take tool results as user content want a call's results together."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the results of the run of tools going on
    for message in messages:
        role = message["role"]
        if role == "tool":
            if results is None:
                results = []
                turns.append(results_turn(results))
            results.append(tool_result(message))
            continue
        results = None
        if role == "system":
            system.append(message["content"])
        else:
            turns.append(turn(message))
    return system, turns
