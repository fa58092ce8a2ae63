"""Result tables, written per partition: delete and insert in one transaction.

They live in the DuckDB file (`DuckDBTables`, the default), or in Postgres
(`PostgresTables`) when the store is (`GRADETRAIL_STORE`, or the cache's URL:
`GradetrailResource.tables`), so that every machine's partitions land in one table.

`scores` holds one row per (sample, scorer), `stats` one row per scorer, each with the
scorer's name and whether it is the spec's primary scorer; a table written by an older
gradetrail (other columns) is derived data and is rebuilt when next written.

A partition's rows come as a stream (`score_rows` over the records read from the run
directory) and go in `INSERT_ROWS` at a time, so a run of any size holds one batch of
rows; the delete and every insert are still one transaction, during which DuckDB's own
memory is capped (`TABLE_MEMORY_LIMIT`).
"""

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import suppress
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

import duckdb
from dagster_duckdb import DuckDBResource
from duckdb import Error as DuckDBError
from duckdb import OutOfMemoryException, TransactionException

from gradetrail_lib.analysis.stats import RunStats
from gradetrail_lib.cache.duckdb_rows import Column, insert_rows
from gradetrail_lib.cache.postgres import PostgresDatabase
from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.providers.pricing import shown_cost, sum_costs
from gradetrail_lib.results.runs import Run
from gradetrail_lib.results.totals import RunTotals
from gradetrail_lib.results.trace import CallTotals, Manifest, TraceRecord

# Rows per INSERT: each column's values of one batch are a list (`insert_rows`), which
# DuckDB converts whole: larger batches raised the peak memory and were no faster
# (docs/performance.md).
INSERT_ROWS = 2_048
# DuckDB's memory while a partition's rows go in: an open transaction keeps its rows in
# memory up to the limit (80 % of RAM by default) and spills the rest to the database's
# temporary folder; with the limit a partition peaks at a fraction of its memory without
# one (docs/performance.md). A transaction that cannot fit in it (rows with long reasons
# may not) is tried again without it.
TABLE_MEMORY_LIMIT = "32MB"

Rows = Iterable[Sequence[Any]]

log = logging.getLogger("gradetrail_assets")

# `primary` is an SQL keyword: the name is quoted wherever it is written.
PRIMARY = '"primary"'

SCORE_COLUMNS: list[Column] = [
    ("spec", "VARCHAR"), ("model", "VARCHAR"), ("identity", "VARCHAR"), ("id", "VARCHAR"),
    ("repeat", "BIGINT"), ("scorer", "VARCHAR"), ("scorer_type", "VARCHAR"),
    (PRIMARY, "BOOLEAN"), ("score", "DOUBLE"), ("passed", "BOOLEAN"), ("reason", "VARCHAR"),
    ("error", "VARCHAR"), ("outcome", "VARCHAR"), ("failure_mode", "VARCHAR"),
    ("request_key", "VARCHAR"), ("stop_reason", "VARCHAR"), ("input_tokens", "BIGINT"),
    ("output_tokens", "BIGINT"), ("latency_s", "DOUBLE"), ("cost_usd", "DOUBLE"),
    ("cache_hit", "BOOLEAN"), ("judge_calls", "BIGINT"), ("judge_errors", "BIGINT"),
    ("judge_input_tokens", "BIGINT"), ("judge_output_tokens", "BIGINT"),
    ("judge_cost_usd", "DOUBLE"),
]  # fmt: skip

STATS_COLUMNS: list[Column] = [
    ("spec", "VARCHAR"), ("model", "VARCHAR"), ("identity", "VARCHAR"),
    ("scorer", "VARCHAR"), ("scorer_type", "VARCHAR"), (PRIMARY, "BOOLEAN"),
    ("scorer_hash", "VARCHAR"), ("dataset_hash", "VARCHAR"), ("n", "BIGINT"),
    ("passed", "BIGINT"), ("pass_rate", "DOUBLE"), ("pass_low", "DOUBLE"),
    ("pass_high", "DOUBLE"), ("scored", "BIGINT"), ("mean_score", "DOUBLE"),
    ("mean_low", "DOUBLE"), ("mean_high", "DOUBLE"), ("confidence", "DOUBLE"),
    ("threshold", "DOUBLE"), ("scorer_errors", "BIGINT"),
    ("input_tokens", "BIGINT"), ("output_tokens", "BIGINT"), ("cost_usd", "DOUBLE"),
    ("cache_hits", "BIGINT"), ("judge_calls", "BIGINT"), ("judge_cache_hits", "BIGINT"),
    ("judge_errors", "BIGINT"), ("judge_input_tokens", "BIGINT"),
    ("judge_output_tokens", "BIGINT"), ("judge_cost_usd", "DOUBLE"), ("run_dir", "VARCHAR"),
]  # fmt: skip


