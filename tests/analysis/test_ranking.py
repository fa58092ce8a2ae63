"""The ranking's parts on data whose answer is known: Holm's adjustment (against
statsmodels), rank intervals and tiers from given separations, and `rank` on score
sheets (pass/fail, repeats, refusal of different samples)."""

import pytest

from gradetrail_lib.analysis.stats.paired import PairedTest, compare
from gradetrail_lib.analysis.stats.ranking import (
    RANK_INTERVAL,
    PairInput,
    holm_adjust,
    rank,
    rank_from_tests,
)
from gradetrail_lib.errors import NotComparable
from gradetrail_lib.results.sheet import ScoreSheet


def test_holm_adjust_equals_statsmodels() -> None:
    from statsmodels.stats.multitest import multipletests

    for ps in (
        [0.01, 0.04, 0.03, 0.005, 0.5, 0.2],
        [0.001] * 4,
        [0.9, 0.01],
        [0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.001],
    ):
        expected = multipletests(ps, alpha=0.05, method="holm")[1]
        assert holm_adjust(ps) == pytest.approx(list(expected))


def _test(p: float, leans: str | None) -> PairedTest:
    return PairedTest(test="mcnemar-exact", p_value=p, leans=leans)  # type: ignore[arg-type]


def test_rank_intervals_and_tiers_from_separations() -> None:
    """A > C and B > C separated, A vs B not, C vs D not, A > D and B > D: A and B share
    tier 1 and ranks 1-2, C and D tier 2 and ranks 3-4."""
    labels = ["A", "B", "C", "D"]
    means = [0.8, 0.78, 0.5, 0.48]
    pairs = [
        PairInput(0, 1, _test(0.4, "A"), -0.02),
        PairInput(0, 2, _test(0.0001, "A"), -0.3),
        PairInput(0, 3, _test(0.0001, "A"), -0.32),
        PairInput(1, 2, _test(0.0002, "A"), -0.28),
        PairInput(1, 3, _test(0.0002, "A"), -0.3),
        PairInput(2, 3, _test(0.6, "A"), -0.02),
    ]
    ranking = rank_from_tests(labels, means, pairs)
    by = {m.label: m for m in ranking.models}
    assert [(by[x].best_rank, by[x].worst_rank) for x in labels] == [(1, 2), (1, 2), (3, 4), (3, 4)]
    assert ranking.tiers() == [["A", "B"], ["C", "D"]]
    assert [m.rank for m in ranking.models] == [1, 2, 3, 4]
    assert by["C"].above == ("A", "B")
    body = ranking.to_json()
    assert body["models"][0]["rank_interval"]["method"] == RANK_INTERVAL
    assert body["method"]["adjustment"] == "holm"


def test_a_pair_significant_alone_is_not_separated_after_holm() -> None:
    """p = 0.03 rejects at 0.05 on its own, but not as one of three (Holm: 0.03 x 2 or
    x 3 is above 0.05)."""
    labels = ["A", "B", "C"]
    pairs = [
        PairInput(0, 1, _test(0.03, "A"), -0.1),
        PairInput(0, 2, _test(0.04, "A"), -0.1),
        PairInput(1, 2, _test(0.5, "B"), 0.01),
    ]
    ranking = rank_from_tests(labels, [0.7, 0.6, 0.6], pairs)
    assert all(p.separated is None for p in ranking.pairs)
    assert all((m.best_rank, m.worst_rank) == (1, 3) for m in ranking.models)
    assert ranking.tiers() == [["A", "B", "C"]]


def test_tiers_are_the_longest_chain_not_the_lower_rank() -> None:
    """A > B and B > C separated, A vs C not (possible with different discordance): C is
    in tier 3 though only one model is separated above it."""
    pairs = [
        PairInput(0, 1, _test(0.001, "A"), -0.1),
        PairInput(0, 2, _test(0.3, "A"), -0.15),
        PairInput(1, 2, _test(0.001, "A"), -0.05),
    ]
    ranking = rank_from_tests(["A", "B", "C"], [0.9, 0.8, 0.75], pairs)
    by = {m.label: m for m in ranking.models}
    assert [by[x].tier for x in "ABC"] == [1, 2, 3]
    assert (by["C"].best_rank, by["C"].worst_rank) == (2, 3)


def _sheet(passes: list[int], repeats: int = 1) -> ScoreSheet:
    cases = len(passes) // repeats
    ids = [f"s{c}" for c in range(cases) for _ in range(repeats)]
    reps = [r for _ in range(cases) for r in range(repeats)]
    return ScoreSheet(ids, reps, [float(p) for p in passes])


def test_rank_pass_fail_uses_mcnemar_and_separates_a_clear_winner() -> None:
    strong = _sheet([1] * 90 + [0] * 10)
    weak = _sheet([0] * 60 + [1] * 40)
    same = _sheet([0] * 60 + [1] * 40)
    ranking = rank([weak, strong, same], ["weak", "strong", "same"], "s")
    assert ranking.tests == ["mcnemar-exact"]
    assert ranking.tiers() == [["strong"], ["same", "weak"]]
    top = ranking.models[0]
    assert (top.label, top.best_rank, top.worst_rank) == ("strong", 1, 1)
    # The pair's p is compare's.
    pair = next(p for p in ranking.pairs if {p.a, p.b} == {"weak", "strong"})
    assert pair.p_value == compare(weak, strong, "s").p_value
    assert pair.separated == "strong"
    assert pair.difference == pytest.approx(0.5)


def test_rank_with_repeats_takes_cases_as_units() -> None:
    a = _sheet([1, 1, 1] * 20 + [0, 0, 0] * 20, repeats=3)
    b = _sheet([1, 1, 0] * 40, repeats=3)
    ranking = rank([a, b], ["a", "b"], "s")
    assert ranking.tests == ["cluster-sign-flip"]
    assert ranking.cases == 40 and ranking.n == 120
    assert ranking.pairs[0].p_value == compare(a, b, "s").p_value


def test_rank_refuses_different_samples() -> None:
    with pytest.raises(NotComparable, match="different samples"):
        rank([_sheet([1, 0, 1]), _sheet([1, 0])], ["a", "b"], "s")
    with pytest.raises(ValueError, match="distinct"):
        rank([_sheet([1]), _sheet([1])], ["a", "a"], "s")
