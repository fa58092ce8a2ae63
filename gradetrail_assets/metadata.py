"""Materialization metadata: the figures a user reads in the Dagster UI.

Every scorer's figures are shown, the primary one first; the target's calls (made by the
`responses` asset) and the judges' calls (made by the `scores` asset) are shown apart.
Figures per scorer are also flat numbers keyed `<figure>[<scorer>]`, so the UI can plot
each across materializations, and so is each failure mode's count (`failures_<mode>`,
zeros included; an agent's modes only for a spec with tools), and so are the costs
(`cost_usd`, `cost_paid_usd`, `judge_cost_usd`, `judge_cost_paid_usd`) beside their text.

Every name and text in the Markdown (sample ids, reasons, scorer names) goes through
`markdown_text`: a record's id is data, never a link, HTML or a table's end.
"""

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import dagster as dg

from gradetrail_lib.analysis.calibration import Calibration
from gradetrail_lib.analysis.stats import RunStats, describe
from gradetrail_lib.analysis.summary import RunSummary, format_cost, format_total_cost
from gradetrail_lib.engine.fetch import FetchedRun
from gradetrail_lib.providers.pricing import LOCAL_COST, format_usd, sum_costs
from gradetrail_lib.results.text import markdown_text
from gradetrail_lib.results.trace import (
    AGENT_FAILURE_MODES,
    FAILURE_MODES,
    CallTotals,
    Manifest,
    TraceRecord,
)
from gradetrail_lib.viewer.links import viewer_url

FAILURES_SHOWN = 20


def failure_modes(agent: bool) -> tuple[str, ...]:
    """The failure modes a run can have: an agent's only for a spec with tools."""
    if agent:
        return FAILURE_MODES
    return tuple(m for m in FAILURE_MODES if m not in AGENT_FAILURE_MODES)


def failure_counts(counts: dict[str, int], agent: bool) -> dict[str, int]:
    """Every mode's count, zeros included, in a fixed order."""
    return {mode: counts.get(mode, 0) for mode in failure_modes(agent)}


def _failure_metadata(counts: dict[str, int], agent: bool) -> dict[str, Any]:
    every = failure_counts(counts, agent)
    return {
        "failure_modes": dg.MetadataValue.json(every),
        **{f"failures_{mode}": dg.MetadataValue.int(n) for mode, n in every.items()},
    }


def responses_metadata(fetched: FetchedRun, *, local: bool = False) -> dict[str, Any]:
    """The responses step's counts; an agent's requests are its steps (each case's calls).
    `cost_usd`: the answers at the price list's rates; `cost_saved_usd`: what batch and
    prompt caching saved on them. `local`: the model is a local one, which has no price:
    `cost` says so and no cost figure is shown (never $0)."""
    if local:
        costs: dict[str, Any] = {"cost": dg.MetadataValue.text(LOCAL_COST)}
    else:
        # Floats, so Dagster plots them; left out when a price is unknown (never 0).
        costs = _floats({"cost_usd": fetched.cost_usd, "cost_saved_usd": fetched.cost_saved_usd})
    agent = {name: dg.MetadataValue.int(value) for name, value in fetched.agent.items()}
    # Shown for a spec whose prompts hold images or documents (absent otherwise).
    media = {"media": dg.MetadataValue.int(fetched.media)} if fetched.media else {}
    return {
        "requests": dg.MetadataValue.int(fetched.requests),
        "cache_hits": dg.MetadataValue.int(fetched.cache_hits),
        "cache_misses": dg.MetadataValue.int(fetched.requests - fetched.cache_hits),
        "provider_calls": dg.MetadataValue.int(fetched.calls),
        "provider_errors": dg.MetadataValue.int(len(fetched.errors)),
        "input_tokens": dg.MetadataValue.int(fetched.input_tokens),
        "output_tokens": dg.MetadataValue.int(fetched.output_tokens),
        "wall_s": dg.MetadataValue.float(round(fetched.wall_s, 3)),
        "execution": dg.MetadataValue.json(fetched.execution),
        **agent,
        **media,
        **costs,
    }


