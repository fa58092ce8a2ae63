"""With repeats a paired comparison takes cases as units: the cluster bootstrap interval
of per-case mean differences and the cluster sign-flip test over them, a winner (or a
failed gate) only when both reject (`paired_verdict`). Here: the sign-flip test's p
against full enumeration, and `compare` held to the functions the simulation calls. The
simulations themselves (under the null, with a case-level effect favouring one model on
every repeat, the verdict holds its error rate where McNemar over (case, repeat) pairs
does not; graded scores without repeats, where the same test over the pairs keeps the
bootstrap's verdict at its level) are type-I cells of bench/bench_coverage.py, checked by
tests/analysis/test_coverage.py."""

import itertools

import numpy as np
import pytest

from bench.bench_coverage import clustered_verdict, null_outcomes
from gradetrail_lib.analysis.stats.clusters import cluster_mean_estimate
from gradetrail_lib.analysis.stats.gate import gate
from gradetrail_lib.analysis.stats.intervals import BootstrapSettings, Interval
from gradetrail_lib.analysis.stats.paired import (
    CLUSTER_SIGN_FLIP,
    SIGN_FLIP,
    compare,
    paired_verdict,
    sign_flip_test,
)
from gradetrail_lib.results.sheet import ScoreSheet

CASES, REPEATS = 60, 5
ALPHA = 0.05
# 999 resamples keep the simulation fast; the tests are the ones a run uses (a Monte
# Carlo test's p is valid at any number of resamples).
FAST = BootstrapSettings(n_resamples=999)


def enumerated_p(values: list[float]) -> float:
    """The two-sided sign-flip p by brute force over every sign pattern."""
    observed = abs(sum(values))
    patterns = list(itertools.product((1.0, -1.0), repeat=len(values)))
    sums = np.abs(np.asarray(patterns) @ np.asarray(values))
    return float(np.mean(sums >= observed - 1e-12))


@pytest.mark.parametrize(
    "values",
    [[1.0, 1.0, 1.0], [1.0, -1.0, 1.0, 1.0], [0.2, 0.4, -0.1, 0.6, 0.8], [0.5] * 13],
)
def test_sign_flip_enumerates_exactly_up_to_13_cases(values: list[float]) -> None:
    assert sign_flip_test(values) == pytest.approx(enumerated_p(values))
    # Zeros flip to themselves: they change no pattern's mean sign or order.
    assert sign_flip_test([*values, 0.0, 0.0]) == pytest.approx(enumerated_p(values))


def test_sign_flip_by_hand_and_edge_cases() -> None:
    assert sign_flip_test([1.0, 1.0, 1.0]) == pytest.approx(2 / 8)  # all +, all -
    assert sign_flip_test([0.5] * 13) == pytest.approx(2 / 2**13)
    assert sign_flip_test([0.3]) == 1.0 and sign_flip_test([0.0, 0.0]) == 1.0


def test_sign_flip_samples_above_13_cases_deterministically() -> None:
    values = [0.1 * i for i in range(-3, 12)]  # 14 non-zero differences
    p = sign_flip_test(values)
    assert p == sign_flip_test(values)  # a fixed seed
    exact = enumerated_p([v for v in values if v != 0])
    assert abs(p - exact) < 4 * np.sqrt(exact * (1 - exact) / 9999)
    # The Monte Carlo p counts the observed pattern: never 0.
    assert sign_flip_test([1.0] * 40) == pytest.approx(2 / 10000)


def test_the_sampled_sign_flip_p_is_scipys_monte_carlo_test() -> None:
    """Above 13 cases the p is scipy's `monte_carlo_test` p, computed directly: the same
    random sign patterns from the seed, equal to the last bit, ties and all."""
    from scipy.stats import monte_carlo_test

    from gradetrail_lib.analysis.stats.intervals import mean_of

    rng = np.random.default_rng(7)
    for case in range(120):
        n = int(rng.integers(14, 80))
        values = rng.normal(0.1 * (case % 4), 1.0, n)
        if case % 3 == 0:  # coarse values: many patterns tie with the observed mean
            values = np.round(values, 1)
        nonzero = values[values != 0]
        settings = BootstrapSettings(n_resamples=int(rng.choice([99, 999, 9999])), seed=case)
        draws = np.random.default_rng(settings.seed)
        magnitudes = np.abs(nonzero)
        reference = monte_carlo_test(
            nonzero,
            lambda size, draws=draws, magnitudes=magnitudes: (
                draws.choice([-1.0, 1.0], size=size) * magnitudes
            ),
            mean_of, vectorized=True, n_resamples=settings.n_resamples,
            alternative="two-sided", axis=-1,
        )  # fmt: skip
        assert sign_flip_test(values.tolist(), settings) == min(1.0, float(reference.pvalue))


