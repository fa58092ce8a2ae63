"""Retrieval metrics and citation faithfulness against hand-computed values, on records
built in memory, and `gradetrail retrieval` on run directories written from them."""

import json
import math
from pathlib import Path

import pytest

from gradetrail_lib import cli
from gradetrail_lib.analysis.retrieval import (
    DEFAULT_CITATION_PATTERN,
    citation_pattern,
    citation_verdicts,
    cited_ids,
    faithfulness_interval,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    record_metrics,
    retrieval_figures,
    retrieval_of,
    retrieved_ids,
)
from gradetrail_lib.analysis.stats.intervals import proportion_interval
from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.engine.rundir import write_run_dir
from gradetrail_lib.errors import InputError
from gradetrail_lib.results.runs import RESULTS_FILE
from gradetrail_lib.results.trace import AgentStep, Retrieval, ToolResult, TraceRecord, iter_records
from tests.support.traces import SCORER, manifest, record

PATTERN = citation_pattern(DEFAULT_CITATION_PATTERN)


def step(index: int, *results: list[str]) -> AgentStep:
    """An agent step whose tool results carried these documents, in order."""
    return AgentStep(
        index=index,
        request_key=f"k{index}",
        content="",
        tool_calls=[],
        tool_results=[
            ToolResult(
                tool_call_id=f"call_{index}_{i}",
                name="search",
                arguments={"q": "x"},
                content="...",
                documents=[{"id": d, "text": f"text of {d}"} for d in docs],
            )
            for i, docs in enumerate(results)
        ],
        input_tokens=1,
        output_tokens=1,
        latency_s=0.0,
        cache_hit=False,
        stop_reason="tool_calls",
    )


def rag(
    sample_id: str,
    steps: list[list[list[str]]],
    *,
    relevant: list[str] | None = None,
    support: dict[str, bool] | None = None,
    response: str = "Answer: 1",
    scores: dict[str, float | None] | None = None,
    answered: bool = True,
) -> TraceRecord:
    """A record whose trajectory retrieved `steps` (per step, per tool result, ids)."""
    built = record(sample_id, scores or {SCORER: 1.0}, response=response, answered=answered)
    built.trajectory = [step(i, *results) for i, results in enumerate(steps)]
    if relevant is not None or support is not None:
        built.retrieval = Retrieval(relevant_ids=relevant or [], support=support or {})
    return built


# The ranking cases, by hand (k = 5):
#   a: relevant {d1, d3}, retrieved d2 d1 d4 | d3 d5 d6 -> top 5 d2 d1 d4 d3 d5:
#      P = 2/5, R = 2/2, RR = 1/2
#   b: relevant {d9, d1}, retrieved d1 d2 (fewer than k): P = 1/5, R = 1/2, RR = 1
#   c: relevant {x}, retrieved nothing: 0, 0, 0
#   d: no relevant ids: in no n
#   e: relevant {d7}, retrieved a b c d e d7: P@5 = R@5 = 0, RR = 1/6 (MRR is not cut at k)
#   means over a, b, c, e: P = 0.6/4 = 0.15, R = 1.5/4 = 0.375, MRR = (5/3)/4 = 5/12
def ranking_records() -> list[TraceRecord]:
    return [
        rag("a", [[["d2", "d1"], ["d4"]], [["d3", "d5", "d1", "d6"]]], relevant=["d1", "d3"]),
        rag("b", [[["d1", "d2", "d1"]]], relevant=["d9", "d1"]),
        rag("c", [], relevant=["x"], answered=False),
        rag("d", [[["d1"]]]),
        rag("e", [[["a", "b", "c"]], [["d", "e"]], [["d7"]]], relevant=["d7"]),
    ]


def test_retrieved_ids_keep_trajectory_order_first_occurrence_wins() -> None:
    a = ranking_records()[0]
    assert retrieved_ids(a) == ["d2", "d1", "d4", "d3", "d5", "d6"]
    assert retrieved_ids(rag("none", [])) == []


def test_metric_functions_by_hand() -> None:
    retrieved = ["d2", "d1", "d4", "d3", "d5", "d6"]
    assert precision_at_k(retrieved, ["d1", "d3"], 5) == pytest.approx(0.4)
    assert precision_at_k(retrieved, ["d1", "d3"], 1) == 0.0
    assert precision_at_k(retrieved, ["d1", "d3"], 2) == pytest.approx(0.5)
    # Fewer retrieved than k: still divided by k.
    assert precision_at_k(["d1"], ["d1"], 5) == pytest.approx(0.2)
    assert recall_at_k(retrieved, ["d1", "d3", "zz"], 5) == pytest.approx(2 / 3)
    assert recall_at_k(retrieved, ["d6"], 5) == 0.0
    assert recall_at_k(retrieved, ["d6"], 6) == 1.0
    assert reciprocal_rank(retrieved, ["d3", "d4"]) == pytest.approx(1 / 3)
    assert reciprocal_rank(retrieved, ["nope"]) == 0.0
    with pytest.raises(ValueError):
        recall_at_k(retrieved, [], 5)


