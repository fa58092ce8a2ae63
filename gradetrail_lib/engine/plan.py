"""The pipeline, step by step: plan → responses → records. The CLI and Dagster share it.

Each step is a function of the previous one's output, so Dagster assets can call them
one per asset while `gradetrail run` calls them in a row. A run goes through its samples
in batches (`RunPlan.batches`): each batch is planned, looked up, sent, scored and
written before the next is read, so a run's memory does not grow with its size.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import islice
from typing import Protocol

from gradetrail_lib.agents.loop import AgentSetup, Trajectory, run_agents
from gradetrail_lib.agents.loop import Outcome as StepOutcome
from gradetrail_lib.agents.tools import Toolbox
from gradetrail_lib.analysis.retrieval import check_sample as check_retrieval_fields
from gradetrail_lib.backends.base import Backend
from gradetrail_lib.backends.live_endpoints import live_requests
from gradetrail_lib.cache.base import Cache, Writer
from gradetrail_lib.datasets.dataset import Dataset, Sample
from gradetrail_lib.datasets.registry import load_dataset_ref
from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.hashing import canonical_json, hash_json, sha256_hex
from gradetrail_lib.providers import registry as providers
from gradetrail_lib.providers.base import ModelResponse, ProviderError
from gradetrail_lib.providers.config import ModelConfig
from gradetrail_lib.providers.request import ModelRequest, RequestBuilder
from gradetrail_lib.scorers import Scorer, build_scorer
from gradetrail_lib.spec.prompts import PromptRenderer
from gradetrail_lib.spec.spec import LoadedSpec

# Reported after each finished request: (done, total).
Progress = Callable[[int, int], None]
# Items (a sample's repeats each one) a batch: its requests, responses and records are
# what a run holds at once. A batch holds whole samples, with all their repeats.
BATCH_ITEMS = 8192


def batch_samples(repeats: int, items: int = BATCH_ITEMS) -> int:
    """The samples of a batch of about `items` items when each sample is run `repeats`
    times (at least one sample)."""
    return max(1, items // repeats)


class ResponseListener(Protocol):
    """Sees each target response as soon as it is known: the cached ones at once, each
    new one as it arrives (called from the sending thread); an agent's case when it ends."""

    def on_cached(self, responses: dict[str, ModelResponse]) -> None: ...

    def on_response(self, key: str, response: ModelResponse, cache_hit: bool) -> None: ...

    def on_trajectory(self, position: int, trajectory: Trajectory) -> None: ...


# Not frozen, for speed: one per sample.
@dataclass
class PlannedSample:
    sample: Sample
    request: ModelRequest
    repeat: int = 0


@dataclass(frozen=True)
class EvalPlan:
    """One batch of a run's items, their requests rendered and keyed, with the run's
    checked scorers. An agent's plan (a spec with tools) holds its first requests, its
    tools and the builder of the requests that follow."""

    loaded: LoadedSpec
    dataset: Dataset
    model: ModelConfig
    items: list[PlannedSample]
    scorers: list[Scorer]
    builder: RequestBuilder | None = None
    toolbox: Toolbox | None = None

    @property
    def primary_scorer(self) -> str:
        return self.scorers[0].name

    @cached_property
    def unique_requests(self) -> dict[str, ModelRequest]:
        """Each request once, by key (samples that render alike share one request)."""
        unique: dict[str, ModelRequest] = {}
        for item in self.items:
            unique.setdefault(item.request.key, item.request)
        return unique

    @cached_property
    def items_by_key(self) -> dict[str, list[int]]:
        """The positions in `items` of the samples each request answers."""
        positions: dict[str, list[int]] = {}
        for i, item in enumerate(self.items):
            positions.setdefault(item.request.key, []).append(i)
        return positions

    def request_keys(self) -> list[str]:
        return list(self.unique_requests)


def load_spec_dataset(loaded: LoadedSpec) -> Dataset:
    return load_dataset_ref(loaded.spec.dataset, loaded.base_dir)


def build_scorers(loaded: LoadedSpec, model: ModelConfig) -> list[Scorer]:
    """The spec's scorers, each checked against the model under test (a judge must not
    grade itself) and loaded (a Python scorer's function, a judge's prompt)."""
    scorers: list[Scorer] = []
    errors: list[InputError] = []
    spec = loaded.spec
    for config in spec.scorers:
        judge = getattr(config, "model", None)
        if (
            isinstance(judge, ModelConfig)
            and not getattr(config, "force_same_model", False)
            and (judge.provider, judge.name) == (model.provider, model.name)
        ):
            errors.append(
                InputError(
                    str(loaded.path),
                    None,
                    f"{config.where}.model",
                    f"the judge {judge.provider}/{judge.name} is the model under test and would "
                    "grade itself; use another judge, or set force_same_model: true",
                )
            )
            continue
        try:
            scorers.append(build_scorer(config, loaded.base_dir))
        except (OSError, ValueError) as exc:  # a file that went away since the spec loaded
            errors.append(InputError(str(loaded.path), None, config.where, str(exc)))
    if errors:
        raise errors[0] if len(errors) == 1 else InputErrors(errors)
    return scorers


