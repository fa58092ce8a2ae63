"""compare, gate and cost on run directories written by a real `gradetrail run` against
the loopback fake server. The headline checks run the CLI as a CI job would, in a
subprocess; the rest call `cli.main` in-process, which is the same code without
paying a second of interpreter start-up and imports each time."""

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradetrail_lib import cli
from gradetrail_lib.pricing import load_prices
from tests.conftest import run_cli
from tests.support.eval_runs import run_spec, start_server, write_dataset, write_spec
from tests.test_stats_paired import exact_mcnemar_by_hand

N = 40
MODELS = ["fake-good", "fake-bad", "fake-close", "claude-haiku-4-5"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Run directories by name: the models of one spec, plus the good model under a
    different scorer and on a smaller dataset (each in a spec directory of its own)."""
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
    assert "Paired comparison on 40 samples" in out
    assert "both pass 26, both fail 0, A only 14, B only 0" in out
    assert f"Exact McNemar p: {exact_mcnemar_by_hand(14, 0):.4g}" in out
    assert "Verdict: A (add/fake-good is better)" in out
    assert "1.000 [0.912, 1.000] (n=40)" in out  # Wilson for 40/40
    assert "Difference B - A (mean score): -0.350" in out

    as_json = main(capsys, "compare", str(runs["fake-good"]), str(runs["fake-close"]), "--json")
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout)
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
    rate = json.loads(done.stdout)["pass_rate_a"]["interval"]
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
    assert "refusing to compare: scorer_hash differs" in refused.stderr
    assert "dataset hash" not in refused.stderr, "only what differs is named"
    assert "--force" in refused.stderr
    gated = run_cli("gate", b, "--baseline", a, cwd=tmp_path)
    assert gated.returncode == 2, "a refusal must not look like a regression (exit 1)"

    forced = main(capsys, "compare", a, b, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "Note: compared despite a mismatch (forced): scorer_hash differs" in forced.stdout
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
    rows = [json.loads(line) for line in (priced / "results.jsonl").read_text().splitlines()]
    tokens_in = sum(r["usage"]["input_tokens"] for r in rows)
    tokens_out = sum(r["usage"]["output_tokens"] for r in rows)
    price = load_prices("v1").price("anthropic", "claude-haiku-4-5")
    assert price is not None
    expected = (tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok) / 1e6
    assert expected > 0

    done = run_cli("cost", str(priced), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    assert model["cost_usd"] == pytest.approx(expected)
    assert model["cost_per_passed_usd"] == pytest.approx(expected / N)
    assert (model["input_tokens"], model["output_tokens"]) == (tokens_in, tokens_out)

    both = main(capsys, "cost", str(priced), str(unpriced))
    assert both.returncode == 0, both.stderr
    assert f"${expected:.6f}" in both.stdout
    assert "Total: unknown" in both.stdout
    assert "Unknown price in pricing v1: openai_compatible/fake-good" in both.stdout

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
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{}")
    (broken / "results.jsonl").write_text(
        '{"id": "s000", "outcome": "scored", "score": 1}\n{oops\n'
    )
    args = {"compare": [good, str(broken)], "gate": [str(broken), "--baseline", good]}.get(
        command, [str(broken)]
    )
    done = main(capsys, command, *args)
    assert done.returncode == 2
    assert f"{broken / 'results.jsonl'}:2: not valid JSON" in done.stderr
