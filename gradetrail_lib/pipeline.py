"""The pipeline, step by step: plan → responses → scores. The CLI and Dagster share it.

Each step is a function of the previous one's output, so Dagster assets can call them
one per asset while `gradetrail run` calls them in a row.
"""

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from gradetrail_lib.backends.base import Backend
from gradetrail_lib.cache import ResponseCache
from gradetrail_lib.dataset import Dataset, Sample, load_dataset
from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.pricing import PriceList, load_prices
from gradetrail_lib.providers.base import ModelResponse, ProviderError
from gradetrail_lib.render import PromptRenderer
from gradetrail_lib.request import ModelRequest, endpoint_for, key_base_url, request_keyer
from gradetrail_lib.request import request_params as params_of
from gradetrail_lib.scorers import Scorer, build_scorer
from gradetrail_lib.spec import LoadedSpec, ModelConfig

Outcome = Literal["scored", "provider_error", "scorer_error"]
FailureMode = Literal["wrong_answer", "truncated", "provider_error", "scorer_error"]

# Reported after each finished request: (done, total).
Progress = Callable[[int, int], None]


# Not frozen, for speed: one per sample (see pipeline.ResultRow).
@dataclass
class PlannedSample:
    sample: Sample
    request: ModelRequest


@dataclass(frozen=True)
class EvalPlan:
    """Everything decided before any call: rendered requests, keys and a checked scorer."""

    loaded: LoadedSpec
    dataset: Dataset
    model: ModelConfig
    items: list[PlannedSample]
    scorer: Scorer

    @property
    def dataset_label(self) -> str:
        return self.loaded.spec.dataset.path

    @cached_property
    def unique_requests(self) -> dict[str, ModelRequest]:
        """Each request once, by key (samples that render alike share one request)."""
        unique: dict[str, ModelRequest] = {}
        for item in self.items:
            unique.setdefault(item.request.key, item.request)
        return unique

    def request_keys(self) -> list[str]:
        return list(self.unique_requests)


def load_spec_dataset(loaded: LoadedSpec) -> Dataset:
    return load_dataset(loaded.resolve(loaded.spec.dataset.path), loaded.spec.dataset.path)


def plan(loaded: LoadedSpec, model: ModelConfig, dataset: Dataset | None = None) -> EvalPlan:
    """Render every request and check every sample can be scored; raises InputError(s)."""
    dataset = dataset or load_spec_dataset(loaded)
    label = loaded.spec.dataset.path
    renderer = PromptRenderer(loaded.spec)
    scorer = build_scorer(loaded.spec.scorer, loaded.base_dir)
    params = params_of(loaded.spec.params)
    endpoint = endpoint_for(model, live_base_url="local://" if model.provider == "local" else None)
    key_of = request_keyer(model.provider, model.name, key_base_url(model), params)
    items: list[PlannedSample] = []
    errors: list[InputError] = []
    for sample in dataset.samples:
        try:
            messages = renderer.messages(sample, label)
            scorer.check(sample, label)
        except InputError as exc:
            errors.append(exc)
            continue
        request = ModelRequest(key_of(messages), endpoint, messages, params)
        items.append(PlannedSample(sample, request))
    if errors:
        raise errors[0] if len(errors) == 1 else InputErrors(errors[:20])
    return EvalPlan(loaded, dataset, model, items, scorer)


@dataclass
class Responses:
    """What the responses step produced, by request key."""

    responses: dict[str, ModelResponse] = field(default_factory=dict)
    errors: dict[str, ProviderError] = field(default_factory=dict)
    cache_hits: set[str] = field(default_factory=set)
    calls: int = 0
    wall_s: float = 0.0
    # How the misses were sent (the backend's describe()), for the manifest.
    execution: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class CacheLookup:
    """The cached responses of a plan's keys, and how long finding them took."""

    responses: dict[str, ModelResponse]
    wall_s: float

    def complete(self, plan: EvalPlan) -> bool:
        return len(self.responses) == len(plan.unique_requests)


def look_up(plan: EvalPlan, cache: ResponseCache) -> CacheLookup:
    started = time.perf_counter()
    responses = cache.lookup(plan.request_keys())
    return CacheLookup(responses, time.perf_counter() - started)


@contextmanager
def _live_requests(plan: EvalPlan, requests: list[ModelRequest]) -> Iterator[list[ModelRequest]]:
    """Requests bound to a reachable endpoint: a local model's server runs meanwhile."""
    if plan.model.provider != "local" or not requests:
        yield requests
        return
    from gradetrail_lib.providers.local_server import local_server

    with local_server(plan.model.name) as base_url:
        endpoint = endpoint_for(plan.model, live_base_url=base_url)
        yield [dataclasses.replace(r, endpoint=endpoint) for r in requests]


