"""Versioned prices (package data). An unknown price is unknown, never $0.

A price list names, per `provider/model`, dollars per million tokens. Version 1 knows
input and output only. Version 2 adds what makes a call's cost match the invoice: the
batch price (`batch_discount`, or `batch_input`/`batch_output`), the prompt cache's read
and write prices (`cache_read_input`; Anthropic's `cache_write_input` for 5-minute and
`cache_write_1h_input` for 1-hour writes) and input-size `tiers` (a higher rate for a call
whose input exceeds a threshold). A call is priced from its response's own fields
(`call_cost`): its input split into plain, cache-read and cache-written tokens, its output
(reasoning and thinking tokens included: they are billed as output), and whether a batch
answered it.

A rate a v2 entry leaves out is the plain input rate (a provider that bills no cache
writes); a v1 entry has no batch price, so a batch call's cost under v1 is unknown.
"""

import json
from dataclasses import dataclass, replace
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.base import ModelResponse

DEFAULT_VERSION = "v2"


@dataclass(frozen=True, kw_only=True)
class Rates:
    """Dollars per million tokens of each kind, at one input size."""

    input: float
    output: float
    cache_read_input: float
    cache_write_input: float
    cache_write_1h_input: float

    def scaled(self, factor: float) -> "Rates":
        return Rates(
            input=self.input * factor,
            output=self.output * factor,
            cache_read_input=self.cache_read_input * factor,
            cache_write_input=self.cache_write_input * factor,
            cache_write_1h_input=self.cache_write_1h_input * factor,
        )


@dataclass(frozen=True, kw_only=True)
class Tier:
    """The rates of a call whose input (all of it, cached or not) exceeds
    `above_input_tokens`."""

    above_input_tokens: int
    rates: Rates


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    # v2 only (None: the input rate; for batch, no batch price known).
    cache_read_input_per_mtok: float | None = None
    cache_write_input_per_mtok: float | None = None
    cache_write_1h_input_per_mtok: float | None = None
    # The fraction a batch takes off every rate (0.5: half price), or explicit batch rates.
    batch_discount: float | None = None
    batch_input_per_mtok: float | None = None
    batch_output_per_mtok: float | None = None
    # Ascending by threshold.
    tiers: tuple[Tier, ...] = ()

    @cached_property
    def base(self) -> Rates:
        plain = self.input_per_mtok
        return Rates(
            input=plain,
            output=self.output_per_mtok,
            cache_read_input=_or(self.cache_read_input_per_mtok, plain),
            cache_write_input=_or(self.cache_write_input_per_mtok, plain),
            cache_write_1h_input=_or(self.cache_write_1h_input_per_mtok, plain),
        )

    @property
    def has_batch_price(self) -> bool:
        return self.batch_discount is not None or (
            self.batch_input_per_mtok is not None and self.batch_output_per_mtok is not None
        )

    def rates(self, input_tokens: int, batch: bool) -> Rates | None:
        """The rates of one call with `input_tokens` of input (None: a batch call and no
        batch price). A tier applies per call, to all of its tokens; a batch's discount
        applies to every rate of the tier (providers' batch discounts stack with prompt
        caching and long-context rates)."""
        rates = self.base
        for tier in self.tiers:
            if input_tokens > tier.above_input_tokens:
                rates = tier.rates
        if not batch:
            return rates
        if self.batch_discount is not None:
            return rates.scaled(1.0 - self.batch_discount)
        if self.batch_input_per_mtok is None or self.batch_output_per_mtok is None:
            return None
        # Explicit batch rates are the base tier's; a higher tier and the cache rates keep
        # their ratio to the plain input rate.
        factor = self.batch_input_per_mtok / self.input_per_mtok if self.input_per_mtok else 1.0
        out_factor = (
            self.batch_output_per_mtok / self.output_per_mtok if self.output_per_mtok else 1.0
        )
        scaled = rates.scaled(factor)
        return replace(scaled, output=rates.output * out_factor)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


@dataclass(kw_only=True, slots=True)
class CallCost:
    """What one call cost, and what batch and prompt caching saved on it (None: no price,
    or no token counts). `cache_saved_usd` is negative when writing the prompt cache cost
    more than reading it saved (Anthropic bills a write above the plain input rate)."""

    usd: float | None
    batch_saved_usd: float | None
    cache_saved_usd: float | None
    batch: bool
    input_tokens: int | None
    output_tokens: int | None
    cached_input_tokens: int
    cache_write_input_tokens: int
    cache_write_1h_input_tokens: int
    reasoning_tokens: int


