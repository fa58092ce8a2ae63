"""Coverage of gradetrail's printed intervals, by simulation (not a test: prints a table).

    .venv/bin/python -m bench.bench_coverage [--runs 3000] [--only NAME]

Each cell draws `runs` data sets from a population whose true figure is known, computes
the interval gradetrail prints for each (its own functions, default settings) and counts
how often the interval holds the true figure. Cells whose coverage can be computed
exactly (a Wilson interval of a pass rate: a sum over the binomial pmf) are exact and
ignore `runs`. tests/analysis/test_coverage.py runs every cell with fewer runs and
asserts its range; the full-size table is in docs/statistics.md ("Measured coverage").

A cell is generic (a name, a simulate function, the range its coverage must lie in), so
paired and retrieval cells can join `CELLS` with simulate functions of their own.
"""

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradetrail_lib.analysis.calibration import (
    Confusion,
    cohen_kappa,
    few_labels_warning,
    ppi_means,
)
from gradetrail_lib.analysis.retrieval import faithfulness_interval
from gradetrail_lib.analysis.stats.clusters import cluster_proportion
from gradetrail_lib.analysis.stats.intervals import (
    BootstrapSettings,
    Interval,
    mean_interval,
    wilson_bounds,
)
from gradetrail_lib.analysis.stats.repeats import pass_at_k, pass_hat_k

CONFIDENCE = 0.95
# The range for a 95 % interval: not below 93 % (undercover) nor above 98 %
# (so wide it says less than the data do).
NOMINAL = (0.93, 0.98)


@dataclass(frozen=True)
class Outcome:
    """How often the interval held the truth, over `runs` simulated data sets (None:
    computed exactly); the interval methods that were printed, and how many warned."""

    coverage: float
    runs: int | None
    methods: tuple[str, ...] = ()
    warned: int = 0


Simulate = Callable[[int, np.random.Generator, BootstrapSettings], Outcome]


@dataclass(frozen=True)
class Cell:
    name: str
    # simulate(runs, rng, settings) -> Outcome; `settings` for every bootstrap it takes.
    simulate: Simulate
    nominal: tuple[float, float] = NOMINAL
    # Why a cell's range is not NOMINAL (documented in docs/statistics.md).
    note: str = ""
    seed: int = 0


def _outcome(intervals: list[Interval], truth: float) -> Outcome:
    covered = sum(i.low <= truth <= i.high for i in intervals)
    return Outcome(
        coverage=covered / len(intervals),
        runs=len(intervals),
        methods=tuple(sorted({i.method for i in intervals})),
        warned=sum(i.warning is not None for i in intervals),
    )


def wilson_exact(n: int, p: float) -> Simulate:
    """Exact coverage of the Wilson interval of k/n when k ~ Binomial(n, p)."""

    def simulate(runs: int, rng: np.random.Generator, settings: BootstrapSettings) -> Outcome:
        from scipy.stats import binom

        pmf = binom.pmf(np.arange(n + 1), n, p)
        hold = [
            low <= p <= high
            for low, high in (wilson_bounds(k, n, CONFIDENCE) for k in range(n + 1))
        ]
        return Outcome(coverage=float(pmf[np.asarray(hold)].sum()), runs=None, methods=("wilson",))

    return simulate


def _case_rates(rng: np.random.Generator, runs: int, cases: int, mean: float, icc: float) -> Any:
    """Per-case pass chances from Beta(a, b) with mean `mean` and intra-case correlation
    `icc` = 1 / (a + b + 1) between two repeats of a case."""
    total = 1 / icc - 1
    return rng.beta(mean * total, (1 - mean) * total, size=(runs, cases))


def clustered_rate(cases: int, repeats: int, mean: float, icc: float) -> Simulate:
    """The pass rate of a run with repeats (cluster_proportion, as the run summary)."""

    def simulate(runs: int, rng: np.random.Generator, settings: BootstrapSettings) -> Outcome:
        passes = rng.binomial(repeats, _case_rates(rng, runs, cases, mean, icc))
        intervals = []
        for row in passes:
            groups = [[True] * int(c) + [False] * (repeats - int(c)) for c in row]
            estimate = cluster_proportion(groups, CONFIDENCE, settings=settings)
            assert estimate.interval is not None
            intervals.append(estimate.interval)
        return _outcome(intervals, mean)

    return simulate


