"""The thirty human labels shipped with specs/capitals.yaml: well-formed, one per sample
of the dataset, each of the answer the person read; and through a real offline run of the
spec, `labels import` + `calibrate` measure the 135M judge, and `gate --require-kappa`
refuses it."""

import csv
import json
import shutil
from pathlib import Path

import pytest

from gradetrail_lib.labels.store import read_labels
from tests.conftest import REPO, needs_local_model, run_cli

LABELS = REPO / "specs" / "labels" / "capitals.csv"


def test_thirty_labels_one_per_sample_with_the_answer_read() -> None:
    rows = list(csv.DictReader(LABELS.open(newline="")))
    dataset = [json.loads(line)["id"] for line in (REPO / "specs/data/capitals.jsonl").open()]
    assert [r["id"] for r in rows] == dataset and len(rows) == 30
    assert {r["label"] for r in rows} == {"pass", "fail"}
    assert all(r["response"] and r["note"] and r["repeat"] == "0" for r in rows)


@needs_local_model
@pytest.mark.slow  # the local model answers 60 questions
def test_calibrate_the_135m_judge_offline(tmp_path: Path) -> None:
    for part in ("capitals.yaml", "data", "judges", "scorers"):
        source = REPO / "specs" / part
        copy = shutil.copytree if source.is_dir() else shutil.copy
        copy(source, tmp_path / part)
    cache = ["--cache", str(tmp_path / "cache.duckdb"), "--results", str(tmp_path / "results")]
    done = run_cli("run", "capitals.yaml", *cache, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if not p.name.startswith(".")]
    done = run_cli("labels", "import", str(LABELS), "--run", str(run_dir), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(read_labels(tmp_path / "results")) == 30
    done = run_cli("calibrate", str(run_dir), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    judged = json.loads(done.stdout)["judged"]
    # However this machine's model answered, every label is counted one way or the other.
    done = run_cli("calibrate", str(run_dir), cwd=tmp_path)
    matched = judged["n_labeled"]
    assert f"{matched} labels matched a response of this run, {30 - matched} did not" in done.stdout
    # A judge near chance: gating on it is refused, saying why.
    gate = run_cli(
        "gate",
        str(run_dir),
        "--baseline",
        str(run_dir),
        "--scorer",
        "judged",
        "--require-kappa",
        "0.6",
        cwd=tmp_path,
    )
    assert gate.returncode == 2
    assert "not gated: judge scorer 'judged'" in gate.stderr
    # The summary of a cached re-run now carries the judge's calibration.
    done = run_cli("run", "capitals.yaml", *cache, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"Calibrated: judged: {matched} human labels" in done.stdout
