"""The one wiring of a run, for every surface: `gradetrail run`, `run_spec` (a code-first
eval) and Dagster's partitions (`plan_spec`).

A run request goes: every spec of it loaded (each spec of a folder), its models resolved
and planned, every input checked before anything is opened, called or written; then the
backend, the history and the cache opened once for all; then each planned model run by
`engine.run.run_model`. The rules of a request's options are worded here and nowhere
else; a message that names an option names it as the surface it came through spells it
(`OptionNames`: the CLI passes its flags, Python's arguments are the default). What a
surface shows as the run goes (a progress bar, a summary after each model, a folder's
skipped specs) it does in its `RunHooks`.

`samples_needed` joins the run history to the statistics for `gradetrail plan --detect`:
the spec's recent runs, paired, give the discordance a comparison's size rests on.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gradetrail_lib.analysis.sample_size import SampleSize, observe_pairs, sample_sizes
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE, DEFAULT_GATE_THRESHOLD
from gradetrail_lib.analysis.stats.power import DEFAULT_POWER, check_power_inputs
from gradetrail_lib.backends import Backend, build_backend
from gradetrail_lib.backends.batch import BatchOptions, parse_batch_mode
from gradetrail_lib.cache.location import default_cache_location, open_cache
from gradetrail_lib.engine.estimate import check_max_cost, estimate_run, sent_by_batch
from gradetrail_lib.engine.plan import RunPlan, load_spec_dataset
from gradetrail_lib.engine.plan import plan as make_plan
from gradetrail_lib.engine.responses import Progress
from gradetrail_lib.engine.rules import (
    PYTHON_NAMES,
    OptionNames,
    base_url_needs_models,
    batch_needs_the_cache,
    check_decision,
)
from gradetrail_lib.engine.run import CompletedRun, RunOptions, run_model
from gradetrail_lib.errors import (
    InputError,
    InputErrors,
    RunAborted,
    UnknownModel,
    UsageError,
    one_or_all,
)
from gradetrail_lib.history.entries import HistoryStore, run_pairs
from gradetrail_lib.history.store import open_history
from gradetrail_lib.providers.pricing import load_prices
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.settings import DEFAULT_MAX_CONCURRENCY, DEFAULTS, Settings
from gradetrail_lib.spec.sources import SpecSource, as_loaded_spec, resolve_model, spec_files
from gradetrail_lib.spec.spec import LoadedSpec, Spec, load_spec

if TYPE_CHECKING:
    from gradetrail_lib.engine.until_decided import DecidedRuns


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
    """Load, resolve models, plan: the one way into a run, for a run request and for a
    Dagster partition. `models` (default: the spec's) are resolved by
    `spec.sources.resolve_model`; raises InputError(s), UsageError or UnknownModel."""
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


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """What to run and how: the options `gradetrail run` and `run_spec` share."""

    # A spec file, a folder of them (every spec), or a spec in memory.
    spec: SpecSource
    # Names of the spec's models, `provider/name` for others, or `ModelConfig`s; none:
    # the spec's.
    models: Sequence[str | ModelConfig] = ()
    # One model by name: of a folder, the specs that have it (the others are skipped).
    model: str | None = None
    # Where a spec in memory's relative paths start (default: the working directory).
    base_dir: Path | str | None = None
    # The endpoint of the `provider/name` models given.
    base_url: str | None = None
    repeats: int | None = None
    results_root: Path | str = DEFAULTS.results
    # The cache's location; None: `GRADETRAIL_CACHE`, else the project's DuckDB file.
    cache: Path | str | None = None
    # False: the cache is neither read nor written (each run holds its own answers).
    read_cache: bool = True
    backend: str = DEFAULTS.backend
    concurrency: int | str = DEFAULTS.concurrency
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    workers: int | None = None
    ray_address: str | None = None
    # False: the code scorer runs every program again.
    exec_cache: bool = True
    # off, all or targets (provider batch APIs), and how the batches are waited for
    # (None: the waits the environment sets, nothing said as they go).
    batch: str | bool = "off"
    batch_options: BatchOptions | None = None
    # Dollars: refuse to start when the worst case is over it.
    max_cost: float | None = None
    # Seconds the surface took to start (the CLI's process), put in each manifest.
    startup_s: float | None = None
    names: OptionNames = PYTHON_NAMES


class RunHooks:
    """What a surface shows as a request runs. These do nothing, and a spec whose run
    aborts stops the request (`run_spec`); the CLI's print and keep going."""

    def skipped(self, path: Path, model: str) -> None:
        """A spec of the folder that has no model `model` (`RunRequest.model`)."""

    def spec_starts(self, planned: PlannedSpec) -> None:
        """Before the first model of a spec."""

    def progress(self, label: str) -> Progress | None:
        """What to tell as the model `label` (spec/model) answers: (done, total)."""
        return None

    def model_done(self, done: CompletedRun) -> None:
        """After each model's run."""

    def spec_aborted(self, planned: PlannedSpec, error: RunAborted) -> None:
        """A spec's run gave up (`RunAborted`): raise to stop, return to go on."""
        raise error


@dataclass(frozen=True)
class SpecRuns:
    """A spec's completed runs, one per model, and what stopped it, if anything did."""

    planned: PlannedSpec
    runs: list[CompletedRun]
    aborted: RunAborted | None = None


def check_request(request: RunRequest) -> None:
    """The rules among a request's options, before any spec is loaded."""
    if parse_batch_mode(request.batch) != "off" and not request.read_cache:
        raise batch_needs_the_cache(request.names)
    if request.base_url is not None and not request.models:
        raise base_url_needs_models(request.names)


def plan_request(request: RunRequest, hooks: RunHooks) -> list[PlannedSpec]:
    """Every spec of the request planned. Of a folder, every bad spec is reported at once
    (and two specs of one name), and a spec without `request.model` is skipped; one bad
    spec and nothing runs."""
    source = request.spec
    folder = isinstance(source, str | Path) and Path(source).is_dir()
    sources: list[SpecSource] = [source]
    if isinstance(source, str | Path) and folder:
        sources = list(spec_files(Path(source)))
    wanted = list(request.models) or ([request.model] if request.model else [])
    jobs: list[PlannedSpec] = []
    errors: list[InputError] = []
    for each in sources:
        try:
            jobs.append(
                plan_spec(
                    each,
                    wanted,
                    base_dir=request.base_dir,
                    base_url=request.base_url,
                    repeats=request.repeats,
                )  # fmt: skip
            )
        except UnknownModel as exc:
            if not folder:
                raise
            if request.models or request.model is None:
                errors.append(InputError(str(each), None, None, str(exc)))
            else:
                hooks.skipped(Path(str(each)), request.model)
        except (InputError, InputErrors, UsageError) as exc:
            if not folder:
                raise
            errors += _as_input_errors(Path(str(each)), exc)
    if not folder:
        return jobs
    named: dict[str, Path] = {}
    for job in jobs:
        name, path = job.loaded.spec.name, job.loaded.path
        if name in named:
            errors.append(
                InputError(str(path), None, "name", f"{name!r} is already used by {named[name]}")
            )
        named.setdefault(name, path)
    if errors:
        raise one_or_all(errors)
    if not jobs:
        raise UsageError(f"{source}: no spec in this folder has model {request.model!r}")
    return jobs


def _as_input_errors(path: Path, exc: Exception) -> list[InputError]:
    if isinstance(exc, InputErrors):
        return exc.errors
    if isinstance(exc, InputError):
        return [exc]
    return [InputError(str(path), None, None, str(exc))]


# The settings of a run by batch's waits, when the request gives none.
_BATCH_WAITS = ("batch_timeout_s", "batch_poll_s", "batch_poll_max_s")


def _backend_of(request: RunRequest) -> Backend:
    return build_backend(
        request.backend,
        concurrency=request.concurrency,
        workers=request.workers,
        address=request.ray_address,
        max_concurrency=request.max_concurrency,
    )


def run_request(request: RunRequest, hooks: RunHooks | None = None) -> list[SpecRuns]:
    """Every spec of the request, each model in order, through one backend session, one
    cache and one history; every input checked, and the cost limit, before any call."""
    hooks = hooks or RunHooks()
    check_request(request)
    mode = parse_batch_mode(request.batch)
    jobs = plan_request(request, hooks)
    backend = _backend_of(request)
    results_root = Path(request.results_root)
    location = request.cache or default_cache_location()
    # Reached first, so that a store refused or out of reach fails before anything is
    # written or called.
    store = Settings.from_environment(only=("store",)).store
    history = open_history(results_root, store=store, cache=location)
    # Not read, so not written either: each run then holds its own answers.
    cache = open_cache(location) if request.read_cache else None
    if request.max_cost is not None:  # before any call
        estimates = [estimate_run(p, cache, load_prices()) for job in jobs for p in job.plans]
        # At the price of the way the run will send each role's misses.
        check_max_cost(
            estimates, request.max_cost, batch=sent_by_batch(mode), option=request.names.max_cost
        )
    waits = request.batch_options or BatchOptions.from_settings(
        Settings.from_environment(only=_BATCH_WAITS)
    )
    startup = {} if request.startup_s is None else {"startup": request.startup_s}
    done: list[SpecRuns] = []
    with backend.session():  # one Ray cluster for every spec and model, not one each
        for job in jobs:
            hooks.spec_starts(job)
            runs: list[CompletedRun] = []
            try:
                for position, each in enumerate(job.plans):
                    options = RunOptions(
                        progress=hooks.progress(f"{job.loaded.spec.name}/{each.model.name}"),
                        phase_seconds={**startup, **job.phase_seconds(position)},
                        exec_cache=request.exec_cache,
                        batch=mode,
                        batch_options=waits,
                        history=history,
                    )
                    runs.append(run_model(each, cache, backend, results_root, options))
                    hooks.model_done(runs[-1])
            except RunAborted as exc:
                hooks.spec_aborted(job, exc)
                done.append(SpecRuns(job, runs, exc))
                continue
            done.append(SpecRuns(job, runs))
    return done


def run_spec(
    spec: SpecSource,
    *,
    models: Sequence[str | ModelConfig] | None = None,
    base_dir: Path | str | None = None,
    base_url: str | None = None,
    results_root: Path | str = DEFAULTS.results,
    cache: Path | str | None = None,
    backend: str = DEFAULTS.backend,
    concurrency: int | str = DEFAULTS.concurrency,
    read_cache: bool = True,
    repeats: int | None = None,
    exec_cache: bool = True,
    batch: str = "off",
    max_cost: float | None = None,
) -> list[CompletedRun]:
    """`gradetrail run` from Python: every model of the spec (or those named), in order.

    `spec` is a spec file, a folder of them (every spec, each with every model named),
    or a spec in memory (a mapping or a `Spec`, its relative paths under `base_dir`), so
    a Python file can be an eval of its own: its scorers are `{type: python, ref:
    "this_file.py:function"}`. `models` are names of the spec's models, `provider/name`
    for others (at `base_url` when given), or `ModelConfig`s. Every spec's input is
    checked before any call. `read_cache=False` is `--no-cache`: the cache file is
    neither read nor written (nor created), and each run still sends a request once.
    `batch` is `run --batch`'s: off, all or targets (provider batch APIs; needs the
    cache file). `exec_cache=False` is `--no-exec-cache`: the code scorer runs every
    program again. `max_cost` (dollars) refuses to start when the worst case is over it."""
    request = RunRequest(
        spec=spec,
        models=models or (),
        base_dir=base_dir,
        base_url=base_url,
        results_root=results_root,
        cache=cache,
        read_cache=read_cache,
        backend=backend,
        concurrency=concurrency,
        repeats=repeats,
        exec_cache=exec_cache,
        batch=batch,
        max_cost=max_cost,
    )
    return [done for each in run_request(request) for done in each.runs]


def samples_needed(
    spec: Spec | Path | str,
    detect: float,
    *,
    power: float = DEFAULT_POWER,
    confidence: float = DEFAULT_CONFIDENCE,
    results: Path | str | None = None,
    repeats: int | None = None,
    history: HistoryStore | None = None,
) -> list[SampleSize]:
    """The samples a paired comparison on this spec needs to detect a difference of
    `detect` in pass rate: one `SampleSize` without repeats, and one at the spec's (or
    `repeats`) repeat count when that is more than one. The discordance comes from the
    spec's last two runs under `results` (the run history: `history`, by default the
    file under `results`) when there are two, else it is assumed. ValueError for a
    difference outside (0, 1) or a power or confidence outside (0, 1)."""
    # Checked before the spec or the history is read.
    check_power_inputs(detect, power, confidence)
    if repeats is not None and repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    the_spec = spec if isinstance(spec, Spec) else load_spec(spec).spec
    pairs = run_pairs(Path(results), the_spec.name, history) if results else iter(())
    seen, notes = observe_pairs(pairs)
    k = repeats if repeats is not None else the_spec.repeats
    return sample_sizes(detect, k, seen, notes, power=power, confidence=confidence)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """How a release check goes (`engine.until_decided`): the incumbent the new model
    is checked against, the cases' seeded order, the chunk, the most cases, and the
    margin within which the two are equivalent."""

    against: str
    seed: int = 0
    # Cases a chunk; None: the engine's (`until_decided.DEFAULT_CHUNK`).
    chunk: int | None = None
    max_samples: int | None = None
    margin: float = DEFAULT_GATE_THRESHOLD


def decide_request(request: RunRequest, decision: Decision) -> "DecidedRuns":
    """A release check through the same wiring as a run: the request's one new model
    (`models` or `model`) against `decision.against` on its one spec, chunk by chunk
    until decided (`engine.until_decided.run_until_decided`), the request's cost limit
    its budget; every input checked before the backend and the cache are opened."""
    # Here, so that a run's API does not load what only a release check needs (numpy).
    from gradetrail_lib.engine.until_decided import DEFAULT_CHUNK, run_until_decided

    names = request.names
    new = [*request.models] or ([request.model] if request.model else [])
    source = request.spec
    check_decision(
        read_cache=request.read_cache,
        batch_off=parse_batch_mode(request.batch) == "off",
        new_models=len(new),
        folder=isinstance(source, str | Path) and Path(source).is_dir(),
        names=names,
    )
    planned = plan_spec(
        source, [decision.against, new[0]], base_dir=request.base_dir,
        base_url=request.base_url, repeats=request.repeats,
    )  # fmt: skip
    incumbent, challenger = planned.plans
    if incumbent.model.name == challenger.model.name:
        raise UsageError(f"{names.against} {decision.against}: the new model is the incumbent")
    backend = _backend_of(request)
    cache = open_cache(request.cache or default_cache_location())
    with backend.session():
        return run_until_decided(
            incumbent, challenger, cache, backend, Path(request.results_root),
            seed=decision.seed, chunk=DEFAULT_CHUNK if decision.chunk is None else decision.chunk,
            max_samples=decision.max_samples,
            max_cost=request.max_cost, margin=decision.margin, names=names,
        )  # fmt: skip
