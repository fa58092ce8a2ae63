"""Family-wise error and joint coverage of gradetrail's rankings, by simulation (not a
test: prints a table).

    .venv/bin/python -m bench.bench_ranking [--runs 2000] [--only NAME]

Each cell simulates K models answering the same cases (optionally with repeats) from a
population whose true pass rates are known, ranks them with `stats.ranking.rank` (the
paired tests `compare` uses, Holm's step-down over every pair, rank intervals) and counts

* "fwer" cells (every model the same): how often some pair is separated (the family-wise
  error; nominal at most 5 %), and beside it the naive rule, how often some pair's
  `compare` verdict names a winner at alpha = 0.05 unadjusted (the leaderboard's rule
  before step 17);
* "coverage" cells (ties and gaps): how often every model's rank interval holds its true
  rank at once (the joint coverage; nominal at least 95 %), and beside it the same
  intervals built from the unadjusted verdicts; also how many true differences were
  separated (power) and the mean interval length.

tests/analysis/test_ranking_simulation.py runs every cell with fewer runs and asserts
its figure; the full-size table is in docs/statistics.md and docs/rankings.md.

The data: case c has a difficulty z_c ~ N(0, 1) shared by every model, model k a
case effect u_kc ~ N(0, 1) shared by its repeats, and model k passes a repeat with
chance Phi(a_k + 1.0 z_c + 0.7 u_kc), a_k set so its pass rate over cases is p_k. A
model's true rank is 1 + the number of models with a higher p_k (ties share a rank).
"""

import argparse
import math
import time
from dataclasses import dataclass
from itertools import combinations
from statistics import NormalDist
from typing import Literal

import numpy as np

from gradetrail_lib.analysis.stats.intervals import BootstrapSettings
from gradetrail_lib.analysis.stats.paired import paired_difference, paired_samples, paired_verdict
from gradetrail_lib.analysis.stats.ranking import Ranking, rank
from gradetrail_lib.results.sheet import ScoreSheet

ALPHA = 0.05
DIFFICULTY = 1.0
INTERACTION = 0.7
Kind = Literal["fwer", "coverage"]


@dataclass(frozen=True)
class RankCell:
    name: str
    rates: tuple[float, ...]
    cases: int
    repeats: int = 1
    seed: int = 0

    @property
    def kind(self) -> Kind:
        return "fwer" if len(set(self.rates)) == 1 else "coverage"

    def true_ranks(self) -> list[int]:
        return [1 + sum(q > p for q in self.rates) for p in self.rates]


@dataclass(frozen=True)
class RankOutcome:
    """`rate`: the family-wise error (fwer) or the joint coverage (coverage) over `runs`;
    `naive`: the same figure with every pair's unadjusted `compare` verdict;
    `power`: the share of truly different pairs separated (coverage cells);
    `length`: the mean rank interval's length, worst - best + 1 (coverage cells)."""

    rate: float
    naive: float
    runs: int
    power: float | None = None
    length: float | None = None
    tests: tuple[str, ...] = ()


def simulate(cell: RankCell, rng: np.random.Generator) -> list[ScoreSheet]:
    """One data set: a score sheet (0 or 1 per case and repeat) per model."""
    scale = math.sqrt(1 + DIFFICULTY**2 + INTERACTION**2)
    offsets = np.array([NormalDist().inv_cdf(p) * scale for p in cell.rates])
    k = len(cell.rates)
    z = rng.standard_normal(cell.cases)
    u = rng.standard_normal((k, cell.cases))
    latent = offsets[:, None] + DIFFICULTY * z[None, :] + INTERACTION * u
    chance = _phi(latent)
    passes = rng.random((k, cell.cases, cell.repeats)) < chance[:, :, None]
    ids = [f"c{c}" for c in range(cell.cases) for _ in range(cell.repeats)]
    repeats = [r for _ in range(cell.cases) for r in range(cell.repeats)]
    return [
        ScoreSheet(ids, repeats, passes[m].reshape(-1).astype(float).tolist()) for m in range(k)
    ]


