"""Claims: a request is paid once across runs that share a cache and overlap.

Before a run sends the requests it found missing, it claims them; it sends the ones it
got and waits for the others' answers, which their claimants store. A claim names its
owner (one per sending step: `engine.claiming`) and expires unless renewed: the owner
renews its claims while it sends (every third of the time to live), so the claims of a
process killed with -9 lapse within that bound and a waiting run takes them over and sends. An owner
releases a claim whose call failed (a `ProviderError`: no answer will be stored) as soon
as the failure is known, so a waiting run claims and sends that request at its next look
(`POLL_S`); its answered claims it releases once their answers are stored, when its step
ends, so a waiting run finds them in the cache.

`Claims` is what a cache offers (`Cache.claims()`): a Postgres cache keeps them in its
`claims` table (`INSERT ... ON CONFLICT`, one statement for a burst of keys); a DuckDB
file keeps them in a SQLite file beside it (`FileClaims`), where a claim whose process is
gone is taken over at once; a run's memory offers none (nobody shares it).
"""

import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from gradetrail_lib.cache.rollback import roll_back

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

    def release(self, keys: Sequence[str] | None = None) -> None:
        """Drops this owner's claims on `keys` (their calls failed), or every claim of this
        owner (None: its step is over, its answers stored). Another owner's stay."""
        ...

    @property
    def ttl_s(self) -> float:
        """How long a claim lives without renewal."""
        ...


class Renewal:
    """Renews an owner's claims from a thread of its own, every third of their time to
    live, and releases at once the claims handed to it (`release`), until stopped (a
    context manager). The releases are this thread's so that a failed call's sender (an
    event loop with other calls in flight) never waits on the claims' database."""

    def __init__(self, claims: Claims) -> None:
        self._claims = claims
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop and by release
        self._lock = threading.Lock()
        self._to_release: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="gradetrail-claims", daemon=True)

    def release(self, key: str) -> None:
        """Hands the claim on `key` to this thread to release now (its call failed)."""
        with self._lock:
            self._to_release.append(key)
        self._wake.set()

    def _loop(self) -> None:
        period = self._claims.ttl_s / 3
        renew_at = time.monotonic() + period
        while True:
            self._wake.wait(max(0.0, renew_at - time.monotonic()))
            self._wake.clear()
            if self._stop.is_set():
                return  # the owner releases every claim itself
            with self._lock:
                keys, self._to_release = self._to_release, []
            if keys:
                try:
                    self._claims.release(keys)
                except Exception:  # a blip: tried again at the next wake-up
                    with self._lock:
                        self._to_release[:0] = keys
            if time.monotonic() >= renew_at:
                renew_at = time.monotonic() + period
                try:
                    self._claims.renew()
                except Exception:  # a blip: the next renewal tries again before expiry
                    continue

    def __enter__(self) -> "Renewal":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this machine is running (another user's counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def claims_path(cache_file: Path) -> Path:
    """Where a DuckDB cache file's claims are kept: `<file>.claims.sqlite` beside it."""
    return cache_file.with_name(cache_file.name + ".claims.sqlite")


_FILE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL, "
    "host TEXT NOT NULL, pid INTEGER NOT NULL, expires_at REAL NOT NULL)"
)


class FileClaims:
    """The claims of the runs that share a DuckDB cache file, in a SQLite file beside it.

    Not in the DuckDB file itself: a process holds that file alone while it works in it,
    so runs waiting for answers would take, several times a second, the lock the runs
    sending them need to store them. SQLite locks its file for a write transaction only
    (`BEGIN IMMEDIATE`, waiting its turn), which takes microseconds here. A claim names
    its owner's machine and process: one of this machine whose process is gone (killed
    with -9) is taken over at the next claim, not after the time to live; the time to
    live (and the renewal) bounds the rest, e.g. a process id taken by a new process.
    The clock is this machine's, which every claimant of the file shares."""

    def __init__(self, path: Path, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.path = path
        self._ttl_s = ttl_s
        self.owner = uuid.uuid4().hex
        self._host = socket.gethostname()
        self._pid = os.getpid()
        # One connection, shared by the step's thread and its renewal thread.
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    @property
    def ttl_s(self) -> float:
        return self._ttl_s

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._connection is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                connection = sqlite3.connect(
                    self.path, timeout=60.0, isolation_level=None, check_same_thread=False
                )
                connection.execute(_FILE_SCHEMA)
                self._connection = connection
            connection = self._connection
            connection.execute("BEGIN IMMEDIATE")  # the write lock now: claims take turns
            try:
                yield connection
                connection.execute("COMMIT")
            except BaseException:
                roll_back(connection)
                raise

    def claim(self, keys: Sequence[str]) -> set[str]:
        wanted = sorted(set(keys))
        if not wanted:
            return set()
        now = time.time()
        with self._transaction() as connection:
            others = connection.execute(
                "SELECT DISTINCT owner, pid FROM claims WHERE host = ? AND owner <> ?",
                [self._host, self.owner],
            ).fetchall()
            gone = [(owner,) for owner, pid in others if not process_alive(pid)]
            connection.executemany("DELETE FROM claims WHERE owner = ?", gone)
            connection.execute("DELETE FROM claims WHERE expires_at < ?", [now])
            # (`WHERE true`: SQLite's parser needs it before ON CONFLICT after a SELECT.)
            rows = connection.execute(
                "INSERT INTO claims (key, owner, host, pid, expires_at) "
                "SELECT value, ?, ?, ?, ? FROM json_each(?) WHERE true "
                "ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at "
                "WHERE claims.owner = excluded.owner RETURNING key",
                [self.owner, self._host, self._pid, now + self._ttl_s, json.dumps(wanted)],
            ).fetchall()
        return {row[0] for row in rows}

    def renew(self) -> None:
        with self._transaction() as connection:
            connection.execute(
                "UPDATE claims SET expires_at = ? WHERE owner = ?",
                [time.time() + self._ttl_s, self.owner],
            )

    def release(self, keys: Sequence[str] | None = None) -> None:
        if keys is not None:
            with self._transaction() as connection:
                connection.execute(
                    "DELETE FROM claims WHERE owner = ? "
                    "AND key IN (SELECT value FROM json_each(?))",
                    [self.owner, json.dumps(sorted(set(keys)))],
                )
            return
        with self._transaction() as connection:
            connection.execute("DELETE FROM claims WHERE owner = ?", [self.owner])
        with self._lock:  # the step is over: its connection goes (a new one if used again)
            if self._connection is not None:
                self._connection.close()
                self._connection = None
