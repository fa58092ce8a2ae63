"""The model calls scorers ask for (a judge's), sent while the target's answers arrive.

Scorer requests are ordinary requests: looked up in the same response cache, the misses
sent through the same backend and retry policy, each stored as it arrives (so a later
batch of the run finds what an earlier one sent, with or without the cache file). They are
submitted as the target's responses come in (a cached one at once, a new one when it
arrives), so judging overlaps with the target's sending instead of following it.

With the asyncio backend the stage runs its own event loop in a thread, with one pool of
`concurrency` workers per endpoint: the judge's calls never take the target's slots, and
two judges on different endpoints do not share theirs. Other backends (Ray) send the
stage's misses when it is closed, in one `run()`, through the same backend.
"""

import asyncio
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from functools import partial
from typing import Any

from gradetrail_lib.backends.base import Backend
from gradetrail_lib.backends.live_endpoints import bind, serve, served_models
from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.cache.base import Cache, Writer
from gradetrail_lib.cache.claims import POLL_S
from gradetrail_lib.engine.claiming import StepClaims
from gradetrail_lib.engine.responses import Responses
from gradetrail_lib.providers import registry as providers
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse, ProviderError

Outcome = ModelResponse | ProviderError


def _endpoint_id(endpoint: Endpoint) -> tuple[str, str, str]:
    return (endpoint.provider, endpoint.model, endpoint.base_url)


_CLOSE = object()