def _cell(text: str | None, limit: int = 80) -> str:
    return markdown_text((text or "")[:limit])


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _calls_line(label: str, totals: CallTotals) -> str:
    return (
        f"**{label}**: {totals.calls} calls, {totals.cache_hits} cache hits, "
        f"{totals.errors} failed calls; tokens {totals.input_tokens} in / "
        f"{totals.output_tokens} out; cost {format_cost(totals)}"
    )


def _floats(values: dict[str, float | None]) -> dict[str, Any]:
    """Figures as floats, which Dagster plots; one that does not exist (None) left out."""
    return {name: dg.MetadataValue.float(v) for name, v in values.items() if v is not None}


def saved_usd(totals: CallTotals) -> float | None:
    """What batch and prompt caching saved a role's own calls (None: a price unknown)."""
    return sum_costs([totals.batch_saved_usd, totals.cache_saved_usd])


def cost_metadata(target: CallTotals, judge: CallTotals) -> dict[str, Any]:
    """The costs as numbers, which Dagster plots over materializations: the target's
    (`cost_usd`: every answered call, a cache hit at what it cost; `cost_paid_usd`: this
    run's own calls; `cost_saved_usd`: what batch and prompt caching saved on them) and
    the judges' (`judge_cost_usd`, `judge_cost_paid_usd`, `judge_cost_saved_usd`). A cost
    that is unknown (a price missing from the price list), or a local model's (no price),
    is left out, not shown as 0."""
    costs = {
        "cost_usd": target.cost_usd,
        "cost_paid_usd": target.cost_paid_usd,
        "cost_saved_usd": saved_usd(target),
        "judge_cost_usd": judge.cost_usd,
        "judge_cost_paid_usd": judge.cost_paid_usd,
        "judge_cost_saved_usd": saved_usd(judge),
    }
    return _floats(costs)


def failed(record: TraceRecord) -> bool:
    """A record the failures table shows: it failed (a failure mode), or a scorer other
    than the primary one gave it no score for its own fault (a judge error, say)."""
    return record.failure_mode is not None or record.scorer_error() is not None


def _failure_of(record: TraceRecord) -> str:
    """The failure mode, or the kind of another scorer's error and the scorer's name."""
    if record.failure_mode is not None:
        return record.failure_mode
    found = record.scorer_error()
    assert found is not None
    name, entry = found
    return f"{entry.error} ({markdown_text(name)})"


def _failure_reason(record: TraceRecord, primary: str) -> str:
    found = record.scorer_error() if record.failure_mode is None else None
    entry = found[1] if found is not None else record.scores.get(primary)
    return _cell(entry.reason if entry else "")


class FirstFailures:
    """The first failed records of a stream (`failed`), kept as the stream passes through
    (the scores table reads the run's records once, and the metadata shows these)."""

    def __init__(self, limit: int = FAILURES_SHOWN) -> None:
        self.limit = limit
        self.records: list[TraceRecord] = []

    def watch(self, records: Iterable[TraceRecord]) -> Iterator[TraceRecord]:
        """`records` as they come; a stream watched again (a retry) starts afresh."""
        self.records = []
        for record in records:
            if len(self.records) < self.limit and failed(record):
                self.records.append(record)
            yield record


