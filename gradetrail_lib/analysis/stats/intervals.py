"""Confidence intervals: a proportion (Wilson, or exact Clopper-Pearson) and a mean
(bootstrap). Every estimate carries its n.

The arithmetic is scipy's (`binomtest(...).proportion_ci`, `bootstrap`), with one
exception: the Wilson interval is the closed form scipy itself evaluates, written out
with the standard library's normal quantile. Importing scipy.stats costs more than the
whole CLI's start-up (docs/performance.md), and `gradetrail run` prints a Wilson interval
after every run; tests hold the two equal to 1e-12 over a grid of k, n and confidence.
scipy is imported only where it is needed (exact intervals, bootstraps, McNemar; a run
with repeats, whose intervals resample cases: `stats.clusters`).

This module decides which method applies and what to do where they have nothing to say:

* a mean of binary scores is a proportion, so it gets the proportion's interval
  rather than a bootstrap that would disagree with the pass rate for the same number;
* when every value is the same (n = 1 included) a bootstrap collapses to a point,
  which claims certainty the data do not have. Instead: with confidence c, at least a
  share p (the binomial interval's lower end for n of n) of the population has the
  observed value v, and the rest may lie anywhere in the score range [lo, hi]; so the
  mean lies in [v*p + lo*(1-p), v*p + hi*(1-p)]. For binary values this is exactly the
  proportion's interval for 0/n or n/n; for a difference of zero on n pairs it is a
  band around zero that shrinks as n grows;
* other values (graded scores, per-case pass^k, shares) take the method `score_method`
  chooses, because the bootstrap undercovers where values are few, sparse or skewed
  (91 % for a skewed mean at n = 20, 79 % for pass^10 over 50 cases): a bootstrap
  where it covers, else a score interval at the effective n (`effective_interval`:
  "<method>-sparse" or "<method>-neff"). Where no method is known to cover, the
  interval carries a one-line `warning`, printed wherever the figure is. Coverage of
  every choice is measured in bench/bench_coverage.py and asserted in
  tests/analysis/test_coverage.py; docs/statistics.md has the table.
"""

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any, Literal

from gradetrail_lib.analysis.stats.defaults import (
    DEFAULT_CONFIDENCE,
    PROPORTION_METHODS,
    ProportionMethod,
)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    confidence: float
    # "wilson", "exact", "bootstrap-bca", "bootstrap-percentile", "<method>-bound"
    # (the all-values-equal case above), "<method>-sparse" or "<method>-neff"
    # (`effective_interval`); "cluster-" in front when it resamples cases. Printed, so
    # stable: docs/statistics.md lists them.
    method: str
    # Why the interval may not hold its confidence (one line), when no method is known
    # to cover for values like these; printed beside the figure.
    warning: str | None = None

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def format(self, digits: int = 3) -> str:
        """`[0.412, 0.588]`, and ` (warning: ...)` after it when there is one, so that
        every place printing the interval prints its warning."""
        warning = f" (warning: {self.warning})" if self.warning else ""
        return f"[{self.low:.{digits}f}, {self.high:.{digits}f}]{warning}"

    def to_json(self) -> dict[str, Any]:
        return {
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "method": self.method,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class Estimate:
    """A figure with its n; `value` and `interval` are None when n is 0."""

    value: float | None
    n: int
    interval: Interval | None
    successes: int | None = None  # for proportions: k of k/n
    # The cases the n samples belong to when a case was run more than once (repeats),
    # and the interval resamples cases, not samples (stats.clusters); None otherwise.
    clusters: int | None = None

    @property
    def n_text(self) -> str:
        """`n=12`, or `n=60, 12 cases` for an interval clustered by case."""
        cases = f", {self.clusters} cases" if self.clusters is not None else ""
        return f"n={self.n}{cases}"

    @property
    def warning(self) -> str | None:
        return self.interval.warning if self.interval is not None else None

    @property
    def warning_text(self) -> str:
        """`; warning: ...` to append where the figure is printed, or ""."""
        return f"; warning: {self.warning}" if self.warning else ""

    def format(self, digits: int = 3) -> str:
        if self.value is None or self.interval is None:
            return f"n/a ({self.n_text})"
        return f"{self.value:.{digits}f} {self.interval.format(digits)} ({self.n_text})"

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "n": self.n,
            "successes": self.successes,
            "clusters": self.clusters,
            "interval": self.interval.to_json() if self.interval else None,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class BootstrapSettings:
    """9,999 resamples (scipy's default) from a fixed seed, so the same rows always give
    the same interval. BCa corrects bias and skew but its jackknife costs O(n^2), so
    above `bca_max_n` values the percentile method is used (at that n the two agree)."""

    n_resamples: int = 9999
    seed: int = 0
    bca_max_n: int = 2000


def check_confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, not {confidence}")
    return confidence


def proportion_interval(
    k: int, n: int, confidence: float = DEFAULT_CONFIDENCE, method: ProportionMethod = "wilson"
) -> Interval:
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if method not in PROPORTION_METHODS:
        raise ValueError(f"method must be one of {PROPORTION_METHODS}, not {method!r}")
    check_confidence(confidence)
    if method == "wilson":
        low, high = wilson_bounds(k, n, confidence)
        return Interval(low, high, confidence, method)
    from scipy.stats import binomtest  # see the module docstring

    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method=method)
    return Interval(float(ci.low), float(ci.high), confidence, method)


