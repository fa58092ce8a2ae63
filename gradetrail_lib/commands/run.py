"""`gradetrail run SPEC|FOLDER`: the whole pipeline for a spec (or each spec of a folder),
one run directory per model.

`--models provider/name[,...]` runs models the spec need not list (`--base-url` gives
their endpoint). A folder's specs are all loaded and planned before any call, so one bad
spec stops the command (exit 2) with nothing sent; the exit status is then the worst of
the specs' (0 when a spec scored a sample, 1 when it scored none or aborted).
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from gradetrail_lib.analysis.calibration import summary_lines
from gradetrail_lib.analysis.history import HistoryStore
from gradetrail_lib.analysis.history_store import open_history
from gradetrail_lib.analysis.summary import format_summary
from gradetrail_lib.backends import Backend, build_backend
from gradetrail_lib.cache.base import Cache
from gradetrail_lib.cache.location import open_cache, parse_location
from gradetrail_lib.commands import until_decided
from gradetrail_lib.commands.clock import since_start
from gradetrail_lib.commands.options import add_cache_option
from gradetrail_lib.commands.progress import ProgressBar
from gradetrail_lib.engine.batch_send import BATCH_MODES, BatchOptions, parse_batch_mode
from gradetrail_lib.engine.estimate import check_max_cost, estimate_run, sent_by_batch
from gradetrail_lib.engine.run import (
    PlannedSpec,
    RunOptions,
    plan_spec,
    run_model,
    spec_files,
    split_model,
)
from gradetrail_lib.errors import InputError, InputErrors, RunAborted, UnknownModel, UsageError
from gradetrail_lib.providers.pricing import load_prices
from gradetrail_lib.settings import DEFAULT_WORKERS, DEFAULTS, cli_settings

EXIT_OK, EXIT_FAILED = 0, 1


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    settings = cli_settings()
    run = commands.add_parser("run", help="run an eval spec")
    run.add_argument(
        "spec", type=Path, metavar="SPEC", help="a spec file, or a folder: every spec in it"
    )
    which = run.add_mutually_exclusive_group()
    which.add_argument(
        "--model",
        help="run only this model of the spec (of a folder: the specs that have it)",
    )
    which.add_argument(
        "--models",
        metavar="PROVIDER/NAME[,...]",
        help="run these models instead of the spec's, listed there or not "
        "(e.g. openai/gpt-4o-mini,anthropic/claude-haiku-4-5)",
    )
    run.add_argument(
        "--base-url",
        default=None,
        help="the endpoint of the --models models (openai_compatible needs one)",
    )
    run.add_argument(
        "--repeats", type=int, default=None, help="run each sample N times (default: the spec's)"
    )
    run.add_argument(
        "--backend",
        default=settings.backend,
        help="where requests are sent from: local (this process) or ray "
        f"(env GRADETRAIL_BACKEND; default {DEFAULTS.backend})",
    )
    run.add_argument(
        "--concurrency",
        default=settings.concurrency,
        help="requests in flight (with --backend ray: per worker), or auto: found per "
        "endpoint, growing while answers are clean and halved on a 429 (local backend)",
    )
    run.add_argument(
        "--max-concurrency",
        type=int,
        default=settings.max_concurrency,
        help=f"with --concurrency auto: the most in flight per endpoint "
        f"(default {settings.max_concurrency})",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"Ray worker actors (--backend ray; default {DEFAULT_WORKERS})",
    )
    run.add_argument(
        "--ray-address",
        default=None,
        help="existing Ray cluster to use (env RAY_ADDRESS); default: start a local one",
    )
    run.add_argument(
        "--results",
        type=Path,
        default=settings.results,
        help=f"where run directories go (env GRADETRAIL_RESULTS; default ./{DEFAULTS.results})",
    )
    add_cache_option(run)
    run.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the cache file (nor create it), so every request is "
        "sent; within a run each distinct request is sent once either way (identical "
        "requests share its answer)",
    )
    run.add_argument(
        "--no-exec-cache",
        action="store_true",
        help="run every program of a code scorer or a builtin tool again, instead of reusing "
        "the execution cached beside the cache file",
    )
    run.add_argument(
        "--batch",
        nargs="?",
        const="all",
        default=settings.batch,
        choices=BATCH_MODES,
        help="send the cache misses of models whose provider has a batch API as batch "
        "jobs (half price, answered within 24h): all (targets, then judges; the default "
        "of a bare --batch) or targets only (env GRADETRAIL_BATCH=1; default off)",
    )
    run.add_argument(
        "--batch-timeout",
        type=parse_duration,
        default=settings.batch_timeout_s,
        metavar="DURATION",
        help="with --batch: stop waiting after this long (e.g. 90m, 24h, 3600s), exit 1 and "
        "leave the batches running to resume later (default 24h)",
    )
    run.add_argument(
        "--max-cost",
        type=float,
        default=None,
        metavar="USD",
        help="refuse to start (exit 2) when the worst-case cost exceeds this (see `plan`); "
        "with --until-decided, the budget: stop before a chunk would pass it",
    )
    until_decided.add_options(run)
    run.set_defaults(handler=run_command)


def make_backend(args: argparse.Namespace) -> Backend:
    return build_backend(
        args.backend,
        concurrency=args.concurrency,
        workers=args.workers,
        address=args.ray_address,
        max_concurrency=args.max_concurrency,
    )


def run_command(args: argparse.Namespace) -> int:
    until_decided.check(args)
    if args.until_decided:
        return until_decided.until_decided_command(args)
    # Python's start-up, the imports and the argument parsing, before any of this.
    startup_s = since_start()
    out = sys.stdout
    folder = args.spec.is_dir()
    wanted = _models_flag(args)
    jobs: list[PlannedSpec] = []
    errors: list[InputError] = []
    for path in spec_files(args.spec) if folder else [args.spec]:
        try:
            job = _plan_spec(path, args, wanted, folder)
        except (InputError, InputErrors, UsageError) as exc:
            if not folder:
                raise
            errors += _as_input_errors(path, exc)
            continue
        if job is None:
            print(f"Skipped: {path} (spec has no model {args.model!r})", file=out)
        else:
            jobs.append(job)
    _check_folder(jobs, errors, folder, args)
    backend = make_backend(args)
    # --no-cache: none (each run holds its own answers in memory: run_model's None).
    batch = parse_batch_mode(args.batch)
    if batch != "off" and args.no_cache:
        raise UsageError(
            "--batch needs the cache file (it records the batches, so that a run killed "
            "while they run never pays for them twice): drop --no-cache"
        )
    # Reached first, so that a store refused or out of reach fails before anything is
    # written or called.
    history = open_history(args.results, store=cli_settings().store, cache=args.cache)
    cache = None if args.no_cache else open_cache(args.cache)
    if args.max_cost is not None:  # before any call
        estimates = [estimate_run(p, cache, load_prices()) for job in jobs for p in job.plans]
        # At the price of the way the run will send each role's misses.
        check_max_cost(estimates, args.max_cost, batch=sent_by_batch(batch))
    exits = []
    with backend.session():  # one Ray cluster for every spec and model, not one each
        for job in jobs:
            if folder:
                print(f"Spec: {job.loaded.spec.name} ({job.loaded.path})", file=out)
            try:
                exits.append(_run_spec(job, backend, cache, history, args, startup_s))
            except RunAborted as exc:
                if not folder:
                    raise
                print(f"error: {job.loaded.spec.name}: {exc}", file=sys.stderr)
                exits.append(EXIT_FAILED)
    worst = max(exits)
    if folder:
        each = ", ".join(
            f"{job.loaded.spec.name} {code}" for job, code in zip(jobs, exits, strict=True)
        )
        print(f"Specs: {len(jobs)}; exit status {worst}, the worst of ({each})", file=out)
    return worst


def cache_where(args: argparse.Namespace) -> str:
    """`--cache` as a message may name it: a URL's password left out."""
    return parse_location(args.cache).where