def test_per_record_metrics_by_hand() -> None:
    a, b, c, d, e = (record_metrics(r, 5) for r in ranking_records())
    assert (a.precision, a.recall, a.reciprocal_rank) == pytest.approx((0.4, 1.0, 0.5))
    assert (b.precision, b.recall, b.reciprocal_rank) == pytest.approx((0.2, 0.5, 1.0))
    assert (c.precision, c.recall, c.reciprocal_rank) == (0.0, 0.0, 0.0)
    assert (d.precision, d.recall, d.reciprocal_rank) == (None, None, None)
    assert (e.precision, e.recall, e.reciprocal_rank) == pytest.approx((0.0, 0.0, 1 / 6))
    assert (a.retrieved, b.retrieved, c.retrieved, d.retrieved) == (6, 2, 0, 1)
    with pytest.raises(ValueError):
        record_metrics(ranking_records()[0], 0)


def test_run_figures_by_hand() -> None:
    figures = retrieval_figures(ranking_records(), 5)
    assert figures.records == 5 and figures.with_relevant == 4 and figures.with_documents == 4
    assert figures.short_of_k == 2  # b and c
    assert figures.precision.n == figures.recall.n == figures.mrr.n == 4
    assert figures.precision.value == pytest.approx(0.15)
    assert figures.recall.value == pytest.approx(0.375)
    assert figures.mrr.value == pytest.approx(5 / 12)
    for estimate in (figures.precision, figures.recall, figures.mrr):
        assert estimate.value is not None and estimate.interval is not None
        assert estimate.interval.contains(estimate.value)
    # No answer cites anything.
    assert figures.faithfulness.n == 0 and figures.faithfulness.value is None
    # k = 1: a 0, b 1, c 0, e 0.
    at_1 = retrieval_figures(ranking_records(), 1)
    assert at_1.precision.value == pytest.approx(0.25)
    assert at_1.recall.value == pytest.approx(0.5 / 4)
    assert at_1.mrr.value == pytest.approx(5 / 12)  # not cut at k
    assert at_1.short_of_k == 1  # c


def test_retrieval_of_sample_fields() -> None:
    assert retrieval_of({"id": "1", "question": "q"}) is None
    got = retrieval_of(
        {"relevant_context_ids": ["d1", 7, "d1"], "citation_support": {"d1": True, "7": False}}
    )
    assert got == Retrieval(relevant_ids=["d1", "7"], support={"d1": True, "7": False})
    assert retrieval_of({"citation_support": {"d2": True}}) == Retrieval([], {"d2": True})
    assert retrieval_of({"relevant_context_ids": []}) == Retrieval([], {})
    for bad in (
        {"relevant_context_ids": "d1"},
        {"relevant_context_ids": [True]},
        {"relevant_context_ids": [""]},
        {"relevant_context_ids": [{"id": "d1"}]},
        {"citation_support": ["d1"]},
        {"citation_support": {"d1": "yes"}},
    ):
        with pytest.raises(ValueError):
            retrieval_of(bad)


def test_check_sample_names_dataset_line_and_field() -> None:
    from gradetrail_lib.analysis.retrieval import check_sample

    check_sample(Sample("1", {"id": "1", "relevant_context_ids": ["a"]}, 3), "data/x.jsonl")
    bad = Sample("2", {"id": "2", "citation_support": {"d1": 1}}, 4)
    with pytest.raises(InputError) as caught:
        check_sample(bad, "data/x.jsonl")
    assert str(caught.value) == "data/x.jsonl:4: citation_support.d1: must be true or false"


def test_cited_ids_default_and_custom_syntax() -> None:
    text = "It is [doc:d1], see also [doc:d2][doc:d1] and [d3] and [doc: ] [doc:]"
    assert cited_ids(text, PATTERN) == ["d1", "d2"]
    assert cited_ids(text, citation_pattern(r"\[(d\d+)\]")) == ["d3"]
    assert cited_ids(None, PATTERN) == []
    with pytest.raises(ValueError, match="exactly one group"):
        citation_pattern(r"\[doc:\w+\]")
    with pytest.raises(ValueError, match="not a regular expression"):
        citation_pattern(r"\[(")


def citing(
    response: str,
    support: dict[str, bool] | None = None,
    *,
    scores: dict[str, float | None] | None = None,
    answered: bool = True,
) -> TraceRecord:
    """An answer after a trajectory that retrieved d1, d2 and then d3."""
    return rag(
        "q",
        [[["d1", "d2"]], [["d3"]]],
        support=support,
        response=response,
        scores=scores,
        answered=answered,
    )


