"""Repeats: pass@k and pass^k against hand-computed tables and a brute-force count over
every k-subset, intervals clustered by case (wider than the naive ones on correlated
repeats, unchanged without repeats), compare resampling cases, and the manifest fields
old manifests lack."""

import json
import math
from itertools import combinations
from pathlib import Path

import pytest

from gradetrail_lib.analysis.stats import (
    DEFAULT_THRESHOLD,
    compare,
    gate,
    mean_estimate,
    mean_interval,
    proportion,
)
from gradetrail_lib.analysis.stats import proportion_interval as wilson
from gradetrail_lib.analysis.stats.clusters import cluster_mean_interval, cluster_proportion
from gradetrail_lib.analysis.stats.repeats import (
    case_outcomes,
    default_ks,
    describe_at_k,
    pass_at_k,
    pass_at_k_points,
    pass_hat_k,
    repeat_stats,
)
from gradetrail_lib.analysis.stats.run_stats import scorer_estimates
from gradetrail_lib.analysis.summary import format_summary, summarize
from gradetrail_lib.results.trace import TraceRecord, parse_manifest
from tests.support.traces import SCORER, manifest, record

# (n, c, k, pass@k, pass^k), worked out by hand:
# pass@k = 1 - C(n-c, k)/C(n, k); pass^k = C(c, k)/C(n, k).
HAND = [
    (5, 2, 1, 2 / 5, 2 / 5),  # k = 1: both are c/n
    (5, 2, 2, 1 - 3 / 10, 1 / 10),  # C(3,2)=3, C(5,2)=10, C(2,2)=1
    (5, 2, 3, 1 - 1 / 10, 0.0),  # C(3,3)=1, C(5,3)=10, C(2,3)=0
    (5, 2, 4, 1.0, 0.0),  # C(3,4)=0: any 4 of 5 include a pass
    (5, 2, 5, 1.0, 0.0),
    (5, 0, 3, 0.0, 0.0),
    (5, 5, 3, 1.0, 1.0),
    (10, 3, 2, 1 - 21 / 45, 3 / 45),  # C(7,2)=21, C(10,2)=45, C(3,2)=3
    (4, 1, 2, 1 - 3 / 6, 0.0),  # C(3,2)=3, C(4,2)=6
    (4, 3, 2, 1.0, 3 / 6),
]


@pytest.mark.parametrize(("n", "c", "k", "at", "hat"), HAND)
def test_pass_at_k_and_pass_hat_k_by_hand(n: int, c: int, k: int, at: float, hat: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(at, abs=1e-12)
    assert pass_hat_k(n, c, k) == pytest.approx(hat, abs=1e-12)


@pytest.mark.parametrize(("n", "c"), [(5, 2), (6, 1), (6, 4), (7, 3), (3, 3), (4, 0)])
def test_estimators_are_the_share_of_k_subsets(n: int, c: int) -> None:
    """Unbiased by construction: the share of the C(n, k) ways to pick k of the n
    repeats with at least one pass (pass@k) and with only passes (pass^k)."""
    outcomes = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(map(any, subsets)) / len(subsets))
        assert pass_hat_k(n, c, k) == pytest.approx(sum(map(all, subsets)) / len(subsets))


def test_k_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="k >= 1"):
        pass_hat_k(3, 1, 0)
    with pytest.raises(ValueError, match="at least 1"):
        repeat_stats(repeated({"a": [1, 1]}), SCORER, ks=[0])


def repeated(table: dict[str, list[float | None]]) -> list[TraceRecord]:
    """A case per key, a record per repeat with that score (None: a scorer error)."""
    return [
        record(case, score, repeat=i)
        for case, scores in table.items()
        for i, score in enumerate(scores)
    ]


# Three cases of four repeats: 3/4, 0/4 and 4/4 passes.
TABLE = {"a": [1, 1, 0, 1], "b": [0, 0, 0, 0], "c": [1, 1, 1, 1]}


