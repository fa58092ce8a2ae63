"""Reading a run directory back (compare, gate, cost, report, Dagster), with errors that
say what is wrong with it (exit 2) instead of a traceback."""

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from pathlib import Path

from gradetrail_lib.errors import InputError
from gradetrail_lib.results.sheet import ScoreSheet, sheets_of
from gradetrail_lib.results.totals import RunTotals
from gradetrail_lib.results.trace import Manifest, TraceRecord, iter_records, parse_manifest

RESULTS_FILE = "results.jsonl"
MANIFEST_FILE = "manifest.json"


def run_dir_name(spec_name: str, model_name: str, identity: str) -> str:
    safe_model = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_name)
    return f"{spec_name}-{safe_model}-{identity[:12]}"


@dataclass(frozen=True)
class Run:
    """A run directory: its manifest, and its records read as a stream (`iter(run)`) or
    once into a list (`run.records`)."""

    manifest: Manifest
    path: Path | None = None
    # Records already in memory (a run just completed); otherwise read from `path`.
    loaded: list[TraceRecord] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, manifest: Manifest, records: list[TraceRecord], path: Path | None = None) -> "Run":
        return cls(manifest, path, records)

    def __iter__(self) -> Iterator[TraceRecord]:
        if self.loaded is not None:
            return iter(self.loaded)
        assert self.path is not None
        return iter_records(self.path / RESULTS_FILE)

    @cached_property
    def records(self) -> list[TraceRecord]:
        return list(self)

    @cached_property
    def sheets(self) -> dict[str, ScoreSheet]:
        """Each of its scorers' scores, sample by sample (one read of the records): what a
        paired comparison reads, a few bytes a record."""
        return sheets_of(self, self.manifest.scorer_names)

    def sheet(self, scorer: str) -> ScoreSheet:
        """`scorer`'s sheet; every sample unscored by a scorer the run does not have."""
        found = self.sheets.get(scorer)
        return found if found is not None else ScoreSheet.of(self, scorer)

    def totals(self, batch_records: int | None = None) -> RunTotals:
        """What the summary and the statistics need of its records, gathered as they are
        read (a run directory holds them in plan order, each case's together): a few
        bytes a record, not the records. `batch_records`: read that many records at a time
        (the totals are the same however the records are split)."""
        if self.loaded is not None:
            return RunTotals.of(self.loaded, self.manifest.scorer_names)
        totals = RunTotals(self.manifest.scorer_names)
        records = iter(self)
        while True:
            counted = totals.samples
            totals.add_all(islice(records, batch_records))
            if batch_records is None or totals.samples == counted:
                return totals

    @property
    def label(self) -> str:
        return self.manifest.label


def load_run(path: Path | str) -> Run:
    """The run in a directory; its manifest is read and checked now, its records as they
    are iterated (each validated: a bad line is an InputError naming path and line)."""
    path = Path(path)
    where = str(path)
    if not path.is_dir():
        raise InputError(where, None, None, "not a run directory (no such directory)")
    for name in (MANIFEST_FILE, RESULTS_FILE):
        if not (path / name).is_file():
            raise InputError(where, None, None, f"not a run directory (no {name})")
    manifest_path = path / MANIFEST_FILE
    try:
        text = manifest_path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(manifest_path), None, None, f"not valid UTF-8: {exc}") from exc
    return Run(parse_manifest(text, manifest_path), path)


def load_runs(paths: Sequence[Path]) -> list[Run]:
    return [load_run(p) for p in paths]


def distinct_labels(runs: Sequence[Run]) -> list[str]:
    """Labels for display: spec/model, or the directory name where those collide (two
    runs of the same model with different prompts)."""
    labels = [r.label for r in runs]
    if len(set(labels)) == len(labels):
        return labels
    return [r.path.name if r.path else f"{r.label} #{i + 1}" for i, r in enumerate(runs)]
