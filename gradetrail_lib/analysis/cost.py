"""Repricing result sets from the versioned pricing data.

Every answered call is priced at the chosen pricing version, including cache hits
(their tokens were paid for once; this is what the eval costs to reproduce). A model
without a price, or a call without token counts, makes the total unknown rather than
a partial sum that would understate it; both are listed so the reader sees why.
Calls that failed at the provider have no usage and are not billed. A run sends a request
once: a record that shared a request its run sent for another record was not paid again.
A judge's calls are a line of their own (role `judge`), apart from the model under test.
Each call is priced from its own usage: whether a batch answered it, its input read from
and written to the provider's prompt cache, its output (reasoning included); what batch
and prompt caching saved is shown per model (`pricing.call_cost`).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gradetrail_lib.providers import registry
from gradetrail_lib.providers.pricing import LOCAL_COST, PriceList, format_usd, usage_cost
from gradetrail_lib.results.totals import SentKeys
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD, Manifest, Role, TraceRecord


@dataclass
class ModelCost:
    provider: str
    model: str
    role: Role = "target"
    samples: int = 0
    calls: int = 0  # answered calls
    cache_hits: int = 0  # answered calls served from the cache (priced all the same)
    scored: int = 0
    passed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    missing_usage: int = 0  # answered calls without token counts
    unpriced_batch: int = 0  # batch calls and the price list has no batch price
    priced: bool = True
    known_usd: float = 0.0
    # Of known_usd: what answers served from the cache had cost when first paid for.
    reused_usd: float = 0.0
    # Of known_usd: what records that shared a request their run sent for another had cost.
    shared_usd: float = 0.0
    # Of the answered calls: answered by a batch; prompt-cache and reasoning tokens.
    batch_calls: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    reasoning_tokens: int = 0
    # What batch and prompt caching saved on the priced calls (unknown with cost_usd).
    batch_saved: float = 0.0
    cache_saved: float = 0.0

    @property
    def name(self) -> str:
        suffix = " (judge)" if self.role == "judge" else ""
        return f"{self.provider}/{self.model}{suffix}"

    @property
    def local(self) -> bool:
        """A local model (`registry.runs_locally`): no price, whatever the list says."""
        return registry.runs_locally(self.provider)

    @property
    def cost_usd(self) -> float | None:
        known = self.priced and not self.missing_usage and not self.unpriced_batch
        return self.known_usd if known and not self.local else None

    def usd(self, value: float | None) -> str:
        """One of this model's costs as text: `LOCAL_COST` for a local model's."""
        return LOCAL_COST if self.local else format_usd(value)

    @property
    def paid_usd(self) -> float | None:
        """What the runs' own calls cost (cache hits were paid for by an earlier run, a
        shared request once)."""
        cost = self.cost_usd
        return None if cost is None else cost - self.reused_usd - self.shared_usd

    @property
    def batch_saved_usd(self) -> float | None:
        return None if self.cost_usd is None else self.batch_saved

    @property
    def cache_saved_usd(self) -> float | None:
        return None if self.cost_usd is None else self.cache_saved

    @property
    def reused_usd_or_none(self) -> float | None:
        return None if self.cost_usd is None else self.reused_usd

    def per(self, count: int) -> float | None:
        cost = self.cost_usd
        return cost / count if cost is not None and count else None

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "role": self.role,
            "samples": self.samples,
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "scored": self.scored,
            "passed": self.passed,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "batch_calls": self.batch_calls,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_input_tokens": self.cache_write_input_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "batch_saved_usd": self.batch_saved_usd,
            "cache_saved_usd": self.cache_saved_usd,
            "missing_usage": self.missing_usage,
            "priced": self.priced and not self.local,
            # A local model's costs are null: it has no price (not an unknown one).
            "local": self.local,
            "cost_usd": self.cost_usd,
            "paid_usd": self.paid_usd,
            "reused_from_cache_usd": self.reused_usd_or_none,
            "shared_usd": None if self.cost_usd is None else self.shared_usd,
            "cost_per_scored_usd": self.per(self.scored),
            "cost_per_passed_usd": self.per(self.passed),
        }


@dataclass
class CostReport:
    pricing_version: str
    effective_date: str
    models: list[ModelCost] = field(default_factory=list)

    @property
    def total_usd(self) -> float | None:
        return _total(self.models)

    def total_of(self, role: Role) -> float | None:
        """The total of the models under test (`target`) or of the judges (`judge`)."""
        return _total([m for m in self.models if m.role == role])

    @property
    def unknown_prices(self) -> list[str]:
        return [m.name for m in self.models if not m.priced and not m.local]

    def to_json(self) -> dict[str, Any]:
        return {
            "pricing_version": self.pricing_version,
            "effective_date": self.effective_date,
            "models": [m.to_json() for m in self.models],
            "total_usd": self.total_usd,
            "total_by_role_usd": {role: self.total_of(role) for role in ("target", "judge")},
            "unknown_prices": self.unknown_prices,
        }


def _total(models: Sequence[ModelCost]) -> float | None:
    """The priced models' total (a local model adds nothing: it has no price); None when
    a cost is unknown, or when every model is local."""
    priced = [m for m in models if not m.local]
    costs = [m.cost_usd for m in priced]
    if not priced and models:
        return None
    return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)


def _total_text(models: Sequence[ModelCost]) -> str:
    """A total as text: `LOCAL_COST` when every model in it is local."""
    if models and all(m.local for m in models):
        return LOCAL_COST
    return format_usd(_total(models))


def reprice(
    runs: Sequence[tuple[Manifest, Iterable[TraceRecord]]],
    prices: PriceList,
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> CostReport:
    """Cost per (provider, model, role) over (manifest, records) pairs. Pricing is by the
    requested model, as at run time: a provider's dated alias bills as its name. Scored
    and passed counts are the primary scorer's."""
    report = CostReport(prices.version, prices.effective_date)
    by_model: dict[tuple[str, str, str], ModelCost] = {}

    def entry(provider: str, name: str, role: Role) -> ModelCost:
        found = by_model.get((provider, name, role))
        if found is None:
            found = by_model[(provider, name, role)] = ModelCost(provider, name, role)
            found.priced = prices.priced(provider, name)
        return found

    for manifest, records in runs:
        target = entry(manifest.model.provider, manifest.model.requested, "target")
        sent = SentKeys()  # the run's own calls, told from the records that shared one
        primary = manifest.primary_scorer
        for record in records:
            target.samples += 1
            target.scored += record.scored(primary)
            target.passed += record.passes(primary, threshold)
            # A judge model counts a sample once, however many calls it made for it.
            judged: set[tuple[str, str]] = set()
            for call in record.calls:
                if call.role == "target":
                    billed = target
                else:
                    billed = entry(call.provider, call.model, call.role)
                    if (call.provider, call.model) not in judged:
                        judged.add((call.provider, call.model))
                        billed.samples += 1
                shared = not call.cache_hit and not sent.first(call)
                if call.error is not None:
                    continue
                billed.calls += 1
                billed.cache_hits += call.cache_hit
                billed.input_tokens += call.input_tokens or 0
                billed.output_tokens += call.output_tokens or 0
                usage = call.usage_or_default
                billed.batch_calls += usage.batch
                billed.cached_input_tokens += usage.cached_input_tokens
                billed.cache_write_input_tokens += (
                    usage.cache_write_input_tokens + usage.cache_write_1h_input_tokens
                )
                billed.reasoning_tokens += usage.reasoning_tokens
                priced = usage_cost(
                    prices,
                    call.provider,
                    call.model,
                    input_tokens=call.input_tokens,
                    output_tokens=call.output_tokens,
                    batch=usage.batch,
                    cached_input_tokens=usage.cached_input_tokens,
                    cache_write_input_tokens=usage.cache_write_input_tokens,
                    cache_write_1h_input_tokens=usage.cache_write_1h_input_tokens,
                    reasoning_tokens=usage.reasoning_tokens,
                )
                cost = priced.usd
                if cost is not None:
                    billed.known_usd += cost
                    billed.batch_saved += priced.batch_saved_usd or 0.0
                    billed.cache_saved += priced.cache_saved_usd or 0.0
                    if call.cache_hit:
                        billed.reused_usd += cost
                    elif shared:
                        billed.shared_usd += cost
                elif call.input_tokens is None or call.output_tokens is None:
                    billed.missing_usage += 1
                elif billed.priced:  # a batch call and the list has no batch price
                    billed.unpriced_batch += 1
    report.models = sorted(by_model.values(), key=lambda m: (m.role != "target", m.name))
    return report


