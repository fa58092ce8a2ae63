"""Datasets: samples with a unique id, from JSONL, CSV, Parquet or Hugging Face."""
