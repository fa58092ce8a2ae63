"""A run's primary pass rate as the run history records it (`history.entries.PassRate`):
the figure the run summary prints, with its interval and n."""

from gradetrail_lib.analysis.stats.clusters import cluster_proportion
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.analysis.stats.intervals import proportion
from gradetrail_lib.history.entries import PassRate
from gradetrail_lib.results.totals import Totalled, totals_of
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD, Manifest


def pass_rate_of(
    records: Totalled,
    manifest: Manifest,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
) -> PassRate:
    """The primary scorer's pass rate as the run summary prints it (Wilson; resampling
    cases when a case has several records)."""
    scorer = manifest.primary_scorer
    figures = manifest.scores.get(scorer)
    if manifest.repeats == 1 and figures is not None and threshold == DEFAULT_THRESHOLD:
        # The manifest's counts (passed at the default threshold over every record).
        estimate = proportion(figures.passed, figures.n, confidence)
    else:
        cases = totals_of(records, [scorer]).case_passes(scorer, threshold)
        estimate = cluster_proportion(cases, confidence)
    interval = estimate.interval
    return PassRate(
        value=estimate.value,
        low=interval.low if interval else None,
        high=interval.high if interval else None,
        n=estimate.n,
        passed=estimate.successes or 0,
        cases=estimate.clusters,
        confidence=confidence,
        method=interval.method if interval else "wilson",
        threshold=threshold,
    )
