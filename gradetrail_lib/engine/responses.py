"""The responses step: a batch's requests looked up in the cache and the misses sent
through the backend, each answer stored as it arrives and pushed to a listener (the
records' builder) as soon as it is known, so judging overlaps with sending. An agent's
batch goes through its step loop (`agents.loop`), each step the same way."""

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Protocol

from gradetrail_lib.agents.loop import AgentSetup, Trajectory, run_agents
from gradetrail_lib.agents.loop import Outcome as StepOutcome
from gradetrail_lib.backends.base import Backend
from gradetrail_lib.backends.live_endpoints import live_requests
from gradetrail_lib.cache.base import Cache, Writer
from gradetrail_lib.engine.claiming import StepClaims
from gradetrail_lib.engine.plan import Batch
from gradetrail_lib.hashing import canonical_json, hash_json, sha256_hex
from gradetrail_lib.providers import registry as providers
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError

# Reported after each finished request: (done, total).
Progress = Callable[[int, int], None]


class ResponseListener(Protocol):
    """Sees each target response as soon as it is known: the cached ones at once, each
    new one as it arrives (called from the sending thread); an agent's case when it ends."""

    def on_cached(self, responses: dict[str, ModelResponse]) -> None: ...

    def on_response(self, key: str, response: ModelResponse, cache_hit: bool) -> None: ...

    def on_trajectory(self, position: int, trajectory: Trajectory) -> None: ...


@dataclass
class Responses:
    """What a step's calls produced, by request key: the target's responses step, or the
    scorers' calls (`scorer_calls`)."""

    responses: dict[str, ModelResponse] = field(default_factory=dict)
    errors: dict[str, ProviderError] = field(default_factory=dict)
    cache_hits: set[str] = field(default_factory=set)
    calls: int = 0
    wall_s: float = 0.0
    # How the misses were sent (the backend's describe()), for the manifest.
    execution: dict[str, object] = field(default_factory=dict)
    # An agent's cases, by position in the plan's items (every step's call is above too).
    trajectories: dict[int, Trajectory] = field(default_factory=dict)

    def outcome(self, key: str) -> ModelResponse | ProviderError | None:
        return self.responses.get(key) or self.errors.get(key)

    def take(
        self,
        request: ModelRequest,
        outcome: ModelResponse | ProviderError,
        writer: Writer | None,
    ) -> bool:
        """One call's outcome, a response stored in the cache as it arrives; whether it
        was a response. Every sending step (target, agent, scorers' calls) records here."""
        self.calls += 1
        if isinstance(outcome, ProviderError):
            self.errors[request.key] = outcome
            return False
        if writer is not None:
            writer.put(request, outcome)
        # The provider's body goes to the cache only: kept here, a batch's bodies would
        # be most of what a cold run holds.
        self.responses[request.key] = replace(outcome, raw={}) if outcome.raw else outcome
        return True


@dataclass(frozen=True)
class CacheLookup:
    """The cached responses of a plan's keys, and how long finding them took."""

    responses: dict[str, ModelResponse]
    wall_s: float

    def complete(self, plan: Batch) -> bool:
        return len(self.responses) == len(plan.unique_requests)


def look_up(plan: Batch, cache: Cache) -> CacheLookup:
    started = time.perf_counter()
    responses = cache.lookup(plan.request_keys())
    return CacheLookup(responses, time.perf_counter() - started)


