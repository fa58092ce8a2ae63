"""Which interval a mean score gets (`stats.intervals.score_method`), the score interval
at n or at the effective n, and the warning that travels with a figure no method is
known to cover. Their coverage is tests/analysis/test_coverage.py's."""

import math

import pytest
from scipy.stats import norm, t

from gradetrail_lib.analysis.stats.clusters import cluster_mean_estimate, cluster_mean_interval
from gradetrail_lib.analysis.stats.gate import gate
from gradetrail_lib.analysis.stats.intervals import (
    Estimate,
    Interval,
    effective_interval,
    mean_estimate,
    mean_interval,
    proportion_interval,
    score_method,
    signal_count,
)
from gradetrail_lib.analysis.stats.paired import compare
from gradetrail_lib.analysis.stats.repeats import pass_hat_k
from gradetrail_lib.analysis.stats.run_stats import describe
from tests.support.traces import SCORER, record

GRADED = [0.1, 0.4, 0.35, 0.8, 0.9, 0.55, 0.6, 0.2, 0.75, 0.5, 0.45, 0.65]


def test_signal_counts_the_values_away_from_the_near_bound() -> None:
    assert signal_count([0.0] * 20 + [1.0] * 4) == pytest.approx(4)
    # Mostly passing cases: the signal is in the ones that do not pass every repeat.
    assert signal_count([1.0] * 20 + [0.6, 0.8]) == pytest.approx(0.6**2 / (0.16 + 0.04))
    assert signal_count([0.0, 0.0, 0.0]) == 0.0


def test_the_method_follows_the_values() -> None:
    few = [0.0] * 26 + [0.3, 0.6, 0.9, 0.5]  # 30 values, about 3.5 carrying signal
    assert score_method(few) == "sparse"
    assert mean_interval(few).method == "wilson-sparse"
    assert score_method(GRADED) == "neff"  # n < 30
    assert mean_interval(GRADED).method == "wilson-neff"
    assert mean_interval(GRADED, method="exact").method == "exact-neff"
    assert score_method(GRADED * 3) == "bootstrap"
    assert mean_interval(GRADED * 3).method == "bootstrap-bca"
    # pass^10 of 50 cases that pass about half their 20 repeats: a few cases carry the
    # mean (kurtosis far above 8), so the score interval at n, not the effective n.
    table = [pass_hat_k(20, c, 10) for c in range(21)]
    hat = [table[c] for c in [8, 9, 10, 11, 12, 9, 10, 13, 7, 10] * 4 + [15, 16] + [9] * 8]
    assert score_method(hat) == "sparse"
    # `choose=False` keeps the bootstrap (a paired difference's rule is stats.paired's).
    assert mean_interval(GRADED, choose=False).method == "bootstrap-bca"


def test_sparse_is_the_score_interval_at_n() -> None:
    values = [1.0] * 3 + [0.0] * 27
    for method in ("wilson", "exact"):
        got = effective_interval(values, None, 0.95, (0.0, 1.0), method, sparse=True)
        want = proportion_interval(3, 30, 0.95, method)
        assert (got.low, got.high) == pytest.approx((want.low, want.high), abs=1e-12)
        assert got.method == f"{method}-sparse" and got.warning is None
    # Rescaled from the bounds: a mean of 0.1 on [-1, 1] is 0.55 on [0, 1].
    wide = effective_interval(
        [-1.0, 1.0] * 5 + [0.0] * 10, None, 0.95, (-1.0, 1.0), "wilson", sparse=True
    )
    unit = effective_interval(
        [0.0, 1.0] * 5 + [0.5] * 10, None, 0.95, (0.0, 1.0), "wilson", sparse=True
    )
    assert (wide.low, wide.high) == pytest.approx((2 * unit.low - 1, 2 * unit.high - 1))


def test_neff_is_korn_graubards_effective_n() -> None:
    x = GRADED
    n = len(x)
    m = sum(x) / n
    s2 = sum((v - m) ** 2 for v in x) / (n - 1)
    m2 = sum((v - m) ** 2 for v in x) / n
    kurtosis = sum((v - m) ** 4 for v in x) / n / m2**2
    df = 2 * n / (kurtosis - (n - 3) / (n - 1))
    n_star = m * (1 - m) / (s2 / n) * (norm.ppf(0.975) / t.ppf(0.975, min(df, n - 1))) ** 2
    z = norm.ppf(0.975)
    centre = (m + z * z / (2 * n_star)) / (1 + z * z / n_star)
    half = z / (1 + z * z / n_star) * math.sqrt(m * (1 - m) / n_star + z * z / (4 * n_star**2))
    got = mean_interval(x)
    assert (got.low, got.high) == pytest.approx((centre - half, centre + half), abs=1e-9)
    # Wider than the normal interval at n - 1 df, which undercovers at this n.
    assert got.high - got.low > 2 * t.ppf(0.975, n - 1) * math.sqrt(s2 / n) * 0.95


