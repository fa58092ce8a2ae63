"""`gradetrail labels import/export` and `gradetrail calibrate` through real runs on the
fake provider: labels attach to responses, survive a cached re-run, bad rows are named
with nothing written, and calibrate's figures equal the reference implementations'."""

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate
from sklearn.metrics import cohen_kappa_score

from gradetrail_lib.labels.store import labels_path, read_labels
from gradetrail_lib.results.runs import load_run
from tests.conftest import run_cli
from tests.support.eval_runs import multi_scorers, run_spec, start_server, write_dataset, write_spec

N = 80
KEYS = [
    "n_labeled",
    "confusion",
    "sensitivity",
    "specificity",
    "kappa",
    "judge_pass_rate",
    "corrected_pass_rate",
    "labels_needed",
]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    where = tmp_path_factory.mktemp("labels")
    server = start_server()
    try:
        base_url = f"{server.base_url}/v1"
        write_dataset(where / "data" / "add.jsonl", N)
        spec = write_spec(
            where / "add.yaml", base_url, ["fake-bad", "fake-good"], scorers=multi_scorers(base_url)
        )
        dirs = run_spec(spec, where)
        yield where, dirs["fake-bad"], dirs["fake-good"]
    finally:
        server.stop()


def human(sample: str) -> str:
    """The person's verdict: stricter than the judge, failing every fifth sample too."""
    i = int(sample[1:])
    return "fail" if i % 3 == 0 or i % 5 == 0 else "pass"


def write_labels(path: Path, ids: list[str], extra: str = "") -> Path:
    lines = ["id,repeat,label,note"] + [f"{i},0,{human(i)},read it" for i in ids]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def cli(*args: str, cwd: Path) -> tuple[int, str, str]:
    done = run_cli(*args, cwd=cwd, env={"GT_FAKE_KEY": "sk-fake-not-a-secret"})
    return done.returncode, done.stdout, done.stderr


def test_bad_rows_are_named_and_nothing_is_written(project: tuple[Path, Path, Path]) -> None:
    where, run_dir, _ = project
    bad = write_labels(
        where / "bad.csv", ["s001", "s002"], "s003,0,maybe,\ns999,0,pass,\ns004,x,pass,\n"
    )
    code, _, err = cli("labels", "import", str(bad), "--run", str(run_dir), cwd=where)
    assert code == 2
    assert f"{bad}:4: label: must be pass or fail" in err
    assert f"{bad}:6: repeat: not an integer" in err
    assert not labels_path(run_dir.parent).exists()
    # Rows that parse but name no sample of the run: also every one, nothing written.
    unknown = write_labels(where / "unknown.csv", ["s001", "s999"])
    code, _, err = cli("labels", "import", str(unknown), "--run", str(run_dir), cwd=where)
    assert code == 2 and f"{unknown}:3: id: the run has no sample 's999'" in err
    assert not labels_path(run_dir.parent).exists()


