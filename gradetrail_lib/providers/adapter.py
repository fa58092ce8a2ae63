"""The HTTP side of a provider: the adapter interface and the request builder they share."""

import json
from functools import lru_cache
from typing import Any, Protocol

import httpx

from gradetrail_lib.providers.base import ParsedBody
from gradetrail_lib.request import ModelRequest


@lru_cache(maxsize=256)
def _parsed_url(url: str) -> httpx.URL:
    return httpx.URL(url)


def json_post(url: str, headers: dict[str, str], body: dict[str, Any]) -> httpx.Request:
    """A POST with a JSON body, built for the hot path: parsing the same endpoint URL for
    every request and httpx's own `json=` encoding cost 35 of the 48 us a request took to
    build here. The body is encoded as httpx would (compact, UTF-8, no NaN)."""
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return httpx.Request(
        "POST",
        _parsed_url(url),
        headers={**headers, "content-type": "application/json"},
        content=content.encode("utf-8"),
    )


class Adapter(Protocol):
    """Translates between gradetrail requests and one provider's HTTP API."""

    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request: ...

    def parse(self, body: Any) -> ParsedBody: ...

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        """Seconds until the provider's rate-limit window resets, from its own headers."""
        ...
