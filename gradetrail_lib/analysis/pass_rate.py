"""A run's primary pass rate as the run summary prints it and the run history records it
(`PassRate`, each entry's `pass_rate`), with its interval and n."""

from pydantic import BaseModel, ConfigDict

from gradetrail_lib.analysis.stats.clusters import cluster_proportion
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.analysis.stats.intervals import proportion
from gradetrail_lib.results.totals import Totalled, totals_of
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD, Manifest


class PassRate(BaseModel):
    """The primary scorer's pass rate (score >= threshold; unscored samples fail) with
    its interval; `cases` when the interval resamples cases (repeats)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float | None
    low: float | None
    high: float | None
    n: int
    passed: int
    cases: int | None = None
    confidence: float
    method: str
    threshold: float

    def describe(self, digits: int = 3) -> str:
        """`0.750 (95% CI 0.470-0.911, n=12)`."""
        cases = f", {self.cases} cases" if self.cases is not None else ""
        if self.value is None or self.low is None or self.high is None:
            return f"n/a (n={self.n}{cases})"
        return (
            f"{self.value:.{digits}f} ({self.confidence * 100:g}% CI "
            f"{self.low:.{digits}f}-{self.high:.{digits}f}, n={self.n}{cases})"
        )


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
