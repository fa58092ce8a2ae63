"""What a run will cost, worked out before any call (`gradetrail plan`, `run --max-cost`).

Per model of a plan: the samples, the cache hits and misses of its requests, the input
tokens of the misses, the worst-case output tokens (`max_tokens` × misses) and the cost
range from the price list: low = the misses' input only, high = input plus every miss
answering `max_tokens` tokens. A price the list lacks leaves the cost unknown. Each range
is worked out twice, for the misses sent synchronously and by a provider's batch API (the
price list's batch price), so `plan` shows both and `run --max-cost` checks the one the
run will use (`batch`).

No provider tokenizer ships in the dependencies, so input tokens are estimated from the
text (~4 characters a token) and labelled so.

Calls that cannot be known before the run are bounded:

* a scorer's calls (a judge's) need the target's response: for a cached response its
  requests are built and looked up (exact hits and misses); for a target miss one call
  per sample is counted, its prompt rendered with an empty response plus the target's
  `max_tokens` as the response's tokens (an estimate);
* an agent (a spec with tools) knows only its first step: the misses are "at least"
  those, and the worst case is `step_budget` calls per case (every step priced like the
  first; the tool results that later steps carry are not counted).
"""

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gradetrail_lib.cache.base import Cache
from gradetrail_lib.engine.plan import Batch, RunPlan, batch_samples
from gradetrail_lib.engine.responses import look_up
from gradetrail_lib.errors import UsageError
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.base import ModelRequest, ModelResponse
from gradetrail_lib.providers.pricing import LOCAL_COST, PriceList, format_usd, sum_costs
from gradetrail_lib.results.trace import SCHEMA_VERSION, TraceRecord
from gradetrail_lib.scorers import ScoreInput

CHARS_PER_TOKEN = 4
TOKENIZER = f"estimated (~{CHARS_PER_TOKEN} characters a token)"


def estimate_tokens(request: ModelRequest) -> int:
    """Input tokens of a request, estimated from its text (messages and tool definitions;
    a log-likelihood request's context and continuation)."""
    chars = len(request.context) + len(request.continuation)
    for message in request.messages:
        content = message.get("content")
        chars += len(content) if isinstance(content, str) else len(json.dumps(content))
        if message.get("tool_calls"):
            chars += len(json.dumps(message["tool_calls"]))
    if request.tools:
        chars += len(json.dumps(request.tools))
    return math.ceil(chars / CHARS_PER_TOKEN)


def _max_tokens(request: ModelRequest) -> int:
    value = request.params.get("max_tokens")
    return int(value) if isinstance(value, int) else 0


# A local model's cost figures in JSON: null (no price), as every surface gives them.
_COSTS = ("cost_low", "cost_high", "batch_cost_low", "batch_cost_high")
_TOTALS = ("cost_low_usd", "worst_case_usd", "batch_cost_low_usd", "batch_worst_case_usd")


@dataclass(frozen=True)
class CallPlan:
    """The calls of one role (the target, or one scorer's model) of one model's run."""

    role: str  # "target" or "scorer <name>"
    provider: str
    model: str
    calls: int  # distinct requests known (an agent: its first steps)
    hits: int
    misses: int
    input_tokens: int  # of the misses
    output_tokens_worst: int  # max_tokens × misses
    cost_low: float | None
    cost_high: float | None
    # The same range with the misses sent by batch (None: unknown, no batch price).
    batch_cost_low: float | None = None
    batch_cost_high: float | None = None
    tokenizer: str = TOKENIZER
    at_least: bool = False  # an agent's later steps are not known
    worst_calls: int | None = None  # an agent: step_budget per case
    # What the figures assume (the same for every batch of a run).
    notes: list[str] = field(default_factory=list)
    # A scorer's calls that judge target responses still to come (estimated).
    pending: int = 0

    @property
    def all_notes(self) -> list[str]:
        """The notes, and how many calls judge responses still to come."""
        return self.notes + ([_pending_note(self.pending)] if self.pending else [])

    @property
    def local(self) -> bool:
        """A local model's calls: no price (shown so, null in JSON; its $0 in the price
        list only keeps `--max-cost` from refusing it)."""
        return registry.runs_locally(self.provider)

    def to_json(self) -> dict[str, Any]:
        data = {**asdict(self), "notes": self.all_notes, "local": self.local}
        if self.local:
            data |= dict.fromkeys(_COSTS)
        return data

    def high(self, batch: bool) -> float | None:
        """The worst case, sent synchronously or by batch."""
        return self.batch_cost_high if batch else self.cost_high

    def plus(self, other: "CallPlan") -> "CallPlan":
        """This role's calls with another batch's."""
        return replace(
            self,
            calls=self.calls + other.calls,
            hits=self.hits + other.hits,
            misses=self.misses + other.misses,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens_worst=self.output_tokens_worst + other.output_tokens_worst,
            cost_low=sum_costs([self.cost_low, other.cost_low]),
            cost_high=sum_costs([self.cost_high, other.cost_high]),
            batch_cost_low=sum_costs([self.batch_cost_low, other.batch_cost_low]),
            batch_cost_high=sum_costs([self.batch_cost_high, other.batch_cost_high]),
            worst_calls=None
            if self.worst_calls is None or other.worst_calls is None
            else self.worst_calls + other.worst_calls,
            pending=self.pending + other.pending,
        )


