"""Intervals clustered by case, for runs with repeats.

With `repeats: N` each case (a dataset sample) is run N times and every (case, repeat) is
a record of its own. The repeats of one case are not independent draws from the
population of cases: a hard case tends to fail every time. An interval that treats the
N x C records as independent (a Wilson interval over them, a bootstrap of them) is too
narrow, by up to a factor sqrt(N) when the repeats always agree. So where a case has more
than one record, the intervals here resample cases (a cluster bootstrap: each case's
records stay together), and the figure's n is the records with `clusters` the cases.

Every case with a single record is the unclustered case, and then these functions return
exactly what `stats.intervals` does (the same interval, no `clusters`), so runs without
repeats keep their figures.

With C cases and the same number of records in each (the usual case: every sample run
N times), the mean over records is the mean of the per-case means, and its interval is
`mean_interval` of the per-case means, C values: a bootstrap of them, or, when every
case is all-pass or all-fail, the proportion's interval over C cases, or the bound when
every case has the same mean. When cases hold different numbers of records (a mean score
over the scored records only, some repeats unscored), the statistic is the ratio
sum / count over the resampled cases, bootstrapped with each case's (sum, count) paired;
where `score_method` finds the per-case means too few or sparse for a bootstrap, the
score interval at the effective n weighs each case by its records (the ratio
estimator's variance), as the equal-size case does with equal weights.
"""

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE, ProportionMethod
from gradetrail_lib.analysis.stats.intervals import (
    BOOTSTRAP,
    NEFF,
    SPARSE,
    BootstrapSettings,
    Estimate,
    Interval,
    bootstrap_interval,
    effective_interval,
    mean_interval,
    proportion,
    score_method,
    skew_warning,
    too_skewed,
)

T = TypeVar("T")
CLUSTER = "cluster-"


def group_by(items: Iterable[T], key: Any) -> list[list[T]]:
    """`items` grouped by `key(item)`, groups in first-seen order, items in order."""
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def is_clustered(groups: Sequence[Sequence[Any]]) -> bool:
    """Whether some group holds more than one item (map and max: no Python loop, as a
    ranking asks this of every pair)."""
    return max(map(len, groups), default=0) > 1


def _ratio(sums: Any, counts: Any, axis: int = -1) -> Any:
    return sums.sum(axis=axis) / counts.sum(axis=axis)


def cluster_mean_interval(
    groups: Sequence[Sequence[float]],
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    bounds: tuple[float, float] = (0.0, 1.0),
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
    choose: bool = True,
) -> Interval:
    """Interval for the mean over every value of `groups` (one group per case, none
    empty), resampling groups; `mean_interval` itself when no group has two values.
    `choose`: as `mean_interval`'s."""
    if not groups or any(not g for g in groups):
        raise ValueError("need at least one group and no empty group")
    if not is_clustered(groups):
        return mean_interval(
            [g[0] for g in groups], confidence, bounds=bounds, method=method,
            settings=settings, choose=choose,
        )  # fmt: skip
    means = [math.fsum(g) / len(g) for g in groups]
    sizes = {len(g) for g in groups}
    if len(sizes) == 1 or all(m == means[0] for m in means):
        inner = mean_interval(
            means, confidence, bounds=bounds, method=method, settings=settings, choose=choose
        )
        return replace(inner, method=CLUSTER + inner.method)
    counts = [float(len(g)) for g in groups]
    chosen = score_method(means, bounds) if choose else BOOTSTRAP
    if chosen == NEFF and too_skewed(means, counts, bounds):
        chosen = SPARSE
    if chosen != BOOTSTRAP:
        inner = effective_interval(
            means, counts, confidence, bounds, method, sparse=chosen == SPARSE
        )
    else:
        sums = [math.fsum(g) for g in groups]
        inner = bootstrap_interval(
            (sums, counts), _ratio, confidence, bounds, settings or BootstrapSettings()
        )
        if choose:
            inner = replace(inner, warning=skew_warning(means, counts, bounds))
    return replace(inner, method=CLUSTER + inner.method)


def cluster_mean_estimate(
    groups: Sequence[Sequence[float]],
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    bounds: tuple[float, float] = (0.0, 1.0),
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
    choose: bool = True,
) -> Estimate:
    """The mean over all values with `cluster_mean_interval`; empty groups (a case with
    nothing to average, e.g. no scored repeat) are left out, as `mean_estimate` leaves
    out a missing value."""
    kept = [g for g in groups if g]
    values = [v for g in kept for v in g]
    if not values:
        return Estimate(None, 0, None)
    interval = cluster_mean_interval(
        kept, confidence, bounds=bounds, method=method, settings=settings, choose=choose
    )
    clusters = len(kept) if is_clustered(kept) else None
    return Estimate(math.fsum(values) / len(values), len(values), interval, clusters=clusters)


def cluster_proportion(
    groups: Sequence[Sequence[bool]],
    confidence: float = DEFAULT_CONFIDENCE,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
) -> Estimate:
    """k/n over every outcome, its interval resampling groups (cases); `proportion`
    itself (Wilson or exact over the n outcomes) when no group has two outcomes."""
    kept = [g for g in groups if g]
    k = sum(sum(bool(x) for x in g) for g in kept)
    n = sum(len(g) for g in kept)
    if not is_clustered(kept):
        return proportion(k, n, confidence, method)
    interval = cluster_mean_interval(
        [[1.0 if x else 0.0 for x in g] for g in kept],
        confidence,
        bounds=(0.0, 1.0),
        method=method,
        settings=settings,
    )
    return Estimate(k / n, n, interval, k, clusters=len(kept))
