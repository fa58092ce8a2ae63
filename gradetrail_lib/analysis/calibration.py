"""How far a judge scorer can be trusted, measured against human labels
(`gradetrail_lib.labels`), and the pass rate corrected for its errors.

Pure functions over verdicts; `calibrate_run` reads a run and its labels at the edge.

* The confusion matrix puts the human label as the truth and pass as the positive class:
  `tp` both pass, `fp` the judge passes what the person failed, `fn` the judge fails what
  the person passed, `tn` both fail. Every label that applies to a record of the run
  counts (random and selected).
* Sensitivity tp/(tp+fn) and specificity tn/(tn+fp) take Wilson intervals (as every
  proportion here).
* Cohen's kappa takes the large-sample variance of Fleiss, Cohen and Everitt (1969),
  the interval kappa +- z*se, clipped to [-1, 1].
* The corrected pass rate is PPI++'s power-tuned mean (Angelopoulos, Duchi and Zrnic,
  2023, arXiv:2311.01453): the randomly labelled records are the labelled set (their
  labels Y and the judge's verdicts Yhat), every other answered record the unlabelled set
  (verdicts only). theta = lam*mean(Yhat_u) + mean(Y - lam*Yhat), lam chosen from the data
  to minimise the variance and clipped to [0, 1] (lam = 0 is the labels' own mean, lam = 1
  plain PPI), with a normal interval from both sets' variances. This is what
  `ppi_py.ppi_mean_pointestimate` / `ppi_mean_ci` compute; tests hold them equal. Only
  `random` labels enter it: labels a person chose are not a sample of the run. Records
  without a response are known fails (no label needed): the estimate over the answered
  records is scaled by the answered share.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.analysis.stats.intervals import wilson_bounds
from gradetrail_lib.labels.store import LabelLookup, labels_path, read_labels, record_key
from gradetrail_lib.results.runs import load_run
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD

KAPPA_METHOD = "fleiss-cohen-everitt-1969"
PPI_METHOD = "ppi++-mean"
WILSON = "wilson"
# Below this many random labels a corrected rate's normal interval is not trusted (and
# the variances that tune lam are noise): the figure is withheld.
MIN_RANDOM_LABELS = 30
DEFAULT_TARGET_WIDTH = 0.10
# Below these many labels the normal intervals of the corrected rate and of kappa cover
# less than they claim (a 95 % corrected interval 82-92 % at 30 random labels; kappa's
# 88-92 % at 50 labels, 92-93 % at 100: docs/statistics.md), so they carry a warning.
RELIABLE_LABELS = 100
RELIABLE_KAPPA_LABELS = 200


def few_labels_warning(n: int, reliable: int = RELIABLE_LABELS) -> str | None:
    if n >= reliable:
        return None
    return (
        f"{n} labels: below {reliable} this normal interval covers less than it "
        "claims (docs/statistics.md)"
    )


@dataclass(frozen=True, kw_only=True)
class Figure:
    """An estimate with its interval and the method that made it; None where undefined."""

    value: float | None
    low: float | None
    high: float | None
    method: str
    # Why the interval may not hold its confidence (measured: docs/statistics.md).
    warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        shown = {"value": self.value, "low": self.low, "high": self.high, "method": self.method}
        return shown | ({"warning": self.warning} if self.warning else {})

    def figure(self, digits: int = 3) -> str:
        """`0.021 [-0.203, 0.245]`, without the method and the warning (a table shows
        them apart: the method under the figure, the warning as a footnote)."""
        if self.value is None or self.low is None or self.high is None:
            return "n/a"
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def format(self, digits: int = 3) -> str:
        if self.value is None or self.low is None or self.high is None:
            return "n/a"
        warning = f"; warning: {self.warning}" if self.warning else ""
        return f"{self.figure(digits)} ({self.method}{warning})"


@dataclass(frozen=True, kw_only=True)
class Confusion:
    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    def to_json(self) -> dict[str, int]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn}


def confusion_of(truth: Sequence[bool], judged: Sequence[bool]) -> Confusion:
    pairs = list(zip(truth, judged, strict=True))
    return Confusion(
        tp=sum(1 for t, j in pairs if t and j),
        fp=sum(1 for t, j in pairs if not t and j),
        fn=sum(1 for t, j in pairs if t and not j),
        tn=sum(1 for t, j in pairs if not t and not j),
    )


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + 0.5 * confidence)


def wilson(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Figure:
    if n == 0:
        return Figure(value=None, low=None, high=None, method=WILSON)
    low, high = wilson_bounds(k, n, confidence)
    return Figure(value=k / n, low=low, high=high, method=WILSON)


def cohen_kappa(confusion: Confusion, confidence: float = DEFAULT_CONFIDENCE) -> Figure:
    """Cohen's kappa of the two raters (the person, the judge) with the Fleiss-Cohen-Everitt
    interval; undefined (None) when chance agreement is total (one class only)."""
    n = confusion.n
    if n == 0:
        return Figure(value=None, low=None, high=None, method=KAPPA_METHOD)
    # Rows: the label (pass, fail); columns: the judge (pass, fail).
    p = np.array([[confusion.tp, confusion.fn], [confusion.fp, confusion.tn]], float) / n
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    po, pe = float(np.trace(p)), float(rows @ cols)
    if pe >= 1.0:
        return Figure(value=None, low=None, high=None, method=KAPPA_METHOD)
    kappa = (po - pe) / (1 - pe)
    diagonal = sum(p[i, i] * (1 - (rows[i] + cols[i]) * (1 - kappa)) ** 2 for i in range(2))
    off = (1 - kappa) ** 2 * sum(
        p[i, j] * (cols[i] + rows[j]) ** 2 for i in range(2) for j in range(2) if i != j
    )
    variance = max(0.0, (diagonal + off - (kappa - pe * (1 - kappa)) ** 2) / (n * (1 - pe) ** 2))
    half = _z(confidence) * math.sqrt(variance)
    return Figure(
        value=kappa,
        low=max(-1.0, kappa - half),
        high=min(1.0, kappa + half),
        method=KAPPA_METHOD,
        warning=few_labels_warning(n, RELIABLE_KAPPA_LABELS),
    )


@dataclass(frozen=True, kw_only=True)
class PPIMean:
    """PPI++'s power-tuned mean: the estimate, its interval, lam and the two variances
    (per item) its standard error is made of: se^2 = imputed/N + rectifier/n."""

    value: float
    low: float
    high: float
    lam: float
    imputed_var: float
    rectifier_var: float
    n: int
    big_n: int
    confidence: float


def ppi_means(
    labels: Any, judged: Any, judged_unlabelled: Any, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[Any, Any, Any, Any, Any]:
    """PPI++'s power-tuned mean along the last axis of arrays (one row per data set, so a
    simulation computes thousands at once): value, half-width, lam, and the imputed and
    rectifier variances. As `ppi_py.ppi_mean_ci(Y, Yhat, Yhat_unlabeled,
    alpha=1-confidence)` with its default lam (tuned, clipped to [0, 1]); lam is 0 where
    the verdicts do not vary."""
    y = np.asarray(labels, float)
    yhat = np.asarray(judged, float)
    yhat_u = np.asarray(judged_unlabelled, float)
    n, big_n = y.shape[-1], yhat_u.shape[-1]
    # lam from the plain PPI estimate's gradients (ppi_py's `_calc_lam_glm` for a mean):
    # the covariance of the labels and the verdicts over the verdicts' variance. A
    # shift of both by theta leaves the covariance as it is.
    covariance = ((y - y.mean(-1, keepdims=True)) * (yhat - yhat.mean(-1, keepdims=True))).mean(-1)
    spread = np.var(np.concatenate([yhat, yhat_u], axis=-1), axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tuned = np.where(spread == 0, 0.0, covariance / ((1 + n / big_n) * spread))
    lam = np.clip(tuned, 0.0, 1.0)
    lam_ = lam[..., None]
    value = lam * yhat_u.mean(-1) + (y - lam_ * yhat).mean(-1)
    imputed_var = np.var(lam_ * yhat_u, axis=-1)
    rectifier_var = np.var(y - lam_ * yhat, axis=-1)
    half = _z(confidence) * np.sqrt(imputed_var / big_n + rectifier_var / n)
    return value, half, lam, imputed_var, rectifier_var


def ppi_mean(
    labels: Sequence[float],
    judged: Sequence[float],
    judged_unlabelled: Sequence[float],
    confidence: float = DEFAULT_CONFIDENCE,
) -> PPIMean:
    """One data set's `ppi_means`."""
    n, big_n = len(labels), len(judged_unlabelled)
    if n < 2 or big_n < 1:
        raise ValueError(f"need at least 2 labelled and 1 unlabelled items, got {n} and {big_n}")
    value, half, lam, imputed_var, rectifier_var = ppi_means(
        labels, judged, judged_unlabelled, confidence
    )
    return PPIMean(
        value=float(value),
        low=float(value - half),
        high=float(value + half),
        lam=float(lam),
        imputed_var=float(imputed_var),
        rectifier_var=float(rectifier_var),
        n=n,
        big_n=big_n,
        confidence=confidence,
    )


