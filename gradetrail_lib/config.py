"""Config pieces shared by the spec and the scorer configs: strict models, templates, the
model and its sampling parameters. (Scorer configs live with their scorers, and the spec
assembles them, so this module is the one both import.)"""

from typing import Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

ProviderName = Literal["anthropic", "openai", "openai_compatible", "local", "scripted"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_template(source: str) -> str:
    try:
        jinja2.Environment().parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"template syntax error on its line {exc.lineno}: {exc.message}") from exc
    return source


class Params(Strict):
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


class ModelConfig(Strict):
    provider: ProviderName
    name: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = Field(
        default=None, description="Environment variable holding the key (never the key)."
    )
    # Provider `scripted` only: the answer is this sample field, or this fixed text.
    answer_field: str | None = None
    text: str | None = None

    @model_validator(mode="after")
    def _check_endpoint(self) -> "ModelConfig":
        scripted = (self.answer_field, self.text)
        if self.provider == "scripted":
            if self.base_url is not None:
                raise ValueError("scripted models answer in-process; remove base_url")
            if sum(x is not None for x in scripted) != 1:
                raise ValueError("scripted needs exactly one of answer_field, text")
        elif any(x is not None for x in scripted):
            raise ValueError("answer_field and text are settings of provider scripted only")
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
