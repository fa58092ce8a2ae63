"""Rankings of K result sets on the same samples that hold a family-wise error rate:
which models can be told apart, each model's simultaneous rank interval, and tiers.

Comparing every pair of K models at alpha each names some pair a winner far more often
than alpha under a null of no difference: K = 8 is 28 tests. Here every pair is tested
as `compare` tests it (`paired.paired_test`: exact McNemar for pass/fail pairs without
repeats, the sign-flip test over case means otherwise, cases as units with repeats), and
the K(K-1)/2 p-values are adjusted together by Holm's step-down (Holm 1979, "A simple
sequentially rejective multiple test procedure", Scandinavian Journal of Statistics 6).
A pair is *separated* only when its adjusted p is below alpha and its test statistic
leans to one side; that side is the better one.

Why a separation can be trusted: a two-sided p read with the direction its statistic
leans is, for these symmetric null distributions, twice the one-sided p. So Holm over the
M two-sided p-values makes every claim that Holm over the 2M one-sided hypotheses
"theta_k <= theta_j" would make (its thresholds alpha/(M - i) on the two-sided p are
alpha/(2M - 2i) <= alpha/(2M - i) on the one-sided p), and that procedure controls the
chance of any false claim at alpha under any dependence between the tests. With
probability at least 1 - alpha every separation is then true at once.

Rank intervals follow Mogstad, Romano, Shaikh and Wilhelm (2024), "Inference for Ranks
with Applications to Mobility across Neighbourhoods and Academic Achievement across
Countries", Review of Economic Studies 91(1): from simultaneous pairwise comparisons,
model j's rank (1 = best, ties sharing the better rank: 1 + the number of models truly
better) lies in [1 + #{models separated above j}, K - #{models separated below j}]. When
every separation is true, every interval holds its model's true rank, so the K intervals
hold jointly with probability at least 1 - alpha. (They take a studentized max-t bootstrap
for the pairwise step; Holm over the paired tests gradetrail already trusts is valid for
paired, dependent runs without a normal approximation, at some cost in power.)

Tiers: a model's tier is 1 + the most tiers below which some model separated above it
sits (the longest chain of separations above it). No two models of one tier are
separated, so a tier is a set of models the data cannot tell apart; two models in
different tiers are not necessarily separated (separation is not transitive), and the
rank intervals say how far each can move.

Simulation (bench/bench_ranking.py, tests/analysis/test_ranking_simulation.py, fixed
seeds): the family-wise error under the global null and the joint coverage of the rank
intervals, with the naive all-pairs rule's figure beside them.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from gradetrail_lib.analysis.stats.clusters import is_clustered
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.analysis.stats.intervals import BootstrapSettings, check_confidence
from gradetrail_lib.analysis.stats.paired import (
    TEST_LABELS,
    PairedSamples,
    PairedTest,
    Scored,
    paired_samples,
    paired_test,
)
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD

HOLM = "holm"
# The rank intervals' method, printed with every interval.
RANK_INTERVAL = "mrsw-2024-holm"
RANK_INTERVAL_TEXT = (
    "simultaneous rank intervals (Mogstad, Romano, Shaikh and Wilhelm 2024) from "
    "Holm-adjusted paired tests"
)


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p times
    (m - i + 1), made non-decreasing along the sorted order and capped at 1. A hypothesis
    is rejected at family-wise level alpha exactly when its adjusted p is below alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (m - step) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class RankedPair:
    """Two models' paired test and whether, after Holm's adjustment, they are told apart
    (`separated`: the better one's label, None when not)."""

    a: str
    b: str
    test: str
    p_value: float
    adjusted_p: float
    # Mean of the per-case mean differences B - A (unscored samples score 0).
    difference: float
    separated: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "difference_b_minus_a": self.difference,
            "paired_test": {"method": self.test, "p": self.p_value},
            "adjusted_p": {"method": HOLM, "p": self.adjusted_p},
            "separated": self.separated is not None,
            "better": self.separated,
        }


@dataclass(frozen=True)
class RankedModel:
    label: str
    # The mean score over cases (each case's mean over its repeats; unscored at 0): what
    # the paired tests compare, and the order of `rank`.
    mean: float
    rank: int  # position by `mean`, 1 = best (ties broken by label)
    best_rank: int
    worst_rank: int
    tier: int
    above: tuple[str, ...]  # models separated above this one
    below: tuple[str, ...]  # models this one is separated above

    def interval_text(self) -> str:
        if self.best_rank == self.worst_rank:
            return str(self.best_rank)
        return f"{self.best_rank}-{self.worst_rank}"

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.label,
            # The paired tests' figure, as `compare --json`'s `paired_mean_*` (not its
            # `mean_score_*`, over the scored samples only).
            "paired_mean": self.mean,
            "rank": self.rank,
            "rank_interval": {
                "best": self.best_rank,
                "worst": self.worst_rank,
                "method": RANK_INTERVAL,
            },
            "tier": self.tier,
            "separated_above": list(self.above),
            "separated_below": list(self.below),
        }


