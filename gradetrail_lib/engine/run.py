"""A run, end to end: responses (scorer calls pipelined), records, summary, run directory.
The CLI, `run_spec` and the Dagster assets share it."""

import hashlib
import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gradetrail_lib.analysis.history import HistoryEntry, HistoryStore, record_run
from gradetrail_lib.analysis.history_store import open_history
from gradetrail_lib.analysis.summary import RunSummary, summarize
from gradetrail_lib.backends import build_backend
from gradetrail_lib.backends.base import Backend
from gradetrail_lib.cache.base import Cache
from gradetrail_lib.cache.executions import Executions
from gradetrail_lib.cache.location import default_cache_location, open_cache
from gradetrail_lib.cache.memory import MemoryCache
from gradetrail_lib.cache.postgres import PostgresCache
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.engine.batch_send import (
    BatchMode,
    BatchOptions,
    BatchSender,
    batching,
    parse_batch_mode,
)
from gradetrail_lib.engine.plan import Batch, RunPlan, load_spec_dataset
from gradetrail_lib.engine.plan import batch_samples as default_batch_samples
from gradetrail_lib.engine.plan import plan as make_plan
from gradetrail_lib.engine.records import RecordBuilder
from gradetrail_lib.engine.responses import (
    Progress,
    Responses,
    batch_fingerprint,
    fetch_responses,
    look_up,
)
from gradetrail_lib.engine.rundir import RunDirWriter, build_manifest
from gradetrail_lib.errors import GradetrailError, UsageError, input_errors, one_or_all
from gradetrail_lib.providers import registry as providers
from gradetrail_lib.providers.base import ProviderError
from gradetrail_lib.providers.pricing import PriceList, call_cost, load_prices, sum_costs
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.results.keyset import AnyOf, KeySet
from gradetrail_lib.results.runs import RESULTS_FILE
from gradetrail_lib.results.totals import RunTotals
from gradetrail_lib.results.trace import Manifest, TraceRecord, iter_records
from gradetrail_lib.settings import DEFAULTS, Settings
from gradetrail_lib.spec.spec import LoadedSpec, Spec, load_spec
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


def _batches(
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
    if isinstance(backend, BatchSender) and plan.toolbox is None:
        _submit_ahead(plan, cache, backend, batch_samples, timings)
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
            )  # fmt: skip
        except BaseException:  # an abort or Ctrl-C: the judge answers that came are kept
            if scoring is not None:
                scoring.cancel()
            raise
        lookup_s = looked.wall_s
        timings["cache_lookup"] = timings.get("cache_lookup", 0.0) + lookup_s
        timings["responses"] = timings.get("responses", 0.0) + responses.wall_s - lookup_s
        done += len(batch.items)
        yield batch, responses, scoring


def _submit_ahead(
    plan: RunPlan,
    cache: Cache,
    sender: BatchSender,
    batch_samples: int | None,
    timings: dict[str, float],
) -> None:
    """By batch, every part's cache misses are submitted before the first part waits:
    otherwise each part of a large run would wait a provider's turnaround in turn."""
    started = time.perf_counter()
    for batch in plan.batches(batch_samples):
        found = cache.cached_keys(batch.request_keys())
        sender.submit_ahead([r for k, r in batch.unique_requests.items() if k not in found])
    timings["responses"] = timings.get("responses", 0.0) + time.perf_counter() - started


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
    # Where the run is added to the history (`analysis.history_store.open_history`); None:
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
    if not isinstance(cache, ResponseCache | PostgresCache):
        raise UsageError("--batch needs the cache file (it records the batches): drop --no-cache")
    return batching(backend, cache.batch_store(), mode, options)


