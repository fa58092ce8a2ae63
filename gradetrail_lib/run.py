"""Finishing a run: score, summarise, write the run directory. CLI and Dagster share it."""

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gradetrail_lib.pipeline import EvalPlan, Responses, ResultRow, score_all
from gradetrail_lib.pricing import PriceList, load_prices
from gradetrail_lib.records import SampleRecord, records
from gradetrail_lib.rundir import build_manifest, write_run_dir
from gradetrail_lib.summary import RunSummary, summarize


@dataclass(frozen=True)
class CompletedRun:
    rows: list[ResultRow]
    # The rows in the shape statistics read, converted once for the summary and for them.
    records: list[SampleRecord]
    summary: RunSummary
    manifest: dict[str, Any]
    run_dir: Path


def complete_run(
    plan: EvalPlan,
    responses: Responses,
    results_root: Path,
    *,
    started_at: datetime | None = None,
    prices: PriceList | None = None,
) -> CompletedRun:
    prices = prices or load_prices()
    scoring_started = time.perf_counter()
    rows = score_all(plan, responses, prices)
    recs = records(rows)
    summary = summarize(recs)
    scoring_s = time.perf_counter() - scoring_started
    timings = {
        "responses": responses.wall_s,
        "scoring": scoring_s,
        "total": responses.wall_s + scoring_s,
    }
    manifest = build_manifest(
        plan, responses, summary, prices, timings, started_at or datetime.now(UTC)
    )
    return CompletedRun(rows, recs, summary, manifest, write_run_dir(results_root, rows, manifest))