def test_run_figures_are_means_over_cases_by_hand() -> None:
    stats = repeat_stats(repeated(TABLE), SCORER)
    assert (stats.cases, stats.records, stats.trials) == (3, 12, 4)
    assert [(c.id, c.trials, c.passes) for c in stats.case_rates] == [
        ("a", 4, 3), ("b", 4, 0), ("c", 4, 4)
    ]  # fmt: skip
    # pass@1 = pass^1 = (3/4 + 0 + 1) / 3; pass@2: a 1 - C(1,2)/C(4,2) = 1, b 0, c 1;
    # pass^2: a C(3,2)/C(4,2) = 1/2, b 0, c 1; pass@4: a 1, b 0, c 1; pass^4: 0, 0, 1.
    expected = {
        1: (1.75 / 3, 1.75 / 3),
        2: (2 / 3, 0.5),
        3: (2 / 3, (1 / 4 + 1) / 3),
        4: (2 / 3, 1 / 3),
    }
    for k, (at, hat) in expected.items():
        row = stats.get(k)
        assert row.pass_at_k.value == pytest.approx(at)
        assert row.pass_hat_k.value == pytest.approx(hat)
        assert row.pass_at_k.n == row.pass_hat_k.n == 3 and row.skipped == 0
    assert stats.case_pass_rate.value == pytest.approx(1.75 / 3)
    points = pass_at_k_points(repeated(TABLE), SCORER)
    assert points[0] == pytest.approx({k: at for k, (at, _) in expected.items()})
    assert points[1] == pytest.approx({k: hat for k, (_, hat) in expected.items()})


def test_intervals_are_over_cases() -> None:
    stats = repeat_stats(repeated(TABLE), SCORER)
    # The per-case values are the cluster units: pass@2 is 1, 0, 1 by case, a 0/1 mean
    # over 3 cases, so its interval is the proportion's over 3 cases.
    row = stats.get(2)
    assert row.pass_at_k.interval is not None
    assert row.pass_at_k.interval.method == "cluster-wilson"
    bounds = wilson(2, 3)
    assert (row.pass_at_k.interval.low, row.pass_at_k.interval.high) == (bounds.low, bounds.high)
    # pass@1's per-case values are 3/4, 0, 1: a bootstrap of the three.
    inner = mean_interval([0.75, 0.0, 1.0])
    got = stats.get(1).pass_at_k.interval
    assert got is not None and (got.low, got.high) == (inner.low, inner.high)
    assert got.method == "cluster-" + inner.method


def test_unscored_repeats_fail_and_short_cases_are_skipped() -> None:
    records = repeated({"a": [1, None, 1], "b": [1, 0]})
    cases = case_outcomes(records, SCORER)
    assert [(c.trials, c.passes) for c in cases] == [(3, 2), (2, 1)]
    stats = repeat_stats(records, SCORER, ks=[1, 3, 4])
    assert stats.get(1).pass_at_k.value == pytest.approx((2 / 3 + 1 / 2) / 2)
    three = stats.get(3)
    # Only case a has 3 repeats: pass@3 = 1, pass^3 = C(2,3)/C(3,3) = 0, b left out.
    assert (three.pass_at_k.value, three.pass_hat_k.value, three.pass_at_k.n) == (1.0, 0.0, 1)
    assert three.skipped == 1
    four = stats.get(4)  # no case has 4 repeats: no figure
    assert (four.pass_at_k.value, four.pass_at_k.n, four.skipped) == (None, 0, 2)
    text = describe_at_k(stats, [1, 3])
    assert "pass@3 1.0000" in text and "n=1 cases), 1 cases with fewer repeats left out" in text


def test_default_ks() -> None:
    assert default_ks(1) == [1]
    assert default_ks(5) == [1, 2, 3, 4, 5]
    assert default_ks(20) == [1, 2, 5, 10, 20]


