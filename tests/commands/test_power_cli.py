"""How many samples a question needs (`plan --detect`, `samples_needed`) and the minimum
detectable effect that `compare`, `gate` and the viewer print when no winner is named."""

import inspect
import json
import subprocess
from pathlib import Path

import pytest

from gradetrail_lib import SampleSize, cli, samples_needed
from gradetrail_lib.analysis.stats.paired import compare
from gradetrail_lib.analysis.stats.power import (
    cases_needed,
    minimum_detectable_effect,
    pairs_needed,
    se_detectable_effect,
)
from gradetrail_lib.engine.rundir import write_run_dir
from gradetrail_lib.history.entries import FileHistory, record_run
from gradetrail_lib.results.runs import load_run
from gradetrail_lib.results.trace import TraceRecord
from gradetrail_lib.spec.identity import records_fingerprint
from gradetrail_lib.spec.spec import load_spec
from tests.support.traces import manifest, record
from tests.support.viewer_runs import ViewerRuns, make_runs
from tests.support.viewer_server import Background


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    """Real runs of spec `qa` (models a and b on 24 samples, then a on 10 of them), with
    their history."""
    return make_runs(tmp_path_factory.mktemp("power"))


def qa_spec(runs: ViewerRuns) -> Path:
    return runs.root.parent / "specs" / "qa.yaml"


