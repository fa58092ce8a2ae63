"""Retrieval metrics and citation faithfulness, read from trace records.

A sample may list the documents relevant to it (`relevant_context_ids: [id, ...]`) and
scripted support verdicts for documents its answer may cite (`citation_support: {id:
true|false}`); `retrieval_of` turns those fields into the record's `retrieval`. A tool
result may carry documents (`[{id, text}]`, `ToolResult.documents`).

* **Retrieved**: the documents of every tool result, step by step and in each result's
  order; a document retrieved again keeps its first rank.
* **precision@k** = |relevant ∩ top k retrieved| / k. It divides by k even when fewer
  than k documents were retrieved (the usual definition: retrieving less is not rewarded).
  **recall@k** = |relevant ∩ top k| / |relevant|. **RR** = 1 / the rank of the first
  relevant document retrieved, over the whole list (not cut at k), 0 when none was. Each
  is a mean over the records whose sample lists relevant ids; the others are not in its n.
  A record that retrieved nothing (a provider error, an agent that called no tool) is in
  n and scores 0 on all three.
* **Citations**: the ids an answer cites, `[doc:ID]` by default (a regular expression with
  one group, the id, can be given instead); an id cited twice is one citation. A citation
  is supported only when the document was retrieved in the record's trajectory AND has a
  recorded verdict that says so: a judge's (the support scorer, below) or else the
  sample's scripted one. A citation of a document never retrieved, or one without a
  verdict, is unsupported: nothing is guessed from word overlap.
* **A judge's verdict** is per record: when the support scorer scored the record, a
  score of at least the threshold makes every retrieved cited document supported, and a
  lower score none of them; where it did not score (an error, no answer) the sample's
  scripted verdicts apply.
* **Citation faithfulness** = supported citations / citations, over every record that
  cites anything, with n the number of citations.

Intervals: the units resampled are cases (sample ids), as for the pass rate. Without
repeats a case is one record; with repeats a case's records are correlated (a case whose
retriever misses misses on every repeat), and treating them as independent covered 69 %
in our simulation. Precision, recall and RR per record are values in [0, 1], so their
means get `stats.clusters.cluster_mean_estimate` (without repeats `mean_estimate`).
Citations in one answer, or in the repeats of one case, are not independent, so
faithfulness takes each case's citations as one cluster (`stats.clusters`: an interval
over cases, never over citations).
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD, Retrieval, TraceRecord

if TYPE_CHECKING:  # the stats package is imported when figures are computed, not before
    from gradetrail_lib.analysis.stats.intervals import BootstrapSettings, Estimate, Interval

RELEVANT_FIELD = "relevant_context_ids"
SUPPORT_FIELD = "citation_support"
DEFAULT_K = 5
DEFAULT_CITATION_PATTERN = r"\[doc:([^\[\]\s]+)\]"

Verdict = Literal["supported", "unsupported", "no_verdict", "not_retrieved"]
VERDICTS: tuple[Verdict, ...] = ("supported", "unsupported", "no_verdict", "not_retrieved")


# -- the sample's fields


def _doc_id(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        return None
    return str(value)


def retrieval_of(fields: Mapping[str, Any]) -> Retrieval | None:
    """The record's `retrieval` from a sample's fields; None when it has neither field.
    Raises ValueError (naming the field) on a malformed one; `check_sample` reports that
    as the dataset line's InputError before a run starts."""
    relevant = fields.get(RELEVANT_FIELD)
    support = fields.get(SUPPORT_FIELD)
    if relevant is None and support is None:
        return None
    ids: list[str] = []
    if relevant is not None:
        if not isinstance(relevant, list):
            raise ValueError(f"{RELEVANT_FIELD}: must be a list of document ids")
        for index, value in enumerate(relevant):
            doc = _doc_id(value)
            if doc is None:
                raise ValueError(
                    f"{RELEVANT_FIELD}[{index}]: must be a non-empty string or an integer"
                )
            if doc not in ids:
                ids.append(doc)
    verdicts: dict[str, bool] = {}
    if support is not None:
        if not isinstance(support, dict):
            raise ValueError(f"{SUPPORT_FIELD}: must be an object of document id -> true/false")
        for key, value in support.items():
            if not isinstance(value, bool):
                raise ValueError(f"{SUPPORT_FIELD}.{key}: must be true or false")
            verdicts[str(key)] = value
    return Retrieval(relevant_ids=ids, support=verdicts)