def _ddl(table: str, columns: Sequence[Column]) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'{n} {t}' for n, t in columns)})"


def _ensure_table(
    connection: duckdb.DuckDBPyConnection, table: str, columns: Sequence[Column]
) -> bool:
    """Create the table, or rebuild it when an older gradetrail wrote it with other
    columns (its rows are derived data, written again as partitions re-materialize).
    Returns whether an older table was dropped."""
    found = [
        row[0]
        for row in connection.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]
    rebuilt = bool(found) and found != [name.strip('"') for name, _ in columns]
    if rebuilt:
        connection.execute(f"DROP TABLE {table}")
    connection.execute(_ddl(table, columns))
    return rebuilt


def replace_partition(
    duckdb: DuckDBResource,
    table: str,
    columns: Sequence[Column],
    spec: str,
    model: str,
    rows: Rows | Callable[[], Rows],
    *,
    batch_rows: int | None = None,
    memory_limit: str | None = TABLE_MEMORY_LIMIT,
) -> bool:
    """Swap the rows of one (spec, model) partition in a single transaction, the rows
    taken from `rows` (a stream, or a function that gives one) `batch_rows` (default
    `INSERT_ROWS`) at a time: a failure while they are read leaves the partition's old
    rows. DuckDB's memory is capped at `memory_limit` meanwhile; when the transaction
    cannot fit in it and `rows` is a function, it is done again without the cap, from
    a new stream. Returns whether an older table of other columns was dropped first."""
    stream = rows() if callable(rows) else rows
    try:
        return _replace(duckdb, table, columns, spec, model, stream, batch_rows, memory_limit)
    except (OutOfMemoryException, TransactionException) as exc:
        if memory_limit is None or not callable(rows):
            raise
        log.warning("the %s rows of %s/%s did not fit in %s (%s); again without the limit",
                    table, spec, model, memory_limit, str(exc))  # fmt: skip
        return _replace(duckdb, table, columns, spec, model, rows(), batch_rows, None)


def _replace(
    duckdb: DuckDBResource,
    table: str,
    columns: Sequence[Column],
    spec: str,
    model: str,
    rows: Rows,
    batch_rows: int | None,
    memory_limit: str | None,
) -> bool:
    stream = iter(rows)
    size = batch_rows or INSERT_ROWS
    with duckdb.get_connection() as connection:
        try:
            rebuilt = _ensure_table(connection, table, columns)
            if memory_limit is not None:
                connection.execute(f"SET memory_limit = '{memory_limit}'")
            connection.execute("BEGIN TRANSACTION")
            connection.execute(f"DELETE FROM {table} WHERE spec = ? AND model = ?", [spec, model])
            while batch := list(islice(stream, size)):
                insert_rows(connection, table, columns, batch)
            connection.execute("COMMIT")
        except BaseException:
            # (A COMMIT that failed has ended the transaction already.) The resource
            # closes its connection only when the block ends without an exception.
            with suppress(DuckDBError):
                connection.execute("ROLLBACK")
            connection.close()
            raise
        if memory_limit is not None:
            connection.execute("RESET memory_limit")
    return rebuilt


class Tables(Protocol):
    """Where the `scores` and `stats` tables are (`replace_partition`, `read_stats`)."""

    @property
    def where(self) -> str: ...

    def replace_partition(
        self,
        table: str,
        columns: Sequence[Column],
        spec: str,
        model: str,
        rows: Rows | Callable[[], Rows],
        *,
        batch_rows: int | None = None,
    ) -> bool: ...

    def read_stats(self, spec: str) -> list[dict[str, Any]]: ...


class DuckDBTables:
    """The tables in the DuckDB file `database` (`replace_partition`, `read_stats`)."""

    def __init__(self, database: str) -> None:
        self.where = database
        # The default file's folder (`.gradetrail/`) may not exist yet where the cache is
        # elsewhere (a Postgres cache with a local store): DuckDB would not make it.
        if database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        self._resource = DuckDBResource(database=database)

    def replace_partition(
        self,
        table: str,
        columns: Sequence[Column],
        spec: str,
        model: str,
        rows: Rows | Callable[[], Rows],
        *,
        batch_rows: int | None = None,
    ) -> bool:
        return replace_partition(
            self._resource, table, columns, spec, model, rows, batch_rows=batch_rows
        )

    def read_stats(self, spec: str) -> list[dict[str, Any]]:
        return read_stats(self._resource, spec)


