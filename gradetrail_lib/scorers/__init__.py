"""Scorers: each returns a score in [0, 1] and a reason."""

from gradetrail_lib.scorers.base import Score, Scorer, build_scorer

__all__ = ["Score", "Scorer", "build_scorer"]
