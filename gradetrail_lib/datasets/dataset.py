"""Datasets: rows with a unique `id`, from a JSONL, CSV or Parquet file or a Hugging Face
dataset.

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
import json
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gradetrail_lib.datasets.ref import DatasetRef
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import hash_json, sha256_hex

if TYPE_CHECKING:
    from gradetrail_lib.datasets.ref import DatasetRef

Format = Literal["jsonl", "csv", "parquet"]
_SUFFIXES: dict[str, Format] = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}


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

def _listed(samples: list[Sample]) -> Dataset:
    """`Dataset` fields of samples in memory (checked when they were loaded)."""
    return Dataset(Path(), "", lambda _check: iter(samples))


def dataset_format(path: Path, given: Format | None = None) -> Format:
    """The format named in the spec, else the one of the file's suffix; JSONL otherwise."""
    return given or _SUFFIXES.get(path.suffix.lower(), "jsonl")


def load_dataset(path: Path, shown_as: str | None = None, format: Format | None = None) -> Dataset:
    """Load and validate a dataset file; `shown_as` is the path printed in errors."""
    where = shown_as or str(path)
    kind = dataset_format(path, format)
    if kind == "jsonl":
        # Hashed now, read (and checked) as it is iterated: a run streams the file.
        digest = _file_hash(where, path)
        return Dataset(path, digest, lambda check: _jsonl_samples(where, path, check))
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(where, None, None, f"cannot read dataset: {exc.strerror}") from exc
    unit: Literal["line", "row"] = "line" if kind == "csv" else "row"
    samples = _samples(where, _duckdb_rows(where, path, kind), unit)
    return replace(_listed(samples), path=path, content_hash=sha256_hex(raw))


def _file_hash(where: str, path: Path) -> str:
    try:
        with open(path, "rb") as data:
            return hashlib.file_digest(data, "sha256").hexdigest()
    except OSError as exc:
        raise InputError(where, None, None, f"cannot read dataset: {exc.strerror}") from exc


def load_dataset_ref(ref: DatasetRef, base_dir: Path) -> Dataset:
    """The spec's `dataset:`, a file relative to `base_dir` or a Hugging Face dataset."""
    if ref.path is not None:
        return load_dataset((base_dir / ref.path).resolve(), ref.path, ref.format)
    return load_hf_dataset(ref)


def _jsonl_samples(where: str, path: Path, check: bool) -> Iterator[Sample]:
    """A JSONL file's samples, line by line. Split on "\\n" only: str.splitlines() also
    breaks on U+2028, \\x1c, \\x0c..., which JSON strings may hold raw, and would cut a
    sample in two and shift every later line number."""
    try:
        data = open(path, "rb")  # noqa: SIM115 (closed below, also when abandoned)
    except OSError as exc:
        raise InputError(where, None, None, f"cannot read dataset: {exc.strerror}") from exc

    def again() -> Iterator[tuple[int, dict[str, Any]]]:
        with open(path, "rb") as lines:
            yield from _jsonl_rows(where, lines)

    with data:
        rows = _jsonl_rows(where, data)
        yield from _samples_of(where, rows, again, "line", check, tabular=False)