class CallStage:
    def __init__(self, cache: Cache, backend: Backend) -> None:
        self._cache = cache
        self._backend = backend
        # Runs sharing the cache claim the requests they send (`claiming`): of two runs
        # judging alike answers at once, one sends each judge request.
        self._claims = StepClaims(cache)
        self._pipelined = isinstance(backend, LocalBackend)
        self.results = Responses()
        self._seen: set[str] = set()
        self._collected: list[ModelRequest] = []  # not pipelined: sent at close()
        self._started = time.perf_counter()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[Any] | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._submitted: list[ModelRequest] = []
        self._wake_pending = False
        self._main: asyncio.Task[None] | None = None
        self._pipelined_cancel = False

    # -- submitting (any thread)

    def submit(self, requests: Sequence[ModelRequest]) -> None:
        if not requests:
            return
        if not self._pipelined:
            with self._lock:
                self._collected.extend(requests)
            return
        self._start()
        assert self._loop is not None
        with self._lock:
            self._submitted.extend(requests)
            if self._wake_pending:
                return
            self._wake_pending = True
        # One wake-up for whatever arrives before the loop takes it: a wake-up per
        # response (a write to the loop's socket) was most of a cached run's time.
        self._loop.call_soon_threadsafe(self._take_submitted)

    def _take_submitted(self) -> None:
        assert self._inbox is not None
        with self._lock:
            taken, self._submitted = self._submitted, []
            self._wake_pending = False
        self._inbox.put_nowait(taken)

    def close(self) -> Responses:
        """Wait for every submitted call; re-raises what stopped the stage (RunAborted)."""
        if self._pipelined:
            if self._thread is not None:
                assert self._loop is not None and self._inbox is not None
                self._loop.call_soon_threadsafe(self._take_submitted)  # after any pending
                self._loop.call_soon_threadsafe(self._inbox.put_nowait, _CLOSE)
                self._thread.join()
        else:
            self._send_collected()
        self.results.wall_s = time.perf_counter() - self._started
        if self._error is not None:
            raise self._error
        return self.results

    def cancel(self) -> None:
        """Stop sending (the run is aborting): what arrived is stored, the rest dropped."""
        self._pipelined_cancel = True
        if self._thread is not None and self._loop is not None and self._main is not None:
            self._loop.call_soon_threadsafe(self._main.cancel)
            self._thread.join(timeout=30)
        self._collected = []

    # -- shared by both ways

    def _new(self, requests: Sequence[ModelRequest]) -> list[ModelRequest]:
        fresh = []
        for request in requests:
            if request.key not in self._seen:
                self._seen.add(request.key)
                fresh.append(request)
        return fresh

    def _look_up(self, requests: list[ModelRequest]) -> list[ModelRequest]:
        """Records the cache hits; returns the misses."""
        if not requests:
            return requests
        found = self._cache.lookup([r.key for r in requests])
        self.results.responses.update(found)
        self.results.cache_hits.update(found)
        return [r for r in requests if r.key not in found]

    def _on_result(self, writer: Writer, request: ModelRequest, outcome: Outcome) -> None:
        self.results.take(request, outcome, writer)
        self._claims.settled(request, outcome)

    # -- not pipelined

    def _send_collected(self) -> None:
        misses = self._look_up(self._new(self._collected))
        self._collected = []
        if not misses:
            return
        try:
            with self._cache.writer() as writer:
                on_result = partial(self._on_result, writer)
                self._claims.send(misses, self._backend, self.results, on_result)
        finally:
            self._claims.close()  # after the writer stored the answers: a waiter finds them

    # -- pipelined: an event loop in a thread of its own

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="scorer-calls", daemon=True)
                self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except asyncio.CancelledError:
            if not self._pipelined_cancel:
                raise
        except BaseException as exc:  # handed to close()
            self._error = exc
        finally:
            self._ready.set()  # never leave a submitter waiting on a failed start

    async def _serve(self) -> None:
        self._main = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._inbox = asyncio.Queue()
        self._ready.set()
        queues: dict[tuple[str, str, str], asyncio.Queue[ModelRequest | None]] = {}
        backends: dict[tuple[str, str, str], LocalBackend] = {}
        tasks: list[asyncio.Task[None]] = []
        local = self._backend
        assert isinstance(local, LocalBackend)
        with ExitStack() as stack:
            stack.callback(self._claims.close)  # last: after the writer stored the answers
            writer = stack.enter_context(self._cache.writer())
            urls: dict[tuple[str, str], str] = {}
            # Misses another run claimed, by key: their answers are taken from the cache
            # when the stage closes (nothing reads them before), a lapsed one sent here.
            waiting: dict[str, ModelRequest] = {}

            async def route(misses: list[ModelRequest]) -> None:
                for served in served_models(misses):
                    if served not in urls:
                        start = self._start_server
                        urls[served] = await asyncio.to_thread(start, stack, served)
                for request in misses:
                    request = bind(request, urls)
                    where = _endpoint_id(request.endpoint)
                    if where not in queues:
                        backend = local
                        limit = providers.concurrency_limit(request.endpoint.provider)
                        if limit is not None:  # e.g. llama.cpp answers one at a time
                            backend = backend.limited(limit)
                        queues[where], backends[where] = asyncio.Queue(), backend
                        tasks.append(
                            asyncio.create_task(
                                backend.run_queue(queues[where], partial(self._on_result, writer))
                            )
                        )
                    queues[where].put_nowait(request)

            try:
                closing = False
                while not closing:
                    batch = [await self._inbox.get()]
                    while not self._inbox.empty():
                        batch.append(self._inbox.get_nowait())
                    closing = any(item is _CLOSE for item in batch)
                    fresh = self._new([r for item in batch if item is not _CLOSE for r in item])
                    misses = await asyncio.to_thread(self._look_up, fresh) if fresh else []
                    if misses:
                        split = self._claims.split
                        misses, others = await asyncio.to_thread(split, misses, self.results)
                        waiting.update((r.key, r) for r in others)
                    await route(misses)
                while waiting:
                    send = await asyncio.to_thread(self._claims.poll, waiting, self.results)
                    if send:
                        await route(send)
                    elif waiting:
                        await asyncio.sleep(POLL_S)
            finally:
                if self._pipelined_cancel:  # in flight is dropped; the writer keeps what came
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                else:
                    for where, queue in queues.items():
                        for _ in range(backends[where].concurrency):
                            queue.put_nowait(None)
                    if tasks:
                        await asyncio.gather(*tasks)

    @staticmethod
    def _start_server(stack: ExitStack, served: tuple[str, str]) -> str:
        return stack.enter_context(serve(*served))
