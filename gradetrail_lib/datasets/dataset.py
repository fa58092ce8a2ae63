"""What every dataset source shares: `Sample`, `Dataset`, the two kinds of source
(`FileSource`, `RefSource`) and the checks of the rows (each needs a unique `id`).

Each row is a sample; `Sample.line` is where an error about it points: the JSONL line, the
CSV file line (the header is line 1, so the first row is line 2; a quoted value spanning
lines shifts the rows after it), the Parquet or Hugging Face row number (from 1).

Content hash: a file's is the sha256 of its bytes (any edit, even one that leaves the rows
equal, is a new dataset); a Hugging Face dataset's is the sha256 of the canonical JSON
(gradetrail_lib.hashing) of the list of its rows, each a JSON object, in order.
"""

import datetime
import decimal
import hashlib
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import Any, Literal

from gradetrail_lib.errors import InputError

# A row and where it is: its line or row number (`Sample.line`).
Row = tuple[int, dict[str, Any]]
# What a row's number counts, as errors name it ("first on line 2", "first on row 1").
Unit = Literal["line", "row"]


# Not frozen, for speed: one per sample.
@dataclass
class Sample:
    id: str
    fields: dict[str, Any]
    line: int


@dataclass(frozen=True)
class Dataset:
    """A dataset's samples, read afresh from its source each time they are iterated (a
    JSONL file is never held whole: a run streams it). `validated()` reads them checking
    every row and that the ids are unique; plain iteration trusts an earlier check."""

    path: Path
    content_hash: str
    # The samples, in order; checked (ids unique, every row valid) when True.
    read: Callable[[bool], Iterator[Sample]]

    def __iter__(self) -> Iterator[Sample]:
        return self.read(False)

    def validated(self) -> Iterator[Sample]:
        return self.read(True)

    @cached_property
    def samples(self) -> list[Sample]:
        """Every sample, validated, in memory (small datasets; a run streams instead)."""
        return list(self.validated())


def in_memory(path: Path, content_hash: str, samples: list[Sample]) -> Dataset:
    """A dataset of samples in memory (checked when they were loaded)."""
    return Dataset(path, content_hash, lambda _check: iter(samples))


def cannot_read(where: str, exc: OSError) -> InputError:
    return InputError(where, None, None, f"cannot read dataset: {exc.strerror}")


def file_hash(where: str, path: Path) -> str:
    """The sha256 of the file's bytes, read a block at a time."""
    try:
        with open(path, "rb") as data:
            return hashlib.file_digest(data, "sha256").hexdigest()
    except OSError as exc:
        raise cannot_read(where, exc) from exc


def first_line(exc: Exception) -> str:
    """The first line of a library's error (DuckDB's, `datasets`'), else its type."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def jsonable_row(where: str, number: int, row: dict[str, Any]) -> dict[str, Any]:
    """The row's values as JSON values (what a JSONL row holds): dates, times, decimals and
    UUIDs become strings; binary and other values are refused, naming the field."""

    def convert(field: str, value: Any) -> Any:
        if value is None or isinstance(value, str | bool | int | float):
            return value
        if isinstance(value, dict):
            return {str(k): convert(field, v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [convert(field, v) for v in value]
        if isinstance(value, datetime.date | datetime.time):
            return value.isoformat()
        if isinstance(value, decimal.Decimal | uuid.UUID | datetime.timedelta):
            return str(value)
        raise InputError(where, number, field, f"unsupported value of type {type(value).__name__}")

    return {str(k): convert(str(k), v) for k, v in row.items()}


# The `id_field` of a table without ids (PIQA, MMLU): a row's id is its index from 0, the
# order lm-eval and oe-eval number a split's documents in; the row holds it under this name.
ROW_INDEX = "#index"


def table_samples(
    where: str, rows: Iterable[Row], unit: Unit, id_field: str = "id"
) -> list[Sample]:
    """The samples of a table's rows (every row has every column), all checked."""
    listed = list(rows)
    if id_field == ROW_INDEX:
        listed = [(n, {ROW_INDEX: i, **row}) for i, (n, row) in enumerate(listed)]
    return list(
        checked_samples(where, listed, lambda: listed, unit, True, tabular=True, id_field=id_field)
    )


