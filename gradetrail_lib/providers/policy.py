"""The rules every provider call follows, as plain data: how many attempts, how long to
wait between them, how long a server may ask us to wait, and when a run gives up.
`caller` applies them to HTTP calls; the backends hold them without importing httpx."""

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Protocol

from gradetrail_lib.errors import RunAborted
from gradetrail_lib.providers.base import ProviderError


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    # A server asking for a longer pause than this is obeyed only up to it.
    max_server_wait_s: float = 300.0
    timeout_s: float = 300.0
    # Consecutive identical final errors (no success between) that abort the run.
    abort_after_identical: int = 3

    def delay_s(self, attempt: int, server_wait_s: float | None, rng: random.Random) -> float:
        if server_wait_s is not None:
            # A little jitter on top so that clients told the same time do not stampede.
            return min(server_wait_s, self.max_server_wait_s) + rng.uniform(0, 0.1)
        return rng.uniform(0, min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


class AttemptGate(Protocol):
    """Admits each attempt of a call (`call_model`'s `gate`), e.g. the adaptive limiter:
    `acquire` before it is sent, then `done` with its error (None when clean) once its
    answer is read, or `abandon` when it ended without one."""

    async def acquire(self) -> int: ...

    def done(self, ticket: int, error: ProviderError | None) -> None: ...

    def abandon(self, ticket: int) -> None: ...


def parse_retry_after(value: str, now: datetime | None = None) -> float | None:
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class AbortTracker:
    """Aborts the run after N consecutive identical final errors with no success between."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._last: tuple[int | None, str] | None = None
        self._count = 0

    def success(self) -> None:
        self._last, self._count = None, 0

    def failure(self, error: ProviderError) -> None:
        if error.signature == self._last:
            self._count += 1
        else:
            self._last, self._count = error.signature, 1
        if self._count >= self.limit:
            raise RunAborted(
                f"aborted after {self._count} identical errors in a row: {error.message}"
            )
