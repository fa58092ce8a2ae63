"""The runs under a results root: each directory's manifest, read with `load_run` and
kept until manifest.json changes, and each run's sample index (`index`).

A directory that is not a readable run (no manifest, a manifest that does not validate,
an older format) is an error entry with the reader's message, never an exception; hidden
directories (gradetrail's staging and set-aside ones) and plain files are not runs. A run
with lines that are not records is listed, flagged `damaged` with the first line's error
(kept per results file signature, so the runs page reads a file once, not on each load).
"""

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gradetrail_lib.analysis.stats import Estimate
from gradetrail_lib.analysis.stats.intervals import proportion
from gradetrail_lib.errors import InputError
from gradetrail_lib.results.runs import MANIFEST_FILE, RESULTS_FILE, Run, load_run
from gradetrail_lib.viewer import paths
from gradetrail_lib.viewer.index import IndexCache, RunIndex, Signature, signature

# A run directory's name ends with the first 12 hex digits of its identity.
_NAMED_IDENTITY = re.compile(r"-([0-9a-f]{12})$")


@dataclass(frozen=True)
class RunEntry:
    """A row of the runs page: a run, or a directory that could not be read (`error`)."""

    name: str
    run: Run | None
    error: str | None = None
    pass_rate: Estimate | None = None
    flags: tuple[str, ...] = ()  # short reproducibility warnings, for badges

    @property
    def spec(self) -> str:
        return self.run.manifest.spec.name if self.run else ""

    @property
    def model(self) -> str:
        return self.run.manifest.model.requested if self.run else ""

    @property
    def finished_at(self) -> str:
        return self.run.manifest.finished_at if self.run else ""


def flags_of(name: str, run: Run) -> tuple[str, ...]:
    """Dirty work tree, a served model other than the requested one, and a directory
    named for another identity than its manifest's."""
    m = run.manifest
    flags = []
    if m.git.dirty:
        flags.append("dirty git tree")
    if any(served != m.model.requested for served in m.model.served):
        flags.append(f"served {', '.join(m.model.served)} ≠ requested {m.model.requested}")
    named = _NAMED_IDENTITY.search(name)
    if named is not None and not m.identity.startswith(named.group(1)):
        flags.append(f"identity mismatch: directory {named.group(1)}, manifest {m.identity[:12]}")
    return tuple(flags)


def damage_flags(index: RunIndex, root: Path) -> tuple[str, ...]:
    """`damaged: N unreadable lines (first: path:line: field: message)`, or nothing."""
    if not index.damage:
        return ()
    count = len(index.damage)
    first = index.damage[min(index.damage)].replace(str(root) + os.sep, "")
    lines = "line" if count == 1 else "lines"
    return (f"damaged: {count} unreadable {lines} (first: {first})",)


class Catalog:
    def __init__(self, root: Path, index_capacity: int = 8) -> None:
        self.root = root.resolve()
        self.indexes = IndexCache(index_capacity)
        self._runs: dict[Path, tuple[Signature, Run | InputError]] = {}
        self._damage: dict[Path, tuple[Signature, tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def run(self, name: str) -> Run:
        """The run named `name` under the root: NotFound outside it or when there is no
        such directory, InputError when it is not a readable run."""
        path = paths.run_dir(self.root, name)
        try:
            sig = signature(os.stat(path / MANIFEST_FILE))
        except OSError:
            sig = (0, 0, 0, -1)
        with self._lock:
            cached = self._runs.get(path)
        if cached is not None and cached[0] == sig and sig[3] >= 0:
            found = cached[1]
        else:
            try:
                found = load_run(path)
            except InputError as exc:
                found = exc
            with self._lock:
                self._runs[path] = (sig, found)
        if isinstance(found, InputError):
            raise found
        if not (path / RESULTS_FILE).is_file():  # removed since
            raise InputError(str(path), None, None, f"not a run directory (no {RESULTS_FILE})")
        return found

    @contextmanager
    def samples(self, name: str) -> Iterator[tuple[Run, RunIndex, BinaryIO]]:
        """The run, its index, and its results file open for reading the page's lines
        (the index is the one of this very file, however it was replaced meanwhile)."""
        run = self.run(name)
        assert run.path is not None
        try:
            source = open(run.path / RESULTS_FILE, "rb")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise InputError(
                str(run.path), None, None, f"cannot read {RESULTS_FILE}: {exc}"
            ) from None
        with source:
            index = self.indexes.get(run.path / RESULTS_FILE, source, run.manifest.scorer_names)
            with self._lock:
                self._damage[run.path] = (index.signature, damage_flags(index, self.root))
            yield run, index, source

    def damage(self, name: str, run: Run) -> tuple[str, ...]:
        """The run's `damaged` flag, from its index (built when this file was not read
        yet)."""
        assert run.path is not None
        try:
            sig = signature(os.stat(run.path / RESULTS_FILE))
        except OSError:
            return ()
        with self._lock:
            known = self._damage.get(run.path)
        if known is not None and known[0] == sig:
            return known[1]
        with self.samples(name) as (_, index, _source):
            return damage_flags(index, self.root)

    def pass_rate(self, name: str, run: Run, scorer: str | None = None) -> Estimate:
        """A scorer's pass rate (by default the primary's) with its interval: from the
        manifest's counts, or, with repeats (intervals resample cases), from the run's
        index."""
        m = run.manifest
        scorer = scorer or m.primary_scorer
        if m.repeats <= 1:
            figures = m.scores.get(scorer)
            if figures is not None:
                return proportion(figures.passed, figures.n)
        with self.samples(name) as (_, index, _source):
            return index.pass_rate(scorer)

    def entries(self, *, rates: bool = True) -> list[RunEntry]:
        """Every directory under the root but hidden ones, in name order; `rates`: with
        each run's primary pass rate (which, with repeats, needs the run's index)."""
        out = []
        try:
            children = sorted(self.root.iterdir())
        except OSError:
            return []
        for child in children:
            name = child.name
            if name.startswith(".") or not paths.valid_name(name):
                continue
            if child.is_symlink() and not paths.inside(self.root, child):
                out.append(RunEntry(name, None, "refused: a link out of the results root"))
                continue
            if not child.is_dir():
                continue
            try:
                run = self.run(name)
                rate = self.pass_rate(name, run) if rates else None
                flags = flags_of(name, run) + (self.damage(name, run) if rates else ())
                out.append(RunEntry(name, run, None, rate, flags))
            except paths.NotFound:
                out.append(RunEntry(name, None, "refused: a file links out of the results root"))
            except InputError as exc:
                out.append(RunEntry(name, None, str(exc).replace(str(self.root) + os.sep, "")))
        return out
