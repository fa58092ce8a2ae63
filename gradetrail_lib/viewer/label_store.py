"""TEMPORARY shim of the label store's contract (gradetrail_lib/labels), until that
package lands; deleted at the merge. Only what the viewer calls."""

import fcntl
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

LABELS_FILE = ".labels.jsonl"


@dataclass(frozen=True)
class Label:
    spec: str
    id: str
    repeat: int
    response_sha256: str
    label: Literal["pass", "fail"]
    scorer: str | None
    note: str
    labeller: str
    time: str
    sampling: Literal["random", "selected"]


Key = tuple[str, str, int, str]


def response_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def labels_path(results_root: Path) -> Path:
    return results_root / LABELS_FILE


def append_labels(results_root: Path, labels: list[Label]) -> None:
    data = "".join(json.dumps(asdict(label)) + "\n" for label in labels).encode()
    fd = os.open(labels_path(results_root), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, data)
    finally:
        os.close(fd)


def read_labels(results_root: Path) -> dict[Key, Label]:
    try:
        text = labels_path(results_root).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    out: dict[Key, Label] = {}
    for line in text.splitlines():
        if line.strip():
            label = Label(**json.loads(line))
            out[(label.spec, label.id, label.repeat, label.response_sha256)] = label
    return out