# DuckDB's column types in Postgres's words.
_PG_TYPES = {"VARCHAR": "text", "BIGINT": "bigint", "DOUBLE": "double precision",
             "BOOLEAN": "boolean"}  # fmt: skip


def _text(value: Any) -> str:
    # Postgres's text cannot hold NUL, which a model's answer (and so a reason) may: the
    # tables are derived data, so it becomes U+FFFD there (the run directory keeps it).
    return str(value).replace("\x00", "\ufffd")


# Each column's values as one Python type: psycopg dumps a list by its first value's type.
_PY_TYPES: dict[str, Callable[[Any], Any]] = {
    "VARCHAR": _text, "BIGINT": int, "DOUBLE": float, "BOOLEAN": bool,
}  # fmt: skip


def _pg_arrays(columns: Sequence[Column], batch: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """One list per column, its values of the column's Python type (None kept)."""
    return [
        [None if v is None else _PY_TYPES[kind](v) for v in values]
        for (_, kind), values in zip(columns, zip(*batch, strict=True), strict=True)
    ]


class PostgresTables:
    """The tables in a Postgres database (the store's: `cache.postgres.PostgresDatabase`,
    its pool and its password-free messages). A partition's rows are swapped as in
    DuckDB: the delete and every insert in one transaction, so a reader sees the old rows
    or the new, never a mix; rows go in `INSERT_ROWS` at a time, one array per column."""

    def __init__(self, url: str, *, where: str) -> None:
        self._database = PostgresDatabase(url, where=where, schema=(), what="the tables")
        self.where = where

    def _ensure_table(self, connection: Any, table: str, columns: Sequence[Column]) -> bool:
        """As `_ensure_table` (an older layout is dropped and made again), under the
        schema lock: processes writing partitions at once make a table once."""
        kinds = [(name, _PG_TYPES[kind]) for name, kind in columns]
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", [_TABLES_LOCK])
            found = [
                row[0]
                for row in connection.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                    "current_schema() AND table_name = %s ORDER BY ordinal_position",
                    [table],
                ).fetchall()
            ]
            rebuilt = bool(found) and found != [name.strip('"') for name, _ in columns]
            if rebuilt:
                connection.execute(f"DROP TABLE {table}")
            connection.execute(_ddl(table, kinds))
            if not found or rebuilt:
                # The partition's delete goes through this index.
                connection.execute(
                    f"CREATE INDEX IF NOT EXISTS {table}_partition ON {table} (spec, model)"
                )
        return rebuilt

    def replace_partition(
        self,
        table: str,
        columns: Sequence[Column],
        spec: str,
        model: str,
        rows: Rows | Callable[[], Rows],
        *,
        batch_rows: int | None = None,
    ) -> bool:
        import psycopg

        stream = iter(rows() if callable(rows) else rows)
        size = batch_rows or INSERT_ROWS
        names = ", ".join(name for name, _ in columns)
        arrays = ", ".join(f"%s::{_PG_TYPES[kind]}[]" for _, kind in columns)
        insert = f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays})"
        try:
            with self._database.connection() as connection:
                rebuilt = self._ensure_table(connection, table, columns)
                with connection.transaction():
                    connection.execute(
                        f"DELETE FROM {table} WHERE spec = %s AND model = %s", [spec, model]
                    )
                    while batch := list(islice(stream, size)):
                        connection.execute(insert, _pg_arrays(columns, batch))
        except psycopg.Error as exc:
            raise GradetrailError(
                f"{self.where}: cannot write the {table} rows of {spec}/{model}: "
                f"{self._database.scrub(exc)}"
            ) from None
        return rebuilt

    def read_stats(self, spec: str) -> list[dict[str, Any]]:
        with self._database.connection() as connection:
            self._ensure_table(connection, "stats", STATS_COLUMNS)
            cursor = connection.execute(
                f"SELECT * FROM stats WHERE spec = %s ORDER BY model, {PRIMARY} DESC, scorer",
                [spec],
            )
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


# Names the advisory lock the tables' DDL takes (`cache.postgres` names its own).
_TABLES_LOCK = 0x67740010


def judge_totals(totals: RunTotals, scorer: str | None = None) -> CallTotals:
    """The judge calls of a run (of one scorer's when named), counted as the run summary
    counts them: distinct requests sent, cache hits, errors, tokens, cost."""
    if scorer is None:
        return totals.judge.totals()
    return totals.judge_of(scorer).totals()


