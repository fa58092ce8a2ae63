"""The eval spec: a YAML file validated with pydantic, unknown keys rejected."""

import fnmatch
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import jinja2
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.json_schemas import schema_problem
from gradetrail_lib.yaml_source import Location, YamlDocument, load_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


ProviderName = Literal["anthropic", "openai", "openai_compatible", "local"]
RegexFlag = Literal["IGNORECASE", "MULTILINE", "DOTALL", "VERBOSE", "ASCII"]


class DatasetRef(_Strict):
    path: str = Field(description="JSONL file, relative to the spec's folder.")


class Params(_Strict):
    """Sampling parameters. Every field that is set enters the request key."""

    temperature: float | None = None
    max_tokens: int = Field(default=512, ge=1)
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    # Provider-specific body fields (e.g. llama.cpp's repeat_penalty), sent as given.
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("extra")
    @classmethod
    def _no_shadowing(cls, extra: dict[str, JsonValue]) -> dict[str, JsonValue]:
        reserved = {*cls.model_fields, "model", "messages", "system", "stream"} - {"extra"}
        clash = sorted(reserved & set(extra))
        if clash:
            raise ValueError(f"{', '.join(clash)} cannot be set through extra")
        return extra


class ModelConfig(_Strict):
    provider: ProviderName
    name: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = Field(
        default=None, description="Environment variable holding the key (never the key)."
    )

    @model_validator(mode="after")
    def _check_endpoint(self) -> "ModelConfig":
        if self.provider == "openai_compatible" and not self.base_url:
            raise ValueError("openai_compatible needs base_url")
        if self.provider == "local":
            from gradetrail_lib.providers.local_server import LOCAL_MODELS

            if self.base_url is not None:
                raise ValueError("local models start their own server; remove base_url")
            if self.name not in LOCAL_MODELS:
                known = ", ".join(sorted(LOCAL_MODELS))
                raise ValueError(f"unknown local model {self.name!r} (known: {known})")
        return self


def _check_template(source: str) -> str:
    try:
        jinja2.Environment().parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"template syntax error on its line {exc.lineno}: {exc.message}") from exc
    return source


class ExactScorer(_Strict):
    type: Literal["exact"]
    field: str = "answer"
    strip: bool = True
    lower: bool = True
    collapse_whitespace: bool = True


class RegexScorer(_Strict):
    """`pattern` is a jinja2 template rendered per sample; inserted values are regex-escaped."""

    type: Literal["regex"]
    field: str = "answer"
    pattern: str | None = Field(default=None, description="Defaults to the escaped field value.")
    flags: list[RegexFlag] = Field(default_factory=list)
    match: Literal["search", "fullmatch"] = "search"

    # Field validators (not model validators) so an error names `scorer.pattern` and its line.
    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, pattern: str | None) -> str | None:
        return None if pattern is None else _check_template(pattern)


class NumericScorer(_Strict):
    type: Literal["numeric"]
    field: str = "answer"
    abs_tol: float = Field(default=0.0, ge=0)
    rel_tol: float = Field(default=0.0, ge=0)
    # `group` comes before `pattern` so the pattern's validator can see it.
    group: str = "value"
    pattern: str | None = Field(
        default=None, description="Regex with a named group; default: the last number."
    )

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


class JsonSchemaScorer(_Strict):
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
    def _one_source(self) -> "JsonSchemaScorer":
        given = [x is not None for x in (self.json_schema, self.schema_path, self.field)]
        if sum(given) != 1:
            raise ValueError("give exactly one of schema, schema_path, field")
        return self


ScorerConfig = Annotated[
    ExactScorer | RegexScorer | NumericScorer | JsonSchemaScorer, Field(discriminator="type")
]


class Watch(_Strict):
    provider: Literal["anthropic", "openai", "openai_compatible"]
    match: str = Field(min_length=1, description="fnmatch pattern over model ids")
    base_url: str | None = None
    api_key_env: str | None = None


class Spec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str | None = None
    dataset: DatasetRef
    system: str | None = None
    prompt: str
    models: list[ModelConfig] = Field(min_length=1)
    params: Params = Field(default_factory=Params)
    scorer: ScorerConfig
    watch: Watch | None = None

    # Field validators so each error names its field and line and is reported with the others.
    @field_validator("prompt", "system")
    @classmethod
    def _check_templates(cls, source: str | None) -> str | None:
        return None if source is None else _check_template(source)

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelConfig]) -> list[ModelConfig]:
        names = [m.name for m in models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"model names must be unique (each is a partition): {dupes}")
        return models

    @field_validator("params")
    @classmethod
    def _params_fit_providers(cls, params: Params, info: ValidationInfo) -> Params:
        # A parameter a provider does not take would be rejected on every request.
        providers = {m.provider for m in info.data.get("models", [])}
        if params.seed is not None and "anthropic" in providers:
            raise ValueError("seed is not a parameter of the Anthropic Messages API")
        return params

    def model(self, name: str) -> ModelConfig:
        """A model of the spec, or one its `watch` found (same provider settings)."""
        for m in self.models:
            if m.name == name:
                return m
        if self.watch is not None and fnmatch.fnmatchcase(name, self.watch.match):
            return ModelConfig(
                provider=self.watch.provider,
                name=name,
                base_url=self.watch.base_url,
                api_key_env=self.watch.api_key_env,
            )
        known = ", ".join(m.name for m in self.models)
        raise KeyError(f"spec {self.name!r} has no model {name!r} (models: {known})")


class LoadedSpec(BaseModel):
    """A validated spec plus where it came from (paths in it are relative to `base_dir`)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    spec: Spec
    path: Path

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, relative: str) -> Path:
        return (self.base_dir / relative).resolve()


def _describe(doc: YamlDocument, loc: tuple[int | str, ...]) -> tuple[str, int | None]:
    """The field path as the user wrote it and its line.

    pydantic puts a discriminated union's tag into `loc` (`scorer.regex.pattern`); a tag is
    dropped, and a key the user left out is named under its parent, on the parent's line.
    """
    kept: Location = ()
    named: list[str | int] = []
    for part in loc:
        candidate = (*kept, part)
        if doc.has(candidate):
            kept = candidate
            named.append(part)
            continue
        parent = doc.value_at(kept)
        if isinstance(parent, dict) and parent.get("type") == part:
            continue
        named.append(part)
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in named).lstrip(".")
    return field, doc.line_of(kept)


def load_spec(path: Path | str) -> LoadedSpec:
    path = Path(path)
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise InputError(str(path), 1, None, "a spec must be a YAML mapping")
    try:
        spec = Spec.model_validate(doc.data)
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            field, line = _describe(doc, tuple(err["loc"]))
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            errors.append(InputError(str(path), line, field or None, message))
        errors.sort(key=lambda e: e.line or 0)
        raise (errors[0] if len(errors) == 1 else InputErrors(errors)) from None
    return LoadedSpec(spec=spec, path=path)


def spec_document_fields(spec: Spec) -> dict[str, Any]:
    """The spec as canonical data (aliases used), the input of the spec hash."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)
