"""Family-wise error and joint coverage of the ranking, by simulation: every cell of
bench/bench_ranking.py with fewer runs and fixed seeds (the bench's full-size table is
in docs/statistics.md).

Under the global null (K = 4 and 8 models, with and without repeats) some pair is
separated at most 5 % of the time, plus twice the simulation's standard error, while the
naive rule (every pair's `compare` verdict at 0.05) names a winner far more often; with
ties and gaps every model's rank interval holds its true rank at once at least 95 % of
the time, less twice the standard error. Bootstraps take 999 resamples here.
"""

import math

import pytest

from bench.bench_ranking import ALPHA, CELLS, RankCell, error, holds, run_cell
from gradetrail_lib.analysis.stats.intervals import BootstrapSettings

SETTINGS = BootstrapSettings(n_resamples=999)
# Runs per cell: enough for a 2-standard-error band of about 2.5-3.5 points at 5 %, in
# a few seconds a cell (a cell with repeats runs a sign-flip test per pair).
RUNS = {
    "null, K=4, 200 cases, no repeats": 400,
    "null, K=8, 200 cases, no repeats": 300,
    "null, K=4, 40 cases x 5 repeats": 150,
    "null, K=8, 40 cases x 5 repeats": 150,
    "ties and gaps, K=6, 300 cases, no repeats": 200,
    "ties and gaps, K=6, 60 cases x 5 repeats": 120,
}


@pytest.mark.parametrize("cell", CELLS, ids=[c.name for c in CELLS])
def test_ranking_holds_its_error_rate(cell: RankCell) -> None:
    runs = RUNS[cell.name]
    outcome = run_cell(cell, runs, SETTINGS, naive=cell.kind == "fwer")
    assert holds(cell, outcome), f"{cell.name}: {outcome}"
    if cell.kind == "fwer":
        # The naive rule does not hold: beside the figure, far above alpha.
        assert outcome.naive > ALPHA + error(ALPHA, runs), f"{cell.name}: {outcome}"
    else:
        # The intervals are not trivially wide: some true differences are found.
        assert outcome.power is not None and outcome.power > 0.3
        assert outcome.length is not None and outcome.length < len(cell.rates)


def test_the_cells_are_the_issues() -> None:
    kinds = {(len(c.rates), c.repeats > 1) for c in CELLS if c.kind == "fwer"}
    assert kinds == {(4, False), (8, False), (4, True), (8, True)}
    coverage = [c for c in CELLS if c.kind == "coverage"]
    # Ties (two models with one rate) and gaps (distinct rates) in each coverage cell.
    for cell in coverage:
        assert len(set(cell.rates)) < len(cell.rates) and len(set(cell.rates)) > 1
    assert set(RUNS) == {c.name for c in CELLS}


def test_holds_rejects_a_figure_out_of_range() -> None:
    from bench.bench_ranking import RankOutcome

    null = next(c for c in CELLS if c.kind == "fwer")
    cover = next(c for c in CELLS if c.kind == "coverage")
    assert not holds(null, RankOutcome(0.10, 0.3, 400))
    assert holds(null, RankOutcome(0.05, 0.3, 400))
    assert not holds(cover, RankOutcome(0.85, 0.8, 400))
    assert holds(cover, RankOutcome(0.96, math.nan, 400))
