"""A figure no interval is known to cover carries its warning everywhere it is printed:
a real `gradetrail run` of 20 skewed graded scores (the run summary), `compare --json`
of two such runs (the paired difference of graded scores over 20 pairs warns too) and
`report` (the HTML)."""

import json
from pathlib import Path

from gradetrail_lib.results.runs import load_run
from tests.conftest import run_cli

# 20 draws of Beta(0.5, 3), rounded: skewness 1.5 at n = 20, below 30 the effective-n
# interval, which warns for skewed values at this n (stats.intervals.skew_warning).
SKEWED = [0.14, 0.01, 0.0, 0.01, 0.06, 0.02, 0.0, 0.16, 0.21, 0.55]
SKEWED += [0.62, 0.19, 0.06, 0.04, 0.63, 0.24, 0.01, 0.05, 0.01, 0.04]
SCORER = """
def graded(response):
    return float(response)
"""
WARNING = "warning: skewed values (skewness 1.5) at n=20"


def project(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    rows = [
        {"id": f"s{i:02d}", "x": str(v), "y": str(round(min(1.0, v * 1.5), 3))}
        for i, v in enumerate(SKEWED)
    ]
    (tmp_path / "data" / "g.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "g.py").write_text(SCORER)
    spec = tmp_path / "g.yaml"
    spec.write_text(
        "name: graded\n"
        "dataset: {path: data/g.jsonl}\n"
        "prompt: 'score {{ x }}'\n"
        "models:\n"
        "  - {provider: scripted, name: x, answer_field: x}\n"
        "  - {provider: scripted, name: y, answer_field: y}\n"
        "params: {temperature: 0, max_tokens: 8}\n"
        "scorers:\n"
        '  - {name: g, type: python, ref: "g.py:graded"}\n'
    )
    return spec


def test_the_warning_reaches_summary_json_and_report(tmp_path: Path) -> None:
    spec = project(tmp_path)
    results = tmp_path / "results"
    done = run_cli("run", str(spec), "--results", str(results), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    means = [line for line in done.stdout.splitlines() if "Scorer g" in line]
    assert means, done.stdout
    # Model x's figure: the effective-n interval, and its warning, in the summary line.
    assert any("wilson-neff, n=20; " + WARNING in line for line in means), means

    dirs = {
        load_run(d).manifest.model.requested: d
        for d in sorted(results.iterdir())
        if not d.name.startswith(".")
    }
    compared = run_cli("compare", str(dirs["x"]), str(dirs["y"]), "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    (scorer,) = json.loads(compared.stdout)["scorers"]
    difference = scorer["difference_b_minus_a"]
    assert difference["interval"]["method"].startswith("bootstrap")
    assert "over 20 pairs" in difference["warning"]
    assert difference["interval"]["warning"] == difference["warning"]
    text = run_cli("compare", str(dirs["x"]), str(dirs["y"]), cwd=tmp_path)
    assert f"Warning: {difference['warning']}" in text.stdout

    out = tmp_path / "report.html"
    reported = run_cli("report", str(dirs["x"]), "--output", str(out), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    html = out.read_text()
    assert WARNING in html
