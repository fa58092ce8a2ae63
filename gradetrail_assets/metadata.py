"""Materialization metadata: the figures a user reads in the Dagster UI."""

from typing import Any

import dagster as dg

from gradetrail_lib.pipeline import Responses, ResultRow
from gradetrail_lib.pricing import format_usd
from gradetrail_lib.stats import RunStats, describe
from gradetrail_lib.summary import RunSummary


def responses_metadata(responses: Responses, total: int) -> dict[str, Any]:
    ok = list(responses.responses.values())
    return {
        "requests": dg.MetadataValue.int(total),
        "cache_hits": dg.MetadataValue.int(len(responses.cache_hits)),
        "cache_misses": dg.MetadataValue.int(total - len(responses.cache_hits)),
        "provider_calls": dg.MetadataValue.int(responses.calls),
        "provider_errors": dg.MetadataValue.int(len(responses.errors)),
        "input_tokens": dg.MetadataValue.int(sum(r.input_tokens or 0 for r in ok)),
        "output_tokens": dg.MetadataValue.int(sum(r.output_tokens or 0 for r in ok)),
        "wall_s": dg.MetadataValue.float(round(responses.wall_s, 3)),
        "execution": dg.MetadataValue.json(responses.execution),
    }


def scores_metadata(
    summary: RunSummary, rows: list[ResultRow], manifest: dict[str, Any], run_dir: str
) -> dict[str, Any]:
    mean = "n/a" if summary.mean_score is None else f"{summary.mean_score:.4f}"
    outcome_lines = "\n".join(f"| {k} | {v} |" for k, v in summary.outcomes.items())
    failures = [r for r in rows if r.failure_mode][:20]
    failure_lines = "\n".join(
        f"| {r.id} | {r.failure_mode} | {r.reason[:80].replace('|', '/')} |" for r in failures
    )
    table = (
        f"**Mean score** {mean} (n={summary.scored})\n\n| outcome | count |\n|---|---|\n"
        f"{outcome_lines}\n\n"
        + (f"| sample | failure | reason |\n|---|---|---|\n{failure_lines}\n" if failures else "")
    )
    return {
        "summary": dg.MetadataValue.md(table),
        "samples": dg.MetadataValue.int(summary.samples),
        "mean_score": dg.MetadataValue.float(summary.mean_score or 0.0),
        "outcomes": dg.MetadataValue.json(summary.outcomes),
        "failure_modes": dg.MetadataValue.json(summary.failure_modes),
        "input_tokens": dg.MetadataValue.int(summary.input_tokens),
        "output_tokens": dg.MetadataValue.int(summary.output_tokens),
        "cost": dg.MetadataValue.text(format_usd(summary.cost_usd)),
        "cache_hits": dg.MetadataValue.int(summary.cache_hits),
        "identity": dg.MetadataValue.text(manifest["identity"]),
        "run_dir": dg.MetadataValue.path(run_dir),
    }


def stats_metadata(figures: RunStats) -> dict[str, Any]:
    latency = figures.latency
    lines = [
        f"**Pass rate** (score >= {figures.threshold:g}): {describe(figures.pass_rate)}",
        f"**Mean score**: {describe(figures.mean_score)}",
    ]
    if figures.unscored:
        lines.append(f"{figures.unscored} samples unscored, counted as failures")
    if latency.p50 is not None:
        lines.append(
            f"**Latency** p50 {latency.p50:.3f}s, p90 {latency.p90:.3f}s, "
            f"p99 {latency.p99:.3f}s (n={latency.n})"
        )
    interval = figures.pass_rate.interval
    return {
        "summary": dg.MetadataValue.md("\n\n".join(lines)),
        "pass_rate": dg.MetadataValue.float(figures.pass_rate.value or 0.0),
        "pass_rate_low": dg.MetadataValue.float(interval.low if interval else 0.0),
        "pass_rate_high": dg.MetadataValue.float(interval.high if interval else 0.0),
        "n": dg.MetadataValue.int(figures.samples),
        "outcomes": dg.MetadataValue.json(figures.outcomes),
        "cost": dg.MetadataValue.text(format_usd(figures.cost_usd)),
        "cache_hits": dg.MetadataValue.int(figures.cache_hits),
        "stats": dg.MetadataValue.json(figures.to_json()),
    }
