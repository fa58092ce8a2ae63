"""`repeats: 5` end to end on the in-process scripted provider: `gradetrail run` prints
pass@k and pass^k with intervals over cases, the manifest records repeats and the
figures, adding repeats reuses repeat 0's cached answers, compare pairs on (id, repeat)
and resamples cases, the report shows pass@k and pass^k."""

import json
from pathlib import Path

from gradetrail_lib.results.runs import load_run
from tests.conftest import run_cli

# Case i passes its first PASSES[i] repeats of 5 (the scorer reads record.repeat).
PASSES = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 5, "f": 5}
SCORER = """
def by_repeat(record, sample):
    return record.repeat < sample["passes"]
"""


def project(tmp_path: Path, repeats: int = 5) -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    rows = [{"id": i, "answer": f"x{i}", "passes": p} for i, p in PASSES.items()]
    (tmp_path / "data" / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "p.py").write_text(SCORER)
    spec = tmp_path / "rep.yaml"
    spec.write_text(
        "name: rep\n"
        "dataset: {path: data/r.jsonl}\n"
        "prompt: 'say {{ answer }}'\n"
        "models:\n"
        "  - {provider: scripted, name: x, answer_field: answer}\n"
        "  - {provider: scripted, name: y, answer_field: answer}\n"
        f"repeats: {repeats}\n"
        "params: {temperature: 0.7, max_tokens: 8}\n"
        "scorers:\n"
        '  - {name: p, type: python, ref: "p.py:fn"}\n'.replace("fn", "by_repeat")
        + "  - {name: exact, type: exact, field: answer}\n"
    )
    return spec


def run_dirs(results: Path) -> dict[str, Path]:
    return {
        load_run(d).manifest.model.requested: d
        for d in sorted(results.iterdir())
        if not d.name.startswith(".")
    }


def test_repeats_print_pass_at_k_and_reuse_repeat_zero(tmp_path: Path) -> None:
    spec = project(tmp_path)
    cache = str(tmp_path / "c.duckdb")
    once = tmp_path / "once"
    single = run_cli(
        "run", str(spec), "--model", "x", "--repeats", "1", "--results", str(once),
        "--cache", cache, cwd=tmp_path,
    )  # fmt: skip
    assert single.returncode == 0, single.stderr
    assert "pass@" not in single.stdout and "Repeats:" not in single.stdout
    (single_dir,) = run_dirs(once).values()
    single_keys = {r.id: r.target.request_key for r in load_run(single_dir).records if r.target}

    results = tmp_path / "results"
    done = run_cli("run", str(spec), "--results", str(results), "--cache", cache, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Repeats: 5 per case, 6 cases; intervals resample cases" in out
    # pass@1 = (0+1+2+3+5+5)/30; pass@5 = 5/6 (every case but a passes once);
    # pass^5 = 2/6 (e and f pass every repeat).
    line = next(x for x in out.splitlines() if x.startswith("  pass@1 "))
    assert line.startswith("  pass@1 0.5333 (95% CI ")
    assert "; pass@5 0.8333 (95% CI " in line and "; pass^5 0.3333 (95% CI " in line
    assert line.count("n=6 cases") == 3 and "cluster-" in line
    assert "pass rate (score >= 1) 16/30 = 0.5333 (95% CI " in out
    assert "n=30, 6 cases)" in out

    dirs = run_dirs(results)
    run = load_run(dirs["x"])
    manifest = run.manifest
    assert manifest.repeats == 5 and manifest.samples == 30
    # Repeat 0 keeps its key: its answers came from the single-repeat run's cache.
    assert (manifest.target.cache_hits, manifest.target.calls) == (6, 24)
    keys = {(r.id, r.repeat): r.target.request_key for r in run.records if r.target}
    assert {i: keys[(i, 0)] for i in PASSES} == single_keys
    assert len(set(keys.values())) == 30  # repeats 1..4 are draws of their own
    figures = manifest.scores["p"]
    assert figures.pass_at_k[1] == 16 / 30 and figures.pass_at_k[5] == 5 / 6
    assert figures.pass_hat_k[5] == 2 / 6
    assert manifest.scores["exact"].pass_hat_k[5] == 1.0

    compared = run_cli("compare", str(dirs["x"]), str(dirs["y"]), "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    (p, _) = json.loads(compared.stdout)["scorers"]
    assert (p["n"], p["cases"], p["verdict"]) == (30, 6, "no winner")
    assert p["difference_b_minus_a"]["clusters"] == 6
    assert p["difference_b_minus_a"]["interval"]["method"].startswith("cluster-")
    text = run_cli("compare", str(dirs["x"]), str(dirs["y"]), cwd=tmp_path).stdout
    assert "on 30 samples of 6 cases (joined on sample id and repeat" in text

    report = tmp_path / "report.html"
    made = run_cli("report", str(dirs["x"]), "--output", str(report), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    html = report.read_text()
    assert "Repeats: pass@k and pass^k" in html
    assert "5 repeats of each of 6 cases" in html
    # Scorer p at k = 5: pass@5 5/6, pass^5 2/6, each with its interval over cases.
    assert '<td class="num">5</td>\n      <td class="num">0.833 <span class="ci">[' in html
    assert '<td class="num">0.333 <span class="ci">[' in html
    assert "(16/30, 6 cases)" in html
