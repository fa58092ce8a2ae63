"""A run's running totals: what its summary and its statistics need from the records,
gathered one record at a time and kept in arrays, so that a run of a million samples
holds a few bytes a record rather than the records.

`RunTotals.add` takes the records as a run writes them (in plan order, where the repeats
of a case come one after another); `RunTotals.of` takes any records (a run directory's,
records in memory) and groups each case's together first. The summary, the per-scorer
statistics and pass@k are all worked out from these totals, whichever way they came.
"""

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gradetrail_lib.providers.registry import runs_locally
from gradetrail_lib.results.keyset import AnyOf, KeySet
from gradetrail_lib.results.trace import (
    DEFAULT_THRESHOLD,
    OUTCOMES,
    CallTotals,
    ModelCall,
    Role,
    TraceRecord,
)

NAN = math.nan


@dataclass
class SentKeys:
    """The request keys a run sent, told from its records in their order. A record's call
    that is no cache hit is the call of its key when the key is new; a later record of
    the key shared that call's answer (a run sends a key once, whatever its batch), except
    that a failed call is not cached and a later batch sends its request again: the first
    answer after a failure is a call of its own (a second failure reads as shared)."""

    keys: KeySet = field(default_factory=KeySet)  # 8 bytes a key: they grow with a run
    failed: set[str] = field(default_factory=set)

    def first(self, call: ModelCall) -> bool:
        """Whether `call` (not a cache hit) was a call of its own, not a shared answer."""
        key = call.request_key
        if key not in self.keys:
            self.keys.add((key,))
            if call.error is not None:
                self.failed.add(key)
            return True
        if call.error is None and key in self.failed:
            self.failed.discard(key)
            return True
        return False


@dataclass
class CallCounter:
    """The calls of one role (or of one scorer's), each record's call one of three:
    a cache hit (an earlier run's answer), a call (this run sent it: `SentKeys`), or
    shared (the answer of a call this run sent for another record, in any batch). Errors,
    tokens and the cost of every answered record, and what this run paid (its calls
    only). A cost that is unknown (no price) makes its total unknown: a partial sum would
    understate it."""

    sent: SentKeys = field(default_factory=SentKeys)
    calls: int = 0
    shared: int = 0
    cache_hits: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0
    paid: float | None = 0.0
    batch_calls: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0  # 5-minute and 1-hour writes together
    reasoning_tokens: int = 0
    batch_saved: float | None = 0.0
    cache_saved: float | None = 0.0
    # The providers of the calls (a local model has no price to show).
    providers: set[str] = field(default_factory=set)

    def add(self, call: ModelCall) -> None:
        self.providers.add(call.provider)
        first = False
        if call.cache_hit:
            self.cache_hits += 1
        elif self.sent.first(call):
            self.calls += 1
            first = True
        else:
            self.shared += 1
        if call.error is not None:
            self.errors += 1
            return
        self.input_tokens += call.input_tokens or 0
        self.output_tokens += call.output_tokens or 0
        cost = call.cost_usd
        self.cost = _plus(self.cost, cost)
        if first:
            self.paid = _plus(self.paid, cost)
        usage = call.usage
        if usage is None:  # most calls: nothing but plain tokens
            return
        self.cached_input_tokens += usage.cached_input_tokens
        self.cache_write_input_tokens += (
            usage.cache_write_input_tokens + usage.cache_write_1h_input_tokens
        )
        self.reasoning_tokens += usage.reasoning_tokens
        if first:
            self.batch_calls += usage.batch
            self.batch_saved = _plus(self.batch_saved, usage.batch_saved_usd)
            self.cache_saved = _plus(self.cache_saved, usage.cache_saved_usd)

    @property
    def local(self) -> bool:
        """Every call was to a local model (`providers.registry.runs_locally`): no price applies."""
        return bool(self.providers) and all(runs_locally(p) for p in self.providers)

    def totals(self) -> CallTotals:
        if self.local:  # no price: no figure, rather than the price list's $0
            return self._totals().model_copy(
                update={"cost_usd": None, "cost_paid_usd": None, "batch_saved_usd": None,
                        "cache_saved_usd": None, "local": True}
            )  # fmt: skip
        return self._totals()

    def _totals(self) -> CallTotals:
        return CallTotals(
            calls=self.calls,
            shared=self.shared,
            cache_hits=self.cache_hits,
            errors=self.errors,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=self.cost,
            cost_paid_usd=self.paid,
            batch_calls=self.batch_calls,
            cached_input_tokens=self.cached_input_tokens,
            cache_write_input_tokens=self.cache_write_input_tokens,
            reasoning_tokens=self.reasoning_tokens,
            batch_saved_usd=self.batch_saved,
            cache_saved_usd=self.cache_saved,
        )


