"""A model another Dagster asset's value names (`model_from_value`): the forms it takes, the
entry's settings kept, and each wrong value refused naming the spec's entry."""

import pytest

from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.models import model_from_value
from gradetrail_lib.providers.registry import ModelConfig

ENTRY = ModelConfig(
    provider="openai_compatible", name="candidate", asset="served_model", api_key_env="SERVE_KEY"
)
URL = "http://127.0.0.1:8000/v1"


def resolve(value: object) -> ModelConfig:
    return model_from_value(ENTRY, value, where="tune.yaml", field="models[1].asset")


def test_an_entry_with_an_asset_needs_no_base_url_until_resolved() -> None:
    with pytest.raises(ValueError, match="openai_compatible needs base_url"):
        ModelConfig(provider="openai_compatible", name="candidate")
    assert ENTRY.base_url is None and ENTRY.asset == "served_model"


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ({"model": "openai_compatible/ckpt-7", "base_url": URL}, "ckpt-7"),
        # A served name with a slash that reads as a provider's: given as `name`, kept whole.
        ({"name": "openai/gpt-oss-20b", "base_url": URL}, "openai/gpt-oss-20b"),
    ],
)
def test_the_value_names_the_model_and_the_entrys_settings_stay(value: object, name: str) -> None:
    model = resolve(value)
    assert model == ModelConfig(
        provider="openai_compatible", name=name, base_url=URL, api_key_env="SERVE_KEY"
    )
    assert model.asset is None  # a model like any other, as the manifest records it


def test_text_is_provider_slash_name_with_the_entrys_endpoint() -> None:
    entry = ENTRY.model_copy(update={"base_url": URL})
    model = model_from_value(entry, "openai_compatible/ckpt-8", where="t.yaml", field="f")
    assert (model.name, model.base_url) == ("ckpt-8", URL)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (7, "its value is a int; expected 'provider/name' or a mapping"),
        ({"model": "openai_compatible/ckpt-7"}, "openai_compatible needs base_url"),
        ({"model": "openai/ckpt-7", "base_url": URL}, "names provider openai; the entry's is"),
        ({"model": "ckpt-7", "base_url": URL}, "expected provider/name"),
        ({"name": "a", "model": "openai_compatible/b", "base_url": URL}, "one of them"),
        ({"model": "openai_compatible/a", "api_key": "x"}, "api_key: not a key of a model"),
        ({"model": 7}, "model is a int"),
        ({"model": "openai_compatible/a", "base_url": "http://u:s3cret@h/v1"}, "a password"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_entry(value: object, message: str) -> None:
    with pytest.raises(InputError) as raised:
        resolve(value)
    assert str(raised.value).startswith("tune.yaml: models[1].asset: asset 'served_model': ")
    assert message in str(raised.value) and "s3cret" not in str(raised.value)
