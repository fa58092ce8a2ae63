"""Provider batch APIs: many requests sent as one job, answered within a day at a
discount (OpenAI's and Azure OpenAI's Batch API, Anthropic's Message Batches).

A provider that has one names it on its registry entry (`Provider.batch`); everything
here is the protocol the batch runner (`backends.batch`) speaks, with no state: build
the job's lines from requests, submit them (claimed under a submission id first, so a
run killed between the upload and its record can find the batch again), read the job's
status with the provider's counts, read its results line by line, cancel it.

The `custom_id` of each request is its request key: results come back keyed by it.

No httpx at import (the registry loads every provider with each spec): the functions
take a client the caller built.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gradetrail_lib.providers.base import Endpoint, ModelResponse, ParsedBody, ProviderError

if TYPE_CHECKING:
    import httpx

    from gradetrail_lib.providers.base import ModelRequest

# Where a batch is, in the runner's terms: still to answer, or one of the ways it ended.
# `ended` answered every request (each with an answer or an error); `expired` and
# `cancelled` answered some (the rest go again); `failed` answered none (the provider
# refused the job, e.g. a malformed file).
BatchState = Literal["running", "ended", "expired", "cancelled", "failed"]
FINAL_STATES: frozenset[str] = frozenset({"ended", "expired", "cancelled", "failed"})


@dataclass(frozen=True, kw_only=True)
class BatchLimits:
    """What one batch may carry: a larger set of requests is split into several."""

    max_requests: int
    max_bytes: int


@dataclass(frozen=True, kw_only=True)
class BatchStatus:
    batch_id: str
    state: BatchState
    # The provider's own word for it (OpenAI's `finalizing`, Anthropic's `canceling`).
    provider_state: str
    total: int
    done: int
    failed: int
    # Why a failed batch failed (the provider's message).
    message: str | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


@dataclass(frozen=True, kw_only=True)
class BatchResult:
    """One request's line of a batch's results: its answer, its error, or None when the
    batch ended (expired, cancelled) before the request was run."""

    key: str
    outcome: ModelResponse | ProviderError | None


@dataclass(frozen=True)
class Connection:
    """Where a batch's calls go: a client, the model's endpoint and its key (kept out of
    the repr, so it is never printed)."""

    client: httpx.Client
    endpoint: Endpoint
    api_key: str | None = field(default=None, repr=False)


class BatchAPI(Protocol):
    """One provider's batch API. `endpoint` is where the requests' model is (its base URL,
    key variable and settings)."""

    @property
    def limits(self) -> BatchLimits: ...

    @property
    def endpoint_path(self) -> str:
        """What the batches table records as the batch's endpoint (the API's path)."""
        ...

    def line(self, request: ModelRequest) -> bytes:
        """The request as one line of the batch (UTF-8 JSON, no newline): its size counts
        against the byte limit."""
        ...

    def submit(self, conn: Connection, lines: Sequence[bytes], submission: str) -> str:
        """Sends the lines as one batch; returns its id. `submission` is the run's claim
        on it, recorded on the batch where the API keeps metadata (for `find`)."""
        ...

    def status(self, conn: Connection, batch_id: str) -> BatchStatus: ...

    def results(self, conn: Connection, status: BatchStatus) -> Iterator[BatchResult]:
        """The lines of a finished batch's results, read as they stream in."""
        ...

    def cancel(self, conn: Connection, batch_id: str) -> BatchStatus: ...

    def find(
        self,
        conn: Connection,
        submission: str,
        since: float,
        count: int,
        taken: frozenset[str] = frozenset(),
    ) -> str | None:
        """The id of a batch this claim submitted before its process died (before the id
        was recorded), or None when it never reached the provider. `since` is the claim's
        time (epoch seconds), `count` its number of requests, `taken` the batch ids
        already recorded (never another claim's)."""
        ...


def batch_response(parsed: ParsedBody, body: dict[str, Any], latency_s: float) -> ModelResponse:
    """A batch's answer as a response, marked `batch` (priced at the batch rate). Every
    field the adapter read is carried over by name (`ParsedBody`'s fields are
    `ModelResponse`'s), so a usage field an adapter learns needs nothing here."""
    read = {f.name: getattr(parsed, f.name) for f in fields(parsed)}
    return ModelResponse(**read, latency_s=latency_s, attempts=1, raw=body, batch=True)


def split(lines: Sequence[tuple[str, bytes]], limits: BatchLimits) -> list[list[tuple[str, bytes]]]:
    """Requests (key, line) in groups each within the limits (a newline per line counts)."""
    groups: list[list[tuple[str, bytes]]] = []
    current: list[tuple[str, bytes]] = []
    size = 0
    for key, line in lines:
        grows = len(line) + 1
        if grows > limits.max_bytes:
            raise ProviderError(
                "fatal", f"request {key[:12]} is {grows} bytes, over the batch limit"
            )
        if current and (len(current) >= limits.max_requests or size + grows > limits.max_bytes):
            groups.append(current)
            current, size = [], 0
        current.append((key, line))
        size += grows
    if current:
        groups.append(current)
    return groups


def http_error(response: httpx.Response, what: str) -> ProviderError:
    """A batch call's failure: transient for 429/5xx (the runner tries again later)."""
    status = response.status_code
    try:
        body = response.json()
        detail = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(detail, dict):
            detail = detail.get("message", detail)
        text = " ".join(str(detail).split())[:300]
    except ValueError:
        text = response.text[:300]
    kind: Literal["fatal", "transient"] = (
        "transient" if status >= 500 or status in (408, 409, 429) else "fatal"
    )
    return ProviderError(kind, f"{what}: HTTP {status}: {text}", status)


def checked(response: httpx.Response, what: str) -> httpx.Response:
    if not response.is_success:
        raise http_error(response, what)
    return response


def json_lines(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The objects of a streamed JSONL body, one at a time (a batch's results can be
    larger than what a run should hold)."""
    for text in response.iter_lines():
        if text.strip():
            yield json.loads(text)


def now() -> float:
    return time.time()
