"""`plan SPEC --detect D` prints each model's cost beside the samples needed, and with
`--until-decided` the cases and cost a release check is expected to use at true
differences 0, D and 2D (the sequential rule simulated)."""

import json
import subprocess
from pathlib import Path

import pytest

from gradetrail_lib import cli
from gradetrail_lib.analysis.stats.sequential import forecast
from tests.support.viewer_runs import ViewerRuns, make_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    return make_runs(tmp_path_factory.mktemp("plan"))


def main(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    capsys.readouterr()
    code = cli.main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


def test_plan_detect_prints_the_cost_per_model(
    runs: ViewerRuns, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = runs.root.parent / "specs" / "qa.yaml"
    done = main(capsys, "plan", str(spec), "--detect", "0.2", "--results", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    assert "Cost per model (price list" in done.stdout
    assert "samples (full run)" in done.stdout and "requests cached" in done.stdout
    assert "--until-decided" not in done.stdout and "Run --until-decided" not in done.stdout
    body = json.loads(
        main(capsys, "plan", str(spec), "--detect", "0.2", "--json", "--until-decided",
             "--results", str(tmp_path / "r")).stdout
    )  # fmt: skip
    (first, *_) = body["cost"]
    assert first["method"] == "the full run's estimate pro rata"
    assert first["needed_samples"] <= first["samples"]
    deltas = [f["true_difference"] for f in body["until_decided"]]
    assert deltas == [0.0, 0.2, 0.4]
    for f in body["until_decided"]:
        assert f["method"] == "betting-cs-wsr-2024"
        assert 0 < f["expected_cases"] <= f["cases_available"]
        assert sum(f["verdicts"].values()) == pytest.approx(1.0)
    # More difference, fewer cases expected.
    expected = [f["expected_cases"] for f in body["until_decided"]]
    assert expected[0] >= expected[1] >= expected[2]


def test_forecast_saves_cases_on_a_clear_difference() -> None:
    """2,000 cases, discordance 0.2: a true difference of 0.2 is decided on about a
    twentieth of the cases, B named every time; none is named at 0 above alpha."""
    big = forecast(0.2, cases=2000, discordance=0.2, chunk=50, runs=500)
    assert big.shares["B"] > 0.99 and big.mean_cases < 200
    null = forecast(0.0, cases=2000, discordance=0.2, chunk=50, runs=500)
    assert null.shares["A"] + null.shares["B"] < 0.05 + 0.02
    assert null.mean_cases > 1800
