"""Running one planned model: responses (the scorers' calls pipelined with them), records
scored and streamed into the run directory, the summary, the manifest and the history
entry. Every surface reaches it through `engine.api` (the CLI and `run_spec`) or calls it
for a partition (Dagster's scores step)."""

import time
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from gradetrail_lib.analysis.summary import RunSummary, summarize
from gradetrail_lib.backends.base import Backend
from gradetrail_lib.backends.batch import (
    BatchMode,
    BatchOptions,
    batching,
)
from gradetrail_lib.cache.base import Cache
from gradetrail_lib.cache.memory import MemoryCache
from gradetrail_lib.engine.plan import Batch, RunPlan
from gradetrail_lib.engine.plan import batch_samples as default_batch_samples
from gradetrail_lib.engine.records import RecordBuilder
from gradetrail_lib.engine.responses import (
    Progress,
    Responses,
    fetch_responses,
    look_up,
)
from gradetrail_lib.engine.rules import batch_needs_the_cache
from gradetrail_lib.engine.rundir import RunDirWriter, build_manifest
from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.history.entries import HistoryEntry, HistoryStore, record_run
from gradetrail_lib.providers.base import ModelRequest
from gradetrail_lib.providers.pricing import PriceList, load_prices
from gradetrail_lib.results.keyset import AnyOf
from gradetrail_lib.results.runs import RESULTS_FILE
from gradetrail_lib.results.totals import RunTotals
from gradetrail_lib.results.trace import Manifest, TraceRecord, iter_records
from gradetrail_lib.telemetry.spans import NO_SPANS, RunSpans, start_run


@dataclass(frozen=True)
class CompletedRun:
    summary: RunSummary
    manifest: Manifest
    run_dir: Path
    # The run's entry in the history, with the fingerprint of its records.
    history: HistoryEntry
    # What the summary and the statistics were worked out from.
    totals: RunTotals

    @cached_property
    def records(self) -> list[TraceRecord]:
        """The run's records, read back from its directory (a run streams them there
        and holds none)."""
        return list(iter_records(self.run_dir / RESULTS_FILE))


def _offset(progress: Progress | None, done: int, total: int) -> Progress | None:
    """A batch's progress as the run's."""
    if progress is None:
        return None
    return lambda finished, _batch_total: progress(done + finished, total)


def response_batches(
    plan: RunPlan,
    cache: Cache,
    backend: Backend,
    *,
    timings: dict[str, float],
    progress: Progress | None,
    records_for: Callable[[Batch], RecordBuilder] | None = None,
    batch_samples: int | None = None,
) -> Iterator[tuple[Batch, Responses, RecordBuilder | None]]:
    """Each batch of the plan with its responses (looked up, then the misses sent), the
    phases' seconds added to `timings`. `records_for(batch)` makes the listener that
    starts the batch's records (and its judging) as its responses arrive."""
    prepared = False
    done = 0
    timings.setdefault("plan", 0.0)
    # Every part's misses, for the backend to expect before the first part waits (an
    # agent's steps are known one answer at a time).
    ahead = _misses_by_part(plan, cache, batch_samples) if plan.toolbox is None else None
    batches = plan.batches(batch_samples)
    while True:
        started = time.perf_counter()  # rendering and keying the batch's requests
        batch = next(batches, None)
        timings["plan"] += time.perf_counter() - started
        if batch is None:
            return
        looked = look_up(batch, cache)
        sends = not looked.complete(batch)
        scoring = records_for(batch) if records_for is not None else None
        if sends and not prepared:
            backend.prepare()  # before the step's clock, as part of the start-up
            prepared = True
        try:
            responses = fetch_responses(
                batch, cache, backend, looked_up=looked,
                progress=_offset(progress, done, plan.item_count), listener=scoring,
                ahead=ahead,
            )  # fmt: skip
            ahead = None  # told once
        except BaseException:  # an abort or Ctrl-C: the judge answers that came are kept
            if scoring is not None:
                scoring.cancel()
            raise
        lookup_s = looked.wall_s
        timings["cache_lookup"] = timings.get("cache_lookup", 0.0) + lookup_s
        timings["responses"] = timings.get("responses", 0.0) + responses.wall_s - lookup_s
        done += len(batch.items)
        yield batch, responses, scoring


def _misses_by_part(
    plan: RunPlan, cache: Cache, batch_samples: int | None
) -> Iterator[list[ModelRequest]]:
    """Each part's cache misses, made as they are asked for: a sender by batch submits
    them all before the first part waits (otherwise each part of a large run would wait
    a provider's turnaround in turn); a backend that sends as requests come asks none."""
    for batch in plan.batches(batch_samples):
        found = cache.cached_keys(batch.request_keys())
        yield [r for k, r in batch.unique_requests.items() if k not in found]


@dataclass(frozen=True)
class RunOptions:
    """How a run goes, beside what it runs (the plan), where answers are kept (the cache),
    where misses are sent (the backend) and where it is written (the results root)."""

    # Reported after each finished request: (done, total).
    progress: Progress | None = None
    prices: PriceList | None = None
    # Seconds of the phases the caller ran first (start-up, load, plan, responses): the
    # manifest's timings name every phase.
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    # The backend of the target's requests, when not the run's: Dagster's scores step
    # passes `NotSent` (its responses step sent them); the scorers' calls still use the
    # run's backend.
    targets: Backend | None = None
    # False is `--no-exec-cache`: the code scorer runs every program again.
    exec_cache: bool = True
    # Target keys an earlier step of this run sent (Dagster's responses): found in the
    # cache now, but this run's calls, not cache hits.
    already_sent: Container[str] = frozenset()
    # Samples a batch (default: about 8,192 items).
    batch_samples: int | None = None
    # Whose cache misses go through provider batch APIs: nobody's, every request's
    # (targets, then judges), or the targets' only; and how the batches are waited for.
    batch: BatchMode = "off"
    batch_options: BatchOptions = field(default_factory=BatchOptions)
    # Where the run is added to the history (`history.store.open_history`); None:
    # the file under the results root.
    history: HistoryStore | None = None


