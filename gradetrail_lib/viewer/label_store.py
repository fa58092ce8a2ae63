"""TEMPORARY shim of the label store (gradetrail_lib/labels, on the s12-labels branch),
the subset the viewer calls with the same names; deleted when that package is merged."""

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from gradetrail_lib.errors import InputError
from gradetrail_lib.results.trace import TraceRecord

LABELS_FILE = ".labels.jsonl"
Verdict = Literal["pass", "fail"]
Sampling = Literal["random", "selected"]


class LabelKey(NamedTuple):
    spec: str
    id: str
    repeat: int
    response_sha256: str


@dataclass(frozen=True, kw_only=True)
class Label:
    version: int = 1
    spec: str
    id: str
    repeat: int
    response_sha256: str
    label: Verdict
    scorer: str | None = None
    note: str = ""
    labeller: str
    time: str
    sampling: Sampling


def response_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def labels_path(results_root: Path) -> Path:
    return Path(results_root) / LABELS_FILE


def label_for(
    record: TraceRecord, *, spec: str, label: Verdict, sampling: Sampling,
    labeller: str | None = None, scorer: str | None = None, note: str = "",
    time: str | None = None,
) -> Label:  # fmt: skip
    from datetime import UTC, datetime

    if record.response is None:
        raise ValueError(f"sample {record.id!r} repeat {record.repeat} has no response to label")
    return Label(
        spec=spec, id=record.id, repeat=record.repeat,
        response_sha256=response_hash(record.response), label=label, scorer=scorer,
        note=note, labeller=labeller or "unknown",
        time=time or datetime.now(UTC).isoformat(timespec="seconds"), sampling=sampling,
    )  # fmt: skip


def append_labels(results_root: Path, labels: Iterable[Label]) -> None:
    data = "".join(json.dumps(asdict(label)) + "\n" for label in labels).encode()
    fd = os.open(labels_path(results_root), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, data)
    finally:
        os.close(fd)


@dataclass
class LabelLookup:
    by_key: dict[LabelKey, dict[str | None, Label]]

    def latest(self, key: LabelKey) -> Label | None:
        found = self.by_key.get(key)
        return list(found.values())[-1] if found else None


def read_labels(results_root: Path) -> LabelLookup:
    try:
        text = labels_path(results_root).read_text(encoding="utf-8")
    except FileNotFoundError:
        return LabelLookup({})
    by_key: dict[LabelKey, dict[str | None, Label]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                label = Label(**json.loads(line))
            except (ValueError, TypeError) as exc:
                path = str(labels_path(results_root))
                raise InputError(path, number, None, str(exc)) from None
            key = LabelKey(label.spec, label.id, label.repeat, label.response_sha256)
            found = by_key.setdefault(key, {})
            found.pop(label.scorer, None)
            found[label.scorer] = label
    return LabelLookup(by_key)


def record_key(spec: str, record: TraceRecord) -> LabelKey | None:
    if record.response is None:
        return None
    return LabelKey(spec, record.id, record.repeat, response_hash(record.response))
