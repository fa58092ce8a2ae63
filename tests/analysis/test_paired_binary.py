"""Pass/fail scores without repeats: the paired interval is Newcombe's hybrid score
interval, and a winner (or a failed gate) needs both it and the exact McNemar test.
Checked by simulation with fixed seeds: the interval's coverage and the verdict's
type-I error under the null, with few and with many discordant pairs."""

import numpy as np
import pytest

from gradetrail_lib.analysis.stats.gate import gate
from gradetrail_lib.analysis.stats.paired import (
    NEWCOMBE,
    compare,
    mcnemar_exact,
    newcombe_paired_interval,
)
from gradetrail_lib.results.sheet import ScoreSheet

SIMULATIONS = 2000


def sheets(
    both_pass: int, a_only: int, b_only: int, both_fail: int
) -> tuple[ScoreSheet, ScoreSheet]:
    """Two pass/fail score sheets on the same ids with these paired counts."""
    a = [1.0] * both_pass + [1.0] * a_only + [0.0] * b_only + [0.0] * both_fail
    b = [1.0] * both_pass + [0.0] * a_only + [1.0] * b_only + [0.0] * both_fail
    ids = [f"s{i}" for i in range(len(a))]
    zeros = [0] * len(a)
    return (
        ScoreSheet(ids=ids, repeats=zeros, scores=a),
        ScoreSheet(ids=ids, repeats=zeros, scores=b),
    )


def test_few_discordant_pairs_name_no_winner_and_do_not_fail_the_gate() -> None:
    # The example: 50 pairs, none won only by A, 4 won only by B (McNemar p 0.125).
    a, b = sheets(23, 0, 4, 23)
    result = compare(a, b, "score")
    assert result.difference.interval is not None
    assert result.difference.interval.method == NEWCOMBE
    assert result.mcnemar_p == pytest.approx(0.125)
    assert result.verdict == "no winner"
    assert gate(compare(b, a, "score"), threshold=0.0).passed  # B as baseline, A a drop of 0.08
    assert not any("McNemar" in n and "rejects" in n for n in result.notes)


def test_a_clear_difference_names_its_winner_and_fails_the_gate() -> None:
    a, b = sheets(20, 1, 15, 14)
    result = compare(a, b, "score")
    assert result.verdict == "B"
    assert result.mcnemar_p < 0.05
    assert result.difference.interval is not None and result.difference.interval.low > 0
    decision = gate(compare(b, a, "score"), threshold=0.02)
    assert not decision.passed


def test_when_the_interval_and_the_exact_test_disagree_one_line_says_so() -> None:
    # 30 pairs, 5 won only by B: Newcombe's interval excludes zero, McNemar p = 0.0625.
    a, b = sheets(0, 0, 5, 25)
    result = compare(a, b, "score")
    assert result.difference.interval is not None
    assert result.difference.interval.low > 0
    assert result.mcnemar_p == pytest.approx(0.0625)
    assert result.verdict == "no winner"
    assert sum("so no winner is named" in note for note in result.notes) == 1
    decision = gate(compare(b, a, "score"), threshold=0.0)
    assert decision.passed
    assert "exact McNemar test does not reject" in decision.explanation


def test_continuous_scores_keep_the_paired_bootstrap() -> None:
    ids = [f"s{i}" for i in range(40)]
    a = ScoreSheet(ids=ids, repeats=[0] * 40, scores=[0.5] * 40)
    b = ScoreSheet(ids=ids, repeats=[0] * 40, scores=[0.6 + 0.01 * (i % 5) for i in range(40)])
    result = compare(a, b, "score")
    assert result.difference.interval is not None
    assert result.difference.interval.method.startswith("bootstrap")
    assert result.verdict == "B"


def _simulate(probabilities: tuple[float, float, float, float], n: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, probabilities, size=SIMULATIONS)


@pytest.mark.parametrize(
    ("probabilities", "n"),
    [
        ((0.46, 0.04, 0.04, 0.46), 50),  # about 4 discordant pairs
        ((0.35, 0.15, 0.15, 0.35), 50),  # many
        ((0.60, 0.02, 0.02, 0.36), 200),
        ((0.40, 0.05, 0.15, 0.40), 60),  # a true difference of 0.10
        ((0.70, 0.10, 0.05, 0.15), 100),
    ],
)
def test_the_newcombe_interval_covers_its_nominal_rate(
    probabilities: tuple[float, float, float, float], n: int
) -> None:
    truth = probabilities[2] - probabilities[1]
    counts = _simulate(probabilities, n, seed=20261204)
    covered = 0
    for both_pass, a_only, b_only, both_fail in counts:
        interval = newcombe_paired_interval(
            int(both_pass), int(a_only), int(b_only), int(both_fail), 0.95
        )
        covered += interval.low <= truth <= interval.high
    coverage = covered / SIMULATIONS
    # Newcombe's interval is conservative when discordant pairs are few (about 98 % here).
    assert 0.93 <= coverage <= 0.99, coverage


@pytest.mark.parametrize(
    ("probabilities", "n"),
    [
        ((0.46, 0.04, 0.04, 0.46), 50),  # about 4 discordant pairs: the case that failed
        ((0.35, 0.15, 0.15, 0.35), 50),
        ((0.45, 0.05, 0.05, 0.45), 300),
    ],
)
def test_under_the_null_the_verdict_holds_its_error_rate(
    probabilities: tuple[float, float, float, float], n: int
) -> None:
    counts = _simulate(probabilities, n, seed=7)
    winners = gate_fails = 0
    for both_pass, a_only, b_only, both_fail in counts:
        interval = newcombe_paired_interval(
            int(both_pass), int(a_only), int(b_only), int(both_fail), 0.95
        )
        p = mcnemar_exact(int(a_only), int(b_only))
        named = (interval.low > 0 or interval.high < 0) and p < 0.05
        winners += named
        gate_fails += named and interval.high < 0  # the candidate (B) worse
    error = np.sqrt(0.05 * 0.95 / SIMULATIONS)
    assert winners / SIMULATIONS <= 0.05 + 2 * error
    assert gate_fails / SIMULATIONS <= 0.025 + 2 * np.sqrt(0.025 * 0.975 / SIMULATIONS)
