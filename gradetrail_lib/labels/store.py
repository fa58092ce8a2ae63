"""Human labels: a person's pass/fail verdict on one response of a run, kept outside the
run directories (which stay immutable) in `<results root>/.labels.jsonl`.

The contract (the CLI's `labels import/export`, `calibrate` and the viewer's labelling
pages all code against it):

- `Label` is one line of the file, built with keywords: `spec` (the spec's name), `id`
  and `repeat` (the sample), `response_sha256` (`response_hash` of the response text the
  person read), `label` (`"pass"` or `"fail"`: the person's verdict, the truth a judge is
  measured against), `scorer` (optional: the judge scorer the verdict is meant for; None
  means every judge of the spec), `note`, `labeller`, `time` (ISO 8601, UTC) and
  `sampling`: `"random"` when the sample came from a random labelling queue (only those
  enter a corrected pass rate: a person picks the odd cases, which would bias it) and
  `"selected"` otherwise. `label_for(record, ...)` builds one for a run's record.
- `labels_path(results_root)` is the file; `append_labels(results_root, labels)` appends
  them, all in one write under an exclusive lock (`results.appendlog`, the same as the run
  history), so concurrent writers never interleave; nothing is ever rewritten.
- `read_labels(results_root)` reads the file into a `LabelLookup`. A label applies to a
  record when spec, id, repeat and response hash all match (`LabelKey`), so labels follow
  an unchanged response into later runs (a cached re-run answers the same) and a changed
  response is unlabelled. For a key, the label appended last wins (a relabel replaces the
  earlier verdict), one per scorer (None included); `LabelLookup.get(key, scorer)` gives
  the scorer's own label, else the label for every judge; `latest(key)` the last one
  whatever its scorer. A malformed line is an
  InputError naming `file:line`; no file is an empty lookup.
- `labels_for_run(run_dir, lookup, scorer=None)` yields the run's records, in file order,
  each paired with its label or None (`Labelled`). A record without a response (a
  provider error) is never labelled.
"""

import getpass
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gradetrail_lib.errors import FIELD_WORDS, first_of, input_errors, on_line
from gradetrail_lib.results.appendlog import append_lines, read_locked
from gradetrail_lib.results.runs import load_run
from gradetrail_lib.results.trace import TraceRecord

LABELS_FILE = ".labels.jsonl"

Verdict = Literal["pass", "fail"]
Sampling = Literal["random", "selected"]
VERDICTS: tuple[Verdict, ...] = ("pass", "fail")
SAMPLINGS: tuple[Sampling, ...] = ("random", "selected")


class LabelKey(NamedTuple):
    """What a label and a record must share for the label to apply to the record."""

    spec: str
    id: str
    repeat: int
    response_sha256: str


class Label(BaseModel):
    """One person's verdict on one response (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1  # of the line's format
    spec: str
    id: str
    repeat: int = Field(ge=0)
    response_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    label: Verdict
    scorer: str | None = None
    note: str = ""
    labeller: str
    time: str
    sampling: Sampling

    @property
    def key(self) -> LabelKey:
        return LabelKey(self.spec, self.id, self.repeat, self.response_sha256)

    @property
    def passed(self) -> bool:
        return self.label == "pass"


def response_hash(text: str) -> str:
    """The sha256 (hex) of a response's text, as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def labels_path(results_root: Path) -> Path:
    return Path(results_root) / LABELS_FILE


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def default_labeller() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name (a container without a passwd entry)
        return "unknown"


def label_for(
    record: TraceRecord,
    *,
    spec: str,
    label: Verdict,
    sampling: Sampling,
    labeller: str | None = None,
    scorer: str | None = None,
    note: str = "",
    time: str | None = None,
) -> Label:
    """A label on `record`'s response; a ValueError when it has none."""
    if record.response is None:
        raise ValueError(f"sample {record.id!r} repeat {record.repeat} has no response to label")
    return Label(
        spec=spec,
        id=record.id,
        repeat=record.repeat,
        response_sha256=response_hash(record.response),
        label=label,
        scorer=scorer,
        note=note,
        labeller=labeller if labeller is not None else default_labeller(),
        time=time if time is not None else now(),
        sampling=sampling,
    )


def append_labels(results_root: Path, labels: Iterable[Label]) -> None:
    """Appends the labels in one write under an exclusive lock (nothing when none)."""
    data = b"".join((label.model_dump_json() + "\n").encode("utf-8") for label in labels)
    if data:
        append_lines(labels_path(results_root), data)


@dataclass
class LabelLookup:
    """The labels file read: for each key, the latest label per scorer (None: for every
    judge)."""

    by_key: dict[LabelKey, dict[str | None, Label]]

    def get(self, key: LabelKey, scorer: str | None = None) -> Label | None:
        """The label meant for `scorer`, else the one for every judge, else None."""
        found = self.by_key.get(key)
        if not found:
            return None
        if scorer is not None and scorer in found:
            return found[scorer]
        return found.get(None)

    def latest(self, key: LabelKey) -> Label | None:
        """The label appended last for the key, whichever scorer it is for."""
        found = self.by_key.get(key)
        return list(found.values())[-1] if found else None

    def of_spec(self, spec: str, scorer: str | None = None) -> list[Label]:
        """Every current label of a spec that applies to `scorer` (as `get` picks)."""
        labels = []
        for key in self.by_key:
            if key.spec == spec:
                label = self.get(key, scorer)
                if label is not None:
                    labels.append(label)
        return labels

    def __len__(self) -> int:
        return len(self.by_key)


def parse_labels(data: bytes, path: Path) -> LabelLookup:
    by_key: dict[LabelKey, dict[str | None, Label]] = {}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            label = Label.model_validate_json(line)
        except ValidationError as exc:
            located = input_errors(exc, str(path), on_line(number), words=FIELD_WORDS)
            raise first_of(located) from None
        found = by_key.setdefault(label.key, {})
        found.pop(label.scorer, None)  # re-inserted: a key's labels stay in file order
        found[label.scorer] = label
    return LabelLookup(by_key)


def read_labels(results_root: Path) -> LabelLookup:
    """The labels file as a lookup (empty when there is none); a malformed line is an
    InputError naming `file:line`."""
    path = labels_path(results_root)
    data = read_locked(path)
    return parse_labels(data or b"", path)


def record_key(spec: str, record: TraceRecord) -> LabelKey | None:
    """The key a label needs to apply to `record`; None when it has no response."""
    if record.response is None:
        return None
    return LabelKey(spec, record.id, record.repeat, response_hash(record.response))


class Labelled(NamedTuple):
    record: TraceRecord
    label: Label | None


def labels_for_run(
    run_dir: Path, lookup: LabelLookup, scorer: str | None = None
) -> Iterator[Labelled]:
    """The run's records in file order, each with its label (for `scorer`) or None. The
    run's manifest is checked when called; a bad record line is an InputError naming it."""
    run = load_run(run_dir)
    spec = run.manifest.spec.name
    return _paired(iter(run), spec, lookup, scorer)


def _paired(
    records: Iterable[TraceRecord], spec: str, lookup: LabelLookup, scorer: str | None
) -> Iterator[Labelled]:
    for record in records:
        key = record_key(spec, record)
        yield Labelled(record, lookup.get(key, scorer) if key is not None else None)


__all__ = [
    "LABELS_FILE",
    "SAMPLINGS",
    "VERDICTS",
    "Label",
    "LabelKey",
    "LabelLookup",
    "Labelled",
    "Sampling",
    "Verdict",
    "append_labels",
    "label_for",
    "labels_for_run",
    "labels_path",
    "read_labels",
    "record_key",
    "response_hash",
]