def scored_mean(scores: Iterable[float]) -> float | None:
    """The mean score as every surface gives it: over the scored samples only (NaN marks
    an unscored one), None when none is scored; its n is the scored samples' number."""
    scored = [s for s in scores if s == s]  # NaN != NaN
    return math.fsum(scored) / len(scored) if scored else None


def _plus(total: float | None, value: float | None) -> float | None:
    """A running sum that an unknown value makes unknown (a partial sum understates)."""
    return None if total is None or value is None else total + value


def call_totals(
    records: Iterable[TraceRecord], role: Role, scorer: str | None = None
) -> CallTotals:
    """Calls of one role (of one scorer's, when named) in `records`. `calls` counts
    distinct requests this run sent (samples that render alike share one: `shared`); a
    cache hit's cost was paid by an earlier run."""
    counter = CallCounter()
    for record in records:
        for call in record.calls:
            if call.role == role and (scorer is None or call.scorer == scorer):
                counter.add(call)
    return counter.totals()


class RunTotals:
    """Running totals of a run's records, per scorer in spec order."""

    def __init__(self, scorers: Sequence[str]) -> None:
        self.scorers = list(scorers)
        self.samples = 0
        self.outcomes: Counter[str] = Counter()
        self.failure_modes: Counter[str] = Counter()
        self.truncated = 0
        # Per scorer, per record: the score, NaN where unscored; and the scorer errors.
        self._scores = {name: array("d") for name in self.scorers}
        self.errors = {name: 0 for name in self.scorers}
        # Per scorer, its errors by kind (scorer_error, judge_error, ...).
        self.error_kinds: dict[str, Counter[str]] = {name: Counter() for name in self.scorers}
        self.answered = 0  # records with a response
        # Per record, its case's number (a case's records come one after another); only
        # once a case has a second record: until then a record's case is its position.
        self._case: array[int] | None = None
        self._last_id: str | None = None
        self.cases = 0
        self.repeated = False
        self.target = CallCounter()
        self.judge = CallCounter()
        # The judge calls of each scorer (a call's `scorer`), as `judge` counts them all.
        self.judges: dict[str, CallCounter] = {}
        self.target_calls = 0  # each step of an agent's case is one
        # Seconds per answered target call (a cache hit keeps the latency it was paid at).
        self.latencies = array("d")
        self.served: set[str] = set()
        # Each case's id, kept only for records in memory (`of`): a streamed run's would
        # be a string a sample.
        self.case_ids: list[str] | None = None

    @classmethod
    def of(cls, records: Iterable[TraceRecord], scorers: Sequence[str]) -> "RunTotals":
        """The totals of records in any order: a case's records are grouped first."""
        listed = list(records)
        totals = cls(scorers)
        totals.case_ids = []
        if any(r.repeat for r in listed):
            groups: dict[str, list[TraceRecord]] = {}
            for record in listed:
                groups.setdefault(record.id, []).append(record)
            listed = [r for group in groups.values() for r in group]
        totals.add_all(listed)
        return totals

    @property
    def sent(self) -> AnyOf:
        """The keys the records so far were sent for (target and judges): a later batch
        of the run that finds one in the cache finds this run's answer, not a cache hit."""
        return AnyOf(self.target.sent.keys, self.judge.sent.keys)

    def add_all(self, records: Iterable[TraceRecord]) -> None:
        for record in records:
            self.add(record)

    def add(self, record: TraceRecord) -> None:
        self.samples += 1
        self.outcomes[record.outcome] += 1
        if record.failure_mode:
            self.failure_modes[record.failure_mode] += 1
        if record.truncated:
            self.truncated += 1
        new_case = record.id != self._last_id
        if new_case:
            self.cases += 1
            self._last_id = record.id
            if self.case_ids is not None:
                self.case_ids.append(record.id)
        if self._case is None and not new_case:
            self._case = array("l", range(self.samples - 1))
        if self._case is not None:
            self._case.append(self.cases - 1)
        if record.repeat:
            self.repeated = True
        answered = record.response is not None
        self.answered += answered
        scores = record.scores
        for name in self.scorers:
            entry = scores.get(name)
            if entry is None:
                self._scores[name].append(NAN)
                continue
            if entry.error is not None:
                self.errors[name] += 1
                self.error_kinds[name][entry.error] += 1
            score = entry.score
            self._scores[name].append(score if score is not None and answered else NAN)
        for call in record.calls:
            if call.role == "target":
                self.target_calls += 1
                self.target.add(call)
                if call.latency_s is not None and call.error is None:
                    self.latencies.append(call.latency_s)
                if call.served_model:
                    self.served.add(call.served_model)
            else:
                self.judge.add(call)
                if call.scorer is not None:
                    self.judge_of(call.scorer).add(call)

    def judge_of(self, scorer: str) -> CallCounter:
        """The judge calls of one scorer (none counted yet: an empty counter)."""
        counter = self.judges.get(scorer)
        if counter is None:
            counter = self.judges[scorer] = CallCounter()
        return counter

    # -- what the statistics read

    def outcome_counts(self) -> dict[str, int]:
        """Records per outcome, every outcome named (0 when none)."""
        return {k: self.outcomes.get(k, 0) for k in OUTCOMES}

    def failure_mode_counts(self) -> dict[str, int]:
        """Records per failure mode, the modes that occur, by name."""
        return dict(sorted(self.failure_modes.items()))

    def scores(self, scorer: str) -> list[float]:
        """The scored records' scores, in order."""
        return [s for s in self._scores[scorer] if s == s]  # NaN != NaN

    def passed(self, scorer: str, threshold: float = DEFAULT_THRESHOLD) -> int:
        return sum(1 for s in self._scores[scorer] if s >= threshold)  # NaN compares False

    def clustered(self) -> bool:
        """Whether some case has more than one record (then intervals resample cases)."""
        return self.repeated and self.cases < self.samples

    def _cases(self) -> Sequence[int]:
        return self._case if self._case is not None else range(self.samples)

    def case_passes(self, scorer: str, threshold: float = DEFAULT_THRESHOLD) -> list[list[bool]]:
        """Per case, each record's pass (an unscored record fails)."""
        groups: list[list[bool]] = [[] for _ in range(self.cases)]
        for case, score in zip(self._cases(), self._scores[scorer], strict=True):
            groups[case].append(score >= threshold)
        return groups

    def case_scores(self, scorer: str) -> list[list[float]]:
        """Per case, its scored records' scores (empty for a case with none scored)."""
        groups: list[list[float]] = [[] for _ in range(self.cases)]
        for case, score in zip(self._cases(), self._scores[scorer], strict=True):
            if score == score:
                groups[case].append(score)
        return groups


# Records in memory, or the totals a run gathered as it wrote them.
Totalled = Iterable[TraceRecord] | RunTotals


def totals_of(data: Totalled, scorers: Sequence[str]) -> RunTotals:
    return data if isinstance(data, RunTotals) else RunTotals.of(data, scorers)
