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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gradetrail_lib.agents.tools import Toolbox, call_all
from gradetrail_lib.agents.workspace import Workspace
from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.hashing import canonical_json
from gradetrail_lib.providers.base import Message, ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.request import RequestBuilder
from gradetrail_lib.results.trace import AgentStep, FailureMode, ToolResult


class AgentItem(Protocol):
    """Where a case starts: its sample, its first request and its repeat."""

    sample: Sample
    request: ModelRequest
    repeat: int


@dataclass
class StepCall:
    """One model call of an agent's case."""

    request: ModelRequest
    response: ModelResponse | None
    cache_hit: bool
    error: str | None = None


@dataclass
class Trajectory:
    """An agent's case as the loop leaves it: its steps and their calls, the last answer,
    and why it stopped early if it did."""

    steps: list[AgentStep]
    calls: list[StepCall]
    final: ModelResponse | None
    stopped: FailureMode | None  # provider_error, thrash or budget_exhausted
    error: str | None = None

    @property
    def tool_error(self) -> bool:
        return any(r.error is not None for s in self.steps for r in s.tool_results)


# What a step's requests came to: each key's response or error, and whether the cache
# answered it. The caller looks them up and sends the misses (one lookup and one backend
# run a step for every case still going).
Outcome = ModelResponse | ProviderError
SendStep = Callable[[list[ModelRequest]], dict[str, tuple[Outcome, bool]]]


@dataclass(frozen=True)
class AgentSetup:
    """What every case of a run shares: its tools, how its next request is built, and its
    step budget."""

    toolbox: Toolbox
    builder: RequestBuilder
    budget: int
    dataset_label: str


@dataclass
class Case:
    position: int
    item: AgentItem
    pending: ModelRequest
    messages: list[Message]
    steps: list[AgentStep] = field(default_factory=list)
    calls: list[StepCall] = field(default_factory=list)
    # Each call made (name and arguments) and how many distinct observations there were
    # right after it: the same call again with no more of them is a thrash.
    made: dict[str, int] = field(default_factory=dict)
    observed: set[str] = field(default_factory=set)
    result: Trajectory | None = None
    # The builtin tools' working directory, kept across the case's steps.
    workspace: Workspace | None = None

    def end(
        self, final: ModelResponse | None, stopped: FailureMode | None, error: str | None = None
    ) -> None:
        self.result = Trajectory(
            steps=self.steps, calls=self.calls, final=final, stopped=stopped, error=error
        )
        self.close()

    def close(self) -> None:
        if self.workspace is not None:
            self.workspace.close()


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
    setup: AgentSetup,
) -> None:
    request = case.pending
    if isinstance(outcome, ProviderError):
        case.calls.append(
            StepCall(request=request, response=None, cache_hit=False, error=outcome.message)
        )
        case.end(None, "provider_error", outcome.message)
        return
    case.calls.append(StepCall(request=request, response=outcome, cache_hit=cache_hit))
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
    if case.workspace is None:
        case.workspace = setup.toolbox.workspace(case.item.sample)
    results = await call_all(setup.toolbox, outcome.tool_calls, case.item.sample, case.workspace)
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
    if len(case.steps) >= setup.budget:
        case.end(outcome, "budget_exhausted")
        return
    case.pending = setup.builder.build(
        case.messages, case.item.sample, setup.dataset_label, case.item.repeat,
        case.item.request.media,  # the first request's images and documents, still shown
    )  # fmt: skip


async def _advance_all(
    cases: list[Case], outcomes: dict[str, tuple[Outcome, bool]], setup: AgentSetup
) -> None:
    for case in cases:
        outcome, cache_hit = outcomes[case.pending.key]
        await _advance(case, outcome, cache_hit, setup)


def run_agents(
    items: Sequence[AgentItem],
    setup: AgentSetup,
    send: SendStep,
    *,
    on_trajectory: Callable[[int, Trajectory], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[int, Trajectory]:
    """Every case to its end, a step at a time for all of them together; each case's
    trajectory by its position in `items`, handed to `on_trajectory` as it ends."""
    cases = [
        Case(position=i, item=item, pending=item.request, messages=list(item.request.messages))
        for i, item in enumerate(items)
    ]
    total, done = len(cases), 0
    active = cases
    try:
        while active:
            outcomes = send(list({c.pending.key: c.pending for c in active}.values()))
            asyncio.run(_advance_all(active, outcomes, setup))
            for case in active:
                if case.result is not None:
                    done += 1
                    if on_trajectory is not None:
                        on_trajectory(case.position, case.result)
            if progress:
                progress(done, total)
            active = [c for c in active if c.result is None]
    finally:
        # An abort (Ctrl-C, a failed backend) leaves no working directory behind either.
        for case in active:
            case.close()
    trajectories = {}
    for case in cases:
        assert case.result is not None
        trajectories[case.position] = case.result
    return trajectories
