"""The response must be a JSON document (a ```json fence around it is allowed)."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from gradetrail_lib.scorers.base import BaseScorer, CallOutcome, Score, ScoreInput, clip
from gradetrail_lib.scorers.json_schema import extract_json
from gradetrail_lib.scorers.registry import ScorerConfig


class Config(ScorerConfig):
    type: Literal["json_valid"]


def build(config: Config, base_dir: Path) -> "JsonValid":
    return JsonValid(config)


class JsonValid(BaseScorer):
    type = "json_valid"

    def __init__(self, config: Config) -> None:
        self.name = config.name

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        try:
            document = extract_json(item.response)
        except json.JSONDecodeError as exc:
            return Score(0.0, f"not JSON ({exc.msg} at line {exc.lineno}): {clip(item.response)!r}")
        return Score(1.0, f"valid JSON ({type(document).__name__})")
