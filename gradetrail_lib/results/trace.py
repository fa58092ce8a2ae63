"""The trace record: one per sample, the only contract between the runner and every reader
(stats, compare, gate, cost, report, the Dagster assets), and the run manifest.

`results.jsonl` holds one `TraceRecord` per line and `manifest.json` one `Manifest`, both
versioned by `schema_version` and validated on read with unknown fields rejected; a bad
line is reported as `path:line: field: message`. Records are written and read as a stream
(`RecordWriter`, `iter_records`), so no reader needs a whole run in memory.

Records are standard dataclasses that pydantic validates (`TypeAdapter`) rather than
pydantic models: a run builds one per sample from values it has already checked, which a
model would validate again (docs/performance.md); reading back validates every field
either way. Records and calls are built with keywords only.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    model_validator,
    with_config,
)

from gradetrail_lib.errors import FIELD_WORDS, InputError, first_of, indexed, input_errors, on_line

# A sample passes at score >= 1.0: binary scorers give 0 or 1.
DEFAULT_THRESHOLD = 1.0

SCHEMA_VERSION = 2

Role = Literal["target", "judge"]
Outcome = Literal["scored", "provider_error", "scorer_error", "judge_error"]
FailureMode = Literal[
    "wrong_answer",
    "truncated",
    "provider_error",
    "scorer_error",
    "judge_error",
    # An agent's (a spec with tools): a tool raised or had no scripted result; the same
    # call again with nothing new observed; still calling tools when the budget ran out.
    "tool_error",
    "thrash",
    "budget_exhausted",
]
ScoreErrorKind = Literal["scorer_error", "judge_error"]
OUTCOMES: tuple[Outcome, ...] = ("scored", "provider_error", "scorer_error", "judge_error")
FAILURE_MODES: tuple[FailureMode, ...] = get_args(FailureMode)
# Failure modes only an agent (a spec with tools) has, and those that stop its case early.
AGENT_FAILURE_MODES: tuple[FailureMode, ...] = ("tool_error", "thrash", "budget_exhausted")
AGENT_STOPS: tuple[FailureMode, ...] = ("thrash", "budget_exhausted")

_FORBID = ConfigDict(extra="forbid")
_OLD_FORMAT = (
    "written by an older gradetrail (results without schema_version); re-run the spec to "
    "rewrite it: its responses are in the cache, so the re-run makes no model call"
)


@with_config(_FORBID)
@dataclass(kw_only=True)
class ModelCall:
    """One model call made for a sample: the target's answer, or a judge's grading."""

    role: Role
    request_key: str
    provider: str
    model: str
    served_model: str | None
    input_tokens: int | None
    output_tokens: int | None
    latency_s: float | None
    cost_usd: float | None
    cache_hit: bool
    stop_reason: str | None
    # The judge scorer this call belongs to (None for the target's call).
    scorer: str | None = None
    # A judge's whole output (the target's answer is the record's `response`).
    text: str | None = None
    # Why the call finally failed (then there is no usage).
    error: str | None = None
    # What the invoice counts beyond plain tokens, and the thinking text; None when every
    # field of it is at its default (most calls: a record stays as small and as fast to
    # read as before, and records from before step 11 read).
    usage: "CallUsage | None" = None

    @property
    def usage_or_default(self) -> "CallUsage":
        return self.usage if self.usage is not None else NO_USAGE


@with_config(_FORBID)
@dataclass(kw_only=True)
class CallUsage:
    """A call's usage beyond its plain token counts (`ModelCall.usage`)."""

    # Answered by a provider's batch API.
    batch: bool = False
    # Of `input_tokens`: read from the provider's prompt cache, and written to it (5-minute
    # and 1-hour writes); of `output_tokens`: reasoning or thinking (billed as output).
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    cache_write_1h_input_tokens: int = 0
    reasoning_tokens: int = 0
    # What batch and prompt caching saved on this call at the run's price list (None: no
    # price). A cache write costs more than plain input, so `cache_saved_usd` may be < 0.
    batch_saved_usd: float | None = 0.0
    cache_saved_usd: float | None = 0.0
    # Anthropic's extended thinking text (never part of the answer, `text` or `response`).
    thinking: str | None = None


NO_USAGE = CallUsage()


