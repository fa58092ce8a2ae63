"""`gradetrail rank` on three real runs (the in-process scripted provider): y and z
right on 38 and 37 of 40 cases, x on 10. y and z are not told apart (one discordant
pair), both are separated from x after Holm's adjustment: tiers [y, z], [x]; rank
intervals 1-2, 1-2, 3. With repeats the pairs take the sign-flip test over cases."""

import json
from pathlib import Path

import pytest

from gradetrail_lib.analysis.stats.paired import mcnemar_exact
from gradetrail_lib.results.runs import load_run
from tests.conftest import run_cli
from tests.support.scripted_specs import write_scripted_spec

CASES = 40


def _runs(root: Path, repeats: int = 1) -> dict[str, Path]:
    spec = write_scripted_spec(
        root, name="rk", cases=CASES, repeats=repeats, file="rk.yaml",
        models={"x": lambda i: i < 10, "y": lambda i: i < 38, "z": lambda i: i < 38 and i != 5},
    )  # fmt: skip
    results = root / "results"
    done = run_cli("run", str(spec), "--results", str(results), "--cache",
                   str(root / "c.duckdb"), cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {load_run(d).manifest.model.requested: d for d in results.iterdir()
            if not d.name.startswith(".")}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _runs(tmp_path_factory.mktemp("rank"))


def test_rank_prints_tiers_and_rank_intervals(runs: dict[str, Path]) -> None:
    done = run_cli("rank", str(runs["x"]), str(runs["y"]), str(runs["z"]), cwd=runs["x"].parent)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "mrsw-2024-holm" in out and "Holm's step-down" in out and "mcnemar-exact" in out
    assert "family-wise alpha = 0.05" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("1 ", "2 "))]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("1", "1-2", "rk/y"),
        ("1", "1-2", "rk/z"),
        ("2", "3", "rk/x"),
    ]
    assert "(wilson)" in out  # the pass rate's interval names its method


def test_rank_json(runs: dict[str, Path]) -> None:
    done = run_cli(
        "rank", str(runs["x"]), str(runs["y"]), str(runs["z"]), "--json", cwd=runs["x"].parent
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["tiers"] == [["rk/y", "rk/z"], ["rk/x"]]
    assert body["method"]["rank_interval"] == "mrsw-2024-holm"
    by = {m["model"]: m for m in body["models"]}
    assert (by["rk/x"]["rank_interval"]["best"], by["rk/x"]["rank_interval"]["worst"]) == (3, 3)
    assert by["rk/y"]["pass_rate"]["value"] == pytest.approx(38 / 40)
    assert by["rk/y"]["pass_rate"]["interval"]["method"] == "wilson"
    pairs = {(p["a"], p["b"]): p for p in body["pairs"]}
    xy = pairs[("rk/x", "rk/y")]
    # Holm: the smallest of 3 p-values times 3.
    assert xy["paired_test"]["p"] == pytest.approx(mcnemar_exact(0, 28))
    assert xy["adjusted_p"]["p"] == pytest.approx(3 * mcnemar_exact(0, 28))
    assert xy["better"] == "rk/y"
    assert pairs[("rk/y", "rk/z")]["separated"] is False


def test_rank_refuses_one_run_and_a_missing_directory(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    done = run_cli("rank", str(runs["x"]), cwd=tmp_path)
    assert done.returncode == 2 and "two or more" in done.stderr
    done = run_cli("rank", str(runs["x"]), str(tmp_path / "nope"), cwd=tmp_path)
    assert done.returncode == 2 and "nope" in done.stderr


def test_rank_with_repeats_takes_cases_as_units(tmp_path: Path) -> None:
    dirs = _runs(tmp_path, repeats=3)
    done = run_cli("rank", *(str(dirs[m]) for m in "xyz"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["method"]["paired_tests"] == ["cluster-sign-flip"]
    assert body["cases"] == CASES and body["n"] == 3 * CASES
    assert body["tiers"] == [["rk/y", "rk/z"], ["rk/x"]]
