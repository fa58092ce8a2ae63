"""Paired comparison, McNemar and the gate decision on constructed result sets."""

from math import comb

import pytest

from gradetrail_lib.errors import NotComparable
from gradetrail_lib.stats import check_comparable, compare, gate, mcnemar_exact


def exact_mcnemar_by_hand(b: int, c: int) -> float:
    """Two-sided exact: 2 · P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2), capped at 1."""
    n, k = b + c, min(b, c)
    return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n)


@pytest.mark.parametrize(("b", "c", "expected"), [(1, 6, 0.125), (0, 5, 0.0625), (3, 3, 1.0)])
def test_mcnemar_matches_hand_computed_binomial(b: int, c: int, expected: float) -> None:
    # b=1, c=6: 2 · (C(7,0) + C(7,1)) / 2^7 = 2 · 8 / 128 = 0.125.
    assert exact_mcnemar_by_hand(b, c) == pytest.approx(expected)
    assert mcnemar_exact(b, c) == pytest.approx(expected)
    assert mcnemar_exact(c, b) == pytest.approx(expected)


def test_mcnemar_without_discordant_pairs_is_one() -> None:
    assert mcnemar_exact(0, 0) == 1.0


def rows(scores: dict[str, float | None]) -> list[dict[str, object]]:
    return [
        {
            "id": k,
            "score": v,
            "outcome": "scored" if v is not None else "provider_error",
            "response": "x" if v is not None else None,
        }
        for k, v in scores.items()
    ]


def paired(pattern: list[tuple[float | None, float | None]]) -> tuple[list, list]:
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
    a = [dict(r, repeat=i) for i, r in enumerate(rows({"s1": 1.0}) * 3)]
    b = [dict(r, repeat=i, score=0.0) for i, r in enumerate(rows({"s1": 1.0}) * 3)]
    result = compare(a, b)
    assert result.n == 3 and result.a_only == 3


def manifest(scorer: str = "s" * 64, dataset: str = "d" * 64) -> dict[str, object]:
    return {"scorer_hash": scorer, "dataset": {"path": "x.jsonl", "hash": dataset}}


def test_refuses_different_scorer_or_dataset_unless_forced() -> None:
    assert check_comparable(manifest(), manifest()) == []
    with pytest.raises(NotComparable, match="scorer_hash differs: A has s{12}, B has t{12}"):
        check_comparable(manifest(), manifest(scorer="t" * 64))
    with pytest.raises(NotComparable, match="dataset hash differs") as info:
        check_comparable(manifest(), manifest(dataset="e" * 64))
    assert "--force" in str(info.value) and "scorer_hash" not in str(info.value)
    notes = check_comparable(manifest(), manifest(scorer="t" * 64), force=True)
    assert len(notes) == 1 and "forced" in notes[0] and "scorer_hash differs" in notes[0]
    with pytest.raises(NotComparable, match="missing from B's manifest"):
        check_comparable(manifest(), {"dataset": {"hash": "d" * 64}})


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
