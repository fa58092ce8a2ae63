"""Datasets: samples with a unique id, from the sources in `registry` (JSONL, CSV and
Parquet files, Hugging Face)."""

from gradetrail_lib.datasets.dataset import Dataset, Sample
from gradetrail_lib.datasets.hf import load_hf_dataset
from gradetrail_lib.datasets.ref import DatasetRef
from gradetrail_lib.datasets.registry import dataset_format, load_dataset, load_dataset_ref

__all__ = [
    "Dataset",
    "DatasetRef",
    "Sample",
    "dataset_format",
    "load_dataset",
    "load_dataset_ref",
    "load_hf_dataset",
]
