"""Bulk inserts into DuckDB.

DuckDB's executemany costs milliseconds per row (docs/performance.md), so rows go in as
one typed array per column, unnested in a single statement.
"""

from collections.abc import Sequence
from typing import Any

import duckdb

Column = tuple[str, str]  # (name, DuckDB type)


def insert_rows(
    connection: duckdb.DuckDBPyConnection,
    table: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Any]],
) -> None:
    if not rows:
        return
    arrays = [list(values) for values in zip(*rows, strict=True)]
    names = ", ".join(name for name, _ in columns)
    selects = ", ".join(f"unnest(${i + 1}::{kind}[])" for i, (_, kind) in enumerate(columns))
    connection.execute(f"INSERT INTO {table} ({names}) SELECT {selects}", arrays)
