"""A model named in text, `provider/name`, read into the `ModelConfig` its provider
declares (`--models`, `run_spec(models=[...])`, a Dagster partition's model)."""

from pydantic import ValidationError

from gradetrail_lib.errors import UsageError, input_errors
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.registry import ModelConfig


def is_provider_name(text: str) -> bool:
    """Whether `text` reads as `provider/name` with a provider that exists."""
    provider, slash, _ = text.partition("/")
    return bool(slash) and provider in registry.names()


def split_model(text: str) -> tuple[str, str]:
    """`provider/name` -> (provider, name), the provider checked."""
    provider, slash, name = text.partition("/")
    if not slash or provider not in registry.names() or not name:
        raise UsageError(
            f"model {text!r}: expected provider/name, provider one of {', '.join(registry.names())}"
        )
    return provider, name


def parse_model(
    text: str, *, base_url: str | None = None, api_key_env: str | None = None
) -> ModelConfig:
    """`provider/name` (the name may hold slashes) as a model config."""
    provider, name = split_model(text)
    try:
        return ModelConfig.model_validate(
            {"provider": provider, "name": name, "base_url": base_url, "api_key_env": api_key_env}
        )
    except ValidationError as exc:
        message = input_errors(exc, text)[0].message
        raise UsageError(f"model {text}: {message}") from None
