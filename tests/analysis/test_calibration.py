"""Calibration statistics against the reference implementations (scikit-learn's
`cohen_kappa_score`, ppi-python's `ppi_mean_pointestimate`/`ppi_mean_ci`), and the
corrected pass rate's coverage where the judge's own interval has none."""

from statistics import NormalDist

import numpy as np
import pytest
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate
from sklearn.metrics import cohen_kappa_score

from bench.bench_coverage import judged_run
from gradetrail_lib.analysis.calibration import (
    MIN_RANDOM_LABELS,
    PPI_METHOD,
    Verdict,
    calibrate,
    cohen_kappa,
    confusion_of,
    labels_for_width,
    ppi_mean,
    ppi_means,
)
from gradetrail_lib.analysis.stats.intervals import wilson_bounds

CASES = [
    # (seed, labelled, unlabelled, p, sensitivity, specificity)
    (0, 30, 200, 0.7, 1.0, 0.8),
    (1, 40, 300, 0.7, 0.9, 0.8),
    (2, 100, 1000, 0.5, 0.9, 0.7),
    (3, 35, 60, 0.2, 0.6, 0.95),
    (4, 200, 5000, 0.9, 0.99, 0.5),
    (5, 50, 50, 0.5, 0.5, 0.5),  # a judge no better than a coin
]


def _data(seed: int, n: int, big_n: int, p: float, sens: float, spec: float):  # type: ignore[no-untyped-def]
    truth, judged = judged_run(np.random.default_rng(seed), 1, n + big_n, p, sens, spec)
    return truth[0, :n], judged[0, :n], judged[0, n:]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_the_corrected_rate_equals_ppi_python(case: tuple, confidence: float) -> None:  # type: ignore[type-arg]
    y, yhat, yhat_u = _data(*case)
    ours = ppi_mean(y, yhat, yhat_u, confidence)
    yf, yhf, yuf = y.astype(float), yhat.astype(float), yhat_u.astype(float)
    point = ppi_mean_pointestimate(yf, yhf, yuf)
    low, high = ppi_mean_ci(yf, yhf, yuf, alpha=1 - confidence)
    assert ours.value == pytest.approx(float(np.ravel(point)[0]), abs=1e-12)
    assert ours.low == pytest.approx(float(np.ravel(low)[0]), abs=1e-12)
    assert ours.high == pytest.approx(float(np.ravel(high)[0]), abs=1e-12)
    assert 0.0 <= ours.lam <= 1.0


def test_lam_is_tuned_between_the_labels_alone_and_plain_ppi() -> None:
    """A perfect judge earns lam near 1; a coin-flip judge near 0 (its verdicts add only
    noise), so the estimate falls back on the labels' own mean."""
    y, _, yhat_u = _data(7, 100, 900, 0.6, 1.0, 1.0)
    assert ppi_mean(y, y, yhat_u).lam > 0.8
    y, yhat, yhat_u = _data(8, 100, 900, 0.6, 0.5, 0.5)
    coin = ppi_mean(y, yhat, yhat_u)
    assert coin.lam < 0.2
    assert abs(coin.value - float(y.mean())) < 0.03


@pytest.mark.parametrize("case", CASES)
def test_kappa_equals_scikit_learn(case: tuple) -> None:  # type: ignore[type-arg]
    y, yhat, _ = _data(*case)
    ours = cohen_kappa(confusion_of(list(y), list(yhat)))
    assert ours.value == pytest.approx(cohen_kappa_score(y, yhat), abs=1e-12)
    assert ours.low is not None and ours.high is not None
    assert -1.0 <= ours.low < ours.value < ours.high <= 1.0


def test_kappa_is_undefined_when_both_raters_use_one_class() -> None:
    confusion = confusion_of([True] * 30, [True] * 30)
    assert confusion.tp == 30 and cohen_kappa(confusion).value is None


def test_sensitivity_and_specificity_take_wilson_intervals() -> None:
    truth = [True] * 20 + [False] * 10
    judged = [True] * 18 + [False] * 2 + [True] * 4 + [False] * 6
    verdicts = [
        Verdict(judged=j, answered=True, label=t, random=True)
        for t, j in zip(truth, judged, strict=True)
    ]
    result = calibrate(verdicts, scorer="judge")
    assert result.confusion.to_json() == {"tp": 18, "fp": 4, "fn": 2, "tn": 6}
    assert (result.sensitivity.low, result.sensitivity.high) == wilson_bounds(18, 20, 0.95)
    assert (result.specificity.low, result.specificity.high) == wilson_bounds(6, 10, 0.95)
    assert result.sensitivity.value == 0.9 and result.specificity.value == 0.6


