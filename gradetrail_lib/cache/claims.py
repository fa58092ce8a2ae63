"""Claims: a request is paid once across runs that share a cache and overlap.

Before a run sends the requests it found missing, it claims them; it sends the ones it
got and waits for the others' answers, which their claimants store. A claim names its
owner (one per responses step) and expires unless renewed: the owner renews its claims
while it sends (every third of the time to live), so the claims of a process killed
with -9 lapse within that bound and a waiting run takes them over and sends. An owner
releases its claims once its answers are stored; a request that failed (no answer is
stored) is then claimed and sent by a waiting run.

`Claims` is what a cache offers (`Cache.claims()`): a Postgres cache keeps them in its
`claims` table (`INSERT ... ON CONFLICT`, one statement for a burst of keys); a cache that
keeps nothing past the run, or a DuckDB file (one process writes it at a time), offers
none, and a run sends what it finds missing, as before.
"""

import threading
from collections.abc import Sequence
from typing import Protocol

# How long a claim lives without renewal: the bound on how long a killed claimant holds
# up the runs waiting for its requests.
DEFAULT_TTL_S = 30.0
# How often a waiting run looks for the answers (and for claims it can take over).
POLL_S = 0.25


class Claims(Protocol):
    def claim(self, keys: Sequence[str]) -> set[str]:
        """Claims `keys` for this owner; which of them it now holds (unclaimed ones, its
        own, and those whose claim expired: taken over)."""
        ...

    def renew(self) -> None:
        """Extends every claim of this owner by the time to live."""
        ...

    def release(self) -> None:
        """Drops every claim of this owner (its answers are stored)."""
        ...

    @property
    def ttl_s(self) -> float:
        """How long a claim lives without renewal."""
        ...


class Renewal:
    """Renews an owner's claims from a thread of its own, every third of their time to
    live, until stopped (a context manager)."""

    def __init__(self, claims: Claims) -> None:
        self._claims = claims
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gradetrail-claims", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._claims.ttl_s / 3):
            try:
                self._claims.renew()
            except Exception:  # a blip: the next renewal tries again before expiry
                continue

    def __enter__(self) -> "Renewal":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