def batch_backends(
    cache: Cache | None, backend: Backend, mode: BatchMode, options: BatchOptions
) -> tuple[Backend, Backend]:
    """The backends of the targets and of the scorers' calls: `backend` itself, or with
    `mode` on a sender by batch around it, its batches recorded in the cache (file or
    Postgres: which is why batch needs the cache: without it a killed run would pay
    again)."""
    if mode == "off":
        return backend, backend
    store = cache.batch_store() if cache is not None else None
    if store is None:
        raise batch_needs_the_cache()
    return batching(backend, store, mode, options)


def attach_exec_cache(plan: RunPlan, cache: Cache | None, enabled: bool) -> None:
    """Give each scorer that runs programs, and an agent's builtin tools, the execution
    cache of the response cache (none without one, or with `--no-exec-cache`)."""
    exec_cache = cache.exec_cache() if enabled and cache is not None else None
    for scorer in plan.scorers:
        use = getattr(scorer, "use_exec_cache", None)
        if use is not None:
            use(exec_cache)
    if plan.toolbox is not None:
        plan.toolbox.use_exec_cache(exec_cache)


def run_model(
    plan: RunPlan,
    cache: Cache | None,
    backend: Backend,
    results_root: Path,
    options: RunOptions = RunOptions(),
) -> CompletedRun:
    """One model of a spec, batch by batch: responses with the scorers' calls
    overlapping them, the records scored and streamed into the run directory, the
    summary's totals kept as they go; then the manifest, the directory put in place and
    the run added to the history. `cache` None: no cache file is read or written
    (`--no-cache`); the run's own answers are held in memory, so it still sends each
    request once."""
    started_at = datetime.now(UTC)
    attach_exec_cache(plan, cache, options.exec_cache)
    target_backend, backend = batch_backends(cache, backend, options.batch, options.batch_options)
    # Recorded in the manifest, so that `bundle export` finds the run's answers.
    recorded = cache.location if cache is not None else None
    cache = cache if cache is not None else MemoryCache()
    spans = start_run(plan.loaded.spec.name, plan.model, started_at)
    prices = options.prices or load_prices()
    totals = RunTotals(plan.scorer_names)
    timings = dict(options.phase_seconds)
    for phase in ("plan", "cache_lookup", "responses", "scoring"):
        timings.setdefault(phase, 0.0)
    execution: dict[str, object] = {}
    size = options.batch_samples or default_batch_samples(plan.repeats)

    def records_for(batch: Batch) -> RecordBuilder:
        # What this run sent in earlier batches is its own answer, not a cache hit.
        sent = AnyOf(options.already_sent, totals.sent)
        return RecordBuilder(batch, cache, backend, prices=prices, sent_before=sent)

    try:
        with RunDirWriter(results_root) as out:
            batches = response_batches(
                plan, cache, options.targets or target_backend, timings=timings,
                progress=options.progress, batch_samples=size, records_for=records_for,
            )  # fmt: skip
            _write(batches, totals, out, timings, execution, spans)
            summary = summarize(totals, [(s.name, s.type) for s in plan.scorers])
            manifest = build_manifest(
                plan, execution, totals.served, summary, prices, timings, started_at,
                cache=recorded,
            )  # fmt: skip
            run_dir = out.commit(manifest)
    except BaseException as exc:
        spans.abort(type(exc).__name__)
        if isinstance(exc, KeyboardInterrupt):
            interrupted(target_backend, backend)
        raise
    try:
        fingerprint = out.fingerprint.hexdigest()
        entry = record_run(results_root, manifest, totals, run_dir, fingerprint, options.history)
    except GradetrailError as exc:  # a shared store out of reach: the run itself is kept
        spans.end(manifest)
        raise GradetrailError(
            f"the run is complete and its directory is in place ({run_dir}), but it was "
            f"not added to the run history: {exc}. `gradetrail list` and `gate --baseline "
            "previous` will not show it; run the same command again once the store is "
            "reachable (a cached re-run makes no model call) to record it"
        ) from None
    spans.end(manifest)
    return CompletedRun(summary, manifest, run_dir, entry, totals)


def _write(
    batches: Iterator[tuple[Batch, Responses, RecordBuilder | None]],
    totals: RunTotals,
    out: RunDirWriter,
    timings: dict[str, float],
    execution: dict[str, object],
    spans: RunSpans = NO_SPANS,
) -> None:
    """Scores each batch's records, adds them to `totals` and writes them; `execution`
    takes each batch's."""
    timings.setdefault("scoring", 0.0)
    for _batch, responses, scoring in batches:
        assert scoring is not None
        started = time.perf_counter()
        for records in scoring.parts(responses):
            totals.add_all(records)
            spans.records(records)
            timings["scoring"] += time.perf_counter() - started
            out.write(records)
            started = time.perf_counter()
        timings["scoring"] += time.perf_counter() - started
        execution.update(responses.execution)


def interrupted(*backends: Backend) -> None:
    """A Ctrl-C: each backend says what keeps running (a sender by batch, its batches)."""
    for backend in dict.fromkeys(backends):
        backend.interrupted()
