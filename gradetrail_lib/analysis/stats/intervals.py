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
  band around zero that shrinks as n grows.
"""

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from gradetrail_lib.results.defaults import DEFAULT_CONFIDENCE, PROPORTION_METHODS, ProportionMethod


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    confidence: float
    # "wilson", "exact", "bootstrap-bca", "bootstrap-percentile", or "<method>-bound"
    # (the all-values-equal case above).
    method: str

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def format(self, digits: int = 3) -> str:
        return f"[{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "method": self.method,
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
) -> Interval:
    """Interval for the mean of values known to lie within `bounds`."""
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
    return bootstrap_interval(
        (values,), mean_of, confidence, bounds, settings or BootstrapSettings()
    )


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
) -> Estimate:
    if not values:
        return Estimate(None, 0, None)
    interval = mean_interval(values, confidence, bounds=bounds, method=method, settings=settings)
    return Estimate(math.fsum(values) / len(values), len(values), interval)
