"""Sending a run's cache misses through provider batch APIs (`run --batch`).

`BatchSender` is a backend (`backends.base.Backend`: requests in, answers out) wrapped
around the run's own: the requests of a model whose provider has a batch API
(`Provider.batch`, looked up once per provider) go as batch jobs, the rest to the wrapped
backend, and which way a model's requests go is said once per model. Every answer
reaches the run as the ordinary backend's would (`on_result`, which stores it in the
cache as it is read), so what comes after (records, judges, totals) does not know how a
request was sent; nor does the run's identity.

Never paid twice: before a request is uploaded its key is claimed in the cache's batch
tables (`cache.batches`), and a key a recorded batch already carries is not sent again:
that batch is polled and read instead, whoever submitted it (this run before it was
killed, or another process on the same cache). A request a batch answered with an
error is its sample's provider error (not cached, so a later run sends it again); one
an expired or cancelled batch never ran is sent again, alone, in a new batch.

Waiting polls every batch in flight with backoff (`poll_s` growing to `poll_max_s`),
printing a progress line from the provider's counts; past `timeout_s` the run stops
(`BatchesPending`, exit 1) and the batches keep running; so does a Ctrl-C. Running the
same command again resumes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from gradetrail_lib.backends.base import Backend, ResultCallback
from gradetrail_lib.cache.batches import (
    CLAIMED,
    ERROR,
    NOT_RUN,
    BatchRecord,
    BatchStore,
    NewBatch,
)
from gradetrail_lib.errors import GradetrailError, UsageError
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ProviderError
from gradetrail_lib.providers.batch import BatchAPI, BatchResult, BatchStatus, Connection, split
from gradetrail_lib.settings import DEFAULTS, Settings

if TYPE_CHECKING:
    import httpx

BatchMode = Literal["off", "all", "targets"]
BATCH_MODES: tuple[BatchMode, ...] = ("off", "all", "targets")

# Tries of a submission, and of reading a batch's results, that fail transiently (429,
# 5xx, a dropped connection).
SUBMIT_TRIES = 4
READ_TRIES = 4
# The wait before the second try, doubled before each next one.
RETRY_WAIT_S = 1.0


def parse_batch_mode(text: str | bool | None) -> BatchMode:
    """`--batch`'s value, `GRADETRAIL_BATCH` or the resource's setting: off (also 0, no,
    false, nothing), all (also 1, yes, true) or targets."""
    if text is None or text is False:
        return "off"
    if text is True:
        return "all"
    word = text.strip().lower()
    if word in ("", "0", "off", "no", "false"):
        return "off"
    if word in ("1", "on", "yes", "true", "all"):
        return "all"
    if word == "targets":
        return "targets"
    raise UsageError(f"batch must be off, all or targets, not {text!r}")


class BatchesPending(GradetrailError):
    """The batches did not end within `--batch-timeout`: they keep running."""


def _silent(_message: str) -> None:
    pass


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    """How a run waits for its batches (`Settings.batch_*`: GRADETRAIL_BATCH_TIMEOUT_S,
    GRADETRAIL_BATCH_POLL_S, GRADETRAIL_BATCH_POLL_MAX_S)."""

    timeout_s: float = DEFAULTS.batch_timeout_s
    poll_s: float = DEFAULTS.batch_poll_s
    poll_max_s: float = DEFAULTS.batch_poll_max_s
    # Where the runner's lines go (the model's way of sending, batch ids, progress).
    notify: Callable[[str], None] = _silent
    # The HTTP client's transport (tests); None: the network.
    transport: httpx.BaseTransport | None = None
    # What to say on giving up or an interrupt: how to resume.
    resume_hint: str = "run the same command again to resume them"

    @classmethod
    def from_settings(cls, settings: Settings, **more: Any) -> BatchOptions:
        """The waits `settings` set (`GRADETRAIL_BATCH_TIMEOUT_S`, `..._POLL_S`,
        `..._POLL_MAX_S`), and `more` of the other fields."""
        return cls(
            timeout_s=settings.batch_timeout_s,
            poll_s=settings.batch_poll_s,
            poll_max_s=settings.batch_poll_max_s,
            **more,
        )


@dataclass
class _Flight:
    """A batch this run waits for: its record, API and connection, the keys it wants."""

    record: BatchRecord
    api: BatchAPI
    conn: Connection
    wanted: set[str]
    status: BatchStatus | None = None


@dataclass
class _Shared:
    """What a sender and its `limited` copies share: the models whose way was said, the
    submissions made here, the batches not read yet (submission -> batch id) and each
    provider's batch API."""

    said: set[tuple[str, str]] = field(default_factory=set)
    own: set[str] = field(default_factory=set)
    open: dict[str, str] = field(default_factory=dict)
    apis: dict[str, BatchAPI | None] = field(default_factory=dict)


