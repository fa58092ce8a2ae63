"""Anthropic's Message Batches API.

`POST {base_url}/messages/batches` with `{"requests": [{"custom_id", "params"}]}`, `params`
a Messages request's body; `GET {base_url}/messages/batches/{id}` says where it is
(`processing_status`: `in_progress`, `canceling`, `ended`) with `request_counts`
(processing, succeeded, errored, canceled, expired); once it has ended its results are
JSONL at its `results_url`, a line per request: `{"custom_id", "result": {"type":
"succeeded", "message"} | {"type": "errored", "error"} | {"type": "canceled"} | {"type":
"expired"}}`. A request that was canceled or expired was not run: it goes again.

A batch keeps no metadata, so a run killed after submitting and before recording the
batch id finds it by listing the batches made since its claim with as many requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gradetrail_lib.providers.anthropic_messages import AnthropicMessagesAdapter, api_headers
from gradetrail_lib.providers.base import ProviderError
from gradetrail_lib.providers.batch import (
    BatchLimits,
    BatchResult,
    BatchState,
    BatchStatus,
    Connection,
    batch_response,
    checked,
    json_lines,
)

if TYPE_CHECKING:
    from gradetrail_lib.providers.base import ModelRequest

# How far the provider's clock may be behind this machine's when a batch is matched to
# the claim made just before it was created.
_CLOCK_SKEW_S = 120.0

# Anthropic's limits: 100,000 requests and 256 MB per batch.
ANTHROPIC_LIMITS = BatchLimits(max_requests=100_000, max_bytes=256 * 1024 * 1024)


@dataclass(frozen=True)
class AnthropicBatchAPI:
    adapter: AnthropicMessagesAdapter
    limits: BatchLimits = ANTHROPIC_LIMITS
    endpoint_path: str = "/v1/messages/batches"

    def line(self, request: ModelRequest) -> bytes:
        entry = {"custom_id": request.key, "params": self.adapter.body(request)}
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()

    def submit(self, conn: Connection, lines: Sequence[bytes], submission: str) -> str:
        # The lines are already JSON: joined into the body's list as they are.
        content = b'{"requests":[' + b",".join(lines) + b"]}"
        headers = {**api_headers(conn.api_key), "content-type": "application/json"}
        created = checked(
            conn.client.post(
                f"{conn.endpoint.base_url}/messages/batches", headers=headers, content=content
            ),
            "batch creation",
        ).json()
        return str(created["id"])

    def status(self, conn: Connection, batch_id: str) -> BatchStatus:
        body = checked(
            conn.client.get(
                f"{conn.endpoint.base_url}/messages/batches/{batch_id}",
                headers=api_headers(conn.api_key),
            ),
            "batch status",
        ).json()
        return _status(body)

    def results(self, conn: Connection, status: BatchStatus) -> Iterator[BatchResult]:
        body = checked(
            conn.client.get(
                f"{conn.endpoint.base_url}/messages/batches/{status.batch_id}",
                headers=api_headers(conn.api_key),
            ),
            "batch status",
        ).json()
        url = body.get("results_url")
        if not url:
            return
        with conn.client.stream("GET", url, headers=api_headers(conn.api_key)) as response:
            if not response.is_success:
                response.read()
                checked(response, "batch results")
            for entry in json_lines(response):
                yield _result(self.adapter, entry)

    def cancel(self, conn: Connection, batch_id: str) -> BatchStatus:
        body = checked(
            conn.client.post(
                f"{conn.endpoint.base_url}/messages/batches/{batch_id}/cancel",
                headers=api_headers(conn.api_key),
            ),
            "batch cancel",
        ).json()
        return _status(body)

    def find(
        self,
        conn: Connection,
        submission: str,
        since: float,
        count: int,
        taken: frozenset[str] = frozenset(),
    ) -> str | None:
        after: str | None = None
        while True:
            url = f"{conn.endpoint.base_url}/messages/batches?limit=100"
            if after:
                url += f"&after_id={after}"
            page = checked(
                conn.client.get(url, headers=api_headers(conn.api_key)), "batch list"
            ).json()
            for batch in page.get("data", []):
                created = _epoch(batch.get("created_at"))
                counts = batch.get("request_counts") or {}
                if (
                    created is not None
                    and created >= since - _CLOCK_SKEW_S
                    and sum(int(v or 0) for v in counts.values()) == count
                    and str(batch["id"]) not in taken
                ):
                    return str(batch["id"])
            if not page.get("has_more") or not page.get("last_id"):
                return None
            after = str(page["last_id"])


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _status(body: dict[str, Any]) -> BatchStatus:
    counts = {k: int(v or 0) for k, v in (body.get("request_counts") or {}).items()}
    provider_state = str(body.get("processing_status"))
    state: BatchState = "running"
    if provider_state == "ended":
        if counts.get("expired"):
            state = "expired"
        elif counts.get("canceled"):
            state = "cancelled"
        else:
            state = "ended"
    return BatchStatus(
        batch_id=str(body["id"]),
        state=state,
        provider_state=provider_state,
        total=sum(counts.values()),
        done=counts.get("succeeded", 0),
        failed=counts.get("errored", 0),
    )


def _result(adapter: AnthropicMessagesAdapter, entry: dict[str, Any]) -> BatchResult:
    key = str(entry["custom_id"])
    result = entry.get("result") or {}
    kind = result.get("type")
    if kind == "succeeded":
        message = result.get("message") or {}
        try:
            parsed = adapter.parse(message)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            error = ProviderError("fatal", f"unexpected response body: {type(exc).__name__}", 200)
            return BatchResult(key=key, outcome=error)
        return BatchResult(key=key, outcome=batch_response(parsed, message, 0.0))
    if kind == "errored":
        detail = result.get("error") or {}
        inner = detail.get("error", detail) if isinstance(detail, dict) else detail
        if isinstance(inner, dict):
            text = f"{inner.get('type', 'error')}: {inner.get('message', '')}"
        else:
            text = str(inner)
        return BatchResult(key=key, outcome=ProviderError("fatal", " ".join(text.split())[:300]))
    return BatchResult(key=key, outcome=None)  # canceled, expired: not run
