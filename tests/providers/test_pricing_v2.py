"""Price list v2: batch, prompt-cache reads and writes, input-size tiers; v1 still read."""

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.providers.base import ModelResponse
from gradetrail_lib.providers.pricing import (
    DEFAULT_VERSION,
    call_cost,
    load_prices,
    parse_prices,
)

M = 1_000_000


def shipped(version: str) -> dict[str, Any]:
    path = resources.files("gradetrail_lib.providers").joinpath(f"data/pricing-{version}.json")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def response(**fields: Any) -> ModelResponse:
    base = ModelResponse(
        text="ok",
        served_model="m",
        stop_reason="stop",
        input_tokens=M,
        output_tokens=M,
        latency_s=0.1,
    )
    return replace(base, **fields)


def test_v2_is_the_default_and_v1_stays_readable_with_the_same_plain_prices() -> None:
    assert DEFAULT_VERSION == "v2"
    v1, v2 = load_prices("v1"), load_prices("v2")
    assert (v1.version, v2.version) == ("v1", "v2")
    for name in shipped("v1")["models"]:
        provider, model = name.split("/", 1)
        # A plain synchronous call costs the same under either list.
        assert v1.cost(provider, model, 1000, 500) == v2.cost(provider, model, 1000, 500)
        assert v2.price(provider, model) is not None, name
    # v1 has no cache rates: cached tokens cost the input rate, as they did.
    assert v1.cost("openai", "gpt-5", M, 0, cached_input_tokens=M) == pytest.approx(1.25)
    # v1 has no batch price: a batch call's cost is unknown, not the synchronous price.
    assert v1.cost("openai", "gpt-5", M, M, batch=True) is None


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_every_shipped_entry_parses_and_has_a_source(version: str) -> None:
    data = shipped(version)
    assert data["source"] and data["effective_date"]
    assert set(load_prices(version).prices) == set(data["models"])


def test_every_v2_model_but_the_free_local_one_has_a_batch_price() -> None:
    prices = load_prices("v2")
    for name, price in prices.prices.items():
        if not name.startswith("local/"):
            assert price.has_batch_price, name


def test_batch_halves_every_rate_of_a_model_with_a_discount() -> None:
    prices = load_prices("v2")
    sync = prices.cost("anthropic", "claude-haiku-4-5", M, M)
    batch = prices.cost("anthropic", "claude-haiku-4-5", M, M, batch=True)
    assert (sync, batch) == (pytest.approx(6.0), pytest.approx(3.0))
    cost = call_cost(response(batch=True), prices, "anthropic", "claude-haiku-4-5")
    assert cost.usd == pytest.approx(3.0) and cost.batch_saved_usd == pytest.approx(3.0)
    assert cost.cache_saved_usd == 0.0 and cost.batch


def test_anthropic_cache_reads_and_both_writes_are_priced_apart() -> None:
    prices = load_prices("v2")
    got = call_cost(
        response(
            input_tokens=4 * M,
            output_tokens=0,
            cached_input_tokens=M,
            cache_write_input_tokens=M,
            cache_write_1h_input_tokens=M,
        ),
        prices,
        "anthropic",
        "claude-haiku-4-5",
    )
    # 1M plain at $1, 1M read at $0.10, 1M 5-minute write at $1.25, 1M 1-hour write at $2.
    assert got.usd == pytest.approx(1.0 + 0.1 + 1.25 + 2.0)
    # Without caching all 4M would be $4: writing cost more than the read saved.
    assert got.cache_saved_usd == pytest.approx(4.0 - 4.35)
    assert got.batch_saved_usd == 0.0


def test_openai_cached_tokens_and_batch_stack() -> None:
    prices = load_prices("v2")
    got = call_cost(
        response(input_tokens=2 * M, output_tokens=M, cached_input_tokens=M, batch=True),
        prices,
        "openai",
        "gpt-5",
    )
    # (1M at $1.25 + 1M at $0.125 + 1M out at $10) / 2.
    assert got.usd == pytest.approx((1.25 + 0.125 + 10.0) / 2)
    assert got.batch_saved_usd == pytest.approx((1.25 + 0.125 + 10.0) / 2)
    assert got.cache_saved_usd == pytest.approx((1.25 - 0.125) / 2)


def test_reasoning_tokens_are_part_of_output_and_priced_as_output() -> None:
    prices = load_prices("v2")
    plain = call_cost(response(output_tokens=M), prices, "openai", "gpt-5-mini")
    reasoning = call_cost(
        response(output_tokens=M, reasoning_tokens=900_000), prices, "openai", "gpt-5-mini"
    )
    assert reasoning.usd == plain.usd == pytest.approx(0.25 + 2.0)
    assert reasoning.reasoning_tokens == 900_000


def test_a_tier_applies_to_the_whole_call_once_its_input_exceeds_the_threshold() -> None:
    prices = load_prices("v2")
    at = prices.cost("gemini", "gemini-2.5-pro", 200_000, 0)
    above = prices.cost("gemini", "gemini-2.5-pro", 200_001, 0)
    assert at == pytest.approx(200_000 * 1.25 / M)
    assert above == pytest.approx(200_001 * 2.5 / M)  # every token at the higher rate
    assert prices.cost("gemini", "gemini-2.5-pro", 300_000, M) == pytest.approx(0.75 + 15.0)
    # The threshold counts cached input too, and the tier has its own cache rate.
    cached = prices.cost("anthropic", "claude-sonnet-4-5", 300_000, 0, cached_input_tokens=200_000)
    assert cached == pytest.approx((100_000 * 6.0 + 200_000 * 0.6) / M)
    # A batch discounts the tier's rates.
    batch = prices.cost("gemini", "gemini-2.5-pro", 300_000, M, batch=True)
    assert batch == pytest.approx((0.75 + 15.0) / 2)