class BatchSender:
    """A backend sending batch-capable requests as batches, the rest through `inner`."""

    def __init__(
        self,
        inner: Backend,
        store: BatchStore,
        options: BatchOptions,
        shared: _Shared | None = None,
    ) -> None:
        self.inner = inner
        self.store = store
        self.options = options
        self.name = inner.name
        self.concurrency = inner.concurrency
        self._shared = shared or _Shared()
        # The submissions this sender made (not adopted from another run: not announced).
        self._own = self._shared.own
        # Batches submitted or adopted whose results are not read yet: submission -> id.
        self._open = self._shared.open
        self._stack = ExitStack()
        self._connections: dict[Endpoint, Connection] = {}
        # Each provider's batch API (None: it has none), looked up once by `_route`.
        self._apis = self._shared.apis

    # -- the Backend protocol

    def prepare(self) -> None:
        self.inner.prepare()

    def session(self) -> AbstractContextManager[None]:
        return self.inner.session()

    def limited(self, max_concurrency: int) -> BatchSender:
        return BatchSender(
            self.inner.limited(max_concurrency), self.store, self.options, self._shared
        )

    def describe(self) -> dict[str, object]:
        # How requests were sent is not what the run is: the identity never reads this.
        return {**self.inner.describe(), "batch": True}

    def stepwise(self, model: tuple[str, str], reason: str) -> Backend:
        """The wrapped backend, for requests that cannot go by batch, saying why once."""
        self._say_once(model, f"model {model[0]}/{model[1]}: {reason}")
        return self.inner

    def expect(self, parts: Iterable[Sequence[ModelRequest]]) -> None:
        """Claims and submits the batch-capable requests of every part now, without
        waiting: a run whose samples come in several parts submits every part's misses
        first, so that they all run at the provider at once and `run` finds (adopts)
        them. A submission refused here is abandoned and tried again, its error
        reported, by `run`."""
        for requests in parts:
            by_batch, _rest = self._route(requests)
            if not by_batch:
                continue
            with ExitStack() as stack:
                self._stack, self._connections = stack, {}
                unanswered = {r.key for r in by_batch}
                self._submit(by_batch, lambda _request, _outcome: None, unanswered)

    def run(self, requests: Sequence[ModelRequest], on_result: ResultCallback) -> None:
        by_batch, rest = self._route(requests)
        if not by_batch:
            self.inner.run(rest, on_result)
            return
        unanswered = {r.key for r in by_batch}
        with ExitStack() as stack:
            self._stack, self._connections = stack, {}
            flights = self._submit(by_batch, on_result, unanswered)
            if rest:  # meanwhile, while the batches run
                self.inner.run(rest, on_result)
            self._wait_and_read(by_batch, flights, on_result, unanswered)

    def _route(
        self, requests: Sequence[ModelRequest]
    ) -> tuple[list[ModelRequest], list[ModelRequest]]:
        """(by batch, the ordinary way), saying once per model which way it goes."""
        by_batch: list[ModelRequest] = []
        rest: list[ModelRequest] = []
        for request in requests:
            endpoint = request.endpoint
            model = (endpoint.provider, endpoint.model)
            if endpoint.provider not in self._apis:
                self._apis[endpoint.provider] = registry.batch_api(endpoint.provider)
            if self._apis[endpoint.provider] is not None:
                by_batch.append(request)
                self._say_once(model, f"model {model[0]}/{model[1]}: sent by batch")
            else:
                rest.append(request)
                self._say_once(
                    model,
                    f"model {model[0]}/{model[1]}: provider {endpoint.provider} has no batch "
                    "API; sent the ordinary way",
                )
        return by_batch, rest

    def interrupted(self) -> None:
        """The run stops (Ctrl-C): says which batches keep running and how to resume."""
        if self._open:
            self.options.notify(
                f"interrupted: batches {', '.join(self._open.values())} keep running; "
                f"{self.options.resume_hint}"
            )

    # -- sending

    def _say_once(self, model: tuple[str, str], line: str) -> None:
        if model not in self._shared.said:
            self._shared.said.add(model)
            self.options.notify(line)

    def _api_of(self, endpoint: Endpoint) -> BatchAPI:
        """The batch API of a request `_route` sent by batch."""
        api = self._apis[endpoint.provider]
        assert api is not None
        return api

    def _conn_of(self, endpoint: Endpoint) -> Connection:
        if endpoint not in self._connections:
            self._connections[endpoint] = open_connection(
                self._stack, endpoint, self.options.transport
            )
        return self._connections[endpoint]

    def _submit(
        self, requests: list[ModelRequest], on_result: ResultCallback, unanswered: set[str]
    ) -> list[_Flight]:
        """Claims the requests no recorded batch carries and submits them; returns every
        batch to wait for (adopted ones included). A submission the provider refuses is
        its requests' error."""
        from gradetrail_lib.providers.caller import redact

        by_key = {r.key: r for r in requests}
        lines: dict[str, bytes] = {}

        def plan(free: list[str]) -> list[NewBatch]:
            groups: dict[Endpoint, list[tuple[str, bytes]]] = {}
            for key in free:
                request = by_key[key]
                lines[key] = self._api_of(request.endpoint).line(request)
                groups.setdefault(request.endpoint, []).append((key, lines[key]))
            out = []
            for endpoint, items in groups.items():
                api = self._api_of(endpoint)
                for part in split(items, api.limits):
                    out.append(_new_batch(endpoint, api, [k for k, _ in part]))
            return out

        for endpoint in {r.endpoint for r in requests}:
            self._conn_of(endpoint)  # a missing key stops the run before anything is claimed
        claim = self.store.claim(list(by_key), plan)
        flights = [self._adopt(record, by_key) for record in claim.adopted]
        for record, keys in claim.claimed:
            endpoint = by_key[keys[0]].endpoint
            api = self._api_of(endpoint)
            conn = self._conn_of(endpoint)
            try:
                batch_id = self._submit_one(api, conn, record, [lines[k] for k in keys])
            except ProviderError as exc:
                self.store.abandon(record.submission)
                message = redact(f"batch not submitted: {exc.message}", conn.api_key)
                error = ProviderError("fatal", message, exc.status)
                for key in keys:
                    unanswered.discard(key)
                    on_result(by_key[key], error)
                continue
            self.store.submitted(record.submission, batch_id)
            self._own.add(record.submission)
            self._open[record.submission] = batch_id
            self.options.notify(
                f"batch {batch_id}: submitted {len(keys)} requests of "
                f"{endpoint.provider}/{endpoint.model}"
            )
            flights.append(
                _Flight(
                    record=replace(record, batch_id=batch_id, state="running"),
                    api=api,
                    conn=conn,
                    wanted=set(keys),
                )
            )
        return flights

    def _submit_one(
        self, api: BatchAPI, conn: Connection, record: BatchRecord, lines: list[bytes]
    ) -> str:
        """Submits a claim's lines, trying again after a transient failure, but never
        before asking the provider whether the failed try reached it after all."""
        import httpx

        wait = RETRY_WAIT_S
        for attempt in range(1, SUBMIT_TRIES + 1):
            try:
                return api.submit(conn, lines, record.submission)
            except (ProviderError, httpx.TransportError) as exc:
                transient = not isinstance(exc, ProviderError) or exc.kind == "transient"
                if not transient or attempt == SUBMIT_TRIES:
                    if isinstance(exc, ProviderError):
                        raise
                    raise ProviderError("fatal", f"connection error: {type(exc).__name__}") from exc
            time.sleep(wait)
            wait *= 2
            try:
                found = api.find(
                    conn, record.submission, record.claimed_at, record.total, self.store.batch_ids()
                )
            except (ProviderError, httpx.TransportError):
                found = None
            if found is not None:
                return found
        raise AssertionError("unreachable")

    def _adopt(self, record: BatchRecord, by_key: dict[str, ModelRequest]) -> _Flight:
        keys = set(self.store.keys(record.submission)) & set(by_key)
        endpoint = by_key[next(iter(keys))].endpoint
        flight = _Flight(
            record=record, api=self._api_of(endpoint), conn=self._conn_of(endpoint), wanted=keys
        )
        self._open[record.submission] = record.batch_id or record.submission
        if record.submission not in self._own:
            where = record.batch_id or f"claim {record.submission}"
            self.options.notify(f"batch {where}: already submitted ({len(keys)} of these requests)")
        return flight

    # -- waiting and reading

    def _wait_and_read(
        self,
        requests: list[ModelRequest],
        flights: list[_Flight],
        on_result: ResultCallback,
        unanswered: set[str],
    ) -> None:
        by_key = {r.key: r for r in requests}
        deadline = time.monotonic() + self.options.timeout_s
        while flights:
            self._wait(flights, deadline)
            again: list[ModelRequest] = []
            for flight in flights:
                not_run = self._read(flight, by_key, unanswered, on_result)
                again += [by_key[k] for k in not_run]
            # An expired or cancelled batch's unrun requests, and the keys of a claim
            # that never reached the provider: claimed and sent again, alone.
            again_keys = {r.key for r in again}
            leftover = [by_key[k] for k in unanswered if k not in again_keys]
            flights = self._submit(again + leftover, on_result, unanswered) if unanswered else []

    def _wait(self, flights: list[_Flight], deadline: float) -> None:
        """Polls until every batch has ended: the first pause `poll_s`, each 1.5 times
        the last, at most `poll_max_s`."""
        pause = self.options.poll_s
        last = ""
        while True:
            for flight in flights:
                if flight.status is not None and flight.status.final:
                    continue
                self._poll(flight)
            shown = [f for f in flights if f.status is not None]
            line = _progress(shown) if shown else ""
            if line and line != last:  # a day's polls print what changed, not each poll
                self.options.notify(line)
                last = line
            if all(f.status is not None and f.status.final for f in flights):
                return
            if time.monotonic() + pause > deadline:
                raise BatchesPending(
                    f"batches still running after the batch timeout: {_ids(flights)}; "
                    f"they keep running, {self.options.resume_hint}"
                )
            time.sleep(pause)
            pause = min(pause * 1.5, self.options.poll_max_s)

    def _poll(self, flight: _Flight) -> None:
        """One look at a batch. A claim without a batch id is its owner's to record; once
        its owner is gone, the provider is asked whether it took the batch."""
        import httpx

        from gradetrail_lib.providers.caller import redact

        record = flight.record
        if record.batch_id is None:
            fresh = self.store.get(record.submission)
            if fresh is not None and fresh.batch_id is not None:
                flight.record = record = fresh
            elif fresh is not None and fresh.state == CLAIMED and not fresh.owner_gone:
                return  # its owner is uploading it
            else:
                found = flight.api.find(
                    flight.conn,
                    record.submission,
                    record.claimed_at,
                    record.total,
                    self.store.batch_ids(),
                )
                if found is None:
                    self.store.abandon(record.submission)
                    flight.status = _never_submitted(record)
                    return
                self.store.submitted(record.submission, found)
                self._open[record.submission] = found
                self.options.notify(f"batch {found}: found (its claim's process had died)")
                flight.record = record = replace(record, batch_id=found)
        assert record.batch_id is not None
        try:
            status = flight.api.status(flight.conn, record.batch_id)
        except (ProviderError, httpx.TransportError) as exc:
            if isinstance(exc, ProviderError) and exc.kind == "fatal":
                message = redact(exc.message, flight.conn.api_key)
                raise GradetrailError(f"batch {record.batch_id}: {message}") from exc
            return  # asked again at the next poll
        flight.status = status
        self.store.update(
            record.submission,
            state=status.state,
            total=status.total,
            done=status.done,
            failed=status.failed,
        )

    def _read(
        self,
        flight: _Flight,
        by_key: dict[str, ModelRequest],
        unanswered: set[str],
        on_result: ResultCallback,
    ) -> list[str]:
        """A finished batch's results to the run: answers and errors as they are read (a
        read that fails transiently is tried again). Returns the wanted keys it did not
        run (expired, cancelled)."""
        import httpx

        from gradetrail_lib.providers.caller import redact

        status = flight.status
        assert status is not None
        if status.provider_state == "never_submitted":
            self._open.pop(flight.record.submission, None)
            return []
        outcomes: dict[str, str] = {}
        seen: set[str] = set()
        if status.state == "failed":
            error = ProviderError("fatal", f"batch {status.batch_id} failed: {status.message}")
            for key in flight.wanted & unanswered:
                on_result(by_key[key], error)
                unanswered.discard(key)
                outcomes[key] = ERROR
            self.store.read(flight.record.submission, outcomes)
            self._open.pop(flight.record.submission, None)
            return []
        wait = RETRY_WAIT_S
        for attempt in range(1, READ_TRIES + 1):
            try:
                for result in _results(flight):
                    key = result.key
                    seen.add(key)
                    if key not in flight.wanted or key not in unanswered:
                        continue  # another run's, or delivered by an earlier try
                    outcome = result.outcome
                    if outcome is None:
                        outcomes[key] = NOT_RUN
                        continue
                    unanswered.discard(key)
                    if isinstance(outcome, ProviderError):
                        outcomes[key] = ERROR
                    on_result(by_key[key], outcome)
                break
            except (ProviderError, httpx.TransportError) as exc:
                transient = not isinstance(exc, ProviderError) or exc.kind == "transient"
                if not transient or attempt == READ_TRIES:
                    detail = exc.message if isinstance(exc, ProviderError) else type(exc).__name__
                    raise GradetrailError(
                        f"batch {status.batch_id}: its results could not be read "
                        f"({redact(detail, flight.conn.api_key)}); it is recorded, "
                        f"{self.options.resume_hint}"
                    ) from exc
                time.sleep(wait)  # the answers read so far are delivered; the rest next try
                wait *= 2
        # A key with no line at all was not run either.
        for key in flight.wanted & unanswered:
            if key not in seen:
                outcomes[key] = NOT_RUN
        self.store.read(flight.record.submission, outcomes)
        self._open.pop(flight.record.submission, None)
        return [k for k, v in outcomes.items() if v == NOT_RUN]


