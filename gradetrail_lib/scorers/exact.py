"""Exact match after the normalisations the spec turns on."""

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.providers.base import Message
from gradetrail_lib.scorers.base import (
    BaseScorer,
    CallOutcome,
    Score,
    ScoreInput,
    clip,
    field_value,
)
from gradetrail_lib.scorers.registry import ScorerConfig


class Config(ScorerConfig):
    type: Literal["exact"]
    field: str = "answer"
    strip: bool = True
    lower: bool = True
    collapse_whitespace: bool = True


def build(config: Config, base_dir: Path) -> "ExactMatch":
    return ExactMatch(config)


class ExactMatch(BaseScorer):
    type = "exact"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name = config.name

    def normalise(self, text: str) -> str:
        if self.config.strip:
            text = text.strip()
        if self.config.lower:
            text = text.lower()
        if self.config.collapse_whitespace:
            # Runs of whitespace become one space; the ends are `strip`'s business, so
            # `strip: false` keeps leading/trailing whitespace significant.
            text = re.sub(r"\s+", " ", text)
        return text

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        field_value(sample, self.config.field, dataset_path)

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        response = item.response
        expected = str(item.sample.fields[self.config.field])
        if self.normalise(response) == self.normalise(expected):
            return Score(1.0, f"matches {clip(expected)!r}")
        return Score(0.0, f"expected {clip(expected)!r}, got {clip(response)!r}")
