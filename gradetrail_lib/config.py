"""Config pieces shared by the spec and the scorer configs: strict models, templates, the
model and its sampling parameters. (Scorer configs live with their scorers, and the spec
assembles them, so this module is the one both import.)"""


import jinja2
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator


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
