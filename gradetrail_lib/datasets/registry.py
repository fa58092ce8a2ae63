"""Every dataset source, by name. A new source is one module here plus its name in
`SOURCE_MODULES`: the module defines `SOURCE`, either a `FileSource` (its `format:` name,
the file suffixes that stand for it, and `read(path, where)`) or a `RefSource` (the key of
the spec's `dataset:` that names it, a field of `DatasetRef`, and `load(ref)`).

Modules are cheap to import (DuckDB and `datasets` load when a file is read), because the
spec's `format:` choices come from here when `DatasetRef` is defined.
"""

from functools import cache
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from gradetrail_lib.datasets.dataset import Dataset, FileSource, RefSource

if TYPE_CHECKING:
    from gradetrail_lib.datasets.ref import DatasetRef

# In this order the `format:` choices are listed.
SOURCE_MODULES = ("jsonl", "csv", "parquet", "hf")
# The format of a file whose suffix names none.
DEFAULT_FORMAT = "jsonl"


@cache
def sources() -> tuple[FileSource | RefSource, ...]:
    return tuple(import_module(f"gradetrail_lib.datasets.{name}").SOURCE for name in SOURCE_MODULES)


@cache
def file_sources() -> dict[str, FileSource]:
    """The file formats by their `format:` name."""
    return {s.format: s for s in sources() if isinstance(s, FileSource)}


def format_names() -> tuple[str, ...]:
    """The choices of the spec's `format:`."""
    return tuple(file_sources())


def dataset_format(path: Path, given: str | None = None) -> str:
    """The format named in the spec, else the one of the file's suffix; JSONL otherwise."""
    if given:
        return given
    suffix = path.suffix.lower()
    for source in file_sources().values():
        if suffix in source.suffixes:
            return source.format
    return DEFAULT_FORMAT


def load_dataset(path: Path, shown_as: str | None = None, format: str | None = None) -> Dataset:
    """Load a dataset file (its rows are checked as they are read: a JSONL file as it is
    iterated, a table now); `shown_as` is the path printed in errors."""
    kind = dataset_format(path, format)
    source = file_sources().get(kind)
    if source is None:
        raise ValueError(f"unknown dataset format {kind!r} (one of {', '.join(format_names())})")
    return source.read(path, shown_as or str(path))


def load_dataset_ref(ref: "DatasetRef", base_dir: Path) -> Dataset:
    """The spec's `dataset:`, a file relative to `base_dir` or the source its key names
    (`hf`: a Hugging Face dataset)."""
    if ref.path is not None:
        return load_dataset((base_dir / ref.path).resolve(), ref.path, ref.format)
    for source in sources():
        if isinstance(source, RefSource) and getattr(ref, source.key) is not None:
            return source.load(ref)
    raise ValueError(f"dataset {ref.label}: no source reads it")
