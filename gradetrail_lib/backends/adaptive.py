"""Adaptive concurrency (`--concurrency auto`): an AIMD limit on the attempts in flight to
one endpoint, found from its answers rather than told.

Each clean answer adds 1/limit to the limit (about +1 per round of requests in flight);
a 429 halves it, at most once per round: a refusal of an attempt sent before the last
cut does not cut again (it was sent under the limit already cut). A 429's `retry-after`
holds every new attempt to the endpoint until it has passed. Other errors leave the limit
alone: a 500 or a timeout says nothing about how many requests the endpoint accepts.

The workers of an endpoint (up to the maximum) take a slot before each attempt, retries
included, and give it back when its answer is read (`call_model`'s `gate`). One event loop
at a time uses a limiter; it holds no asyncio primitive, so a limiter outlives the loop of
one run and the next run starts at the limit the last one settled at.
"""

import asyncio
import time
from collections import deque
from collections.abc import Callable

from gradetrail_lib.providers.base import ProviderError

DEFAULT_INITIAL = 4
DEFAULT_MAX = 64


class AIMDLimiter:
    def __init__(
        self,
        maximum: int = DEFAULT_MAX,
        *,
        initial: int = DEFAULT_INITIAL,
        minimum: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= minimum <= maximum:
            raise ValueError("need 1 <= minimum <= maximum")
        self.maximum = maximum
        self.minimum = minimum
        self.value = float(min(max(initial, minimum), maximum))
        self.inflight = 0
        self.sent = 0  # attempts started
        self.refused = 0  # of them answered 429
        self.cuts = 0
        self._clock = clock
        self._cut_after = 0  # attempts sent up to the last cut: their 429s do not cut again
        self._resume_at = 0.0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def limit(self) -> int:
        return max(self.minimum, int(self.value))

    async def acquire(self) -> int:
        """Wait for a slot (and for any retry-after); the attempt's ticket."""
        woken = False  # a woken waiter goes before those still queued
        while True:
            pause = self._resume_at - self._clock()
            if pause > 0:
                await asyncio.sleep(pause)
                continue
            if self.inflight < self.limit and (woken or not self._waiters):
                break
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake()  # the slot it was given goes to the next
                raise
            woken = True
        self.inflight += 1
        self.sent += 1
        return self.sent

    def done(self, ticket: int, error: ProviderError | None) -> None:
        """An attempt's answer was read: None when clean, else the error it gave."""
        self.inflight -= 1
        if error is None:
            self.value = min(float(self.maximum), self.value + 1 / self.value)
        elif error.status == 429:
            self.refused += 1
            if error.retry_after_s:
                self._resume_at = max(self._resume_at, self._clock() + error.retry_after_s)
            if ticket > self._cut_after:
                self.value = max(float(self.minimum), self.value / 2)
                self._cut_after = self.sent
                self.cuts += 1
        self._wake()

    def abandon(self, ticket: int) -> None:
        """An attempt ended without an answer (cancelled): its slot only is given back."""
        self.inflight -= 1
        self._wake()

    def _wake(self) -> None:
        free = self.limit - self.inflight
        while free > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def stats(self) -> dict[str, int]:
        return {
            "limit": self.limit,
            "sent": self.sent,
            "refused": self.refused,
            "cuts": self.cuts,
        }