def check_sample(sample: Sample, label: str) -> None:
    """Raises the InputError (dataset path, line, field) a malformed retrieval field is."""
    try:
        retrieval_of(sample.fields)
    except ValueError as exc:
        field_name, _, message = str(exc).partition(": ")
        raise InputError(label, sample.line, field_name, message) from None


# -- one record


def retrieved_ids(record: TraceRecord) -> list[str]:
    """Every tool result's documents in trajectory order, each id at its first rank."""
    seen: dict[str, None] = {}
    for step in record.trajectory:
        for result in step.tool_results:
            for document in result.documents:
                doc = _doc_id(document.get("id"))
                if doc is not None and doc not in seen:
                    seen[doc] = None
    return list(seen)


def precision_at_k(retrieved: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """|relevant ∩ top k| / k, k even when fewer than k were retrieved."""
    wanted = set(relevant)
    return sum(1 for doc in retrieved[:k] if doc in wanted) / k


def recall_at_k(retrieved: Sequence[str], relevant: Iterable[str], k: int) -> float:
    wanted = set(relevant)
    if not wanted:
        raise ValueError("recall needs at least one relevant id")
    return sum(1 for doc in retrieved[:k] if doc in wanted) / len(wanted)


def reciprocal_rank(retrieved: Sequence[str], relevant: Iterable[str]) -> float:
    wanted = set(relevant)
    return next((1 / rank for rank, doc in enumerate(retrieved, 1) if doc in wanted), 0.0)


def citation_pattern(text: str) -> re.Pattern[str]:
    """A citation pattern with exactly one group (the id); ValueError otherwise."""
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    if pattern.groups != 1:
        raise ValueError(f"needs exactly one group (the cited id), has {pattern.groups}")
    return pattern


def cited_ids(response: str | None, pattern: re.Pattern[str]) -> list[str]:
    """The distinct ids a response cites, in order of first citation."""
    if not response:
        return []
    seen: dict[str, None] = {}
    for match in pattern.finditer(response):
        doc = match.group(1).strip()
        if doc:
            seen.setdefault(doc, None)
    return list(seen)


def citation_verdicts(
    record: TraceRecord,
    pattern: re.Pattern[str],
    *,
    support_scorer: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> dict[str, Verdict]:
    """Each cited id's verdict (see the module docstring)."""
    cited = cited_ids(record.response, pattern)
    if not cited:
        return {}
    retrieved = set(retrieved_ids(record))
    judged: bool | None = None
    if support_scorer is not None and record.scored(support_scorer):
        judged = record.passes(support_scorer, threshold)
    scripted = record.retrieval.support if record.retrieval is not None else {}
    verdicts: dict[str, Verdict] = {}
    for doc in cited:
        supported = judged if judged is not None else scripted.get(doc)
        if doc not in retrieved:
            verdicts[doc] = "not_retrieved"
        elif supported is None:
            verdicts[doc] = "no_verdict"
        else:
            verdicts[doc] = "supported" if supported else "unsupported"
    return verdicts


@dataclass(frozen=True)
class RecordMetrics:
    """One record's figures; the ranking ones are None without relevant ids."""

    retrieved: int
    precision: float | None
    recall: float | None
    reciprocal_rank: float | None
    citations: dict[str, Verdict]


def record_metrics(
    record: TraceRecord,
    k: int = DEFAULT_K,
    pattern: re.Pattern[str] | None = None,
    *,
    support_scorer: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> RecordMetrics:
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    retrieved = retrieved_ids(record)
    relevant = record.retrieval.relevant_ids if record.retrieval is not None else []
    citations = citation_verdicts(
        record,
        pattern or citation_pattern(DEFAULT_CITATION_PATTERN),
        support_scorer=support_scorer,
        threshold=threshold,
    )
    if not relevant:
        return RecordMetrics(len(retrieved), None, None, None, citations)
    return RecordMetrics(
        len(retrieved),
        precision_at_k(retrieved, relevant, k),
        recall_at_k(retrieved, relevant, k),
        reciprocal_rank(retrieved, relevant),
        citations,
    )


# -- a run


@dataclass(frozen=True)
class RetrievalFigures:
    """A run's retrieval metrics and citation faithfulness, each with its n."""

    k: int
    records: int
    # Records whose sample lists relevant ids / with a retrieved document / citing one.
    with_relevant: int
    with_documents: int
    with_citations: int
    # Of the records with relevant ids, those that retrieved fewer than k documents.
    short_of_k: int
    precision: "Estimate"
    recall: "Estimate"
    mrr: "Estimate"
    faithfulness: "Estimate"
    verdicts: dict[str, int] = field(default_factory=dict)

    @property
    def has_data(self) -> bool:
        return bool(self.with_relevant or self.with_documents or self.with_citations)

    def to_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "records": self.records,
            "records_with_relevant_ids": self.with_relevant,
            "records_with_documents": self.with_documents,
            "records_with_citations": self.with_citations,
            "records_short_of_k": self.short_of_k,
            "retrieval_data": self.has_data,
            "precision_at_k": self.precision.to_json(),
            "recall_at_k": self.recall.to_json(),
            "mrr": self.mrr.to_json(),
            "citation_faithfulness": self.faithfulness.to_json(),
            "citations": dict(self.verdicts),
        }


def retrieval_figures(
    records: Iterable[TraceRecord],
    k: int = DEFAULT_K,
    pattern: re.Pattern[str] | None = None,
    *,
    support_scorer: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
) -> RetrievalFigures:
    """The figures of a stream of records (read once)."""
    from gradetrail_lib.analysis.stats.clusters import cluster_mean_estimate
    from gradetrail_lib.analysis.stats.intervals import Estimate

    pattern = pattern or citation_pattern(DEFAULT_CITATION_PATTERN)
    count = with_documents = short = 0
    # Per case (sample id; its repeats together): the ranking figures of its records.
    precision: dict[str, list[float]] = {}
    recall: dict[str, list[float]] = {}
    ranks: dict[str, list[float]] = {}
    cited: dict[str, tuple[int, int]] = {}  # per citing case: (supported, cited)
    citing = 0
    verdicts: dict[str, int] = dict.fromkeys(VERDICTS, 0)
    for record in records:
        count += 1
        figures = record_metrics(
            record, k, pattern, support_scorer=support_scorer, threshold=threshold
        )
        with_documents += figures.retrieved > 0
        if figures.precision is not None:
            assert figures.recall is not None and figures.reciprocal_rank is not None
            precision.setdefault(record.id, []).append(figures.precision)
            recall.setdefault(record.id, []).append(figures.recall)
            ranks.setdefault(record.id, []).append(figures.reciprocal_rank)
            short += figures.retrieved < k
        if figures.citations:
            citing += 1
            for verdict in figures.citations.values():
                verdicts[verdict] += 1
            supported = sum(1 for v in figures.citations.values() if v == "supported")
            before = cited.get(record.id, (0, 0))
            cited[record.id] = (before[0] + supported, before[1] + len(figures.citations))
    supported_total = sum(s for s, _ in cited.values())
    cited_total = sum(c for _, c in cited.values())
    # A case cited in more than one record (repeats): the interval's units are cases.
    clusters = len(cited) if citing > len(cited) else None
    faithfulness = (
        Estimate(
            supported_total / cited_total,
            cited_total,
            faithfulness_interval(list(cited.values()), confidence),
            supported_total,
            clusters=clusters,
        )
        if cited
        else Estimate(None, 0, None, 0)
    )

    def mean(per_case: dict[str, list[float]]) -> Estimate:
        return cluster_mean_estimate(list(per_case.values()), confidence)

    return RetrievalFigures(
        k=k,
        records=count,
        with_relevant=sum(len(v) for v in precision.values()),
        with_documents=with_documents,
        with_citations=citing,
        short_of_k=short,
        precision=mean(precision),
        recall=mean(recall),
        mrr=mean(ranks),
        faithfulness=faithfulness,
        verdicts=verdicts,
    )


def faithfulness_interval(
    per_case: Sequence[tuple[int, int]],
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    settings: "BootstrapSettings | None" = None,
) -> "Interval":
    """The interval of sum(supported) / sum(cited) over cases (a case: a record, or with
    repeats all of a sample's records), the cases the units.

    A case's citations are one cluster of 0/1 outcomes, so this is
    `stats.clusters.cluster_mean_interval` with cases as the clusters: Wilson over cases
    for one citation each, the bound when every share is equal, the score interval at
    the Korn-Graubard effective n where cases are few or their shares sparse, else a
    bootstrap of the ratio (a percentile bootstrap over 30 records covered 90-92.5 %:
    docs/statistics.md)."""
    from gradetrail_lib.analysis.stats.clusters import cluster_mean_interval

    if not per_case or any(c < 1 or not 0 <= s <= c for s, c in per_case):
        raise ValueError("need cases with 0 <= supported <= cited and cited >= 1")
    groups = [[1.0] * s + [0.0] * (c - s) for s, c in per_case]
    return cluster_mean_interval(groups, confidence, settings=settings)


_WIDTH = len("citation faithfulness  ")


def format_figures(label: str, figures: RetrievalFigures, pattern: str) -> str:
    if not figures.has_data:
        return (
            f"{label}: no retrieval data ({_records(figures.records)}: no sample lists "
            f"{RELEVANT_FIELD}, no tool result carried documents, no answer cites a "
            f"document as {pattern})"
        )
    k = figures.k
    lines = [f"{label} (k={k}, {_records(figures.records)})"]
    if figures.with_relevant:
        for name, estimate in (
            (f"precision@{k}", figures.precision),
            (f"recall@{k}", figures.recall),
            ("MRR", figures.mrr),
        ):
            lines.append(f"  {name:<{_WIDTH}}{estimate.format()}")
        if figures.short_of_k:
            lines.append(
                f"  ({figures.short_of_k} of {figures.with_relevant} retrieved fewer than "
                f"{k} documents; precision@{k} still divides by {k})"
            )
    else:
        lines.append(f"  precision@{k}, recall@{k}, MRR: n/a (no sample lists {RELEVANT_FIELD})")
    lines.append(f"  {'citation faithfulness':<{_WIDTH}}{_faithfulness_text(figures)}")
    return "\n".join(lines)


def _faithfulness_text(figures: RetrievalFigures) -> str:
    estimate = figures.faithfulness
    if estimate.value is None or estimate.interval is None:
        return "n/a (no answer cites a document)"
    counts = figures.verdicts
    cases = f" of {estimate.clusters} cases" if estimate.clusters is not None else ""
    return (
        f"{estimate.value:.3f} {estimate.interval.format()} "
        f"(n={estimate.n} citations in {_records(figures.with_citations)}{cases}: "
        f"{counts['supported']} supported, {counts['unsupported']} judged unsupported, "
        f"{counts['no_verdict']} without a verdict, {counts['not_retrieved']} not retrieved)"
    )


def _records(count: int) -> str:
    return f"{count} record" if count == 1 else f"{count} records"
