"""Building the trace records of a batch: each sample's record starts when its target
response is known, its scorers' model calls (a judge's) are submitted then, and its
scores are filled in when every call is back.

Responses reach a `RecordBuilder` one way: the responses step pushes each to it as soon as
it is known (`on_cached`, `on_response`, an agent's `on_trajectory`), so judging overlaps
with sending; `parts` then hands the batch's records on, scored. `gradetrail run`,
`run_spec` and the Dagster scores asset (whose target answers all come from the cache)
use it the same way."""

import asyncio
from collections.abc import Awaitable, Container, Iterator
from typing import Any

from gradetrail_lib.agents.loop import Trajectory
from gradetrail_lib.backends.base import Backend
from gradetrail_lib.cache.base import Cache
from gradetrail_lib.engine.choices import by_letter, by_loglikelihood
from gradetrail_lib.engine.plan import Batch, PlannedSample
from gradetrail_lib.engine.responses import Responses
from gradetrail_lib.engine.scorer_calls import CallStage
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.pricing import CallCost, PriceList, call_cost, load_prices
from gradetrail_lib.results.trace import (
    NO_USAGE,
    SCHEMA_VERSION,
    CallUsage,
    FailureMode,
    ModelCall,
    MultipleChoice,
    Outcome,
    Role,
    ScoreEntry,
    TraceRecord,
)
from gradetrail_lib.scorers import Score, ScoreFailed, ScoreInput

_PENDING = ScoreEntry(score=None, reason="pending")

# Records made, scored and handed on at a time (`RecordBuilder.parts`): a part's records
# stay in the CPU's caches from one step to the next, a whole batch's do not
# (docs/performance.md).
PART_ITEMS = 1024