def format_cost(report: CostReport) -> str:
    usd = format_usd
    lines = [
        f"Pricing {report.pricing_version} (effective {report.effective_date}); "
        "every answered call priced, cache hits included",
        f"{'model':<40} {'calls':>6} {'cached':>6} {'tokens in':>10} {'tokens out':>10} "
        f"{'cost':>12} {'per scored':>12} {'per passed':>12}",
    ]
    for m in report.models:
        # A judge scores no sample of its own: its cost per sample is the target's concern;
        # a local model has none (its cost cell says why).
        per_sample = m.role == "target" and not m.local
        per_scored = m.usd(m.per(m.scored)) if per_sample else "-"
        per_passed = m.usd(m.per(m.passed)) if per_sample else "-"
        lines.append(
            f"{m.name:<40} {m.calls:>6} {m.cache_hits:>6} {m.input_tokens:>10} "
            f"{m.output_tokens:>10} {m.usd(m.cost_usd):>12} {per_scored:>12} {per_passed:>12}"
        )
    total = f"Total: {_total_text(report.models)}"
    if any(m.role == "judge" for m in report.models):
        by_role = {
            role: _total_text([m for m in report.models if m.role == role])
            for role in ("target", "judge")
        }
        total += f" (models under test {by_role['target']}; judges {by_role['judge']})"
    lines.append(total)
    for m in report.models:
        if m.local:
            lines.append(f"  {m.name}: {LOCAL_COST}")
            continue
        shared = f"; {usd(m.shared_usd)} shared (a request sent once)" if m.shared_usd else ""
        lines.append(
            f"  {m.name}: {usd(m.paid_usd)} paid by these runs; "
            f"{usd(m.reused_usd_or_none)} reused from cache{shared}"
        )
        if m.batch_calls or m.cached_input_tokens or m.cache_write_input_tokens:
            lines.append(
                f"  {m.name}: batch saved {usd(m.batch_saved_usd)} ({m.batch_calls} calls by "
                f"batch); prompt caching saved {usd(m.cache_saved_usd)} "
                f"({m.cached_input_tokens} tokens read, {m.cache_write_input_tokens} written)"
            )
        if m.reasoning_tokens:
            lines.append(f"  {m.name}: {m.reasoning_tokens} of the tokens out were reasoning")
    for m in report.models:
        if m.role == "target":
            lines.append(f"  {m.name}: {m.scored} scored, {m.passed} passed of {m.samples} samples")
        else:
            lines.append(
                f"  {m.name}: {m.calls} judge calls ({m.cache_hits} from the cache) "
                f"for {m.samples} samples"
            )
    if report.unknown_prices:
        lines.append(
            f"Unknown price in pricing {report.pricing_version}: "
            + ", ".join(report.unknown_prices)
            + " (cost reported as unknown, not $0)"
        )
    for m in report.models:
        if m.missing_usage:
            lines.append(f"{m.name}: {m.missing_usage} calls without token counts (cost unknown)")
        if m.unpriced_batch:
            lines.append(
                f"{m.name}: {m.unpriced_batch} batch calls and pricing {report.pricing_version} "
                "has no batch price (cost unknown)"
            )
    return "\n".join(lines)
