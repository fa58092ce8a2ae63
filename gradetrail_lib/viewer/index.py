"""A run's samples, indexed for the run page: built once per results.jsonl (path, inode,
mtime and size), then every filter, sort and page is array arithmetic plus reading the
page's own lines.

The index holds, per record, its byte offset, length and line number, and the few
fields filters and sort need: id, repeat, outcome, failure mode, whether it was
answered, and each scorer's score (the record's `score_of`: none without a response)
and error. Building it parses each line once with pydantic-core's JSON parser (no
record validation: pages validate only the lines they show), keeping nothing else; a page
then reads only its lines, by offset, and validates each one with
`trace.parse_record`. A line that is not a record (a truncated last line, a field
missing or of the wrong type) is kept in the index as that sample's error
(`path:line: field: message`, in `damage`): its row and its page show the error, it
counts as unscored, and every other line is served. Only a first record of another
format (an older gradetrail's) makes the whole run unreadable. Nothing is written
anywhere.

Failing, as in the HTML report: below the pass threshold on the primary scorer (or
unscored), or any scorer's error, or an agent stopped early (thrash, over the step
budget). Failing on a named scorer: below its threshold or unscored.

Text search reads the file once per new query (cached): a case-insensitive byte search
for the query's longest plain run of characters finds the candidate lines, and each
is confirmed on its parsed id, messages and response.
"""

import json
import os
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
from pydantic_core import from_json

from gradetrail_lib.analysis.stats import Estimate
from gradetrail_lib.analysis.stats.clusters import cluster_proportion
from gradetrail_lib.analysis.stats.intervals import proportion
from gradetrail_lib.errors import InputError
from gradetrail_lib.results.sheet import ScoreSheet
from gradetrail_lib.results.trace import (
    AGENT_STOPS,
    DEFAULT_THRESHOLD,
    FAILURE_MODES,
    OUTCOMES,
    SCHEMA_VERSION,
    ScoreErrorKind,
    TraceRecord,
    parse_record,
)

ERROR_KINDS: tuple[ScoreErrorKind | None, ...] = (None, "scorer_error", "judge_error")
NO_MODE = -1
# A damaged line's outcome code: past every real outcome, so no outcome filter keeps it.
DAMAGED = len(OUTCOMES)
SEARCH_CACHE = 16
# Lines over a page's cap are parsed two at a time, each held whole only while its
# texts are cut to the cap: concurrent pages of a run with huge records then hold capped
# records, not one whole record each (docs/performance.md has the measurement).
_LARGE_LINES = threading.BoundedSemaphore(2)
# A JSON string holds these characters as themselves (no escape): safe to look for in
# the raw line.
_PLAIN = re.compile(r"[ !#-\[\]-~]+")

Signature = tuple[int, int, int, int]  # device, inode, mtime (ns), size
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


def signature(stat: os.stat_result) -> Signature:
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)


@dataclass(frozen=True)
class Query:
    """What the run page shows: a subset of the samples, in an order."""

    failures: bool = False  # the failing samples only
    scorer: str | None = None  # failing this scorer
    outcome: str | None = None
    mode: str | None = None  # a failure mode, or "none"
    text: str = ""  # in the id, the messages or the response
    sort: str = ""  # "" (file order), "id", "outcome", "mode" or "score:NAME"; "-" descends


def sort_keys(scorers: Sequence[str]) -> list[str]:
    keys = ["", "id", "outcome", "mode", *(f"score:{s}" for s in scorers)]
    return keys + [f"-{k}" for k in keys if k]