def at_k(cases: int, trials: int, k: int, mean: float, icc: float, *, every: bool) -> Simulate:
    """pass^k (`every`) or pass@k over cases with `trials` repeats each (repeat_stats'
    interval: `mean_interval` of the per-case unbiased estimates). The truth is the
    population's E[p^k] or E[1 - (1-p)^k] for the Beta case rates, by its moments."""
    total = 1 / icc - 1
    a, b = mean * total, (1 - mean) * total
    # E[p^k] of Beta(a, b) is prod_{j<k} (a + j) / (a + b + j); likewise for 1 - p.
    hat = math.prod((a + j) / (a + b + j) for j in range(k))
    miss = math.prod((b + j) / (a + b + j) for j in range(k))
    truth = hat if every else 1 - miss

    def simulate(runs: int, rng: np.random.Generator, settings: BootstrapSettings) -> Outcome:
        passes = rng.binomial(trials, _case_rates(rng, runs, cases, mean, icc))
        estimator = pass_hat_k if every else pass_at_k
        table = [estimator(trials, c, k) for c in range(trials + 1)]
        intervals = [
            mean_interval([table[int(c)] for c in row], CONFIDENCE, settings=settings)
            for row in passes
        ]
        return _outcome(intervals, truth)

    return simulate


def score_mean(
    n: int, draw: Callable[[np.random.Generator, tuple[int, int]], Any], truth: float
) -> Simulate:
    """The mean score of n samples (mean_estimate, as the run summary), values in [0, 1]."""

    def simulate(runs: int, rng: np.random.Generator, settings: BootstrapSettings) -> Outcome:
        values = draw(rng, (runs, n))
        return _outcome(
            [mean_interval(row.tolist(), CONFIDENCE, settings=settings) for row in values], truth
        )

    return simulate


def sparse(share: float) -> Callable[[np.random.Generator, tuple[int, int]], Any]:
    """A share of values non-zero, uniform on (0, 1]; the rest 0. Mean share / 2."""

    def draw(rng: np.random.Generator, size: tuple[int, int]) -> Any:
        return (rng.random(size) < share) * (1 - rng.random(size))

    return draw


def skewed(rng: np.random.Generator, size: tuple[int, int]) -> Any:
    """Beta(0.5, 3): most scores near 0, a long right tail (skewness 1.6); mean 1/7."""
    return rng.beta(0.5, 3.0, size)


def heavy(sigma: float, scale: float) -> Callable[[np.random.Generator, tuple[int, int]], Any]:
    """min(1, lognormal(0, sigma) / scale): a few scores far above the rest."""

    def draw(rng: np.random.Generator, size: tuple[int, int]) -> Any:
        return np.minimum(rng.lognormal(0.0, sigma, size) / scale, 1.0)

    return draw


def heavy_mean(sigma: float, scale: float) -> float:
    """E[min(1, L / scale)] for L ~ lognormal(0, sigma), in closed form:
    e^(sigma^2 / 2) Phi(a - sigma) / scale + P(L >= scale), a = ln(scale) / sigma."""
    from scipy.stats import norm

    a = math.log(scale) / sigma
    return float(math.exp(sigma**2 / 2) * norm.cdf(a - sigma) / scale + norm.sf(a))


def faithfulness(records: int, mean: float, icc: float) -> Simulate:
    """Citation faithfulness over `records` answers of 1-5 citations each, citations of
    one answer correlated (faithfulness_interval, as the retrieval summary)."""

    def simulate(runs: int, rng: np.random.Generator, settings: BootstrapSettings) -> Outcome:
        cited = rng.integers(1, 6, size=(runs, records))
        supported = rng.binomial(cited, _case_rates(rng, runs, records, mean, icc))
        intervals = [
            faithfulness_interval(
                list(zip(s.tolist(), c.tolist(), strict=True)),
                CONFIDENCE,
                settings=settings,
            )
            for s, c in zip(supported, cited, strict=True)
        ]
        return _outcome(intervals, mean)

    return simulate


def judged_run(
    rng: np.random.Generator, runs: int, records: int, p: float, sensitivity: float,
    specificity: float,
) -> tuple[Any, Any]:
    """`runs` runs of `records` records, each passing with chance `p` (the truth), and a
    judge that passes a passing record with chance `sensitivity` and fails a failing one
    with chance `specificity`: (truth, verdicts), boolean arrays (runs, records)."""
    truth = rng.random((runs, records)) < p
    right = rng.random((runs, records)) < np.where(truth, sensitivity, specificity)
    return truth, np.where(right, truth, ~truth)