class RecordBuilder:
    """Records of one plan; `on_response` may be called from the sending thread."""

    def __init__(
        self,
        plan: Batch,
        cache: Cache,
        backend: Backend,
        *,
        prices: PriceList | None = None,
        sent_before: Container[str] = frozenset(),
    ) -> None:
        """`sent_before`: keys this run sent before this plan's (an earlier batch's, or
        Dagster's responses step's), which the cache answers now: this run paid them, so
        their calls are not cache hits (a cache hit is an earlier run's answer)."""
        self.plan = plan
        # Asked of every cache hit's call: none at all when nothing was sent before (a
        # run's first batch, a cached run). A key this plan sends is never also its hit.
        self._sent_before = sent_before if sent_before else frozenset()
        self.prices = prices or load_prices()
        self._records: list[TraceRecord | None] = [None] * len(plan.items)
        # Per item, per scorer: the requests it named when its response came.
        self._requests: dict[int, list[list[ModelRequest]]] = {}
        self._callers = [i for i, s in enumerate(plan.scorers) if s.makes_calls]
        self._stage = CallStage(cache, backend) if self._callers else None
        self._delivered: set[str] = set()
        # Cached responses whose records no scorer call waits for: made part by part.
        self._cached: dict[str, ModelResponse] = {}
        # An agent's case that stopped early, by position: thrash, budget_exhausted.
        self._stopped: dict[int, FailureMode | None] = {}
        # Multiple choice by log-likelihood: a sample's record waits for every option's
        # answer (all kept in `_cached`); the keys this run sent are in `_fresh`.
        self._by_choice = plan.loaded.spec.by_loglikelihood
        self._fresh: set[str] = set()

    @property
    def makes_calls(self) -> bool:
        """Whether some scorer of the plan makes model calls (a judge)."""
        return self._stage is not None

    def on_response(self, key: str, response: ModelResponse, cache_hit: bool) -> None:
        if self._by_choice:  # the record is made when the part is (`_choice_record`)
            self._cached[key] = response
            if not cache_hit:
                self._fresh.add(key)
            return
        if self._stage is not None:
            self._stage.submit(self._start(key, response, cache_hit))
        else:
            self._start(key, response, cache_hit)

    def on_cached(self, responses: dict[str, ModelResponse]) -> None:
        """The responses found in the cache, at once (their scorer calls in one batch)."""
        if self._stage is None and self.plan.toolbox is None:
            fresh = {k: v for k, v in responses.items() if k not in self._delivered}
            self._delivered.update(fresh)
            self._cached.update(fresh)  # nothing to start: their records wait for `parts`
            return
        requests = [r for k, v in responses.items() for r in self._start(k, v, True)]
        if self._stage is not None:
            self._stage.submit(requests)

    def _start(self, key: str, response: ModelResponse, cache_hit: bool) -> list[ModelRequest]:
        """Starts the records `key` answers; returns the scorer requests they need."""
        if key in self._delivered:
            return []
        self._delivered.add(key)
        requests: list[ModelRequest] = []
        for position in self.plan.items_by_key.get(key, ()):
            item = self.plan.items[position]
            requests += self._begin(position, self._start_record(item, response, cache_hit))
        return requests

    def on_trajectory(self, position: int, trajectory: Trajectory) -> None:
        """An agent's case is over: its record starts (and its judging)."""
        if self._records[position] is not None:
            return
        item = self.plan.items[position]
        model = self.plan.model
        # A step this run sent earlier (another case's, an earlier batch's) is not a hit.
        for shown in trajectory.steps:
            if shown.cache_hit and shown.request_key in self._sent_before:
                shown.cache_hit = False
        calls = [
            self._call(
                "target",
                step.request,
                model.provider,
                model.name,
                step.response,
                step.cache_hit,
                error=step.error,
            )
            for step in trajectory.calls
        ]
        final = trajectory.final if trajectory.stopped != "provider_error" else None
        self._stopped[position] = trajectory.stopped
        if final is None:
            self._records[position] = self._record(
                item, calls=calls, trajectory=trajectory, failed=trajectory.error or "no response"
            )
            return
        record = self._record(item, calls=calls, response=final, trajectory=trajectory)
        requests = self._begin(position, record)
        if self._stage is not None:
            self._stage.submit(requests)

    def _begin(self, position: int, record: TraceRecord) -> list[ModelRequest]:
        """Keeps the record; returns the requests its scorers need (a judge's)."""
        self._records[position] = record
        if self._stage is None or record.response is None:
            return []
        item = self.plan.items[position]
        scoring = ScoreInput(item.sample, record.response, record)
        named = [[] if not s.makes_calls else s.requests(scoring) for s in self.plan.scorers]
        self._requests[position] = named
        return [r for listed in named for r in listed]

    def cancel(self) -> None:
        """The run is aborting: stop the scorers' calls (what arrived is cached)."""
        if self._stage is not None:
            self._stage.cancel()

    def parts(self, responses: Responses, size: int = PART_ITEMS) -> Iterator[list[TraceRecord]]:
        """Every record of the batch, in order, `size` at a time, each part scored (once
        every scorer call is back). `responses` is what the responses step pushed here,
        and the errors of the requests it could not answer."""
        calls = self._stage.close() if self._stage is not None else Responses()
        items = self.plan.items
        for start in range(0, len(items), size):
            yield self._part(range(start, min(start + size, len(items))), responses, calls)

    def _part(self, positions: range, responses: Responses, calls: Responses) -> list[TraceRecord]:
        """The records at `positions`, scored (`calls`: the scorers' calls' outcomes)."""
        items = self.plan.items
        records: list[TraceRecord] = []
        pending: list[tuple[TraceRecord, str, Awaitable[Score]]] = []
        for position in positions:
            item = items[position]
            record = self._records[position]
            if record is None and item.choice_requests is not None:
                record = self._choice_record(item, responses)
            elif record is None:
                cached = self._cached.get(item.request.key)
                if cached is None:
                    records.append(self._unanswered(item, responses))
                    continue
                record = self._start_record(item, cached, True)
            else:
                self._records[position] = None  # the part's caller holds it now
            if record.response is not None:
                pending.extend(self._score(position, item, record, calls))
            records.append(record)
        if pending:
            asyncio.run(_await_scores(pending))
        for position, record in zip(positions, records, strict=True):
            if record.response is not None:
                _settle(record, self.plan.primary_scorer, self._stopped.get(position))
        return records

    # -- one record

    def _target_call(
        self,
        request: ModelRequest,
        response: ModelResponse | None,
        cache_hit: bool,
        error: str | None = None,
    ) -> ModelCall:
        model = self.plan.model
        return self._call(
            "target", request, model.provider, model.name, response, cache_hit, error=error
        )

    def _call(
        self,
        role: Role,
        request: ModelRequest,
        provider: str,
        model: str,
        response: ModelResponse | None,
        cache_hit: bool,
        *,
        scorer: str | None = None,
        text: str | None = None,
        error: str | None = None,
    ) -> ModelCall:
        """A call as the record keeps it; priced as the model it was asked of. A judge's
        call names its `scorer` and keeps its whole output (`text`); `error`: why the call
        failed. A key this run sent (`sent_before`) is not a cache hit."""
        if cache_hit and request.key in self._sent_before:
            cache_hit = False
        if response is None:
            return ModelCall(
                role=role,
                request_key=request.key,
                provider=provider,
                model=model,
                served_model=None,
                input_tokens=None,
                output_tokens=None,
                latency_s=None,
                cost_usd=None,
                cache_hit=cache_hit,
                stop_reason=None,
                scorer=scorer,
                text=text,
                error=error,
            )
        cost = call_cost(response, self.prices, provider, model)
        return ModelCall(
            role=role,
            request_key=request.key,
            provider=provider,
            model=model,
            served_model=response.served_model,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
            latency_s=response.latency_s,
            cost_usd=cost.usd,
            cache_hit=cache_hit,
            stop_reason=response.stop_reason,
            scorer=scorer,
            text=text,
            error=error,
            usage=_usage(response, cost),
        )

    def _start_record(
        self, item: PlannedSample, response: ModelResponse, cache_hit: bool
    ) -> TraceRecord:
        call = self._target_call(item.request, response, cache_hit)
        return self._record(item, calls=[call], response=response)

    def _choice_record(self, item: PlannedSample, responses: Responses) -> TraceRecord:
        """A multiple-choice sample's record by log-likelihood: one call per request, the
        options' figures; unanswered (the first error) when any request has no answer."""
        assert item.choice_requests is not None
        calls: list[ModelCall] = []
        answers: list[ModelResponse] = []
        failed: str | None = None
        for request in item.choice_requests:
            answer = self._cached.get(request.key)
            if answer is None:
                error = responses.errors.get(request.key)
                reason = error.message if error else "no response (run interrupted)"
                failed = failed or reason
                calls.append(self._target_call(request, None, False, error=reason))
                continue
            answers.append(answer)
            calls.append(self._target_call(request, answer, request.key not in self._fresh))
        if failed is not None:
            return self._record(item, calls=calls, failed=failed)
        choices = by_loglikelihood(item, answers)
        assert choices.chosen is not None
        shown = answers[choices.chosen]
        return self._record(item, calls=calls, response=shown, choices=choices)

    def _unanswered(self, item: PlannedSample, responses: Responses) -> TraceRecord:
        error = responses.errors.get(item.request.key)
        reason = error.message if error else "no response (run interrupted)"
        call = self._target_call(item.request, None, False, error=reason)
        return self._record(item, calls=[call], failed=reason)

    def _record(
        self,
        item: PlannedSample,
        *,
        calls: list[ModelCall],
        response: ModelResponse | None = None,
        trajectory: Trajectory | None = None,
        failed: str | None = None,
        choices: MultipleChoice | None = None,
    ) -> TraceRecord:
        """The one place a record is made: a sample's `calls`, the final `response` of the
        model under test (scores follow), or why there is none (`failed`: a provider
        error, every score empty with that reason). A multiple-choice sample keeps its
        options' figures (`choices`: by log-likelihood; by generation, from the answer)."""
        if choices is None and item.choice_set is not None and response is not None:
            choices = by_letter(item, response.text)
        request = item.request
        return TraceRecord(
            schema_version=SCHEMA_VERSION,
            id=item.sample.id,
            repeat=item.repeat,
            # A log-likelihood request has no messages: its context is shown as one.
            messages=request.messages or [{"role": "user", "content": request.context}],
            calls=calls,
            response=response.text if response is not None else None,
            stop_reason=response.stop_reason if response is not None else None,
            scores=(
                {}
                if failed is None
                else {s.name: ScoreEntry(score=None, reason=failed) for s in self.plan.scorers}
            ),
            outcome="scored" if failed is None else "provider_error",
            failure_mode=None if failed is None else "provider_error",
            trajectory=trajectory.steps if trajectory is not None else [],
            retrieval=item.retrieval,
            choices=choices,
        )

    def _score(
        self, position: int, item: PlannedSample, record: TraceRecord, calls: Responses
    ) -> list[tuple[TraceRecord, str, Awaitable[Score]]]:
        assert record.response is not None
        scoring = ScoreInput(item.sample, record.response, record)
        named = self._requests.get(position)
        pending = []
        outcomes: list[ModelResponse | ProviderError | None] = []
        for index, scorer in enumerate(self.plan.scorers):
            if named is not None:
                requests = named[index]
                outcomes = [calls.outcome(r.key) for r in requests]
                for request, outcome in zip(requests, outcomes, strict=True):
                    record.calls.append(self._scorer_call(scorer.name, request, outcome, calls))
            try:
                result = scorer.score(scoring, outcomes)
                if not isinstance(result, Score):  # an awaitable (an async Python scorer)
                    record.scores[scorer.name] = _PENDING
                    pending.append((record, scorer.name, result))
                    continue
                record.scores[scorer.name] = ScoreEntry(score=result.value, reason=result.reason)
            except Exception as exc:  # one bad (sample, scorer) must not stop the run
                record.scores[scorer.name] = _failed(exc)
        return pending

    def _scorer_call(
        self,
        scorer: str,
        request: ModelRequest,
        outcome: ModelResponse | ProviderError | None,
        calls: Responses,
    ) -> ModelCall:
        endpoint = request.endpoint
        response = outcome if isinstance(outcome, ModelResponse) else None
        cache_hit = request.key in calls.cache_hits
        error = None
        if isinstance(outcome, ProviderError):
            error = outcome.message
        elif outcome is None:
            error = "no response (run interrupted)"
        return self._call(
            "judge",
            request,
            endpoint.provider,
            endpoint.model,
            response,
            cache_hit,
            scorer=scorer,
            text=response.text if response is not None else None,
            error=error,
        )


