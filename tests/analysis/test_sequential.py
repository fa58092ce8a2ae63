"""The sequential release verdict (`stats.sequential`): its parts on data whose answer is
known, and its error rates by simulation with fixed seeds (bench/bench_sequential.py's
cells with fewer runs; the full-size table is in docs/rankings.md).

Under continuous monitoring (a look after every 50 of 2,000 cases) the confidence
sequence names a winner where there is none at most 5 % of the time, plus twice the
simulation's standard error, where stopping at the first McNemar rejection does far more
often; at true differences of 0.10 and 0.20 it finds the winner nearly always on a
fraction of the cases."""

import numpy as np
import pytest

from bench.bench_sequential import ALPHA, CASES, error, run_cell
from gradetrail_lib.analysis.stats.sequential import (
    METHOD,
    bets,
    chunk_looks,
    decide,
    decide_many,
    sequence_bounds,
)


def test_the_bet_is_predictable() -> None:
    """Case i's bet reads only the cases before it: changing case i changes no bet up
    to and including i."""
    rng = np.random.default_rng(0)
    x = rng.random(50)
    changed = x.copy()
    changed[20] = 1 - changed[20]
    a, b = bets(x, 0.05), bets(changed, 0.05)
    assert np.array_equal(a[:21], b[:21]) and not np.array_equal(a[21:], b[21:])


def test_a_clear_difference_is_decided_and_its_interval_excludes_zero() -> None:
    d = [1.0] * 30 + [0.0] * 70  # B wins 30 of 100 cases, A none
    decision = decide(d, available=1000, looks_so_far=2, budget_spent=False)
    assert decision is not None and decision.verdict == "B"
    assert 0 < decision.low < 0.3 < decision.high
    assert decision.method == METHOD and METHOD in decision.describe()
    body = decision.to_json()
    assert body["cases_used"] == 100 and body["confidence_sequence"]["method"] == METHOD
    mirrored = decide([-v for v in d], available=1000, looks_so_far=2, budget_spent=False)
    assert mirrored is not None and mirrored.verdict == "A"
    assert mirrored.high == pytest.approx(-decision.low, abs=1e-6)


def test_no_evidence_goes_on_until_the_budget_then_is_undecided() -> None:
    d = [1.0, -1.0, 0.0, 0.0] * 10
    assert decide(d, available=100, looks_so_far=1, budget_spent=False) is None
    decision = decide(d, available=100, looks_so_far=4, budget_spent=True)
    assert decision is not None and decision.verdict == "undecided"
    assert decision.low < 0 < decision.high


def test_many_ties_are_equivalent_within_a_margin() -> None:
    d = [0.0] * 400 + [1.0, -1.0] * 5
    decision = decide(d, available=1000, looks_so_far=3, budget_spent=False, margin=0.05)
    assert decision is not None and decision.verdict == "equivalent"
    assert -0.05 < decision.low < 0 < decision.high < 0.05


def test_decide_many_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        decide_many(np.array([[2.0, 0.0]]), [2])
    with pytest.raises(ValueError, match="increasing"):
        decide_many(np.zeros((1, 10)), [5, 5])
    with pytest.raises(ValueError, match="1..10"):
        decide_many(np.zeros((1, 10)), [11])
    assert chunk_looks(120, 50) == [50, 100, 120]


def test_the_bounds_agree_with_the_decision_at_every_look() -> None:
    """Where the rule says B (or A), the interval excludes 0 on that side; where it goes
    on, the interval holds 0: the verdict and the interval printed never disagree."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        d = np.where(rng.random(300) < 0.1, -1.0, np.where(rng.random(300) < 0.2, 1.0, 0.0))
        verdicts, used = decide_many(d[None, :], [300])
        low, high = sequence_bounds(list(d), ALPHA)
        assert (verdicts[0] == "B") == (low > 0)
        assert (verdicts[0] == "A") == (high < 0)


def test_type_i_error_under_continuous_monitoring() -> None:
    runs = 1000
    out = run_cell(0.0, runs, seed=0)
    assert out.winner <= ALPHA + error(ALPHA, runs), out
    # Stopping at the first McNemar rejection, 40 looks: far above alpha.
    assert out.naive_winner > 3 * ALPHA, out
    # Nothing is equivalent within 0.02 at 2,000 cases: the rest run to the budget.
    assert out.equivalent == 0 and out.mean_cases > 0.95 * CASES


@pytest.mark.parametrize(
    ("delta", "power", "mean_share"), [(0.05, 0.55, 0.75), (0.10, 0.97, 0.3), (0.20, 0.99, 0.1)]
)
def test_power_and_cases_saved(delta: float, power: float, mean_share: float) -> None:
    """At a true difference of 0.10 or 0.20 the sequential verdict names B nearly always
    on a fraction of the 2,000 cases; at 0.05 it costs power against McNemar on all 2,000
    (the price of stopping whenever), still saving cases on average."""
    runs = 300
    out = run_cell(delta, runs, seed=int(delta * 100))
    assert out.right >= power, out
    assert out.mean_cases <= mean_share * CASES, out
    assert out.winner == out.right  # never the wrong winner
    assert out.fixed_power >= out.right - error(0.5, runs)


def test_equivalence_is_rarely_claimed_for_a_real_difference() -> None:
    """A true difference of 0.05 with a margin of 0.05: "equivalent" is an error, at most
    alpha of the time."""
    runs = 500
    out = run_cell(0.05, runs, seed=11, margin=0.05)
    assert out.equivalent <= ALPHA + error(ALPHA, runs), out
