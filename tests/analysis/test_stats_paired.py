"""Paired comparison, McNemar and the gate decision on constructed result sets."""

from collections.abc import Sequence
from math import comb
from typing import Any

import pytest

from gradetrail_lib.analysis.stats import PairedComparison, check_comparable, gate, mcnemar_exact
from gradetrail_lib.analysis.stats import compare as compare_on
from gradetrail_lib.errors import NotComparable
from gradetrail_lib.results.trace import Manifest, TraceRecord
from tests.support.traces import SCORER, manifest, record


def exact_mcnemar_by_hand(b: int, c: int) -> float:
    """Two-sided exact: 2 · P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2), capped at 1."""
    n, k = b + c, min(b, c)
    return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("b", "c", "expected"), [(1, 6, 0.125), (0, 5, 0.0625), (3, 3, 1.0)])
def test_mcnemar_matches_hand_computed_binomial(b: int, c: int, expected: float) -> None:
    # b=1, c=6: 2 · (C(7,0) + C(7,1)) / 2^7 = 2 · 8 / 128 = 0.125.
    assert exact_mcnemar_by_hand(b, c) == pytest.approx(expected)
    assert mcnemar_exact(b, c) == pytest.approx(expected)
    assert mcnemar_exact(c, b) == pytest.approx(expected)


def test_mcnemar_without_discordant_pairs_is_one() -> None:
    assert mcnemar_exact(0, 0) == 1.0


def rows(scores: dict[str, float | None]) -> list[TraceRecord]:
    """Records scored on scorer `s`; a None score is a sample without a response."""
    return [record(k, v, answered=v is not None) for k, v in scores.items()]


def compare(a: Sequence[TraceRecord], b: Sequence[TraceRecord], **options: Any) -> PairedComparison:
    return compare_on(a, b, SCORER, **options)


def paired(
    pattern: Sequence[tuple[float | None, float | None]],
) -> tuple[list[TraceRecord], list[TraceRecord]]:
    ids = [f"s{i:03d}" for i in range(len(pattern))]
    a = rows({i: p[0] for i, p in zip(ids, pattern, strict=True)})
    b = rows({i: p[1] for i, p in zip(ids, pattern, strict=True)})
    return a, b


def test_counts_mcnemar_and_a_clear_winner() -> None:
    pattern = [(1.0, 1.0)] * 20 + [(0.0, 0.0)] * 4 + [(1.0, 0.0)] * 12 + [(0.0, 1.0)] * 1
    a, b = paired(pattern)
    result = compare(a, b, labels=("old", "new"))
    assert (result.both_pass, result.both_fail, result.a_only, result.b_only) == (20, 4, 12, 1)
    assert result.n == 37
    assert result.mcnemar_p == pytest.approx(exact_mcnemar_by_hand(12, 1))
    assert result.difference.value == pytest.approx((1 - 12) / 37)
    assert result.difference.interval is not None and result.difference.interval.high < 0
    assert result.verdict == "A" and result.winner_label() == "old"
    assert result.pass_rate_a.successes == 32 and result.pass_rate_b.successes == 21
    # Swapping the sides swaps the verdict.
    assert compare(b, a).verdict == "B"


def test_small_difference_is_no_winner() -> None:
    a, b = paired([(1.0, 1.0)] * 10 + [(1.0, 0.0)] * 2 + [(0.0, 1.0)] * 1)
    result = compare(a, b)
    assert result.verdict == "no winner"
    assert result.difference.interval is not None
    assert result.difference.interval.contains(0.0)


def test_identical_runs_are_no_winner_with_a_real_interval() -> None:
    a, b = paired([(1.0, 1.0)] * 8 + [(0.0, 0.0)] * 4)
    result = compare(a, b)
    ci = result.difference.interval
    assert result.verdict == "no winner" and result.mcnemar_p == 1.0
    assert ci is not None and ci.low < 0 < ci.high, "n=12 equal pairs prove no equality"