def attach_exec_cache(plan: RunPlan, cache: Cache | None, enabled: bool) -> None:
    """Give each scorer that runs programs, and an agent's builtin tools, the execution
    cache of the response cache (none without one, or with `--no-exec-cache`)."""
    exec_cache: Executions | None = None
    if enabled and isinstance(cache, ResponseCache | PostgresCache):
        exec_cache = cache.exec_cache()
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
    recorded = cache.location if isinstance(cache, ResponseCache | PostgresCache) else None
    cache = cache if cache is not None else MemoryCache()
    prices = options.prices or load_prices()
    totals = RunTotals(plan.scorer_names)
    timings = dict(options.phase_seconds)
    for phase in ("plan", "cache_lookup", "responses", "scoring"):
        timings.setdefault(phase, 0.0)
    execution: dict[str, object] = {}
    spans = start_run(plan.loaded.spec.name, plan.model, started_at)
    size = options.batch_samples or default_batch_samples(plan.repeats)

    def records_for(batch: Batch) -> RecordBuilder:
        # What this run sent in earlier batches is its own answer, not a cache hit.
        sent = AnyOf(options.already_sent, totals.sent)
        return RecordBuilder(batch, cache, backend, prices=prices, sent_before=sent)

    try:
        with RunDirWriter(results_root) as out:
            batches = _batches(
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
            _interrupted(target_backend, backend)
        raise
    try:
        entry = record_run(
            results_root, manifest, totals, run_dir, out.fingerprint.hexdigest(), options.history
        )
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


@dataclass
class FetchedRun:
    """What a responses step that ran on its own (Dagster's responses asset) hands on:
    not the responses (they are in the cache, by request key) but their counts, the
    errors (which the cache does not keep) and a fingerprint of every outcome."""

    requests: int = 0
    cache_hits: int = 0
    calls: int = 0
    errors: dict[str, ProviderError] = field(default_factory=dict)
    # The keys this step answered by calling the provider: a later step that reads them
    # from the cache records them as this run's calls (paid), not as cache hits.
    sent: KeySet = field(default_factory=KeySet)
    input_tokens: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    execution: dict[str, object] = field(default_factory=dict)
    # An agent's: cases, steps, how its cases stopped.
    agent: dict[str, int] = field(default_factory=dict)
    fingerprint: str = ""
    # The answers' cost at the price list's rates (a cache hit at what it cost), and what
    # batch and prompt caching saved on them; None when a price is unknown.
    cost_usd: float | None = 0.0
    cost_saved_usd: float | None = 0.0


def fetch_run(
    plan: RunPlan,
    cache: Cache,
    backend: Backend,
    *,
    progress: Progress | None = None,
    batch: BatchMode = "off",
    batch_options: BatchOptions | None = None,
    prices: PriceList | None = None,
) -> FetchedRun:
    """Every response of the plan in the cache (the misses sent), batch by batch. A key
    an earlier batch sent that a later one finds is neither a cache hit nor a call.
    `batch` other than off sends the misses through provider batch APIs."""
    backend, _ = batch_backends(cache, backend, batch, batch_options or BatchOptions())
    attach_exec_cache(plan, cache, enabled=True)
    try:
        return _fetch_run(plan, cache, backend, progress, prices or load_prices())
    except KeyboardInterrupt:
        _interrupted(backend)
        raise


def _interrupted(*backends: Backend) -> None:
    """A Ctrl-C: a sender by batch says which of its batches keep running."""
    for backend in dict.fromkeys(backends):
        if isinstance(backend, BatchSender):
            backend.interrupted()


def _fetch_run(
    plan: RunPlan, cache: Cache, backend: Backend, progress: Progress | None, prices: PriceList
) -> FetchedRun:
    fetched = FetchedRun()
    digest = hashlib.sha256()
    timings: dict[str, float] = {}
    for part, responses, _ in _batches(plan, cache, backend, timings=timings, progress=progress):
        digest.update(batch_fingerprint(responses).encode())
        fetched.errors.update(responses.errors)
        fetched.calls += responses.calls
        fetched.execution = {**fetched.execution, **responses.execution}
        answered = list(responses.responses.values())
        fetched.input_tokens += sum(r.input_tokens or 0 for r in answered)
        fetched.output_tokens += sum(r.output_tokens or 0 for r in answered)
        costs = [call_cost(r, prices, plan.model.provider, plan.model.name) for r in answered]
        fetched.cost_usd = sum_costs([fetched.cost_usd, *(c.usd for c in costs)])
        fetched.cost_saved_usd = sum_costs(
            [fetched.cost_saved_usd]
            + [c.batch_saved_usd for c in costs]
            + [c.cache_saved_usd for c in costs]
        )
        if responses.trajectories:
            cases = list(responses.trajectories.values())
            steps = [c for t in cases for c in t.calls]
            fetched.sent.add(c.request.key for c in steps if not c.cache_hit)
            fetched.requests += len(steps)
            hits = [c for c in steps if c.cache_hit and c.request.key not in fetched.sent]
            fetched.cache_hits += len(hits)
            stopped = [t.stopped for t in cases]
            for name, value in (
                ("cases", len(cases)),
                ("steps", sum(len(t.steps) for t in cases)),
                ("thrash", stopped.count("thrash")),
                ("budget_exhausted", stopped.count("budget_exhausted")),
                ("cases_with_tool_errors", sum(t.tool_error for t in cases)),
            ):
                fetched.agent[name] = fetched.agent.get(name, 0) + value
        else:
            fetched.requests += len(part.unique_requests)
            fetched.cache_hits += sum(k not in fetched.sent for k in responses.cache_hits)
            fetched.sent.add(k for k in responses.responses if k not in responses.cache_hits)
    fetched.wall_s = timings.get("cache_lookup", 0.0) + timings.get("responses", 0.0)
    fetched.fingerprint = digest.hexdigest()
    return fetched


# The settings of a run by batch's waits (read from the environment by `run_spec`).
_BATCH_WAITS = ("batch_timeout_s", "batch_poll_s", "batch_poll_max_s")

SpecSource = Path | str | Mapping[str, Any] | Spec | LoadedSpec
IN_MEMORY = "<in-memory spec>"


def spec_files(folder: Path) -> list[Path]:
    """The specs of a folder: its `*.yaml` and `*.yml` files, in name order."""
    found = sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and p.is_file() and not p.name.startswith(".")
    )
    if not found:
        raise UsageError(f"{folder}: no spec in this folder (no *.yaml or *.yml file)")
    return found