def _jsonl_rows(where: str, lines: Iterable[bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, raw in enumerate(lines, start=1):
        try:
            text_line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(where, number, None, "not valid UTF-8") from exc
        if not text_line.strip():
            continue
        try:
            obj = json.loads(text_line)
        except json.JSONDecodeError as exc:
            raise InputError(where, number, None, f"invalid JSON: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise InputError(where, number, None, "each line must be a JSON object")
        yield number, obj


def _duckdb_rows(
    where: str, path: Path, kind: Literal["csv", "parquet"]
) -> Iterator[tuple[int, dict[str, Any]]]:
    import duckdb

    reader = "read_csv_auto" if kind == "csv" else "read_parquet"
    # CSV: the header is line 1, the first row line 2. Parquet: rows count from 1.
    first = 2 if kind == "csv" else 1
    con = duckdb.connect(":memory:")
    try:
        try:
            cursor = con.execute(f"SELECT * FROM {reader}(?)", [str(path)])
            names = [d[0] for d in cursor.description or []]
            values = cursor.fetchall()
        except duckdb.Error as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(where, None, None, f"cannot read {kind.upper()}: {message}") from exc
    finally:
        con.close()
    for offset, row in enumerate(values):
        number = first + offset
        yield number, _jsonable_row(where, number, dict(zip(names, row, strict=True)))


def _jsonable_row(where: str, number: int, row: dict[str, Any]) -> dict[str, Any]:
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


def _samples(
    where: str,
    rows: Iterable[tuple[int, dict[str, Any]]],
    unit: Literal["line", "row"],
    tabular: bool = True,
) -> list[Sample]:
    listed = list(rows)
    return list(_samples_of(where, listed, lambda: listed, unit, True, tabular))


def _samples_of(
    where: str,
    rows: Iterable[tuple[int, dict[str, Any]]],
    again: Callable[[], Iterable[tuple[int, dict[str, Any]]]],
    unit: Literal["line", "row"],
    check: bool,
    tabular: bool = True,
) -> Iterator[Sample]:
    """Samples from numbered rows: each needs a unique, non-empty string or integer `id`
    (in a table, where every row has every column, an empty (null) id is a missing one).
    Uniqueness is checked when `check` is set, through the ids' hashes (4 bytes an id,
    not the ids: `IdHashes`); a hash seen twice is looked at again, so only true
    duplicates fail."""
    hashes = IdHashes() if check else None
    count = 0
    for sample in _checked_rows(where, rows, hashes, tabular):
        count += 1
        yield sample
    if count == 0:
        raise InputError(where, None, None, "dataset has no samples")
    twice = hashes.repeated() if hashes is not None else None
    if twice:
        _first_duplicate(where, again(), unit, twice)


def _checked_rows(
    where: str,
    rows: Iterable[tuple[int, dict[str, Any]]],
    ids: "IdHashes | None",
    tabular: bool,
) -> Iterator[Sample]:
    """Each row as a sample, its id checked; the ids' hashes added to `ids`."""
    for number, obj in rows:
        if "id" not in obj or (tabular and obj["id"] is None):
            raise InputError(where, number, "id", "missing")
        sample_id = obj["id"]
        if isinstance(sample_id, bool) or not isinstance(sample_id, str | int):
            raise InputError(where, number, "id", "must be a string or an integer")
        sample_id = str(sample_id)
        if not sample_id:
            raise InputError(where, number, "id", "must not be empty")
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
    where: str,
    rows: Iterable[tuple[int, dict[str, Any]]],
    unit: str,
    hashes: set[tuple[int, int]],
) -> None:
    """The first id that is truly repeated, among those whose hash was."""
    first_of: dict[str, int] = {}
    for number, obj in rows:
        sample_id = str(obj["id"])
        if IdHashes.of(sample_id) not in hashes:
            continue
        if sample_id in first_of:
            raise InputError(
                where,
                number,
                "id",
                f"duplicate id {sample_id!r} (first on {unit} {first_of[sample_id]})",
            )
        first_of[sample_id] = number


def load_hf_dataset(ref: DatasetRef) -> Dataset:
    """A Hugging Face dataset at a fixed commit through `datasets.load_dataset` (the
    `gradetrail[hf]` extra). Offline (HF_HUB_OFFLINE=1 or HF_DATASETS_OFFLINE=1, or no
    network) `datasets` reads its local cache (HF_DATASETS_CACHE), which holds a Hub
    dataset under `<owner>___<name>/<config>/<version>/<commit>/`; a cached copy of
    another commit is refused, so a run reads exactly the revision the spec names."""
    where = ref.label
    try:
        import datasets
    except ImportError as exc:
        raise InputError(
            where, None, "dataset.hf", "needs the optional extra: pip install 'gradetrail[hf]'"
        ) from exc
    try:
        loaded = datasets.load_dataset(ref.hf, ref.config, split=ref.split, revision=ref.revision)
    except Exception as exc:  # datasets raises many types (network, cache, config, split)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(where, None, None, f"cannot load dataset: {message}") from exc
    files = [Path(f["filename"]) for f in getattr(loaded, "cache_files", [])]
    if files and files[0].parent.name != ref.revision:
        raise InputError(
            where,
            None,
            "dataset.revision",
            f"the local copy ({files[0].parent}) is of revision {files[0].parent.name}, "
            f"not {ref.revision}",
        )
    rows = [
        (number, _jsonable_row(where, number, dict(row)))
        for number, row in enumerate(loaded, start=1)
    ]
    samples = _samples(where, rows, "row")
    path = files[0].parent if files else Path(where)
    return replace(_listed(samples), path=path, content_hash=hash_json([r for _, r in rows]))