def _phi(x: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return np.asarray(ndtr(x))


def naive_separations(
    sheets: list[ScoreSheet], ranking: Ranking, settings: BootstrapSettings, *, first: bool = False
) -> dict[tuple[str, str], str]:
    """Pairs `compare` names a winner for at alpha, unadjusted: the leaderboard's rule
    before step 17 (its interval, `paired_difference`, and its verdict, `paired_verdict`,
    are `compare`'s; the interval is only computed where the test rejects, as a winner
    needs both). `first`: stop at the first pair named, the smallest p first (the
    family-wise figure asks only whether any pair is named)."""
    index = {m: i for i, m in enumerate(ranking_labels(len(sheets)))}
    named = {}
    pairs = sorted(ranking.pairs, key=lambda p: p.p_value) if first else ranking.pairs
    for pair in pairs:
        if pair.p_value >= ALPHA:
            continue
        samples = paired_samples(sheets[index[pair.a]], sheets[index[pair.b]], "s")
        difference = paired_difference(samples, 1 - ALPHA, settings=settings)
        assert difference.interval is not None
        verdict = paired_verdict(difference.interval, pair.p_value, ALPHA)
        if verdict != "no winner":
            named[(pair.a, pair.b)] = pair.a if verdict == "A" else pair.b
            if first:
                break
    return named


def ranking_labels(k: int) -> list[str]:
    return [f"m{i}" for i in range(k)]


def _covers(
    labels: list[str], truth: list[int], separations: dict[tuple[str, str], str]
) -> tuple[bool, float]:
    """Whether rank intervals built from `separations` hold every true rank; their mean
    length."""
    k = len(labels)
    above = {m: 0 for m in labels}
    below = {m: 0 for m in labels}
    for (a, b), better in separations.items():
        worse = b if better == a else a
        above[worse] += 1
        below[better] += 1
    ok = all(1 + above[m] <= t <= k - below[m] for m, t in zip(labels, truth, strict=True))
    length = sum(k - below[m] - above[m] for m in labels) / k
    return ok, length


def run_cell(
    cell: RankCell, runs: int, settings: BootstrapSettings, *, naive: bool = True
) -> RankOutcome:
    """The cell's figures over `runs` data sets; `naive=False` skips the naive rule's
    figure of a coverage cell (its intervals are the slow part; NaN then)."""
    rng = np.random.default_rng(cell.seed)
    labels = ranking_labels(len(cell.rates))
    truth = cell.true_ranks()
    hits = naive_hits = 0
    separated_true = different = 0
    lengths = 0.0
    tests: set[str] = set()
    for _ in range(runs):
        sheets = simulate(cell, rng)
        ranking = rank(sheets, labels, "s", settings=settings)
        tests.update(ranking.tests)
        adjusted = {(p.a, p.b): p.separated for p in ranking.pairs if p.separated}
        if cell.kind == "fwer":
            named = naive_separations(sheets, ranking, settings, first=True)
            hits += bool(adjusted)
            naive_hits += bool(named)
            continue
        covered, length = _covers(labels, truth, adjusted)
        hits += covered
        if naive:
            naive_hits += _covers(labels, truth, naive_separations(sheets, ranking, settings))[0]
        lengths += length
        for i, j in combinations(range(len(labels)), 2):
            if cell.rates[i] != cell.rates[j]:
                different += 1
                better = labels[i] if cell.rates[i] > cell.rates[j] else labels[j]
                separated_true += adjusted.get((labels[i], labels[j])) == better
    if cell.kind == "fwer":
        return RankOutcome(hits / runs, naive_hits / runs, runs, tests=tuple(sorted(tests)))
    return RankOutcome(
        hits / runs,
        naive_hits / runs if naive else math.nan,
        runs,
        power=separated_true / different,
        length=lengths / runs,
        tests=tuple(sorted(tests)),
    )


def error(rate: float, runs: int) -> float:
    """Twice the standard error of a simulated rate near `rate`."""
    return 2 * math.sqrt(rate * (1 - rate) / runs)


def holds(cell: RankCell, outcome: RankOutcome) -> bool:
    """A fwer cell at most alpha, a coverage cell at least 1 - alpha, each give or take
    twice the simulation's standard error."""
    if cell.kind == "fwer":
        return outcome.rate <= ALPHA + error(ALPHA, outcome.runs)
    return outcome.rate >= 1 - ALPHA - error(ALPHA, outcome.runs)


CELLS = [
    RankCell("null, K=4, 200 cases, no repeats", (0.6,) * 4, 200),
    RankCell("null, K=8, 200 cases, no repeats", (0.6,) * 8, 200, seed=1),
    RankCell("null, K=4, 40 cases x 5 repeats", (0.6,) * 4, 40, 5, seed=2),
    RankCell("null, K=8, 40 cases x 5 repeats", (0.6,) * 8, 40, 5, seed=3),
    RankCell(
        "ties and gaps, K=6, 300 cases, no repeats",
        (0.75, 0.75, 0.62, 0.62, 0.62, 0.45),
        300,
        seed=4,
    ),
    RankCell(
        "ties and gaps, K=6, 60 cases x 5 repeats",
        (0.75, 0.75, 0.62, 0.62, 0.62, 0.45),
        60,
        5,
        seed=5,
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--only", default=None, help="cells whose name contains this")
    args = parser.parse_args()
    settings = BootstrapSettings()
    print("| cell | figure | Holm + rank intervals | naive (every pair at 0.05) | power | "
          "mean interval length | runs | tests | seconds |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for cell in CELLS:
        if args.only and args.only not in cell.name:
            continue
        started = time.perf_counter()
        out = run_cell(cell, args.runs, settings)
        figure = "family-wise error" if cell.kind == "fwer" else "joint coverage"
        power = "" if out.power is None else f"{out.power:.1%}"
        length = "" if out.length is None else f"{out.length:.2f}"
        print(
            f"| {cell.name} | {figure} | {out.rate:.1%} | {out.naive:.1%} | {power} | "
            f"{length} | {out.runs} | {', '.join(out.tests)} | "
            f"{time.perf_counter() - started:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
