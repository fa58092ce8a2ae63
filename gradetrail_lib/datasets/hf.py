"""A Hugging Face dataset (`dataset: {hf: owner/name, split, revision}`) at a fixed commit,
through the `datasets` library (the `gradetrail[hf]` extra). Its rows are numbered from 1;
its content hash is hash_json of the list of its rows."""

from pathlib import Path
from typing import TYPE_CHECKING

from gradetrail_lib.datasets.dataset import (
    Dataset,
    first_line,
    in_memory,
    jsonable_row,
    table_samples,
)
from gradetrail_lib.datasets.registry import RefSource
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import hash_json

if TYPE_CHECKING:  # defined after the sources are loaded (its `format:` choices are theirs)
    from gradetrail_lib.datasets.registry import DatasetRef


def load_hf_dataset(ref: "DatasetRef") -> Dataset:
    """A Hugging Face dataset at a fixed commit through `datasets.load_dataset`. Offline
    (HF_HUB_OFFLINE=1 or HF_DATASETS_OFFLINE=1, or no network) `datasets` reads its local
    cache (HF_DATASETS_CACHE), which holds a Hub dataset under
    `<owner>___<name>/<config>/<version>/<commit>/`; a cached copy of another commit is
    refused, so a run reads exactly the revision the spec names."""
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
        raise InputError(where, None, None, f"cannot load dataset: {first_line(exc)}") from exc
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
        (number, jsonable_row(where, number, dict(row)))
        for number, row in enumerate(loaded, start=1)
    ]
    samples = table_samples(where, rows, "row", ref.id_field or "id")
    path = files[0].parent if files else Path(where)
    return in_memory(path, hash_json([r for _, r in rows]), samples)


SOURCE = RefSource(key="hf", load=load_hf_dataset)