@dataclass(frozen=True)
class PriceList:
    version: str
    effective_date: str
    prices: dict[str, Price]

    def price(self, provider: str, model: str) -> Price | None:
        return self.prices.get(f"{provider}/{model}")

    def priced(self, provider: str, model: str) -> bool:
        """Whether the cost of the model's calls is known: it has a price, or answers
        in-process (free)."""
        return registry.answers_in_process(provider) or self.price(provider, model) is not None

    def cost(
        self,
        provider: str,
        model: str,
        input_tokens: int | None,
        output_tokens: int | None,
        *,
        batch: bool = False,
        cached_input_tokens: int = 0,
        cache_write_input_tokens: int = 0,
        cache_write_1h_input_tokens: int = 0,
    ) -> float | None:
        """Dollars for one call, or None when the price or the token counts are unknown
        (or it was a batch call and the list has no batch price). `input_tokens` is all of
        the call's input, the cached and cache-written tokens among it; `output_tokens` all
        of its output, reasoning included."""
        if registry.answers_in_process(provider):  # no call: nothing to pay
            return 0.0
        price = self.price(provider, model)
        if price is None or input_tokens is None or output_tokens is None:
            return None
        written = cache_write_input_tokens + cache_write_1h_input_tokens
        if not (batch or cached_input_tokens or written or price.tiers):
            # Most calls: plain tokens at plain rates (a warm run prices every sample's).
            return (
                input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok
            ) / 1_000_000
        rates = price.rates(input_tokens, batch)
        if rates is None:
            return None
        plain = max(input_tokens - cached_input_tokens - written, 0)
        return (
            plain * rates.input
            + cached_input_tokens * rates.cache_read_input
            + cache_write_input_tokens * rates.cache_write_input
            + cache_write_1h_input_tokens * rates.cache_write_1h_input
            + output_tokens * rates.output
        ) / 1_000_000


def call_cost(response: ModelResponse, prices: PriceList, provider: str, model: str) -> CallCost:
    """The cost of the call that answered `response`, asked of `provider/model` (the
    requested model: a provider's dated alias bills as its name), from the response's
    own batch flag and token fields; and what batch and prompt caching saved on it."""
    return usage_cost(
        prices,
        provider,
        model,
        input_tokens=response.input_tokens,
        output_tokens=response.output_tokens,
        batch=response.batch,
        cached_input_tokens=response.cached_input_tokens,
        cache_write_input_tokens=response.cache_write_input_tokens,
        cache_write_1h_input_tokens=response.cache_write_1h_input_tokens,
        reasoning_tokens=response.reasoning_tokens,
    )


def usage_cost(
    prices: PriceList,
    provider: str,
    model: str,
    *,
    input_tokens: int | None,
    output_tokens: int | None,
    batch: bool,
    cached_input_tokens: int,
    cache_write_input_tokens: int,
    cache_write_1h_input_tokens: int,
    reasoning_tokens: int,
) -> CallCost:
    """`call_cost` from the fields themselves (a trace record's call keeps them, not the
    response)."""
    usd = prices.cost(
        provider,
        model,
        input_tokens,
        output_tokens,
        batch=batch,
        cached_input_tokens=cached_input_tokens,
        cache_write_input_tokens=cache_write_input_tokens,
        cache_write_1h_input_tokens=cache_write_1h_input_tokens,
    )
    # Nothing to save (no batch, no prompt cache) saves $0 whatever the price; otherwise
    # the saving is unknown with the cost.
    batch_saved: float | None = 0.0
    cache_saved: float | None = 0.0
    caching = cached_input_tokens or cache_write_input_tokens or cache_write_1h_input_tokens
    if usd is None:
        batch_saved = None if batch else 0.0
        cache_saved = None if caching else 0.0
    else:
        if batch:
            sync = prices.cost(
                provider,
                model,
                input_tokens,
                output_tokens,
                cached_input_tokens=cached_input_tokens,
                cache_write_input_tokens=cache_write_input_tokens,
                cache_write_1h_input_tokens=cache_write_1h_input_tokens,
            )
            batch_saved = None if sync is None else sync - usd
        # Most calls touch no prompt cache: no second pricing.
        if caching:
            uncached = prices.cost(provider, model, input_tokens, output_tokens, batch=batch)
            cache_saved = None if uncached is None else uncached - usd
    return CallCost(
        usd=usd,
        batch_saved_usd=batch_saved,
        cache_saved_usd=cache_saved,
        batch=batch,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached_input_tokens,
        cache_write_input_tokens=cache_write_input_tokens,
        cache_write_1h_input_tokens=cache_write_1h_input_tokens,
        reasoning_tokens=reasoning_tokens,
    )


@cache
def load_prices(version: str = DEFAULT_VERSION) -> PriceList:
    """The price list of a shipped `version` (v1, v2), or of a JSON file in the same format
    (a path ending in .json: the user's own prices)."""
    if version.endswith(".json"):
        path = Path(version)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise GradetrailError(f"{path}: cannot read the price list: {exc}") from exc
        return parse_prices(text, str(path))
    try:
        data = resources.files("gradetrail_lib.providers").joinpath(f"data/pricing-{version}.json")
        text = data.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise GradetrailError(f"no pricing data for version {version!r}") from exc
    return parse_prices(text, f"pricing {version}")