@dataclass(frozen=True)
class Ranking:
    scorer: str
    confidence: float
    n: int  # pairs (sample, repeat) each model was scored on
    cases: int
    models: list[RankedModel]  # by rank
    pairs: list[RankedPair]

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    @property
    def tests(self) -> list[str]:
        return sorted({p.test for p in self.pairs})

    def tiers(self) -> list[list[str]]:
        count = max((m.tier for m in self.models), default=0)
        return [[m.label for m in self.models if m.tier == t] for t in range(1, count + 1)]

    def method_text(self) -> str:
        tests = ", ".join(f"{TEST_LABELS.get(t, t)} ({t})" for t in self.tests) or "none"
        return (
            f"{RANK_INTERVAL_TEXT} ({RANK_INTERVAL}); paired tests: {tests}; "
            f"{len(self.pairs)} pairs adjusted by Holm's step-down, family-wise "
            f"alpha = {self.alpha:.3g}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "confidence": self.confidence,
            "family_wise_alpha": self.alpha,
            "n": self.n,
            "cases": self.cases,
            "method": {
                "rank_interval": RANK_INTERVAL,
                "adjustment": HOLM,
                "paired_tests": self.tests,
                "text": self.method_text(),
            },
            "models": [m.to_json() for m in self.models],
            "tiers": self.tiers(),
            "pairs": [p.to_json() for p in self.pairs],
        }


@dataclass(frozen=True)
class PairInput:
    """One pair's test for `rank_from_tests`: models i and j (indices, A = i, B = j)."""

    i: int
    j: int
    tested: PairedTest
    difference: float


def rank_from_tests(
    labels: Sequence[str],
    means: Sequence[float],
    pairs: Sequence[PairInput],
    *,
    scorer: str = "",
    confidence: float = DEFAULT_CONFIDENCE,
    n: int = 0,
    cases: int = 0,
) -> Ranking:
    """The Holm step over the pairs' p-values, then rank intervals and tiers (pure)."""
    check_confidence(confidence)
    alpha = 1 - confidence
    k = len(labels)
    adjusted = holm_adjust([p.tested.p_value for p in pairs])
    above: list[set[int]] = [set() for _ in range(k)]
    ranked_pairs = []
    for pair, adj in zip(pairs, adjusted, strict=True):
        better: int | None = None
        if adj < alpha and pair.tested.leans is not None:
            better, worse = (pair.j, pair.i) if pair.tested.leans == "B" else (pair.i, pair.j)
            above[worse].add(better)
        ranked_pairs.append(
            RankedPair(
                a=labels[pair.i],
                b=labels[pair.j],
                test=pair.tested.test,
                p_value=pair.tested.p_value,
                adjusted_p=adj,
                difference=pair.difference,
                separated=None if better is None else labels[better],
            )
        )
    below: list[set[int]] = [set() for _ in range(k)]
    for worse, betters in enumerate(above):
        for better in betters:
            below[better].add(worse)
    tiers = _tiers(above)
    order = sorted(range(k), key=lambda i: (-means[i], labels[i]))
    models = [
        RankedModel(
            label=labels[i],
            mean=means[i],
            rank=position,
            best_rank=1 + len(above[i]),
            worst_rank=k - len(below[i]),
            tier=tiers[i],
            above=tuple(labels[x] for x in order if x in above[i]),
            below=tuple(labels[x] for x in order if x in below[i]),
        )
        for position, i in enumerate(order, start=1)
    ]
    return Ranking(
        scorer=scorer, confidence=confidence, n=n, cases=cases, models=models, pairs=ranked_pairs
    )


def _tiers(above: list[set[int]]) -> list[int]:
    """1 + the longest chain of separations above each model. A separation points from
    a higher mean to a lower one, so the graph has no cycle."""
    tiers: dict[int, int] = {}

    def tier(i: int, depth: int = 0) -> int:
        if depth > len(above):
            raise ValueError("the separations form a cycle")
        if i not in tiers:
            tiers[i] = 1 + max((tier(b, depth + 1) for b in above[i]), default=0)
        return tiers[i]

    return [tier(i) for i in range(len(above))]


def rank(
    results: Sequence[Scored],
    labels: Sequence[str],
    scorer: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    settings: BootstrapSettings | None = None,
) -> Ranking:
    """Rank K result sets on `scorer`: each pair tested as `compare` tests it, Holm's
    adjustment over the pairs, rank intervals and tiers. NotComparable unless every
    result set holds the same samples (each is paired with the first)."""
    if len(results) != len(labels):
        raise ValueError(f"{len(results)} result sets but {len(labels)} labels")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct: {list(labels)}")
    if not results:
        raise ValueError("nothing to rank")
    # Each joined with the first (a sample set that differs is refused here, naming
    # both), so every pair below reads the same positions without joining again.
    joined = [
        paired_samples(results[0], other, scorer, labels=(labels[0], label), threshold=threshold)
        for other, label in zip(results, labels, strict=True)
    ]
    cases = joined[0].cases
    means = [_case_mean(s.values_b, cases) for s in joined]
    pairs = []
    for i, j in combinations(range(len(results)), 2):
        a, b = joined[i], joined[j]
        samples = PairedSamples(
            values_a=a.values_b, values_b=b.values_b, pass_a=a.pass_b, pass_b=b.pass_b,
            cases=cases, unscored_a=a.unscored_b, unscored_b=b.unscored_b,
        )  # fmt: skip
        pairs.append(
            PairInput(
                i=i,
                j=j,
                tested=paired_test(samples, settings),
                difference=math.fsum(samples.case_means) / len(cases),
            )
        )
    return rank_from_tests(
        labels, means, pairs, scorer=scorer, confidence=confidence, n=joined[0].n,
        cases=len(cases),
    )  # fmt: skip


def _case_mean(values: Sequence[float], cases: Sequence[Sequence[int]]) -> float:
    if not is_clustered(cases):
        # A case per pair (the cases partition the pairs): each case's mean is its value,
        # and fsum's exactly rounded sum is the same whatever the order.
        return math.fsum(values) / len(cases)
    return math.fsum(math.fsum(values[i] for i in c) / len(c) for c in cases) / len(cases)
