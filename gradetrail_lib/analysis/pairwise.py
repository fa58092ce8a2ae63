"""Paired comparisons of runs, for the HTML report and the Dagster leaderboard: every
pair of several runs on each scorer (their scorer and dataset hashes checked, then the
paired interval and test, `stats.paired.compare`, the one comparison `compare`, `gate`
and the viewer make too), and their ranking with family-wise error control
(`rank_runs`, `stats.ranking`; also `gradetrail rank`).

A pair that cannot be compared is a `Pairing` that says why (`refused`), not an error:
a report or a leaderboard shows it beside the others.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from gradetrail_lib.analysis.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_THRESHOLD,
    BootstrapSettings,
    PairedComparison,
    ProportionMethod,
    check_comparable,
    compare,
)
from gradetrail_lib.analysis.stats.ranking import Ranking, rank
from gradetrail_lib.errors import InputError, NotComparable
from gradetrail_lib.results.runs import Run


@dataclass(frozen=True)
class Pairing:
    """Two runs on one scorer: their comparison, or why there is none (`refused`)."""

    label_a: str
    label_b: str
    scorer: str
    comparison: PairedComparison | None
    refused: str | None

    @property
    def winner(self) -> str | None:
        """The label of the run the verdict favours; None without a winner."""
        if self.comparison is None:
            return None
        return {"A": self.label_a, "B": self.label_b}.get(self.comparison.verdict)


def every_pair(
    runs: Sequence[tuple[str, Run | InputError]],
    scorers: Sequence[str] | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
) -> list[Pairing]:
    """Every pair of the labelled `runs` (the first with each later one, then the second,
    ...) on each of `scorers`, by default every scorer of the pair's first run: `compare`
    on their sheets, `b` against `a`. A run that could not be read (the InputError it
    raised) refuses each of its pairs."""
    pairings = []
    for (label_a, a), (label_b, b) in combinations(runs, 2):
        labels = (label_a, label_b)
        names = scorers if scorers is not None else _scorers_of(a, b)
        for scorer in names:
            if isinstance(a, InputError) or isinstance(b, InputError):
                which, error = (label_a, a) if isinstance(a, InputError) else (label_b, b)
                pairings.append(Pairing(*labels, scorer, None, f"{which}: {error}"))
                continue
            try:
                # Refused when their scorer or dataset hashes differ, or their samples do.
                check_comparable(a.manifest, b.manifest, scorer, labels=labels)
                comparison = compare(
                    a.sheet(scorer), b.sheet(scorer), scorer, labels=labels,
                    threshold=threshold, confidence=confidence, method=method, settings=settings,
                )  # fmt: skip
            except NotComparable as exc:
                pairings.append(Pairing(*labels, scorer, None, str(exc)))
                continue
            pairings.append(Pairing(*labels, scorer, comparison, None))
    return pairings


def _scorers_of(a: Run | InputError, b: Run | InputError) -> list[str]:
    """The first readable run's scorers (one refusal, of no scorer, when neither is)."""
    for run in (a, b):
        if isinstance(run, Run):
            return run.manifest.scorer_names
    return [""]


def rank_runs(
    runs: Sequence[tuple[str, Run]],
    scorer: str,
    *,
    force: bool = False,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    settings: BootstrapSettings | None = None,
) -> tuple[Ranking, list[str]]:
    """The labelled runs ranked on `scorer`, and the notes of a forced comparison.
    NotComparable when a run's scorer or dataset hash differs from the first's (unless
    `force`) or its samples do."""
    if len(runs) < 2:
        raise NotComparable("a ranking needs two or more runs")
    (first_label, first), *others = runs
    notes: list[str] = []
    for label, run in others:
        notes += check_comparable(
            first.manifest, run.manifest, scorer, force=force, labels=(first_label, label)
        )
    ranking = rank(
        [run.sheet(scorer) for _, run in runs],
        [label for label, _ in runs],
        scorer,
        threshold=threshold,
        confidence=confidence,
        settings=settings,
    )
    return ranking, notes
