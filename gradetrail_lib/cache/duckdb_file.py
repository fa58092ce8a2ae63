"""Short transactions on a DuckDB file that other processes share.

DuckDB lets one process at a time open a file, and another cannot even read it
meanwhile, so no connection may outlive one short transaction. Opening a file with
`duckdb.connect` starts a whole database instance (mostly its built-in catalog), which
made every cache write cost many times the write itself. Instead each
process keeps one in-memory instance and ATTACHes the file for a transaction and
DETACHes it after, far cheaper (docs/performance.md): DETACH releases the file lock as
closing did.

Threads of one process share the attachment (counted, detached by the last user),
since one instance cannot attach a file twice.
"""

import hashlib
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from gradetrail_lib.errors import GradetrailError


class DatabaseLocked(GradetrailError):
    """The file stayed locked by another process (or a connection of this one) too long."""


def _is_lock_error(exc: duckdb.Error) -> bool:
    # This process, through a plain duckdb.connect (e.g. Dagster's DuckDBResource):
    # "Unique file handle conflict", DuckDB's ResourceInUseException. Another process:
    # "Could not set lock on file", an IOException, DuckDB's type for every I/O failure
    # (a missing folder, a file that is not a database) with no subclass for the lock,
    # so only its message tells the lock apart.
    if isinstance(exc, duckdb.ResourceInUseException):
        return True
    return isinstance(exc, duckdb.IOException) and "Could not set lock on file" in str(exc)


class _InUse(Exception):
    """This process reads the file (attached read-only) and a writer must wait."""


class _Attachments:
    """One in-memory instance per process and the files attached to it, with users.

    A file only read is attached read-only: processes that read one file at once do not
    wait for each other (a read-only attachment takes a shared lock). A writer waits for
    this process's readers; a reader uses a writer's attachment."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instance: duckdb.DuckDBPyConnection | None = None
        self._users: dict[str, int] = {}
        # Whether each attached file is attached read-only.
        self._read_only: dict[str, bool] = {}

    def _current(self) -> duckdb.DuckDBPyConnection:
        if self._instance is None:
            self._instance = duckdb.connect(":memory:", config={"threads": 1})
        return self._instance

    def acquire(self, path: str, alias: str, read_only: bool = False) -> duckdb.DuckDBPyConnection:
        """A new connection with `path` attached as `alias` and in use; raises on a lock."""
        with self._lock:
            instance = self._current()
            if self._users.get(path):
                if self._read_only[path] and not read_only:
                    raise _InUse(path)
            else:
                if self._read_only.get(path, read_only) != read_only:
                    instance.execute(f"DETACH {alias}")  # left by a DETACH that failed
                    del self._read_only[path]
                quoted = path.replace("'", "''")
                mode = " (READ_ONLY)" if read_only else ""
                # IF NOT EXISTS: a DETACH that failed earlier leaves it attached, and usable.
                instance.execute(f"ATTACH IF NOT EXISTS '{quoted}' AS {alias}{mode}")
                self._read_only[path] = read_only
            self._users[path] = self._users.get(path, 0) + 1
            connection = instance.cursor()
        try:
            connection.execute(f"USE {alias}")
        except BaseException:
            connection.close()
            self.release(path, alias)
            raise
        return connection

    def release(self, path: str, alias: str) -> None:
        with self._lock:
            self._users[path] -= 1
            if self._users[path] == 0:
                del self._users[path]
                self._current().execute(f"DETACH {alias}")
                del self._read_only[path]


_ATTACHMENTS = _Attachments()


def _alias(path: str) -> str:
    return "f_" + hashlib.sha256(path.encode()).hexdigest()[:16]


@contextmanager
def open_connection(
    path: Path,
    *,
    wait_s: float = 120.0,
    rng: random.Random | None = None,
    read_only: bool = False,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the file at `path`, for one short piece of
    work (`read_only`: reads only); waits (with jittered backoff) while another process
    holds the file, or, to write, while this one reads it."""
    rng = rng or random.Random()
    resolved = str(path.resolve())
    alias = _alias(resolved)
    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        try:
            with _interrupt_as_keyboard_interrupt():
                connection = _ATTACHMENTS.acquire(resolved, alias, read_only)
            break
        except (duckdb.Error, _InUse) as exc:
            if isinstance(exc, duckdb.Error) and not _is_lock_error(exc):
                raise GradetrailError(f"{path}: cannot open the database: {exc}") from exc
            if time.monotonic() > deadline:
                raise DatabaseLocked(f"{path}: still locked after {wait_s:g}s: {exc}") from exc
            time.sleep(pause + rng.uniform(0, pause))
            pause = min(pause * 2, 0.2)
    try:
        with _interrupt_as_keyboard_interrupt():
            yield connection
    finally:
        connection.close()
        # Its DETACH is a query too, which a Ctrl-C stops as well (the file stays
        # attached, as after any DETACH that failed: the next acquire takes it as it is).
        with _interrupt_as_keyboard_interrupt():
            _ATTACHMENTS.release(resolved, alias)


# Threads of one process share a file's attachment, so their transactions on it run at
# once, and two that create one table conflict ("Catalog write-write conflict": four
# threads opening a new cache file at once failed in 14 tries of 20). Schema changes
# take turns within the process; across processes the file's lock makes them take turns.
_SCHEMA_CHANGES = threading.Lock()


@contextmanager
def schema_changes() -> Iterator[None]:
    """Held while this process creates or migrates a file's tables."""
    with _SCHEMA_CHANGES:
        yield


@contextmanager
def _interrupt_as_keyboard_interrupt() -> Iterator[None]:
    """A Ctrl-C (SIGINT) that arrives while DuckDB runs a query stops the query, and the
    Python client raises RuntimeError("Query interrupted") in its place, with nothing
    chained: without this, a run's Ctrl-C during a lookup ended in a traceback and exit 1
    instead of the CLI's "interrupted" and 130. (No DuckDB type marks it; the message.)"""
    try:
        yield
    except RuntimeError as exc:
        if type(exc) is RuntimeError and str(exc) == _INTERRUPTED:
            raise KeyboardInterrupt from exc
        raise
    except duckdb.InterruptException as exc:
        raise KeyboardInterrupt from exc


_INTERRUPTED = "Query interrupted"
