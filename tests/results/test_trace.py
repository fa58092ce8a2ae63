"""The trace record and manifest: round trips, strict reading, errors as path:line."""

import json
from pathlib import Path

import pytest

from gradetrail_lib import load_run
from gradetrail_lib.errors import InputError
from gradetrail_lib.results.trace import (
    SCHEMA_VERSION,
    ModelCall,
    RecordWriter,
    ScoreEntry,
    TraceRecord,
    iter_records,
    record_json,
)
from tests.conftest import run_cli


def make_record(sample_id: str = "s1") -> TraceRecord:
    target = ModelCall(
        role="target", request_key="k" * 64, provider="openai", model="gpt-x",
        served_model="gpt-x-1", input_tokens=10, output_tokens=3, latency_s=0.25,
        cost_usd=None, cache_hit=False, stop_reason="stop",
    )  # fmt: skip
    judge = ModelCall(
        role="judge", request_key="j" * 64, provider="anthropic", model="claude-haiku-4-5",
        served_model=None, input_tokens=40, output_tokens=5, latency_s=0.5, cost_usd=6.5e-05,
        cache_hit=True, stop_reason="stop", scorer="correct", text="GRADE: C",
    )  # fmt: skip
    return TraceRecord(
        schema_version=SCHEMA_VERSION,
        id=sample_id,
        repeat=0,
        messages=[{"role": "user", "content": "Q: 1 + 2 — «ü»"}],
        calls=[target, judge],
        response="Answer: 3",
        stop_reason="stop",
        scores={
            "answer": ScoreEntry(1.0, "found '3'"),
            "correct": ScoreEntry(1.0, "judge grade C"),
            "short": ScoreEntry(None, "scorer raised ValueError: x", "scorer_error"),
        },
        outcome="scored",
        failure_mode=None,
    )


def test_a_record_round_trips_through_a_results_file(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    records = [make_record("a"), make_record("b")]
    with RecordWriter(path) as out:
        out.write(records)
    assert list(iter_records(path)) == records
    back = next(iter_records(path))
    assert back.passes("answer") and not back.scored("short") and back.value("short") == 0.0
    assert back.target is not None and back.target.served_model == "gpt-x-1"
    assert [c.scorer for c in back.calls_of("judge")] == ["correct"]


def test_an_unknown_field_is_refused_with_its_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = record_json(make_record()).decode()
    row = json.loads(good)
    row["calls"][1]["surprise"] = 1
    path.write_text(good + "\n" + json.dumps(row) + "\n")
    with pytest.raises(InputError) as caught:
        list(iter_records(path))
    assert str(caught.value) == f"{path}:2: calls[1].surprise: unknown field"


def test_a_bad_value_is_reported_as_path_line_field(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    row = json.loads(record_json(make_record()))
    row["scores"]["answer"]["score"] = "high"
    path.write_text("\n" + json.dumps(row) + "\n")
    with pytest.raises(InputError) as caught:
        list(iter_records(path))
    assert str(caught.value).startswith(f"{path}:2: scores.answer.score: ")


def test_a_record_of_another_schema_version_says_to_rerun(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    row = json.loads(record_json(make_record()))
    row["schema_version"] = 99
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match=r":1: schema_version: format 99 .* re-run the spec"):
        list(iter_records(path))


def test_a_run_directory_of_the_old_format_says_to_rerun_it(tmp_path: Path) -> None:
    old = tmp_path / "add-fake-1-0123456789ab"
    old.mkdir()
    (old / "manifest.json").write_text(json.dumps({"identity": "x", "scorer_hash": "y"}))
    (old / "results.jsonl").write_text(json.dumps({"id": "s1", "score": 1.0}) + "\n")
    with pytest.raises(InputError, match="older gradetrail.*re-run the spec.*no model call"):
        load_run(old)
    done = run_cli("report", str(old), cwd=tmp_path)
    assert done.returncode == 2
    assert "older gradetrail" in done.stderr and "Traceback" not in done.stderr


def test_a_completed_run_reads_back_record_for_record(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "answer": str(i)}) + "\n" for i in range(5))
    )
    (tmp_path / "s.yaml").write_text(
        "name: echo\ndataset: {path: data/x.jsonl}\nprompt: 'say {{ answer }}'\n"
        "model: {provider: scripted, name: echo, answer_field: answer}\n"
        "scorers:\n  - {name: exact, type: exact}\n  - {name: valid, type: json_valid}\n"
    )
    from gradetrail_lib import run_spec

    (done,) = run_spec(tmp_path / "s.yaml", results_root=tmp_path / "r", cache=tmp_path / "c.db")
    run = load_run(done.run_dir)
    assert run.records == done.records
    assert run.manifest == done.manifest
    assert (
        run.manifest.scorer_names == ["exact", "valid"] and run.manifest.primary_scorer == "exact"
    )
    assert [r.score_of("exact") for r in run] == [1.0] * 5


def test_a_calls_usage_is_one_field_null_for_a_plain_call(tmp_path: Path) -> None:
    from dataclasses import replace

    from gradetrail_lib.results.trace import NO_USAGE, CallUsage

    plain = make_record("plain")
    line = json.loads(record_json(plain))
    assert line["calls"][0]["usage"] is None  # a plain call: one null, not eight defaults
    # A record written before step 11 has no usage at all, and reads as plain.
    del line["calls"][0]["usage"], line["calls"][1]["usage"]
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(line) + "\n")
    (back,) = iter_records(old)
    assert back.calls[0].usage is None and back.calls[0].usage_or_default == NO_USAGE
    usage = CallUsage(batch=True, cached_input_tokens=7, reasoning_tokens=3, thinking="so")
    rich = replace(plain, calls=[replace(plain.calls[0], usage=usage)])
    path = tmp_path / "results.jsonl"
    with RecordWriter(path) as out:
        out.write([rich])
    (read,) = iter_records(path)
    assert read.calls[0].usage == usage