def test_unequal_clusters_are_weighted_by_their_records() -> None:
    groups = [[0.2, 0.4], [0.9], [0.5, 0.7, 0.6], [0.1], [0.8, 0.3], [0.55], [0.95, 0.85]]
    got = cluster_mean_interval(groups)
    means = [sum(g) / len(g) for g in groups]
    weighted = effective_interval(
        means, [float(len(g)) for g in groups], 0.95, (0.0, 1.0), "wilson", sparse=False
    )
    assert got.method == "cluster-wilson-neff"
    assert (got.low, got.high) == (weighted.low, weighted.high)
    values = [v for g in groups for v in g]
    estimate = cluster_mean_estimate(groups)
    assert estimate.value == pytest.approx(sum(values) / len(values))
    assert estimate.interval is not None and estimate.interval.contains(estimate.value)
    # Not the unweighted mean of the case means, which a 3-record case would count once.
    assert weighted.low + weighted.high != pytest.approx(
        effective_interval(means, None, 0.95, (0.0, 1.0), "wilson", sparse=False).low
        + effective_interval(means, None, 0.95, (0.0, 1.0), "wilson", sparse=False).high
    )


def test_a_small_skewed_sample_warns_and_the_warning_is_printed() -> None:
    # 20 draws of Beta(0.5, 3), rounded: skewness 1.5 at n = 20.
    skewed = [0.14, 0.01, 0.0, 0.01, 0.06, 0.02, 0.0, 0.16, 0.21, 0.55]
    skewed += [0.62, 0.19, 0.06, 0.04, 0.63, 0.24, 0.01, 0.05, 0.01, 0.04]
    estimate = mean_estimate(skewed)
    assert estimate.interval is not None and estimate.interval.method.endswith("-neff")
    assert estimate.warning is not None and "skewed" in estimate.warning
    assert f"warning: {estimate.warning}" in estimate.format()
    assert f"; warning: {estimate.warning})" in describe(estimate)
    assert estimate.to_json()["warning"] == estimate.warning
    assert estimate.to_json()["interval"]["warning"] == estimate.warning
    # Symmetric graded scores at the same n do not warn.
    plain = mean_estimate(GRADED)
    assert plain.warning is None and "warning" not in describe(plain)


def test_an_estimate_without_warning_prints_as_before() -> None:
    est = Estimate(0.5, 10, Interval(0.2, 0.8, 0.95, "wilson"), 5)
    assert est.format() == "0.500 [0.200, 0.800] (n=10)"
    assert describe(est) == "5/10 = 0.5000 (95% CI 0.2000-0.8000, wilson, n=10)"
    assert est.to_json()["warning"] is None


def test_a_paired_difference_of_few_graded_scores_warns_in_compare_and_gate() -> None:
    a = [record(f"s{i}", v) for i, v in enumerate(GRADED)]
    b = [record(f"s{i}", min(1.0, v + (0.2 if i < 3 else 0.0))) for i, v in enumerate(GRADED)]
    result = compare(a, b, SCORER)
    warning = result.difference.warning
    # 12 pairs, 3 of them differing: both reasons hold; the paired bootstrap is kept.
    assert warning == (
        "3.0 effective differences over 12 pairs: a paired bootstrap of graded scores is "
        "not known to cover with fewer than 10 or under 30 pairs"
    )
    assert result.difference.interval is not None
    assert result.difference.interval.method.startswith("bootstrap-")
    assert result.to_json()["difference_b_minus_a"]["warning"] == warning
    assert f"(warning: {warning})" in gate(result).explanation
    # 40 pairs with 20 differing, not all alike: no warning.
    many_a = [record(f"s{i}", v) for i, v in enumerate(GRADED * 3 + GRADED[:4])]
    many_b = [
        record(f"s{i}", min(1.0, v + (0.1 + 0.01 * i if i % 2 else 0.0)))
        for i, v in enumerate(GRADED * 3 + GRADED[:4])
    ]
    assert compare(many_a, many_b, SCORER).difference.warning is None
