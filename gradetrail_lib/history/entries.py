"""The run history: `<results root>/.history.jsonl`, one `HistoryEntry` per completed run.

A run directory is replaced whole when its identity runs again, so the directories say
what the latest run of each identity was; the history keeps every run: spec, model,
identity, directory name, timestamps, git state, the primary scorer's pass rate with its
interval and n, and a fingerprint of the scored records (`identity.records_fingerprint`:
ids, repeats, request keys, scores and outcomes), which says whether two runs' results
differ. `gradetrail list` prints it; `gradetrail gate --baseline previous` picks a
baseline from it; `gradetrail plan --detect` pairs its runs to measure a discordance.

The file is append-only, an entry appended once its run directory is in place, through
`results.appendlog` (one write of one line under an exclusive `flock`), so two processes
finishing together never interleave half lines. The name starts with a dot, as every
non-run entry under the root does (a shell's `results/*` lists run directories only).

Where the history is kept is a `HistoryStore`: that file (`FileHistory`, the default), or
a table in Postgres (`history.postgres.PostgresHistory`) that every machine of a team
writes and reads, chosen by `history.store.open_history` (`GRADETRAIL_STORE`, else the
cache's URL: `cache.location.store_location`). A Postgres entry also says where its run directory
was written (`origin`, `host:/results/root`), so a machine tells a run that is elsewhere
from one whose directory is gone.
"""

import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gradetrail_lib.analysis.pass_rate import PassRate, pass_rate_of
from gradetrail_lib.errors import (
    FIELD_WORDS,
    InputError,
    UsageError,
    first_of,
    input_errors,
    on_line,
)
from gradetrail_lib.results.appendlog import append_lines, read_locked
from gradetrail_lib.results.runs import MANIFEST_FILE
from gradetrail_lib.results.totals import Totalled
from gradetrail_lib.results.trace import Manifest, parse_manifest

HISTORY_FILE = ".history.jsonl"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HistoryEntry(_Strict):
    """One completed run, as it was when it completed."""

    version: Literal[1] = 1  # of the entry's format
    spec: str
    model: str
    provider: str
    identity: str
    # The run directory's name under the results root (a later run of the same identity
    # replaces the directory: `current` says whether it still holds this run).
    run_dir: str
    started_at: str
    finished_at: str
    git_sha: str | None
    git_dirty: bool | None
    primary_scorer: str
    pass_rate: PassRate
    mean_score: float | None
    samples: int
    cost_usd: float | None
    fingerprint: str
    # Where the run directory was written (`host:/results/root`, `origin_of`): a shared
    # store's column, not part of the entry's JSON (the history file's lines are as ever).
    origin: str | None = Field(default=None, exclude=True)

    @property
    def label(self) -> str:
        return f"{self.spec}/{self.model}"

    @property
    def finished(self) -> datetime:
        return _instant(self.finished_at)


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def history_path(results_root: Path) -> Path:
    return results_root / HISTORY_FILE


def origin_of(results_root: Path) -> str:
    """`host:/absolute/results/root`: where a run directory under `results_root` is (the
    form rsync and scp take, with the directory's name appended)."""
    return f"{socket.gethostname()}:{results_root.resolve()}"


class HistoryStore(Protocol):
    """Where the run history is kept: entries appended, read back in the order appended."""

    @property
    def where(self) -> str:
        """The store as messages name it (a URL without its password)."""
        ...

    def append(self, entry: HistoryEntry) -> None: ...

    def read(self) -> list[HistoryEntry]: ...


@dataclass(frozen=True)
class FileHistory:
    """`<results root>/.history.jsonl` (the module docstring)."""

    results_root: Path

    @property
    def where(self) -> str:
        return str(history_path(self.results_root))

    def append(self, entry: HistoryEntry) -> None:
        append_entry(self.results_root, entry)

    def read(self) -> list[HistoryEntry]:
        return read_history(self.results_root)