def labels_for_width(estimate: PPIMean, width: float, scale: float = 1.0) -> int | None:
    """How many random labels in all would make the corrected interval `width` wide (the
    variances as measured now; `scale` the answered share the estimate is scaled by);
    None when labels alone cannot (the unlabelled set's own variance is too large)."""
    half = width / 2 / (_z(estimate.confidence) * scale)
    room = half**2 - estimate.imputed_var / estimate.big_n
    if room <= 0:
        return None
    if estimate.rectifier_var == 0:
        return estimate.n
    return max(estimate.n, math.ceil(estimate.rectifier_var / room))


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One record of a run as calibration sees it."""

    judged: bool  # the judge's verdict (score >= threshold; unscored fails)
    answered: bool
    label: bool | None  # the person's (pass), None when unlabelled
    random: bool = False  # the label came from the random queue


@dataclass(frozen=True, kw_only=True)
class Calibration:
    scorer: str
    n_labeled: int
    n_random: int
    matched: int  # labels of this spec (and scorer) that apply to a record of the run
    unmatched: int  # those that apply to none (another response, another sample)
    confusion: Confusion
    sensitivity: Figure
    specificity: Figure
    kappa: Figure
    judge_pass_rate: Figure
    corrected_pass_rate: Figure | None
    why_uncorrected: str | None
    target_width: float
    labels_needed: int | None  # random labels in all for the target width

    @property
    def more_labels(self) -> int | None:
        return None if self.labels_needed is None else max(0, self.labels_needed - self.n_random)

    def to_json(self) -> dict[str, Any]:
        corrected = (
            self.corrected_pass_rate.to_json()
            if self.corrected_pass_rate is not None
            else {"value": None, "low": None, "high": None, "method": PPI_METHOD}
        )
        if self.why_uncorrected is not None:
            corrected["why_not"] = self.why_uncorrected
        return {
            "n_labeled": self.n_labeled,
            "confusion": self.confusion.to_json(),
            "sensitivity": self.sensitivity.to_json(),
            "specificity": self.specificity.to_json(),
            "kappa": self.kappa.to_json(),
            "judge_pass_rate": self.judge_pass_rate.to_json(),
            "corrected_pass_rate": corrected,
            "labels_needed": {
                "width": self.target_width,
                "random_labels": self.labels_needed,
                "more": self.more_labels,
            },
        }


def calibrate(
    verdicts: Iterable[Verdict],
    *,
    scorer: str,
    unmatched: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    target_width: float = DEFAULT_TARGET_WIDTH,
) -> Calibration:
    total = passed = answered = 0
    truth: list[bool] = []
    judged: list[bool] = []
    random_y: list[float] = []
    random_yhat: list[float] = []
    others: list[float] = []  # verdicts of answered records outside the random labels
    for v in verdicts:
        total += 1
        passed += v.judged
        answered += v.answered
        if v.label is not None:
            truth.append(v.label)
            judged.append(v.judged)
        if v.label is not None and v.random:
            random_y.append(float(v.label))
            random_yhat.append(float(v.judged))
        elif v.answered:
            others.append(float(v.judged))
    confusion = confusion_of(truth, judged)
    n_random = len(random_y)
    corrected: Figure | None = None
    why: str | None = None
    needed: int | None = None
    scale = answered / total if total else 1.0
    if len(random_y) >= 2 and others:
        estimate = ppi_mean(random_y, random_yhat, others, confidence)
        needed = labels_for_width(estimate, target_width, scale)
        if n_random >= MIN_RANDOM_LABELS:
            corrected = Figure(
                value=estimate.value * scale,
                low=max(0.0, estimate.low * scale),
                high=min(1.0, estimate.high * scale),
                method=PPI_METHOD,
                warning=few_labels_warning(n_random),
            )
    if corrected is None and not others and n_random >= MIN_RANDOM_LABELS:
        # Every answered record is labelled: no judge is needed, the labels are the rate.
        every = wilson(int(sum(random_y)), n_random, confidence)
        assert every.value is not None and every.low is not None and every.high is not None
        corrected = Figure(
            value=every.value * scale,
            low=every.low * scale,
            high=every.high * scale,
            method=f"{WILSON} (every answered record labelled)",
        )
    if corrected is None:
        selected = len(truth) - n_random
        why = (
            f"{n_random} random label{'s' if n_random != 1 else ''}"
            + (f" ({selected} selected, which a corrected rate cannot use)" if selected else "")
            + f": a corrected pass rate needs at least {MIN_RANDOM_LABELS}"
        )
        needed = max(needed or 0, MIN_RANDOM_LABELS)
    return Calibration(
        scorer=scorer,
        n_labeled=len(truth),
        n_random=n_random,
        matched=len(truth),
        unmatched=unmatched,
        confusion=confusion,
        sensitivity=wilson(confusion.tp, confusion.tp + confusion.fn, confidence),
        specificity=wilson(confusion.tn, confusion.tn + confusion.fp, confidence),
        kappa=cohen_kappa(confusion, confidence),
        judge_pass_rate=wilson(passed, total, confidence),
        corrected_pass_rate=corrected,
        why_uncorrected=why,
        target_width=target_width,
        labels_needed=needed,
    )


def judge_scorers(run_dir: Path) -> list[str]:
    manifest = load_run(run_dir).manifest
    return [s.name for s in manifest.scorers if s.type == "judge"]


def calibrate_run(
    run_dir: Path,
    lookup: LabelLookup | None = None,
    *,
    scorers: Sequence[str] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    target_width: float = DEFAULT_TARGET_WIDTH,
) -> list[Calibration]:
    """Each judge scorer of the run (or `scorers`) that has a label on one of its records;
    `lookup` defaults to the labels under the run's results root (its parent)."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    if lookup is None:
        lookup = read_labels(run_dir.parent)
    names = list(scorers) if scorers is not None else judge_scorers(run_dir)
    spec = run.manifest.spec.name
    verdicts: dict[str, list[Verdict]] = {name: [] for name in names}
    for record in run:  # one read of the records for every scorer
        key = record_key(spec, record)
        for name in names:
            label = lookup.get(key, name) if key is not None else None
            verdicts[name].append(
                Verdict(
                    judged=record.passes(name, threshold),
                    answered=record.answered,
                    label=None if label is None else label.passed,
                    random=label is not None and label.sampling == "random",
                )
            )
    found = []
    for name in names:
        matched = sum(1 for v in verdicts[name] if v.label is not None)
        if matched == 0:
            continue
        of_spec = len(lookup.of_spec(spec, name))
        found.append(
            calibrate(
                verdicts[name],
                scorer=name,
                unmatched=max(0, of_spec - matched),
                confidence=confidence,
                target_width=target_width,
            )
        )
    return found


