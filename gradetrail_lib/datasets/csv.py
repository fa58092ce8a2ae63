"""CSV, through DuckDB (`read_csv_auto`): the header is line 1, so the first row is line 2."""

from pathlib import Path

from gradetrail_lib.datasets.dataset import Dataset
from gradetrail_lib.datasets.registry import FileSource
from gradetrail_lib.datasets.tables import read_table


def read(path: Path, where: str, id_field: str = "id") -> Dataset:
    return read_table(
        path, where, kind="CSV", reader="read_csv_auto", first=2, unit="line", id_field=id_field
    )


SOURCE = FileSource(format="csv", suffixes=(".csv",), read=read)
