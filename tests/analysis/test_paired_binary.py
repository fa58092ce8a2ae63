"""Pass/fail scores without repeats: the paired interval is Newcombe's hybrid score
interval, and a winner (or a failed gate) needs both it and the exact McNemar test.
The interval's coverage and the verdict's type-I error under the null, with few and with
many discordant pairs, are cells of bench/bench_coverage.py, checked by
tests/analysis/test_coverage.py."""

import pytest

from gradetrail_lib.analysis.stats.gate import gate
from gradetrail_lib.analysis.stats.paired import (
    NEWCOMBE,
    compare,
)
from gradetrail_lib.results.sheet import ScoreSheet


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
