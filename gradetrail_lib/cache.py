"""The response cache: one DuckDB file, keyed by request key, successful responses only.

DuckDB lets one process at a time open a file, and a second process cannot even read it
meanwhile. So no connection outlives one short transaction (`duckdb_file`): lookups and
writes open, work and close, retrying while another process holds the lock. Responses
are written by a background thread as soon as they arrive; when several arrive while a
write is under way they go in the next transaction together (group commit), so a killed
run loses only what was in flight and a fast run does not pay one connection per row.
"""

import json
import os
import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gradetrail_lib.duckdb_file import open_connection
from gradetrail_lib.duckdb_rows import Column, insert_rows
from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.providers.base import ModelResponse
from gradetrail_lib.request import ModelRequest

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key VARCHAR PRIMARY KEY,
    provider VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    served_model VARCHAR,
    text VARCHAR NOT NULL,
    stop_reason VARCHAR NOT NULL,
    input_tokens BIGINT,
    output_tokens BIGINT,
    latency_s DOUBLE NOT NULL,
    attempts INTEGER NOT NULL,
    raw VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
)
"""

_COLUMNS: list[Column] = [
    ("key", "VARCHAR"), ("provider", "VARCHAR"), ("model", "VARCHAR"),
    ("served_model", "VARCHAR"), ("text", "VARCHAR"), ("stop_reason", "VARCHAR"),
    ("input_tokens", "BIGINT"), ("output_tokens", "BIGINT"), ("latency_s", "DOUBLE"),
    ("attempts", "INTEGER"), ("raw", "VARCHAR"),
]  # fmt: skip


DEFAULT_DATABASE = Path(".gradetrail") / "gradetrail.duckdb"


def default_cache_path() -> Path:
    """The one DuckDB file of the project: response cache (and, under Dagster, the tables).

    GRADETRAIL_CACHE overrides it; the default is relative to the working directory.
    """
    env = os.environ.get("GRADETRAIL_CACHE")
    return Path(env) if env else DEFAULT_DATABASE


class ResponseCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_connection(path) as connection:
            connection.execute(SCHEMA)

    def lookup(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        """Cached responses by key. The raw provider body stays in the file (for audit) and
        is not loaded: nothing downstream reads it, and parsing it dominates a warm run."""
        if not keys:
            return {}
        with open_connection(self.path) as connection:
            rows = connection.execute(
                "SELECT key, served_model, text, stop_reason, input_tokens, output_tokens,"
                " latency_s, attempts FROM responses"
                " WHERE key IN (SELECT unnest($keys::VARCHAR[]))",
                {"keys": list(set(keys))},
            ).fetchall()
        return {
            row[0]: ModelResponse(
                served_model=row[1],
                text=row[2],
                stop_reason=row[3],
                input_tokens=row[4],
                output_tokens=row[5],
                latency_s=row[6],
                attempts=row[7],
            )
            for row in rows
        }

    def put_many(self, items: Sequence[tuple[ModelRequest, ModelResponse]]) -> None:
        if not items:
            return
        rows: list[list[Any]] = [
            [
                request.key,
                request.endpoint.provider,
                request.endpoint.model,
                response.served_model,
                response.text,
                response.stop_reason,
                response.input_tokens,
                response.output_tokens,
                response.latency_s,
                response.attempts,
                json.dumps(response.raw, ensure_ascii=False),
            ]
            for request, response in items
        ]
        with open_connection(self.path) as connection:
            insert_rows(connection, "responses", _COLUMNS, rows, or_ignore=True)

    def count(self) -> int:
        with open_connection(self.path) as connection:
            row = connection.execute("SELECT count(*) FROM responses").fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def writer(self) -> Iterator["CacheWriter"]:
        writer = CacheWriter(self)
        try:
            yield writer
        finally:
            writer.close()


_STOP = object()


class CacheWriter:
    """Writes responses from a background thread, batching what queues up meanwhile."""

    def __init__(self, cache: ResponseCache) -> None:
        self._cache = cache
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self.written = 0
        self._thread = threading.Thread(target=self._loop, name="cache-writer", daemon=True)
        self._thread.start()

    def put(self, request: ModelRequest, response: ModelResponse) -> None:
        if self._error is not None:
            raise GradetrailError(f"cache writer failed: {self._error}")
        self._queue.put((request, response))

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            batch = []
            while True:
                if item is _STOP:
                    stopping = True
                    break
                batch.append(item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch and self._error is None:
                try:
                    self._cache.put_many(batch)
                    self.written += len(batch)
                except BaseException as exc:  # reported by close(); the thread must not die
                    self._error = exc

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()
        if self._error is not None:
            raise GradetrailError(f"cache writer failed: {self._error}") from self._error