def test_calibrate_equals_the_reference_implementations(project: tuple[Path, Path, Path]) -> None:
    where, run_dir, _ = project
    # Selected labels first: they count in the confusion matrix, never in the correction.
    code, out, err = cli("calibrate", str(run_dir), cwd=where)
    assert code == 2 and "no label" in err
    picked = write_labels(where / "picked.csv", [f"s{i:03d}" for i in range(60, 80)])
    code, out, err = cli(
        "labels",
        "import",
        str(picked),
        "--run",
        str(run_dir),
        "--sampling",
        "selected",
        cwd=where,
    )
    assert code == 0, err
    code, out, err = cli("calibrate", str(run_dir), cwd=where)
    assert code == 0, err
    assert "corrected pass rate: not shown: 0 random labels (20 selected" in out

    randoms = [f"s{i:03d}" for i in range(0, 40)]
    path = write_labels(where / "random.jsonl", [])
    path.write_text(
        "".join(
            json.dumps({"id": i, "repeat": 0, "label": human(i), "scorer": "judge"}) + "\n"
            for i in randoms
        )
    )
    code, out, err = cli("labels", "import", str(path), "--run", str(run_dir), cwd=where)
    assert code == 0, err
    assert "40 random label(s)" in out
    code, out, err = cli("calibrate", str(run_dir), "--scorer", "judge", "--json", cwd=where)
    assert code == 0, err
    result = json.loads(out)["judge"]
    assert list(result) == KEYS

    records = {r.id: r for r in load_run(run_dir)}
    judged = {i: records[i].passes("judge") for i in records}
    labelled = randoms + [f"s{i:03d}" for i in range(60, 80)]
    truth = [human(i) == "pass" for i in labelled]
    verdicts = [judged[i] for i in labelled]
    assert result["n_labeled"] == 60
    assert result["kappa"]["value"] == pytest.approx(cohen_kappa_score(truth, verdicts))
    tp = sum(t and v for t, v in zip(truth, verdicts, strict=True))
    assert result["confusion"]["tp"] == tp
    assert result["judge_pass_rate"]["value"] == pytest.approx(sum(judged.values()) / N)

    y = np.array([human(i) == "pass" for i in randoms], float)
    yhat = np.array([judged[i] for i in randoms], float)
    yhat_u = np.array([judged[i] for i in sorted(records) if i not in randoms], float)
    point = float(np.ravel(ppi_mean_pointestimate(y, yhat, yhat_u))[0])
    low, high = (float(np.ravel(b)[0]) for b in ppi_mean_ci(y, yhat, yhat_u, alpha=0.05))
    corrected = result["corrected_pass_rate"]
    assert corrected["value"] == pytest.approx(point)
    assert (corrected["low"], corrected["high"]) == (pytest.approx(low), pytest.approx(high))
    assert corrected["method"] == "ppi++-mean"
    # The truth over all 80 (the person fails 1 in 3 and 1 in 5) sits in the interval;
    # the judge's raw figure (it fails only 1 in 3) is off.
    true_rate = sum(human(i) == "pass" for i in records) / N
    assert corrected["low"] <= true_rate <= corrected["high"]

    # Survives a cached re-run: the same responses, the same labels.
    again = run_spec(where / "add.yaml", where)["fake-bad"]
    code, out2, err = cli("calibrate", str(again), "--scorer", "judge", "--json", cwd=where)
    assert code == 0, err
    assert json.loads(out2) == json.loads(out)
    # ...whose summary says how the judge fared.
    code, summary, err = cli(
        "run", "add.yaml", "--model", "fake-bad", "--cache", str(where / "cache.duckdb"),
        "--results", str(where / "results"), cwd=where,
    )  # fmt: skip
    assert code == 0, err
    (line,) = [x for x in summary.splitlines() if x.startswith("Calibrated: judge:")]
    assert "60 human labels (40 random)" in line and "corrected pass rate" in line
    assert f"{result['kappa']['value']:.3f}" in line

    # Export: every sample, its label where it has one.
    exported = where / "export.csv"
    code, _, err = cli("labels", "export", "--run", str(run_dir), "-o", str(exported), cwd=where)
    assert code == 0, err
    rows = list(csv.DictReader(exported.open()))
    assert len(rows) == N and {r["id"] for r in rows} == set(records)
    by_id = {r["id"]: r for r in rows}
    assert by_id["s000"]["label"] == human("s000") and by_id["s041"]["label"] == ""
    assert by_id["s005"]["response"] == records["s005"].response
    # An exported file imports again (empty labels skipped), relabelling nothing new.
    before = len(read_labels(run_dir.parent))
    code, out, err = cli("labels", "import", str(exported), "--run", str(run_dir), cwd=where)
    assert code == 0, err
    assert len(read_labels(run_dir.parent)) == before