def test_paired_verdict_needs_the_interval_and_the_test() -> None:
    above = Interval(0.01, 0.2, 0.95, "x")
    below = Interval(-0.2, -0.01, 0.95, "x")
    around = Interval(-0.1, 0.1, 0.95, "x")
    assert paired_verdict(above, 0.01, ALPHA) == "B"
    assert paired_verdict(below, 0.01, ALPHA) == "A"
    assert paired_verdict(above, 0.05, ALPHA) == "no winner"  # the test does not reject
    assert paired_verdict(around, 0.001, ALPHA) == "no winner"
    assert paired_verdict(below, None, ALPHA) == "A"  # the interval alone decides


def sheets(a: np.ndarray, b: np.ndarray) -> tuple[ScoreSheet, ScoreSheet]:
    ids = [f"c{i}" for i in range(a.shape[0]) for _ in range(a.shape[1])]
    repeats = [r for _ in range(a.shape[0]) for r in range(a.shape[1])]
    return (
        ScoreSheet(ids=ids, repeats=repeats, scores=a.astype(float).ravel().tolist()),
        ScoreSheet(ids=ids, repeats=repeats, scores=b.astype(float).ravel().tolist()),
    )


def test_compare_with_repeats_is_the_functions_the_simulation_checks() -> None:
    rng = np.random.default_rng(3)
    a, b = null_outcomes(rng, CASES, REPEATS, "many")
    b[:20] = True  # B better on a third of the cases: a winner
    result = compare(*sheets(a, b), "score", settings=FAST)
    differences = b.astype(float) - a.astype(float)
    assert result.test == CLUSTER_SIGN_FLIP and result.mcnemar_p is None
    assert result.p_value == sign_flip_test(differences.mean(axis=1).tolist(), FAST)
    estimate = cluster_mean_estimate(differences.tolist(), bounds=(-1.0, 1.0), settings=FAST)
    assert result.difference == estimate
    assert estimate.interval is not None
    assert result.verdict == paired_verdict(estimate.interval, result.p_value, ALPHA) == "B"
    # The bench's simulated verdict is compare's.
    assert clustered_verdict(differences, CLUSTER_SIGN_FLIP, FAST) == (
        "B",
        (CLUSTER_SIGN_FLIP, estimate.interval.method),
    )
    assert result.to_json()["paired_test"] == {"method": CLUSTER_SIGN_FLIP, "p": result.p_value}
    assert result.to_json()["mcnemar_p"] is None
    decision = gate(compare(*sheets(b, a), "score", settings=FAST), threshold=0.02)
    assert not decision.passed and "McNemar" not in decision.explanation
    assert f"cluster sign-flip test ({CLUSTER_SIGN_FLIP}) p = " in decision.explanation


def test_with_repeats_an_interval_without_the_test_names_no_winner() -> None:
    # 5 cases, all favouring B on every repeat: the bootstrap interval excludes zero,
    # but 5 cases cannot reject at 0.05 (p = 2/32): no winner, and one line says why.
    a = np.zeros((5, 3), dtype=bool)
    b = np.ones((5, 3), dtype=bool)
    result = compare(*sheets(a, b), "score")
    assert result.p_value == pytest.approx(2 / 32) and result.verdict == "no winner"
    assert result.difference.interval is not None and result.difference.interval.low > 0
    assert any("cluster sign-flip test does not reject" in n for n in result.notes)
    decision = gate(compare(*sheets(b, a), "score"), threshold=0.02)
    assert decision.passed and "cluster sign-flip test does not reject" in decision.explanation


# Scores other than pass/fail without repeats: the paired bootstrap and the sign-flip
# test over the pairs (their type-I error: a cell of bench/bench_coverage.py).


def graded(a: list[float], b: list[float]) -> tuple[ScoreSheet, ScoreSheet]:
    ids = [f"s{i}" for i in range(len(a))]
    zeros = [0] * len(a)
    return (
        ScoreSheet(ids=ids, repeats=zeros, scores=a),
        ScoreSheet(ids=ids, repeats=zeros, scores=b),
    )


def test_graded_scores_without_repeats_take_the_sign_flip_test_over_pairs() -> None:
    # 4 pairs, B higher on each: the bootstrap interval excludes zero, but 4 pairs cannot
    # reject (p = 2/16): no winner, and one line says why.
    a, b = graded([0.2, 0.3, 0.1, 0.4], [0.7, 0.8, 0.6, 0.8])
    result = compare(a, b, "score")
    assert result.test == SIGN_FLIP and result.p_value == pytest.approx(2 / 16)
    assert result.mcnemar_p is not None  # shown beside it: pass/fail says something else
    assert result.difference.interval is not None and result.difference.interval.low > 0
    assert result.verdict == "no winner"
    assert any("sign-flip test does not reject" in n for n in result.notes)
    # 20 pairs: both agree.
    many = compare(*graded([0.2, 0.3, 0.1, 0.4] * 5, [0.7, 0.8, 0.6, 0.8] * 5), "score")
    assert many.verdict == "B" and many.p_value < ALPHA
