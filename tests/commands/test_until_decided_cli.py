"""`gradetrail run SPEC --model NEW --against INCUMBENT --until-decided` through the CLI
(the in-process scripted provider): the verdict with its method, the cases used and the
cost in the output and the manifests; the two run directories are normal ones `compare`
reads; bad combinations of options exit 2 naming the option, nothing written."""

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.scripted_specs import write_scripted_spec

CASES = 200


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scripted_spec(
        tmp_path_factory.mktemp("until"), name="rel", cases=CASES,
        models={"x": lambda i: i % 5 < 2, "y": lambda i: True},
    )  # fmt: skip


def test_until_decided_names_the_winner_and_writes_two_normal_runs(spec: Path) -> None:
    root = spec.parent
    args = ["--model", "y", "--against", "x", "--until-decided", "--chunk", "20"]
    done = run_cli("run", str(spec), *args, "--results", "res", "--cache", "c.duckdb", cwd=root)
    assert done.returncode == 0, done.stderr
    assert "Verdict: rel/y (challenger) is better" in done.stdout
    assert "betting-cs-wsr-2024" in done.stdout and f"of {CASES} cases used" in done.stdout
    assert "saved" in done.stdout
    # Apart from full runs, under a results root of the check's own.
    assert not list((root / "res").glob("rel-*"))
    dirs = sorted((root / "res" / "until-decided" / "rel-y-vs-x").glob("rel-*"))
    assert len(dirs) == 2
    for run_dir in dirs:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        sequential = manifest["sequential"]
        assert sequential["verdict"] == "B" and sequential["winner"] == "rel/y"
        assert sequential["cases_used"] == manifest["samples"] < CASES
        assert "saved_usd" in sequential and "cost_usd" in sequential
    compared = run_cli("compare", str(dirs[0]), str(dirs[1]), cwd=root)
    assert compared.returncode == 0, compared.stderr
    assert "Verdict: B" in compared.stdout
    # The report reads them too, and says why they hold few cases.
    report = root / "r.html"
    made = run_cli("report", str(dirs[0]), str(dirs[1]), "--output", str(report), cwd=root)
    assert made.returncode == 0, made.stderr
    html = report.read_text()
    assert "release check (until decided)" in html and "betting-cs-wsr-2024" in html
    assert "B (winner rel/y): rel/y against rel/x" in html


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "y", "--until-decided"], "--until-decided needs --against"),
        (["--model", "y", "--against", "x"], "--against needs --until-decided"),
        (["--models", "y,x", "--against", "x", "--until-decided"], "exactly one new model"),
        (["--model", "y", "--against", "x", "--until-decided", "--no-cache"], "drop --no-cache"),
        (["--model", "x", "--against", "x", "--until-decided"], "the new model is the incumbent"),
    ],
)
def test_bad_options_exit_2_and_write_nothing(spec: Path, args: list[str], message: str) -> None:
    root = spec.parent
    done = run_cli("run", str(spec), *args, "--results", "bad", "--cache", "bad.duckdb", cwd=root)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (root / "bad").exists() or not any((root / "bad").glob("rel-*"))
