"""The HTTP side of a provider: the adapter interface and the request builder they share."""

import json
from functools import lru_cache
from typing import Any, Protocol

import httpx

from gradetrail_lib._version import __version__
from gradetrail_lib.providers.base import ParsedBody
from gradetrail_lib.providers.request import ModelRequest

USER_AGENT = f"gradetrail/{__version__}"


@lru_cache(maxsize=256)
def _parsed_url(url: str) -> httpx.URL:
    return httpx.URL(url)


def json_post(url: str, headers: dict[str, str], body: dict[str, Any]) -> httpx.Request:
    """A POST with a JSON body, built for the hot path. The body is encoded as httpx's
    `json=` would (compact, UTF-8, no NaN), and the request carries the headers httpx
    would add (Host, Content-Length) and gradetrail's User-Agent, with the body as a ready
    stream: httpx's own `content=` path (encoding, then preparing headers) was most of the
    cost of building a request (docs/performance.md). Like any streamed request, it is read
    (`aread`) to be sent."""
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
    """Translates between gradetrail requests and one provider's HTTP API."""

    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request: ...

    def parse(self, body: Any) -> ParsedBody: ...

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        """Seconds until the provider's rate-limit window resets, from its own headers."""
        ...
