"""Power of paired pass/fail comparisons: Connor's (1987) sample size, the exact McNemar
test's power, the design effect of repeats, the minimum detectable effect. The exact power
is checked against enumeration with the project's own McNemar test, and Connor's n against
a simulation of that test (fixed seed)."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from gradetrail_lib.analysis.stats.paired import mcnemar_exact
from gradetrail_lib.analysis.stats.power import (
    cases_needed,
    check_power_inputs,
    connor_pairs,
    design_effect,
    intra_case_correlation,
    mcnemar_power,
    minimum_detectable_effect,
    paired_standard_error,
    pairs_needed,
    se_detectable_effect,
)

SIMULATIONS = 4000


def test_connor_reference_value_and_its_exact_refinement() -> None:
    # psi = 0.2, delta = 0.03, alpha = 0.05 two-sided, power 0.8: Connor's formula gives
    # 1741.84 pairs; the exact McNemar test needs 1,800 for its power to reach 80 %.
    assert connor_pairs(0.03, 0.2) == 1742
    assert pairs_needed(0.03, 0.2) == (1742, 1800)
    assert mcnemar_power(1799, 0.03, 0.2) < 0.8 <= mcnemar_power(1800, 0.03, 0.2)


def test_connor_formula_by_hand() -> None:
    # (1.95996 sqrt(0.3) + 0.84162 sqrt(0.3 - 0.01))^2 / 0.01 = 232.8...
    by_hand = (1.959964 * math.sqrt(0.3) + 0.841621 * math.sqrt(0.29)) ** 2 / 0.01
    assert connor_pairs(0.1, 0.3) == math.ceil(by_hand)
    # A larger difference, or less discordance, needs fewer pairs; more power, more.
    assert connor_pairs(0.2, 0.3) < connor_pairs(0.1, 0.3)
    assert connor_pairs(0.1, 0.2) < connor_pairs(0.1, 0.3)
    assert connor_pairs(0.1, 0.3, power=0.9) > connor_pairs(0.1, 0.3)


def test_exact_power_equals_enumeration_with_the_projects_mcnemar() -> None:
    n, psi, delta = 30, 0.4, 0.2
    a_share, b_share = (psi - delta) / 2, (psi + delta) / 2
    total = 0.0
    for a in range(n + 1):
        for b in range(n + 1 - a):
            if mcnemar_exact(a, b) < 0.05:
                concordant = n - a - b
                total += (
                    math.comb(n, a)
                    * math.comb(n - a, b)
                    * a_share**a
                    * b_share**b
                    * (1 - psi) ** concordant
                )
    assert mcnemar_power(n, delta, psi) == pytest.approx(total, abs=1e-12)


def test_simulated_power_of_the_exact_test_at_connors_n_is_near_80_percent() -> None:
    rng = np.random.default_rng(20261205)
    n, psi, delta = connor_pairs(0.03, 0.2), 0.2, 0.03
    counts = rng.multinomial(n, [(psi - delta) / 2, (psi + delta) / 2, 1 - psi], SIMULATIONS)
    a, b = counts[:, 0], counts[:, 1]
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(a, b), a + b, 0.5))
    simulated = float(np.mean(p < 0.05))
    # Connor's normal approximation: within a few points of the nominal 80 %.
    assert abs(simulated - 0.8) < 0.03
    # And the exact power sum agrees with the simulation within its error (4 SE).
    exact = mcnemar_power(n, delta, psi)
    assert abs(simulated - exact) < 4 * math.sqrt(exact * (1 - exact) / SIMULATIONS)


def test_simulated_power_at_the_minimum_detectable_effect_is_80_percent() -> None:
    rng = np.random.default_rng(11)
    n, observed = 300, 0.15
    mde = minimum_detectable_effect(n, observed)
    assert mde is not None
    psi = max(observed, mde)
    runs = 5 * SIMULATIONS  # the counts are cheap to draw: a tighter check
    counts = rng.multinomial(n, [(psi - mde) / 2, (psi + mde) / 2, 1 - psi], runs)
    a, b = counts[:, 0], counts[:, 1]
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(a, b), a + b, 0.5))
    assert abs(float(np.mean(p < 0.05)) - 0.8) < 4 * math.sqrt(0.8 * 0.2 / runs)


def test_design_effect_of_repeats() -> None:
    assert design_effect(1, 0.5) == 1
    assert design_effect(5, 0.5) == 3
    # 1,800 pairs: 5 repeats at rho = 0.5 are worth 5 / 3 pairs a case.
    assert cases_needed(1800, 5, 0.5) == 1080
    assert cases_needed(1800, 5, 1.0) == 1800  # repeats that always agree add nothing
    assert cases_needed(1800, 5, 0.0) == 360  # independent repeats count in full
    with pytest.raises(ValueError, match="correlation"):
        design_effect(5, 1.5)


def test_minimum_detectable_effect_inverts_the_exact_power() -> None:
    mde = minimum_detectable_effect(1800, 0.2)
    assert mde == pytest.approx(0.03, abs=5e-4)
    assert mde is not None
    assert mcnemar_power(1800, mde, 0.2) >= 0.8 > mcnemar_power(1800, mde - 1e-3, 0.2)
    # The 50 pairs with 4 discordant: only a difference of about 0.15 is detectable.
    small = minimum_detectable_effect(50, 4 / 50)
    assert small is not None and 0.1 < small < 0.2
    # Five pairs can never reject at 0.05 (2 / 2^5 > 0.05): nothing is detectable.
    assert minimum_detectable_effect(5, 0.0) is None
    # More pairs detect smaller differences.
    assert minimum_detectable_effect(400, 0.2) > minimum_detectable_effect(1600, 0.2)  # type: ignore[operator]


def test_se_detectable_effect_is_2_8_standard_errors_at_the_defaults() -> None:
    assert se_detectable_effect(0.01) == pytest.approx(0.028, abs=2e-5)
    assert paired_standard_error([[0.1], [0.3]]) == pytest.approx(0.1)
    assert paired_standard_error([[0.1, 0.3], [0.5]]) == pytest.approx(0.15)
    assert paired_standard_error([[0.1]]) is None


def test_intra_case_correlation_estimate() -> None:
    rng = np.random.default_rng(7)
    cases, repeats, rho = 400, 5, 0.5
    shared = rng.normal(size=(cases, 1)) * math.sqrt(rho)
    own = rng.normal(size=(cases, repeats)) * math.sqrt(1 - rho)
    estimate = intra_case_correlation((shared + own).tolist())
    assert estimate is not None and abs(estimate - rho) < 0.05
    assert intra_case_correlation([[1, 1], [0, 0], [1, 1]]) == 1.0
    assert intra_case_correlation([[1], [0]]) is None  # no repeats
    assert intra_case_correlation([[1, 1], [1, 1]]) is None  # nothing varies


@pytest.mark.parametrize(
    ("detect", "power", "confidence", "word"),
    [(0, 0.8, 0.95, "difference"), (1, 0.8, 0.95, "difference"), (-0.1, 0.8, 0.95, "difference"),
     (0.03, 1.0, 0.95, "power"), (0.03, 0.0, 0.95, "power"), (0.03, 0.8, 1.0, "confidence")],
)  # fmt: skip
def test_bad_inputs_are_named(detect: float, power: float, confidence: float, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        check_power_inputs(detect, power, confidence)


def test_the_se_minimum_detectable_effect_is_detected_80_percent_of_the_time() -> None:
    # Continuous scores: a true difference of 2.8 standard errors is found by the verdict
    # (the paired bootstrap and the sign-flip test) within a few points of 80 % of the
    # time (76.75 % here), and the MDE each comparison prints estimates that difference.
    from gradetrail_lib.analysis.stats.intervals import BootstrapSettings
    from gradetrail_lib.analysis.stats.paired import compare
    from gradetrail_lib.results.sheet import ScoreSheet

    rng = np.random.default_rng(3)
    n, sd, runs = 60, 0.15, 400
    true = 2.8 * sd / math.sqrt(n)
    ids, zeros = [f"s{i}" for i in range(n)], [0] * n
    wins, printed = 0, []
    for seed in range(runs):
        a = rng.uniform(0.4, 0.6, n)
        b = np.clip(a + rng.normal(true, sd, n), 0.0, 1.0)
        c = compare(
            ScoreSheet(ids=ids, repeats=zeros, scores=a.tolist()),
            ScoreSheet(ids=ids, repeats=zeros, scores=b.tolist()),
            "x",
            settings=BootstrapSettings(n_resamples=999, seed=seed),
        )
        assert c.mde_method == "se" and c.mde is not None
        wins += c.verdict == "B"
        printed.append(c.mde)
    assert abs(wins / runs - 0.8) < 4 * math.sqrt(0.8 * 0.2 / runs)
    assert float(np.mean(printed)) == pytest.approx(true, rel=0.05)
