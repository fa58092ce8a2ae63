"""A run, end to end: responses (scorer calls pipelined), records, summary, run directory.
The CLI, `run_spec` and the Dagster assets share it."""

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from gradetrail_lib.backends.base import Backend
from gradetrail_lib.cache import ResponseCache, default_cache_path
from gradetrail_lib.config import ModelConfig, ProviderName
from gradetrail_lib.errors import InputError, InputErrors, UsageError
from gradetrail_lib.history import HistoryEntry, record_run
from gradetrail_lib.pipeline import CacheLookup, EvalPlan, Progress, Responses, fetch_responses
from gradetrail_lib.pricing import PriceList, load_prices
from gradetrail_lib.records import ScoredRun, Scoring
from gradetrail_lib.rundir import build_manifest, write_run_dir
from gradetrail_lib.spec import LoadedSpec, Spec, load_spec
from gradetrail_lib.summary import RunSummary, summarize
from gradetrail_lib.trace import Manifest, TraceRecord


@dataclass(frozen=True)
class CompletedRun:
    records: list[TraceRecord]
    summary: RunSummary
    manifest: Manifest
    run_dir: Path
    # The run's entry in the history, with the fingerprint of its records.
    history: HistoryEntry


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
    """Summarise the scored records, write the run directory and add the run to the
    history (`gradetrail_lib.history`)."""
    prices = prices or load_prices()
    timings = dict(timings or {"responses": responses.wall_s})
    # write_run_dir adds the write and the total once the records are on disk.
    summary = summarize(scored.records, [(s.name, s.type) for s in plan.scorers])
    manifest = build_manifest(
        plan, responses, summary, prices, timings, started_at or datetime.now(UTC)
    )
    run_dir = write_run_dir(results_root, scored.records, manifest)
    entry = record_run(results_root, manifest, scored.records, run_dir)  # the run history
    return CompletedRun(scored.records, summary, manifest, run_dir, entry)


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
    before: dict[str, float] | None = None,
) -> CompletedRun:
    """One model of a spec: responses with the scorers' calls overlapping them, then the
    records and the run directory. `before` holds the seconds of the phases the caller
    ran first (load, plan); the manifest's timings name every phase."""
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
    lookup_s = looked_up.wall_s if looked_up is not None else 0.0
    timings = {
        **(before or {}),
        "cache_lookup": lookup_s,
        "responses": responses.wall_s - lookup_s,  # its wall time counts the lookup
        "scoring": time.perf_counter() - scoring_started,
    }
    return complete_run(
        plan, responses, scored, results_root, started_at=started_at, prices=prices,
        timings=timings,
    )  # fmt: skip


SpecSource = Path | str | Mapping[str, Any] | Spec | LoadedSpec
IN_MEMORY = "<in-memory spec>"
PROVIDERS: tuple[str, ...] = get_args(ProviderName)


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
        errors = [_spec_error(where, err) for err in exc.errors()]
        raise (errors[0] if len(errors) == 1 else InputErrors(errors)) from None
    return LoadedSpec(spec=validated, path=where)


def _spec_error(where: Path, error: Any) -> InputError:
    field = ".".join(str(p) for p in error["loc"]) or None
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    return InputError(str(where), None, field, message)


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
    if not (slash and provider in PROVIDERS):
        if overridden:
            raise UsageError(f"model {wanted!r}: an endpoint is given for provider/name only")
        return spec.model_named(wanted)  # a name its `watch` matches, or UnknownModel
    model = parse_model(wanted, base_url=base_url, api_key_env=api_key_env)
    if model.provider == "anthropic" and spec.params.seed is not None:
        raise UsageError(f"model {wanted}: spec {spec.name!r} sets seed, which Anthropic lacks")
    return model


def split_model(text: str) -> tuple[str, str]:
    """`provider/name` -> (provider, name), the provider checked."""
    provider, slash, name = text.partition("/")
    if not slash or provider not in PROVIDERS or not name:
        raise UsageError(
            f"model {text!r}: expected provider/name, provider one of {', '.join(PROVIDERS)}"
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
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise UsageError(f"model {text}: {message}") from None


def run_spec(
    spec: SpecSource,
    *,
    models: Sequence[str | ModelConfig] | None = None,
    base_dir: Path | str | None = None,
    results_root: Path | str = "results",
    cache: Path | str | None = None,
    backend: str = "local",
    concurrency: int = 8,
    read_cache: bool = True,
    repeats: int | None = None,
) -> list[CompletedRun]:
    """`gradetrail run` from Python: every model of the spec (or those named), in order.

    `spec` is a spec file, a folder of them (every spec, each with every model named),
    or a spec in memory (a mapping or a `Spec`, its relative paths under `base_dir`), so
    a Python file can be an eval of its own: its scorers are `{type: python, ref:
    "this_file.py:function"}`. `models` are names of the spec's models, `provider/name`
    for others, or `ModelConfig`s. Every spec's input is checked before any call."""
    from gradetrail_lib.backends import build_backend
    from gradetrail_lib.pipeline import plan as make_plan

    if isinstance(spec, str | Path) and Path(spec).is_dir():
        sources: list[SpecSource] = list(spec_files(Path(spec)))
    else:
        sources = [spec]
    plans = []
    for source in sources:  # every input error before any call
        loaded = as_loaded_spec(source, base_dir).with_repeats(repeats)
        chosen = [resolve_model(loaded.spec, m) for m in models or []] or loaded.spec.models
        plans += [make_plan(loaded, m) for m in chosen]
    sender = build_backend(backend, concurrency=concurrency)
    response_cache = ResponseCache(Path(cache) if cache else default_cache_path())
    with sender.session():
        return [
            run_model(p, response_cache, sender, Path(results_root), read_cache=read_cache)
            for p in plans
        ]