@with_config(_FORBID)
@dataclass
class ScoreEntry:
    """One scorer's verdict on one sample; `error` says why there is no score."""

    score: float | None
    reason: str
    error: ScoreErrorKind | None = None


@with_config(_FORBID)
@dataclass
class ToolResult:
    """One tool call of an agent step and what came of it."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    # What the model was shown (a tool's result as text, or the error).
    content: str
    error: str | None = None
    # Documents the result carried ([{"id", "text"}]), in order, for retrieval metrics.
    documents: list[dict[str, Any]] = field(default_factory=list)


@with_config(_FORBID)
@dataclass
class AgentStep:
    """One model call of an agent's trajectory: what it said, the tools it called and
    what they returned, with the call's key, usage, latency and cache hit."""

    index: int
    request_key: str
    content: str
    tool_calls: list[dict[str, Any]]
    tool_results: list[ToolResult]
    input_tokens: int | None
    output_tokens: int | None
    latency_s: float | None
    cache_hit: bool
    stop_reason: str | None
    error: str | None = None


@with_config(_FORBID)
@dataclass
class Retrieval:
    """What a sample says about retrieval (gradetrail_lib.analysis.retrieval): the ids of the
    documents relevant to it (`relevant_context_ids`) and the scripted support verdicts of
    documents an answer may cite (`citation_support`, document id -> supported)."""

    relevant_ids: list[str] = field(default_factory=list)
    support: dict[str, bool] = field(default_factory=dict)


@with_config(_FORBID)
@dataclass(kw_only=True)
class ChoiceFigures:
    """One option of a multiple-choice sample: its text (without the separator before
    it) and, by log-likelihood, the continuation's summed log-probability, its tokens,
    whether it is the model's greedy continuation, and its log-likelihood after the
    unconditional context (for `acc_mutual_info`, when the spec sets one)."""

    text: str
    loglikelihood: float | None = None
    tokens: int | None = None
    is_greedy: bool | None = None
    unconditional: float | None = None


@with_config(_FORBID)
@dataclass(kw_only=True)
class MultipleChoice:
    """A multiple-choice sample's options, the gold option's index, and the chosen one:
    the highest log-likelihood (`loglikelihood`), or the letter read from the answer
    (`generate`; None when it names no option)."""

    method: Literal["loglikelihood", "generate"]
    gold: int
    chosen: int | None
    options: list[ChoiceFigures]


@with_config(_FORBID)
@dataclass(kw_only=True)
class TraceRecord:
    schema_version: int
    id: str
    repeat: int
    messages: list[dict[str, Any]]
    calls: list[ModelCall]
    response: str | None
    stop_reason: str | None
    scores: dict[str, ScoreEntry]
    outcome: Outcome
    failure_mode: FailureMode | None
    # An agent's steps (a spec with tools); empty for a single request.
    trajectory: list[AgentStep] = field(default_factory=list)
    # The sample's relevant document ids and scripted citation verdicts, when it has any.
    retrieval: Retrieval | None = None
    # A multiple-choice sample's options with their figures, the chosen and the gold.
    choices: MultipleChoice | None = None

    # The figures statistics read. A sample without a response scores nothing on any
    # scorer; one whose scorer failed scores nothing on that scorer.
    def score_of(self, scorer: str) -> float | None:
        entry = self.scores.get(scorer)
        return entry.score if entry is not None and self.response is not None else None

    def scored(self, scorer: str) -> bool:
        return self.score_of(scorer) is not None

    def passes(self, scorer: str, threshold: float = DEFAULT_THRESHOLD) -> bool:
        """Unscored samples never pass: no answer is not a right answer, and dropping
        them would flatter a model that errors on hard cases."""
        score = self.score_of(scorer)
        return score is not None and score >= threshold

    def value(self, scorer: str) -> float:
        """The score where every sample needs a number (paired differences): an unscored
        sample counts as 0, consistently with `passes`."""
        score = self.score_of(scorer)
        return 0.0 if score is None else score

    def scorer_error(self) -> "tuple[str, ScoreEntry] | None":
        """The first scorer (in spec order) that gave no score for its own fault (a
        scorer or judge error), and its entry; None when every scorer scored or the
        sample has no answer."""
        return next(((n, e) for n, e in self.scores.items() if e.error is not None), None)

    def error_of(self, scorer: str) -> ScoreErrorKind | None:
        entry = self.scores.get(scorer)
        return entry.error if entry is not None else None

    @property
    def answered(self) -> bool:
        return self.response is not None

    @property
    def truncated(self) -> bool:
        return self.failure_mode == "truncated" or self.stop_reason == "max_tokens"

    def calls_of(self, role: Role) -> Iterator[ModelCall]:
        return (c for c in self.calls if c.role == role)

    @property
    def target(self) -> ModelCall | None:
        return next(self.calls_of("target"), None)