def _note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """`--batch-timeout`: seconds, or a number with s, m, h or d."""
    value = text.strip().lower()
    unit = _UNITS.get(value[-1:]) if value else None
    try:
        seconds = float(value[:-1]) * unit if unit else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90m, 24h)") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("a duration must be more than 0")
    return seconds


def _models_flag(args: argparse.Namespace) -> list[str]:
    """The `--models` entries, each `provider/name` (checked before any spec loads; what
    else a model needs, e.g. openai_compatible's base URL, when its spec is planned: the
    spec may list it)."""
    if args.base_url is not None and not args.models:
        raise UsageError("--base-url is the endpoint of --models models; give --models")
    wanted = [m.strip() for m in (args.models or "").split(",") if m.strip()]
    if args.models is not None and not wanted:
        raise UsageError("--models: give provider/name[,provider/name...]")
    for text in wanted:
        split_model(text)
    return wanted


def _plan_spec(
    path: Path, args: argparse.Namespace, wanted: list[str], folder: bool
) -> PlannedSpec | None:
    """The spec's plans, every input error raised; None when a folder's spec lacks
    `--model`."""
    models = wanted or ([args.model] if args.model else [])
    try:
        return plan_spec(path, models, base_url=args.base_url, repeats=args.repeats)
    except UnknownModel:
        if not folder or wanted:
            raise
        return None