def entry_for(
    manifest: Manifest, records: Totalled, run_dir: Path, fingerprint: str
) -> HistoryEntry:
    """`records`: the run's (or the totals it gathered as it wrote them), whose primary
    pass rate the entry keeps as the summary prints it (`pass_rate_of`); `fingerprint` is
    `identity.records_fingerprint` of the run's records."""
    primary = manifest.primary_scorer
    figures = manifest.scores.get(primary)
    return HistoryEntry(
        spec=manifest.spec.name,
        model=manifest.model.requested,
        provider=manifest.model.provider,
        identity=manifest.identity,
        run_dir=run_dir.name,
        started_at=manifest.started_at,
        finished_at=manifest.finished_at,
        git_sha=manifest.git.sha,
        git_dirty=manifest.git.dirty,
        primary_scorer=primary,
        pass_rate=pass_rate_of(records, manifest),
        mean_score=figures.mean if figures else None,
        samples=manifest.samples,
        cost_usd=manifest.target.cost_usd,
        fingerprint=fingerprint,
    )


def append_entry(results_root: Path, entry: HistoryEntry) -> None:
    """Appends one line: one write under an exclusive lock (see the module docstring)."""
    append_lines(history_path(results_root), (entry.model_dump_json() + "\n").encode("utf-8"))


def record_run(
    results_root: Path,
    manifest: Manifest,
    records: Totalled,
    run_dir: Path,
    fingerprint: str,
    store: HistoryStore | None = None,
) -> HistoryEntry:
    """Adds a completed run (its directory already in place) to the history (`store`,
    by default the file under the root); `records` as `entry_for` takes them."""
    entry = entry_for(manifest, records, run_dir, fingerprint)
    (store or FileHistory(results_root)).append(entry)
    return entry


def read_history(results_root: Path) -> list[HistoryEntry]:
    """Every entry, in the order appended (none when there is no history yet); a bad line
    is an InputError naming path and line."""
    path = history_path(results_root)
    data = read_locked(path)
    if data is None:
        return []
    entries = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(HistoryEntry.model_validate_json(line))
        except ValidationError as exc:
            located = input_errors(exc, str(path), on_line(number), words=FIELD_WORDS)
            raise first_of(located) from None
    return entries


def newest_first(entries: Iterable[HistoryEntry]) -> list[HistoryEntry]:
    """By finish time, newest first; entries that finished together in reverse file order."""
    indexed = list(enumerate(entries))
    indexed.sort(key=lambda pair: (pair[1].finished, pair[0]), reverse=True)
    return [entry for _, entry in indexed]


def select(
    entries: Iterable[HistoryEntry], *, spec: str | None = None, model: str | None = None
) -> list[HistoryEntry]:
    return [
        e
        for e in entries
        if (spec is None or e.spec == spec) and (model is None or e.model == model)
    ]


# Where an entry's run is: its directory under the local root holds it (`current`), holds
# a later run of its identity (`replaced`), is not there (`gone`), or was written on
# another machine or under another results root (`elsewhere`, shared stores only).
RunState = Literal["current", "replaced", "gone", "elsewhere"]


@dataclass
class DirectoryState:
    """Whether an entry's run directory still holds that run (caches each directory's
    manifest)."""

    results_root: Path
    _here: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._finished: dict[str, str | None] = {}

    @property
    def here(self) -> str:
        """The local root as an entry's `origin` names it."""
        if self._here is None:
            self._here = origin_of(self.results_root)
        return self._here

    def finished_at(self, run_dir: str) -> str | None:
        """The finish time of the run now in `run_dir`, None if there is none."""
        if run_dir not in self._finished:
            manifest_path = self.results_root / run_dir / MANIFEST_FILE
            try:
                text = manifest_path.read_text(encoding="utf-8")
                self._finished[run_dir] = parse_manifest(text, manifest_path).finished_at
            except (OSError, UnicodeDecodeError, InputError):
                self._finished[run_dir] = None
        return self._finished[run_dir]

    def state_of(self, entry: HistoryEntry) -> RunState:
        now = self.finished_at(entry.run_dir)
        if now == entry.finished_at:
            return "current"
        if entry.origin is not None and entry.origin != self.here:
            return "elsewhere"
        return "gone" if now is None else "replaced"

    def why_not_current(self, entry: HistoryEntry) -> str | None:
        """None when the directory holds the entry's run, else why not."""
        state = self.state_of(entry)
        if state == "current":
            return None
        if state == "elsewhere":
            return f"its directory is not under this results root: {elsewhere(entry)}"
        if state == "gone":
            return "its directory is gone"
        now = self.finished_at(entry.run_dir)
        return f"its directory now holds a later run of that identity (finished {now})"


