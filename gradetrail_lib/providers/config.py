"""A model to call: its provider and name, where it is served, and a provider listing to
watch for new releases. What each provider takes is its own (see `registry`)."""

from pydantic import Field, field_validator, model_validator

from gradetrail_lib.config import Strict
from gradetrail_lib.providers import registry

# A provider's name: one of `registry.names()`, checked when a model is loaded.
ProviderName = str


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
    # Provider `azure_openai` only: the API version (default: its current GA version).
    api_version: str | None = None

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, provider: str) -> str:
        return registry.checked_name(provider)

    @model_validator(mode="after")
    def _check_endpoint(self) -> "ModelConfig":
        registry.get(self.provider).validate(self)
        return self


class Watch(Strict):
    provider: ProviderName
    match: str = Field(min_length=1, description="fnmatch pattern over model ids")
    base_url: str | None = None
    api_key_env: str | None = None

    @field_validator("provider")
    @classmethod
    def _listed_provider(cls, provider: str) -> str:
        choices = registry.listing_names()
        if provider not in choices:
            raise registry.choice_error(choices)
        return provider
