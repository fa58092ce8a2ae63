"""`run --max-cost` with `--batch` checks the cost of the way the run will send each
role's misses: by batch where its provider has a batch API (every role with `all`, the
target only with `targets`), synchronously otherwise."""

import pytest

from gradetrail_lib.engine.estimate import (
    CallPlan,
    ModelPlan,
    check_max_cost,
    sent_by_batch,
    total_worst_case,
)
from gradetrail_lib.errors import UsageError


def role(name: str, provider: str, high: float, batch_high: float | None) -> CallPlan:
    return CallPlan(
        role=name, provider=provider, model="m", calls=10, hits=0, misses=10,
        input_tokens=100, output_tokens_worst=100, cost_low=high / 2, cost_high=high,
        batch_cost_low=None if batch_high is None else batch_high / 2,
        batch_cost_high=batch_high,
    )  # fmt: skip


def plan(*scorers: CallPlan) -> ModelPlan:
    target = role("target", "anthropic", 4.0, 2.0)
    return ModelPlan(
        spec="s", model="m", provider="anthropic", samples=10, target=target,
        scorers=list(scorers),
    )  # fmt: skip


def test_each_mode_prices_the_roles_it_sends_by_batch_at_the_batch_price() -> None:
    plans = [plan(role("scorer j", "openai", 2.0, 1.0), role("scorer k", "gemini", 1.0, None))]
    assert total_worst_case(plans, batch=sent_by_batch("off")) == 7.0
    assert total_worst_case(plans, batch=sent_by_batch("targets")) == 5.0
    # Gemini has no batch API: its calls go the ordinary way, at the ordinary price.
    assert total_worst_case(plans, batch=sent_by_batch("all")) == 4.0
    assert total_worst_case(plans, batch=True) is None  # every role by batch: gemini unknown


def test_max_cost_passes_by_batch_where_the_ordinary_run_would_be_refused() -> None:
    plans = [plan(role("scorer j", "openai", 2.0, 1.0))]
    with pytest.raises(UsageError, match=r"worst case is \$6.000000, over the limit"):
        check_max_cost(plans, 3.5, batch=sent_by_batch("off"))
    with pytest.raises(UsageError, match=r"worst case is \$4.000000"):
        check_max_cost(plans, 3.5, batch=sent_by_batch("targets"))
    check_max_cost(plans, 3.5, batch=sent_by_batch("all"))  # $3: under it