def test_gate_require_kappa_and_compare_corrected(project: tuple[Path, Path, Path]) -> None:
    where, bad_dir, good_dir = project
    gate = ["gate", str(good_dir), "--baseline", str(good_dir), "--scorer", "judge"]
    randoms = [f"s{i:03d}" for i in range(0, 40)]
    labels = write_labels(where / "good.csv", randoms)
    code, out, err = cli("labels", "import", str(labels), "--run", str(good_dir), cwd=where)
    assert code == 0, err
    code, out, err = cli("calibrate", str(good_dir), "--scorer", "judge", "--json", cwd=where)
    assert code == 0, err
    kappa = json.loads(out)["judge"]["kappa"]["value"]
    code, out, err = cli(*gate, "--require-kappa", f"{kappa + 0.01:.4f}", cwd=where)
    assert code == 2 and "not gated: judge scorer 'judge' agrees with people at kappa" in err
    # With `--baseline previous` and no earlier run, the judge is still what is refused:
    # its kappa is the candidate's alone, checked before any baseline is looked for.
    previous = ["gate", str(good_dir), "--baseline", "previous", "--scorer", "judge"]
    code, out, err = cli(*previous, "--require-kappa", f"{kappa + 0.01:.4f}", cwd=where)
    assert code == 2 and "not gated: judge scorer 'judge' agrees with people at kappa" in err
    assert "--baseline previous" not in err
    code, out, err = cli(*gate, "--require-kappa", f"{kappa - 0.01:.4f}", cwd=where)
    assert code == 0, err
    # A scorer that is no judge has nothing to check.
    code, out, err = cli(
        "gate", str(good_dir), "--baseline", str(good_dir), "--require-kappa", "0.99", cwd=where
    )
    assert code == 0, err

    code, out, err = cli("compare", str(bad_dir), str(good_dir), "--corrected", "--json", cwd=where)
    assert code == 0, err
    (corrected,) = json.loads(out)["corrected"]
    rates = []
    for run_dir in (bad_dir, good_dir):
        code, single, err = cli("calibrate", str(run_dir), "--scorer", "judge", "--json", cwd=where)
        rates.append(json.loads(single)["judge"]["corrected_pass_rate"])
    assert corrected["a"] == rates[0] and corrected["b"] == rates[1]
    assert corrected["difference"]["value"] == pytest.approx(rates[1]["value"] - rates[0]["value"])
    assert corrected["difference"]["low"] < corrected["difference"]["value"]
    code, out, err = cli("compare", str(bad_dir), str(good_dir), "--corrected", cwd=where)
    assert code == 0 and "Corrected pass rate, judge judge" in out and "B - A: " in out


def test_report_and_viewer_show_the_calibration(project: tuple[Path, Path, Path]) -> None:
    """Side by side in the report's run section and on the viewer's run page: kappa,
    sensitivity, specificity, the judge's and the corrected pass rate, as calibrate has
    them (labels from the tests above, or attached here when run alone)."""
    import html

    import httpx

    from gradetrail_lib.analysis.calibration import calibrate_run
    from tests.support.viewer_server import Background

    where, bad_dir, _ = project
    if not calibrate_run(bad_dir):
        labels = write_labels(where / "alone.csv", [f"s{i:03d}" for i in range(40)])
        assert cli("labels", "import", str(labels), "--run", str(bad_dir), cwd=where)[0] == 0
    (expected,) = calibrate_run(bad_dir)
    # Each figure with its method under it, and its warning as a footnote.
    figures = [
        part
        for f in (
            expected.kappa, expected.sensitivity, expected.specificity, expected.judge_pass_rate,
        )
        for part in (f.figure(), f.method, f.warning or "")
    ]  # fmt: skip
    report = where / "report.html"
    code, _, err = cli("report", str(bad_dir), "--output", str(report), cwd=where)
    assert code == 0, err
    text = html.unescape(report.read_text())
    assert "Judges against human labels" in text
    assert all(f in text for f in figures)
    with Background(bad_dir.parent) as url:
        page = httpx.get(f"{url}/run/{bad_dir.name}", timeout=30)
    assert page.status_code == 200
    shown = html.unescape(page.text)
    assert 'class="calibration"' in shown and all(f in shown for f in figures)


def test_a_malformed_labels_file_is_named_by_line(
    project: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """calibrate, export and import refuse a damaged labels file, naming the line; import
    adds nothing to it."""
    import shutil

    where, bad_dir, _ = project
    root = tmp_path / "results"
    shutil.copytree(bad_dir, root / bad_dir.name)
    run_dir = root / bad_dir.name
    labels_path(root).write_text('{"spec": "add"}\n')
    code, _, err = cli("calibrate", str(run_dir), cwd=where)
    assert code == 2 and f"{labels_path(root)}:1: " in err
    good = write_labels(tmp_path / "ok.csv", ["s001"])
    code, _, err = cli("labels", "import", str(good), "--run", str(run_dir), cwd=where)
    assert code == 2 and f"{labels_path(root)}:1: " in err
    assert labels_path(root).read_text() == '{"spec": "add"}\n'
    code, _, err = cli("labels", "export", "--run", str(run_dir), cwd=where)
    assert code == 2 and f"{labels_path(root)}:1: " in err