@dataclass(frozen=True)
class RunPlan:
    """A run's plan, every sample checked (its prompt renders, its scorers can score it)
    before any call or write; its requests are rendered batch by batch as the run
    reaches them, so a run holds one batch at a time."""

    loaded: LoadedSpec
    dataset: Dataset
    model: ModelConfig
    scorers: list[Scorer]
    renderer: PromptRenderer
    builder: RequestBuilder
    toolbox: Toolbox | None
    repeats: int
    samples: int

    @property
    def item_count(self) -> int:
        return self.samples * self.repeats

    @property
    def scorer_names(self) -> list[str]:
        return [s.name for s in self.scorers]

    def batches(self, size: int | None = None) -> Iterator[EvalPlan]:
        """The items, `size` samples (with their repeats; default `batch_samples`) at a
        time, in order."""
        size = size or batch_samples(self.repeats)
        samples = iter(self.dataset)
        while chunk := list(islice(samples, size)):
            yield self.batch(chunk)

    def batch(self, samples: list[Sample]) -> EvalPlan:
        label = self.loaded.spec.dataset.label
        items: list[PlannedSample] = []
        for sample in samples:
            messages = self.renderer.messages(sample, label)
            for repeat in range(self.repeats):
                request = self.builder.build(messages, sample, label, repeat)
                items.append(PlannedSample(sample=sample, request=request, repeat=repeat))
        return EvalPlan(
            self.loaded, self.dataset, self.model, items, self.scorers, self.builder, self.toolbox
        )


def _check_samples(
    loaded: LoadedSpec, dataset: Dataset, renderer: PromptRenderer, builder: RequestBuilder,
    scorers: list[Scorer],
) -> int:
    """Every sample of the dataset read and checked: it renders, its request builds, every
    scorer can score it; the number of samples. Raises every input error found (the first
    20), before anything is called or written."""
    label = loaded.spec.dataset.label
    errors: list[InputError] = []
    count = 0
    for sample in dataset.validated():
        try:
            messages = renderer.messages(sample, label)
            builder.check(sample, label)
            for scorer in scorers:
                scorer.check(sample, messages, label)
            check_retrieval_fields(sample, label)
        except InputError as exc:
            errors.append(exc)
            continue
        count += 1
    if errors:
        raise errors[0] if len(errors) == 1 else InputErrors(errors[:20])
    return count


def plan(
    loaded: LoadedSpec,
    model: ModelConfig,
    dataset: Dataset | None = None,
    *,
    repeats: int | None = None,
) -> RunPlan:
    """Check that every sample renders and can be scored; raises InputError(s).
    `repeats` (default: the spec's) makes each sample that many items, repeat by repeat."""
    repeats = repeats or loaded.spec.repeats
    scorers = build_scorers(loaded, model)
    if dataset is None:
        dataset = load_spec_dataset(loaded)
    spec = loaded.spec
    toolbox = Toolbox(spec.tools, loaded.base_dir) if spec.tools is not None else None
    builder = RequestBuilder(
        model,
        spec.params,
        tools=toolbox.definitions() if toolbox is not None else None,
        tool_choice=spec.tool_choice,
    )
    renderer = PromptRenderer(spec)
    samples = _check_samples(loaded, dataset, renderer, builder, scorers)
    return RunPlan(loaded, dataset, model, scorers, renderer, builder, toolbox, repeats, samples)


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

    def complete(self, plan: EvalPlan) -> bool:
        return len(self.responses) == len(plan.unique_requests)


def look_up(plan: EvalPlan, cache: Cache) -> CacheLookup:
    started = time.perf_counter()
    responses = cache.lookup(plan.request_keys())
    return CacheLookup(responses, time.perf_counter() - started)


def fetch_responses(
    plan: EvalPlan,
    cache: Cache,
    backend: Backend,
    *,
    looked_up: CacheLookup | None = None,
    progress: Progress | None = None,
    listener: ResponseListener | None = None,
) -> Responses:
    """Look every key up; call the provider for the misses only, caching each on arrival
    (so a later batch of the run finds it: a run sends a key once, whatever its cache).

    `looked_up` is the plan's `look_up` when the caller made it already (to know before
    this step whether anything is to be sent); its time counts as this step's.
    `listener` sees each response as soon as it is known (to start judging it)."""
    started = time.perf_counter() - (looked_up.wall_s if looked_up else 0.0)
    limit = providers.concurrency_limit(plan.model.provider)
    if limit is not None:  # e.g. a local llama.cpp server, which answers one at a time
        backend = backend.limited(limit)
    if plan.toolbox is not None:
        return _agent_responses(
            plan, cache, backend, started=started, looked_up=looked_up, progress=progress,
            listener=listener,
        )  # fmt: skip
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
    # (No writer, and its thread, for a batch the cache answered whole.)
    writer_scope = cache.writer() if missing else nullcontext(None)
    with writer_scope as writer, live_requests(missing) as live:

        def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
            answered = result.take(request, outcome, writer)
            if answered and listener is not None:
                assert isinstance(outcome, ModelResponse)
                listener.on_response(request.key, outcome, False)
            if progress:
                progress(len(result.responses) + len(result.errors), total)
            if writer is not None and result.calls == len(live):
                writer.finish()  # the last write need not wait for the backend to wind down

        backend.run(live, on_result)
    result.wall_s = time.perf_counter() - started
    return result


def _agent_responses(
    plan: EvalPlan,
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
    with cache.writer() as writer:

        def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
            result.take(request, outcome, writer)

        def send(requests: list[ModelRequest]) -> dict[str, tuple[StepOutcome, bool]]:
            unknown = [
                r for r in requests if r.key not in result.responses and r.key not in result.errors
            ]
            if unknown:
                found = cache.lookup([r.key for r in unknown])
                result.responses.update(found)
                result.cache_hits.update(found)
            misses = [r for r in unknown if r.key not in result.responses]
            if misses:
                with live_requests(misses) as live:
                    backend.run(live, on_result)
            hits = result.cache_hits
            return {r.key: (_outcome_of(result, r.key), r.key in hits) for r in requests}

        result.trajectories = run_agents(
            plan.items, setup, send,
            on_trajectory=listener.on_trajectory if listener is not None else None,
            progress=progress,
        )  # fmt: skip
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