def test_citation_verdicts() -> None:
    cited = citing(
        "[doc:d1] [doc:d2] [doc:d3] [doc:zz] [doc:d1]",
        {"d1": True, "d2": False, "zz": True},
    )
    assert citation_verdicts(cited, PATTERN) == {
        "d1": "supported",  # retrieved, verdict true
        "d2": "unsupported",  # retrieved, verdict false
        "d3": "no_verdict",  # retrieved, no verdict: unsupported, not guessed
        "zz": "not_retrieved",  # a true verdict does not help a document never retrieved
    }
    # Without any retrieval field, nothing cited has a verdict.
    assert citation_verdicts(citing("[doc:d1]"), PATTERN) == {"d1": "no_verdict"}
    # The cited text's overlap with a document's text does not matter.
    overlap = citing("text of d3 [doc:d3]")
    assert citation_verdicts(overlap, PATTERN) == {"d3": "no_verdict"}
    assert citation_verdicts(citing("no citations"), PATTERN) == {}


def test_judge_verdict_applies_per_record() -> None:
    response = "[doc:d1] [doc:d2] [doc:zz]"

    def judged(score: float | None) -> dict[str, str]:
        built = citing(response, {"d1": False, "d2": True}, scores={SCORER: 1.0, "sup": score})
        return dict(citation_verdicts(built, PATTERN, support_scorer="sup"))

    assert judged(1.0) == {"d1": "supported", "d2": "supported", "zz": "not_retrieved"}
    assert judged(0.0) == {"d1": "unsupported", "d2": "unsupported", "zz": "not_retrieved"}
    # The judge did not score the record (an error): the sample's scripted verdicts apply.
    assert judged(None) == {"d1": "unsupported", "d2": "supported", "zz": "not_retrieved"}
    # A threshold below 1 for a graded judge.
    partial = citing(response, scores={SCORER: 1.0, "sup": 0.7})
    assert citation_verdicts(partial, PATTERN, support_scorer="sup", threshold=0.5)["d1"] == (
        "supported"
    )


def test_faithfulness_by_hand() -> None:
    records = [
        # 1 of 4 supported: d1 yes, d2 verdict false, d3 no verdict, zz never retrieved
        citing("[doc:d1] [doc:d2] [doc:d3] [doc:zz]", {"d1": True, "d2": False, "zz": True}),
        # 2 of 2
        citing("[doc:d2] [doc:d3]", {"d2": True, "d3": True}),
        citing("nothing cited"),
        citing("[doc:d1]", {"d1": True}, answered=False),  # no answer: cites nothing
    ]
    figures = retrieval_figures(records)
    estimate = figures.faithfulness
    assert (estimate.value, estimate.n, estimate.successes) == (0.5, 6, 3)
    assert figures.with_citations == 2
    assert figures.verdicts == {
        "supported": 3,
        "unsupported": 1,
        "no_verdict": 1,
        "not_retrieved": 1,
    }
    assert estimate.interval is not None and estimate.interval.contains(0.5)
    # No relevant ids anywhere: the ranking metrics have n = 0.
    assert figures.precision.n == 0 and figures.precision.value is None


def test_faithfulness_intervals() -> None:
    # One citation per record: the Wilson interval of k/n.
    single = faithfulness_interval([(1, 1), (0, 1), (1, 1), (1, 1)])
    wilson = proportion_interval(3, 4)
    assert (single.low, single.high, single.method) == (wilson.low, wilson.high, "wilson")
    # All supported: the Wilson bound with the records as n (not the citations).
    every = faithfulness_interval([(3, 3), (2, 2)])
    assert every.high == 1.0 and every.low == pytest.approx(proportion_interval(2, 2).low)
    # Several citations per record: records are the clusters; six records, about 3.5
    # of them away from full support, are too few for a bootstrap: the score interval
    # over the records (`cluster_mean_interval`, `score_method`'s "sparse").
    pairs = [(1, 4), (2, 2), (0, 3), (3, 3), (1, 2), (2, 3)]
    first = faithfulness_interval(pairs)
    assert first.method == "cluster-wilson-sparse"
    assert 0.0 <= first.low < 9 / 17 < first.high <= 1.0
    # 40 records: a bootstrap of the ratio over records, deterministic.
    many = pairs * 7
    first, again = faithfulness_interval(many), faithfulness_interval(many)
    assert first == again and first.method == "cluster-bootstrap-bca"
    assert 0.0 <= first.low < 9 / 17 < first.high <= 1.0
    with pytest.raises(ValueError):
        faithfulness_interval([])
    with pytest.raises(ValueError):
        faithfulness_interval([(2, 1)])


