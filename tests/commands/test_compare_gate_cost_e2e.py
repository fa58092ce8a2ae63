"""compare, gate and cost on run directories written by a real `gradetrail run` against
the loopback fake server. The headline checks run the CLI as a CI job would, in a
subprocess; the rest call `cli.main` in-process, which is the same code without
paying a second of interpreter start-up and imports each time."""

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradetrail_lib import cli
from gradetrail_lib.analysis.cost import format_cost, reprice
from gradetrail_lib.providers.pricing import Price, load_prices
from gradetrail_lib.results.runs import load_run
from gradetrail_lib.results.trace import ModelCall
from tests.analysis.test_stats_paired import exact_mcnemar_by_hand
from tests.conftest import run_cli
from tests.support.eval_runs import (
    JUDGE_MODEL,
    multi_scorers,
    run_spec,
    start_server,
    write_dataset,
    write_spec,
)
from tests.support.traces import call, manifest, record

N = 40
MODELS = ["fake-good", "fake-bad", "fake-close", "claude-haiku-4-5"]
MULTI_N = 12
MULTI_MODELS = ["fake-good", "fake-bad", "fake-wordy", "claude-haiku-4-5"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Run directories by name: the models of one spec, plus the good model under a
    different scorer and on a smaller dataset (each in a spec directory of its own);
    `multi-*`: models of a spec with four scorers (numeric, regex, Python, a judge), and
    `changed-bad`: a spec with the first two of them, its regex changed."""
    root = tmp_path_factory.mktemp("runs")
    server = start_server()
    try:
        base_url = f"{server.base_url}/v1"
        main = root / "main"
        write_dataset(main / "data" / "add.jsonl", N)
        dirs = run_spec(write_spec(main / "add.yaml", base_url, MODELS), main)

        regex = root / "regex"
        write_dataset(regex / "data" / "add.jsonl", N)
        spec = write_spec(
            regex / "add.yaml",
            base_url,
            ["fake-good"],
            scorer="{type: regex, pattern: 'Answer: {{ answer }}$'}",
        )
        dirs["regex-good"] = run_spec(spec, regex)["fake-good"]

        small = root / "small"
        write_dataset(small / "data" / "add.jsonl", N - 3)
        dirs["small-good"] = run_spec(
            write_spec(small / "add.yaml", base_url, ["fake-good"]), small
        )["fake-good"]

        multi = root / "multi"
        write_dataset(multi / "data" / "add.jsonl", MULTI_N)
        spec = write_spec(
            multi / "add.yaml", base_url, MULTI_MODELS, scorers=multi_scorers(base_url)
        )
        dirs.update({f"multi-{m}": d for m, d in run_spec(spec, multi).items()})

        changed = root / "changed"
        write_dataset(changed / "data" / "add.jsonl", MULTI_N)
        two = multi_scorers(base_url, regex="Answer: {{ answer }}").split("\n  - {name: short")[0]
        spec = write_spec(changed / "add.yaml", base_url, ["fake-bad"], scorers=two)
        dirs["changed-bad"] = run_spec(spec, changed)["fake-bad"]
        yield dirs
    finally:
        server.stop()


def main(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """`gradetrail ARGS` in-process, shaped like run_cli's result."""
    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse rejecting an argument
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


def test_compare_prints_a_paired_verdict(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = run_cli("compare", str(runs["fake-good"]), str(runs["fake-bad"]), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # fake-bad is wrong where a % 3 == 0: 14 of a = 0..39.
    assert "Paired comparison of A: add/fake-good and B: add/fake-bad on 40 samples" in out
    assert "Scorer score (primary)" in out  # the one scorer of a `scorer:` spec
    assert "both pass 26, both fail 0, A only 14, B only 0" in out
    assert f"Exact McNemar p: {exact_mcnemar_by_hand(14, 0):.4g}" in out
    assert "Verdict: A (add/fake-good is better)" in out
    assert "1.000 [0.912, 1.000] (n=40)" in out  # Wilson for 40/40
    assert "Difference B - A (mean score, unscored as 0): -0.350" in out
    # The mean over scored samples with its n, as the run's summary gives it.
    assert re.search(r"mean score \(of scored\)\s+1\.0000 \(n=40\)\s+0\.6500 \(n=40\)", out)

    as_json = main(capsys, "compare", str(runs["fake-good"]), str(runs["fake-close"]), "--json")
    assert as_json.returncode == 0, as_json.stderr
    (result,) = json.loads(as_json.stdout)["scorers"]
    assert result["scorer"] == "score" and result["compared"] is True
    assert result["verdict"] == "no winner"
    assert result["counts"] == {"both_pass": 39, "both_fail": 0, "a_only": 1, "b_only": 0}
    assert result["mcnemar_p"] == 1.0
    assert result["n"] == 40 and result["pass_rate_b"]["successes"] == 39
    interval = result["difference_b_minus_a"]["interval"]
    assert interval["low"] < 0 <= interval["high"]


def test_compare_options(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    done = main(
        capsys,
        "compare",
        str(runs["fake-good"]),
        str(runs["fake-bad"]),
        "--json",
        "--confidence",
        "0.9",
        "--method",
        "exact",
    )
    assert done.returncode == 0, done.stderr
    rate = json.loads(done.stdout)["scorers"][0]["pass_rate_a"]["interval"]
    # Clopper-Pearson for 40/40 at 90%: lower = 0.05^(1/40).
    assert rate["method"] == "exact" and rate["confidence"] == 0.9
    assert rate["low"] == pytest.approx(0.05 ** (1 / 40))
    bad = main(
        capsys, "compare", str(runs["fake-good"]), str(runs["fake-bad"]), "--confidence", "9"
    )
    assert bad.returncode == 2 and "strictly between 0 and 1" in bad.stderr


def test_gate_exit_codes_both_ways(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad, close = (str(runs[m]) for m in ("fake-good", "fake-bad", "fake-close"))

    regression = run_cli("gate", bad, "--baseline", good, cwd=tmp_path)
    assert regression.returncode == 1, regression.stdout + regression.stderr
    paragraph = regression.stdout.strip()
    assert paragraph.startswith("FAIL:") and "\n" not in paragraph
    assert "0.6500 against the baseline's 1.0000 on 40 paired samples" in paragraph
    assert "the drop of 0.3500 exceeds the allowed 0.02 and the interval excludes zero" in paragraph

    improvement = run_cli("gate", good, "--baseline", bad, cwd=tmp_path)
    assert improvement.returncode == 0, improvement.stdout + improvement.stderr
    assert improvement.stdout.startswith("PASS:")
    assert "not worse than the baseline" in improvement.stdout

    # 1 of 40 worse: a drop of 0.025 > 0.02, but one sample is not evidence.
    noise = run_cli("gate", close, "--baseline", good, cwd=tmp_path)
    assert noise.returncode == 0, noise.stdout + noise.stderr
    assert "exceeds the allowed 0.02, but the interval contains zero" in noise.stdout

    # A large regression under a tolerance larger than it passes.
    tolerant = main(capsys, "gate", bad, "--baseline", good, "--threshold", "0.5")
    assert tolerant.returncode == 0 and "not worse by more than the allowed 0.5" in tolerant.stdout

    as_json = main(capsys, "gate", bad, "--baseline", good, "--json")
    assert as_json.returncode == 1
    decision = json.loads(as_json.stdout)
    assert decision["passed"] is False and decision["comparison"]["counts"]["a_only"] == 14


def test_compare_refuses_a_different_scorer_unless_forced(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = str(runs["fake-good"]), str(runs["regex-good"])
    refused = run_cli("compare", a, b, cwd=tmp_path)
    assert refused.returncode == 2
    assert "refusing to compare: scorer 'score' hash differs" in refused.stderr
    assert "dataset hash" not in refused.stderr, "only what differs is named"
    assert "--force" in refused.stderr
    gated = run_cli("gate", b, "--baseline", a, cwd=tmp_path)
    assert gated.returncode == 2, "a refusal must not look like a regression (exit 1)"

    forced = main(capsys, "compare", a, b, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (
        "Note: compared despite a mismatch (forced): scorer 'score' hash differs" in forced.stdout
    )
    assert "Verdict: no winner" in forced.stdout


def test_compare_rejects_different_samples(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = str(runs["fake-good"]), str(runs["small-good"])
    refused = main(capsys, "compare", a, b)
    assert refused.returncode == 2 and "dataset hash differs" in refused.stderr
    forced = main(capsys, "compare", a, b, "--force")
    assert forced.returncode == 2
    # Same spec and model on both sides: the labels fall back to the directory names.
    assert "3 only in A [add-fake-good-" in forced.stderr and "(s037, s038, s039)" in forced.stderr
    assert "0 only in B" in forced.stderr and "37 are shared" in forced.stderr


def test_cost_reprices_every_call(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    priced, unpriced = runs["claude-haiku-4-5"], runs["fake-good"]
    records = load_run(priced).records
    tokens_in = sum(r.target.input_tokens or 0 for r in records if r.target)
    tokens_out = sum(r.target.output_tokens or 0 for r in records if r.target)
    price = load_prices("v1").price("anthropic", "claude-haiku-4-5")
    assert price is not None
    expected = (tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok) / 1e6
    assert expected > 0

    done = run_cli("cost", str(priced), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    assert model["role"] == "target" and model["cache_hits"] == 0
    assert model["cost_usd"] == pytest.approx(expected)
    assert model["cost_per_passed_usd"] == pytest.approx(expected / N)
    assert (model["input_tokens"], model["output_tokens"]) == (tokens_in, tokens_out)

    both = main(capsys, "cost", str(priced), str(unpriced))
    assert both.returncode == 0, both.stderr
    assert f"${expected:.6f}" in both.stdout
    assert "Total: unknown" in both.stdout
    assert "Unknown price in pricing v2: openai_compatible/fake-good" in both.stdout

    missing = main(capsys, "cost", str(priced), "--pricing-version", "v0")
    assert missing.returncode == 2 and "no pricing data for version 'v0'" in missing.stderr


@pytest.mark.parametrize("command", ["compare", "gate", "cost", "report"])
def test_bad_run_directory_is_a_clear_error(
    runs: dict[str, Path], tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    good = str(runs["fake-good"])
    empty = tmp_path / "empty"
    empty.mkdir()
    for bad in (tmp_path / "nope", empty):
        args = {
            "compare": [good, str(bad)],
            "gate": [str(bad), "--baseline", good],
            "cost": [str(bad)],
            "report": [str(bad)],
        }[command]
        done = main(capsys, command, *args)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"error: {bad}: not a run directory" in done.stderr
        assert "Traceback" not in done.stderr

    def args_for(run: Path) -> list[str]:
        return {"compare": [good, str(run)], "gate": [str(run), "--baseline", good]}.get(
            command, [str(run)]
        )

    # A results file with a bad second line, next to a good manifest.
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(runs["fake-good"] / "manifest.json", broken / "manifest.json")
    first = (runs["fake-good"] / "results.jsonl").read_text().splitlines()[0]
    (broken / "results.jsonl").write_text(f"{first}\n{{oops\n")
    done = main(capsys, command, *args_for(broken))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{broken / 'results.jsonl'}:2: Invalid JSON" in done.stderr
    assert "Traceback" not in done.stderr
    # A manifest of an older format: a clear message, not a field-by-field complaint.
    old = tmp_path / "old"
    old.mkdir()
    (old / "manifest.json").write_text("{}")
    (old / "results.jsonl").write_text('{"id": "s000", "outcome": "scored", "score": 1}\n')
    done = main(capsys, command, *args_for(old))
    assert done.returncode == 2
    assert f"{old / 'manifest.json'}: written by an older gradetrail" in done.stderr


MULTI = ["num", "rx", "short", "judge"]


def row_of(out: str, title: str) -> str:
    """The line of compare's table that starts with a scorer's title."""
    (line,) = [x for x in out.splitlines() if x.startswith(f"{title}  ")]
    return line


def test_compare_shows_a_row_per_scorer(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # fake-wordy is right in a sentence: the numeric scorer (primary) and the judge pass
    # it, the regex and the length check (Python) fail it on every sample.
    good, wordy = str(runs["multi-fake-good"]), str(runs["multi-fake-wordy"])
    done = run_cli("compare", good, wordy, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"A: add/fake-good and B: add/fake-wordy on {MULTI_N} samples" in out
    assert "no winner" in row_of(out, "num (primary)")
    for name in ("rx", "short"):
        line = row_of(out, name)
        assert "1.000 [0.758, 1.000] (n=12)" in line and "0.000 [0.000, 0.242] (n=12)" in line
        assert "A (add/fake-good)" in line and "-1.000" in line
    assert "no winner" in row_of(out, "judge")
    # Then each scorer in full, in the spec's order (the primary first).
    sections = [line for line in out.splitlines() if line.startswith("Scorer ")]
    assert sections == ["Scorer num (primary)", "Scorer rx", "Scorer short", "Scorer judge"]
    assert f"Exact McNemar p: {exact_mcnemar_by_hand(12, 0):.4g} (12 discordant pairs)" in out

    as_json = main(capsys, "compare", good, wordy, "--json")
    assert as_json.returncode == 0, as_json.stderr
    payload = json.loads(as_json.stdout)
    results = payload["scorers"]
    assert [r["scorer"] for r in results] == MULTI
    assert [r["role"] for r in results] == ["primary", "secondary", "secondary", "secondary"]
    assert all(r["compared"] for r in results)
    assert [r["verdict"] for r in results] == ["no winner", "A", "A", "no winner"]
    assert [r["counts"]["a_only"] for r in results] == [0, 12, 12, 0]
    assert payload["a"] == "add/fake-good" and payload["b"] == "add/fake-wordy"

    one = main(capsys, "compare", good, wordy, "--json", "--scorer", "short")
    assert one.returncode == 0, one.stderr
    (only,) = json.loads(one.stdout)["scorers"]
    assert only["scorer"] == "short" and only["pass_rate_b"]["successes"] == 0
    text = main(capsys, "compare", good, wordy, "--scorer", "judge")
    assert [x for x in text.stdout.splitlines() if x.startswith("Scorer ")] == ["Scorer judge"]

    unknown = main(capsys, "compare", good, wordy, "--scorer", "nope")
    assert unknown.returncode == 2
    assert "no scorer 'nope' in either run (scorers: num, rx, short, judge)" in unknown.stderr


def test_compare_reports_scorers_it_cannot_compare(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """changed-bad has num as it was, rx with another pattern, and neither short nor the
    judge: num is compared, rx refused (its hash differs), short and judge not paired."""
    good, changed = str(runs["multi-fake-good"]), str(runs["changed-bad"])
    done = main(capsys, "compare", good, changed)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # 12 pairs, 4 won only by A: the Newcombe interval excludes zero, McNemar (p = 0.125)
    # does not reject, so no winner is named and one line says why.
    assert row_of(out, "num (primary)").endswith("no winner")
    assert "exact McNemar test does not reject (p = 0.125 >= 0.05)" in out
    for name in ("rx", "short", "judge"):
        assert "not compared" in row_of(out, name)
    assert "Not compared: rx: refusing to compare: scorer 'rx' hash differs" in out
    assert "Not compared: short: scorer 'short' is only in A [add/fake-good]" in out
    assert "Not compared: judge: scorer 'judge' is only in A [add/fake-good]" in out
    assert [x for x in out.splitlines() if x.startswith("Scorer ")] == ["Scorer num (primary)"]

    results = json.loads(main(capsys, "compare", good, changed, "--json").stdout)["scorers"]
    assert [(r["scorer"], r["compared"]) for r in results] == [
        ("num", True), ("rx", False), ("short", False), ("judge", False),
    ]  # fmt: skip
    assert "hash differs" in results[1]["reason"] and "only in A" in results[2]["reason"]

    # Asked for by name, a scorer that cannot be compared is an error (exit 2).
    refused = main(capsys, "compare", good, changed, "--scorer", "rx")
    assert refused.returncode == 2 and "scorer 'rx' hash differs" in refused.stderr
    forced = main(capsys, "compare", good, changed, "--scorer", "rx", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "Note: compared despite a mismatch (forced): scorer 'rx' hash differs" in forced.stdout
    lacking = main(capsys, "compare", good, changed, "--scorer", "judge", "--force")
    assert lacking.returncode == 2
    assert "scorer 'judge' is only in A [add/fake-good]" in lacking.stderr

    # The gate refuses (exit 2, not 1) when a gated scorer cannot be compared.
    gated = main(capsys, "gate", changed, "--baseline", good, "--all-scorers")
    assert gated.returncode == 2 and "scorer 'rx' hash differs" in gated.stderr
    primary = main(capsys, "gate", changed, "--baseline", good)
    assert primary.returncode in (0, 1) and "scorer 'num' (primary)" in primary.stdout
    forced_gate = main(capsys, "gate", changed, "--baseline", good, "--all-scorers", "--force")
    assert forced_gate.returncode in (0, 1), forced_gate.stderr
    assert "Not gated: scorer 'short' is only in the baseline [add/fake-good]" in forced_gate.stdout
    assert "gated scorers" in forced_gate.stdout.splitlines()[-1]


def test_gate_on_a_non_primary_scorer_and_on_all(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, wordy = str(runs["multi-fake-good"]), str(runs["multi-fake-wordy"])
    # The primary scorer (numeric) passes fake-wordy: by default the gate passes.
    default = run_cli("gate", wordy, "--baseline", good, cwd=tmp_path)
    assert default.returncode == 0, default.stdout + default.stderr
    assert default.stdout.startswith("PASS: scorer 'num' (primary): ")
    assert "not worse than the baseline" in default.stdout

    # On the regex scorer it regresses on every sample.
    on_rx = run_cli("gate", wordy, "--baseline", good, "--scorer", "rx", cwd=tmp_path)
    assert on_rx.returncode == 1, on_rx.stdout + on_rx.stderr
    paragraph = on_rx.stdout.strip()
    assert paragraph.startswith("FAIL: scorer 'rx': ") and "\n" not in paragraph
    assert "0.0000 against the baseline's 1.0000 on 12 paired samples" in paragraph
    assert "baseline only 12, candidate only 0" in paragraph

    on_judge = main(capsys, "gate", wordy, "--baseline", good, "--scorer", "judge")
    assert on_judge.returncode == 0 and on_judge.stdout.startswith("PASS: scorer 'judge': ")

    # --all-scorers: each shared scorer gated and explained; any regression fails.
    every = run_cli("gate", wordy, "--baseline", good, "--all-scorers", cwd=tmp_path)
    assert every.returncode == 1, every.stdout + every.stderr
    paragraphs = every.stdout.strip().split("\n\n")
    assert [p.split(":", 2)[:2] for p in paragraphs[:4]] == [
        ["PASS", " scorer 'num' (primary)"],
        ["FAIL", " scorer 'rx'"],
        ["FAIL", " scorer 'short'"],
        ["PASS", " scorer 'judge'"],
    ]
    assert paragraphs[4] == "FAIL: 2 of the 4 gated scorers regressed: rx, short."

    as_json = main(capsys, "gate", wordy, "--baseline", good, "--all-scorers", "--json")
    assert as_json.returncode == 1
    decision = json.loads(as_json.stdout)
    assert decision["passed"] is False and decision["failed"] == ["rx", "short"]
    assert [d["scorer"] for d in decision["decisions"]] == MULTI
    assert [d["passed"] for d in decision["decisions"]] == [True, False, False, True]
    assert decision["decisions"][1]["comparison"]["scorer"] == "rx"
    single = json.loads(main(capsys, "gate", wordy, "--baseline", good, "--scorer", "short",
                             "--json").stdout)  # fmt: skip
    assert single["scorer"] == "short" and single["passed"] is False

    # Two runs that agree on every scorer pass on all of them.
    same = main(capsys, "gate", good, "--baseline", str(runs["multi-claude-haiku-4-5"]),
                "--all-scorers")  # fmt: skip
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.strip().endswith("PASS: none of the 4 gated scorers regressed.")

    both = main(capsys, "gate", wordy, "--baseline", good, "--all-scorers", "--scorer", "rx")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    unknown = main(capsys, "gate", wordy, "--baseline", good, "--scorer", "nope")
    assert unknown.returncode == 2 and "no scorer 'nope'" in unknown.stderr


def test_cost_shows_the_judge_apart(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = load_prices("v1")
    target_price = prices.price("anthropic", "claude-haiku-4-5")
    judge_price = prices.price("anthropic", JUDGE_MODEL)
    assert target_price is not None and judge_price is not None
    run = load_run(runs["multi-claude-haiku-4-5"])

    def usd(calls: list[ModelCall], price: Price) -> float:
        return sum(
            ((c.input_tokens or 0) * price.input_per_mtok
             + (c.output_tokens or 0) * price.output_per_mtok) / 1e6
            for c in calls
        )  # fmt: skip

    target_calls = [c for r in run.records for c in r.calls_of("target")]
    judge_calls = [c for r in run.records for c in r.calls_of("judge")]
    assert len(judge_calls) == MULTI_N and all(c.scorer == "judge" for c in judge_calls)
    # fake-good ran first with the same answers, so every judge call here was a cache hit.
    assert all(c.cache_hit for c in judge_calls) and run.manifest.judge.cache_hits == MULTI_N

    done = run_cli("cost", str(runs["multi-claude-haiku-4-5"]), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    target, judge = report["models"]
    assert (target["role"], target["model"]) == ("target", "claude-haiku-4-5")
    assert (judge["role"], judge["model"]) == ("judge", JUDGE_MODEL)
    assert target["cost_usd"] == pytest.approx(usd(target_calls, target_price))
    assert (
        judge["cost_usd"] == pytest.approx(usd(judge_calls, judge_price)) and judge["cost_usd"] > 0
    )
    assert judge["calls"] == MULTI_N and judge["cache_hits"] == MULTI_N
    assert judge["samples"] == MULTI_N
    assert judge["input_tokens"] == sum(c.input_tokens or 0 for c in judge_calls)
    assert (target["cache_hits"], target["passed"]) == (0, MULTI_N)
    # The judge's cost is not the target's cost per passing sample.
    assert target["cost_per_passed_usd"] == pytest.approx(target["cost_usd"] / MULTI_N)
    assert report["total_by_role_usd"]["judge"] == pytest.approx(judge["cost_usd"])
    assert report["total_usd"] == pytest.approx(target["cost_usd"] + judge["cost_usd"])
    # The manifest's judge totals agree (cache hits priced, none of them paid again).
    assert run.manifest.judge.cost_usd == pytest.approx(judge["cost_usd"])
    assert run.manifest.judge.cost_paid_usd == 0

    text = main(capsys, "cost", str(runs["multi-claude-haiku-4-5"]), str(runs["multi-fake-good"]))
    assert text.returncode == 0, text.stderr
    (line,) = [
        x for x in text.stdout.splitlines() if x.startswith(f"anthropic/{JUDGE_MODEL} (judge)")
    ]
    assert line.split()[2:4] == [str(2 * MULTI_N), str(MULTI_N)]  # calls, cached
    assert f"${2 * judge['cost_usd']:.6f}" in line and line.endswith("-            -")
    assert f"judges ${2 * judge['cost_usd']:.6f}" in text.stdout
    assert (
        f"anthropic/{JUDGE_MODEL} (judge): {2 * MULTI_N} judge calls ({MULTI_N} from the cache)"
        in text.stdout
    )


def test_reprice_counts_a_judge_apart_per_call_and_per_sample() -> None:
    """Two judge scorers on one judge model: two calls a sample, one sample; a failed
    judge call is not billed; cache hits are priced and counted."""

    def judge_call(scorer: str, *, cache_hit: bool = False, error: str | None = None) -> ModelCall:
        return call(role="judge", model="grader", scorer=scorer, text="GRADE: C",
                    cache_hit=cache_hit, error=error)  # fmt: skip

    records = [
        record("a", {"s": 1.0}, extra_calls=[judge_call("j1"), judge_call("j2", cache_hit=True)]),
        record("b", {"s": 0.0}, extra_calls=[judge_call("j1"), judge_call("j2", error="HTTP 500")]),
    ]
    report = reprice([(manifest(), records)], load_prices("v1"))
    target, judge = report.models
    assert (target.role, target.samples, target.calls, target.passed) == ("target", 2, 2, 1)
    assert (judge.role, judge.name) == ("judge", "openai_compatible/grader (judge)")
    assert (judge.samples, judge.calls, judge.cache_hits) == (2, 3, 1)
    assert judge.input_tokens == 30 and not judge.priced and judge.cost_usd is None
    assert report.total_of("judge") is None and report.to_json()["models"][1]["role"] == "judge"
    text = format_cost(report)
    assert (
        "openai_compatible/grader (judge): 3 judge calls (1 from the cache) for 2 samples" in text
    )