def _as_input_errors(path: Path, exc: Exception) -> list[InputError]:
    if isinstance(exc, InputErrors):
        return exc.errors
    if isinstance(exc, InputError):
        return [exc]
    return [InputError(str(path), None, None, str(exc))]


def _check_folder(
    jobs: list[PlannedSpec], errors: list[InputError], folder: bool, args: argparse.Namespace
) -> None:
    """A folder's bad specs (all of them at once), two specs of one name, or no spec to
    run: nothing is sent then."""
    if not folder:
        return
    names: dict[str, Path] = {}
    for job in jobs:
        name, path = job.loaded.spec.name, job.loaded.path
        if name in names:
            errors.append(
                InputError(str(path), None, "name", f"{name!r} is already used by {names[name]}")
            )
        names.setdefault(name, path)
    if errors:
        raise errors[0] if len(errors) == 1 else InputErrors(errors)
    if not jobs:
        raise UsageError(f"{args.spec}: no spec in this folder has model {args.model!r}")


def _run_spec(
    job: PlannedSpec,
    backend: Backend,
    cache: Cache | None,
    history: HistoryStore,
    args: argparse.Namespace,
    startup_s: float,
) -> int:
    """Each model of one spec, a summary each; 0 when any scored a sample, else 1. The
    start-up and the spec's load are in each of its models' manifests."""
    out = sys.stdout
    any_scored = False
    for position, eval_plan in enumerate(job.plans):
        label = f"{job.loaded.spec.name}/{eval_plan.model.name}"
        options = RunOptions(
            progress=ProgressBar(label),
            phase_seconds={"startup": startup_s, **job.phase_seconds(position)},
            exec_cache=not args.no_exec_cache,
            batch=parse_batch_mode(args.batch),
            batch_options=BatchOptions.from_settings(
                replace(cli_settings(), batch_timeout_s=args.batch_timeout),
                notify=_note,
                resume_hint=f"run the same command again to resume them "
                f"(`gradetrail batches --cache {cache_where(args)}` lists them)",
            ),
            history=history,
        )
        done = run_model(eval_plan, cache, backend, args.results, options)
        any_scored = any_scored or done.summary.any_scored
        print(f"Run: {label} -> {done.run_dir}", file=out)
        # The whole command's, from the process's start to the last byte written.
        summary = format_summary(done.totals, done.summary, since_start())
        print(summary, file=out)
        for line in summary_lines(done.run_dir):
            print(line, file=out)
        for warning in done.manifest.warnings:
            print(f"Warning: {warning}", file=out)
    return EXIT_OK if any_scored else EXIT_FAILED
