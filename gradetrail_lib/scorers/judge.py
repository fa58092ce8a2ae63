"""LLM-as-judge: a prompt file rendered with the sample, the response and the messages,
sent to a judge model as an ordinary cached request, its output graded by a pattern.

The judge's requests are keyed like any other (judge model, rendered judge prompt,
params), so a re-run re-judges nothing, a judge-file edit re-sends only judge calls, and
an unchanged response is not judged again. Output that does not match the grade pattern,
or a judge call that finally fails, is `judge_error`, never a wrong answer.
"""

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gradetrail_lib.config import Params, Strict
from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.base import Message, ModelRequest, ProviderError
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.providers.request import RequestBuilder
from gradetrail_lib.scorers.base import (
    BaseScorer,
    CallOutcome,
    Score,
    ScoreFailed,
    ScoreInput,
    clip,
)
from gradetrail_lib.scorers.registry import ScorerConfig
from gradetrail_lib.templating import Template, check_template

DEFAULT_VALUES = {"C": 1.0, "P": 0.5, "I": 0.0}


class Grade(Strict):
    """How the judge's output becomes a score: the pattern's first group, looked up in
    `values`, or a number mapped linearly from `scale` to [0, 1]."""

    pattern: str = r"GRADE:\s*([A-Z])"
    values: dict[str, float] | None = None
    scale: tuple[float, float] | None = None
    # Whether "Yes" and "yes" are different grades (for `values`).
    case_sensitive: bool = True

    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, pattern: str) -> str:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"pattern does not compile: {exc}") from exc
        if compiled.groups < 1:
            raise ValueError("pattern needs a group around the grade")
        return pattern

    @field_validator("values")
    @classmethod
    def _check_values(cls, values: dict[str, float] | None) -> dict[str, float] | None:
        if values is not None:
            if not values:
                raise ValueError("values must not be empty")
            bad = sorted(k for k, v in values.items() if not 0.0 <= v <= 1.0)
            if bad:
                raise ValueError(f"values must be in [0, 1] (not so for {', '.join(bad)})")
        return values

    @model_validator(mode="after")
    def _one_mapping(self) -> "Grade":
        if self.values is not None and self.scale is not None:
            raise ValueError("give values or scale, not both")
        if self.scale is not None and not self.scale[0] < self.scale[1]:
            raise ValueError("scale must be [low, high] with low < high")
        return self

    def to_score(self, text: str) -> Score:
        found = re.search(self.pattern, text)
        if found is None or found.group(1) is None:
            raise ScoreFailed(
                "judge_error", f"judge output does not match /{self.pattern}/: {clip(text)!r}"
            )
        grade = found.group(1)
        if self.scale is not None:
            low, high = self.scale
            try:
                number = float(grade)
            except ValueError:
                raise ScoreFailed("judge_error", f"judge grade {grade!r} is not a number") from None
            if not low <= number <= high:
                raise ScoreFailed(
                    "judge_error",
                    f"judge grade {number:g} is outside the scale [{low:g}, {high:g}]",
                )
            return Score(
                (number - low) / (high - low), f"judge grade {number:g} on [{low:g}, {high:g}]"
            )
        values = self.values if self.values is not None else DEFAULT_VALUES
        if not self.case_sensitive:
            values = {k.lower(): v for k, v in values.items()}
            grade = grade.lower()
        if grade not in values:
            known = ", ".join(sorted(values))
            raise ScoreFailed("judge_error", f"judge grade {grade!r} is not one of {known}")
        return Score(values[grade], f"judge grade {grade}")


def _default_params() -> Params:
    return Params(temperature=0.0, max_tokens=256)


class Config(ScorerConfig):
    type: Literal["judge"]
    prompt_file: str = Field(description="jinja2, relative to the spec")
    model: ModelConfig
    params: Params = Field(default_factory=_default_params)
    grade: Grade = Field(default_factory=Grade)
    force_same_model: bool = False

    @field_validator("prompt_file")
    @classmethod
    def _check_prompt_file(cls, prompt_file: str, info: ValidationInfo) -> str:
        base_dir = (info.context or {}).get("base_dir")
        if base_dir is not None:
            path = (Path(base_dir) / prompt_file).resolve()
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read the judge prompt {path}: {exc}") from exc
            check_template(source)
        return prompt_file

    def files(self, base_dir: Path) -> dict[str, Path]:
        return {self.prompt_file: (base_dir / self.prompt_file).resolve()}


def build(config: Config, base_dir: Path) -> "JudgeScorer":
    return JudgeScorer(config, base_dir)


class JudgeScorer(BaseScorer):
    type = "judge"
    makes_calls = True

    def __init__(self, config: Config, base_dir: Path) -> None:
        self.config = config
        self.name = config.name
        path = (base_dir / config.prompt_file).resolve()
        self._template = Template(path.read_text(encoding="utf-8"), config.prompt_file)
        self._builder = RequestBuilder(config.model, config.params)

    def _request(
        self, sample: Sample, response: str, messages: list[Message], dataset_path: str
    ) -> ModelRequest:
        scope = Sample(sample.id, {**sample.fields, "response": response, "messages": messages},
                       sample.line)  # fmt: skip
        prompt = self._template.render(scope, dataset_path)
        return self._builder.build([{"role": "user", "content": prompt}], sample, dataset_path)

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        # A field the prompt names and the sample lacks is an input error before any
        # call, not a judge error after.
        self._template.check(sample, dataset_path, {"response": "", "messages": messages})
        if self._builder.answers_from_samples:  # a scripted judge's answer_field too
            self._request(sample, "", messages, dataset_path)

    def requests(self, item: ScoreInput) -> list[ModelRequest]:
        try:
            return [self._request(item.sample, item.response, item.messages, "dataset")]
        except InputError:  # check() rendered it already; a response cannot break it
            return []

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        outcome = calls[0] if calls else None
        if outcome is None:
            raise ScoreFailed("judge_error", "no judge response (run interrupted)")
        if isinstance(outcome, ProviderError):
            raise ScoreFailed("judge_error", f"judge call failed: {outcome.message}")
        return self.config.grade.to_score(outcome.text)