@dataclass
class RunIndex:
    path: Path
    signature: Signature
    scorers: tuple[str, ...]
    primary: str
    offsets: Ints
    lengths: Ints
    lines: Ints
    ids: list[str]
    repeats: Ints
    outcome: npt.NDArray[np.int8]
    mode: npt.NDArray[np.int8]
    answered: Bools
    scores: dict[str, npt.NDArray[np.float64]]
    errors: dict[str, npt.NDArray[np.int8]]
    positions: dict[tuple[str, int], int]
    # A case with more than one record (repeats): intervals resample cases.
    clustered: bool
    threshold: float = DEFAULT_THRESHOLD
    # The lines that are not records: position -> `path:line: field: message`.
    damage: dict[int, str] = field(default_factory=dict)
    _orders: dict[str, Ints] = field(default_factory=dict, repr=False)
    _searches: "OrderedDict[str, Bools]" = field(default_factory=OrderedDict, repr=False)
    _rates: dict[str, Estimate] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def n(self) -> int:
        return len(self.ids)

    # -- what a sample is ------------------------------------------------------------
    def passes(self, scorer: str) -> Bools:
        scores = self.scores.get(scorer)
        if scores is None:
            return np.zeros(self.n, dtype=np.bool_)
        with np.errstate(invalid="ignore"):
            return np.asarray(scores >= self.threshold)

    def any_error(self) -> Bools:
        out = np.zeros(self.n, dtype=np.bool_)
        for errors in self.errors.values():
            out |= errors != 0
        return out

    def failing(self, scorer: str | None = None) -> Bools:
        if scorer is not None:
            return ~self.passes(scorer)
        stops = np.isin(self.mode, [FAILURE_MODES.index(m) for m in AGENT_STOPS])
        return ~self.passes(self.primary) | self.any_error() | stops

    def pass_rate(self, scorer: str) -> Estimate:
        """The scorer's pass rate with its interval, as `run_stats` gives it (clustered by
        case with repeats)."""
        with self._lock:
            cached = self._rates.get(scorer)
        if cached is not None:
            return cached
        passes = self.passes(scorer)
        if self.clustered:
            groups: dict[str, list[bool]] = {}
            for sample_id, passed in zip(self.ids, passes.tolist(), strict=True):
                groups.setdefault(sample_id, []).append(passed)
            rate = cluster_proportion(list(groups.values()))
        else:
            rate = proportion(int(passes.sum()), self.n)
        with self._lock:
            self._rates[scorer] = rate
        return rate

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Samples per outcome and per failure mode ("none": no failure mode)."""
        outcomes = np.bincount(self.outcome, minlength=len(OUTCOMES))
        modes = np.bincount(self.mode + 1, minlength=len(FAILURE_MODES) + 1)
        by_outcome: dict[str, int] = {o: int(outcomes[i]) for i, o in enumerate(OUTCOMES)}
        by_mode = {"none": int(modes[0])}
        by_mode |= {m: int(modes[i + 1]) for i, m in enumerate(FAILURE_MODES) if modes[i + 1]}
        return by_outcome, by_mode

    # -- selecting -------------------------------------------------------------------
    def select(self, query: Query, source: BinaryIO) -> Ints:
        """The positions (record numbers from 0) the query keeps, in its order. ValueError
        names a parameter the run cannot have (an unknown scorer, outcome or mode)."""
        mask = np.ones(self.n, dtype=np.bool_)
        if query.scorer is not None and query.scorer not in self.scores:
            raise ValueError(f"no scorer {query.scorer!r} in this run")
        if query.failures or query.scorer is not None:
            mask &= self.failing(query.scorer)
        if query.outcome:
            if query.outcome not in OUTCOMES:
                raise ValueError(f"no outcome {query.outcome!r} (one of {', '.join(OUTCOMES)})")
            mask &= self.outcome == OUTCOMES.index(query.outcome)
        if query.mode:
            if query.mode != "none" and query.mode not in FAILURE_MODES:
                raise ValueError(f"no failure mode {query.mode!r}")
            code = NO_MODE if query.mode == "none" else FAILURE_MODES.index(query.mode)
            mask &= self.mode == code
        if query.text.strip():
            mask &= self.search(query.text.strip(), source)
        order = self.order(query.sort)
        return order[mask[order]]

    def order(self, key: str) -> Ints:
        if key not in sort_keys(self.scorers):
            raise ValueError(f"cannot sort by {key!r}")
        with self._lock:
            cached = self._orders.get(key)
        if cached is not None:
            return cached
        descending, name = key.startswith("-"), key.lstrip("-")
        if name == "":
            order = np.arange(self.n, dtype=np.int64)
        elif name == "id":
            order = np.array(
                sorted(range(self.n), key=lambda i: (self.ids[i], int(self.repeats[i]))),
                dtype=np.int64,
            )
        elif name == "outcome":
            order = np.argsort(self.outcome, kind="stable").astype(np.int64)
        elif name == "mode":
            order = np.argsort(self.mode, kind="stable").astype(np.int64)
        else:  # score:NAME, unscored last either way
            scores = self.scores[name.removeprefix("score:")]
            order = np.argsort(-scores if descending else scores, kind="stable").astype(np.int64)
            descending = False
        if descending:
            order = order[::-1].copy()
        with self._lock:
            self._orders[key] = order
        return order

    def search(self, text: str, source: BinaryIO) -> Bools:
        needle = text.lower()
        with self._lock:
            cached = self._searches.get(needle)
            if cached is not None:
                self._searches.move_to_end(needle)
                return cached
        mask = np.zeros(self.n, dtype=np.bool_)
        plain = max(_PLAIN.findall(needle), key=len, default="")
        pattern = re.compile(re.escape(plain.encode()), re.IGNORECASE) if plain else None
        for position, line in self._lines(source):
            if pattern is not None and pattern.search(line) is None:
                continue
            if _contains(line, needle):
                mask[position] = True
        with self._lock:
            self._searches[needle] = mask
            while len(self._searches) > SEARCH_CACHE:
                self._searches.popitem(last=False)
        return mask

    def _lines(self, source: BinaryIO) -> Iterator[tuple[int, bytes]]:
        source.seek(0)
        position = 0
        for line in source:
            if line.strip():
                yield position, line
                position += 1

    # -- reading ---------------------------------------------------------------------
    def read(
        self, source: BinaryIO, positions: Sequence[int], cap: int | None = None
    ) -> list[TraceRecord]:
        """The records at `positions`, each read by offset and validated (InputError
        naming the line for one in `damage`); with `cap`, every text in a record longer
        than `cap` characters is cut there, with a marker (`cut_text`)."""
        fd = source.fileno()
        out = []
        for p in positions:
            size, number = int(self.lengths[p]), int(self.lines[p])
            if cap is None or size <= cap:  # no text in it can be longer
                line = os.pread(fd, size, int(self.offsets[p]))
                out.append(parse_record(line, self.path, number))
                continue
            with _LARGE_LINES:
                line = os.pread(fd, size, int(self.offsets[p]))
                try:
                    parsed = from_json(line)
                except ValueError:
                    parsed = None
                if parsed is None:
                    out.append(parse_record(line, self.path, number))  # names the error
                    continue
                del line
                small = json.dumps(_cut(parsed, cap), ensure_ascii=False).encode()
            out.append(parse_record(small, self.path, number))
        return out

    def response_of(self, source: BinaryIO, position: int) -> str | None:
        """The record's whole response (read, for a line over a page's cap, two at a
        time like `read`): what a cut response is compared by."""
        with _LARGE_LINES:
            record = from_json(self.raw(source, position))
        response = record.get("response") if isinstance(record, dict) else None
        return response if isinstance(response, str) else None

    def raw(self, source: BinaryIO, position: int) -> bytes:
        """The record's line as written."""
        return os.pread(source.fileno(), int(self.lengths[position]), int(self.offsets[position]))

    def find(self, sample_id: str, repeat: int = 0) -> int | None:
        return self.positions.get((sample_id, repeat))

    def sheet(self, scorer: str) -> ScoreSheet:
        """What paired statistics read (`stats.compare`), from the index alone: the same
        figures as on the full records."""
        scores = self.scores.get(scorer)
        values = scores.tolist() if scores is not None else [float("nan")] * self.n
        return ScoreSheet(self.ids, self.repeats.tolist(), values)


