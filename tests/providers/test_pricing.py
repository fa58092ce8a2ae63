"""Pricing: versioned package data; an unknown price is unknown (None), never $0."""

import datetime
import json
from importlib import resources
from typing import Any

import pytest

from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.providers.pricing import DEFAULT_VERSION, load_prices, sum_costs


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    data_dir = resources.files("gradetrail_lib.providers").joinpath("data")
    path = data_dir.joinpath(f"pricing-{DEFAULT_VERSION}.json")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_known_model_cost_from_the_package_data(raw):
    prices = load_prices()
    entry = raw["models"]["anthropic/claude-sonnet-4-6"]
    expected = (1000 * entry["input"] + 500 * entry["output"]) / 1_000_000
    cost = prices.cost("anthropic", "claude-sonnet-4-6", 1000, 500)
    assert cost == pytest.approx(expected)
    # $3 in / $15 out per million tokens in v1.
    assert cost == pytest.approx(0.0105)


def test_input_and_output_prices_are_not_swapped(raw):
    entry = raw["models"]["openai/gpt-5"]
    assert entry["input"] != entry["output"]
    prices = load_prices()
    assert prices.cost("openai", "gpt-5", 1_000_000, 0) == pytest.approx(entry["input"])
    assert prices.cost("openai", "gpt-5", 0, 1_000_000) == pytest.approx(entry["output"])


def test_every_model_in_the_file_is_loaded_with_its_numbers(raw):
    prices = load_prices()
    assert set(prices.prices) == set(raw["models"])
    for name, entry in raw["models"].items():
        provider, model = name.split("/", 1)
        price = prices.price(provider, model)
        assert price is not None
        assert (price.input_per_mtok, price.output_per_mtok) == (entry["input"], entry["output"])


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("openai", "gpt-99"),
        ("openai_compatible", "qwen2.5-7b"),
        ("openai", "claude-sonnet-4-6"),  # the provider is part of the name
        ("openai_compatible", "gpt-5"),  # a self-hosted "gpt-5" is not OpenAI's price
    ],
)
def test_unknown_model_cost_is_none_not_zero(provider, model):
    prices = load_prices()
    assert prices.price(provider, model) is None
    assert prices.cost(provider, model, 1000, 1000) is None


def test_unknown_token_counts_give_unknown_cost():
    prices = load_prices()
    assert prices.cost("anthropic", "claude-sonnet-4-6", None, 10) is None
    assert prices.cost("anthropic", "claude-sonnet-4-6", 10, None) is None


def test_sum_costs():
    assert sum_costs([0.1, 0.2, 0.0]) == pytest.approx(0.3)
    assert sum_costs([0.1, None, 0.2]) is None
    assert sum_costs([None]) is None
    assert sum_costs([]) == 0


def test_local_model_costs_zero_not_unknown():
    cost = load_prices().cost("local", "smollm2-135m", 12345, 678)
    assert cost is not None
    assert cost == 0.0


def test_version_and_effective_date(raw):
    prices = load_prices()
    assert prices.version == raw["version"] == DEFAULT_VERSION
    assert prices.effective_date == raw["effective_date"]
    assert datetime.date.fromisoformat(prices.effective_date)


def test_unknown_price_list_version():
    with pytest.raises(GradetrailError, match="v999"):
        load_prices("v999")
