"""Reading a run directory back for compare, gate, cost and report, with errors that say
what is wrong with it (exit 2) instead of a traceback."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail_lib.errors import InputError
from gradetrail_lib.pipeline import ResultRow
from gradetrail_lib.rundir import MANIFEST_FILE, RESULTS_FILE

REQUIRED_ROW_FIELDS = ("id", "outcome", "score")


@dataclass(frozen=True)
class Run:
    manifest: dict[str, Any]
    rows: list[dict[str, Any]]
    path: Path | None = None

    @classmethod
    def of(
        cls,
        manifest: dict[str, Any],
        rows: Sequence[ResultRow | dict[str, Any]],
        path: Path | None = None,
    ) -> "Run":
        """A run from memory (e.g. a Dagster asset's rows), shaped as if read back."""
        return cls(manifest, [r.to_json() if isinstance(r, ResultRow) else r for r in rows], path)

    @property
    def label(self) -> str:
        spec = (self.manifest.get("spec") or {}).get("name", "?")
        model = (self.manifest.get("model") or {}).get("requested", "?")
        return f"{spec}/{model}"


def load_run(path: Path) -> Run:
    where = str(path)
    if not path.is_dir():
        raise InputError(where, None, None, "not a run directory (no such directory)")
    for name in (MANIFEST_FILE, RESULTS_FILE):
        if not (path / name).is_file():
            raise InputError(where, None, None, f"not a run directory (no {name})")
    manifest_path = path / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = exc.lineno if isinstance(exc, json.JSONDecodeError) else None
        raise InputError(str(manifest_path), line, None, f"not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict):
        raise InputError(str(manifest_path), None, None, "must be a JSON object")
    return Run(manifest, _read_rows(path / RESULTS_FILE), path)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8", errors="strict") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(str(path), number, None, f"not valid JSON: {exc.msg}") from exc
            if not isinstance(row, dict):
                raise InputError(str(path), number, None, "a result must be a JSON object")
            for name in REQUIRED_ROW_FIELDS:
                if name not in row:
                    raise InputError(str(path), number, name, "missing")
            rows.append(row)
    return rows


def load_runs(paths: Sequence[Path]) -> list[Run]:
    return [load_run(p) for p in paths]


def distinct_labels(runs: Sequence[Run]) -> list[str]:
    """Labels for display: spec/model, or the directory name where those collide (two
    runs of the same model with different prompts)."""
    labels = [r.label for r in runs]
    if len(set(labels)) == len(labels):
        return labels
    return [r.path.name if r.path else f"{r.label} #{i + 1}" for i, r in enumerate(runs)]
