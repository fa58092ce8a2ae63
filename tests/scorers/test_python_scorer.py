"""Python scorers: a plain function named by `ref`, loaded when the spec is, its source
hashed into the scorer hash and the run identity; an exception is that sample's error."""

import json
from pathlib import Path

import pytest

from gradetrail_lib import load_run, run_spec
from gradetrail_lib.errors import InputError
from gradetrail_lib.spec.identity import run_identity, scorer_hash
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import run_cli

SCORERS = """
import asyncio

def exact(response, sample):
    return response == sample["answer"]

def graded(response):
    return min(1.0, len(response) / 4), f"{len(response)} characters"

async def later(record, response):
    await asyncio.sleep(0)
    return record.response == response

def picky(sample):
    if sample["id"] == "s2":
        raise ValueError("no opinion on s2")
    return 1

def too_big(response):
    return 7
"""


def project(tmp_path: Path, scorers: str) -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "x.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "answer": "ab"[: i % 3]}) + "\n" for i in range(4))
    )
    (tmp_path / "scorers").mkdir(exist_ok=True)
    source = tmp_path / "scorers" / "mine.py"
    if not source.exists():
        source.write_text(SCORERS)
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: py\n"
        "dataset: {path: data/x.jsonl}\n"
        "prompt: 'say {{ answer }}'\n"
        "model: {provider: scripted, name: echo, answer_field: answer}\n"
        f"scorers:\n{scorers}"
    )
    return spec


ALL = """  - {name: exact, type: python, ref: "scorers/mine.py:exact"}
  - {name: graded, type: python, ref: "scorers/mine.py:graded"}
  - {name: later, type: python, ref: "scorers/mine.py:later"}
  - {name: picky, type: python, ref: "scorers/mine.py:picky"}
  - {name: too_big, type: python, ref: "scorers/mine.py:too_big"}
"""


def test_python_scorers_return_bools_numbers_pairs_and_may_be_async(tmp_path: Path) -> None:
    spec = project(tmp_path, ALL)
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    by_id = {r.id: r for r in done.records}
    assert [by_id[f"s{i}"].score_of("exact") for i in range(4)] == [1.0] * 4
    assert by_id["s1"].scores["graded"].score == 0.25
    assert by_id["s1"].scores["graded"].reason == "1 characters"
    assert by_id["s0"].scores["exact"].reason == "returned True"
    assert all(r.score_of("later") == 1.0 for r in done.records)
    picky = by_id["s2"].scores["picky"]
    assert (picky.score, picky.error) == (None, "scorer_error")
    assert picky.reason == "scorer raised ValueError: no opinion on s2"
    assert by_id["s1"].score_of("picky") == 1.0  # only that (sample, scorer) failed
    big = by_id["s1"].scores["too_big"]
    assert big.error == "scorer_error" and "outside [0, 1]" in big.reason
    assert done.summary.scorers["picky"].errors == 1


def test_a_missing_file_or_function_is_a_load_error_naming_its_line(tmp_path: Path) -> None:
    entries = (
        '  - {name: a, type: python, ref: "scorers/mine.py:exact"}\n'
        '  - {name: b, type: python, ref: "scorers/mine.py:absent"}\n'
    )
    spec = project(tmp_path, entries)
    with pytest.raises(InputError) as caught:
        load_spec(spec)
    assert caught.value.line == 7 and caught.value.field == "scorers[1].ref"
    assert "has no function 'absent'" in caught.value.message

    spec = project(tmp_path, '  - {name: a, type: python, ref: "scorers/gone.py:exact"}\n')
    done = run_cli("run", str(spec), "--cache", str(tmp_path / "c.db"), cwd=tmp_path)
    assert done.returncode == 2
    assert f"{spec}:6: scorers[0].ref: no such file" in done.stderr
    assert not (tmp_path / "results").exists()


def test_a_module_ref_loads_from_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = project(tmp_path, '  - {name: j, type: python, ref: "json:loads"}\n')
    with pytest.raises(InputError, match=r"loads\(\) asks for s"):
        load_spec(spec)
    package = tmp_path / "lib" / "team_metrics"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "length.py").write_text("def nonempty(response):\n    return bool(response)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    spec = project(tmp_path, '  - {name: n, type: python, ref: "team_metrics.length:nonempty"}\n')
    loaded = load_spec(spec)
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    assert [r.score_of("n") for r in done.records] == [0.0, 1.0, 1.0, 0.0]
    # The module's source is hashed like a file's.
    assert list(done.manifest.scorer_files) == ["team_metrics.length"]
    before = scorer_hash(loaded)
    (package / "length.py").write_text("def nonempty(response):\n    return True\n")
    assert scorer_hash(load_spec(spec)) != before


def test_editing_a_python_scorer_rescores_with_zero_calls_and_a_new_identity(
    tmp_path: Path,
) -> None:
    spec = project(tmp_path, '  - {name: exact, type: python, ref: "scorers/mine.py:exact"}\n')
    loaded = load_spec(spec)
    before = (scorer_hash(loaded), run_identity(loaded, "d"))
    (first,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    assert first.manifest.target.calls == 3  # s0 and s3 render alike: one request

    source = tmp_path / "scorers" / "mine.py"
    source.write_text(SCORERS.replace('return response == sample["answer"]', "return False"))
    loaded = load_spec(spec)
    after = (scorer_hash(loaded), run_identity(loaded, "d"))
    assert after[0] != before[0] and after[1] != before[1]
    (second,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    assert second.manifest.target.calls == 0 and second.manifest.target.cache_hits == 4
    assert [r.score_of("exact") for r in second.records] == [0.0] * 4
    assert second.run_dir != first.run_dir
    assert second.manifest.scorer_files != first.manifest.scorer_files
    assert [r.score_of("exact") for r in load_run(first.run_dir)] == [1.0] * 4
