"""Dagster with human labels: `scores` carries `judge_kappa` and `corrected_pass_rate`
(floats, as `gradetrail calibrate` computes them) and the `judge_agreement` check holds the
judge to GRADETRAIL_MIN_JUDGE_KAPPA once 30 random labels exist."""

import json
from pathlib import Path

import dagster as dg
import pytest

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import GradetrailResource
from gradetrail_lib.analysis.calibration import calibrate_run
from gradetrail_lib.labels.store import append_labels, label_for
from gradetrail_lib.results.runs import load_run
from tests.support.fake_llm_server import FakeLLMServer

N = 40
MODEL = "fake-1"


def write_project(root: Path, base_url: str) -> Path:
    """N sums; a scripted judge passes the first half and fails the second."""
    specs = root / "specs"
    (specs / "data").mkdir(parents=True)
    with open(specs / "data" / "add.jsonl", "w") as out:
        for i in range(N):
            grade = "GRADE: C" if i < N // 2 else "GRADE: I"
            row = {"id": f"s{i:02d}", "a": i, "b": 1, "answer": str(i + 1), "grade": grade}
            out.write(json.dumps(row) + "\n")
    (specs / "judge.j2").write_text("Is {{ response }} right? GRADE: C or I.\n")
    (specs / "add.yaml").write_text(
        f"""name: add
dataset: {{path: data/add.jsonl}}
prompt: "Q: {{{{ a }}}} + {{{{ b }}}}"
models:
  - {{provider: openai_compatible, name: {MODEL}, base_url: "{base_url}"}}
params: {{temperature: 0, max_tokens: 16}}
scorers:
  - {{name: num, type: numeric}}
  - name: j
    type: judge
    prompt_file: judge.j2
    model: {{provider: scripted, name: grader, answer_field: grade}}
"""
    )
    return specs


def materialize(defs: dg.Definitions, instance: dg.DagsterInstance, root: Path):  # type: ignore[no-untyped-def]
    result = defs.resolve_job_def("add__eval").execute_in_process(
        instance=instance,
        partition_key=MODEL,
        asset_selection=[dg.AssetKey(["add", s]) for s in ("dataset", "responses", "scores")],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(root / "storage"))},
    )
    assert result.success
    return result


def test_scores_metadata_and_the_judge_agreement_check(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    specs = write_project(tmp_path, f"{fake_server.base_url}/v1")
    instance.add_dynamic_partitions("add__models", [MODEL])

    def settings(**overrides: float) -> GradetrailResource:
        return GradetrailResource(
            database=str(tmp_path / "gradetrail.duckdb"),
            results_dir=str(tmp_path / "results"),
            **overrides,
        )

    result = materialize(build_definitions(specs, settings()), instance, tmp_path)
    event = result.asset_materializations_for_node("add__scores")[0]
    assert "judge_kappa" not in event.metadata  # no label yet
    run_dir = Path(str(event.metadata["run_dir"].value))

    # People pass the first 30 answers, fail the last 10: the judge (first 20) agrees at
    # kappa 0.5.
    append_labels(
        tmp_path / "results",
        [
            label_for(r, spec="add", label="pass" if int(r.id[1:]) < 30 else "fail",
                      sampling="random", labeller="t")
            for r in load_run(run_dir)
        ],
    )  # fmt: skip
    result = materialize(build_definitions(specs, settings()), instance, tmp_path)
    event = result.asset_materializations_for_node("add__scores")[0]
    (expected,) = calibrate_run(run_dir)
    assert expected.kappa.value == pytest.approx(0.5)
    assert event.metadata["judge_kappa"].value == pytest.approx(0.5)
    assert isinstance(event.metadata["judge_kappa"].value, float)
    assert expected.corrected_pass_rate is not None
    assert event.metadata["corrected_pass_rate"].value == expected.corrected_pass_rate.value
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    agreement = checks["judge_agreement"]
    assert not agreement.passed and "j kappa 0.500" in (agreement.description or "")
    assert agreement.metadata["threshold"].value == 0.6

    # A lower threshold passes the same judge.
    result = materialize(
        build_definitions(specs, settings(min_judge_kappa=0.4)), instance, tmp_path
    )
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert checks["judge_agreement"].passed
    assert fake_server.calls == N  # the target answered once