def _pending_note(count: int) -> str:
    return (
        f"{count} of the calls judge target responses still to come: counted as misses, "
        "their input estimated as the prompt plus the target's max_tokens"
    )


# Which of a run's roles go by batch (`sent_by_batch`).
ByBatch = Callable[[CallPlan], bool]


def _by_batch(batch: bool | ByBatch, role: CallPlan) -> bool:
    return batch if isinstance(batch, bool) else batch(role)


@dataclass(frozen=True)
class ModelPlan:
    spec: str
    model: str  # the spec's name for the model
    provider: str
    samples: int
    target: CallPlan
    scorers: list[CallPlan]

    @property
    def cost_low(self) -> float | None:
        return self.low(batch=False)

    @property
    def worst_case(self) -> float | None:
        return self.worst(batch=False)

    def low(self, *, batch: bool) -> float | None:
        """The low end of the cost of the misses, sent synchronously or by `batch`."""
        return sum_costs([c.batch_cost_low if batch else c.cost_low for c in self.roles])

    def worst(self, *, batch: bool | ByBatch) -> float | None:
        """The worst case of the misses, sent synchronously or by `batch` (every role's,
        or those a `ByBatch` names)."""
        return sum_costs([c.high(_by_batch(batch, c)) for c in self.roles])

    @property
    def roles(self) -> list[CallPlan]:
        return [self.target, *self.scorers]

    @property
    def local(self) -> bool:
        """Every role is a local model's: no price to total."""
        return all(c.local for c in self.roles)

    def to_json(self) -> dict[str, Any]:
        if self.local:
            totals: dict[str, float | None] = dict.fromkeys(_TOTALS)
        else:
            totals = {
                "cost_low_usd": self.cost_low,
                "worst_case_usd": self.worst_case,
                "batch_cost_low_usd": self.low(batch=True),
                "batch_worst_case_usd": self.worst(batch=True),
            }
        return {
            "spec": self.spec,
            "model": self.model,
            "provider": self.provider,
            "samples": self.samples,
            "target": self.target.to_json(),
            "scorers": [c.to_json() for c in self.scorers],
            **totals,
        }


@dataclass(frozen=True, kw_only=True)
class _Range:
    low: float | None
    high: float | None
    batch_low: float | None
    batch_high: float | None


def _costs(
    prices: PriceList,
    provider: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    *,
    low_input_tokens: int | None = None,
) -> _Range:
    """The cost range of the misses: input only (`low_input_tokens` of it, when the low
    end counts less input than the high), and input plus the worst-case output; each
    sent synchronously and by batch."""
    low_in = input_tokens if low_input_tokens is None else low_input_tokens
    return _Range(
        low=prices.cost(provider, model, low_in, 0),
        high=prices.cost(provider, model, input_tokens, output_tokens),
        batch_low=prices.cost(provider, model, low_in, 0, batch=True),
        batch_high=prices.cost(provider, model, input_tokens, output_tokens, batch=True),
    )


