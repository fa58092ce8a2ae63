"""The provider registry: one module per provider, read by the spec's checks, the request
key, the caller, the listings, the prices and the concurrency limit."""

import subprocess
import sys

import pytest
from pydantic import ValidationError

from gradetrail_lib.config import Params
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.pricing import load_prices
from gradetrail_lib.providers.registry import ModelConfig, Watch


def test_every_module_registers_one_provider_under_its_own_name() -> None:
    providers = registry.providers()
    assert tuple(providers) == registry.names()
    assert list(providers)[:5] == ["anthropic", "openai", "openai_compatible", "local", "scripted"]
    for module_name, provider in zip(registry.PROVIDER_MODULES, providers.values(), strict=True):
        assert provider.name == module_name


def test_an_unknown_provider_is_refused_with_every_choice_listed() -> None:
    with pytest.raises(ValidationError) as caught:
        ModelConfig(provider="anthropik", name="x")
    (error,) = caught.value.errors()
    assert error["type"] == "literal_error"
    *first, last = [repr(n) for n in registry.names()]
    assert error["msg"] == f"Input should be {', '.join(first)} or {last}"


def test_watch_takes_the_providers_that_list_models_only() -> None:
    listing = registry.listing_names()
    assert {"anthropic", "openai", "openai_compatible"} <= set(listing)
    assert "local" not in listing and "scripted" not in listing
    with pytest.raises(ValidationError, match="Input should be 'anthropic', 'openai'"):
        Watch(provider="scripted", match="*")


def test_a_providers_own_settings_are_refused_on_another_provider() -> None:
    with pytest.raises(ValidationError, match="answer_field and text are settings of provider"):
        ModelConfig(provider="openai", name="gpt-5", text="hi")


def test_the_refused_parameter_rule_words_both_errors() -> None:
    claude = ModelConfig(provider="anthropic", name="x")
    rule = registry.get("anthropic").refused(Params(seed=1), claude)
    assert rule is not None
    assert rule.spec_message() == "seed is not a parameter of the Anthropic Messages API"
    assert rule.model_message("anthropic/x", "s") == (
        "model anthropic/x: spec 's' sets seed, which Anthropic lacks"
    )
    assert registry.get("anthropic").refused(Params(), claude) is None
    chat = ModelConfig(provider="openai", name="gpt-4.1")
    assert registry.get("openai").refused(Params(seed=1, stop=["x"]), chat) is None


@pytest.mark.parametrize("params", [Params(seed=1), Params(stop=["\n"])])
def test_the_responses_api_lacks_stop_and_seed_which_chat_completions_takes(
    params: Params,
) -> None:
    openai = registry.get("openai")
    responses = ModelConfig(provider="openai", name="gpt-4.1", api="responses")
    rule = openai.refused(params, responses)
    assert rule is not None and rule.param in ("seed", "stop")
    assert rule.spec_message() == f"{rule.param} is not a parameter of OpenAI's Responses API"
    # A family served only there goes to it without `api:`.
    assert openai.refused(params, ModelConfig(provider="openai", name="o3-pro")) is not None
    assert openai.refused(params, ModelConfig(provider="openai", name="gpt-4.1")) is None


def test_limits_defaults_and_in_process_answers() -> None:
    assert registry.concurrency_limit("local") == 1
    assert registry.concurrency_limit("openai") is None
    assert registry.get("openai").key_required
    assert not registry.get("openai_compatible").key_required
    assert registry.answers_in_process("scripted") and not registry.answers_in_process("openai")
    assert load_prices().cost("scripted", "anything", 10, 10) == 0.0
    assert load_prices().priced("scripted", "anything")


def test_loading_every_provider_loads_no_http_stack() -> None:
    code = (
        "import sys\n"
        "from gradetrail_lib.providers import registry\n"
        "registry.providers()\n"
        "print('httpx' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
