"""Another Dagster asset's value as a dataset file (a spec's `dataset: {asset: KEY}`).

The Dagster layer hands the value over as it got it from the asset's IO manager: rows (a
list of mappings) or a data frame (pandas' `to_dict("records")`, polars' `to_dicts()`).
Written as JSONL, each row as canonical JSON (keys sorted; dates, decimals and UUIDs as
text, as a table's rows are), the file named by the sha256 of its bytes: the same rows in
the same order are the same file, so the same content hash, data version and run
identity, and other rows another file (an earlier one is left for the runs that used it).
"""

import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gradetrail_lib.datasets.dataset import jsonable_row
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import canonical_json


def value_rows(value: Any, where: str) -> Iterator[dict[str, Any]]:
    """The rows of an asset's value, each a dict; anything else is refused naming `where`."""
    for method, args in (("to_dicts", ()), ("to_dict", ("records",))):
        convert = getattr(value, method, None)
        if callable(convert) and not isinstance(value, Mapping):
            value = convert(*args)
            break
    if isinstance(value, Mapping | str | bytes) or not hasattr(value, "__iter__"):
        raise InputError(
            where, None, None,
            f"an asset dataset's value must be rows (a list of mappings) or a data frame, "
            f"not {type(value).__name__}",
        )  # fmt: skip
    for number, row in enumerate(value, start=1):
        if not isinstance(row, Mapping):
            raise InputError(where, number, None, f"row is {type(row).__name__}, not a mapping")
        yield jsonable_row(where, number, dict(row))


def write_rows(value: Any, folder: Path, where: str) -> Path:
    """The asset's rows as a JSONL file in `folder`, named by its content's sha256 (made
    once: written beside it and renamed into place, so a reader never sees half of it)."""
    data = "".join(canonical_json(row) + "\n" for row in value_rows(value, where)).encode()
    if not data:
        raise InputError(where, None, None, "dataset has no samples")
    path = folder / f"{hashlib.sha256(data).hexdigest()}.jsonl"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    handle, staged = tempfile.mkstemp(prefix=".staging-", suffix=".jsonl", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise
    return path
