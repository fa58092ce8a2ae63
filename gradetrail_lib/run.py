"""A run, end to end: responses (scorer calls pipelined), records, summary, run directory.
The CLI, `run_spec` and the Dagster assets share it."""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gradetrail_lib.backends.base import Backend
from gradetrail_lib.cache import ResponseCache, default_cache_path
from gradetrail_lib.pipeline import CacheLookup, EvalPlan, Progress, Responses, fetch_responses
from gradetrail_lib.pricing import PriceList, load_prices
from gradetrail_lib.records import ScoredRun, Scoring
from gradetrail_lib.rundir import build_manifest, write_run_dir
from gradetrail_lib.summary import RunSummary, summarize
from gradetrail_lib.trace import Manifest, TraceRecord


@dataclass(frozen=True)
class CompletedRun:
    records: list[TraceRecord]
    summary: RunSummary
    manifest: Manifest
    run_dir: Path


def complete_run(
    plan: EvalPlan,
    responses: Responses,
    scored: ScoredRun,
    results_root: Path,
    *,
    started_at: datetime | None = None,
    prices: PriceList | None = None,
    timings: dict[str, float] | None = None,
) -> CompletedRun:
    """Summarise the scored records and write the run directory."""
    prices = prices or load_prices()
    timings = dict(timings or {"responses": responses.wall_s})
    timings["total"] = sum(timings.values())
    summary = summarize(scored.records, [(s.name, s.type) for s in plan.scorers])
    manifest = build_manifest(
        plan, responses, summary, prices, timings, started_at or datetime.now(UTC)
    )
    run_dir = write_run_dir(results_root, scored.records, manifest)
    return CompletedRun(scored.records, summary, manifest, run_dir)


def score(
    plan: EvalPlan,
    responses: Responses,
    cache: ResponseCache | None,
    backend: Backend,
    *,
    read_cache: bool = True,
    prices: PriceList | None = None,
) -> ScoredRun:
    """Records of a responses step that already ran (the Dagster scores asset)."""
    return Scoring(plan, cache, backend, read_cache=read_cache, prices=prices).finish(responses)


def run_model(
    plan: EvalPlan,
    cache: ResponseCache | None,
    backend: Backend,
    results_root: Path,
    *,
    read_cache: bool = True,
    looked_up: CacheLookup | None = None,
    progress: Progress | None = None,
    prices: PriceList | None = None,
) -> CompletedRun:
    """One model of a spec: responses with the scorers' calls overlapping them, then the
    records and the run directory."""
    started_at = datetime.now(UTC)
    prices = prices or load_prices()
    scoring = Scoring(plan, cache, backend, read_cache=read_cache, prices=prices)
    try:
        responses = fetch_responses(
            plan,
            cache,
            backend,
            read_cache=read_cache,
            looked_up=looked_up,
            progress=progress,
            listener=scoring,
        )
    except BaseException:  # an abort or Ctrl-C: the judge answers that came are kept
        scoring.cancel()
        raise
    scoring_started = time.perf_counter()
    scored = scoring.finish(responses)
    timings = {"responses": responses.wall_s, "scoring": time.perf_counter() - scoring_started}
    return complete_run(
        plan, responses, scored, results_root, started_at=started_at, prices=prices,
        timings=timings,
    )  # fmt: skip


def run_spec(
    spec: Path | str,
    *,
    models: Sequence[str] | None = None,
    results_root: Path | str = "results",
    cache: Path | str | None = None,
    backend: str = "local",
    concurrency: int = 8,
    read_cache: bool = True,
    repeats: int | None = None,
) -> list[CompletedRun]:
    """`gradetrail run` from Python: every model of the spec (or those named), in order."""
    from gradetrail_lib.backends import build_backend
    from gradetrail_lib.pipeline import plan as make_plan
    from gradetrail_lib.spec import load_spec

    loaded = load_spec(spec).with_repeats(repeats)
    chosen = [loaded.spec.model_named(m) for m in models] if models else loaded.spec.models
    plans = [make_plan(loaded, m) for m in chosen]  # every input error before any call
    sender = build_backend(backend, concurrency=concurrency)
    response_cache = ResponseCache(Path(cache) if cache else default_cache_path())
    with sender.session():
        return [
            run_model(p, response_cache, sender, Path(results_root), read_cache=read_cache)
            for p in plans
        ]