def scores_metadata(
    summary: RunSummary,
    records: Iterable[TraceRecord],
    manifest: Manifest,
    run_dir: str,
    *,
    agent: bool = False,
    calibrations: Sequence[Calibration] = (),
) -> dict[str, Any]:
    """`records`: the run's, or any that hold its first failures (`FirstFailures`); a
    stream is read until `FAILURES_SHOWN` failures are found. `agent`: the spec has tools
    (its failure modes are counted, its steps shown)."""
    primary = manifest.primary_scorer
    scorer_lines = "\n".join(
        f"| {markdown_text(name)}{' (primary)' if name == primary else ''} | {f.type} "
        f"| {f.scored}/{f.n} "
        f"| {f.errors} | {f.judge_errors} | {_fmt(f.mean)} | {f.passed} |"
        for name, f in summary.scorers.items()
    )
    outcome_lines = "\n".join(f"| {k} | {v} |" for k, v in summary.outcomes.items())
    mode_lines = "\n".join(
        f"| {k} | {v} |" for k, v in failure_counts(summary.failure_modes, agent).items()
    )
    failures = list(islice((r for r in records if failed(r)), FAILURES_SHOWN))
    steps_head, steps_rule = (" steps |", "---|") if agent else ("", "")
    failure_lines = "\n".join(
        f"| {markdown_text(r.id)} | {_failure_of(r)} |"
        f"{f' {len(r.trajectory)} |' if agent else ''} {_failure_reason(r, primary)} |"
        for r in failures
    )
    table = (
        "| scorer | type | scored | errors | judge errors | mean (of scored) | passed |\n"
        "|---|---|---|---|---|---|---|\n"
        f"{scorer_lines}\n\n| outcome (by the primary scorer) | count |\n|---|---|\n"
        f"{outcome_lines}\n\n"
        f"| failure mode | count |\n|---|---|\n{mode_lines}\n\n"
        f"{_calls_line('Target (calls made by responses)', summary.target)}\n\n"
        f"{_calls_line('Judges (calls made here)', summary.judge)}\n\n"
        + (
            f"| sample | failure ({markdown_text(primary)}) |{steps_head} reason |\n"
            f"|---|---|{steps_rule}---|\n{failure_lines}\n"
            if failures
            else ""
        )
    )
    target, judge = summary.target, summary.judge
    primary_figures = summary.scorers[primary]
    metadata: dict[str, Any] = {
        "summary": dg.MetadataValue.md(table),
        "samples": dg.MetadataValue.int(summary.samples),
        "primary_scorer": dg.MetadataValue.text(primary),
        # A mean over no scored sample is left out, not shown as 0.
        **_floats({"mean_score": primary_figures.mean}),
        "scorers": dg.MetadataValue.json(
            {name: f.model_dump(mode="json") for name, f in summary.scorers.items()}
        ),
        "outcomes": dg.MetadataValue.json(summary.outcomes),
        **_failure_metadata(summary.failure_modes, agent),
        # The target's figures keep their plain names; the judges' are prefixed.
        "input_tokens": dg.MetadataValue.int(target.input_tokens),
        "output_tokens": dg.MetadataValue.int(target.output_tokens),
        "cost": dg.MetadataValue.text(format_total_cost(target)),
        "cache_hits": dg.MetadataValue.int(target.cache_hits),
        "judge_calls": dg.MetadataValue.int(judge.calls),
        "judge_cache_hits": dg.MetadataValue.int(judge.cache_hits),
        # Samples a judge gave no usable grade (`RunSummary.judge_errors`), as the run's
        # summary, the report and the viewer count them; its failed calls apart.
        "judge_errors": dg.MetadataValue.int(summary.judge_error_count),
        "judge_failed_calls": dg.MetadataValue.int(judge.errors),
        "judge_input_tokens": dg.MetadataValue.int(judge.input_tokens),
        "judge_output_tokens": dg.MetadataValue.int(judge.output_tokens),
        "judge_cost": dg.MetadataValue.text(format_total_cost(judge)),
        "judge_cost_paid": dg.MetadataValue.text(
            LOCAL_COST if judge.local else format_usd(judge.cost_paid_usd)
        ),
        **cost_metadata(target, judge),
        "identity": dg.MetadataValue.text(manifest.identity),
        "scorer_hash": dg.MetadataValue.text(manifest.scorer_hash),
        "dataset_hash": dg.MetadataValue.text(manifest.dataset.hash),
        "served_models": dg.MetadataValue.json(manifest.model.served),
        "run_dir": dg.MetadataValue.path(run_dir),
    }
    for name, f in summary.scorers.items():
        metadata |= _floats({f"mean_score[{name}]": f.mean})
        metadata[f"errors[{name}]"] = dg.MetadataValue.int(f.errors)
        metadata[f"judge_errors[{name}]"] = dg.MetadataValue.int(f.judge_errors)
    return metadata | calibration_metadata(calibrations) | viewer_metadata(run_dir)