def correlated(cases: int, repeats: int, passing: int) -> list[TraceRecord]:
    """`passing` cases pass every repeat, the others fail every one: repeats add nothing."""
    return [
        record(f"c{i:02d}", 1.0 if i < passing else 0.0, repeat=r)
        for i in range(cases)
        for r in range(repeats)
    ]


def test_clustered_pass_rate_is_wider_than_the_naive_one_on_correlated_repeats() -> None:
    stats = scorer_estimates(correlated(20, 5, 12), SCORER)
    rate = stats.pass_rate
    assert (rate.value, rate.n, rate.successes, rate.clusters) == (0.6, 100, 60, 20)
    assert rate.interval is not None and rate.interval.method == "cluster-wilson"
    # The 100 records hold the information of 20 cases: the interval is 12/20's.
    by_cases, naive = wilson(12, 20), wilson(60, 100)
    assert (rate.interval.low, rate.interval.high) == (by_cases.low, by_cases.high)
    assert rate.interval.high - rate.interval.low > 1.5 * (naive.high - naive.low)
    assert stats.mean_score.interval == rate.interval  # a 0/1 mean is the proportion


def test_clustered_mean_of_graded_scores_resamples_cases() -> None:
    # 12 cases of 3 equal graded scores: 0, 0.25, ..., 1 by case.
    table: dict[str, list[float | None]] = {f"c{i}": [(i % 5) / 4] * 3 for i in range(12)}
    records = repeated(table)
    mean = scorer_estimates(records, SCORER).mean_score
    per_case = [(i % 5) / 4 for i in range(12)]
    inner = mean_interval(per_case)
    naive = mean_interval([v for v in per_case for _ in range(3)])
    assert mean.interval is not None and (mean.n, mean.clusters) == (36, 12)
    assert (mean.interval.low, mean.interval.high) == (inner.low, inner.high)
    assert mean.interval.method == "cluster-" + inner.method
    assert mean.interval.high - mean.interval.low > naive.high - naive.low


def test_cases_of_different_sizes_bootstrap_the_ratio() -> None:
    # 32 cases (a bootstrap of the 4 this test had undercovers: `score_method` gives so
    # few the score interval; tests/analysis/test_score_method.py).
    groups = [[1.0, 0.0, 1.0], [0.0], [1.0, 1.0], [0.5, 0.0, 0.25, 1.0]] * 8
    interval = cluster_mean_interval(groups)
    assert interval.method.startswith("cluster-bootstrap-")
    mean = math.fsum(v for g in groups for v in g) / 80
    assert interval.contains(mean) and 0.0 <= interval.low < interval.high <= 1.0
    few = cluster_mean_interval(groups[:4])
    assert few.method == "cluster-wilson-sparse" and few.contains(mean)


def test_single_repeats_keep_todays_figures() -> None:
    scores = [1.0, 0.0, 0.5, 1.0, 0.25, 1.0, 0.0, 0.75]
    records = [record(f"s{i}", s) for i, s in enumerate(scores)] + [record("s9", None)]
    stats = scorer_estimates(records, SCORER)
    assert stats.pass_rate == proportion(sum(s >= DEFAULT_THRESHOLD for s in scores), 9)
    assert stats.mean_score == mean_estimate(scores)
    assert stats.pass_rate.clusters is None and stats.mean_score.clusters is None
    assert cluster_proportion([[True], [False], [True]]) == proportion(2, 3)
    assert cluster_mean_interval([[0.5], [0.25], [1.0]]) == mean_interval([0.5, 0.25, 1.0])
    assert pass_at_k_points(records, SCORER) == ({}, {})