def _usage(response: ModelResponse, cost: CallCost) -> CallUsage | None:
    """The call's usage beyond plain tokens, or None when all of it is at its default."""
    usage = CallUsage(
        batch=response.batch,
        cached_input_tokens=response.cached_input_tokens,
        cache_write_input_tokens=response.cache_write_input_tokens,
        cache_write_1h_input_tokens=response.cache_write_1h_input_tokens,
        reasoning_tokens=response.reasoning_tokens,
        batch_saved_usd=cost.batch_saved_usd,
        cache_saved_usd=cost.cache_saved_usd,
        thinking=response.thinking,
    )
    return None if usage == NO_USAGE else usage


def _failed(exc: BaseException) -> ScoreEntry:
    if isinstance(exc, ScoreFailed):
        return ScoreEntry(score=None, reason=exc.reason, error=exc.kind)
    return ScoreEntry(
        score=None, reason=f"scorer raised {type(exc).__name__}: {exc}", error="scorer_error"
    )


async def _await_scores(pending: list[tuple[TraceRecord, str, Awaitable[Score]]]) -> None:
    async def one(record: TraceRecord, name: str, awaitable: Awaitable[Any]) -> None:
        try:
            result = await awaitable
            record.scores[name] = ScoreEntry(score=result.value, reason=result.reason)
        except Exception as exc:
            record.scores[name] = _failed(exc)

    await asyncio.gather(*(one(*p) for p in pending))


def _settle(record: TraceRecord, primary: str, stopped: FailureMode | None = None) -> None:
    """Outcome and failure mode follow the primary scorer; an agent that stopped early
    (thrash, budget_exhausted) failed that way whatever its last words scored, and a
    wrong answer after a tool error is the tool error's."""
    entry = record.scores[primary]
    outcome: Outcome = "scored"
    failure: FailureMode | None = None
    if entry.error is not None:
        outcome = failure = entry.error
    elif stopped is not None:
        failure = stopped
    elif entry.score is not None and entry.score < 1.0:
        if record.trajectory and any(
            r.error is not None for step in record.trajectory for r in step.tool_results
        ):
            failure = "tool_error"
        elif record.stop_reason == "max_tokens":
            failure = "truncated"
        else:
            failure = "wrong_answer"
    record.outcome, record.failure_mode = outcome, failure
