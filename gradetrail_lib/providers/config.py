"""A model to call: its provider and name, where it is served, and a provider listing to
watch for new releases."""

from typing import Literal

from pydantic import Field, model_validator

from gradetrail_lib.config import Strict
from gradetrail_lib.providers.local_server import LOCAL_MODELS

ProviderName = Literal["anthropic", "openai", "openai_compatible", "local", "scripted"]


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
            if self.base_url is not None:
                raise ValueError("local models start their own server; remove base_url")
            if self.name not in LOCAL_MODELS:
                known = ", ".join(sorted(LOCAL_MODELS))
                raise ValueError(f"unknown local model {self.name!r} (known: {known})")
        return self


class Watch(Strict):
    provider: Literal["anthropic", "openai", "openai_compatible"]
    match: str = Field(min_length=1, description="fnmatch pattern over model ids")
    base_url: str | None = None
    api_key_env: str | None = None
