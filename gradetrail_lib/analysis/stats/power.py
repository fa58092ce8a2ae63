"""Power of a paired comparison: how many pairs a difference needs, and the smallest
difference a comparison of n pairs could detect.

Pass/fail pairs. Of n pairs, a share psi (the discordance) is won by one side only; a
difference delta = p_B - p_A splits them (psi + delta) / 2 won by B only and
(psi - delta) / 2 by A only. Connor (1987, "Sample size for testing differences in
proportions for the paired-sample design", Biometrics 43) gives the pairs a two-sided
test at level alpha needs for power 1 - beta:

    n = (z_{1-alpha/2} * sqrt(psi) + z_{1-beta} * sqrt(psi - delta^2))^2 / delta^2

That is a normal approximation. The comparison decides with the exact (conditional)
McNemar test, whose power at n is a sum over the binomial of the discordant count d:
given d, B's wins are Binomial(d, (psi + delta) / (2 psi)) and the test rejects when
the smaller count's two-sided exact p is below alpha. The exact test is conservative, so
`pairs_needed` starts at Connor's n and steps up to the first n whose exact power
reaches the target (psi = 0.2, delta = 0.03: Connor 1,742, exact 1,800).

Repeats. K repeats of a case are not K independent pairs: with an intra-case
correlation rho of the paired differences, a case of K repeats is worth
K / (1 + (K - 1) rho) independent pairs (the design effect), so n pairs need
n (1 + (K - 1) rho) / K cases of K repeats each.

The minimum detectable effect inverts this for a comparison already made: the smallest
delta whose exact power at its n and observed discordance reaches 80 %. A difference
needs at least delta of discordance, so the discordance assumed at delta is
max(psi, delta). Continuous scores take the normal approximation instead:
(z_{1-alpha/2} + z_{power}) times the standard error of the paired difference (2.8 SE
at the defaults).
"""

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any, Literal

from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE

DEFAULT_POWER = 0.8
# When no history says otherwise: a share of discordant pairs typical of two versions of
# one model on a benchmark, and a strong intra-case correlation of repeats. Both are
# printed as assumed wherever they are used.
DEFAULT_DISCORDANCE = 0.2
DEFAULT_CORRELATION = 0.5

MdeMethod = Literal["connor-exact", "se"]
CONNOR_EXACT: MdeMethod = "connor-exact"

# Discordant counts further than this many standard deviations from their mean carry no
# measurable probability: the power sums skip them.
_TAIL_SDS = 12.0


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def check_power_inputs(
    detect: float | None = None,
    power: float = DEFAULT_POWER,
    confidence: float = DEFAULT_CONFIDENCE,
) -> None:
    """ValueError naming the bad value: a difference outside (0, 1), a power or a
    confidence outside (0, 1)."""
    if detect is not None and not 0 < detect < 1:
        raise ValueError(
            f"the difference to detect must be between 0 and 1 (exclusive), not {detect:g}"
        )
    if not 0 < power < 1:
        raise ValueError(f"power must be between 0 and 1 (exclusive), not {power:g}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), not {confidence:g}")


def connor_pairs(
    delta: float,
    discordance: float,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    power: float = DEFAULT_POWER,
) -> int:
    """Connor's (1987) pairs for a two-sided test at alpha = 1 - confidence, rounded up."""
    _check_alternative(delta, discordance)
    za, zb = _z(1 - (1 - confidence) / 2), _z(power)
    root = za * math.sqrt(discordance) + zb * math.sqrt(discordance - delta**2)
    return math.ceil(root**2 / delta**2 - 1e-9)


def _check_alternative(delta: float, discordance: float) -> None:
    if not 0 < delta <= discordance <= 1:
        raise ValueError(
            f"a difference of {delta:g} needs a discordance of at least {delta:g} "
            f"(and at most 1), not {discordance:g}"
        )


def _critical_counts(d: Any, alpha: float) -> Any:
    """For each discordant count d, the largest smaller-side count k whose exact two-sided
    McNemar p (2 P[Bin(d, 1/2) <= k], capped at 1) is below alpha; -1 where none is."""
    import numpy as np
    from scipy.stats import binom

    k = binom.ppf(alpha / 2, d, 0.5).astype(int)
    # ppf gives the smallest k with cdf >= alpha / 2; rejection needs 2 cdf < alpha.
    k = np.where(2 * binom.cdf(k, d, 0.5) < alpha, k, k - 1)
    return np.where(d > 0, k, -1)


def mcnemar_power(
    n: int, delta: float, discordance: float, *, confidence: float = DEFAULT_CONFIDENCE
) -> float:
    """The exact McNemar test's power at n pairs: sums, over the discordant count d ~
    Binomial(n, psi), the chance that B's wins given d ~ Binomial(d, (psi + delta) /
    (2 psi)) fall where the test rejects (two-sided, p < alpha)."""
    _check_alternative(delta, discordance)
    if n < 1:
        return 0.0
    import numpy as np
    from scipy.stats import binom

    alpha = 1 - confidence
    mean, sd = n * discordance, math.sqrt(n * discordance * (1 - discordance))
    low = max(0, math.floor(mean - _TAIL_SDS * sd))
    high = min(n, math.ceil(mean + _TAIL_SDS * sd))
    d = np.arange(low, high + 1)
    k = _critical_counts(d, alpha)
    q = (discordance + delta) / (2 * discordance)
    reject = np.where(k >= 0, binom.cdf(k, d, q) + binom.sf(d - k - 1, d, q), 0.0)
    # A difference in either direction rejects, but k < d / 2 keeps the two tails apart.
    return float(min(np.sum(binom.pmf(d, n, discordance) * reject), 1.0))