def _target_figures(record: TraceRecord) -> tuple[Any, ...]:
    """Request key, tokens in and out, latency, cost and cache hit of the target's call;
    an agent's are its calls' totals (the key is the last call's, a cache hit is every
    call's), as the run summary counts them."""
    calls = list(record.calls_of("target"))
    if len(calls) <= 1:
        target = calls[0] if calls else None
        if target is None:
            return (None,) * 6
        return (target.request_key, target.input_tokens, target.output_tokens,
                target.latency_s, shown_cost(target.provider, target.cost_usd),
                target.cache_hit)  # fmt: skip
    ok = [c for c in calls if c.error is None]

    def total(values: list[Any]) -> Any:
        return sum(values) if ok and None not in values else None

    return (
        calls[-1].request_key, total([c.input_tokens for c in ok]),
        total([c.output_tokens for c in ok]), total([c.latency_s for c in ok]),
        sum_costs([shown_cost(c.provider, c.cost_usd) for c in ok]) if ok else None,
        all(c.cache_hit for c in calls),
    )  # fmt: skip


def score_rows(
    spec: str, model: str, manifest: Manifest, records: Iterable[TraceRecord]
) -> Iterator[tuple[Any, ...]]:
    """One row per (sample, scorer), in record order and the spec's scorer order, as the
    records come (a stream in, a stream out); the target call's figures repeat on each
    of a sample's rows (an agent's: its calls' totals), a judge's are its scorer's."""
    primary = manifest.primary_scorer
    kinds = [(s.name, s.type) for s in manifest.scorers]
    for r in records:
        target = _target_figures(r)
        for name, kind in kinds:
            entry = r.scores.get(name)
            judged = [c for c in r.calls if c.role == "judge" and c.scorer == name]
            judge_cost = sum_costs(
                [shown_cost(c.provider, c.cost_usd) for c in judged if c.error is None]
            )
            yield (
                spec, model, manifest.identity, r.id, r.repeat, name, kind, name == primary,
                r.score_of(name), r.passes(name), entry.reason if entry else None,
                entry.error if entry else None, r.outcome, r.failure_mode,
                target[0], r.stop_reason, *target[1:], len(judged),
                # A judge error as the summary counts it: no usable grade.
                int(entry is not None and entry.error == "judge_error"),
                sum(c.input_tokens or 0 for c in judged),
                sum(c.output_tokens or 0 for c in judged),
                judge_cost if judged else None,
            )  # fmt: skip


def read_stats(duckdb: DuckDBResource, spec: str) -> list[dict[str, Any]]:
    """The spec's stats rows: per model, the primary scorer's first."""
    with duckdb.get_connection() as connection:
        _ensure_table(connection, "stats", STATS_COLUMNS)
        cursor = connection.execute(
            f"SELECT * FROM stats WHERE spec = ? ORDER BY model, {PRIMARY} DESC, scorer", [spec]
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def stats_rows(
    spec: str, model: str, run: Run, figures: dict[str, RunStats], totals: RunTotals
) -> list[tuple[Any, ...]]:
    """One row per scorer, in the spec's order (the primary one first); `totals` are the
    run's (`Run.totals`: its records streamed, none held)."""
    manifest = run.manifest
    rows = []
    for info in manifest.scorers:
        stats = figures[info.name]
        passing, mean = stats.pass_rate, stats.mean_score
        judged = judge_totals(totals, info.name)
        # The run's summary (its manifest) counts a scorer's errors and judge errors.
        figures_of = manifest.scores.get(info.name)
        scorer_errors = figures_of.errors if figures_of is not None else None
        judge_errors = figures_of.judge_errors if figures_of is not None else None
        rows.append(
            (
                spec, model, manifest.identity, info.name, info.type,
                info.name == manifest.primary_scorer, info.hash, manifest.dataset.hash,
                passing.n, passing.successes, passing.value,
                passing.interval.low if passing.interval else None,
                passing.interval.high if passing.interval else None,
                mean.n, mean.value, mean.interval.low if mean.interval else None,
                mean.interval.high if mean.interval else None,
                passing.interval.confidence if passing.interval else None,
                stats.threshold, scorer_errors,
                stats.input_tokens, stats.output_tokens, stats.cost_usd, stats.cache_hits,
                judged.calls, judged.cache_hits, judge_errors, judged.input_tokens,
                judged.output_tokens, judged.cost_usd, str(run.path),
            )
        )  # fmt: skip
    return rows
