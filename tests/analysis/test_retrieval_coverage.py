"""Retrieval metrics and citation faithfulness with repeats take cases (sample ids) as
units, as the pass rate does. Checked by simulation with fixed seeds against the
functions `retrieval_figures` calls: precision@k's cluster interval and faithfulness's
Wilson interval at the effective n cover at least 93 %, where treating a case's repeats
as independent records covers far less."""

import numpy as np
import pytest

from gradetrail_lib.analysis.retrieval import (
    DEFAULT_CITATION_PATTERN,
    faithfulness_interval,
    format_figures,
    retrieval_figures,
)
from gradetrail_lib.analysis.stats.clusters import cluster_mean_estimate
from gradetrail_lib.analysis.stats.intervals import BootstrapSettings, mean_interval
from tests.analysis.test_retrieval import rag

# 999 resamples keep the bootstraps fast; the interval's method is the one a run uses.
FAST = BootstrapSettings(n_resamples=999)
CASES, REPEATS, K = 30, 5, 5


def test_retrieval_figures_with_repeats_group_records_by_sample_id() -> None:
    # Three cases x 2 repeats. Precision@1 per record: a 1, 1; b 0, 1; c 0, 0.
    records = []
    for sample_id, hits in (("a", (True, True)), ("b", (False, True)), ("c", (False, False))):
        for repeat, hit in enumerate(hits):
            built = rag(
                sample_id,
                [[["rel" if hit else "other"]]],
                relevant=["rel"],
                support={"rel": True, "other": False},
                response="[doc:rel] [doc:other]" if hit else "[doc:other]",
            )
            built.repeat = repeat
            records.append(built)
    figures = retrieval_figures(records, 1)
    expected = cluster_mean_estimate([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    assert figures.precision == expected
    assert figures.precision.clusters == 3 and figures.precision.n == 6
    assert figures.precision.interval is not None
    assert figures.precision.interval.method.startswith("cluster-")
    # Faithfulness: per case (supported, cited) summed over its repeats. A hit cites rel
    # (retrieved, supported) and other (not retrieved); a miss cites other (retrieved,
    # unsupported).
    assert figures.faithfulness.clusters == 3 and figures.with_citations == 6
    assert figures.faithfulness.interval == faithfulness_interval([(2, 4), (1, 3), (0, 2)])
    text = format_figures("run", figures, DEFAULT_CITATION_PATTERN)
    assert "(n=6, 3 cases)" in text and "citations in 6 records of 3 cases:" in text
    # Without repeats nothing is clustered: the figures are the records' own.
    single = retrieval_figures([r for r in records if r.repeat == 0], 1)
    assert single.precision.clusters is None and single.faithfulness.clusters is None


def _precision_cell(seed: int, simulations: int) -> tuple[float, float]:
    """Coverage of precision@k's interval by cases (clustered) and by records (naive).
    A case's retriever finds each of the top k relevant with its own rate r ~ Beta(2, 3),
    the same on every repeat, so repeats are correlated."""
    rng = np.random.default_rng(seed)
    truth = 2 / 5
    rates = rng.beta(2.0, 3.0, (simulations, CASES))
    values = rng.binomial(K, rates[:, :, None], (simulations, CASES, REPEATS)) / K
    clustered = naive = 0
    for case_values in values:
        interval = cluster_mean_estimate(case_values.tolist(), settings=FAST).interval
        assert interval is not None and interval.method.startswith("cluster-")
        clustered += interval.low <= truth <= interval.high
        flat = mean_interval(case_values.ravel().tolist(), settings=FAST)
        naive += flat.low <= truth <= flat.high
    return clustered / simulations, naive / simulations


def test_precision_at_k_with_repeats_covers() -> None:
    clustered, naive = _precision_cell(seed=5, simulations=400)
    assert clustered >= 0.93, clustered
    assert naive < 0.85, naive  # records as units: too narrow


def _faithfulness_cell(seed: int, simulations: int, repeats: int) -> tuple[float, float]:
    """A case's answers cite 1-3 documents each, each supported with the case's own
    rate q ~ Beta(4, 1) (true faithfulness 0.8), the same on every repeat."""
    rng = np.random.default_rng(seed)
    truth = 0.8
    rates = rng.beta(4.0, 1.0, (simulations, CASES))
    cited = rng.integers(1, 4, (simulations, CASES, repeats))
    supported = rng.binomial(cited, rates[:, :, None])
    by_case = by_record = 0
    for s, c in zip(supported, cited, strict=True):
        per_case = zip(s.sum(1).tolist(), c.sum(1).tolist(), strict=True)
        interval = faithfulness_interval(list(per_case), settings=FAST)
        by_case += interval.low <= truth <= interval.high
        per_record = zip(s.ravel().tolist(), c.ravel().tolist(), strict=True)
        flat = faithfulness_interval(list(per_record), settings=FAST)
        by_record += flat.low <= truth <= flat.high
    return by_case / simulations, by_record / simulations


@pytest.mark.parametrize("repeats", [1, REPEATS])
def test_faithfulness_covers_with_and_without_repeats(repeats: int) -> None:
    by_case, by_record = _faithfulness_cell(seed=2 + repeats, simulations=400, repeats=repeats)
    assert 0.93 <= by_case <= 0.98, by_case
    if repeats > 1:
        assert by_record < 0.88, by_record  # a case's repeats as independent records