def elsewhere(entry: HistoryEntry) -> str:
    """Where another machine (or results root) wrote the entry's run directory."""
    return f"{entry.origin}/{entry.run_dir}"


def run_pairs(
    results_root: Path, spec_name: str, store: HistoryStore | None = None
) -> Iterator[tuple[Path, Path]]:
    """Pairs of the spec's runs in the history (`store`, by default the file under the
    root) whose directories under the root still hold them and whose results differ
    (older first in each pair), the most recent pairs first: the last two runs, then the
    last with the one before those, and so on (where `samples_needed` measures the
    discordance)."""
    state = DirectoryState(results_root)
    current = [
        e
        for e in newest_first(select((store or FileHistory(results_root)).read(), spec=spec_name))
        if state.why_not_current(e) is None
    ]
    for i, newer in enumerate(current):
        for older in current[i + 1 :]:
            if older.fingerprint != newer.fingerprint and older.run_dir != newer.run_dir:
                yield results_root / older.run_dir, results_root / newer.run_dir


@dataclass(frozen=True)
class Baseline:
    """The run `--baseline previous` picked, and the earlier runs it passed over (why)."""

    entry: HistoryEntry
    path: Path
    skipped: list[str]


def previous_run(
    results_root: Path, candidate: Manifest, fingerprint: str, store: HistoryStore | None = None
) -> Baseline:
    """The most recent run of the candidate's spec and model that finished before it and
    whose results differ from its (`fingerprint`), its directory still holding it. A
    UsageError (exit 2) when there is none, or when that run's directory is on another
    machine (a shared store): then it says where, rather than pass over to an older run."""
    finished = _instant(candidate.finished_at)
    store = store or FileHistory(results_root)
    history = store.read()
    earlier = [
        e
        for e in select(history, spec=candidate.spec.name, model=candidate.model.requested)
        if e.finished < finished
    ]
    state = DirectoryState(results_root)
    skipped: list[str] = []
    for entry in newest_first(earlier):
        run = f"{entry.run_dir} (finished {entry.finished_at})"
        if entry.fingerprint == fingerprint:
            skipped.append(f"{run}: its results are identical to the candidate's")
            continue
        if state.state_of(entry) == "elsewhere":
            raise UsageError(
                f"--baseline previous: the previous run of {entry.label} whose results "
                f"differ is {run}, recorded in {store.where}; its directory is on another "
                f"machine or results root ({elsewhere(entry)}), not under {results_root}: "
                f"copy it there (e.g. rsync -a {elsewhere(entry)} {results_root}/) or "
                "name a local baseline directory with --baseline DIR"
            )
        reason = state.why_not_current(entry)
        if reason is not None:
            skipped.append(f"{run}: {reason}")
            continue
        return Baseline(entry, results_root / entry.run_dir, skipped)
    label = f"{candidate.spec.name}/{candidate.model.requested}"
    where = store.where
    if not history:
        detail = f"{where} records no run (is the candidate under its results root?)"
    elif not earlier:
        detail = f"{where} records no run of {label} before this one"
    else:
        runs = f"{len(earlier)} earlier run{'s' if len(earlier) != 1 else ''}"
        detail = f"{where} records {runs} of {label}, each passed over: " + "; ".join(skipped)
    raise UsageError(
        f"--baseline previous: no earlier run of {label} whose results differ: {detail}"
    )
