"""Datasets: JSONL, one sample per line, each with a unique `id`."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import sha256_hex


# Not frozen, for speed: one per sample (see pipeline.ResultRow).
@dataclass
class Sample:
    id: str
    fields: dict[str, Any]
    line: int


@dataclass(frozen=True)
class Dataset:
    path: Path
    samples: list[Sample]
    content_hash: str

    def __len__(self) -> int:
        return len(self.samples)


def load_dataset(path: Path, shown_as: str | None = None) -> Dataset:
    """Load and validate a JSONL dataset; `shown_as` is the path printed in errors."""
    where = shown_as or str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(where, None, None, f"cannot read dataset: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(where, line, None, "not valid UTF-8") from exc
    samples: list[Sample] = []
    first_line_of: dict[str, int] = {}
    # Split on "\n" only: str.splitlines() also breaks on U+2028, \x1c, \x0c..., which JSON
    # strings may hold raw, and would cut a sample in two and shift every later line number.
    for number, text_line in enumerate(text.split("\n"), start=1):
        if not text_line.strip():
            continue
        try:
            obj = json.loads(text_line)
        except json.JSONDecodeError as exc:
            raise InputError(where, number, None, f"invalid JSON: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise InputError(where, number, None, "each line must be a JSON object")
        if "id" not in obj:
            raise InputError(where, number, "id", "missing")
        sample_id = obj["id"]
        if isinstance(sample_id, bool) or not isinstance(sample_id, str | int):
            raise InputError(where, number, "id", "must be a string or an integer")
        sample_id = str(sample_id)
        if not sample_id:
            raise InputError(where, number, "id", "must not be empty")
        if sample_id in first_line_of:
            raise InputError(
                where,
                number,
                "id",
                f"duplicate id {sample_id!r} (first on line {first_line_of[sample_id]})",
            )
        first_line_of[sample_id] = number
        samples.append(Sample(id=sample_id, fields=obj, line=number))
    if not samples:
        raise InputError(where, None, None, "dataset has no samples")
    return Dataset(path=path, samples=samples, content_hash=sha256_hex(raw))