def corrected_rate(
    labelled: int, records: int, p: float, sensitivity: float, specificity: float
) -> Simulate:
    """The corrected pass rate (PPI++ mean, as `gradetrail calibrate`): `labelled` random
    records of a run of `records` carry a human label, the rest the judge's verdict only.
    The truth is the population's pass rate p."""

    def simulate(runs: int, rng: np.random.Generator, settings: BootstrapSettings) -> Outcome:
        truth, judged = judged_run(rng, runs, records, p, sensitivity, specificity)
        value, half, _, _, _ = ppi_means(
            truth[:, :labelled], judged[:, :labelled], judged[:, labelled:], CONFIDENCE
        )
        intervals = [
            Interval(
                float(v - h), float(v + h), CONFIDENCE, "ppi++-mean", few_labels_warning(labelled)
            )
            for v, h in zip(value, half, strict=True)
        ]
        return _outcome(intervals, p)

    return simulate


def population_kappa(p: float, sensitivity: float, specificity: float) -> float:
    """Cohen's kappa of the person (truth) and the judge over the whole population."""
    agree = p * sensitivity + (1 - p) * specificity
    judge_pass = p * sensitivity + (1 - p) * (1 - specificity)
    chance = p * judge_pass + (1 - p) * (1 - judge_pass)
    return (agree - chance) / (1 - chance)


def kappa_interval(labelled: int, p: float, sensitivity: float, specificity: float) -> Simulate:
    """Cohen's kappa's interval (Fleiss-Cohen-Everitt) over `labelled` labels."""

    def simulate(runs: int, rng: np.random.Generator, settings: BootstrapSettings) -> Outcome:
        truth, judged = judged_run(rng, runs, labelled, p, sensitivity, specificity)
        intervals = []
        for t, j in zip(truth, judged, strict=True):
            confusion = Confusion(
                tp=int((t & j).sum()), fp=int((~t & j).sum()),
                fn=int((t & ~j).sum()), tn=int((~t & ~j).sum()),
            )
            kappa = cohen_kappa(confusion, CONFIDENCE)
            if kappa.low is None or kappa.high is None:  # one class only: nothing printed
                continue
            intervals.append(
                Interval(kappa.low, kappa.high, CONFIDENCE, kappa.method, kappa.warning)
            )
        return _outcome(intervals, population_kappa(p, sensitivity, specificity))

    return simulate