def open_connection(
    stack: ExitStack, endpoint: Endpoint, transport: httpx.BaseTransport | None
) -> Connection:
    """An HTTP client to `endpoint`'s batch API with its key, closed with `stack`."""
    import httpx

    from gradetrail_lib.backends.transport import shared_ssl_context
    from gradetrail_lib.providers.caller import api_key_for

    probe = ModelRequest(key="", endpoint=endpoint, messages=[], params={})
    try:
        api_key = api_key_for(probe)
    except ProviderError as exc:  # no key: nothing can be sent or polled
        raise GradetrailError(f"{endpoint.provider}/{endpoint.model}: {exc.message}") from exc
    # The process's one CA bundle load (`shared_ssl_context`): a client's own costs 50-100 ms,
    # paid per endpoint by every batch run and its polls, even over plain http.
    client = stack.enter_context(
        httpx.Client(
            transport=transport,
            verify=shared_ssl_context(),
            timeout=httpx.Timeout(300.0),
        )
    )
    return Connection(client=client, endpoint=endpoint, api_key=api_key)


def _results(flight: _Flight) -> Iterator[BatchResult]:
    assert flight.status is not None
    yield from flight.api.results(flight.conn, flight.status)


def _never_submitted(record: BatchRecord) -> BatchStatus:
    return BatchStatus(
        batch_id=record.submission,
        state="failed",
        provider_state="never_submitted",
        total=record.total,
        done=0,
        failed=0,
    )