def calibration_metadata(calibrations: Sequence[Calibration]) -> dict[str, Any]:
    """The first labelled judge's kappa and corrected pass rate as floats (what a chart
    plots: `judge_kappa`, `corrected_pass_rate`; absent where undefined or withheld), and
    every labelled judge's calibration as JSON (`calibration`)."""
    if not calibrations:
        return {}
    first = calibrations[0]
    found: dict[str, Any] = {
        "calibration": dg.MetadataValue.json({c.scorer: c.to_json() for c in calibrations})
    }
    if first.kappa.value is not None:
        found["judge_kappa"] = dg.MetadataValue.float(first.kappa.value)
    corrected = first.corrected_pass_rate
    if corrected is not None and corrected.value is not None:
        found["corrected_pass_rate"] = dg.MetadataValue.float(corrected.value)
    return found


def viewer_metadata(run_dir: str) -> dict[str, Any]:
    """`viewer`: the run's page in `gradetrail view`, when GRADETRAIL_VIEWER_URL says
    where it is served (e.g. http://127.0.0.1:8765); nothing otherwise."""
    url = viewer_url(run_dir)
    return {"viewer": dg.MetadataValue.url(url)} if url else {}


def _stats_lines(name: str, figures: RunStats, primary: bool) -> list[str]:
    lines = [
        f"### {markdown_text(name)}{' (primary)' if primary else ''}",
        f"**Pass rate** (score >= {figures.threshold:g}): {describe(figures.pass_rate)}",
        f"**Mean score**: {describe(figures.mean_score)}",
    ]
    if figures.unscored:
        lines.append(f"{figures.unscored} samples unscored, counted as failures")
    return lines


def stats_metadata(
    figures: dict[str, RunStats],
    primary: str,
    *,
    target: CallTotals,
    judge: CallTotals,
    agent: bool = False,
) -> dict[str, Any]:
    """`figures` per scorer; the plain `pass_rate` figures are the primary scorer's, and
    the costs (`cost_usd`, ...) beside them are the target's and the judges' calls'."""
    main = figures[primary]
    lines: list[str] = []
    for name, stats in figures.items():
        lines += _stats_lines(name, stats, name == primary)
    counts = failure_counts(main.failure_modes, agent)
    lines.append("**Failure modes**: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    latency = main.latency
    if latency.p50 is not None:
        lines.append(
            f"**Latency** p50 {latency.p50:.3f}s, p90 {latency.p90:.3f}s, "
            f"p99 {latency.p99:.3f}s (n={latency.n})"
        )
    interval = main.pass_rate.interval
    metadata: dict[str, Any] = {
        "summary": dg.MetadataValue.md("\n\n".join(lines)),
        "primary_scorer": dg.MetadataValue.text(primary),
        **_floats(
            {
                "pass_rate": main.pass_rate.value,
                "pass_rate_low": interval.low if interval else None,
                "pass_rate_high": interval.high if interval else None,
            }
        ),
        "n": dg.MetadataValue.int(main.samples),
        "outcomes": dg.MetadataValue.json(main.outcomes),
        **_failure_metadata(main.failure_modes, agent),
        "cost": dg.MetadataValue.text(format_total_cost(target)),
        **cost_metadata(target, judge),
        "cache_hits": dg.MetadataValue.int(main.cache_hits),
        "stats": dg.MetadataValue.json({name: s.to_json() for name, s in figures.items()}),
    }
    for name, stats in figures.items():
        metadata |= _floats(
            {f"pass_rate[{name}]": stats.pass_rate.value,
             f"mean_score[{name}]": stats.mean_score.value}
        )  # fmt: skip
    return metadata
