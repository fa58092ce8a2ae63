"""Coverage as tests: every cell of bench/bench_coverage.py, with fewer simulated runs.

Each cell simulates data sets from a population whose true figure is known, computes the
interval gradetrail prints (its own functions) and asserts how often it holds the truth:
within [93 %, 98 %] for a 95 % interval unless the cell documents another range (a
conservative method, or heavy tails no method covers; docs/statistics.md). Exact cells
(a Wilson pass rate: a sum over the binomial pmf) are exact at any size. Seeds are fixed,
so a run's figures are the same every time; the bench runs the same cells at 2,000+
runs for the table in the docs.

Here a cell has RUNS data sets, and its bootstraps 999 resamples instead of 9,999: the
same method, whose coverage does not move with the resample count at this precision,
at a tenth of the cost (the whole module takes seconds).
"""

import pytest

from bench.bench_coverage import CELLS, NOMINAL, Cell, run_cell
from gradetrail_lib.analysis.stats.intervals import BootstrapSettings

RUNS = 400
SETTINGS = BootstrapSettings(n_resamples=999)


@pytest.mark.parametrize("cell", CELLS, ids=[c.name for c in CELLS])
def test_cell_covers(cell: Cell) -> None:
    outcome = run_cell(cell, RUNS, SETTINGS)
    low, high = cell.nominal
    assert low <= outcome.coverage <= high, (
        f"{cell.name}: coverage {outcome.coverage:.1%} over {outcome.runs or 'exact'} runs "
        f"outside [{low:.0%}, {high:.0%}] (methods {outcome.methods})"
    )


def test_the_grid_has_the_cells_the_issue_names() -> None:
    names = " | ".join(c.name for c in CELLS)
    for wanted in (
        "pass rate, wilson, n=10,",
        "pass rate, wilson, n=500,",
        "30 cases x 5 repeats, icc 0.5",
        "100 cases x 5 repeats, icc 0.5",
        "pass^10, 50 cases x 20 repeats",
        "pass@10",
        "10% non-zero, n=20",
        "skewed beta(0.5, 3), n=20",
        "faithfulness, 30 records",
    ):
        assert wanted in names
    # Every cell outside the nominal range says why.
    assert all(c.note for c in CELLS if c.nominal != NOMINAL)


def test_where_no_method_covers_the_figure_warns() -> None:
    """The very heavy tail at n = 20 (no method covers it): a share of its samples are
    skewed enough to warn, and they are the ones the interval misses most."""
    (cell,) = [c for c in CELLS if "lognormal(0, 1.5)" in c.name]
    outcome = run_cell(cell, RUNS, SETTINGS)
    assert outcome.warned > 0