def format_calibration(c: Calibration) -> str:
    lines = [
        f"Judge {c.scorer}: {c.n_labeled} labelled records ({c.n_random} random); "
        f"{c.matched} labels matched a response of this run, {c.unmatched} did not",
        f"  confusion (label as truth, pass positive): tp={c.confusion.tp} fp={c.confusion.fp} "
        f"fn={c.confusion.fn} tn={c.confusion.tn}",
        f"  sensitivity: {c.sensitivity.format()}",
        f"  specificity: {c.specificity.format()}",
        f"  kappa: {c.kappa.format()}",
        f"  judge pass rate: {c.judge_pass_rate.format()}",
    ]
    if c.corrected_pass_rate is not None:
        lines.append(f"  corrected pass rate: {c.corrected_pass_rate.format()}")
    else:
        lines.append(f"  corrected pass rate: not shown: {c.why_uncorrected}")
    if c.corrected_pass_rate is not None and c.corrected_pass_rate.method != PPI_METHOD:
        lines.append("  every answered record is labelled: no label left to add")
    elif c.labels_needed is None:
        lines.append(
            f"  labels for a {c.target_width:g}-wide interval: out of reach by labels alone"
        )
    else:
        lines.append(
            f"  labels for a {c.target_width:g}-wide interval: {c.labels_needed} random "
            f"({c.more_labels} more)"
        )
    return "\n".join(lines)


