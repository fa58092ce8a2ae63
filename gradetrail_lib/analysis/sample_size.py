"""How many samples a paired comparison needs (`sample_sizes`), as `samples_needed`
(`engine.api`) and `gradetrail plan --detect` ask it.

For a paired comparison of pass/fail results on a spec (two models, or a candidate and
its baseline), the pairs needed to detect a difference of pass rates with the given power
at the gate's level (`stats.power`: Connor's formula, stepped up to the exact McNemar
test's power), and with repeats the cases of K repeats each (the design effect).

The discordance (the share of pairs the two sides do not both pass or both fail) is
measured on two runs of the spec (`observe`): the first of the pairs offered that hold
the same samples (`observe_pairs`). `samples_needed` offers the spec's runs in the run
history whose directories still hold them and whose results differ, the last two first
(`history.entries.run_pairs`): a discordance seen between the last two versions is the
best guess for the next. Otherwise it is assumed (`DEFAULT_DISCORDANCE`), and so is the
intra-case correlation of repeats unless those two runs have repeats to estimate it from;
each `SampleSize` says which.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Literal

from gradetrail_lib.analysis.stats.clusters import group_by
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.analysis.stats.paired import pair_up
from gradetrail_lib.analysis.stats.power import (
    CONNOR_EXACT,
    DEFAULT_CORRELATION,
    DEFAULT_DISCORDANCE,
    DEFAULT_POWER,
    cases_needed,
    intra_case_correlation,
    pairs_needed,
)
from gradetrail_lib.errors import NotComparable
from gradetrail_lib.results.runs import load_run
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD

Source = Literal["observed", "assumed"]


@dataclass(frozen=True)
class SampleSize:
    """The samples a paired comparison needs at one repeat count."""

    detect: float  # the difference of pass rates to detect
    power: float
    confidence: float  # alpha = 1 - confidence, two-sided: the gate's level
    discordance: float  # the share of discordant pairs used
    discordance_source: Source
    repeats: int
    # The intra-case correlation of the paired differences (None without repeats).
    correlation: float | None
    correlation_source: Source | None
    connor_pairs: int  # Connor's formula, independent pairs
    pairs: int  # independent pairs for the exact McNemar test to reach the power
    cases: int  # cases of `repeats` repeats each: pairs times the design effect / K
    method: str = CONNOR_EXACT
    # The two run directories the discordance was measured on, older first.
    observed_runs: tuple[str, str] | None = None
    notes: tuple[str, ...] = ()

    @property
    def samples(self) -> int:
        """Samples a side: cases x repeats."""
        return self.cases * self.repeats

    def describe(self) -> str:
        """One line: what is needed, and on what assumptions."""
        need = (
            f"{self.cases:,} samples"
            if self.repeats == 1
            else f"{self.cases:,} cases x {self.repeats} repeats = {self.samples:,} samples"
        )
        source = (
            f"observed between {self.observed_runs[0]} and {self.observed_runs[1]}"
            if self.observed_runs is not None and self.discordance_source == "observed"
            else self.discordance_source
        )
        text = (
            f"{need} a side to detect a difference of {self.detect:g} in pass rate with "
            f"{self.power * 100:g}% power at alpha = {1 - self.confidence:.3g} two-sided "
            f"({self.method}: Connor's n {self.connor_pairs:,}, exact McNemar "
            f"{self.pairs:,} pairs; discordance {self.discordance:.3g}, {source}"
        )
        if self.correlation is not None:
            text += (
                f"; intra-case correlation {self.correlation:.3g}, {self.correlation_source}"
                f"; design effect {1 + (self.repeats - 1) * self.correlation:.3g}"
            )
        return text + ")"

    def to_json(self) -> dict[str, Any]:
        return {
            "detect": self.detect,
            "power": self.power,
            "confidence": self.confidence,
            "alpha": round(1 - self.confidence, 12),
            "method": self.method,
            "discordance": self.discordance,
            "discordance_source": self.discordance_source,
            "observed_runs": list(self.observed_runs) if self.observed_runs else None,
            "repeats": self.repeats,
            "correlation": self.correlation,
            "correlation_source": self.correlation_source,
            "connor_pairs": self.connor_pairs,
            "pairs": self.pairs,
            "cases": self.cases,
            "samples": self.samples,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Observed:
    """What the spec's last two runs show: their discordance, and the intra-case
    correlation of their paired differences when they have repeats."""

    runs: tuple[str, str]
    discordance: float
    correlation: float | None


# Pairs of runs tried before the discordance is assumed: each try reads two runs.
TRIES = 8


def observe_pairs(pairs: Iterable[tuple[Path, Path]]) -> tuple[Observed | None, list[str]]:
    """The discordance of the first of these pairs of run directories (older first in
    each) that pair up (the same samples), trying `TRIES` at most, and why the pairs
    tried before it did not."""
    skipped: list[str] = []
    for older, newer in islice(pairs, TRIES):
        try:
            return observe(older, newer), skipped
        except NotComparable as exc:
            skipped.append(f"passed over {older.name} and {newer.name}: {exc}")
    return None, skipped


def observe(run_a: Path, run_b: Path, threshold: float = DEFAULT_THRESHOLD) -> Observed:
    """The discordance of two runs on the newer run's primary scorer, paired on (sample
    id, repeat); NotComparable when they do not hold the same samples."""
    a, b = load_run(run_a), load_run(run_b)
    scorer = b.manifest.primary_scorer
    sheet_a, sheet_b = a.sheet(scorer), b.sheet(scorer)
    in_b = pair_up(sheet_a, sheet_b, (run_a.name, run_b.name))
    # NaN (unscored) fails every threshold, as in a paired comparison.
    differences = [
        float(sheet_b.scores[j] >= threshold) - float(sheet_a.scores[i] >= threshold)
        for i, j in enumerate(in_b)
    ]
    cases = group_by(range(len(differences)), lambda i: sheet_a.ids[i])
    correlation = None
    if any(len(case) > 1 for case in cases):
        correlation = intra_case_correlation([[differences[i] for i in case] for case in cases])
    return Observed(
        runs=(run_a.name, run_b.name),
        discordance=sum(d != 0 for d in differences) / len(differences),
        correlation=correlation,
    )


def sample_sizes(
    detect: float,
    repeats: int,
    seen: Observed | None,
    notes: Sequence[str] = (),
    *,
    power: float = DEFAULT_POWER,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[SampleSize]:
    """The samples a paired comparison needs to detect a difference of `detect` in pass
    rate: one `SampleSize` without repeats, and one at `repeats` when that is more than
    one; the discordance and the intra-case correlation are `seen`'s, or assumed without
    it. `notes` (why no pair was observed, say) go on each. `detect`, `power` and
    `confidence` as `stats.power.check_power_inputs` passes them."""
    notes = list(notes)
    discordance = seen.discordance if seen is not None else DEFAULT_DISCORDANCE
    source: Source = "observed" if seen is not None else "assumed"
    if discordance < detect:
        # Every pair that moves the pass rate is discordant: a difference of `detect`
        # brings at least that much discordance with it.
        notes.append(
            f"a discordance of {discordance:.3g} is below the difference to detect; "
            f"{detect:g} is used (a difference that size makes at least that many pairs "
            "discordant)"
        )
        discordance = detect
    connor, exact = pairs_needed(detect, discordance, confidence=confidence, power=power)
    sizes = []
    for count in sorted({1, repeats}):
        correlation: float | None = None
        correlation_source: Source | None = None
        if count > 1:
            observed_rho = seen.correlation if seen is not None else None
            correlation = observed_rho if observed_rho is not None else DEFAULT_CORRELATION
            correlation_source = "observed" if observed_rho is not None else "assumed"
        sizes.append(
            SampleSize(
                detect=detect,
                power=power,
                confidence=confidence,
                discordance=discordance,
                discordance_source=source,
                repeats=count,
                correlation=correlation,
                correlation_source=correlation_source,
                connor_pairs=connor,
                pairs=exact,
                cases=cases_needed(exact, count, correlation or 0.0) if count > 1 else exact,
                observed_runs=seen.runs if seen is not None else None,
                notes=tuple(notes),
            )
        )
    return sizes