@cache
def record_adapter() -> TypeAdapter[TraceRecord]:
    """Built when first needed (building it takes a noticeable part of a short command:
    docs/performance.md), so a command that reads no record skips it."""
    return TypeAdapter(TraceRecord)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SpecInfo(_Model):
    name: str
    path: str
    hash: str


class DatasetInfo(_Model):
    path: str
    hash: str


class ScorerInfo(_Model):
    name: str
    type: str
    # Covers the scorer's config and every file it reads: equal hashes score alike.
    hash: str


class ChatTemplateInfo(_Model):
    """The chat template a run's log-likelihood contexts were rendered by (spec
    `chat_template`): where it was read and the sha256 of its text."""

    source: str
    sha256: str


class ModelInfo(_Model):
    requested: str
    provider: str
    base_url: str | None
    served: list[str]
    # Only a run with `chat_template: true` has it: left out of the JSON otherwise, so
    # every other manifest reads and writes as before.
    chat_template: ChatTemplateInfo | None = Field(default=None, exclude_if=lambda v: v is None)


class GitInfo(_Model):
    sha: str | None
    dirty: bool | None


class PricingInfo(_Model):
    version: str
    effective_date: str


class CallTotals(_Model):
    """The calls of one role (target or judge) in a run: each record's call is a call
    this run sent, shared (the answer of a call this run sent for another record) or a
    cache hit (an earlier run's answer)."""

    calls: int = 0  # distinct requests sent by this run
    cache_hits: int = 0  # records answered by an earlier run's call, from the cache
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0  # every answered record's call, cache hits included
    cost_paid_usd: float | None = 0.0  # this run's own calls only, each once
    # Records answered by a call this run sent for another record (no second call). A
    # default, so that manifests from before it read.
    shared: int = 0
    # Step 11 (defaults: older manifests read). Tokens, like input_tokens, over every
    # answered record: read from and written to the providers' prompt caches, spent
    # reasoning (part of output_tokens). `batch_calls`: this run's calls answered by a
    # batch; the savings are on this run's own calls, as cost_paid_usd (None: no price).
    batch_calls: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    reasoning_tokens: int = 0
    batch_saved_usd: float | None = 0.0
    cache_saved_usd: float | None = 0.0
    # Every call was a local model's (`registry.runs_locally`): it has no price, so the
    # costs above are None and every surface reads `pricing.LOCAL_COST`, never $0. A
    # default, so that older manifests read (their local runs show the $0 they wrote).
    local: bool = False

    @property
    def reused_usd(self) -> float | None:
        """What the answers this run did not pay for had cost: the cache hits', and the
        shared records' (unknown with any price)."""
        if self.cost_usd is None:
            return None
        return self.cost_usd - (self.cost_paid_usd or 0.0)


class ScorerFigures(_Model):
    """One scorer's figures in a run's summary, which every surface reads: `n` samples,
    `scored` of them with a score; `mean` over the scored ones only (None: none scored);
    `passed` (an unscored sample fails); `errors` its samples without a score for its own
    fault (a scorer or a judge error: a provider error is the sample's, not the scorer's),
    `judge_errors` those of them a judge gave no usable grade (a failed judge call, or
    output without a grade, e.g. cut off at max_tokens)."""

    type: str
    n: int
    scored: int
    errors: int
    mean: float | None
    passed: int
    judge_errors: int = 0
    # With repeats: the mean over cases of pass@k (Chen et al.'s unbiased estimator) and
    # of pass^k (all k pass), for k = 1..repeats; empty without repeats.
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    pass_hat_k: dict[int, float] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _older(cls, data: Any) -> Any:
        """A manifest from before `judge_errors`: a judge scorer's errors were its judge's."""
        if isinstance(data, dict) and "judge_errors" not in data:
            return {
                **data,
                "judge_errors": data.get("errors", 0) if data.get("type") == "judge" else 0,
            }
        return data