def test_compare_with_repeats_resamples_cases_and_tests_over_cases() -> None:
    # 10 cases x 5 repeats; B is better on 3 cases every time and worse on 1.
    def side(better: set[int], worse: set[int], b: bool) -> list[TraceRecord]:
        out = []
        for i in range(10):
            score = 1.0 if i % 2 else 0.0
            if b and i in better:
                score = 1.0
            if b and i in worse:
                score = 0.0
            out += [record(f"c{i}", score, repeat=r) for r in range(5)]
        return out

    a, b = side({0, 2, 4}, {1}, False), side({0, 2, 4}, {1}, True)
    result = compare(a, b, SCORER)
    assert (result.n, result.cases, result.clustered) == (50, 10, True)
    assert (result.b_only, result.a_only) == (15, 5)  # counts over (id, repeat) pairs
    # No McNemar over the pairs; the sign-flip test over the 4 cases that differ (+1 three
    # times, -1 once): 10 of the 16 sign patterns have |mean| >= 0.5.
    assert result.mcnemar_p is None and result.test == "cluster-sign-flip"
    assert result.p_value == pytest.approx(10 / 16)
    per_case = [1.0 if i in (0, 2, 4) else -1.0 if i == 1 else 0.0 for i in range(10)]
    # A paired difference keeps the bootstrap (choose=False), and warns: 10 cases.
    clustered = mean_interval(per_case, bounds=(-1.0, 1.0), choose=False)
    naive = mean_interval([d for d in per_case for _ in range(5)], bounds=(-1.0, 1.0), choose=False)
    got = result.difference.interval
    assert result.difference.warning and "over 10 pairs" in result.difference.warning
    assert got is not None and (got.low, got.high) == (clustered.low, clustered.high)
    assert got.method == "cluster-" + clustered.method
    assert got.high - got.low > 1.5 * (naive.high - naive.low)
    # Naively the 50 pairs show B better; the 10 cases do not.
    assert naive.low > 0 and got.low < 0 and result.verdict == "no winner"
    assert result.difference.clusters == 10 and result.pass_rate_a.clusters == 10
    assert any("take cases as units" in note for note in result.notes)
    assert result.to_json()["cases"] == 10
    assert "of 10 cases (repeats" in gate(result).explanation


def test_compare_without_repeats_is_unclustered() -> None:
    a = [record(f"s{i}", float(i % 2)) for i in range(8)]
    b = [record(f"s{i}", 1.0) for i in range(8)]
    result = compare(a, b, SCORER)
    assert (result.cases, result.clustered, result.difference.clusters) == (8, False, None)
    assert result.pass_rate_a == proportion(4, 8)
    assert not any("resample cases" in note for note in result.notes)


def test_summary_prints_pass_at_k_and_pass_hat_k_with_intervals() -> None:
    records = repeated(TABLE)
    text = format_summary(records, summarize(records, [(SCORER, "exact")]), 0.0)
    assert "Repeats: 4 per case, 3 cases; intervals resample cases" in text
    (line,) = [x for x in text.splitlines() if x.startswith("  pass@1 ")]
    assert line.startswith("  pass@1 0.5833 (95% CI ")
    assert "n=3 cases); pass@4 0.6667 (95% CI " in line and "; pass^4 0.3333 (95% CI " in line
    assert "n=12, 3 cases" in text  # the pass rate's interval resamples cases too
    single = [record("x", 1.0), record("y", 0.0)]
    assert "pass@" not in format_summary(single, summarize(single, [(SCORER, "exact")]), 0.0)


def test_manifests_without_repeats_still_read(tmp_path: Path) -> None:
    data = json.loads(manifest().model_dump_json())
    data["scores"] = {
        SCORER: {"type": "exact", "n": 2, "scored": 2, "errors": 0, "mean": 1.0, "passed": 2}
    }
    data.pop("repeats")
    read = parse_manifest(json.dumps(data), tmp_path / "manifest.json")
    assert read.repeats == 1 and read.scores[SCORER].pass_at_k == {}
    figures = summarize(repeated(TABLE), [(SCORER, "exact")]).scorers[SCORER]
    again = type(figures).model_validate_json(figures.model_dump_json())
    assert again.pass_at_k == pytest.approx({1: 1.75 / 3, 2: 2 / 3, 3: 2 / 3, 4: 2 / 3})