def write(tmp_path: Path, models: dict[str, Any]) -> str:
    path = tmp_path / "mine.json"
    path.write_text(
        json.dumps({"version": "mine", "effective_date": "2026-12-05", "models": models}),
        encoding="utf-8",
    )
    return str(path)


def test_explicit_batch_rates_and_a_user_file(tmp_path: Path) -> None:
    prices = load_prices(
        write(
            tmp_path,
            {
                "openai/gpt-x": {
                    "input": 2.0,
                    "output": 8.0,
                    "batch_input": 1.5,
                    "batch_output": 4.0,
                    "cache_read_input": 0.5,
                    "tiers": [{"above_input_tokens": 1000, "input": 4.0}],
                }
            },
        )  # fmt: skip
    )
    assert prices.version == "mine"
    assert prices.cost("openai", "gpt-x", 1000, M, batch=True) == pytest.approx(
        (1000 * 1.5 + M * 4.0) / M
    )
    # Above the tier: input $4 (its cache rate keeps the base's quarter of input: $1);
    # batch keeps the base tier's ratios (input x0.75, output x0.5).
    cost = prices.cost("openai", "gpt-x", 2000, 0, batch=True, cached_input_tokens=1000)
    assert cost == pytest.approx((1000 * 4.0 * 0.75 + 1000 * 1.0 * 0.75) / M)


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"input": 1, "output": 2, "cache_read": 0.1}, "models.openai/x: cache_read"),
        ({"input": -1, "output": 2}, "models.openai/x: input"),
        ({"input": 1, "output": "2"}, "models.openai/x: output"),
        ({"input": 1, "output": 2, "batch_discount": 1.5}, "models.openai/x: batch_discount"),
        (
            {"input": 1, "output": 2, "tiers": [{"above_input_tokens": "many"}]},
            "models.openai/x: tiers",
        ),
        ({"output": 2}, "models.openai/x: input"),
    ],
)
def test_a_bad_entry_is_named_with_its_field(
    tmp_path: Path, entry: dict[str, Any], named: str
) -> None:
    path = write(tmp_path, {"openai/x": entry})
    with pytest.raises(GradetrailError, match=f"{path}: {named}"):
        parse_prices(Path(path).read_text(encoding="utf-8"), path)


def test_a_missing_user_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(GradetrailError, match="nope.json: cannot read"):
        load_prices(str(tmp_path / "nope.json"))


def test_an_unknown_price_is_unknown_and_in_process_answers_are_free() -> None:
    prices = load_prices("v2")
    unknown = call_cost(response(batch=True), prices, "openai", "gpt-99")
    # What batch saved is unknown with the cost; no prompt cache was used: it saved $0.
    assert (unknown.usd, unknown.batch_saved_usd, unknown.cache_saved_usd) == (None, None, 0.0)
    free = call_cost(response(batch=True), prices, "scripted", "anything")
    assert free.usd == 0.0


def test_cost_reprices_batch_and_cache_calls_and_says_what_they_saved() -> None:
    from gradetrail_lib.analysis.cost import format_cost, reprice
    from gradetrail_lib.results.trace import CallUsage, ModelCall, ModelInfo
    from tests.support.traces import manifest, record

    def priced(key: str, **usage: Any) -> ModelCall:
        return ModelCall(
            role="target", request_key=key, provider="openai", model="gpt-5",
            served_model="gpt-5", input_tokens=M, output_tokens=M, latency_s=0.1,
            cost_usd=None, cache_hit=False, stop_reason="stop", usage=CallUsage(**usage),
        )  # fmt: skip

    records = []
    for key, usage in [("a", {"batch": True}), ("b", {"cached_input_tokens": M}),
                       ("c", {"reasoning_tokens": 10})]:  # fmt: skip
        one = record(key, 1.0)
        one.calls = [priced(key, **usage)]
        records.append(one)
    run = manifest().model_copy(
        update={"model": ModelInfo(requested="gpt-5", provider="openai", base_url=None, served=[])}
    )
    (model,) = reprice([(run, records)], load_prices("v2")).models
    # a: batch, half of $11.25; b: 1M cached at $0.125 instead of $1.25; c: plain $11.25.
    assert model.cost_usd == pytest.approx(11.25 / 2 + (0.125 + 10.0) + 11.25)
    assert model.batch_saved_usd == pytest.approx(11.25 / 2)
    assert model.cache_saved_usd == pytest.approx(1.25 - 0.125)
    assert (model.batch_calls, model.cached_input_tokens, model.reasoning_tokens) == (1, M, 10)
    text = format_cost(reprice([(run, records)], load_prices("v2")))
    assert "openai/gpt-5: batch saved $5.625000 (1 calls by batch); prompt caching saved " in text
    assert "openai/gpt-5: 10 of the tokens out were reasoning" in text
    # Pricing v1 has no batch price: the batch call's cost, and so the total, is unknown.
    old = reprice([(run, records)], load_prices("v1"))
    assert old.models[0].cost_usd is None
    assert "1 batch calls and pricing v1 has no batch price (cost unknown)" in format_cost(old)
