"""A table file read through DuckDB (CSV, Parquet): its rows, numbered, as JSON values."""

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gradetrail_lib.datasets.dataset import (
    Dataset,
    Row,
    Unit,
    file_hash,
    first_line,
    in_memory,
    jsonable_row,
    table_samples,
)
from gradetrail_lib.errors import InputError

if TYPE_CHECKING:
    import duckdb


def read_table(
    path: Path, where: str, *, kind: str, reader: str, first: int, unit: Unit, id_field: str = "id"
) -> Dataset:
    """The file's dataset, every row checked: `reader` is the DuckDB table function that
    reads it, `first` the number of its first row (counted in `unit`s); `kind` names the
    format in errors (`cannot read CSV: ...`)."""
    digest = file_hash(where, path)
    rows = _rows(path, where, kind, reader, first)
    return in_memory(path, digest, table_samples(where, rows, unit, id_field))


class _Reader:
    """One in-memory DuckDB per process that every table file is read through, a cursor
    (a connection of its own) per read. `duckdb.connect` starts a whole database
    instance, about 20 ms (docs/performance.md), where a read of a small file takes
    about 5; a cursor costs microseconds. The reads create nothing in it, so one read
    leaves nothing another could see.

    A read holds the lock from its cursor to its last row, so reads from several threads
    take turns (they are a dataset's load, not a run's hot path). The instance is closed
    before every fork and opened again when next needed, in the parent and in the child:
    a child does not use an instance whose threads the fork did not copy (and a forked
    child was seen to hang in `duckdb.connect` while its parent's instance lived:
    docs/performance.md). The lock is held across the fork, so no read is cut off by the
    close and none starts until the fork is done; the child gets a lock of its own (the
    parent's may have been taken by a thread the child does not have)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instance: duckdb.DuckDBPyConnection | None = None
        os.register_at_fork(
            before=self._before_fork,
            after_in_parent=self._lock_release,
            after_in_child=self._after_fork_in_child,
        )

    @contextmanager
    def cursor(self) -> Iterator["duckdb.DuckDBPyConnection"]:
        import duckdb

        with self._lock:
            if self._instance is None:
                self._instance = duckdb.connect(":memory:")
            con = self._instance.cursor()
            try:
                yield con
            finally:
                con.close()

    def _before_fork(self) -> None:
        self._lock.acquire()
        if self._instance is not None:
            self._instance.close()
            self._instance = None

    def _lock_release(self) -> None:
        self._lock.release()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._instance = None


_READER = _Reader()


def _rows(path: Path, where: str, kind: str, reader: str, first: int) -> Iterator[Row]:
    import duckdb

    with _READER.cursor() as con:
        try:
            cursor = con.execute(f"SELECT * FROM {reader}(?)", [str(path)])
            names = [d[0] for d in cursor.description or []]
            values = cursor.fetchall()
        except duckdb.Error as exc:
            raise InputError(where, None, None, f"cannot read {kind}: {first_line(exc)}") from exc
    for offset, row in enumerate(values):
        number = first + offset
        yield number, jsonable_row(where, number, dict(zip(names, row, strict=True)))
