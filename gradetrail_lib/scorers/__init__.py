"""Scorers: each returns a score in [0, 1] and a reason (see `base` and `registry`)."""

from gradetrail_lib.scorers.base import (
    BaseScorer,
    CallOutcome,
    Score,
    ScoreFailed,
    ScoreInput,
    Scorer,
)
from gradetrail_lib.scorers.registry import ScorerConfig, build_scorer

__all__ = [
    "BaseScorer",
    "CallOutcome",
    "Score",
    "ScoreFailed",
    "ScoreInput",
    "Scorer",
    "ScorerConfig",
    "build_scorer",
]
