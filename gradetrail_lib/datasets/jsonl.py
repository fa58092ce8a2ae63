"""JSONL (or gzipped, `.jsonl.gz`): a JSON object a line, streamed (a run never holds the
file whole); blank lines are skipped and keep their numbers."""

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from gradetrail_lib.datasets.dataset import (
    Dataset,
    Row,
    Sample,
    cannot_read,
    checked_samples,
    file_hash,
)
from gradetrail_lib.datasets.registry import FileSource
from gradetrail_lib.errors import InputError


def read(path: Path, where: str, id_field: str = "id") -> Dataset:
    # Hashed now, read (and checked) as it is iterated: a run streams the file.
    digest = file_hash(where, path)
    return Dataset(path, digest, lambda check: _samples(where, path, check, id_field))


SOURCE = FileSource(format="jsonl", suffixes=(".jsonl", ".jsonl.gz"), read=read)


def _open(path: Path) -> BinaryIO:
    """The file's bytes, decompressed when its name ends in .gz."""
    if path.name.lower().endswith(".gz"):
        return cast(BinaryIO, gzip.open(path, "rb"))
    return open(path, "rb")  # noqa: SIM115 (the caller closes it)


def _samples(where: str, path: Path, check: bool, id_field: str) -> Iterator[Sample]:
    """A JSONL file's samples, line by line. Split on "\\n" only: str.splitlines() also
    breaks on U+2028, \\x1c, \\x0c..., which JSON strings may hold raw, and would cut a
    sample in two and shift every later line number."""
    try:
        data = _open(path)  # closed below, also when abandoned
    except OSError as exc:
        raise cannot_read(where, exc) from exc

    def again() -> Iterator[Row]:
        with _open(path) as lines:
            yield from _rows(where, lines)

    with data:
        rows = _rows(where, data)
        yield from checked_samples(
            where, rows, again, "line", check, tabular=False, id_field=id_field
        )


def _rows(where: str, lines: Iterable[bytes]) -> Iterator[Row]:
    try:
        yield from _parsed(where, lines)
    except (OSError, EOFError) as exc:  # a damaged or truncated .gz, found as it is read
        raise InputError(where, None, None, f"cannot read or decompress: {exc}") from exc


def _parsed(where: str, lines: Iterable[bytes]) -> Iterator[Row]:
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