def test_retrieval_round_trips_through_results_jsonl(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, ranking_records(), manifest())
    back = list(iter_records(run / RESULTS_FILE))
    assert back == ranking_records()
    assert back[0].retrieval == Retrieval(relevant_ids=["d1", "d3"], support={})
    assert back[3].retrieval is None
    assert back[0].trajectory[1].tool_results[0].documents[0] == {"id": "d3", "text": "text of d3"}


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse rejecting an argument
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_prints_each_metric_with_n(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [
        *ranking_records(),
        rag("f", [[["d1", "d2"]]], support={"d1": True}, response="[doc:d1] [doc:d2] [doc:q]"),
    ]
    run = write_run_dir(tmp_path / "a", records, manifest(model="m-a"))
    bare = write_run_dir(tmp_path / "b", [record("1", 1.0)], manifest(model="m-b"))

    code, out, _ = run_main(capsys, "retrieval", str(run), str(bare))
    assert code == 0
    assert "spec/m-a (k=5, 6 records)" in out
    assert "  precision@5            0.150 [" in out and "(n=4)" in out
    assert "  recall@5               0.375 [" in out
    assert "  MRR                    0.417 [" in out
    assert "2 of 4 retrieved fewer than 5 documents" in out
    assert "citation faithfulness  0.333 [" in out
    assert "(n=3 citations in 1 record: 1 supported, 0 judged unsupported, " in out
    assert "1 without a verdict, 1 not retrieved)" in out
    assert "spec/m-b: no retrieval data (1 record:" in out

    code, out, _ = run_main(capsys, "retrieval", str(run), str(bare), "--k", "1", "--json")
    assert code == 0
    first, second = json.loads(out)
    assert first["run"] == "spec/m-a" and first["k"] == 1 and first["retrieval_data"] is True
    assert first["precision_at_k"]["value"] == pytest.approx(0.25)
    assert first["precision_at_k"]["n"] == 4
    assert first["mrr"]["value"] == pytest.approx(5 / 12)
    faith = first["citation_faithfulness"]
    assert (faith["value"], faith["n"], faith["successes"]) == (pytest.approx(1 / 3), 3, 1)
    assert first["citations"]["not_retrieved"] == 1
    assert second["retrieval_data"] is False and second["precision_at_k"]["n"] == 0
    assert second["citation_faithfulness"]["value"] is None


def test_cli_citation_pattern_and_support_scorer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [
        rag("1", [[["d1", "d2"]]], response="[d1] [d2] [d9]", scores={SCORER: 1.0, "sup": 1.0}),
        rag("2", [[["d1"]]], response="[d1]", scores={SCORER: 1.0, "sup": 0.0}),
    ]
    scorers = {SCORER: "s" * 64, "sup": "t" * 64}
    run = str(write_run_dir(tmp_path, records, manifest(scorers)))
    pattern = r"\[(d\d+)\]"

    code, out, _ = run_main(capsys, "retrieval", run, "--citation-pattern", pattern, "--json")
    (entry,) = json.loads(out)
    assert code == 0 and entry["citation_faithfulness"]["successes"] == 0  # no verdicts
    assert entry["citations"] == {
        "supported": 0,
        "unsupported": 0,
        "no_verdict": 3,
        "not_retrieved": 1,
    }

    code, out, _ = run_main(
        capsys, "retrieval", run, "--citation-pattern", pattern, "--support-scorer", "sup", "--json"
    )
    (entry,) = json.loads(out)
    faith = entry["citation_faithfulness"]
    assert code == 0 and (faith["successes"], faith["n"]) == (2, 4)
    assert entry["citations"]["unsupported"] == 1 and entry["citations"]["not_retrieved"] == 1

    # The default syntax finds no citation in these answers.
    code, out, _ = run_main(capsys, "retrieval", run)
    assert code == 0 and "no retrieval data" not in out  # documents were retrieved
    assert "citation faithfulness  n/a (no answer cites a document)" in out
    assert "precision@5, recall@5, MRR: n/a (no sample lists relevant_context_ids)" in out


def test_cli_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(write_run_dir(tmp_path, ranking_records(), manifest()))
    code, _, err = run_main(capsys, "retrieval", run, "--support-scorer", "nope")
    assert code == 2 and "no scorer 'nope'" in err
    code, _, err = run_main(capsys, "retrieval", run, "--citation-pattern", r"\[doc:\w+\]")
    assert code == 2 and "exactly one group" in err
    code, _, err = run_main(capsys, "retrieval", run, "--k", "0")
    assert code == 2 and "must be at least 1" in err
    code, _, err = run_main(capsys, "retrieval", str(tmp_path / "missing"))
    assert code == 2 and "not a run directory" in err


def test_estimates_are_finite() -> None:
    figures = retrieval_figures(ranking_records())
    for estimate in (figures.precision, figures.recall, figures.mrr):
        assert estimate.interval is not None
        assert math.isfinite(estimate.interval.low) and math.isfinite(estimate.interval.high)
