"""The responses step of an agent (a spec with tools): each case is a conversation in
which the model calls tools until it answers without one, or its step budget runs out.

Cases advance together, a step at a time: every case still going sends its next request,
those are looked up in the cache (one query) and the misses sent through the backend
(one `run`, any backend), then each case runs the tools its answer called and builds its
next request. Every step is an ordinary cached request whose key covers the conversation
so far and the tools, so a re-run replays whole trajectories from the cache, and a changed
tool result changes only the keys of the steps after it.

A case stops early with `provider_error` (a call finally failed), `thrash` (it repeats a
call with the same arguments while nothing new has been observed since: stopped at once)
or `budget_exhausted` (it still calls tools after `step_budget` calls). A tool error (no
scripted result, an unknown tool, arguments off the schema, a function that raised) is
shown to the model as that call's result; the case goes on and its record keeps it.
"""

import asyncio
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from gradetrail_lib.agents.tools import Toolbox, call_all
from gradetrail_lib.backends.base import Backend
from gradetrail_lib.backends.live_endpoints import live_requests
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.engine.plan import (
    CacheLookup,
    EvalPlan,
    PlannedSample,
    Progress,
    ResponseListener,
    Responses,
    StepCall,
    Trajectory,
)
from gradetrail_lib.hashing import canonical_json
from gradetrail_lib.providers.base import ModelResponse, ProviderError
from gradetrail_lib.providers.request import Message, ModelRequest
from gradetrail_lib.results.trace import AgentStep, FailureMode, ToolResult


@dataclass
class Case:
    position: int
    item: PlannedSample
    pending: ModelRequest
    messages: list[Message]
    steps: list[AgentStep] = field(default_factory=list)
    calls: list[StepCall] = field(default_factory=list)
    # Each call made (name and arguments) and how many distinct observations there were
    # right after it: the same call again with no more of them is a thrash.
    made: dict[str, int] = field(default_factory=dict)
    observed: set[str] = field(default_factory=set)
    result: Trajectory | None = None

    def end(
        self, final: ModelResponse | None, stopped: FailureMode | None, error: str | None = None
    ) -> None:
        self.result = Trajectory(self.steps, self.calls, final, stopped, error)


def _signature(call: dict[str, Any]) -> str:
    return f"{call['name']}:{canonical_json(call.get('arguments', {}))}"


def _assistant(response: ModelResponse) -> Message:
    message: Message = {"role": "assistant", "content": response.text}
    if response.tool_calls:
        message["tool_calls"] = response.tool_calls
    return message


async def _advance(
    case: Case,
    outcome: ModelResponse | ProviderError,
    cache_hit: bool,
    plan: EvalPlan,
    toolbox: Toolbox,
    budget: int,
) -> None:
    request = case.pending
    if isinstance(outcome, ProviderError):
        case.calls.append(StepCall(request, None, False, outcome.message))
        case.end(None, "provider_error", outcome.message)
        return
    case.calls.append(StepCall(request, outcome, cache_hit))
    step = AgentStep(
        index=len(case.steps),
        request_key=request.key,
        content=outcome.text,
        tool_calls=outcome.tool_calls,
        tool_results=[],
        input_tokens=outcome.input_tokens,
        output_tokens=outcome.output_tokens,
        latency_s=outcome.latency_s,
        cache_hit=cache_hit,
        stop_reason=outcome.stop_reason,
    )
    case.steps.append(step)
    if not outcome.tool_calls:
        case.end(outcome, None)
        return
    signatures = [_signature(c) for c in outcome.tool_calls]
    if any(case.made.get(s) == len(case.observed) for s in signatures):
        case.end(outcome, "thrash")
        return
    results = await call_all(toolbox, outcome.tool_calls, case.item.sample)
    case.messages = [*case.messages, _assistant(outcome)]
    for call, signature, result in zip(outcome.tool_calls, signatures, results, strict=True):
        step.tool_results.append(
            ToolResult(
                tool_call_id=str(call.get("id", "")),
                name=call["name"],
                arguments=call.get("arguments", {}),
                content=result.content,
                error=result.error,
                documents=result.documents,
            )
        )
        case.observed.add(f"{signature}={result.content}")
        case.made[signature] = len(case.observed)
        message: Message = {
            "role": "tool",
            "tool_call_id": str(call.get("id", "")),
            "name": call["name"],
            "content": result.content,
        }
        if result.error is not None:
            message["is_error"] = True  # Anthropic marks the result; OpenAI has no such flag
        case.messages.append(message)
    if len(case.steps) >= budget:
        case.end(outcome, "budget_exhausted")
        return
    assert plan.builder is not None
    case.pending = plan.builder.build(
        case.messages, case.item.sample, plan.loaded.spec.dataset.label, case.item.repeat
    )


def run_agents(
    plan: EvalPlan,
    cache: ResponseCache | None,
    backend: Backend,
    *,
    started: float,
    read_cache: bool = True,
    looked_up: CacheLookup | None = None,
    progress: Progress | None = None,
    listener: ResponseListener | None = None,
) -> Responses:
    assert plan.toolbox is not None
    toolbox, budget = plan.toolbox, plan.loaded.spec.step_budget
    result = Responses(execution=backend.describe())
    cases = [
        Case(i, item, item.request, list(item.request.messages))
        for i, item in enumerate(plan.items)
    ]
    if read_cache and cache is not None and looked_up is not None:
        result.responses.update(looked_up.responses)
        result.cache_hits.update(looked_up.responses)
    total, done = len(cases), 0
    writer_scope = cache.writer() if cache is not None else nullcontext(None)
    with writer_scope as writer:

        def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
            result.take(request, outcome, writer)

        active = cases
        while active:
            wanted: dict[str, ModelRequest] = {}
            for case in active:
                wanted.setdefault(case.pending.key, case.pending)
            unknown = [k for k in wanted if k not in result.responses and k not in result.errors]
            if read_cache and cache is not None and unknown:
                found = cache.lookup(unknown)
                result.responses.update(found)
                result.cache_hits.update(found)
            misses = [wanted[k] for k in unknown if k not in result.responses]
            if misses:
                with live_requests(misses) as live:
                    backend.run(live, on_result)

            async def advance_all(going: list[Case]) -> None:
                for case in going:
                    key = case.pending.key
                    outcome = result.responses.get(key) or result.errors[key]
                    await _advance(case, outcome, key in result.cache_hits, plan, toolbox, budget)

            asyncio.run(advance_all(active))
            for case in active:
                if case.result is not None:
                    done += 1
                    if listener is not None:
                        listener.on_trajectory(case.position, case.result)
            if progress:
                progress(done, total)
            active = [c for c in active if c.result is None]
    for case in cases:
        assert case.result is not None
        result.trajectories[case.position] = case.result
    result.wall_s = time.perf_counter() - started
    return result
