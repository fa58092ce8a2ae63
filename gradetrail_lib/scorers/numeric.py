"""Numeric match with absolute and relative tolerance."""

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
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
    type: Literal["numeric"]
    field: str = "answer"
    abs_tol: float = Field(default=0.0, ge=0)
    rel_tol: float = Field(default=0.0, ge=0)
    # `group` comes before `pattern` so the pattern's validator can see it.
    group: str = "value"
    pattern: str | None = Field(
        default=None, description="Regex with a named group; default: the last number."
    )
    # Where the expected number is in the field, when the field holds more (GSM8K's worked
    # answer ends "#### 72"): a regex whose `value` group is the number.
    expected_pattern: str | None = None

    @field_validator("expected_pattern")
    @classmethod
    def _check_expected_pattern(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regex: {exc}") from exc
            if "value" not in compiled.groupindex:
                raise ValueError("expected_pattern needs a group named value: (?P<value>...)")
        return pattern

    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, pattern: str | None, info: ValidationInfo) -> str | None:
        if pattern is not None:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern does not compile: {exc}") from exc
            group = info.data.get("group")  # absent when `group` itself is invalid
            if group is not None and group not in compiled.groupindex:
                raise ValueError(f"pattern has no named group {group!r}")
        return pattern


def build(config: Config, base_dir: Path) -> "NumericMatch":
    return NumericMatch(config)


# Thousands separators allowed only in groups of three: "1,234.5" but not "1,2".
# A sign counts only where it cannot be a hyphen: "pages 10-12" ends with 12, not -12.
_SIGN = r"(?:(?<![\w.])[-+])?"
# The lookahead names what a number starts with, which the pattern (starting with an
# optional group) does not tell the regex engine, so the engine skips ahead to where a
# number may start; the same matches (docs/performance.md).
NUMBER = re.compile(
    rf"(?=[-+.\d])(?:{_SIGN}(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|{_SIGN}\.\d+)"
)


def parse_number(text: str) -> float | None:
    text = text.strip().replace("$", "")
    if NUMBER.fullmatch(text) is None:
        return None
    return float(text.replace(",", ""))


def last_number(text: str) -> float | None:
    found = NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


class NumericMatch(BaseScorer):
    type = "numeric"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name = config.name
        self._pattern = re.compile(config.pattern) if config.pattern else None

    def expected(self, sample: Sample) -> float:
        value = sample.fields[self.config.field]
        if self.config.expected_pattern is not None:
            found = re.search(self.config.expected_pattern, str(value))
            if found is None:
                raise ValueError(f"field {self.config.field!r} has no match of expected_pattern")
            value = found.group("value")
        if isinstance(value, str) and value.isdecimal():
            # Digits only (what `\d` matches): parse_number's answer without its regex,
            # which counts because a run asks twice a sample (its check, its score).
            return float(value)
        if isinstance(value, bool):
            raise ValueError(f"field {self.config.field!r} is a boolean, not a number")
        number = float(value) if isinstance(value, int | float) else parse_number(str(value))
        if number is None:
            raise ValueError(f"field {self.config.field!r} is not a number: {value!r}")
        return number

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        field_value(sample, self.config.field, dataset_path)
        try:
            self.expected(sample)
        except ValueError as exc:
            raise InputError(
                dataset_path, sample.line, self.config.field, f"sample {sample.id!r}: {exc}"
            ) from exc

    def extract(self, response: str) -> float | None:
        if self._pattern is None:
            return last_number(response)
        found = self._pattern.search(response)
        if found is None or found.group(self.config.group) is None:
            return None
        return parse_number(found.group(self.config.group))

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        response = item.response
        expected = self.expected(item.sample)
        got = self.extract(response)
        if got is None:
            return Score(0.0, f"no number found in {clip(response)!r}; expected {expected:g}")
        if math.isclose(got, expected, rel_tol=self.config.rel_tol, abs_tol=self.config.abs_tol):
            return Score(1.0, f"{got:g} matches {expected:g}")
        return Score(0.0, f"{got:g} != {expected:g}")