def calibrated_line(c: Calibration) -> str:
    """The run summary's one line for a judge with labels."""
    if c.corrected_pass_rate is not None:
        corrected = f"corrected pass rate {c.corrected_pass_rate.format()}"
    else:
        corrected = f"no corrected pass rate ({c.why_uncorrected})"
    return (
        f"Calibrated: {c.scorer}: {c.n_labeled} human labels ({c.n_random} random); "
        f"kappa {c.kappa.format()}; sensitivity {c.sensitivity.format()}; specificity "
        f"{c.specificity.format()}; judge pass rate {c.judge_pass_rate.format()}; {corrected}"
    )


def run_calibrations(run_dir: Path) -> list[Calibration]:
    """The judges of a run that have labels (none, nothing read, without a labels file
    beside the run)."""
    if not labels_path(Path(run_dir).parent).is_file():
        return []
    return calibrate_run(run_dir)


def summary_lines(run_dir: Path) -> list[str]:
    """`Calibrated:` lines for the judges of a run that have labels."""
    return [calibrated_line(c) for c in run_calibrations(run_dir)]


def kappa_refusal(run_dir: Path, scorer: str, minimum: float) -> str | None:
    """Why a gate must not trust `scorer` (a judge) on this run at kappa `minimum`, or
    None when it may (not a judge: nothing to check)."""
    if scorer not in judge_scorers(run_dir):
        return None
    found = calibrate_run(run_dir, scorers=[scorer])
    if not found:
        return (
            f"judge scorer {scorer!r} has no human label on this run's responses, so its "
            f"agreement with people is unknown (--require-kappa {minimum:g})"
        )
    kappa = found[0].kappa
    if kappa.value is None:
        return (
            f"judge scorer {scorer!r}: kappa is undefined on its {found[0].n_labeled} labels "
            "(one class only)"
        )
    if kappa.value < minimum:
        return (
            f"judge scorer {scorer!r} agrees with people at kappa {kappa.format()} over "
            f"{found[0].n_labeled} labels, below --require-kappa {minimum:g}"
        )
    return None


