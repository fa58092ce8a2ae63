"""A sample's reference for the labelling queue and the sample page: its fields in the
run's own dataset file, read through the datasets package's loader (the one that reads
it for a run), and only when the file's content hash is still the manifest's.

The manifest records which dataset file a run read (relative to the spec's folder, or a
package's data file) and its hash, but not which fields its scorers compare against
(that is in the spec's scorer configs and templates, which may have changed since). So
the reference shown is every field of the sample but its id; the page says so. Nor does
it record the field holding the ids (`id_field`): that one is read from the spec while
the spec's hash is still the manifest's (`id_field`).

The samples are held as a dict of id -> fields per dataset file, kept for the last few
files and re-read only when a file's signature (device, inode, mtime, size) changes.
That is fine at today's dataset sizes (tens of thousands of short rows); a dataset of
millions of long rows would want an offset index like the results file's instead, so a
file over `MAX_BYTES` is not read (its reference is unavailable, and says why): the
viewer's memory stays bounded.
"""

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail_lib.datasets import load_dataset
from gradetrail_lib.datasets.dataset import file_hash
from gradetrail_lib.errors import GradetrailError, InputError
from gradetrail_lib.report.media import dataset_file
from gradetrail_lib.results.trace import Manifest
from gradetrail_lib.spec.identity import spec_hash
from gradetrail_lib.spec.spec import load_spec
from gradetrail_lib.viewer.index import Signature, signature

DATASETS_KEPT = 4
DEFAULT_ID_FIELD = "id"
MAX_BYTES = 64 * 1024 * 1024

# What a cached dataset file is: its samples' fields by id, or why they are unavailable.
Loaded = dict[str, dict[str, Any]] | str


@dataclass(frozen=True)
class ReferenceField:
    name: str
    text: str  # capped; the template's finalize makes it `visible`


@dataclass(frozen=True)
class SampleReference:
    fields: tuple[ReferenceField, ...]
    # Why there is no reference ("the dataset file ... has changed since this run"); None
    # when `fields` came from the run's own dataset.
    problem: str | None


def id_field(manifest: Manifest) -> str:
    """The field holding each sample's id (the spec's `dataset.id_field`, `task_id` for
    HumanEval): the manifest does not record it, so it is read from the spec, and only
    while the spec is still the one the run read (its hash); `id` otherwise."""
    try:
        loaded = load_spec(manifest.spec.path)
    except (GradetrailError, OSError, ValueError):
        return DEFAULT_ID_FIELD
    if spec_hash(loaded) != manifest.spec.hash:
        return DEFAULT_ID_FIELD
    return loaded.spec.dataset.id_field or DEFAULT_ID_FIELD


def field_text(value: Any, cap: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > cap:
        return f"{text[:cap]}… (cut at {cap:,} characters)"
    return text


class DatasetShelf:
    """The dataset files the viewer has read, by path and signature (thread-safe)."""

    def __init__(self, kept: int = DATASETS_KEPT, max_bytes: int = MAX_BYTES) -> None:
        self.kept = kept
        self.max_bytes = max_bytes
        self._loaded: OrderedDict[tuple[Path, Signature, str, str], Loaded] = OrderedDict()
        self._lock = threading.Lock()
        self.reads = 0  # files read so far (the tests check the cache with it)

    def samples(self, manifest: Manifest) -> Loaded:
        where = dataset_file(manifest)
        if isinstance(where, str):
            return where
        try:
            sig = signature(where.stat())
        except OSError as exc:
            return f"cannot read the dataset file {where}: {exc.strerror}"
        if sig[3] > self.max_bytes:
            return (
                f"the dataset file {where} is over {self.max_bytes:,} bytes, "
                "more than the viewer holds in memory"
            )
        key = (where, sig, manifest.dataset.hash, manifest.spec.hash)
        with self._lock:
            found = self._loaded.get(key)
        if found is not None:
            return found
        loaded = self._read(where, manifest)
        try:
            unchanged = signature(where.stat()) == sig
        except OSError:
            unchanged = False
        if unchanged:  # else it changed while being read: read it again next time
            with self._lock:
                self._loaded[key] = loaded
                while len(self._loaded) > self.kept:
                    self._loaded.popitem(last=False)
        return loaded

    def _read(self, where: Path, manifest: Manifest) -> Loaded:
        self.reads += 1
        try:
            if file_hash(str(where), where) != manifest.dataset.hash:
                return f"the dataset file {where} has changed since this run (its hash differs)"
            field = id_field(manifest)
            dataset = load_dataset(where, id_field=field)
            return {
                s.id: {k: v for k, v in s.fields.items() if k != field} for s in dataset.validated()
            }
        except (InputError, ValueError) as exc:
            return f"the dataset file {where} cannot be read: {exc}"

    def reference(self, manifest: Manifest, sample_id: str, cap: int) -> SampleReference:
        """Every field of the sample but its id (`id_field`), each cut at `cap` characters."""
        loaded = self.samples(manifest)
        if isinstance(loaded, str):
            return SampleReference(fields=(), problem=loaded)
        fields = loaded.get(sample_id)
        if fields is None:
            return SampleReference(
                fields=(), problem=f"the dataset file has no sample {sample_id!r}"
            )
        return SampleReference(
            fields=tuple(
                ReferenceField(name=name, text=field_text(value, cap))
                for name, value in fields.items()
            ),
            problem=None,
        )
