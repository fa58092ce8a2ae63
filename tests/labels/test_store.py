"""The label store: `<results>/.labels.jsonl`, appended under a lock, read into a lookup by
(spec, id, repeat, response hash); a label follows an unchanged response and not a
changed one; the last label for a key wins; a malformed line names file:line."""

import json
import multiprocessing
from pathlib import Path

import pytest

from gradetrail_lib.errors import InputError
from gradetrail_lib.labels.store import (
    Label,
    LabelKey,
    append_labels,
    label_for,
    labels_for_run,
    labels_path,
    read_labels,
    response_hash,
)
from gradetrail_lib.results.runs import MANIFEST_FILE, RESULTS_FILE
from gradetrail_lib.results.trace import RecordWriter, TraceRecord
from tests.support.traces import manifest, record


def write_run(where: Path, records: list[TraceRecord], spec: str = "spec") -> Path:
    where.mkdir(parents=True)
    (where / MANIFEST_FILE).write_text(manifest(spec_name=spec).model_dump_json())
    with RecordWriter(where / RESULTS_FILE) as out:
        out.write(records)
    return where


def make(sample: str, verdict: str = "pass", **fields: object) -> Label:
    values: dict[str, object] = {
        "spec": "spec",
        "id": sample,
        "repeat": 0,
        "response_sha256": response_hash("Answer: 1"),
        "label": verdict,
        "labeller": "ann",
        "time": "2026-12-05T08:00:00+00:00",
        "sampling": "random",
    }
    values.update(fields)
    return Label.model_validate(values)


def test_response_hash_is_sha256_of_the_utf8_text() -> None:
    assert response_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert response_hash("Paris é") != response_hash("Paris e")


def test_labels_live_in_a_dot_file_under_the_results_root(tmp_path: Path) -> None:
    assert labels_path(tmp_path) == tmp_path / ".labels.jsonl"
    assert len(read_labels(tmp_path)) == 0  # no file: no labels, no error
    assert not labels_path(tmp_path).exists()


def test_a_label_applies_to_an_unchanged_response_only(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "results" / "run1",
        [
            record("a", 1.0, response="Answer: 1"),
            record("b", 0.0, response="Answer: 7"),
            record("c", 1.0, response="Answer: 1", repeat=1),
            record("d", None, answered=False),
        ],
    )
    root = tmp_path / "results"
    append_labels(
        root,
        [
            make("a"),
            make("b", "fail"),  # labelled a response "Answer: 1"; the run's b says 7
            make("c", repeat=0),  # another repeat
            make("a", spec="other"),  # another spec
        ],
    )
    paired = list(labels_for_run(run, read_labels(root)))
    assert [p.record.id for p in paired] == ["a", "b", "c", "d"]
    assert [p.label.label if p.label else None for p in paired] == ["pass", None, None, None]


def test_the_latest_label_for_a_key_wins_per_scorer(tmp_path: Path) -> None:
    append_labels(tmp_path, [make("a", "pass")])
    append_labels(tmp_path, [make("a", "fail", note="looked again"), make("a", scorer="j2")])
    lookup = read_labels(tmp_path)
    key = LabelKey("spec", "a", 0, response_hash("Answer: 1"))
    found = lookup.get(key)
    assert found is not None and found.label == "fail" and found.note == "looked again"
    # A label meant for one judge applies to it; the others read the general label.
    assert lookup.get(key, "j2") == make("a", scorer="j2")
    assert lookup.get(key, "j1") == found
    assert len(lookup.of_spec("spec")) == 1
    assert len(lookup.of_spec("spec", "j2")) == 1 and lookup.of_spec("spec", "j2")[0].scorer == "j2"


def test_label_for_hashes_the_records_response() -> None:
    made = label_for(
        record("x", 1.0, response="Paris"),
        spec="caps",
        label="pass",
        sampling="selected",
        labeller="bo",
        time="t",
    )
    assert made.key == LabelKey("caps", "x", 0, response_hash("Paris"))
    assert made.sampling == "selected" and made.labeller == "bo"
    with pytest.raises(ValueError, match="no response"):
        label_for(record("y", None, answered=False), spec="caps", label="pass", sampling="random")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"spec": "s"', "Invalid JSON"),
        ("LABEL", "label: Input should be 'pass' or 'fail'"),
        ("SHA", "response_sha256: String should match pattern"),
        ("EXTRA", "colour: unknown field"),
        ("MISSING", "labeller: missing"),
    ],
)
def test_a_malformed_line_is_an_error_naming_file_and_line(
    tmp_path: Path, line: str, message: str
) -> None:
    good = make("a").model_dump()
    bad = dict(good)
    if line == "LABEL":
        bad["label"] = "maybe"
    elif line == "SHA":
        bad["response_sha256"] = "abc"
    elif line == "EXTRA":
        bad["colour"] = "red"
    elif line == "MISSING":
        del bad["labeller"]
    text = json.dumps(bad) if line.isupper() else line
    labels_path(tmp_path).write_text(json.dumps(good) + "\n\n" + text + "\n")
    with pytest.raises(InputError) as caught:
        read_labels(tmp_path)
    assert str(caught.value).startswith(f"{labels_path(tmp_path)}:3: ")
    assert message in str(caught.value)


def _append_many(root: str, worker: int) -> None:
    for i in range(50):
        append_labels(Path(root), [make(f"w{worker}-{i}", note="x" * 5000)])


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    """Lines of 5 kB from four processes at once: every line parses, none lost."""
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_append_many, args=(str(tmp_path), w)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
        assert w.exitcode == 0
    assert len(read_labels(tmp_path)) == 200


def test_an_exported_csv_runs_no_formula_and_round_trips(tmp_path: Path) -> None:
    """A response or id a spreadsheet would run as a formula is exported quoted, and
    importing the file gives back the very text (so its hash, so its label)."""
    import csv

    from gradetrail_lib.labels.files import export_rows, labels_from_rows, read_rows, write_rows
    from gradetrail_lib.labels.store import LabelLookup

    hostile = [
        record("=cmd|' /C calc'!A0", 1.0, response='=HYPERLINK("http://x","y")'),
        record("-2", 1.0, response="+1"),
        record("'quoted", 1.0, response="'already quoted"),
        record("plain", 1.0, response="Paris"),
    ]
    path = tmp_path / "out.csv"
    with open(path, "w", newline="") as out:
        write_rows(export_rows(hostile, "spec", LabelLookup({})), out, jsonl=False)
    cells = list(csv.DictReader(path.open(newline="")))
    assert [c["response"] for c in cells] == [
        "'=HYPERLINK(\"http://x\",\"y\")", "'+1", "''already quoted", "Paris",
    ]  # fmt: skip
    assert not any(v.startswith(("=", "+", "-", "@")) for c in cells for v in c.values())
    text = path.read_text().replace(",,,", ",pass,,", 4)  # label every row
    path.write_text(text)
    rows = read_rows(path)
    assert [r.id for r in rows] == [r.id for r in hostile]
    labels = labels_from_rows(
        rows, hostile, path=path, spec="spec", scorers=["s"], sampling="random", labeller="x"
    )
    assert [lbl.response_sha256 for lbl in labels] == [
        response_hash(r.response or "") for r in hostile
    ]
