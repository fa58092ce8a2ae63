"""A model named in text, `provider/name`, read into the `ModelConfig` its provider
declares (`--models`, `run_spec(models=[...])`, a Dagster partition's model); and the
model another Dagster asset's value names (`model_from_value`)."""

from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import ValidationError

from gradetrail_lib.errors import InputError, UsageError, input_errors
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


# The keys of an asset's value that names a model (`model_from_value`).
VALUE_KEYS = ("model", "name", "base_url")


def model_from_value(entry: ModelConfig, value: object, *, where: str, field: str) -> ModelConfig:
    """The model a spec's entry with `asset:` stands for, read from that asset's value:
    `provider/name` as text, or a mapping with `model` (`provider/name`) or `name` (the
    served name as it is, slashes and all, of the entry's provider) and an optional
    `base_url`. The entry's other settings (`api_key_env`, ...) are kept; the result is a
    model like any other, without `asset`, so a run's manifest records it as it would a
    listed one. Raises InputError at `where`/`field` (the spec and the entry)."""

    def refused(message: str) -> InputError:
        return InputError(where, None, field, f"asset {entry.asset!r}: {message}")

    mapping: Mapping[object, object] = {"model": value} if isinstance(value, str) else {}
    if isinstance(value, Mapping):
        mapping = value
    elif not isinstance(value, str):
        raise refused(
            f"its value is a {type(value).__name__}; expected 'provider/name' or a mapping "
            "with model (or name) and base_url"
        )
    unknown = sorted(str(k) for k in mapping if k not in VALUE_KEYS)
    if unknown:
        raise refused(f"{', '.join(unknown)}: not a key of a model ({', '.join(VALUE_KEYS)})")
    if ("model" in mapping) == ("name" in mapping):
        raise refused("give model ('provider/name') or name (the served name), one of them")
    provider, name = entry.provider, mapping.get("name")
    if "model" in mapping:
        text = mapping["model"]
        if not isinstance(text, str):
            raise refused(f"model is a {type(text).__name__}; expected 'provider/name'")
        try:
            provider, name = split_model(text)
        except UsageError as exc:
            raise refused(str(exc)) from None
    if provider != entry.provider:
        raise refused(f"its value names provider {provider}; the entry's is {entry.provider}")
    base_url = mapping.get("base_url", entry.base_url)
    # The resolved model is kept in Dagster's metadata and the run's manifest: a key
    # goes by the entry's api_key_env, never in the URL (nor in this message).
    if isinstance(base_url, str) and urlsplit(base_url).password:
        raise refused("its base_url holds a password; give the key by api_key_env on the entry")
    fields = {**entry.model_dump(exclude_none=True, exclude={"asset"}), "name": name}
    try:
        return ModelConfig.model_validate({**fields, "base_url": base_url})
    except ValidationError as exc:
        raise refused(input_errors(exc, where)[0].message) from None
