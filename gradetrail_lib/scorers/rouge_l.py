"""ROUGE-L F-measure against a sample field: the longest common subsequence of tokens.

Tokens as Google's `rouge-score` makes them without stemming (lower case, runs of
characters other than a-z and 0-9 as separators); tests hold the figures to the values
that package publishes. Its own import (with nltk and absl) would cost more than the
twenty lines here.
"""

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.providers.base import Message
from gradetrail_lib.scorers.base import BaseScorer, CallOutcome, Score, ScoreInput, field_value
from gradetrail_lib.scorers.registry import ScorerConfig

_NON_TOKEN = re.compile(r"[^a-z0-9]+")


class Config(ScorerConfig):
    type: Literal["rouge_l"]
    field: str = "answer"
    beta: float = Field(default=1.0, gt=0, description="Recall weight of the F-measure.")


def build(config: Config, base_dir: Path) -> "RougeL":
    return RougeL(config)


def tokens(text: str) -> list[str]:
    return _NON_TOKEN.sub(" ", text.lower()).split()


def lcs_length(a: list[str], b: list[str]) -> int:
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def rouge_l(reference: str, candidate: str, beta: float = 1.0) -> tuple[float, float, float]:
    """(precision, recall, F-measure) of `candidate` against `reference`."""
    ref, cand = tokens(reference), tokens(candidate)
    if not ref or not cand:
        return 0.0, 0.0, 0.0
    common = lcs_length(ref, cand)
    precision, recall = common / len(cand), common / len(ref)
    if common == 0:
        return 0.0, 0.0, 0.0
    f = (1 + beta**2) * precision * recall / (recall + beta**2 * precision)
    return precision, recall, f


class RougeL(BaseScorer):
    type = "rouge_l"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name = config.name

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        field_value(sample, self.config.field, dataset_path)

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        reference = str(item.sample.fields[self.config.field])
        p, r, f = rouge_l(reference, item.response, self.config.beta)
        return Score(min(1.0, f), f"ROUGE-L F {f:.4f} (precision {p:.4f}, recall {r:.4f})")
