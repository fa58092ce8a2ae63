"""Parquet, through DuckDB (`read_parquet`): rows count from 1."""

from pathlib import Path

from gradetrail_lib.datasets.dataset import Dataset
from gradetrail_lib.datasets.registry import FileSource
from gradetrail_lib.datasets.tables import read_table


def read(path: Path, where: str, id_field: str = "id") -> Dataset:
    return read_table(
        path, where, kind="PARQUET", reader="read_parquet", first=1, unit="row", id_field=id_field
    )


SOURCE = FileSource(format="parquet", suffixes=(".parquet",), read=read)
