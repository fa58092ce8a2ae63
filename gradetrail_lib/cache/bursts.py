"""The burst writer both response caches use (the DuckDB file's and Postgres's).

A write transaction costs about the same whatever its size, so a background thread waits
for a pause in arrivals (`QUIET_S`) and puts everything that arrived in one transaction,
but never holds a response longer than `MAX_DELAY_S` (plus the transaction's own time,
docs/performance.md). (Writing each burst piecemeal took as much CPU as sending it, on a
2-core machine, while the requests of the next round waited.)

An answer waiting for its burst is not lost to a kill: `put` appends it to the writer's
journal first (`journal.Journal`, one write(2)), before the sending worker takes its next
request, and a journal its writer left is replayed when the cache is next opened. So a
killed run pays again only for the requests it had in flight.
"""

import queue
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, Protocol

from gradetrail_lib.cache.journal import Journal
from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.providers.base import ModelRequest, ModelResponse

QUIET_S = 0.005
MAX_DELAY_S = 0.1


class BurstSink(Protocol):
    def put_many(self, items: Sequence[tuple[ModelRequest, ModelResponse]]) -> None:
        """Stores `items` in one transaction."""
        ...


_STOP = object()


class CacheWriter:
    """Writes responses from a background thread, one transaction per burst of arrivals."""

    def __init__(
        self,
        cache: BurstSink,
        quiet_s: float = QUIET_S,
        max_delay_s: float = MAX_DELAY_S,
        *,
        journal: Journal | None = None,
    ) -> None:
        self._cache = cache
        self._journal = journal
        self._quiet_s = quiet_s
        self._max_delay_s = max_delay_s
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._finished = False
        self._finishing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cache-writer", daemon=True)
        self._thread.start()

    def put(self, request: ModelRequest, response: ModelResponse) -> None:
        if self._error is not None:
            raise GradetrailError(f"cache writer failed: {self._error}")
        if self._journal is not None:
            self._journal.append(request, response)
        self._queue.put((request, response))

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            batch, stopping = self._next_batch()
            if batch and self._error is None:
                try:
                    self._cache.put_many(batch)
                except BaseException as exc:  # reported by close(); the thread must not die
                    self._error = exc

    def _next_batch(self) -> tuple[list[Any], bool]:
        """What arrives until a pause of `quiet_s`, at most `max_delay_s` after the first;
        and whether finish() was called (which ends the wait at once).

        The writer sleeps through a burst and then takes what came, rather than waiting
        on the queue item by item: a wake-up per response made the sending thread hand
        over the GIL once per response, on the critical path of every request."""
        first = self._queue.get()
        deadline = time.monotonic() + self._max_delay_s
        batch = [first]
        while batch[-1] is not _STOP:
            left = deadline - time.monotonic()
            if left <= 0:
                return batch, False
            self._finishing.wait(min(self._quiet_s, left))
            arrived = self._drain()
            if not arrived:
                return batch, False
            batch.extend(arrived)
        return [item for item in batch if item is not _STOP], True

    def _drain(self) -> list[Any]:
        items = []
        with suppress(queue.Empty):
            while True:
                items.append(self._queue.get_nowait())
        return items

    def finish(self) -> None:
        """No more responses will come: write what is queued without waiting for a pause."""
        if not self._finished:
            self._finished = True
            self._queue.put(_STOP)
            self._finishing.set()

    def close(self) -> None:
        self.finish()
        self._thread.join()
        if self._journal is not None:
            # Kept when a write failed: the next opening of the cache stores its answers.
            if self._error is None:
                self._journal.discard()
            else:
                self._journal.keep()
        if self._error is not None:
            raise GradetrailError(f"cache writer failed: {self._error}") from self._error
