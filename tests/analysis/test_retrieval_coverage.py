"""Retrieval metrics and citation faithfulness with repeats take cases (sample ids) as
units, as the pass rate does: `retrieval_figures` groups records by sample id. Its
coverage (precision@k's cluster interval and faithfulness's interval by case cover at
least 93 %, where a case's repeats as independent records cover far less) is a pair of
cells of bench/bench_coverage.py, checked by tests/analysis/test_coverage.py."""

from gradetrail_lib.analysis.retrieval import (
    DEFAULT_CITATION_PATTERN,
    faithfulness_interval,
    format_figures,
    retrieval_figures,
)
from gradetrail_lib.analysis.stats.clusters import cluster_mean_estimate
from tests.analysis.test_retrieval import rag


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
