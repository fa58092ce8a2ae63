"""The scorer interface and the factory from spec config to scorer."""

from dataclasses import dataclass
from typing import Any, Protocol

from gradetrail_lib.dataset import Sample
from gradetrail_lib.errors import InputError


# Not frozen, for speed: one per sample (see pipeline.ResultRow).
@dataclass
class Score:
    value: float
    reason: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.value <= 1.0:
            raise ValueError(f"score {self.value} is outside [0, 1]")


class Scorer(Protocol):
    def check(self, sample: Sample, dataset_path: str) -> None:
        """Raise InputError when this sample cannot be scored at all (before any call)."""
        ...

    def score(self, response: str, sample: Sample) -> Score: ...


def clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def field_value(sample: Sample, field: str, dataset_path: str) -> Any:
    if field not in sample.fields:
        raise InputError(
            dataset_path, sample.line, field, f"sample {sample.id!r} has no field {field!r}"
        )
    return sample.fields[field]


def build_scorer(config: Any, base_dir: Any) -> Scorer:
    """`base_dir` resolves files a scorer names (a schema file, say). Each scorer's module
    is imported only when a spec uses it (the json_schema one brings in jsonschema)."""
    from gradetrail_lib.spec import ExactScorer, JsonSchemaScorer, NumericScorer, RegexScorer

    if isinstance(config, ExactScorer):
        from gradetrail_lib.scorers.exact import ExactMatch

        return ExactMatch(config)
    if isinstance(config, RegexScorer):
        from gradetrail_lib.scorers.regex import RegexMatch

        return RegexMatch(config)
    if isinstance(config, NumericScorer):
        from gradetrail_lib.scorers.numeric import NumericMatch

        return NumericMatch(config)
    if isinstance(config, JsonSchemaScorer):
        from gradetrail_lib.scorers.json_schema import JsonSchemaMatch

        return JsonSchemaMatch(config, base_dir)
    raise TypeError(f"no scorer for {type(config).__name__}")
