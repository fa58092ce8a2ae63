"""Two real runs with repeats (`repeats: 5`, the in-process scripted provider) through
the CLI: compare, compare --json, gate, the report and the viewer's diff name the paired
test over cases (cluster-sign-flip) and its p, and print McNemar's p over (case, repeat)
pairs nowhere, nor does the run's summary.

Model y answers right on all 10 cases, model x on the first 4, on every repeat: 6 cases
favour y. Over cases the exact sign-flip p is 2 / 2^6 = 0.03125; McNemar over the 50
pairs (30 won only by y) would say 2 / 2^30 = 1.863e-09."""

import json
from pathlib import Path

import httpx
import pytest

from gradetrail_lib.results.runs import load_run
from tests.conftest import run_cli
from tests.support.viewer_server import Background

CASES, RIGHT_X = 10, 4
SIGN_FLIP_P = "0.03125"
MCNEMAR_PAIRS_P = "1.863e-09"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, str]:
    """(x's run, y's run, the results root, the run's stdout)."""
    root = tmp_path_factory.mktemp("repeats")
    (root / "data").mkdir()
    rows = [
        {"id": f"c{i}", "answer": f"a{i}", "x": f"a{i}" if i < RIGHT_X else "wrong", "y": f"a{i}"}
        for i in range(CASES)
    ]
    (root / "data" / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = root / "rep.yaml"
    spec.write_text(
        "name: rep\n"
        "dataset: {path: data/r.jsonl}\n"
        "prompt: 'say {{ answer }}'\n"
        "models:\n"
        "  - {provider: scripted, name: x, answer_field: x}\n"
        "  - {provider: scripted, name: y, answer_field: y}\n"
        "repeats: 5\n"
        "params: {temperature: 0.7, max_tokens: 8}\n"
        "scorers:\n"
        "  - {name: exact, type: exact, field: answer}\n"
    )
    results = root / "results"
    done = run_cli("run", str(spec), "--results", str(results), "--cache",
                   str(root / "c.duckdb"), cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    dirs = {load_run(d).manifest.model.requested: d for d in results.iterdir()
            if not d.name.startswith(".")}  # fmt: skip
    return dirs["x"], dirs["y"], results, done.stdout + done.stderr


def no_mcnemar(text: str) -> None:
    assert "McNemar p" not in text and "mcnemar p" not in text.lower()
    assert MCNEMAR_PAIRS_P not in text


def test_the_run_summary_prints_no_mcnemar(runs: tuple[Path, Path, Path, str]) -> None:
    no_mcnemar(runs[3])


def test_compare_names_the_test_over_cases(runs: tuple[Path, Path, Path, str]) -> None:
    x, y, root, _ = runs
    done = run_cli("compare", str(x), str(y), cwd=root)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    no_mcnemar(out)
    assert "paired test p" in out and f"{SIGN_FLIP_P} (cluster-sign-flip)" in out
    assert f"Paired test (cluster-sign-flip, {CASES} cases as units): p = {SIGN_FLIP_P}" in out
    assert "Verdict: B (rep/y is better)" in out

    as_json = run_cli("compare", str(x), str(y), "--json", cwd=root)
    assert as_json.returncode == 0, as_json.stderr
    no_mcnemar(as_json.stdout)
    (result,) = json.loads(as_json.stdout)["scorers"]
    assert result["mcnemar_p"] is None
    assert result["paired_test"] == {"method": "cluster-sign-flip", "p": 2 / 2**6}
    assert (result["n"], result["cases"], result["verdict"]) == (50, CASES, "B")


def test_gate_explains_with_the_test_over_cases(runs: tuple[Path, Path, Path, str]) -> None:
    x, y, root, _ = runs
    done = run_cli("gate", str(x), "--baseline", str(y), cwd=root)  # x drops 0.6
    assert done.returncode == 1, done.stdout + done.stderr
    no_mcnemar(done.stdout)
    assert f"cluster sign-flip test (cluster-sign-flip) p = {SIGN_FLIP_P}" in done.stdout


def test_report_and_viewer_show_the_test_over_cases(
    runs: tuple[Path, Path, Path, str], tmp_path: Path
) -> None:
    x, y, root, _ = runs
    report = tmp_path / "report.html"
    made = run_cli("report", str(x), str(y), "--output", str(report), cwd=root)
    assert made.returncode == 0, made.stderr
    html = report.read_text()
    no_mcnemar(html)
    assert "paired test p" in html
    assert f'{SIGN_FLIP_P} <span class="sub">cluster-sign-flip</span>' in html

    with Background(root) as url:
        page = httpx.get(f"{url}/diff/{x.name}/{y.name}", timeout=30)
    assert page.status_code == 200, page.text
    no_mcnemar(page.text)
    assert 'id="mcnemar-p"' not in page.text
    assert f'id="paired-p">{SIGN_FLIP_P}<' in page.text
    assert 'id="paired-test">cluster-sign-flip<' in page.text