def estimate(
    plan: Batch,
    found: Mapping[str, ModelResponse | None],
    cache: Cache | None,
    prices: PriceList,
) -> ModelPlan:
    """The plan's calls and their cost range. `found`: the target's requests the cache
    answers, with the answers where a scorer's calls need them (a judge's prompt holds
    the response); empty when nothing is read from the cache. `cache` is where the
    scorers' requests are looked up (None: not read)."""
    unique = plan.unique_requests
    missing = [r for k, r in unique.items() if k not in found]
    model = plan.model
    agent = plan.toolbox is not None
    input_tokens = sum(estimate_tokens(r) for r in missing)
    output_worst = sum(_max_tokens(r) for r in missing)
    notes: list[str] = []
    worst_calls = None
    if agent:
        budget = plan.loaded.spec.step_budget
        hits = len(unique) - len(missing)
        worst_calls = budget * len(missing) + (budget - 1) * hits
        # Every step priced like the first; a cached first step's later steps may miss.
        hit_requests = [r for k, r in unique.items() if k in found]
        worst_in = budget * input_tokens + (budget - 1) * sum(
            estimate_tokens(r) for r in hit_requests
        )
        worst_out = budget * output_worst + (budget - 1) * sum(_max_tokens(r) for r in hit_requests)
        costs = _costs(
            prices, model.provider, model.name, worst_in, worst_out, low_input_tokens=input_tokens
        )
        output_worst = worst_out
        notes.append(
            f"agent: only step 1 is known; worst case {budget} steps (step_budget) a case, "
            "each priced like step 1 (tool results not counted)"
        )
    else:
        costs = _costs(prices, model.provider, model.name, input_tokens, output_worst)
    target = CallPlan(
        role="target",
        provider=model.provider,
        model=model.name,
        calls=len(unique),
        hits=len(unique) - len(missing),
        misses=len(missing),
        input_tokens=input_tokens,
        output_tokens_worst=output_worst,
        cost_low=costs.low,
        cost_high=costs.high,
        batch_cost_low=costs.batch_low,
        batch_cost_high=costs.batch_high,
        at_least=agent,
        worst_calls=worst_calls,
        notes=notes,
    )
    return ModelPlan(
        spec=plan.loaded.spec.name,
        model=model.name,
        provider=model.provider,
        samples=len(plan.items),
        target=target,
        scorers=_scorer_calls(plan, found, cache, prices),
    )


def estimate_run(plan: RunPlan, cache: Cache | None, prices: PriceList) -> ModelPlan:
    """`estimate` of a whole run, batch by batch (`cache` None: nothing is read from it)."""
    total = _estimate_batches(plan, plan.batches(batch_samples(plan.repeats)), cache, prices)
    assert total is not None  # a plan has samples
    return total


def _estimate_batches(
    plan: RunPlan,
    batches: Iterator[Batch],
    cache: Cache | None,
    prices: PriceList,
) -> ModelPlan | None:
    total: ModelPlan | None = None
    # Only a calling scorer (a judge) needs the cached answers; the rest, which are hits.
    answers = any(s.makes_calls for s in plan.scorers)
    for batch in batches:
        found: Mapping[str, ModelResponse | None] = {}
        if cache is not None and answers:
            found = look_up(batch, cache).responses
        elif cache is not None:
            found = dict.fromkeys(cache.cached_keys(batch.request_keys()))
        part = estimate(batch, found, cache, prices)
        total = part if total is None else _plus(total, part)
    return total


def _plus(a: ModelPlan, b: ModelPlan) -> ModelPlan:
    scorers = {c.role: c for c in a.scorers}
    for c in b.scorers:
        scorers[c.role] = scorers[c.role].plus(c) if c.role in scorers else c
    return replace(
        a, samples=a.samples + b.samples, target=a.target.plus(b.target),
        scorers=list(scorers.values()),
    )  # fmt: skip


def _scorer_calls(
    plan: Batch,
    found: Mapping[str, ModelResponse | None],
    cache: Cache | None,
    prices: PriceList,
) -> list[CallPlan]:
    """Each calling scorer's requests: built from the cached target responses (exact,
    looked up), estimated for the samples whose target response is still to come."""
    out: list[CallPlan] = []
    agent = plan.toolbox is not None
    for scorer in plan.scorers:
        if not scorer.makes_calls:
            continue
        known: dict[str, ModelRequest] = {}
        guessed: list[tuple[ModelRequest, int]] = []  # (request, target max_tokens)
        for item in plan.items:
            response = None if agent else found.get(item.request.key)
            text = response.text if response is not None else ""
            record = TraceRecord(
                schema_version=SCHEMA_VERSION,
                id=item.sample.id,
                repeat=item.repeat,
                messages=item.request.messages,
                calls=[],
                response=text,
                stop_reason=None,
                scores={},
                outcome="scored",
                failure_mode=None,
            )
            requests = scorer.requests(ScoreInput(item.sample, text, record))
            if response is not None:
                for r in requests:
                    known.setdefault(r.key, r)
            else:
                guessed += [(r, _max_tokens(item.request)) for r in requests]
        endpoint = next(iter(known.values()), None) or next((r for r, _ in guessed), None)
        if endpoint is None:
            continue
        provider, model = endpoint.endpoint.provider, endpoint.endpoint.model
        # Whether each is cached, not the answers: a hit costs this run nothing.
        cached = cache.cached_keys(list(known)) if cache is not None and known else set()
        misses = [r for k, r in known.items() if k not in cached]
        input_tokens = sum(estimate_tokens(r) for r in misses) + sum(
            estimate_tokens(r) + response_tokens for r, response_tokens in guessed
        )
        output_worst = sum(_max_tokens(r) for r in misses) + sum(_max_tokens(r) for r, _ in guessed)
        costs = _costs(prices, provider, model, input_tokens, output_worst)
        out.append(
            CallPlan(
                role=f"scorer {scorer.name}",
                provider=provider,
                model=model,
                calls=len(known) + len(guessed),
                hits=len(known) - len(misses),
                misses=len(misses) + len(guessed),
                input_tokens=input_tokens,
                output_tokens_worst=output_worst,
                cost_low=costs.low,
                cost_high=costs.high,
                batch_cost_low=costs.batch_low,
                batch_cost_high=costs.batch_high,
                pending=len(guessed),
            )
        )
    return out


