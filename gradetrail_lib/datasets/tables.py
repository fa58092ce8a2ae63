"""A table file read through DuckDB (CSV, Parquet): its rows, numbered, as JSON values."""

from collections.abc import Iterator
from pathlib import Path

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


def read_table(
    path: Path, where: str, *, kind: str, reader: str, first: int, unit: Unit, id_field: str = "id"
) -> Dataset:
    """The file's dataset, every row checked: `reader` is the DuckDB table function that
    reads it, `first` the number of its first row (counted in `unit`s); `kind` names the
    format in errors (`cannot read CSV: ...`)."""
    digest = file_hash(where, path)
    rows = _rows(path, where, kind, reader, first)
    return in_memory(path, digest, table_samples(where, rows, unit, id_field))


def _rows(path: Path, where: str, kind: str, reader: str, first: int) -> Iterator[Row]:
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        try:
            cursor = con.execute(f"SELECT * FROM {reader}(?)", [str(path)])
            names = [d[0] for d in cursor.description or []]
            values = cursor.fetchall()
        except duckdb.Error as exc:
            raise InputError(where, None, None, f"cannot read {kind}: {first_line(exc)}") from exc
    finally:
        con.close()
    for offset, row in enumerate(values):
        number = first + offset
        yield number, jsonable_row(where, number, dict(zip(names, row, strict=True)))