def as_loaded_spec(spec: SpecSource, base_dir: Path | str | None = None) -> LoadedSpec:
    """A spec file, or a spec in memory (a mapping with a spec file's keys, or a `Spec`)
    whose relative paths (dataset, a Python scorer's `file.py:function`, a judge's
    prompt) are relative to `base_dir` (default: the working directory)."""
    if isinstance(spec, LoadedSpec):
        return spec
    if isinstance(spec, str | Path):
        return load_spec(spec)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    where = base / IN_MEMORY
    if isinstance(spec, Spec):
        return LoadedSpec(spec=spec, path=where)
    try:
        validated = Spec.model_validate(dict(spec), context={"base_dir": base})
    except ValidationError as exc:
        raise one_or_all(input_errors(exc, str(where))) from None
    return LoadedSpec(spec=validated, path=where)


def resolve_model(
    spec: Spec,
    wanted: str | ModelConfig,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
) -> ModelConfig:
    """A model to run the spec with: a `ModelConfig`; the name of one of the spec's models;
    `provider/name` (a model the spec need not list, at `base_url` when given; one the spec
    lists by that provider and name keeps its settings unless `base_url` or `api_key_env`
    is given); or a name the spec's `watch` matches."""
    if isinstance(wanted, ModelConfig):
        return wanted
    overridden = base_url is not None or api_key_env is not None
    for listed in spec.models:
        if not overridden and wanted in (listed.name, f"{listed.provider}/{listed.name}"):
            return listed
    provider, slash, _ = wanted.partition("/")
    if not (slash and provider in providers.names()):
        if overridden:
            raise UsageError(f"model {wanted!r}: an endpoint is given for provider/name only")
        return spec.model_named(wanted)  # a name its `watch` matches, or UnknownModel
    model = parse_model(wanted, base_url=base_url, api_key_env=api_key_env)
    refused = providers.get(model.provider).refused(spec.params)
    if refused is not None:
        raise UsageError(refused.model_message(wanted, spec.name))
    return model


def split_model(text: str) -> tuple[str, str]:
    """`provider/name` -> (provider, name), the provider checked."""
    provider, slash, name = text.partition("/")
    if not slash or provider not in providers.names() or not name:
        raise UsageError(
            f"model {text!r}: expected provider/name, "
            f"provider one of {', '.join(providers.names())}"
        )
    return provider, name


def parse_model(
    text: str, *, base_url: str | None = None, api_key_env: str | None = None
) -> ModelConfig:
    """`provider/name` (the name may hold slashes) as a model config."""
    provider, name = split_model(text)
    try:
        return ModelConfig.model_validate(
            {"provider": provider, "name": name, "base_url": base_url, "api_key_env": api_key_env}
        )
    except ValidationError as exc:
        message = input_errors(exc, text)[0].message
        raise UsageError(f"model {text}: {message}") from None


