"""Exact match after the normalisations the spec turns on."""

import re

from gradetrail_lib.dataset import Sample
from gradetrail_lib.scorers.base import Score, clip, field_value
from gradetrail_lib.spec import ExactScorer


class ExactMatch:
    def __init__(self, config: ExactScorer) -> None:
        self.config = config

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

    def check(self, sample: Sample, dataset_path: str) -> None:
        field_value(sample, self.config.field, dataset_path)

    def score(self, response: str, sample: Sample) -> Score:
        expected = str(sample.fields[self.config.field])
        if self.normalise(response) == self.normalise(expected):
            return Score(1.0, f"matches {clip(expected)!r}")
        return Score(0.0, f"expected {clip(expected)!r}, got {clip(response)!r}")
