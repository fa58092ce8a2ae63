"""The CI gate: fail a candidate only on a regression that is both large enough to care
about and large enough to be real.

The candidate fails when its mean score is lower than the baseline's by more than the
threshold AND the comparison names the baseline the winner (the paired interval on the
difference excludes zero and the paired test rejects: `paired.paired_verdict`). Either
condition alone is not enough: a big drop on a handful of samples may be noise, and a
tiny drop measured precisely on many samples may be below what anyone would block a
change for.
"""

from dataclasses import dataclass
from typing import Any

from gradetrail_lib.analysis.stats.defaults import DEFAULT_GATE_THRESHOLD
from gradetrail_lib.analysis.stats.paired import MCNEMAR, PairedComparison
from gradetrail_lib.analysis.stats.run_stats import percent


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    threshold: float
    comparison: PairedComparison  # A = baseline, B = candidate
    explanation: str

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "threshold": self.threshold,
            "explanation": self.explanation,
            "comparison": self.comparison.to_json(),
        }


def gate(comparison: PairedComparison, threshold: float = DEFAULT_GATE_THRESHOLD) -> GateDecision:
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, not {threshold}")
    c = comparison
    diff, ci = c.difference.value, c.difference.interval
    assert diff is not None and ci is not None  # a comparison has n >= 1
    drop = -diff
    cases = f" of {c.cases} cases (repeats; the interval resamples cases)" if c.clustered else ""
    # The comparison's verdict (`paired.paired_verdict`): the interval excludes zero and
    # the paired test rejects too.
    regressed = drop > threshold and c.verdict == "A"
    facts = (
        f"the candidate's mean score (unscored samples as 0) is {c.mean_b:.4f} against the "
        f"baseline's {c.mean_a:.4f} "
        f"on {c.n} paired samples{cases}, a difference of {diff:+.4f} with a "
        f"{percent(ci.confidence)} paired interval of {ci.format(4)} ({ci.method})"
    )
    if regressed:
        why = (
            f"the drop of {drop:.4f} exceeds the allowed {threshold:g} and the interval "
            "excludes zero, so this is a regression"
        )
    elif drop <= threshold:
        why = (
            f"the candidate is not worse by more than the allowed {threshold:g}"
            if drop > 0
            else "the candidate is not worse than the baseline"
        )
    elif ci.high < 0:
        why = (
            f"the drop of {drop:.4f} exceeds the allowed {threshold:g} and the interval "
            f"excludes zero, but the {c.test_label()} does not reject (p = "
            f"{c.p_value:.4g}), so the samples do not show it is real"
        )
    else:
        why = (
            f"the drop of {drop:.4f} exceeds the allowed {threshold:g}, but the interval "
            "contains zero, so the samples do not show it is real"
        )
    tests = [] if c.mcnemar_p is None else [f"exact McNemar p = {c.mcnemar_p:.4g}"]
    if c.test != MCNEMAR:
        tests.append(f"{c.test_label()} ({c.test}) p = {c.p_value:.4g}")
    counts = (
        f"Pass/fail: both pass {c.both_pass}, both fail {c.both_fail}, baseline only "
        f"{c.a_only}, candidate only {c.b_only}; {'; '.join(tests)}."
    )
    unscored = (
        f" Unscored samples (counted as failures): baseline {c.unscored_a}, "
        f"candidate {c.unscored_b}."
        if c.unscored_a or c.unscored_b
        else ""
    )
    notes = "".join(f" Note: {n}." for n in c.notes)
    notes += "".join(f" {m[0].upper()}{m[1:]}." for m in [c.mde_text()] if m)
    explanation = f"{'FAIL' if regressed else 'PASS'}: {facts}; {why}. {counts}{unscored}{notes}"
    return GateDecision(not regressed, threshold, comparison, explanation)