def _new_batch(endpoint: Endpoint, api: BatchAPI, keys: list[str]) -> NewBatch:
    return NewBatch(
        provider=endpoint.provider,
        endpoint=api.endpoint_path,
        base_url=endpoint.base_url,
        model=endpoint.model,
        api_key_env=endpoint.api_key_env,
        settings=endpoint.settings,
        keys=keys,
    )


def _ids(flights: list[_Flight]) -> str:
    return ", ".join(f.record.batch_id or f.record.submission for f in flights)


def _progress(flights: list[_Flight]) -> str:
    parts = []
    for flight in flights:
        status = flight.status
        assert status is not None
        parts.append(
            f"{status.batch_id} {status.provider_state}: {status.done}/{status.total} done, "
            f"{status.failed} failed"
        )
    return "batches: " + "; ".join(parts)


def endpoint_of(record: BatchRecord) -> Endpoint:
    """The endpoint a recorded batch's requests went to (to poll or cancel it later)."""
    return Endpoint(
        provider=record.provider,
        model=record.model,
        base_url=record.base_url,
        api_key_env=record.api_key_env,
        settings=record.settings,
    )


def cancel_batch(
    store: BatchStore, batch_id: str, transport: httpx.BaseTransport | None = None
) -> BatchStatus:
    """Cancels a recorded batch (by its provider id or submission id)."""
    record = store.find(batch_id)
    if record is None:
        raise UsageError(f"no recorded batch {batch_id!r} in {store.where}")
    if record.batch_id is None:
        raise UsageError(f"batch {batch_id}: never submitted (state {record.state})")
    api = registry.batch_api(record.provider)
    if api is None:
        raise UsageError(f"provider {record.provider} has no batch API")
    with ExitStack() as stack:
        status = api.cancel(open_connection(stack, endpoint_of(record), transport), record.batch_id)
    store.update(
        record.submission,
        state=status.state,
        total=status.total,
        done=status.done,
        failed=status.failed,
    )
    return status


def batching(
    backend: Backend, store: BatchStore, mode: BatchMode, options: BatchOptions
) -> tuple[Backend, Backend]:
    """The backends of a run's targets and of its scorers' calls under `mode`."""
    if mode == "off":
        return backend, backend
    sender = BatchSender(backend, store, options)
    return sender, (sender if mode == "all" else backend)


__all__ = [
    "BATCH_MODES",
    "BatchMode",
    "BatchOptions",
    "BatchSender",
    "BatchesPending",
    "batching",
    "cancel_batch",
    "parse_batch_mode",
]