CELLS: list[Cell] = [
    *(
        Cell(name=f"pass rate, wilson, n={n}, p={p}", simulate=wilson_exact(n, p))
        for n in (10, 30, 100, 500)
        for p in (0.5, 0.8)
    ),
    *(
        Cell(
            name=f"pass rate, {cases} cases x 5 repeats, icc 0.5, p={p}",
            simulate=clustered_rate(cases, 5, p, 0.5),
            seed=seed,
        )
        for seed, (cases, p) in enumerate(((30, 0.5), (30, 0.8), (100, 0.5), (100, 0.8)))
    ),
    Cell(
        name="pass^5, 50 cases x 5 repeats, icc 0.5, p=0.8",
        simulate=at_k(50, 5, 5, 0.8, 0.5, every=True),
        seed=11,
    ),
    Cell(
        name="pass@5, 50 cases x 5 repeats, icc 0.5, p=0.5",
        simulate=at_k(50, 5, 5, 0.5, 0.5, every=False),
        seed=12,
    ),
    Cell(
        name="pass^10, 50 cases x 20 repeats, icc 0.5, p=0.8",
        simulate=at_k(50, 20, 10, 0.8, 0.5, every=True),
        seed=13,
    ),
    # Cases alike (icc 0.05) that rarely pass ten times in twenty: pass^10 is carried
    # by a few cases; a bootstrap of the per-case values covered 79 % here.
    Cell(
        name="pass^10, 50 cases x 20 repeats, icc 0.05, p=0.5",
        simulate=at_k(50, 20, 10, 0.5, 0.05, every=True),
        nominal=(0.93, 1.0),
        note="the score interval at n cases: conservative",
        seed=15,
    ),
    Cell(
        name="pass^10, 50 cases x 20 repeats, icc 0.02, p=0.65",
        simulate=at_k(50, 20, 10, 0.65, 0.02, every=True),
        nominal=(0.93, 1.0),
        note="the score interval at n cases: conservative",
        seed=16,
    ),
    Cell(
        name="pass@10, 50 cases x 20 repeats, icc 0.5, p=0.3",
        simulate=at_k(50, 20, 10, 0.3, 0.5, every=False),
        seed=14,
    ),
    *(
        Cell(
            name=f"mean score, 10% non-zero, n={n}",
            simulate=score_mean(n, sparse(0.1), 0.05),
            seed=20 + n,
        )
        for n in (20, 50, 200)
    ),
    *(
        Cell(
            name=f"mean score, skewed beta(0.5, 3), n={n}",
            simulate=score_mean(n, skewed, 1 / 7),
            seed=30 + n,
        )
        for n in (20, 50, 100)
    ),
    Cell(
        name="mean score, heavy-tailed lognormal(0, 1), n=20",
        simulate=score_mean(20, heavy(1.0, 20), heavy_mean(1.0, 20)),
        seed=40,
    ),
    Cell(
        name="mean score, heavy-tailed lognormal(0, 1.5), n=20",
        simulate=score_mean(20, heavy(1.5, 50), heavy_mean(1.5, 50)),
        nominal=(0.8, 0.98),
        note="no method here covers so heavy a tail at n = 20; the skewed samples warn",
        seed=41,
    ),
    Cell(
        name="faithfulness, 30 records, 1-5 citations, icc 0.5, p=0.8",
        simulate=faithfulness(30, 0.8, 0.5),
        seed=50,
    ),
    Cell(
        name="faithfulness, 100 records, 1-5 citations, icc 0.5, p=0.8",
        simulate=faithfulness(100, 0.8, 0.5),
        seed=51,
    ),
    # A judge that passes 20 % of bad answers (specificity 0.8) turns a true 70 % into
    # 76 %, and the judge's own interval never holds the truth
    # (tests/analysis/test_calibration.py); the corrected one does, given labels enough.
    Cell(
        name="corrected pass rate, ppi++, 100 random labels of 1000, p=0.7, sens 0.9, spec 0.8",
        simulate=corrected_rate(100, 1000, 0.7, 0.9, 0.8),
        seed=60,
    ),
    Cell(
        name="corrected pass rate, ppi++, 100 random labels of 1000, p=0.5, sens 0.9, spec 0.7",
        simulate=corrected_rate(100, 1000, 0.5, 0.9, 0.7),
        seed=61,
    ),
    Cell(
        name="corrected pass rate, ppi++, 300 random labels of 1000, p=0.7, sens 1, spec 0.8",
        simulate=corrected_rate(300, 1000, 0.7, 1.0, 0.8),
        seed=62,
    ),
    Cell(
        name="corrected pass rate, ppi++, 30 random labels of 1000, p=0.7, sens 1, spec 0.8",
        simulate=corrected_rate(30, 1000, 0.7, 1.0, 0.8),
        nominal=(0.75, 0.98),
        note="a normal interval on few labels and fewer disagreements: below 100 labels it warns",
        seed=63,
    ),
    Cell(
        name="judge kappa, fleiss-cohen-everitt, 200 labels, p=0.7, sens 0.9, spec 0.8",
        simulate=kappa_interval(200, 0.7, 0.9, 0.8),
        seed=70,
    ),
    Cell(
        name="judge kappa, fleiss-cohen-everitt, 30 labels, p=0.7, sens 0.9, spec 0.8",
        simulate=kappa_interval(30, 0.7, 0.9, 0.8),
        nominal=(0.88, 0.98),
        note="a normal interval on 30 labels: below 200 labels it warns",
        seed=71,
    ),
]


def run_cell(cell: Cell, runs: int, settings: BootstrapSettings | None = None) -> Outcome:
    """`cell` over `runs` data sets from its fixed seed; bootstraps with `settings`
    (default: gradetrail's, 9,999 resamples)."""
    return cell.simulate(runs, np.random.default_rng(cell.seed), settings or BootstrapSettings())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--only", default="", help="cells whose name contains this")
    args = parser.parse_args()
    print("| cell | coverage | runs | method | warned | note |\n|---|---|---|---|---|---|")
    for cell in CELLS:
        if args.only not in cell.name:
            continue
        started = time.perf_counter()
        out = run_cell(cell, args.runs)
        lo, hi = cell.nominal
        flag = "" if lo <= out.coverage <= hi else " **outside**"
        runs = "exact" if out.runs is None else str(out.runs)
        note = cell.note + (f" (range {lo:.0%}-{hi:.0%})" if cell.nominal != NOMINAL else "")
        print(
            f"| {cell.name} | {out.coverage:.1%}{flag} | {runs} | {', '.join(out.methods)} "
            f"| {out.warned} | {note} |  <!-- {time.perf_counter() - started:.1f}s -->",
            flush=True,
        )


if __name__ == "__main__":
    main()