def pairs_needed(
    delta: float,
    discordance: float,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    power: float = DEFAULT_POWER,
) -> tuple[int, int]:
    """(Connor's n, the first n from it on whose exact McNemar power reaches `power`).

    The exact power rises with n but not strictly (the discrete test's level jumps), so
    the search gallops up from Connor's n to a bracket and bisects it; the n returned
    has the power and its predecessor has not."""
    check_power_inputs(delta, power, confidence)
    start = connor_pairs(delta, discordance, confidence=confidence, power=power)

    def enough(n: int) -> bool:
        return mcnemar_power(n, delta, discordance, confidence=confidence) >= power

    if enough(start):
        return start, start
    low, step = start, max(1, start // 64)
    high = start + step
    while not enough(high):
        low, step = high, step * 2
        high = low + step
    while high - low > 1:  # low lacks the power, high has it
        middle = (low + high) // 2
        if enough(middle):
            high = middle
        else:
            low = middle
    return start, high


def design_effect(repeats: int, correlation: float) -> float:
    """Variance of a case's mean over K repeats relative to K independent pairs."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    if not 0 <= correlation <= 1:
        raise ValueError(f"the intra-case correlation must be in [0, 1], not {correlation:g}")
    return 1 + (repeats - 1) * correlation


def cases_needed(pairs: int, repeats: int, correlation: float) -> int:
    """Cases of `repeats` repeats each worth `pairs` independent pairs:
    n (1 + (K - 1) rho) / K, rounded up."""
    return math.ceil(pairs * design_effect(repeats, correlation) / repeats - 1e-9)


def minimum_detectable_effect(
    n: int,
    discordance: float,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    power: float = DEFAULT_POWER,
) -> float | None:
    """The smallest difference of pass rates that n pass/fail pairs with this observed
    discordance detect with the exact McNemar test at `power`; the discordance assumed at
    a difference delta is max(discordance, delta). None when not even a difference of 1
    (every pair won by one side) would be detected: too few pairs for the test's level."""
    check_power_inputs(None, power, confidence)
    if not 0 <= discordance <= 1:
        raise ValueError(f"discordance must be in [0, 1], not {discordance:g}")

    def enough(delta: float) -> bool:
        psi = max(discordance, delta)
        return mcnemar_power(n, delta, psi, confidence=confidence) >= power

    if n < 1 or not enough(1.0):
        return None
    low, high = 0.0, 1.0
    while high - low > 1e-5:
        middle = (low + high) / 2
        if enough(middle):
            high = middle
        else:
            low = middle
    return high


def se_detectable_effect(
    standard_error: float, *, confidence: float = DEFAULT_CONFIDENCE, power: float = DEFAULT_POWER
) -> float:
    """(z_{1-alpha/2} + z_{power}) standard errors: the difference a two-sided normal test
    at alpha detects with that power (2.8 SE at alpha = 0.05 and power 0.8)."""
    check_power_inputs(None, power, confidence)
    return (_z(1 - (1 - confidence) / 2) + _z(power)) * standard_error


def paired_standard_error(case_differences: Sequence[Sequence[float]]) -> float | None:
    """The standard error of the mean paired difference, cases as units: the standard
    deviation of the per-case mean differences over the square root of the cases (one
    pair a case without repeats). None with fewer than two cases."""
    means = [sum(case) / len(case) for case in case_differences if case]
    m = len(means)
    if m < 2:
        return None
    centre = sum(means) / m
    variance = sum((x - centre) ** 2 for x in means) / (m - 1)
    return math.sqrt(variance / m)


def intra_case_correlation(case_values: Sequence[Sequence[float]]) -> float | None:
    """The one-way ANOVA estimate of the intra-case correlation of a value over repeats,
    (MSB - MSW) / (MSB + (k0 - 1) MSW) with k0 the adjusted mean case size, clipped to
    [0, 1]. None without at least two cases and some case of two or more repeats, or
    when the values do not vary at all."""
    groups = [list(g) for g in case_values if g]
    a = len(groups)
    n = sum(len(g) for g in groups)
    if a < 2 or n <= a:
        return None
    grand = sum(sum(g) for g in groups) / n
    between = sum(len(g) * (sum(g) / len(g) - grand) ** 2 for g in groups)
    within = sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in groups)
    msb, msw = between / (a - 1), within / (n - a)
    k0 = (n - sum(len(g) ** 2 for g in groups) / n) / (a - 1)
    denominator = msb + (k0 - 1) * msw
    if denominator <= 0:
        return None
    return min(max((msb - msw) / denominator, 0.0), 1.0)


def comparison_mde(
    *,
    binary: bool,
    discordant: int,
    case_differences: Sequence[Sequence[float]],
    confidence: float,
    power: float = DEFAULT_POWER,
) -> tuple[float | None, MdeMethod]:
    """A paired comparison's `mde` and `mde_method` fields: the exact McNemar inversion
    at the observed discordance for pass/fail pairs (`binary`), else 2.8 standard errors
    of the paired difference with cases as units (None when it has no spread to measure:
    fewer than two cases, or every case's difference the same)."""
    n = sum(len(case) for case in case_differences)
    if binary:
        mde = minimum_detectable_effect(
            n, discordant / n, confidence=confidence, power=power
        ) if n else None  # fmt: skip
        return mde, CONNOR_EXACT
    se = paired_standard_error(case_differences)
    effect = se_detectable_effect(se, confidence=confidence, power=power) if se else None
    return effect, "se"
