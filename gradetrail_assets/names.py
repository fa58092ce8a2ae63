"""Dagster-safe names derived from spec names (Dagster allows letters, digits and _)."""

import re


def dagster_name(spec_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", spec_name)


def partitions_name(spec_name: str) -> str:
    return f"{dagster_name(spec_name)}__models"


def job_name(spec_name: str) -> str:
    return f"{dagster_name(spec_name)}__eval"


def release_job_name(spec_name: str) -> str:
    return f"{dagster_name(spec_name)}__release"