def wilson_bounds(k: float, n: float, confidence: float) -> tuple[float, float]:
    """The Wilson score interval exactly as scipy's `_binom_wilson_conf_int` computes it
    (two-sided, no continuity correction; Newcombe 1998), ends at 0/n and n/n exact.
    k and n need not be whole: an effective n (`analysis.retrieval`) is not."""
    z = NormalDist().inv_cdf(0.5 + 0.5 * confidence)
    p = k / n
    denom = 2 * (n + z**2)
    center = (2 * n * p + z**2) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z**2)
    return (0.0 if k == 0 else center - delta, 1.0 if k == n else center + delta)


def proportion(
    k: int, n: int, confidence: float = DEFAULT_CONFIDENCE, method: ProportionMethod = "wilson"
) -> Estimate:
    if n == 0:
        return Estimate(None, 0, None, 0)
    return Estimate(k / n, n, proportion_interval(k, n, confidence, method), k)


def mean_interval(
    values: Sequence[float],
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    bounds: tuple[float, float] = (0.0, 1.0),
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
    choose: bool = True,
) -> Interval:
    """Interval for the mean of values known to lie within `bounds`. `choose=False`
    keeps the bootstrap where `score_method` would not (a paired difference, whose
    methods are `stats.paired`'s)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    lo, hi = bounds
    first = values[0]
    if all(v == first for v in values):
        share = proportion_interval(n, n, confidence, method).low
        return Interval(
            first * share + lo * (1 - share),
            first * share + hi * (1 - share),
            confidence,
            f"{method}-bound",
        )
    if bounds == (0.0, 1.0) and all(v in (0.0, 1.0) for v in values):
        return proportion_interval(sum(1 for v in values if v == 1.0), n, confidence, method)
    chosen = score_method(values, bounds) if choose else BOOTSTRAP
    if chosen != BOOTSTRAP:
        return effective_interval(values, None, confidence, bounds, method, sparse=chosen == SPARSE)
    interval = bootstrap_interval(
        (values,), mean_of, confidence, bounds, settings or BootstrapSettings()
    )
    if not choose:
        return interval
    return replace(interval, warning=skew_warning(values, None, bounds))


ScoreMethod = Literal["bootstrap", "sparse", "neff"]
BOOTSTRAP: ScoreMethod = "bootstrap"
SPARSE: ScoreMethod = "sparse"
NEFF: ScoreMethod = "neff"
# The rule's cut-offs; bench/bench_coverage.py measures the coverage they give.
SPARSE_SIGNAL = 5  # fewer values carrying signal: sparse
SPARSE_SHARE = 0.15  # ... or, below SMALL_N, fewer than this share of n
SMALL_N = 30  # below: the effective n, never the bootstrap
NEFF_SIGNAL = 15  # fewer values carrying signal: the effective n
# Skewness beyond what the effective-n interval models (SKEW_RATIO-fold): the score
# interval at n instead; a bootstrap below SKEW_MAX_N warns (`skew_warning`).
SKEW_RATIO = 1.8
# Kurtosis above this: a few values far from the rest carry the mean (pass^10 of cases
# that rarely pass ten times in twenty: kurtosis 9-28), and the effective n, read off
# the sample's variance, is too large (coverage 85-89 %). Per-case pass rates of 0/1
# repeats have 2-5.
KURTOSIS_MAX = 8.0
SKEW_MAX_N = 100
SMALL_N_SKEW = 1.5


def signal_count(values: Sequence[float], bounds: tuple[float, float] = (0.0, 1.0)) -> float:
    """How many values carry the signal: (sum d)^2 / sum d^2, d each value's distance
    from the bound the mean lies nearer to. k for k non-zero 0/1 values among zeros
    (or k failing cases among cases that pass every repeat); 3n/4 for uniform values;
    a handful when a few values make up most of the mean (pass^10 over cases of which
    only some pass ten times in twenty), where the bootstrap undercovers."""
    lo, hi = bounds
    mean = math.fsum(values) / len(values)
    ref = lo if mean - lo <= hi - mean else hi
    d = [abs(v - ref) for v in values]
    squares = math.fsum(x * x for x in d)
    return math.fsum(d) ** 2 / squares if squares > 0 else 0.0


def score_method(values: Sequence[float], bounds: tuple[float, float] = (0.0, 1.0)) -> ScoreMethod:
    """Which interval covers for the mean of `values` (units: one per sample, or one
    per case when clustered), measured in bench/bench_coverage.py (`signal_count`
    counts the values carrying signal):

    * "sparse": fewer than 5 values carry signal, or n < 30 and fewer than 15 % of n
      do: the score interval at n (Wilson or exact at the mean), which holds for any
      values within the bounds since their variance is at most that of 0/1 values;
    * "neff": n < 30 or fewer than 15 values carry signal: the score interval at the
      Korn-Graubard effective n (`effective_interval`), or "sparse" again when the
      values are more skewed than that interval allows for (`too_skewed`: pass^10 of
      cases that rarely pass ten times, where it covered 85-89 %);
    * "bootstrap" otherwise."""
    n = len(values)
    signal = signal_count(values, bounds)
    if signal < SPARSE_SIGNAL or (n < SMALL_N and signal < SPARSE_SHARE * n):
        return SPARSE
    if n < SMALL_N or signal < NEFF_SIGNAL:
        return SPARSE if too_skewed(values, None, bounds) else NEFF
    return BOOTSTRAP


# Below either, a paired bootstrap of graded differences is not known to cover.
PAIRED_MIN_PAIRS = 30
PAIRED_MIN_SIGNAL = 10


def paired_warning(differences: Sequence[float]) -> str | None:
    """The warning for a paired difference of graded (not 0/1) scores: fewer than 30
    pairs (cases, with repeats) or fewer than 10 effective differences (`signal_count`
    from zero: 3 for three equal non-zero differences among zeros)."""
    n = len(differences)
    squares = math.fsum(d * d for d in differences)
    effective = math.fsum(abs(d) for d in differences) ** 2 / squares if squares else 0.0
    if n >= PAIRED_MIN_PAIRS and effective >= PAIRED_MIN_SIGNAL:
        return None
    return (
        f"{effective:.1f} effective differences over {n} pairs: a paired bootstrap of "
        "graded scores is not known to cover with fewer than 10 or under 30 pairs"
    )


def _moments(
    values: Sequence[float], weights: Sequence[float] | None, bounds: tuple[float, float]
) -> tuple[float, float, float, float]:
    """(mean, variance of the mean, kurtosis, skewness) of the values rescaled to [0, 1]
    (a ratio estimator's linearized residuals w_i (x_i - m) / mean w when weighted)."""
    lo, hi = bounds
    x = [(v - lo) / (hi - lo) for v in values]
    n = len(x)
    w = [1.0] * n if weights is None else [float(v) for v in weights]
    total = math.fsum(w)
    mean = math.fsum(wi * xi for wi, xi in zip(w, x, strict=True)) / total
    r = [wi * (xi - mean) * n / total for wi, xi in zip(w, x, strict=True)]
    m2 = math.fsum(v * v for v in r) / n
    m3 = math.fsum(v**3 for v in r) / n
    m4 = math.fsum(v**4 for v in r) / n
    variance = m2 / (n - 1) if n > 1 else 0.0
    kurtosis = m4 / m2**2 if m2 > 0 else 3.0
    skewness = m3 / m2**1.5 if m2 > 0 else 0.0
    return mean, variance, kurtosis, skewness


def effective_n(
    values: Sequence[float],
    weights: Sequence[float] | None,
    confidence: float,
    bounds: tuple[float, float] = (0.0, 1.0),
) -> tuple[float, float]:
    """(mean rescaled to [0, 1], Korn and Graubard's degrees-of-freedom-adjusted
    effective n): n_eff = m (1 - m) / var(mean), the n at which 0/1 values would give
    the mean its observed variance, times (z / t_df)^2, t's df being those of the
    variance estimate, 2n / (kurtosis - (n-3)/(n-1)) (n - 1 for normal values, fewer
    for sparse or heavy-tailed ones). Korn and Graubard (1998), "Confidence intervals
    for proportions with small expected number of positive counts estimated from
    survey data", Survey Methodology 24."""
    from scipy.stats import t  # see the module docstring

    n = len(values)
    mean, variance, kurtosis, _ = _moments(values, weights, bounds)
    if variance <= 0 or n < 2:
        return mean, float(n)
    n_eff = mean * (1 - mean) / variance
    df = min(max(2 * n / max(kurtosis - (n - 3) / (n - 1), 1e-9), 1.0), n - 1.0)
    z = NormalDist().inv_cdf(0.5 + 0.5 * confidence)
    return mean, n_eff * (z / float(t.ppf(0.5 + 0.5 * confidence, df))) ** 2


def score_bounds(
    mean: float, n: float, confidence: float, method: ProportionMethod
) -> tuple[float, float]:
    """Wilson's or Clopper-Pearson's interval for a proportion `mean` at a (possibly
    fractional) n."""
    if method == "wilson":
        z = NormalDist().inv_cdf(0.5 + 0.5 * confidence)
        denom = 2 * (n + z**2)
        center = (2 * n * mean + z**2) / denom
        delta = z / denom * math.sqrt(max(4 * n * mean * (1 - mean) + z**2, 0.0))
        return max(center - delta, 0.0), min(center + delta, 1.0)
    from scipy.stats import beta

    k, alpha = mean * n, 1 - confidence
    low = 0.0 if k <= 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k >= n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def effective_interval(
    values: Sequence[float],
    weights: Sequence[float] | None,
    confidence: float,
    bounds: tuple[float, float],
    method: ProportionMethod,
    *,
    sparse: bool,
) -> Interval:
    """The score interval (Wilson or exact, `method`) at the mean of `values`
    (weighted: a ratio of per-case sums and counts) rescaled to [0, 1]: at n when
    `sparse` ("<method>-sparse"), else at the effective n ("<method>-neff")."""
    check_confidence(confidence)
    lo, hi = bounds
    if sparse:
        mean = _moments(values, weights, bounds)[0]
        at: float = float(len(values))
    else:
        mean, at = effective_n(values, weights, confidence, bounds)
    low, high = score_bounds(mean, at, confidence, method)
    return Interval(
        low=lo + (hi - lo) * low,
        high=lo + (hi - lo) * high,
        confidence=confidence,
        method=f"{method}-{SPARSE if sparse else NEFF}",
        # The score interval at n holds for any values in the bounds: no warning.
        warning=None if sparse else skew_warning(values, weights, bounds),
    )


def too_skewed(
    values: Sequence[float], weights: Sequence[float] | None, bounds: tuple[float, float]
) -> bool:
    """Whether the values are more skewed than the score interval at the effective n
    allows for: their kurtosis exceeds KURTOSIS_MAX, or their skewness exceeds
    SKEW_RATIO-fold that of 0/1 values with the same mean and variance (the skewness
    the score interval models)."""
    if len(values) < 3:
        return False
    mean, variance, kurtosis, skewness = _moments(values, weights, bounds)
    if variance <= 0 or not 0 < mean < 1:
        return False
    if kurtosis > KURTOSIS_MAX:
        return True
    n = len(values)
    # Skewness of 0/1 values at this mean, scaled to this variance: sqrt(n_eff / n).
    binary = (1 - 2 * mean) / math.sqrt(mean * (1 - mean))
    modeled = binary * math.sqrt(variance * n / (mean * (1 - mean)))
    return abs(skewness) > SKEW_RATIO * max(abs(modeled), 0.5)


def skew_warning(
    values: Sequence[float], weights: Sequence[float] | None, bounds: tuple[float, float]
) -> str | None:
    """The one-line warning for a bootstrap or an effective-n interval where no method
    is known to cover (bench/bench_coverage.py): below n = 100, values `too_skewed`
    (heavy-tailed); below n = 30, skewness above 1.5 (skewed scores there cover 95 %,
    heavy-tailed ones 89.5-94 %, and a sample of so few cannot tell the two apart)."""
    n = len(values)
    if n >= SKEW_MAX_N or n < 3:
        return None
    if too_skewed(values, weights, bounds):
        return f"heavy-tailed values at n={n}: no interval here is known to cover them"
    skewness = _moments(values, weights, bounds)[3]
    if n < SMALL_N and abs(skewness) > SMALL_N_SKEW:
        return (
            f"skewed values (skewness {skewness:.1f}) at n={n}: the interval may "
            "undercover if the scores are heavy-tailed"
        )
    return None


def mean_of(data: Any, axis: int = -1) -> Any:
    """The mean along `axis`: the vectorized statistic scipy's resampling calls."""
    import numpy as np

    return np.mean(data, axis=axis)


def bootstrap_interval(
    samples: Sequence[Sequence[float]],
    statistic: Any,
    confidence: float,
    bounds: tuple[float, float],
    settings: BootstrapSettings,
) -> Interval:
    """scipy's bootstrap of a vectorized `statistic(*samples, axis)`; several samples are
    resampled together (paired: row i of each is one unit, e.g. one case's sum and count)."""
    import numpy as np
    from scipy.stats import bootstrap

    data = tuple(np.asarray(values, dtype=float) for values in samples)
    size = len(data[0])
    methods = ["BCa", "percentile"] if size <= settings.bca_max_n else ["percentile"]
    low = high = math.nan
    for name in methods:
        with warnings.catch_warnings():
            # BCa warns (and returns NaN) on data it cannot correct, e.g. a single
            # outlier among equal values; the percentile method is the fallback.
            warnings.simplefilter("ignore")
            result = bootstrap(
                data,
                statistic,
                paired=len(data) > 1,
                confidence_level=check_confidence(confidence),
                n_resamples=settings.n_resamples,
                method=name,
                vectorized=True,
                # Resamples are n floats per sample; batching bounds memory at ~40 MB.
                batch=max(1, 5_000_000 // (size * len(data))),
                rng=np.random.default_rng(settings.seed),
            )
        low, high = (float(x) for x in result.confidence_interval)
        if math.isfinite(low) and math.isfinite(high):
            break
    # Resampled means cannot leave the range, but float sums can by an ulp; and were
    # both methods to give NaN, max/min with NaN yield the whole range: honest, if wide.
    lo, hi = bounds
    return Interval(max(lo, low), min(hi, high), confidence, f"bootstrap-{name.lower()}")


def mean_estimate(
    values: Sequence[float],
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    bounds: tuple[float, float] = (0.0, 1.0),
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
    choose: bool = True,
) -> Estimate:
    if not values:
        return Estimate(None, 0, None)
    interval = mean_interval(
        values, confidence, bounds=bounds, method=method, settings=settings, choose=choose
    )
    return Estimate(math.fsum(values) / len(values), len(values), interval)
