"""Type-I error, power and expected sample size of the sequential release verdict, by
simulation (not a test: prints tables).

    .venv/bin/python -m bench.bench_sequential [--runs 4000]

Each run draws paired pass/fail outcomes on 2,000 cases (a case won only by A with
chance 0.10, only by B with 0.10 + delta, else a tie), sends them in chunks of 50 and
applies `stats.sequential.decide_many` (the rule `run --until-decided` applies) after each
chunk. Beside it:

* the naive rule: after each chunk, the exact McNemar test (the fixed-n test `compare`
  uses) on the cases so far, stopping at the first p < 0.05;
* the fixed-n test: exact McNemar once, on all 2,000 cases.

tests/analysis/test_sequential.py runs the same cells with fewer runs and asserts the
type-I error and the savings; the full-size tables are in docs/rankings.md.
"""

import argparse
import math
from dataclasses import dataclass

import numpy as np

from gradetrail_lib.analysis.stats.paired import mcnemar_exact
from gradetrail_lib.analysis.stats.sequential import chunk_looks, decide_many, simulate_paired

ALPHA = 0.05
CASES = 2000
CHUNK = 50
A_ONLY = 0.10
MARGIN = 0.02


@dataclass(frozen=True)
class SequentialOutcome:
    delta: float
    runs: int
    winner: float  # share naming a winner (any side: the type-I error when delta = 0)
    right: float  # share naming B (the true winner when delta > 0)
    equivalent: float
    mean_cases: float
    median_cases: float
    naive_winner: float  # the naive rule: McNemar after each chunk, stop at p < alpha
    fixed_power: float  # exact McNemar once on every case: rejects at alpha


def simulate(delta: float, runs: int, rng: np.random.Generator, cases: int = CASES) -> np.ndarray:
    """Per case B - A: -1 (A only), +1 (B only) or 0 (`simulate_paired`, the draws
    `plan --until-decided` forecasts from)."""
    return simulate_paired(rng, runs, cases, 2 * A_ONLY + delta, delta)


def naive_stops(d: np.ndarray, looks: list[int]) -> np.ndarray:
    """Whether McNemar at alpha rejects at some look (the naive rule names a winner)."""
    a_only = np.cumsum(d < 0, axis=1)
    b_only = np.cumsum(d > 0, axis=1)
    named = np.zeros(d.shape[0], dtype=bool)
    for row in range(d.shape[0]):
        for n in looks:
            if mcnemar_exact(int(a_only[row, n - 1]), int(b_only[row, n - 1])) < ALPHA:
                named[row] = True
                break
    return named


def fixed_power(d: np.ndarray) -> float:
    a_only, b_only = (d < 0).sum(axis=1), (d > 0).sum(axis=1)
    rejects = [mcnemar_exact(int(a), int(b)) < ALPHA for a, b in zip(a_only, b_only, strict=True)]
    return float(np.mean(rejects))


def run_cell(
    delta: float, runs: int, seed: int, *, cases: int = CASES, margin: float = MARGIN
) -> SequentialOutcome:
    rng = np.random.default_rng(seed)
    d = simulate(delta, runs, rng, cases)
    looks = chunk_looks(cases, CHUNK)
    verdicts, used = decide_many(d, looks, alpha=ALPHA, margin=margin)
    return SequentialOutcome(
        delta=delta,
        runs=runs,
        winner=float(np.isin(verdicts, ["A", "B"]).mean()),
        right=float((verdicts == "B").mean()),
        equivalent=float((verdicts == "equivalent").mean()),
        mean_cases=float(used.mean()),
        median_cases=float(np.median(used)),
        naive_winner=float(naive_stops(d, looks).mean()),
        fixed_power=fixed_power(d),
    )


def error(rate: float, runs: int) -> float:
    return 2 * math.sqrt(rate * (1 - rate) / runs)


DELTAS = (0.0, 0.05, 0.10, 0.20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4000)
    args = parser.parse_args()
    print(
        "| true difference | winner named (sequential) | B named | equivalent | mean cases "
        "| median cases | cases saved | naive: McNemar after each chunk | fixed n: McNemar "
        "on all 2,000 | runs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for seed, delta in enumerate(DELTAS):
        out = run_cell(delta, args.runs, seed)
        print(
            f"| {delta:.2f} | {out.winner:.1%} | {out.right:.1%} | {out.equivalent:.1%} "
            f"| {out.mean_cases:.0f} | {out.median_cases:.0f} "
            f"| {1 - out.mean_cases / CASES:.0%} | {out.naive_winner:.1%} "
            f"| {out.fixed_power:.1%} | {out.runs} |",
            flush=True,
        )
    out = run_cell(0.0, args.runs, 10, margin=0.05)
    print(
        f"\nmargin 0.05, true difference 0: equivalent {out.equivalent:.1%}, winner "
        f"{out.winner:.1%}, mean cases {out.mean_cases:.0f}"
    )
    out = run_cell(0.05, args.runs, 11, margin=0.05)
    print(f"margin 0.05, true difference 0.05: equivalent {out.equivalent:.1%} (an error)")


if __name__ == "__main__":
    main()