@dataclass(frozen=True)
class PlannedSpec:
    """A spec loaded, its models resolved and each one planned: every input checked
    before anything is called or written."""

    loaded: LoadedSpec
    plans: list[RunPlan]
    # Seconds: loading the spec and its dataset (shared by its models), planning each.
    load_s: float = 0.0
    plan_s: list[float] = field(default_factory=list)

    def phase_seconds(self, position: int) -> dict[str, float]:
        """The phases the `position`-th model's run went through before it started."""
        return {"load": self.load_s, "plan": self.plan_s[position]}


def plan_spec(
    source: SpecSource,
    models: Sequence[str | ModelConfig] = (),
    *,
    base_dir: Path | str | None = None,
    base_url: str | None = None,
    repeats: int | None = None,
) -> PlannedSpec:
    """Load, resolve models, plan: the one way into a run, for the CLI, `run_spec` and
    the Dagster assets. `models` (default: the spec's) are resolved by `resolve_model`;
    raises InputError(s), UsageError or UnknownModel."""
    started = time.perf_counter()
    loaded = as_loaded_spec(source, base_dir).with_repeats(repeats)
    dataset = load_spec_dataset(loaded)
    load_s = time.perf_counter() - started
    chosen = [resolve_model(loaded.spec, m, base_url=base_url) for m in models]
    plans, plan_s = [], []
    for model in chosen or loaded.spec.models:
        started = time.perf_counter()
        plans.append(make_plan(loaded, model, dataset))
        plan_s.append(time.perf_counter() - started)
    return PlannedSpec(loaded, plans, load_s, plan_s)


def run_spec(
    spec: SpecSource,
    *,
    models: Sequence[str | ModelConfig] | None = None,
    base_dir: Path | str | None = None,
    results_root: Path | str = DEFAULTS.results,
    cache: Path | str | None = None,
    backend: str = DEFAULTS.backend,
    concurrency: int | str = DEFAULTS.concurrency,
    read_cache: bool = True,
    repeats: int | None = None,
    exec_cache: bool = True,
    batch: str = "off",
) -> list[CompletedRun]:
    """`gradetrail run` from Python: every model of the spec (or those named), in order.

    `spec` is a spec file, a folder of them (every spec, each with every model named),
    or a spec in memory (a mapping or a `Spec`, its relative paths under `base_dir`), so
    a Python file can be an eval of its own: its scorers are `{type: python, ref:
    "this_file.py:function"}`. `models` are names of the spec's models, `provider/name`
    for others, or `ModelConfig`s. Every spec's input is checked before any call.
    `read_cache=False` is `--no-cache`: the cache file is neither read nor written (nor
    created), and each run still sends a request once. `batch` is `run --batch`'s: off,
    all or targets (provider batch APIs; needs the cache file). `exec_cache=False` is
    `--no-exec-cache`: the code scorer runs every program again."""
    mode = parse_batch_mode(batch)
    if mode != "off" and not read_cache:
        raise UsageError("batch needs the cache file (it records the batches): read_cache=True")
    waits = BatchOptions.from_settings(Settings.from_environment(only=_BATCH_WAITS))
    if isinstance(spec, str | Path) and Path(spec).is_dir():
        sources: list[SpecSource] = list(spec_files(Path(spec)))
    else:
        sources = [spec]
    # Every spec planned (every input error raised) before any call or write.
    planned = [plan_spec(s, models or (), base_dir=base_dir, repeats=repeats) for s in sources]
    sender = build_backend(backend, concurrency=concurrency)
    response_cache = None  # not read, so not written either: each run holds its own answers
    location = cache if cache else default_cache_location()
    if read_cache:
        response_cache = open_cache(location)
    store = Settings.from_environment(only=("store",)).store
    history = open_history(Path(results_root), store=store, cache=location)
    done = []
    with sender.session():
        for job in planned:
            for position, each in enumerate(job.plans):
                options = RunOptions(
                    phase_seconds=job.phase_seconds(position),
                    batch=mode,
                    batch_options=waits,
                    exec_cache=exec_cache,
                    history=history,
                )
                done.append(run_model(each, response_cache, sender, Path(results_root), options))
    return done
