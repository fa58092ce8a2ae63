"""Intervals against independently known values: published tables, closed forms and
the beta-quantile definition of Clopper-Pearson, never against the code's own output."""

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import beta, binomtest, norm

from gradetrail_lib.analysis.stats import (
    BootstrapSettings,
    mean_estimate,
    mean_interval,
    proportion,
    proportion_interval,
)
from gradetrail_lib.analysis.stats import run_stats as run_stats_on
from gradetrail_lib.analysis.stats.run_stats import RunStats, latency_of
from gradetrail_lib.analysis.summary import format_summary, summarize
from gradetrail_lib.results.trace import (
    FailureMode,
    Outcome,
    TraceRecord,
    parse_record,
    record_json,
)
from tests.conftest import REPO
from tests.support.traces import SCORER, record


def wilson_closed_form(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson (1927): (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    z = norm.ppf(1 - (1 - confidence) / 2)
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    return (centre - spread) / denom, (centre + spread) / denom


def clopper_pearson_by_beta(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (1934) as beta quantiles: B(α/2; k, n-k+1), B(1-α/2; k+1, n-k)."""
    alpha = 1 - confidence
    low = 0.0 if k == 0 else beta.ppf(alpha / 2, k, n - k + 1)
    high = 1.0 if k == n else beta.ppf(1 - alpha / 2, k + 1, n - k)
    return float(low), float(high)


# Newcombe (1998), "Two-sided confidence intervals for the single proportion: comparison
# of seven methods", Statistics in Medicine 17:857-872, Table II: 95% intervals, method 3
# (Wilson score, no continuity correction) and method 5 (exact Clopper-Pearson).
NEWCOMBE_1998 = [
    # k, n, Wilson, Clopper-Pearson
    (81, 263, (0.2553, 0.3662), (0.2527, 0.3676)),
    (15, 148, (0.0624, 0.1605), (0.0578, 0.1617)),
    (0, 20, (0.0000, 0.1611), (0.0000, 0.1684)),
    (1, 29, (0.0061, 0.1718), (0.0009, 0.1776)),
]


@pytest.mark.parametrize(("k", "n", "wilson", "exact"), NEWCOMBE_1998)
def test_published_wilson_and_clopper_pearson(
    k: int, n: int, wilson: tuple[float, float], exact: tuple[float, float]
) -> None:
    w = proportion_interval(k, n, 0.95, "wilson")
    cp = proportion_interval(k, n, 0.95, "exact")
    assert (round(w.low, 4), round(w.high, 4)) == wilson
    assert (round(cp.low, 4), round(cp.high, 4)) == exact


# Small cases, the literals worked out by hand from the closed forms above (z = 1.959964):
# 0/5: Wilson upper = z²/(n+z²) = 3.8415/8.8415; 5/5 mirrors it; CP 0/5 upper = 1-0.025^(1/5).
SMALL_CASES = [
    (0, 5, (0.0, 0.434482), (0.0, 0.521824)),
    (5, 5, (0.565518, 1.0), (0.478176, 1.0)),
    (3, 10, (0.107791, 0.603222), (0.066740, 0.652453)),
]


@pytest.mark.parametrize(("k", "n", "wilson", "exact"), SMALL_CASES)
def test_small_cases_match_literals_and_independent_formulas(
    k: int, n: int, wilson: tuple[float, float], exact: tuple[float, float]
) -> None:
    w = proportion_interval(k, n, method="wilson")
    cp = proportion_interval(k, n, method="exact")
    assert w.low == pytest.approx(wilson[0], abs=1e-6)
    assert w.high == pytest.approx(wilson[1], abs=1e-6)
    assert cp.low == pytest.approx(exact[0], abs=1e-6)
    assert cp.high == pytest.approx(exact[1], abs=1e-6)
    assert (w.low, w.high) == pytest.approx(wilson_closed_form(k, n), abs=1e-12)
    assert (cp.low, cp.high) == pytest.approx(clopper_pearson_by_beta(k, n), abs=1e-12)


def test_all_pass_and_all_fail_give_a_real_interval_not_a_point() -> None:
    for k, n in ((0, 5), (5, 5), (0, 1), (1, 1), (40, 40)):
        est = proportion(k, n)
        assert est.interval is not None and est.n == n and est.successes == k
        assert est.interval.high - est.interval.low > 0.05
        assert est.interval.contains(k / n)


def test_confidence_level_is_used() -> None:
    narrow = proportion_interval(3, 10, 0.80)
    wide = proportion_interval(3, 10, 0.99)
    assert (narrow.low, narrow.high) == pytest.approx(wilson_closed_form(3, 10, 0.80))
    assert (wide.low, wide.high) == pytest.approx(wilson_closed_form(3, 10, 0.99))
    assert wide.high - wide.low > narrow.high - narrow.low
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        proportion_interval(3, 10, 1.0)
    with pytest.raises(ValueError, match="method"):
        proportion_interval(3, 10, method="wald")  # type: ignore[arg-type]


def test_empty_has_no_value_but_says_n() -> None:
    est = proportion(0, 0)
    assert est.value is None and est.interval is None and est.n == 0
    assert est.format() == "n/a (n=0)"


def test_mean_of_binary_scores_is_the_proportion_interval() -> None:
    scores = [1.0] * 7 + [0.0] * 3
    interval = mean_interval(scores)
    assert interval.method == "wilson"
    assert (interval.low, interval.high) == pytest.approx(wilson_closed_form(7, 10))


def test_mean_of_graded_scores_bootstraps_reproducibly() -> None:
    # 36 spread-out scores: enough for the bootstrap (below 30, `score_method` picks the
    # effective-n interval: tests/analysis/test_score_method.py).
    scores = [0.1, 0.4, 0.35, 0.8, 0.9, 0.55, 0.6, 0.2, 0.75, 0.5, 0.45, 0.65] * 3
    first = mean_estimate(scores)
    again = mean_estimate(scores)
    other_seed = mean_estimate(scores, settings=BootstrapSettings(seed=1))
    assert first.interval == again.interval, "a fixed seed gives the same interval"
    assert first.interval is not None and other_seed.interval is not None
    assert first.value is not None
    assert first.interval.method == "bootstrap-bca"
    assert first.value == pytest.approx(sum(scores) / len(scores))
    assert first.interval.low < first.value < first.interval.high
    # Sanity against the normal approximation: same centre, similar width.
    sd = (sum((s - first.value) ** 2 for s in scores) / (len(scores) - 1)) ** 0.5
    half = 1.96 * sd / len(scores) ** 0.5
    width = first.interval.high - first.interval.low
    assert 0.7 * 2 * half < width < 1.3 * 2 * half
    assert abs(other_seed.interval.low - first.interval.low) < 0.03


def test_percentile_bootstrap_above_bca_limit() -> None:
    scores = [0.25, 0.5, 0.75, 1.0] * 10
    interval = mean_interval(scores, settings=BootstrapSettings(bca_max_n=10))
    assert interval.method == "bootstrap-percentile"
    assert interval.low < 0.625 < interval.high


def test_all_equal_and_single_scores_get_an_honest_bound() -> None:
    # All equal at s: at least a Wilson-lower-bound share p of the population is at s,
    # the rest anywhere in [0, 1]: [s·p, s·p + 1 - p].
    p = wilson_closed_form(4, 4)[0]
    interval = mean_interval([0.5] * 4)
    assert interval.method == "wilson-bound"
    assert (interval.low, interval.high) == pytest.approx((0.5 * p, 0.5 * p + 1 - p))
    single = mean_estimate([0.5])
    assert single.n == 1 and single.interval is not None
    p1 = wilson_closed_form(1, 1)[0]
    assert (single.interval.low, single.interval.high) == pytest.approx(
        (0.5 * p1, 0.5 * p1 + 1 - p1)
    )
    # For 0/1 scores the bound is exactly the proportion interval.
    ones = mean_interval([1.0] * 6)
    assert (ones.low, ones.high) == pytest.approx(wilson_closed_form(6, 6))
    zeros = mean_interval([0.0] * 6, method="exact")
    assert (zeros.low, zeros.high) == pytest.approx(clopper_pearson_by_beta(0, 6))


def test_run_stats_counts_unscored_as_failures_and_leaves_them_out_of_the_mean() -> None:
    rows = [
        _row("a", 1.0),
        _row("b", 1.0),
        _row("c", 0.0, failure_mode="truncated", stop_reason="max_tokens"),
        _row("d", None, outcome="provider_error", failure_mode="provider_error", answered=False),
        _row("e", None, outcome="scorer_error", failure_mode="scorer_error"),
    ]
    stats = run_stats(rows)
    assert stats.scorer == SCORER
    assert stats.samples == 5 and stats.unscored == 2 and stats.truncated == 1
    assert stats.pass_rate.successes == 2 and stats.pass_rate.n == 5
    assert stats.mean_score.n == 3 and stats.mean_score.value == pytest.approx(2 / 3)
    assert stats.outcomes == {
        "scored": 3, "provider_error": 1, "scorer_error": 1, "judge_error": 0,
    }  # fmt: skip
    assert stats.failure_modes == {"provider_error": 1, "scorer_error": 1, "truncated": 1}
    assert stats.input_tokens == 40 and stats.output_tokens == 8  # 4 answered calls
    line = summary_line(rows)
    assert "pass rate (score >= 1) 2/5 = 0.4000" in line
    assert "n=5" in line and "n=3" in line and "2 unscored count as failures" in line


def test_run_stats_reads_the_named_scorer_only() -> None:
    rows = [record(f"s{i}", {"num": 1.0, "judge": 1.0 if i < 3 else None}) for i in range(4)]
    num, judge = run_stats_on(rows, "num"), run_stats_on(rows, "judge")
    assert (num.pass_rate.successes, num.unscored) == (4, 0)
    assert (judge.pass_rate.successes, judge.pass_rate.n, judge.unscored) == (3, 4, 1)
    assert judge.mean_score.n == 3


def test_latency_percentiles() -> None:
    rows = [_row(f"s{i}", 1.0, latency=float(i)) for i in range(1, 101)]
    latency = run_stats(rows).latency
    assert latency.n == 100
    # numpy's default (linear) percentile of 1..100.
    assert (latency.p50, latency.p90, latency.p99) == pytest.approx((50.5, 90.1, 99.01))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1001])
def test_latency_percentiles_match_numpy_on_random_data(n: int) -> None:
    rng = np.random.default_rng(n)
    values = list(rng.lognormal(0.0, 1.0, n))
    latency = latency_of(values)
    expected = np.percentile(values, [50, 90, 99])
    assert (latency.p50, latency.p90, latency.p99) == pytest.approx(list(expected), rel=1e-12)


def test_wilson_equals_scipy_over_a_grid() -> None:
    """The Wilson interval is written out (see stats.intervals); scipy is the reference.
    One `binomtest` per (k, n), read at every confidence: building it (its p-value) is
    what costs, not `proportion_ci`."""
    for n in [*range(1, 41), 97, 500, 1319, 10_000]:
        ks = range(n + 1) if n <= 40 else sorted({0, 1, 2, n // 3, n // 2, n - 1, n})
        for k in ks:
            reference = binomtest(k, n)
            for confidence in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
                ours = proportion_interval(k, n, confidence, "wilson")
                ci = reference.proportion_ci(confidence_level=confidence, method="wilson")
                assert ours.low == pytest.approx(float(ci.low), abs=1e-12), (k, n, confidence)
                assert ours.high == pytest.approx(float(ci.high), abs=1e-12), (k, n, confidence)


def test_a_run_summary_imports_neither_scipy_nor_numpy() -> None:
    # Each costs a large share of the CLI's start-up; a binary-scored run needs neither.
    code = (
        "import sys\n"
        "from gradetrail_lib.analysis.stats import run_stats, describe\n"
        "from tests.support.traces import record\n"
        "rows = [record(str(i), float(i % 2)) for i in range(50)]\n"
        "print(describe(run_stats(rows, 's').pass_rate))\n"
        "print(sorted(m for m in ('scipy', 'numpy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("25/50 = 0.5000 (95% CI")
    assert second == "[]"


def test_threshold_decides_pass() -> None:
    rows = [_row("a", 0.7), _row("b", 0.9), _row("c", 0.4)]
    assert run_stats(rows).pass_rate.successes == 0
    assert run_stats(rows, threshold=0.7).pass_rate.successes == 2


def run_stats(rows: list[TraceRecord], threshold: float = 1.0) -> RunStats:
    return run_stats_on(rows, SCORER, threshold=threshold)


def summary_line(rows: list[TraceRecord]) -> str:
    """The scorer's line of what `gradetrail run` prints."""
    text = format_summary(rows, summarize(rows, [(SCORER, "exact")]), 0.0)
    (line,) = [x for x in text.splitlines() if x.startswith(f"Scorer {SCORER} ")]
    return line


def _row(
    sample_id: str,
    score: float | None,
    *,
    outcome: Outcome = "scored",
    failure_mode: FailureMode | None = None,
    stop_reason: str | None = "stop",
    answered: bool = True,
    latency: float = 0.1,
) -> TraceRecord:
    return record(
        sample_id,
        score,
        outcome=outcome,
        failure_mode=failure_mode,
        stop_reason=stop_reason,
        answered=answered,
        latency_s=latency,
    )


def test_records_in_memory_give_the_same_figures_as_records_read_back() -> None:
    """What the Dagster assets do (records as built) against what the CLI does (records
    parsed from results.jsonl): the same figures."""
    rows = [
        record("a", 1.0, latency_s=0.5),
        record("b", 0.0, failure_mode="wrong_answer", latency_s=0.7),
        record("c", None, failure_mode="scorer_error"),
    ]
    read_back = [parse_record(record_json(r), REPO / "results.jsonl", i) for i, r in
                 enumerate(rows, start=1)]  # fmt: skip
    assert read_back == rows
    in_memory = run_stats(rows)
    assert in_memory == run_stats(read_back)
    assert in_memory.pass_rate.successes == 1 and in_memory.pass_rate.n == 3
    assert in_memory.input_tokens == 30
    assert summary_line(rows) == summary_line(read_back)
