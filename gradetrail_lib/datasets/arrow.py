"""A Hugging Face Arrow file (`datasets`' own storage: an Arrow IPC stream, as
`Dataset.save_to_disk` and the `datasets` cache write it), read through pyarrow (which
the `gradetrail[hf]` extra brings). Rows count from 1.
A split without an id column (PIQA, Winogrande) takes `id_field: "#index"`
(`dataset.ROW_INDEX`): each row's id is its index in the file from 0."""

from pathlib import Path

from gradetrail_lib.datasets.dataset import (
    Dataset,
    file_hash,
    first_line,
    in_memory,
    jsonable_row,
    table_samples,
)
from gradetrail_lib.datasets.registry import FileSource
from gradetrail_lib.errors import InputError


def read(path: Path, where: str, id_field: str = "id") -> Dataset:
    try:
        import pyarrow as pa
    except ImportError as exc:
        raise InputError(
            where, None, "dataset", "Arrow files need pyarrow: pip install 'gradetrail[hf]'"
        ) from exc
    digest = file_hash(where, path)
    try:
        with pa.memory_map(str(path)) as source:
            try:
                table = pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:  # the file format rather than the stream one
                table = pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowException) as exc:
        raise InputError(where, None, None, f"cannot read Arrow: {first_line(exc)}") from exc
    rows = [(n, jsonable_row(where, n, row)) for n, row in enumerate(table.to_pylist(), start=1)]
    return in_memory(path, digest, table_samples(where, rows, "row", id_field))


SOURCE = FileSource(format="arrow", suffixes=(".arrow",), read=read)