def sent_by_batch(mode: str) -> ByBatch:
    """The roles a run in batch `mode` sends by batch: a role whose provider has a batch
    API, every such role with `all`, the target only with `targets` (off: none)."""

    def by_batch(role: CallPlan) -> bool:
        if mode == "off" or registry.batch_api(role.provider) is None:
            return False
        return mode == "all" or role.role == "target"

    return by_batch


def total_worst_case(plans: Sequence[ModelPlan], *, batch: bool | ByBatch = False) -> float | None:
    """The worst case of every plan's misses, sent synchronously or by `batch`."""
    return sum_costs([p.worst(batch=batch) for p in plans])


def check_max_cost(
    plans: Sequence[ModelPlan],
    limit: float,
    *,
    batch: bool | ByBatch = False,
    option: str = "max_cost",
) -> None:
    """Raises UsageError (exit 2) when the worst case exceeds `limit` dollars, or is
    unknown (a model without a price cannot be shown to stay under it). `batch`: the
    misses go by batch (the run's mode: `sent_by_batch`), priced at the batch price.
    `option` is the limit's name where the user gave it (`--max-cost` in the CLI)."""
    worst = total_worst_case(plans, batch=batch)
    if worst is None:
        unpriced = sorted(
            {
                f"{c.provider}/{c.model}"
                for p in plans
                for c in p.roles
                if c.high(_by_batch(batch, c)) is None
            }
        )
        raise UsageError(
            f"{option} {format_usd(limit)}: the worst case is unknown (no price for "
            f"{', '.join(unpriced)}); nothing was sent"
        )
    if worst > limit:
        raise UsageError(
            f"{option} {format_usd(limit)}: the worst case is {format_usd(worst)}, over the "
            "limit; nothing was sent (see `gradetrail plan`)"
        )


def format_plan(plan: ModelPlan) -> str:
    lines = [f"Plan: {plan.spec}/{plan.model} ({plan.provider})", f"  Samples: {plan.samples}"]
    for c in plan.roles:
        least = "at least " if c.at_least else ""
        lines.append(f"  {c.role.capitalize()} ({c.provider}/{c.model}):")
        lines.append(
            f"    Requests: {least}{c.calls}; cache hits {c.hits}, misses {least}{c.misses}"
        )
        if c.worst_calls is not None:
            lines.append(f"    Calls, worst case: {c.worst_calls}")
        lines.append(f"    Input tokens of the misses: {least}{c.input_tokens}, {c.tokenizer}")
        lines.append(
            f"    Output tokens, worst case: {c.output_tokens_worst} (max_tokens × misses)"
        )
        if c.local:
            lines.append(f"    Cost: {LOCAL_COST}")
        else:
            lines.append(
                f"    Cost: {_range(c.cost_low, c.cost_high)}; "
                f"by batch: {_range(c.batch_cost_low, c.batch_cost_high)}"
            )
        lines += [f"    Note: {n}" for n in c.all_notes]
    if plan.local:
        lines.append(f"  Total cost: {LOCAL_COST}")
    else:
        lines.append(
            f"  Total cost: {_range(plan.cost_low, plan.worst_case)}; "
            f"by batch: {_range(plan.low(batch=True), plan.worst(batch=True))}"
        )
    return "\n".join(lines)


def _range(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "unknown (no price for a model, or no batch price)"
    return f"{format_usd(low)} to {format_usd(high)}"