def parse_prices(text: str, source: str) -> PriceList:
    """A price list from its JSON text; a bad entry is named (`source: models.X: field`)."""
    try:
        data = json.loads(text)
        models = data["models"]
        prices = {}
        for name, entry in models.items():
            try:
                prices[name] = _price(entry)
            except _BadEntry as exc:
                raise _BadEntry(f"{name}: {exc}") from exc
        return PriceList(str(data["version"]), str(data["effective_date"]), prices)
    except json.JSONDecodeError as exc:
        raise GradetrailError(f"{source}: not JSON: {exc}") from exc
    except _BadEntry as exc:
        raise GradetrailError(f"{source}: models.{exc}") from exc
    except (KeyError, TypeError, AttributeError) as exc:
        raise GradetrailError(f"{source}: needs version, effective_date, models: {exc}") from exc


class _BadEntry(Exception):
    pass


_FIELDS = {
    "input", "output", "cache_read_input", "cache_write_input", "cache_write_1h_input",
    "batch_discount", "batch_input", "batch_output", "tiers",
}  # fmt: skip
_TIER_FIELDS = {
    "above_input_tokens", "input", "output", "cache_read_input", "cache_write_input",
    "cache_write_1h_input",
}  # fmt: skip


def _price(entry: dict[str, Any]) -> Price:
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise _BadEntry(f"{unknown[0]}: unknown field")

    def rate(name: str) -> float | None:
        try:
            return _rate(entry.get(name))
        except ValueError as exc:
            raise _BadEntry(f"{name}: {exc}") from exc

    for required in ("input", "output"):
        if required not in entry:
            raise _BadEntry(f"{required}: missing")
    discount = rate("batch_discount")
    if discount is not None and not discount < 1.0:
        raise _BadEntry("batch_discount: a fraction taken off, from 0 up to 1 (0.5: half price)")
    plain, out = rate("input"), rate("output")
    assert plain is not None and out is not None
    price = Price(
        plain,
        out,
        cache_read_input_per_mtok=rate("cache_read_input"),
        cache_write_input_per_mtok=rate("cache_write_input"),
        cache_write_1h_input_per_mtok=rate("cache_write_1h_input"),
        batch_discount=discount,
        batch_input_per_mtok=rate("batch_input"),
        batch_output_per_mtok=rate("batch_output"),
    )
    try:
        tiers = tuple(_tier(price.base, t) for t in entry.get("tiers", []))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _BadEntry(f"tiers: {exc}") from exc
    thresholds = [t.above_input_tokens for t in tiers]
    if thresholds != sorted(set(thresholds)):
        raise _BadEntry("tiers: thresholds must ascend")
    return replace(price, tiers=tiers)


def _rate(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{value!r} is not a price (a number, 0 or more)")
    return float(value)


def _tier(base: Rates, entry: dict[str, Any]) -> Tier:
    unknown = set(entry) - _TIER_FIELDS
    if unknown:
        raise ValueError(f"unknown tier field {sorted(unknown)[0]}")
    threshold = entry["above_input_tokens"]
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
        raise ValueError("above_input_tokens: a whole number of tokens")
    # A rate the tier leaves out keeps the base rate's ratio to the plain input rate.
    plain = _rate(entry.get("input"))
    factor = plain / base.input if plain is not None and base.input else 1.0
    given = {
        name: _rate(entry.get(name))
        for name in ("cache_read_input", "cache_write_input", "cache_write_1h_input")
    }
    rates = Rates(
        input=_or(plain, base.input),
        output=_or(_rate(entry.get("output")), base.output),
        cache_read_input=_or(given["cache_read_input"], base.cache_read_input * factor),
        cache_write_input=_or(given["cache_write_input"], base.cache_write_input * factor),
        cache_write_1h_input=_or(given["cache_write_1h_input"], base.cache_write_1h_input * factor),
    )
    return Tier(above_input_tokens=threshold, rates=rates)


def sum_costs(costs: list[float | None]) -> float | None:
    """Total of known costs; None if any is unknown (a partial sum would understate it)."""
    if any(c is None for c in costs):
        return None
    return sum(c for c in costs if c is not None)


def format_usd(cost: float | None) -> str:
    """How every output shows money: six decimals, or `unknown` (never $0 for no price)."""
    return "unknown" if cost is None else f"${cost:.6f}"


# What every surface shows for a local model's cost (`registry.runs_locally`): it has no
# price, so neither $0 (free) nor `unknown` (a gap in the price list) would be true.
LOCAL_COST = "no price (local model)"


def shown_cost(provider: str, cost: float | None) -> float | None:
    """A call's cost as the surfaces give it: None for a local model's (no price; JSON
    null), whatever the price list says; else the cost (None: unknown)."""
    return None if registry.runs_locally(provider) else cost


def format_call_cost(provider: str, cost: float | None) -> str:
    """One call's cost as text: `LOCAL_COST` for a local model's, else `format_usd`."""
    return LOCAL_COST if registry.runs_locally(provider) else format_usd(cost)
