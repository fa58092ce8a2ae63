"""OpenAI's Batch API (also Azure OpenAI's, with its own paths and key header).

The requests go as a JSONL file (`{"custom_id", "method": "POST", "url", "body"}` a line)
uploaded to `{base_url}/files` (multipart, `purpose=batch`), then `POST {base_url}/batches`
with the file's id, `endpoint: /v1/chat/completions` and `completion_window: 24h`;
`GET {base_url}/batches/{id}` says where it is (`validating`, `in_progress`,
`finalizing`, `completed`, `expired`, `cancelling`, `cancelled`, `failed`) with
`request_counts` (total, completed, failed). The answers are in its output file and the
per-request errors in its error file, both read from `{base_url}/files/{id}/content`;
a request an expired or cancelled batch never ran is in the error file as
`batch_expired` / `batch_cancelled`.

The run's claim on a batch goes in the batch's metadata (`gradetrail_submission`), so a
run killed after submitting and before recording the batch id finds it by listing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradetrail_lib.providers.base import Endpoint, ProviderError
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
from gradetrail_lib.providers.openai_chat import OpenAIChatAdapter
from gradetrail_lib.providers.openai_responses import OpenAIAdapter

if TYPE_CHECKING:
    from gradetrail_lib.providers.base import ModelRequest

SUBMISSION_KEY = "gradetrail_submission"

_STATES: dict[str, BatchState] = {
    "validating": "running",
    "in_progress": "running",
    "finalizing": "running",
    "cancelling": "running",
    "completed": "ended",
    "expired": "expired",
    "cancelled": "cancelled",
    "failed": "failed",
}

# Error codes of requests the batch never ran: they go again, they are not answers.
_NOT_RUN = frozenset({"batch_expired", "batch_cancelled"})

# OpenAI's limits: 50,000 requests and a 200 MB file per batch.
OPENAI_LIMITS = BatchLimits(max_requests=50_000, max_bytes=200 * 1024 * 1024)


@dataclass(frozen=True)
class OpenAIBatchAPI:
    adapter: OpenAIChatAdapter | OpenAIAdapter
    limits: BatchLimits = OPENAI_LIMITS
    # The `endpoint` of the batch and the `url` of its lines (provider `openai`: its
    # adapter's, `/v1/responses` for a model with `api: responses`).
    endpoint_path: str = "/v1/chat/completions"
    # Azure: `/openai` before every path and `?api-version=` after it.
    prefix: str = ""
    azure: bool = False

    def _url(self, endpoint: Endpoint, path: str) -> str:
        url = f"{endpoint.base_url}{self.prefix}{path}"
        if self.azure:
            url += f"?api-version={endpoint.setting('api_version')}"
        return url

    def _headers(self, api_key: str | None) -> dict[str, str]:
        return self.adapter.headers(api_key)

    def _path(self, endpoint: Endpoint) -> str:
        if isinstance(self.adapter, OpenAIAdapter):
            return self.adapter.path(endpoint)
        return self.endpoint_path

    def line(self, request: ModelRequest) -> bytes:
        entry = {
            "custom_id": request.key,
            "method": "POST",
            "url": self._path(request.endpoint),
            "body": self.adapter.body(request),
        }
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()

    def submit(self, conn: Connection, lines: Sequence[bytes], submission: str) -> str:
        content = b"\n".join(lines) + b"\n"
        # A batch holds one model's requests, so its lines share one endpoint.
        endpoint_path = json.loads(lines[0])["url"] if lines else self.endpoint_path
        uploaded = checked(
            conn.client.post(
                self._url(conn.endpoint, "/files"),
                headers=self._headers(conn.api_key),
                data={"purpose": "batch"},
                files={"file": (f"{submission}.jsonl", content, "application/jsonl")},
            ),
            "batch file upload",
        ).json()
        created = checked(
            conn.client.post(
                self._url(conn.endpoint, "/batches"),
                headers=self._headers(conn.api_key),
                json={
                    "input_file_id": uploaded["id"],
                    "endpoint": endpoint_path,
                    "completion_window": "24h",
                    "metadata": {SUBMISSION_KEY: submission},
                },
            ),
            "batch creation",
        ).json()
        return str(created["id"])

    def status(self, conn: Connection, batch_id: str) -> BatchStatus:
        body = checked(
            conn.client.get(
                self._url(conn.endpoint, f"/batches/{batch_id}"),
                headers=self._headers(conn.api_key),
            ),
            "batch status",
        ).json()
        return _status(body)

    def results(self, conn: Connection, status: BatchStatus) -> Iterator[BatchResult]:
        body = checked(
            conn.client.get(
                self._url(conn.endpoint, f"/batches/{status.batch_id}"),
                headers=self._headers(conn.api_key),
            ),
            "batch status",
        ).json()
        for file_field in ("output_file_id", "error_file_id"):
            file_id = body.get(file_field)
            if not file_id:
                continue
            url = self._url(conn.endpoint, f"/files/{file_id}/content")
            with conn.client.stream("GET", url, headers=self._headers(conn.api_key)) as response:
                if not response.is_success:
                    response.read()
                    checked(response, "batch results")
                for entry in json_lines(response):
                    yield _result(self.adapter, entry)

    def cancel(self, conn: Connection, batch_id: str) -> BatchStatus:
        body = checked(
            conn.client.post(
                self._url(conn.endpoint, f"/batches/{batch_id}/cancel"),
                headers=self._headers(conn.api_key),
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
            query = "?limit=100" + (f"&after={after}" if after else "")
            url = self._url(conn.endpoint, "/batches")
            url += ("&" + query[1:]) if "?" in url else query
            page = checked(
                conn.client.get(url, headers=self._headers(conn.api_key)), "batch list"
            ).json()
            for batch in page.get("data", []):
                if (batch.get("metadata") or {}).get(SUBMISSION_KEY) == submission:
                    return str(batch["id"])
                # Newest first: a batch made before the claim cannot be its own.
                if batch.get("created_at", since) < since - 60:
                    return None
            if not page.get("has_more") or not page.get("data"):
                return None
            after = str(page["data"][-1]["id"])


def _status(body: dict[str, Any]) -> BatchStatus:
    counts = body.get("request_counts") or {}
    errors = (body.get("errors") or {}).get("data") or []
    message = "; ".join(str(e.get("message", e)) for e in errors) or None
    return BatchStatus(
        batch_id=str(body["id"]),
        state=_STATES.get(str(body.get("status")), "running"),
        provider_state=str(body.get("status")),
        total=int(counts.get("total") or 0),
        done=int(counts.get("completed") or 0),
        failed=int(counts.get("failed") or 0),
        message=message,
    )


def _result(adapter: OpenAIChatAdapter | OpenAIAdapter, entry: dict[str, Any]) -> BatchResult:
    key = str(entry["custom_id"])
    response = entry.get("response") or {}
    error = entry.get("error")
    if error:
        if error.get("code") in _NOT_RUN:
            return BatchResult(key=key, outcome=None)
        return BatchResult(key=key, outcome=ProviderError("fatal", _message(error)))
    status = int(response.get("status_code") or 0)
    body = response.get("body") or {}
    if status != 200:
        detail = body.get("error", body) if isinstance(body, dict) else body
        return BatchResult(
            key=key, outcome=ProviderError("fatal", f"HTTP {status}: {_message(detail)}", status)
        )
    try:
        parsed = adapter.parse(body)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return BatchResult(
            key=key,
            outcome=ProviderError("fatal", f"unexpected response body: {type(exc).__name__}", 200),
        )
    return BatchResult(key=key, outcome=batch_response(parsed, body, 0.0))


def _message(detail: Any) -> str:
    if isinstance(detail, dict):
        detail = detail.get("message", detail)
    return " ".join(str(detail).split())[:300]