def test_few_pairs_all_favouring_b_are_not_a_verdict() -> None:
    # 3 of 3 B-only: the bootstrap would say [1, 1]; three samples prove little.
    a, b = paired([(0.0, 1.0)] * 3)
    result = compare(a, b)
    assert result.verdict == "no winner"
    many = compare(*paired([(0.0, 1.0)] * 60))
    assert many.verdict == "B"


def test_unscored_samples_count_as_failures() -> None:
    a, b = paired([(1.0, None)] * 15 + [(1.0, 1.0)] * 15)
    result = compare(a, b)
    assert result.unscored_b == 15 and result.unscored_a == 0
    assert result.a_only == 15 and result.mean_b == pytest.approx(0.5)
    assert result.verdict == "A"


def test_mismatched_ids_are_rejected_with_counts_per_side() -> None:
    a = rows({"s1": 1.0, "s2": 1.0, "s3": 0.0, "s4": 1.0})
    b = rows({"s1": 1.0, "s2": 0.0, "x9": 1.0})
    with pytest.raises(NotComparable) as info:
        compare(a, b, labels=("run-a", "run-b"))
    message = str(info.value)
    assert "2 only in A [run-a] (s3, s4)" in message
    assert "1 only in B [run-b] (x9)" in message
    assert "2 are shared" in message


def test_duplicate_ids_are_rejected() -> None:
    a = rows({"s1": 1.0}) * 2
    with pytest.raises(NotComparable, match="has sample 's1'"):
        compare(a, rows({"s1": 1.0}))


def test_repeats_are_joined_on_id_and_repeat() -> None:
    a = [record("s1", 1.0, repeat=i) for i in range(3)]
    b = [record("s1", 0.0, repeat=i) for i in range(3)]
    result = compare(a, b)
    assert result.n == 3 and result.a_only == 3


def test_each_scorer_is_compared_on_its_own_scores() -> None:
    """Two scorers on the same records: the figures are each scorer's, not a mix."""
    a = [record(f"s{i}", {"num": 1.0, "judge": 1.0}) for i in range(30)]
    b = [record(f"s{i}", {"num": 1.0, "judge": 0.0 if i < 20 else 1.0}) for i in range(30)]
    on_num = compare_on(a, b, "num")
    on_judge = compare_on(a, b, "judge")
    assert on_num.scorer == "num" and on_num.a_only == 0 and on_num.verdict == "no winner"
    assert on_judge.scorer == "judge" and on_judge.a_only == 20 and on_judge.verdict == "A"
    assert on_judge.to_json()["scorer"] == "judge"
    # A scorer the records do not hold scores nothing: every sample unscored.
    missing = compare_on(a, b, "other")
    assert missing.unscored_a == missing.unscored_b == 30


def test_a_scorer_error_is_unscored_on_that_scorer_only() -> None:
    a = [record(f"s{i}", {"num": 1.0, "py": 1.0}) for i in range(4)]
    b = [record(f"s{i}", {"num": 1.0, "py": None}) for i in range(4)]
    assert compare_on(a, b, "num").unscored_b == 0
    assert compare_on(a, b, "py").unscored_b == 4


def test_refuses_different_scorer_or_dataset_unless_forced() -> None:
    s, t = "s" * 64, "t" * 64
    assert check_comparable(manifest(), manifest(), SCORER) == []
    with pytest.raises(NotComparable, match="scorer 's' hash differs: A has s{12}, B has t{12}"):
        check_comparable(manifest(), manifest({SCORER: t}), SCORER)
    with pytest.raises(NotComparable, match="dataset hash differs") as info:
        check_comparable(manifest(), manifest(dataset="e" * 64), SCORER)
    assert "--force" in str(info.value) and "scorer 's' hash" not in str(info.value)
    notes = check_comparable(manifest(), manifest({SCORER: t}), SCORER, force=True)
    assert len(notes) == 1 and "forced" in notes[0] and "scorer 's' hash differs" in notes[0]
    with pytest.raises(NotComparable, match="B has no scorer 's'"):
        check_comparable(manifest(), manifest({"other": s}), SCORER)


