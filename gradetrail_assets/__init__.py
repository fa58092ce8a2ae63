"""Dagster definitions built on the gradetrail engine."""