def fetch_responses(
    plan: EvalPlan,
    cache: ResponseCache | None,
    backend: Backend,
    *,
    read_cache: bool = True,
    looked_up: CacheLookup | None = None,
    progress: Progress | None = None,
) -> Responses:
    """Look every key up; call the provider for the misses only, caching each on arrival.

    `looked_up` is the plan's `look_up` when the caller made it already (to know before
    this step whether anything is to be sent); its time counts as this step's."""
    started = time.perf_counter() - (looked_up.wall_s if looked_up else 0.0)
    if plan.model.provider == "local":
        # llama.cpp's server answers one request at a time; more would only queue there
        # and make the measured latencies lie.
        backend = backend.limited(1)
    result = Responses(execution=backend.describe())  # as it ran, limits applied
    unique = plan.unique_requests
    if cache is not None and read_cache:
        found = looked_up or look_up(plan, cache)
        result.responses = dict(found.responses)
        result.cache_hits = set(result.responses)
    missing = [r for k, r in unique.items() if k not in result.responses]
    total = len(unique)
    if progress:
        progress(len(result.responses), total)
    writer_scope = cache.writer() if cache is not None else nullcontext(None)
    with writer_scope as writer, _live_requests(plan, missing) as live:

        def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
            result.calls += 1
            if isinstance(outcome, ProviderError):
                result.errors[request.key] = outcome
            else:
                result.responses[request.key] = outcome
                if writer is not None:
                    writer.put(request, outcome)
            if progress:
                progress(len(result.responses) + len(result.errors), total)
            if writer is not None and result.calls == len(live):
                writer.finish()  # the last write need not wait for the backend to wind down

        backend.run(live, on_result)
    result.wall_s = time.perf_counter() - started
    return result


# Not frozen, though nothing assigns to it after construction: a run builds one per
# sample, and a frozen dataclass's __init__ (object.__setattr__ per field) cost ~3 us
# for 12 fields here against ~0.5 us: ~0.1 s of a warm 10,000-sample run over all such types.
@dataclass
class ResultRow:
    id: str
    request_key: str
    messages: list[dict[str, str]]
    response: str | None
    served_model: str | None
    stop_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    latency_s: float | None
    cost_usd: float | None
    cache_hit: bool
    score: float | None
    reason: str
    outcome: Outcome
    failure_mode: FailureMode | None

    def to_json(self) -> dict[str, Any]:
        # Shallow on purpose: dataclasses.asdict deep-copies and dominates a warm run.
        row = dict(self.__dict__)
        row["usage"] = {
            "input_tokens": row.pop("input_tokens"),
            "output_tokens": row.pop("output_tokens"),
        }
        return row


def score_all(
    plan: EvalPlan, responses: Responses, prices: PriceList | None = None
) -> list[ResultRow]:
    """Apply the scorer to every response; a scorer that raises marks only that sample."""
    prices = prices or load_prices()
    rows = []
    for item in plan.items:
        key = item.request.key
        sample_id, messages = item.sample.id, item.request.messages
        response = responses.responses.get(key)
        if response is None:
            error = responses.errors.get(key)
            reason = error.message if error else "no response (run interrupted)"
            rows.append(
                ResultRow(
                    id=sample_id,
                    request_key=key,
                    messages=messages,
                    response=None,
                    served_model=None,
                    stop_reason=None,
                    input_tokens=None,
                    output_tokens=None,
                    latency_s=None,
                    cost_usd=None,
                    cache_hit=False,
                    score=None,
                    reason=reason,
                    outcome="provider_error",
                    failure_mode="provider_error",
                )
            )
            continue
        outcome: Outcome = "scored"
        failure: FailureMode | None = None
        value: float | None
        try:
            scored = plan.scorer.score(response.text, item.sample)
            value, reason = scored.value, scored.reason
            if value < 1.0:
                failure = "truncated" if response.stop_reason == "max_tokens" else "wrong_answer"
        except Exception as exc:  # one bad sample must not stop the run
            value, reason = None, f"scorer raised {type(exc).__name__}: {exc}"
            outcome, failure = "scorer_error", "scorer_error"
        rows.append(
            ResultRow(
                id=sample_id,
                request_key=key,
                messages=messages,
                response=response.text,
                served_model=response.served_model,
                stop_reason=response.stop_reason,
                input_tokens=response.input_tokens,
                output_tokens=response.output_tokens,
                latency_s=response.latency_s,
                cost_usd=prices.cost(
                    plan.model.provider,
                    plan.model.name,
                    response.input_tokens,
                    response.output_tokens,
                ),
                cache_hit=key in responses.cache_hits,
                score=value,
                reason=reason,
                outcome=outcome,
                failure_mode=failure,
            )
        )
    return rows
