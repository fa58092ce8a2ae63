"""The response must be a JSON document valid against a Draft 2020-12 schema."""

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, JsonValue, field_validator, model_validator

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
from gradetrail_lib.scorers.schemas import schema_problem

if TYPE_CHECKING:
    import jsonschema


class Config(ScorerConfig):
    """The response must be JSON valid against a Draft 2020-12 schema.

    The schema is inline (`schema`), in a file next to the spec (`schema_path`), or in a
    sample field (`field`), exactly one of them.
    """

    type: Literal["json_schema"]
    json_schema: dict[str, JsonValue] | None = Field(default=None, alias="schema")
    schema_path: str | None = None
    field: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("json_schema")
    @classmethod
    def _check_schema(cls, schema: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
        problem = None if schema is None else schema_problem(schema)
        if problem is not None:
            raise ValueError(f"not a valid Draft 2020-12 schema: {problem}")
        return schema

    @model_validator(mode="after")
    def _one_source(self) -> "Config":
        given = [x is not None for x in (self.json_schema, self.schema_path, self.field)]
        if sum(given) != 1:
            raise ValueError("give exactly one of schema, schema_path, field")
        return self

    def files(self, base_dir: Path) -> dict[str, Path]:
        if self.schema_path is None:
            return {}
        return {self.schema_path: (base_dir / self.schema_path).resolve()}


def build(config: Config, base_dir: Path) -> "JsonSchemaMatch":
    return JsonSchemaMatch(config, base_dir)


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.DOTALL)


def extract_json(response: str) -> Any:
    text = response.strip()
    fenced = _FENCE.match(text)
    return json.loads(fenced.group(1) if fenced else text)


def load_schema_file(path: Path) -> dict[str, Any]:
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(str(path), None, None, f"cannot read schema: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise InputError(str(path), exc.lineno, None, f"invalid JSON: {exc.msg}") from exc
    _check_schema(schema, str(path), None)
    return dict(schema)


def _check_schema(schema: Any, where: str, line: int | None) -> None:
    problem = schema_problem(schema)
    if problem is not None:
        raise InputError(where, line, None, f"not a valid Draft 2020-12 schema: {problem}")


class JsonSchemaMatch(BaseScorer):
    type = "json_schema"

    def __init__(self, config: Config, base_dir: Path) -> None:
        import jsonschema  # here: only specs that score with it pay for the import

        self.config = config
        self.name = config.name
        self._fixed: jsonschema.Draft202012Validator | None = None
        if config.json_schema is not None:
            self._fixed = jsonschema.Draft202012Validator(config.json_schema)
        elif config.schema_path is not None:
            schema = load_schema_file((base_dir / config.schema_path).resolve())
            self._fixed = jsonschema.Draft202012Validator(schema)

    def _validator(self, sample: Sample) -> "jsonschema.Draft202012Validator":
        import jsonschema

        if self._fixed is not None:
            return self._fixed
        assert self.config.field is not None
        return jsonschema.Draft202012Validator(sample.fields[self.config.field])

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        if self._fixed is None and self.config.field is not None:
            schema = field_value(sample, self.config.field, dataset_path)
            _check_schema(schema, dataset_path, sample.line)

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        import jsonschema

        response, sample = item.response, item.sample
        try:
            document = extract_json(response)
        except json.JSONDecodeError as exc:
            return Score(0.0, f"not JSON ({exc.msg}): {clip(response)!r}")
        error = jsonschema.exceptions.best_match(self._validator(sample).iter_errors(document))
        if error is None:
            return Score(1.0, "valid against the schema")
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return Score(0.0, f"invalid at {where}: {clip(error.message)}")
