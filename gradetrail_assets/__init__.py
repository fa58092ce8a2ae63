"""Dagster definitions built on the gradetrail engine; `GradetrailComponent` adds them to a
`dg` project (registered for `dg` by the `dagster_dg_cli.registry_modules` entry point)."""

from gradetrail_assets.component import GradetrailComponent

__all__ = ["GradetrailComponent"]
