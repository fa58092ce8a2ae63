"""Dagster's responses step, a run's first half on its own: every response of a plan in
the cache (the misses sent), with what the scores step needs of it (the counts, the
errors the cache does not keep, the keys it sent) and a fingerprint of every outcome.
The scores step then runs the whole model (`engine.run.run_model`) with the target's
requests not sent."""

import hashlib
from dataclasses import dataclass, field

from gradetrail_lib.backends.base import Backend
from gradetrail_lib.backends.batch import BatchMode, BatchOptions
from gradetrail_lib.cache.base import Cache
from gradetrail_lib.engine.plan import RunPlan
from gradetrail_lib.engine.responses import Progress, batch_fingerprint
from gradetrail_lib.engine.run import (
    attach_exec_cache,
    batch_backends,
    interrupted,
    response_batches,
)
from gradetrail_lib.providers.base import ProviderError
from gradetrail_lib.providers.pricing import PriceList, call_cost, load_prices, sum_costs
from gradetrail_lib.results.keyset import KeySet


@dataclass
class FetchedRun:
    """What a responses step that ran on its own (Dagster's responses asset) hands on:
    not the responses (they are in the cache, by request key) but their counts, the
    errors (which the cache does not keep) and a fingerprint of every outcome."""

    requests: int = 0
    cache_hits: int = 0
    calls: int = 0
    errors: dict[str, ProviderError] = field(default_factory=dict)
    # The keys this step answered by calling the provider: a later step that reads them
    # from the cache records them as this run's calls (paid), not as cache hits.
    sent: KeySet = field(default_factory=KeySet)
    input_tokens: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    execution: dict[str, object] = field(default_factory=dict)
    # An agent's: cases, steps, how its cases stopped.
    agent: dict[str, int] = field(default_factory=dict)
    fingerprint: str = ""
    # The answers' cost at the price list's rates (a cache hit at what it cost), and what
    # batch and prompt caching saved on them; None when a price is unknown.
    cost_usd: float | None = 0.0
    cost_saved_usd: float | None = 0.0
    # The distinct images and documents the prompts showed (by hash).
    media: int = 0


def fetch_run(
    plan: RunPlan,
    cache: Cache,
    backend: Backend,
    *,
    progress: Progress | None = None,
    batch: BatchMode = "off",
    batch_options: BatchOptions | None = None,
    prices: PriceList | None = None,
) -> FetchedRun:
    """Every response of the plan in the cache (the misses sent), batch by batch. A key
    an earlier batch sent that a later one finds is neither a cache hit nor a call.
    `batch` other than off sends the misses through provider batch APIs."""
    backend, _ = batch_backends(cache, backend, batch, batch_options or BatchOptions())
    attach_exec_cache(plan, cache, enabled=True)
    try:
        return _fetch_run(plan, cache, backend, progress, prices or load_prices())
    except KeyboardInterrupt:
        interrupted(backend)
        raise


def _fetch_run(
    plan: RunPlan, cache: Cache, backend: Backend, progress: Progress | None, prices: PriceList
) -> FetchedRun:
    fetched = FetchedRun()
    digest = hashlib.sha256()
    timings: dict[str, float] = {}
    for part, responses, _ in response_batches(
        plan, cache, backend, timings=timings, progress=progress
    ):
        digest.update(batch_fingerprint(responses).encode())
        fetched.errors.update(responses.errors)
        fetched.calls += responses.calls
        fetched.execution = {**fetched.execution, **responses.execution}
        answered = list(responses.responses.values())
        fetched.input_tokens += sum(r.input_tokens or 0 for r in answered)
        fetched.output_tokens += sum(r.output_tokens or 0 for r in answered)
        costs = [call_cost(r, prices, plan.model.provider, plan.model.name) for r in answered]
        fetched.cost_usd = sum_costs([fetched.cost_usd, *(c.usd for c in costs)])
        fetched.cost_saved_usd = sum_costs(
            [fetched.cost_saved_usd]
            + [c.batch_saved_usd for c in costs]
            + [c.cache_saved_usd for c in costs]
        )
        if responses.trajectories:
            cases = list(responses.trajectories.values())
            steps = [c for t in cases for c in t.calls]
            fetched.sent.add(c.request.key for c in steps if not c.cache_hit)
            fetched.requests += len(steps)
            hits = [c for c in steps if c.cache_hit and c.request.key not in fetched.sent]
            fetched.cache_hits += len(hits)
            stopped = [t.stopped for t in cases]
            for name, value in (
                ("cases", len(cases)),
                ("steps", sum(len(t.steps) for t in cases)),
                ("thrash", stopped.count("thrash")),
                ("budget_exhausted", stopped.count("budget_exhausted")),
                ("cases_with_tool_errors", sum(t.tool_error for t in cases)),
            ):
                fetched.agent[name] = fetched.agent.get(name, 0) + value
        else:
            fetched.requests += len(part.unique_requests)
            fetched.cache_hits += sum(k not in fetched.sent for k in responses.cache_hits)
            fetched.sent.add(k for k in responses.responses if k not in responses.cache_hits)
    fetched.wall_s = timings.get("cache_lookup", 0.0) + timings.get("responses", 0.0)
    fetched.fingerprint = digest.hexdigest()
    fetched.media = len(plan.renderer.media.seen)
    return fetched
