"""The calls of one role in trace records (the target's, or the judges', or one scorer's):
requests sent, cache hits, errors, tokens, cost paid and reused. Below both `summary`
and `stats`, which use it."""

from collections.abc import Iterable

from gradetrail_lib.pricing import sum_costs
from gradetrail_lib.trace import CallTotals, Role, TraceRecord


def call_totals(
    records: Iterable[TraceRecord], role: Role, scorer: str | None = None
) -> CallTotals:
    """Calls of one role (of one scorer's, when named). `calls` counts distinct requests
    this run sent (samples that render alike share one); a cache hit's cost was paid by
    an earlier run."""
    sent: set[str] = set()
    hits = errors = tokens_in = tokens_out = 0
    costs: list[float | None] = []
    paid: list[float | None] = []
    for record in records:
        for call in record.calls:
            if call.role != role or (scorer is not None and call.scorer != scorer):
                continue
            if call.cache_hit:
                hits += 1
            else:
                sent.add(call.request_key)
            if call.error is not None:
                errors += 1
                continue
            tokens_in += call.input_tokens or 0
            tokens_out += call.output_tokens or 0
            costs.append(call.cost_usd)
            if not call.cache_hit:
                paid.append(call.cost_usd)
    return CallTotals(
        calls=len(sent),
        cache_hits=hits,
        errors=errors,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost_usd=sum_costs(costs),
        cost_paid_usd=sum_costs(paid),
    )