def main(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """`gradetrail ARGS` in-process, shaped like a subprocess's result."""
    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse rejecting an argument
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


def test_plan_detect_without_history_assumes_the_default_discordance(
    runs: ViewerRuns, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "results"
    done = main(capsys, "plan", str(qa_spec(runs)), "--detect", "0.03", "--results", str(empty))
    assert done.returncode == 0, done.stderr
    # psi = 0.2 assumed, delta = 0.03: Connor 1,742, exact McNemar 1,800.
    assert "1,800 samples a side to detect a difference of 0.03" in done.stdout
    assert "Connor's n 1,742, exact McNemar 1,800 pairs; discordance 0.2, assumed" in done.stdout
    assert "so it is assumed" in done.stdout
    assert not empty.exists()  # plan reads; it writes nothing

    as_json = main(
        capsys, "plan", str(qa_spec(runs)), "--detect", "0.03", "--results", str(empty),
        "--json", "--repeats", "5", "--power", "0.9",
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    one, five = json.loads(as_json.stdout)["samples_needed"]
    connor, exact = pairs_needed(0.03, 0.2, power=0.9)
    assert one["pairs"] == one["samples"] == exact and one["connor_pairs"] == connor
    assert one["discordance_source"] == "assumed" and one["correlation"] is None
    # Five repeats at the assumed rho = 0.5: exact x (1 + 4 x 0.5) / 5 cases of 5.
    assert five["repeats"] == 5 and five["correlation"] == 0.5
    assert five["correlation_source"] == "assumed"
    assert five["cases"] == cases_needed(exact, 5, 0.5) == -(-exact * 3 // 5)
    assert five["samples"] == five["cases"] * 5


def test_plan_detect_measures_the_discordance_of_the_specs_last_two_runs(
    runs: ViewerRuns, capsys: pytest.CaptureFixture[str]
) -> None:
    done = main(
        capsys, "plan", str(qa_spec(runs)), "--detect", "0.1", "--results", str(runs.root),
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (size,) = json.loads(done.stdout)["samples_needed"]
    # The last run (model a on 10 samples) pairs with neither earlier run: it is passed
    # over, and the two before it (a and b on the same 24 samples) are paired.
    c = compare(load_run(runs.root / runs.a), load_run(runs.root / runs.b), "exact")
    discordance = (c.a_only + c.b_only) / c.n
    assert 0 < discordance < 1
    assert size["discordance_source"] == "observed"
    assert size["discordance"] == pytest.approx(discordance)
    assert sorted(size["observed_runs"]) == sorted([runs.a, runs.b])
    assert size["pairs"] == pairs_needed(0.1, discordance)[1]
    assert any(runs.small in note and "passed over" in note for note in size["notes"])

    text = main(capsys, "plan", str(qa_spec(runs)), "--detect", "0.1", "--results", str(runs.root))
    assert f"discordance {discordance:.3g}, observed between" in text.stdout
    assert "assumed" not in text.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--detect", "0"], "argument --detect: must be strictly between 0 and 1, not 0"),
        (["--detect", "1"], "argument --detect: must be strictly between 0 and 1, not 1"),
        (["--detect", "-0.1"], "argument --detect: must be strictly between 0 and 1"),
        (["--detect", "0.03", "--power", "1.5"], "argument --power: must be strictly between"),
        (["--detect", "0.03", "--power", "0"], "argument --power: must be strictly between"),
        (["--detect", "x"], "argument --detect: not a number: 'x'"),
        (["--detect", "0.03", "--repeats", "0"], "--repeats: must be at least 1"),
    ],
)
def test_plan_detect_rejects_bad_values_writing_nothing(
    runs: ViewerRuns,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    results = tmp_path / "results"
    done = main(capsys, "plan", str(qa_spec(runs)), "--results", str(results), *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == "" and not results.exists()


def test_samples_needed_python_api(runs: ViewerRuns, tmp_path: Path) -> None:
    (size,) = samples_needed(qa_spec(runs), 0.03, results=tmp_path)
    assert isinstance(size, SampleSize)
    assert (size.connor_pairs, size.pairs, size.samples) == (1742, 1800, 1800)
    assert size.discordance_source == "assumed" and size.discordance == 0.2
    with pytest.raises(ValueError, match="difference to detect"):
        samples_needed(qa_spec(runs), 1.0)
    with pytest.raises(ValueError, match="power"):
        samples_needed(qa_spec(runs), 0.03, power=1.2)
    # An observed discordance below the difference cannot hold it: the difference is used.
    (wide,) = samples_needed(qa_spec(runs), 0.5, results=runs.root)
    assert wide.discordance == 0.5 and any("below the difference" in n for n in wide.notes)


def test_samples_needed_keeps_its_arguments() -> None:
    """The public signature: the spec and the difference, the rest by keyword."""
    parameters = inspect.signature(samples_needed).parameters.values()
    assert [(p.name, p.kind.name, p.default) for p in parameters] == [
        ("spec", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty),
        ("detect", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty),
        ("power", "KEYWORD_ONLY", 0.8),
        ("confidence", "KEYWORD_ONLY", 0.95),
        ("results", "KEYWORD_ONLY", None),
        ("repeats", "KEYWORD_ONLY", None),
        ("history", "KEYWORD_ONLY", None),
    ]


def test_samples_needed_reads_the_history_it_is_given(runs: ViewerRuns, tmp_path: Path) -> None:
    """`history` says which runs there were (by default the file under `results`); the
    run directories are read under `results`. A Spec in memory or a path and the text of
    one give the same answer."""
    (own,) = samples_needed(qa_spec(runs), 0.1, results=runs.root)
    assert own.discordance_source == "observed" and own.observed_runs is not None
    (given,) = samples_needed(
        qa_spec(runs), 0.1, results=str(runs.root), history=FileHistory(runs.root)
    )
    spec = load_spec(qa_spec(runs)).spec
    (in_memory,) = samples_needed(spec, 0.1, results=runs.root)
    assert given == own == in_memory
    (elsewhere,) = samples_needed(
        qa_spec(runs), 0.1, results=runs.root, history=FileHistory(tmp_path)
    )
    assert elsewhere.discordance_source == "assumed" and elsewhere.observed_runs is None
    assert elsewhere.discordance == 0.2 and elsewhere.notes == ()
    # `repeats` asks for a second size at that count (the spec has none).
    one, four = samples_needed(qa_spec(runs), 0.1, results=runs.root, repeats=4)
    assert one == own and four.repeats == 4 and four.observed_runs == own.observed_runs
    assert four.correlation == 0.5 and four.correlation_source == "assumed"
    with pytest.raises(ValueError, match="repeats must be at least 1, not 0"):
        samples_needed(qa_spec(runs), 0.1, repeats=0)


def _repeated_runs(root: Path, same_within_case: bool) -> None:
    """Two runs of spec `rep` in the history, 40 cases x 3 repeats; B flips some cases'
    outcomes: on every repeat (`same_within_case`) or on one repeat only."""
    for number, flip in enumerate([False, True]):
        records: list[TraceRecord] = []
        for case in range(40):
            for repeat in range(3):
                score = float(case % 2)
                flipped = flip and case % 5 == 0 and (same_within_case or repeat == case % 3)
                records.append(record(f"c{case}", 1.0 - score if flipped else score, repeat=repeat))
        m = manifest(spec_name="rep", identity=str(number) * 64).model_copy(
            update={"repeats": 3, "finished_at": f"2026-01-01T00:00:0{number + 1}+00:00"}
        )
        run_dir = write_run_dir(root, records, m)
        record_run(root, m, records, run_dir, records_fingerprint(load_run(run_dir)))


def test_the_intra_case_correlation_is_measured_where_repeats_exist(tmp_path: Path) -> None:
    spec = tmp_path / "rep.yaml"
    spec.write_text(
        "name: rep\ndataset: {path: d.jsonl}\nprompt: '{{ q }}'\nrepeats: 3\n"
        "model: {provider: scripted, name: s, answer_field: a}\n"
        "scorer: {type: exact, field: a}\n"
    )
    agree = tmp_path / "agree"
    _repeated_runs(agree, same_within_case=True)
    one, three = samples_needed(spec, 0.1, results=agree)
    # 8 of 40 cases flipped on all 3 repeats: discordance 0.2, repeats perfectly correlated
    # (rho = 1), so repeats add nothing: as many cases as independent pairs.
    assert one.discordance == pytest.approx(0.2) and one.discordance_source == "observed"
    assert three.correlation == 1.0 and three.correlation_source == "observed"
    assert three.cases == one.pairs

    apart = tmp_path / "apart"
    _repeated_runs(apart, same_within_case=False)
    _, three = samples_needed(spec, 0.05, results=apart)
    # One repeat in three flipped: the repeats hardly agree, rho is estimated near 0 and
    # each repeat counts almost as an independent pair.
    assert three.correlation is not None and 0 <= three.correlation < 0.05
    assert three.correlation_source == "observed"
    assert three.cases == cases_needed(three.pairs, 3, three.correlation)
    assert three.cases < -(-three.pairs // 2)


def _no_winner_runs(root: Path) -> tuple[Path, Path]:
    """The issue's example: 50 pairs, none won only by A, 4 won only by B."""
    a = [1.0] * 23 + [0.0] * 4 + [0.0] * 23
    b = [1.0] * 23 + [1.0] * 4 + [0.0] * 23
    dirs = []
    for name, scores in (("a", a), ("b", b)):
        records = [record(f"s{i:02d}", s) for i, s in enumerate(scores)]
        # One identity (a report covers one), two models: two directories.
        dirs.append(write_run_dir(root, records, manifest(model=name)))
    return dirs[0], dirs[1]


def test_compare_and_gate_print_the_minimum_detectable_effect_when_no_winner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _no_winner_runs(tmp_path)
    mde = minimum_detectable_effect(50, 4 / 50)
    assert mde is not None
    done = main(capsys, "compare", str(a), str(b))
    assert done.returncode == 0, done.stderr
    assert "Verdict: no winner" in done.stdout
    assert (
        f"Minimum detectable effect: {mde:.3f} (the smallest difference this comparison "
        "could detect with 80% power; connor-exact, alpha = 0.05 two-sided)"
    ) in done.stdout

    as_json = main(capsys, "compare", str(a), str(b), "--json")
    (result,) = json.loads(as_json.stdout)["scorers"]
    assert result["minimum_detectable_effect"] == {
        "value": mde,
        "method": "connor-exact",
        "power": 0.8,
    }

    # B as the baseline, A as a candidate 0.08 worse: no regression shown, and the gate
    # says how large a drop it could have shown.
    gated = main(capsys, "gate", str(a), "--baseline", str(b))
    assert gated.returncode == 0, gated.stdout
    assert f"Minimum detectable effect: {mde:.3f}" in gated.stdout

    # A clear winner prints none.
    strong = [record(f"s{i:02d}", 1.0 if i < 40 else 0.0) for i in range(50)]
    winner = write_run_dir(tmp_path, strong, manifest(model="w", identity="w" * 64))
    clear = main(capsys, "compare", str(a), str(winner))
    assert "Verdict: B" in clear.stdout and "detectable" not in clear.stdout


def test_continuous_scores_take_2_8_standard_errors(tmp_path: Path) -> None:
    a = [record(f"s{i:02d}", 0.5) for i in range(30)]
    b = [record(f"s{i:02d}", 0.5 + (0.1 if i % 2 else -0.1)) for i in range(30)]
    c = compare(a, b, "s")
    assert c.verdict == "no winner" and c.mde_method == "se"
    # Differences of +-0.1, alternating: sd = 0.1 * sqrt(30 / 29), SE = sd / sqrt(30).
    se = 0.1 * (30 / 29) ** 0.5 / 30**0.5
    assert c.mde == pytest.approx(se_detectable_effect(se))
    assert c.mde == pytest.approx(2.8 * se, rel=1e-3)
    assert c.detectable(0.2) is True and c.detectable(0.01) is False


def test_viewer_diff_page_shows_the_minimum_detectable_effect(tmp_path: Path) -> None:
    import httpx

    a, b = _no_winner_runs(tmp_path)
    expected = compare(load_run(a), load_run(b), "s", labels=("spec/a", "spec/b")).mde_text()
    assert expected is not None
    with Background(tmp_path) as url:
        page = httpx.get(f"{url}/diff/{a.name}/{b.name}", timeout=30).text
    assert f'id="mde">{expected}<' in page


def test_report_shows_the_minimum_detectable_effect_of_a_no_winner_pair(tmp_path: Path) -> None:
    from html import unescape

    from gradetrail_lib.report.html import render_report

    a, b = _no_winner_runs(tmp_path)
    runs = [load_run(a), load_run(b)]
    expected = compare(runs[0], runs[1], "s").mde_text()
    assert expected is not None
    assert f'class="notes mde">{expected}<' in unescape(render_report(runs))