def cut_text(text: str, cap: int) -> str:
    """`text`, or its first `cap` characters and a marker saying how long it is."""
    if len(text) <= cap:
        return text
    marker = f"… [truncated: {len(text):,} characters in all; the record in full: its raw link]"
    return text[:cap] + marker


def _cut(value: Any, cap: int) -> Any:
    """A parsed record with every string in it cut to `cap` characters."""
    if isinstance(value, str):
        return cut_text(value, cap)
    if isinstance(value, list):
        return [_cut(v, cap) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v, cap) for k, v in value.items()}
    return value


def _text_of(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _contains(line: bytes, needle: str) -> bool:
    try:
        record = from_json(line)
    except ValueError:
        return False
    if not isinstance(record, dict):
        return False
    texts = [str(record.get("id", "")), _text_of(record.get("response") or "")]
    messages = record.get("messages")
    if isinstance(messages, list):
        texts += [_text_of(m.get("content", "")) for m in messages if isinstance(m, dict)]
    return any(needle in t.lower() for t in texts)


def _damage(line: bytes, path: Path, number: int) -> tuple[str, int, str]:
    """A line that is not a record: its id and repeat as far as they can be read (a
    truncated line is read as far as it goes), else `line N` and 0, and its error."""
    try:
        parse_record(line, path, number)
        message = str(InputError(str(path), number, None, "not a trace record"))
    except InputError as exc:
        message = str(exc)
    try:
        partial = from_json(line, allow_partial=True)
    except ValueError:
        partial = None
    partial = partial if isinstance(partial, dict) else {}
    sample_id, repeat = partial.get("id"), partial.get("repeat")
    return (
        sample_id if isinstance(sample_id, str) else f"line {number}",
        repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else 0,
        message,
    )


def build_index(path: Path, source: BinaryIO, scorers: Sequence[str], sig: Signature) -> RunIndex:
    """Scan results.jsonl once. A line that is not a record (invalid JSON, a field
    missing or of the wrong type) is indexed as its sample's error (`damage`); a first
    record of another format is an InputError naming the format."""
    names = list(scorers)
    # Typed arrays, not lists: 8 bytes or 1 a value instead of a Python object each.
    offsets, lengths, lines, repeats = (array("q") for _ in range(4))
    outcome, mode, answered = (array("b") for _ in range(3))
    ids: list[str] = []
    scores = [array("d") for _ in names]
    errors = [array("b") for _ in names]
    positions: dict[tuple[str, int], int] = {}
    damage: dict[int, str] = {}
    nan = float("nan")
    source.seek(0)
    offset = 0
    for number, line in enumerate(source, start=1):
        size = len(line)
        if not line.strip():
            offset += size
            continue
        try:
            record = from_json(line)
            version = record.get("schema_version")
            if version != SCHEMA_VERSION:
                if not offsets and isinstance(version, int):
                    # The first record is of another format: so is the run (raises).
                    parse_record(line, path, number)
                raise ValueError("not a record of this format")
            sample_id, repeat = record["id"], record["repeat"]
            if not isinstance(sample_id, str) or not isinstance(repeat, int):
                raise TypeError("id and repeat")
            response = record["response"]
            entries = record["scores"]
            code = OUTCOMES.index(record["outcome"])
            failure = record["failure_mode"]
            failure_code = NO_MODE if failure is None else FAILURE_MODES.index(failure)
            row_scores = []
            row_errors = []
            for name in names:
                entry = entries.get(name)
                score = entry.get("score") if entry is not None else None
                row_scores.append(nan if score is None or response is None else float(score))
                row_errors.append(ERROR_KINDS.index(entry.get("error")) if entry else 0)
        except (ValueError, KeyError, TypeError, AttributeError):
            # Named the way the readers name it; the sample is unscored.
            sample_id, repeat, message = _damage(line, path, number)
            damage[len(ids)] = message
            response, code, failure_code = None, DAMAGED, NO_MODE
            row_scores, row_errors = [nan] * len(names), [0] * len(names)
        for j in range(len(names)):
            scores[j].append(row_scores[j])
            errors[j].append(row_errors[j])
        positions.setdefault((sample_id, repeat), len(ids))
        offsets.append(offset)
        lengths.append(size)
        lines.append(number)
        ids.append(sample_id)
        repeats.append(repeat)
        outcome.append(code)
        mode.append(failure_code)
        answered.append(response is not None)
        offset += size

    def int64(values: "array[int]") -> Ints:
        return np.frombuffer(values, dtype=np.int64).copy()

    def int8(values: "array[int]") -> npt.NDArray[np.int8]:
        return np.frombuffer(values, dtype=np.int8).copy()

    return RunIndex(
        path=path,
        signature=sig,
        scorers=tuple(names),
        primary=names[0],
        offsets=int64(offsets),
        lengths=int64(lengths),
        lines=int64(lines),
        ids=ids,
        repeats=int64(repeats),
        outcome=int8(outcome),
        mode=int8(mode),
        answered=int8(answered).astype(np.bool_),
        scores={s: np.frombuffer(scores[j], dtype=np.float64).copy() for j, s in enumerate(names)},
        errors={s: int8(errors[j]) for j, s in enumerate(names)},
        positions=positions,
        clustered=len(set(ids)) < len(ids),
        damage=damage,
    )


class IndexCache:
    """The indexes of the runs opened lately (least recently used dropped first), each
    built once per file signature, by one thread while the others wait."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Path, RunIndex] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[Path, threading.Lock] = {}

    def get(self, path: Path, source: BinaryIO, scorers: Sequence[str]) -> RunIndex:
        sig = signature(os.fstat(source.fileno()))
        with self._lock:
            found = self._entries.get(path)
            if found is not None and found.signature == sig and found.scorers == tuple(scorers):
                self._entries.move_to_end(path)
                return found
            building = self._building.setdefault(path, threading.Lock())
        with building:
            with self._lock:
                found = self._entries.get(path)
            if found is not None and found.signature == sig and found.scorers == tuple(scorers):
                return found
            index = build_index(path, source, scorers, sig)
            with self._lock:
                self._entries[path] = index
                self._entries.move_to_end(path)
                while len(self._entries) > self.capacity:
                    self._entries.popitem(last=False)
            return index
