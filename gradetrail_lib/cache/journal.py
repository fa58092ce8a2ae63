"""The cache writer's journal: every answer appended to a file of this process the moment
it arrives, before its request's slot takes the next request, so that a killed run has
paid again for nothing but what was in flight.

The burst writer (`bursts.CacheWriter`) stores answers in the cache a burst at a time, up
to `bursts.MAX_DELAY_S` after they arrive: a write transaction costs about the same
whatever its size, and one per answer cost as much CPU as sending it. An answer waiting
for its burst is in this process's memory only; appended here it is in the kernel's page
cache, which survives a kill -9 (not a power cut: nothing is fsync'd). When the writer has
stored everything, its journal is deleted. A journal left behind by a process that died
is replayed into the cache the next time the cache is opened (`replay`); its rows whose
keys the cache holds already are skipped, so replaying twice changes nothing.

A journal is `<pid>-<random>.jsonl` in the cache's journal folder, one JSON list a line in
the order of `responses.COLUMNS`. Its writer holds an exclusive `flock` on it for its
life: a journal whose lock can be taken belongs to no live writer. It is made under a
dot-name and renamed once locked, so that a replay never takes a new, still unlocked
journal for an orphan.
"""

import fcntl
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Protocol

from gradetrail_lib.providers.base import ModelRequest, ModelResponse

SUFFIX = ".jsonl"

# An answer as the cache's row (`responses.response_row`): a list in `COLUMNS` order.
Encoder = Callable[[ModelRequest, ModelResponse], list[Any]]


class RowSink(Protocol):
    def write_rows(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Stores whole rows whose keys are not stored yet; how many it added."""
        ...


def folder_beside(path: Path) -> Path:
    """The journal folder of a cache file: `<file>.journal` beside it."""
    return path.with_name(path.name + ".journal")


class Journal:
    """One writer's journal: `append` one answer at a time, `discard` once all are stored
    in the cache, `keep` when they may not be (the writer failed)."""

    def __init__(self, folder: Path, encode: Encoder) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._encode = encode
        while True:
            name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}{SUFFIX}"
            hidden = folder / f".{name}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
            self._fd = os.open(hidden, flags, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            self.path = folder / name
            try:
                os.rename(hidden, self.path)
                break
            except FileNotFoundError:  # a replay took it for an orphan before the lock
                os.close(self._fd)

    def append(self, request: ModelRequest, response: ModelResponse) -> None:
        """One answer, in the file when this returns (one write(2) of one line)."""
        line = json.dumps(self._encode(request, response), ensure_ascii=False) + "\n"
        os.write(self._fd, line.encode())

    def discard(self) -> None:
        """Everything appended is in the cache: the journal goes."""
        with suppress(FileNotFoundError):
            self.path.unlink()
        self.keep()

    def keep(self) -> None:
        """Closed and unlocked, left for the next `replay`."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def replay(folder: Path, sink: RowSink, columns: Sequence[str]) -> int:
    """Stores into `sink` the rows of every journal in `folder` whose writer is gone, then
    deletes those journals; the rows it added. A missing folder costs one failed scandir
    (this runs each time a cache is opened, a fully cached run's included)."""
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    added = 0
    for entry in entries:
        if not entry.name.endswith(SUFFIX):
            continue
        if entry.name.startswith("."):
            _drop_if_orphan(Path(entry.path))  # made, never renamed: holds nothing
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # replayed by another process meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer is alive
            with os.fdopen(os.dup(fd), "rb") as lines:
                rows = _rows(lines.read(), columns)
            if rows:
                added += sink.write_rows(rows)
            with suppress(FileNotFoundError):
                os.unlink(entry.path)
        finally:
            os.close(fd)
    return added


def _rows(data: bytes, columns: Sequence[str]) -> list[dict[str, Any]]:
    """A journal's rows by column name; a torn last line (the process died inside its
    write) is left out."""
    rows = []
    for line in data.splitlines():
        try:
            values = json.loads(line)
        except ValueError:
            continue
        if isinstance(values, list) and len(values) == len(columns):
            rows.append(dict(zip(columns, values, strict=True)))
    return rows


def _drop_if_orphan(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with suppress(FileNotFoundError):
            path.unlink()
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