def _verdicts(truth, judged, labelled, random=True):  # type: ignore[no-untyped-def]
    return [
        Verdict(
            judged=bool(j), answered=True, label=bool(t) if i < labelled else None, random=random
        )
        for i, (t, j) in enumerate(zip(truth, judged, strict=True))
    ]


def test_calibrate_withholds_the_corrected_rate_below_30_random_labels() -> None:
    truth, judged = judged_run(np.random.default_rng(3), 1, 400, 0.7, 0.9, 0.8)
    few = calibrate(_verdicts(truth[0], judged[0], 29), scorer="j")
    assert few.corrected_pass_rate is None and few.n_random == 29
    assert "29 random labels" in (few.why_uncorrected or "")
    assert few.labels_needed is not None and few.labels_needed >= MIN_RANDOM_LABELS
    chosen = calibrate(_verdicts(truth[0], judged[0], 60, random=False), scorer="j")
    assert chosen.corrected_pass_rate is None and chosen.n_labeled == 60
    assert "60 selected" in (chosen.why_uncorrected or "")
    enough = calibrate(_verdicts(truth[0], judged[0], 30), scorer="j")
    assert enough.corrected_pass_rate is not None
    assert enough.corrected_pass_rate.method == PPI_METHOD
    # The corrected rate is ppi_mean with the random labels as the labelled set and the
    # rest of the run as the unlabelled set.
    direct = ppi_mean(truth[0, :30], judged[0, :30], judged[0, 30:])
    assert enough.corrected_pass_rate.value == pytest.approx(direct.value)
    assert enough.corrected_pass_rate.warning is not None  # 30 < 100: undercovers
    assert enough.judge_pass_rate.value == pytest.approx(judged[0].mean())


def test_records_without_a_response_are_known_fails() -> None:
    truth, judged = judged_run(np.random.default_rng(4), 1, 300, 0.7, 0.9, 0.8)
    verdicts = _verdicts(truth[0], judged[0], 100)
    failed = [Verdict(judged=False, answered=False, label=None)] * 100
    whole = calibrate(verdicts + failed, scorer="j")
    answered = calibrate(verdicts, scorer="j")
    assert whole.corrected_pass_rate is not None and answered.corrected_pass_rate is not None
    assert whole.corrected_pass_rate.value == pytest.approx(
        answered.corrected_pass_rate.value * 0.75
    )


def test_labels_for_width_reaches_the_width_it_promises() -> None:
    y, yhat, yhat_u = _data(9, 40, 2000, 0.7, 0.9, 0.8)
    now = ppi_mean(y, yhat, yhat_u)
    target = (now.high - now.low) / 2
    needed = labels_for_width(now, target)
    assert needed is not None and needed > 40
    z = NormalDist().inv_cdf(0.975)
    width = 2 * z * np.sqrt(now.imputed_var / now.big_n + now.rectifier_var / needed)
    assert (
        width
        <= target
        < 2 * z * np.sqrt(now.imputed_var / now.big_n + now.rectifier_var / (needed - 1))
    )
    assert labels_for_width(now, 1e-4) is None  # the unlabelled set's variance alone exceeds it


def test_the_corrected_interval_covers_where_the_judges_does_not() -> None:
    """2,000 simulated runs of 1,000 records, a true pass rate of 0.7 and a judge that
    passes every good answer and 20 % of the bad ones (it says 0.76); 300 random labels
    each. The corrected 95 % interval holds 0.7 in 93-97 % of runs; the judge's Wilson
    interval over the whole run almost never."""
    rng = np.random.default_rng(2026)
    truth, judged = judged_run(rng, 2000, 1000, 0.7, 1.0, 0.8)
    value, half, _, _, _ = ppi_means(truth[:, :300], judged[:, :300], judged[:, 300:])
    corrected = float(np.mean(np.abs(value - 0.7) <= half))
    bounds = [wilson_bounds(int(k), 1000, 0.95) for k in judged.sum(axis=1)]
    raw = float(np.mean([low <= 0.7 <= high for low, high in bounds]))
    assert 0.93 <= corrected <= 0.97, corrected
    assert raw < 0.05, raw