def checked_samples(
    where: str,
    rows: Iterable[Row],
    again: Callable[[], Iterable[Row]],
    unit: Unit,
    check: bool,
    tabular: bool,
    id_field: str = "id",
) -> Iterator[Sample]:
    """Samples from numbered rows: each needs a unique, non-empty string or integer `id`
    (in a table, where every row has every column, an empty (null) id is a missing one),
    in the field `id_field` names (`id` unless the spec's `dataset:` says otherwise).
    Uniqueness is checked when `check` is set, through the ids' hashes (4 bytes an id,
    not the ids: `IdHashes`); a hash seen twice is looked at again, in the rows `again()`
    gives, so only true duplicates fail."""
    hashes = IdHashes() if check else None
    count = 0
    for sample in _checked_rows(where, rows, hashes, tabular, id_field):
        count += 1
        yield sample
    if count == 0:
        raise InputError(where, None, None, "dataset has no samples")
    twice = hashes.repeated() if hashes is not None else None
    if twice:
        _first_duplicate(where, again(), unit, twice, id_field)


def _checked_rows(
    where: str, rows: Iterable[Row], ids: "IdHashes | None", tabular: bool, id_field: str
) -> Iterator[Sample]:
    """Each row as a sample, its id checked; the ids' hashes added to `ids`."""
    for number, obj in rows:
        if id_field not in obj or (tabular and obj[id_field] is None):
            raise InputError(where, number, id_field, "missing")
        sample_id = obj[id_field]
        if isinstance(sample_id, bool) or not isinstance(sample_id, str | int):
            raise InputError(where, number, id_field, "must be a string or an integer")
        sample_id = str(sample_id)
        if not sample_id:
            raise InputError(where, number, id_field, "must not be empty")
        if ids is not None:
            ids.add(sample_id)
        yield Sample(id=sample_id, fields=obj, line=number)


class IdHashes:
    """The ids' hashes, 40 bits of each: the low 8 pick one of 256 buckets, the next 32
    are kept in it (4 bytes an id). A run that checks its dataset as it goes holds them
    to its end, beside what DuckDB holds then (half what 8-byte hashes would); each bucket
    is sorted on its own at the end (one sorted list of Python ints is far larger).
    A million ids share a 40-bit hash about once in two datasets; the only cost of that
    is `_first_duplicate`'s second read."""

    BUCKETS = 256

    def __init__(self) -> None:
        self._buckets = [array("I") for _ in range(self.BUCKETS)]

    @classmethod
    def of(cls, sample_id: str) -> tuple[int, int]:
        hashed = hash(sample_id)
        return hashed & (cls.BUCKETS - 1), (hashed >> 8) & 0xFFFFFFFF

    def add(self, sample_id: str) -> None:
        bucket, value = self.of(sample_id)
        self._buckets[bucket].append(value)

    def repeated(self) -> set[tuple[int, int]]:
        """The hashes that occur more than once."""
        twice: set[tuple[int, int]] = set()
        for bucket, values in enumerate(self._buckets):
            ordered = sorted(values)
            pairs = zip(ordered, islice(ordered, 1, None), strict=False)
            twice.update((bucket, a) for a, b in pairs if a == b)
        return twice


def _first_duplicate(
    where: str, rows: Iterable[Row], unit: Unit, hashes: set[tuple[int, int]], id_field: str
) -> None:
    """The first id that is truly repeated, among those whose hash was."""
    first_of: dict[str, int] = {}
    for number, obj in rows:
        sample_id = str(obj[id_field])
        if IdHashes.of(sample_id) not in hashes:
            continue
        if sample_id in first_of:
            raise InputError(
                where,
                number,
                id_field,
                f"duplicate id {sample_id!r} (first on {unit} {first_of[sample_id]})",
            )
        first_of[sample_id] = number