class Manifest(_Model):
    schema_version: int
    identity: str
    spec: SpecInfo
    dataset: DatasetInfo
    scorers: list[ScorerInfo] = Field(min_length=1)  # the first is the primary one
    scorer_hash: str
    scorer_files: dict[str, str]
    judge_hashes: dict[str, str]
    requests_hash: str
    model: ModelInfo
    git: GitInfo
    gradetrail_version: str
    execution: dict[str, JsonValue]
    started_at: str
    finished_at: str
    timings_s: dict[str, float]
    samples: int
    outcomes: dict[str, int]
    failure_modes: dict[str, int]
    scores: dict[str, ScorerFigures]
    target: CallTotals
    judge: CallTotals
    pricing: PricingInfo
    warnings: list[str]
    # How many times each sample was run (its records are (id, repeat) for 0..repeats-1).
    repeats: int = 1
    # The response cache the run read and wrote: a DuckDB file's absolute path or a
    # Postgres URL without its password (`bundle export` reads it there). None: a run
    # without a cache (`--no-cache`), or one written before runs recorded it.
    cache: str | None = None
    # A run of `run --until-decided` (the cases of a release check that stopped once
    # decided): the verdict, its method and confidence sequence, the cases used and the
    # cost saved (`engine.until_decided`). None for any other run.
    sequential: dict[str, JsonValue] | None = None

    @property
    def primary_scorer(self) -> str:
        return self.scorers[0].name

    @property
    def scorer_names(self) -> list[str]:
        return [s.name for s in self.scorers]

    def scorer(self, name: str) -> ScorerInfo:
        for info in self.scorers:
            if info.name == name:
                return info
        raise KeyError(f"no scorer {name!r} in this run (scorers: {', '.join(self.scorer_names)})")

    @property
    def label(self) -> str:
        return f"{self.spec.name}/{self.model.requested}"


def _input_error(path: Path, line: int | None, exc: ValidationError) -> InputError:
    errors = exc.errors()
    if any(
        e["type"] in ("missing", "missing_argument") and tuple(e["loc"]) == ("schema_version",)
        for e in errors
    ):
        return InputError(str(path), line, None, _OLD_FORMAT)
    located = input_errors(exc, str(path), on_line(line, indexed), words=FIELD_WORDS)
    return first_of(located)


def _check_version(path: Path, line: int | None, version: int) -> None:
    if version != SCHEMA_VERSION:
        raise InputError(
            str(path),
            line,
            "schema_version",
            f"format {version} is not this gradetrail's ({SCHEMA_VERSION}); re-run the spec "
            "(its responses are in the cache, so the re-run makes no model call)",
        )


def parse_record(line: bytes | str, path: Path, number: int) -> TraceRecord:
    try:
        record = record_adapter().validate_json(line)
    except ValidationError as exc:
        raise _input_error(path, number, exc) from None
    _check_version(path, number, record.schema_version)
    return record


def iter_records(path: Path) -> Iterator[TraceRecord]:
    """The records of a results.jsonl file, one at a time, each validated."""
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                yield parse_record(line, path, number)


def record_json(record: TraceRecord) -> bytes:
    return record_adapter().dump_json(record)


WRITE_BUFFER = 1 << 20


class RecordWriter:
    """Writes records to a results.jsonl file as they come (a stream, not a list)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # A large buffer: with the default 8 KiB, writing 100,000 records of ~650 bytes
        # took 0.19 s of system calls, with 1 MiB 0.04 s (docs/performance.md).
        self._out = open(path, "wb", buffering=WRITE_BUFFER)  # noqa: SIM115 (closed by close() / __exit__)

    def write(self, records: Iterable[TraceRecord]) -> None:
        """Records, a line each (a part of a batch at a time: joined, one write)."""
        self._out.write(b"".join([record_json(record) + b"\n" for record in records]))

    def close(self) -> None:
        self._out.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def parse_manifest(text: str, path: Path) -> Manifest:
    try:
        manifest = Manifest.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        line = None
        if first["type"] == "json_invalid":
            return _raise_json(path, text)
        raise _input_error(path, line, exc) from None
    _check_version(path, None, manifest.schema_version)
    return manifest


def _raise_json(path: Path, text: str) -> Manifest:
    import json

    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), exc.lineno, None, f"not valid JSON: {exc.msg}") from None
    raise InputError(str(path), None, None, "not valid JSON")