def corrected_difference(
    a: Calibration, b: Calibration, confidence: float = DEFAULT_CONFIDENCE
) -> Figure | None:
    """B's corrected pass rate minus A's, with a normal interval from the two intervals'
    standard errors as if independent: the runs' unlabelled sets are paired and positively
    correlated, which makes the true interval narrower, so this one is conservative."""
    ra, rb = a.corrected_pass_rate, b.corrected_pass_rate
    if ra is None or rb is None or None in (ra.value, ra.low, ra.high, rb.value, rb.low, rb.high):
        return None
    assert ra.value is not None and rb.value is not None
    assert ra.low is not None and ra.high is not None and rb.low is not None and rb.high is not None
    z = _z(confidence)
    se = math.hypot((ra.high - ra.low) / (2 * z), (rb.high - rb.low) / (2 * z))
    diff = rb.value - ra.value
    return Figure(
        value=diff,
        low=diff - _z(confidence) * se,
        high=diff + _z(confidence) * se,
        method="ppi++-mean difference, independent normal (conservative)",
        warning=ra.warning or rb.warning,
    )


@dataclass(frozen=True, kw_only=True)
class CorrectedComparison:
    """Two runs' corrected pass rates on one judge scorer and B - A; `why_not` says why
    there is no difference (a run without enough random labels)."""

    scorer: str
    a: Calibration | None
    b: Calibration | None
    difference: Figure | None
    why_not: str | None

    def to_json(self) -> dict[str, Any]:
        def side(c: Calibration | None) -> dict[str, Any] | None:
            return c.to_json()["corrected_pass_rate"] if c is not None else None

        return {
            "scorer": self.scorer,
            "a": side(self.a),
            "b": side(self.b),
            "difference": self.difference.to_json() if self.difference else None,
            "why_not": self.why_not,
        }

    def format(self, labels: tuple[str, str]) -> str:
        def side(c: Calibration | None) -> str:
            if c is None:
                return "no labels"
            if c.corrected_pass_rate is None:
                return f"not shown ({c.why_uncorrected})"
            return c.corrected_pass_rate.format()

        lines = [
            f"Corrected pass rate, judge {self.scorer} (human labels, PPI++):",
            f"  A [{labels[0]}]: {side(self.a)}",
            f"  B [{labels[1]}]: {side(self.b)}",
        ]
        if self.difference is not None:
            lines.append(f"  B - A: {self.difference.format()}")
        else:
            lines.append(f"  B - A: not compared: {self.why_not}")
        return "\n".join(lines)


def compare_corrected(
    run_a: Path,
    run_b: Path,
    scorer: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
) -> CorrectedComparison:
    found = []
    for run_dir in (run_a, run_b):
        calibrated = calibrate_run(
            run_dir, scorers=[scorer], threshold=threshold, confidence=confidence
        )
        found.append(calibrated[0] if calibrated else None)
    a, b = found
    difference = corrected_difference(a, b, confidence) if a and b else None
    why = None
    if difference is None:
        missing = [
            name for name, c in (("A", a), ("B", b)) if c is None or c.corrected_pass_rate is None
        ]
        why = f"run {' and '.join(missing)} has no corrected pass rate"
    return CorrectedComparison(scorer=scorer, a=a, b=b, difference=difference, why_not=why)