def fetch_responses(
    plan: Batch,
    cache: Cache,
    backend: Backend,
    *,
    looked_up: CacheLookup | None = None,
    progress: Progress | None = None,
    listener: ResponseListener | None = None,
    ahead: Iterable[Sequence[ModelRequest]] | None = None,
) -> Responses:
    """Look every key up; call the provider for the misses only, caching each on arrival
    (so a later batch of the run finds it: a run sends a key once, whatever its cache).

    `looked_up` is the plan's `look_up` when the caller made it already (to know before
    this step whether anything is to be sent); its time counts as this step's.
    `listener` sees each response as soon as it is known (to start judging it).
    `ahead`: the requests of every part of the run, which the backend is told to expect
    before this part waits (`Backend.expect`: a sender by batch submits them all now)."""
    started = time.perf_counter() - (looked_up.wall_s if looked_up else 0.0)
    limit = providers.concurrency_limit(plan.model.provider)
    if limit is not None:  # e.g. a local llama.cpp server, which answers one at a time
        backend = backend.limited(limit)
    if plan.toolbox is not None:
        backend = backend.stepwise(
            (plan.model.provider, plan.model.name),
            "the spec has tools: its steps are sent the ordinary way, not by batch "
            "(each step depends on the answer to the last)",
        )
        return _agent_responses(
            plan, cache, backend, started=started, looked_up=looked_up, progress=progress,
            listener=listener,
        )  # fmt: skip
    if ahead is not None:
        backend.expect(ahead)
    result = Responses(execution=backend.describe())  # as it ran, limits applied
    unique = plan.unique_requests
    found = looked_up or look_up(plan, cache)
    result.responses = dict(found.responses)
    result.cache_hits = set(result.responses)
    if listener is not None:
        listener.on_cached(result.responses)
    missing = [r for k, r in unique.items() if k not in result.responses]
    total = len(unique)
    if progress:
        progress(len(result.responses), total)
    # Runs sharing the cache claim what they are about to send: this step sends what it
    # claimed and waits for the rest, which other runs are sending (`claiming`).
    claims = StepClaims(cache)

    def report() -> None:
        if progress:
            progress(len(result.responses) + len(result.errors), total)

    try:
        missing, waiting = claims.split(missing, result, listener)
        # (No writer, and its thread, for a batch the cache answered whole.)
        writer_scope = cache.writer() if missing or waiting else nullcontext(None)
        with writer_scope as writer, live_requests(missing) as live:

            def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
                answered = result.take(request, outcome, writer)
                claims.settled(request, outcome)
                if answered and listener is not None:
                    assert isinstance(outcome, ModelResponse)
                    listener.on_response(request.key, outcome, False)
                report()
                if writer is not None and not waiting and result.calls == len(live):
                    writer.finish()  # the last write need not wait for the backend to end

            backend.run(live, on_result)
            if waiting:
                claims.wait(waiting, backend, result, listener, on_result, report)
    finally:
        claims.close()  # after the writer stored the answers: a waiter finds them
    result.wall_s = time.perf_counter() - started
    return result


def _agent_responses(
    plan: Batch,
    cache: Cache,
    backend: Backend,
    *,
    started: float,
    looked_up: CacheLookup | None,
    progress: Progress | None,
    listener: ResponseListener | None,
) -> Responses:
    """An agent's responses step: the cases run by `agents.loop`, each step's requests
    looked up in the cache and the misses sent through the backend, every answer stored
    as it arrives."""
    assert plan.toolbox is not None and plan.builder is not None
    result = Responses(execution=backend.describe())
    if looked_up is not None:
        result.responses.update(looked_up.responses)
        result.cache_hits.update(looked_up.responses)
    spec = plan.loaded.spec
    setup = AgentSetup(
        toolbox=plan.toolbox,
        builder=plan.builder,
        budget=spec.step_budget,
        dataset_label=spec.dataset.label,
    )
    # Each round of steps claims its misses as the target's step does (`claiming`), so
    # runs of one agent spec at once send each step once.
    claims = StepClaims(cache)
    try:
        with cache.writer() as writer:

            def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
                result.take(request, outcome, writer)
                claims.settled(request, outcome)

            def send(requests: list[ModelRequest]) -> dict[str, tuple[StepOutcome, bool]]:
                unknown = [
                    r
                    for r in requests
                    if r.key not in result.responses and r.key not in result.errors
                ]
                if unknown:
                    found = cache.lookup([r.key for r in unknown])
                    result.responses.update(found)
                    result.cache_hits.update(found)
                misses = [r for r in unknown if r.key not in result.responses]
                if misses:
                    claims.send(misses, backend, result, on_result)
                hits = result.cache_hits
                return {r.key: (_outcome_of(result, r.key), r.key in hits) for r in requests}

            result.trajectories = run_agents(
                plan.items, setup, send,
                on_trajectory=listener.on_trajectory if listener is not None else None,
                progress=progress,
            )  # fmt: skip
    finally:
        claims.close()  # after the writer stored the answers: a waiter finds them
    result.wall_s = time.perf_counter() - started
    return result


def _outcome_of(responses: Responses, key: str) -> StepOutcome:
    outcome = responses.outcome(key)
    assert outcome is not None, f"no outcome for {key}"
    return outcome


def batch_fingerprint(responses: Responses) -> str:
    """A content hash of a batch of a responses step's output (the step's data version
    hashes its batches'): every answer with its tool calls, every error, and an agent's
    tool results (the last step's go into no later key)."""
    return hash_json(
        {
            "ok": sorted(
                (k, sha256_hex(r.text), r.stop_reason, canonical_json(r.tool_calls))
                for k, r in responses.responses.items()
            ),
            "failed": sorted((k, e.message) for k, e in responses.errors.items()),
            "tools": sorted(
                (
                    p,
                    sha256_hex(
                        canonical_json(
                            [
                                [(t.name, t.content, t.error) for t in step.tool_results]
                                for step in trajectory.steps
                            ]
                        )
                    ),
                    trajectory.stopped or "",
                )
                for p, trajectory in responses.trajectories.items()
            ),
        }
    )