def test_comparability_is_per_scorer() -> None:
    """A scorer that changed refuses that scorer's comparison, not the other's."""
    a = manifest({"num": "n" * 64, "judge": "j" * 64})
    b = manifest({"num": "n" * 64, "judge": "J" * 64})
    assert check_comparable(a, b, "num", labels=("old", "new")) == []
    with pytest.raises(NotComparable, match="scorer 'judge' hash differs: old has j{12}"):
        check_comparable(a, b, "judge", labels=("old", "new"))
    # The primary scorer may differ between the runs; a shared one is still comparable.
    reordered = replace_scorers(b, ["judge", "num"])
    assert check_comparable(a, reordered, "num") == []


def replace_scorers(m: Manifest, order: list[str]) -> Manifest:
    by_name = {s.name: s for s in m.scorers}
    return m.model_copy(update={"scorers": [by_name[n] for n in order]})


def test_gate_fails_only_on_a_large_and_real_drop() -> None:
    big_drop = compare(*paired([(1.0, 1.0)] * 20 + [(1.0, 0.0)] * 10))
    decision = gate(big_drop, 0.02)
    assert not decision.passed
    assert decision.explanation.startswith("FAIL:")
    assert "exceeds the allowed 0.02 and the interval excludes zero" in decision.explanation
    assert "baseline only 10, candidate only 0" in decision.explanation

    # The same drop with a tolerance above it passes.
    tolerant = gate(big_drop, 0.5)
    assert tolerant.passed and "not worse by more than the allowed 0.5" in tolerant.explanation

    # A drop above the threshold that the interval cannot tell from zero passes.
    noisy = compare(*paired([(1.0, 1.0)] * 5 + [(1.0, 0.0)] * 2 + [(0.0, 1.0)] * 1))
    decision = gate(noisy, 0.02)
    assert decision.passed and "contains zero" in decision.explanation

    better = gate(compare(*paired([(0.0, 1.0)] * 30)), 0.02)
    assert better.passed and "not worse than the baseline" in better.explanation


def test_gate_passes_a_drop_exactly_at_the_threshold_and_fails_a_hair_more() -> None:
    # 10 of 40 pairs drop from 1 to 0: a difference of exactly -0.25 in binary floats,
    # with an interval well clear of zero, so only `drop > threshold` decides.
    at = compare(*paired([(1.0, 1.0)] * 30 + [(1.0, 0.0)] * 10))
    assert at.difference.value == -0.25
    assert at.difference.interval is not None and at.difference.interval.high < 0
    decision = gate(at, 0.25)
    assert decision.passed, decision.explanation
    assert decision.explanation.startswith("PASS:")
    assert "not worse by more than the allowed 0.25" in decision.explanation

    # A hair below the threshold (the same drop) and one more dropped pair both fail.
    assert not gate(at, 0.25 - 1e-9).passed
    more = compare(*paired([(1.0, 1.0)] * 29 + [(1.0, 0.0)] * 11))
    assert more.difference.interval is not None and more.difference.interval.high < 0
    failed = gate(more, 0.25)
    assert not failed.passed
    assert failed.explanation.startswith("FAIL:")
    assert "exceeds the allowed 0.25 and the interval excludes zero" in failed.explanation


def test_mcnemar_exact_equals_scipys_binomtest() -> None:
    """The exact McNemar p is the binomial tail doubled (the binomial(n, 1/2) is
    symmetric); held equal to scipy's two-sided binomtest over a grid of counts."""
    from scipy.stats import binomtest

    for a in range(0, 40, 3):
        for b in range(0, 40, 4):
            if a + b == 0:
                continue
            expected = binomtest(a, a + b, 0.5).pvalue
            assert mcnemar_exact(a, b) == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert mcnemar_exact(510, 490) == pytest.approx(binomtest(510, 1000, 0.5).pvalue, rel=1e-9)
