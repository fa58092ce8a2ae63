"""Datasets: samples with a unique id, from the sources in `registry` (JSONL, CSV and
Parquet files, Hugging Face)."""

# The registry first: the sources it loads import it back for their `FileSource` /
# `RefSource`, so it must be there before any of them.
from gradetrail_lib.datasets.registry import (  # isort: skip
    DatasetRef,
    dataset_format,
    load_dataset,
    load_dataset_ref,
)
from gradetrail_lib.datasets.dataset import Dataset, Sample  # isort: skip
from gradetrail_lib.datasets.hf import load_hf_dataset  # isort: skip

__all__ = [
    "Dataset",
    "DatasetRef",
    "Sample",
    "dataset_format",
    "load_dataset",
    "load_dataset_ref",
    "load_hf_dataset",
]
