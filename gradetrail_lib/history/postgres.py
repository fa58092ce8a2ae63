"""The run history in Postgres (`GRADETRAIL_STORE`, or the cache's URL): what a team shares.

One row per completed run in `gradetrail_history`: the entry's JSON as the history file
holds it, the columns a query picks runs by (spec, model, identity, finish time; indexed),
and `origin`, where the run directory was written (`host:/results/root`). An append is one
INSERT (atomic: no half entry, whoever writes at once); entries read back in the order
they were appended (`seq`), as the file's lines do.

The database, its pool and its error messages (no password) are the cache's
(`cache.postgres.PostgresDatabase`): with the cache's URL, one pool serves both.
"""

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gradetrail_lib.cache.postgres import PostgresDatabase
from gradetrail_lib.errors import (
    FIELD_WORDS,
    GradetrailError,
    first_of,
    input_errors,
    on_line,
)
from gradetrail_lib.history.entries import HistoryEntry, origin_of

TABLE = "gradetrail_history"

SCHEMA = (
    f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    seq BIGSERIAL PRIMARY KEY,
    spec TEXT NOT NULL,
    model TEXT NOT NULL,
    identity TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL,
    origin TEXT NOT NULL,
    entry JSONB NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
)""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_spec_model ON {TABLE} (spec, model, finished_at)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_identity ON {TABLE} (identity)",
)


class PostgresHistory:
    """The history in the database at `url` (its table made on first use); runs appended
    from here were written under `results_root`."""

    def __init__(self, url: str, *, where: str, results_root: Path) -> None:
        self._database = PostgresDatabase(url, where=where, schema=SCHEMA, what="the history")
        self._origin = origin_of(results_root)

    @property
    def where(self) -> str:
        return self._database.where

    def append(self, entry: HistoryEntry) -> None:
        import psycopg

        try:
            with self._database.connection() as connection:
                connection.execute(
                    f"INSERT INTO {TABLE} (spec, model, identity, run_dir, finished_at, origin,"
                    " entry) VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)",
                    [entry.spec, entry.model, entry.identity, entry.run_dir, entry.finished,
                     self._origin, entry.model_dump_json()],
                )  # fmt: skip
        except psycopg.Error as exc:  # (a lost connection is the pool's GradetrailError)
            raise GradetrailError(
                f"{self.where}: cannot add the run to the history: {self._database.scrub(exc)}"
            ) from None

    def read(self) -> list[HistoryEntry]:
        """Every entry, in the order appended; a row that is not an entry is an InputError
        naming the table and the row's `seq`."""
        with self._database.connection() as connection:
            rows = connection.execute(
                f"SELECT seq, entry, origin FROM {TABLE} ORDER BY seq"
            ).fetchall()
        return [self._entry(seq, entry, origin) for seq, entry, origin in rows]

    def _entry(self, seq: int, entry: dict[str, Any], origin: str) -> HistoryEntry:
        try:
            return HistoryEntry.model_validate({**entry, "origin": origin})
        except ValidationError as exc:
            # The row's seq where a file's line number would be.
            where = f"{self.where} table {TABLE} row seq"
            located = input_errors(exc, where, on_line(seq), words=FIELD_WORDS)
            raise first_of(located) from None
