"""Label files a person edits (`gradetrail labels import/export`): CSV or JSON Lines,
one row per sample, columns `id`, `repeat`, `label` (`pass`/`fail`, empty: unlabelled),
optional `scorer`, `note` and `response`: the text the person read (an export writes it).
With a response, the label is of that text and applies to a run's record only where the
record answered exactly so; without, it is of the run's response. Other columns (an
export's `prompt`) are there to read and are ignored. The format follows the file's
suffix: `.jsonl`/`.json` is JSON Lines, anything else CSV. A CSV cell that starts with
a quote has it dropped (an export quotes cells a spreadsheet would run as formulas)."""

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gradetrail_lib.errors import InputError, one_or_all
from gradetrail_lib.labels.store import (
    VERDICTS,
    Label,
    LabelLookup,
    Sampling,
    label_for,
    now,
    record_key,
)
from gradetrail_lib.results.trace import TraceRecord

COLUMNS = ("id", "repeat", "label", "scorer", "note")
# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection: a
# response "=HYPERLINK(...)" would become a live link). An exported CSV cell that starts
# with one, or with the quote itself, gets a quote in front, which the spreadsheet shows
# as text; importing a CSV drops one leading quote again, so the text round-trips.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")
EXPORT_COLUMNS = (*COLUMNS, "prompt", "response")


@dataclass(frozen=True, kw_only=True)
class Row:
    line: int
    id: str
    repeat: int
    label: str  # "pass", "fail" or "" (unlabelled)
    scorer: str | None
    note: str
    # The response the person read, when the file says (an export, a shipped label
    # file): the label is of that text, and applies to a run only where it answered so.
    response: str | None = None


def is_jsonl(path: Path) -> bool:
    return path.suffix.lower() in (".jsonl", ".json")


def _raw_rows(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    if is_jsonl(path):
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(str(path), number, None, f"not valid JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise InputError(str(path), number, None, "not a JSON object")
            yield number, row
        return
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in ("id", "repeat", "label") if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(str(path), 1, None, f"missing column(s): {', '.join(missing)}")
    for row in reader:
        yield reader.line_num, {k: _unquote(v) for k, v in row.items()}


def _quote(cell: Any) -> Any:
    return f"'{cell}" if isinstance(cell, str) and cell.startswith(FORMULA_STARTS) else cell


def _unquote(cell: Any) -> Any:
    return cell[1:] if isinstance(cell, str) and cell.startswith("'") else cell


def _row(path: Path, number: int, raw: dict[str, Any]) -> Row:
    def fail(field: str | None, message: str) -> InputError:
        return InputError(str(path), number, field, message)

    sample = raw.get("id")
    if sample is None or str(sample) == "":
        raise fail("id", "missing")
    repeat_raw = raw.get("repeat", 0)
    try:
        repeat = int(repeat_raw if repeat_raw not in ("", None) else 0)
    except (TypeError, ValueError):
        raise fail("repeat", f"not an integer: {repeat_raw!r}") from None
    if repeat < 0 or isinstance(repeat_raw, bool):
        raise fail("repeat", f"not a repeat number: {repeat_raw!r}")
    label = str(raw.get("label") or "").strip().lower()
    if label not in (*VERDICTS, ""):
        raise fail("label", f"must be pass or fail (or empty), not {raw.get('label')!r}")
    scorer = raw.get("scorer")
    return Row(
        line=number,
        id=str(sample),
        repeat=repeat,
        label=label,
        scorer=str(scorer) if scorer not in (None, "") else None,
        note=str(raw.get("note") or ""),
        response=str(raw["response"]) if raw.get("response") not in (None, "") else None,
    )


def read_rows(path: Path) -> list[Row]:
    """Every row of a label file; every bad row's error together (InputErrors)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(str(path), None, None, "no such file") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(path), None, None, f"not valid UTF-8: {exc}") from None
    rows, errors = [], []
    for number, raw in _raw_rows(path, text):
        try:
            rows.append(_row(path, number, raw))
        except InputError as exc:
            errors.append(exc)
    if errors:
        raise one_or_all(errors)
    return rows


def labels_from_rows(
    rows: Iterable[Row],
    records: Iterable[TraceRecord],
    *,
    path: Path,
    spec: str,
    scorers: Iterable[str],
    sampling: Sampling,
    labeller: str,
) -> list[Label]:
    """The labelled rows as labels on the run's responses; a row naming a sample the run
    does not have, one without a response, a scorer the run does not have, or a sample
    twice, is an error (all of them together)."""
    by_sample = {(r.id, r.repeat): r for r in records}
    known_scorers = set(scorers)
    labels: list[Label] = []
    errors: list[InputError] = []
    seen: dict[tuple[str, int], int] = {}
    time = now()
    for row in rows:
        where = (row.id, row.repeat)

        def fail(field: str, message: str, row: Row = row) -> None:
            errors.append(InputError(str(path), row.line, field, message))

        if where in seen and row.label:
            fail("id", f"sample {row.id!r} repeat {row.repeat} again (first on line {seen[where]})")
            continue
        record = by_sample.get(where)
        if record is None:
            fail("id", f"the run has no sample {row.id!r} with repeat {row.repeat}")
            continue
        if not row.label:
            continue
        seen[where] = row.line
        if record.response is None:
            fail("id", f"sample {row.id!r} repeat {row.repeat} has no response to label")
            continue
        if row.scorer is not None and row.scorer not in known_scorers:
            fail("scorer", f"the run has no scorer {row.scorer!r}")
            continue
        if row.response is not None:
            # The text the person read: where the run answered differently, the label is
            # kept but applies to no record of this run (calibrate counts it unmatched).
            record = replace(record, response=row.response)
        labels.append(
            label_for(
                record,
                spec=spec,
                label="pass" if row.label == "pass" else "fail",
                sampling=sampling,
                labeller=labeller,
                scorer=row.scorer,
                note=row.note,
                time=time,
            )
        )
    if errors:
        raise one_or_all(errors)
    return labels


def _prompt(record: TraceRecord) -> str:
    users = [m.get("content") for m in record.messages if m.get("role") == "user"]
    last = users[-1] if users else ""
    return last if isinstance(last, str) else json.dumps(last)


def export_rows(
    records: Iterable[TraceRecord], spec: str, lookup: LabelLookup
) -> Iterator[dict[str, Any]]:
    """A row per record: its label where one applies (empty where none)."""
    for record in records:
        key = record_key(spec, record)
        label = lookup.latest(key) if key is not None else None
        yield {
            "id": record.id,
            "repeat": record.repeat,
            "label": label.label if label else "",
            "scorer": (label.scorer or "") if label else "",
            "note": label.note if label else "",
            "prompt": _prompt(record),
            "response": record.response if record.response is not None else "",
        }


def write_rows(rows: Iterable[dict[str, Any]], out: io.TextIOBase | Any, *, jsonl: bool) -> None:
    if jsonl:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        return
    writer = csv.DictWriter(out, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _quote(v) for k, v in row.items()} for row in rows)
