"""Versioned prices (package data). An unknown price is unknown, never $0."""

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.providers import registry

DEFAULT_VERSION = "v1"


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float


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
        self, provider: str, model: str, input_tokens: int | None, output_tokens: int | None
    ) -> float | None:
        """Dollars for one call, or None when the price or the token counts are unknown."""
        if registry.answers_in_process(provider):  # no call: nothing to pay
            return 0.0
        price = self.price(provider, model)
        if price is None or input_tokens is None or output_tokens is None:
            return None
        return (
            input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok
        ) / 1_000_000


@cache
def load_prices(version: str = DEFAULT_VERSION) -> PriceList:
    try:
        text = resources.files("gradetrail_lib.providers").joinpath(f"data/pricing-{version}.json")
        data = json.loads(text.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise GradetrailError(f"no pricing data for version {version!r}") from exc
    prices = {
        name: Price(float(p["input"]), float(p["output"])) for name, p in data["models"].items()
    }
    return PriceList(data["version"], data["effective_date"], prices)


def sum_costs(costs: list[float | None]) -> float | None:
    """Total of known costs; None if any is unknown (a partial sum would understate it)."""
    if any(c is None for c in costs):
        return None
    return sum(c for c in costs if c is not None)


def format_usd(cost: float | None) -> str:
    """How every output shows money: six decimals, or `unknown` (never $0 for no price)."""
    return "unknown" if cost is None else f"${cost:.6f}"
