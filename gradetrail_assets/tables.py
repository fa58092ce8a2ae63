"""Result tables in DuckDB, written per partition: delete and insert in one transaction."""

from collections.abc import Sequence
from typing import Any

from dagster_duckdb import DuckDBResource

from gradetrail_lib.duckdb_rows import Column, insert_rows
from gradetrail_lib.pipeline import ResultRow
from gradetrail_lib.runs import Run
from gradetrail_lib.stats import RunStats

SCORE_COLUMNS: list[Column] = [
    ("spec", "VARCHAR"), ("model", "VARCHAR"), ("identity", "VARCHAR"), ("id", "VARCHAR"),
    ("request_key", "VARCHAR"), ("score", "DOUBLE"), ("outcome", "VARCHAR"),
    ("failure_mode", "VARCHAR"), ("reason", "VARCHAR"), ("stop_reason", "VARCHAR"),
    ("input_tokens", "BIGINT"), ("output_tokens", "BIGINT"), ("latency_s", "DOUBLE"),
    ("cost_usd", "DOUBLE"), ("cache_hit", "BOOLEAN"),
]  # fmt: skip

STATS_COLUMNS: list[Column] = [
    ("spec", "VARCHAR"), ("model", "VARCHAR"), ("identity", "VARCHAR"),
    ("scorer_hash", "VARCHAR"), ("dataset_hash", "VARCHAR"), ("n", "BIGINT"),
    ("passed", "BIGINT"), ("pass_rate", "DOUBLE"), ("pass_low", "DOUBLE"),
    ("pass_high", "DOUBLE"), ("scored", "BIGINT"), ("mean_score", "DOUBLE"),
    ("mean_low", "DOUBLE"), ("mean_high", "DOUBLE"), ("confidence", "DOUBLE"),
    ("input_tokens", "BIGINT"), ("output_tokens", "BIGINT"), ("cost_usd", "DOUBLE"),
    ("cache_hits", "BIGINT"), ("run_dir", "VARCHAR"),
]  # fmt: skip


def _ddl(table: str, columns: Sequence[Column]) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'{n} {t}' for n, t in columns)})"


def replace_partition(
    duckdb: DuckDBResource,
    table: str,
    columns: Sequence[Column],
    spec: str,
    model: str,
    rows: Sequence[Sequence[Any]],
) -> None:
    """Swap the rows of one (spec, model) partition in a single transaction."""
    with duckdb.get_connection() as connection:
        connection.execute(_ddl(table, columns))
        connection.execute("BEGIN TRANSACTION")
        try:
            connection.execute(f"DELETE FROM {table} WHERE spec = ? AND model = ?", [spec, model])
            insert_rows(connection, table, columns, rows)
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise


def score_rows(
    spec: str, model: str, identity: str, rows: list[ResultRow]
) -> list[tuple[Any, ...]]:
    return [
        (
            spec, model, identity, r.id, r.request_key, r.score, r.outcome, r.failure_mode,
            r.reason, r.stop_reason, r.input_tokens, r.output_tokens, r.latency_s, r.cost_usd,
            r.cache_hit,
        )
        for r in rows
    ]  # fmt: skip


def read_stats(duckdb: DuckDBResource, spec: str) -> list[dict[str, Any]]:
    with duckdb.get_connection() as connection:
        connection.execute(_ddl("stats", STATS_COLUMNS))
        cursor = connection.execute("SELECT * FROM stats WHERE spec = ? ORDER BY model", [spec])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def stats_row(spec: str, model: str, run: Run, figures: RunStats) -> tuple[Any, ...]:
    manifest = run.manifest
    passing, mean = figures.pass_rate, figures.mean_score
    return (
        spec, model, manifest["identity"], manifest.get("scorer_hash"),
        manifest.get("dataset", {}).get("hash"), passing.n, passing.successes, passing.value,
        passing.interval.low if passing.interval else None,
        passing.interval.high if passing.interval else None,
        mean.n, mean.value, mean.interval.low if mean.interval else None,
        mean.interval.high if mean.interval else None,
        passing.interval.confidence if passing.interval else None,
        figures.input_tokens, figures.output_tokens, figures.cost_usd, figures.cache_hits,
        str(run.path),
    )  # fmt: skip
