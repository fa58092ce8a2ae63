"""`gradetrail run SPEC|FOLDER`: the whole pipeline for a spec (or each spec of a folder),
one run directory per model.

`--models provider/name[,...]` runs models the spec need not list (`--base-url` gives
their endpoint). A folder's specs are all loaded and planned before any call, so one bad
spec stops the command (exit 2) with nothing sent; the exit status is then the worst of
the specs' (0 when a spec scored a sample, 1 when it scored none or aborted).
"""

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gradetrail_lib.analysis.calibration import summary_lines
from gradetrail_lib.analysis.summary import format_summary
from gradetrail_lib.backends.batch import BATCH_MODES, BatchOptions
from gradetrail_lib.cache.location import parse_location
from gradetrail_lib.commands import until_decided
from gradetrail_lib.commands.clock import since_start
from gradetrail_lib.commands.options import add_cache_option
from gradetrail_lib.commands.progress import ProgressBar
from gradetrail_lib.engine.api import PlannedSpec, RunHooks, RunRequest, run_request
from gradetrail_lib.engine.responses import Progress
from gradetrail_lib.engine.rules import OptionNames
from gradetrail_lib.engine.run import CompletedRun
from gradetrail_lib.errors import RunAborted, UsageError
from gradetrail_lib.providers.models import split_model
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
    run.add_argument(
        "--json",
        action="store_true",
        help="print each model's summary as JSON (one document once every run is done: "
        "the figures every other surface reads) instead of text",
    )
    until_decided.add_options(run)
    run.set_defaults(handler=run_command)


# How the CLI spells the options the engine's rules name.
FLAGS = OptionNames(
    batch="--batch",
    no_cache="--no-cache",
    models="--models",
    base_url="--base-url",
    max_cost="--max-cost",
    until_decided="--until-decided",
    against="--against",
    new_model="--model or --models",
    chunk="--chunk",
    max_samples="--max-samples",
)


def request_of(
    args: argparse.Namespace, models: list[str], startup_s: float | None = None
) -> RunRequest:
    """What `run`'s flags ask for, as the engine takes it (`--until-decided`'s too)."""
    return RunRequest(
        spec=args.spec,
        models=models,
        model=args.model,
        base_url=args.base_url,
        repeats=args.repeats,
        results_root=args.results,
        cache=args.cache,
        read_cache=not args.no_cache,
        backend=args.backend,
        concurrency=args.concurrency,
        max_concurrency=args.max_concurrency,
        workers=args.workers,
        ray_address=args.ray_address,
        exec_cache=not args.no_exec_cache,
        batch=args.batch,
        batch_options=BatchOptions.from_settings(
            replace(cli_settings(), batch_timeout_s=args.batch_timeout),
            notify=_note,
            resume_hint=f"run the same command again to resume them "
            f"(`gradetrail batches --cache {cache_where(args)}` lists them)",
        ),
        max_cost=args.max_cost,
        startup_s=startup_s,
        names=FLAGS,
    )


def run_command(args: argparse.Namespace) -> int:
    until_decided.check(args)
    if args.until_decided and args.json:
        raise UsageError("--json is not for --until-decided (its decision is in the manifests)")
    if args.until_decided:
        request = request_of(args, until_decided.new_models(args))
        return until_decided.until_decided_command(args, request)
    # Python's start-up, the imports and the argument parsing, before any of this.
    startup_s = since_start()
    folder = args.spec.is_dir()
    request = request_of(args, _models_flag(args), startup_s)
    hooks = Collected(folder) if args.json else Printed(folder)
    specs = run_request(request, hooks)
    # A spec's status: 0 when any of its models scored a sample, else (or aborted) 1.
    exits = [
        EXIT_OK if not s.aborted and any(r.summary.any_scored for r in s.runs) else EXIT_FAILED
        for s in specs
    ]
    worst = max(exits)
    if isinstance(hooks, Collected):
        print(json.dumps({"runs": hooks.runs, "exit_status": worst}, indent=2))
    elif folder:
        each = ", ".join(
            f"{s.planned.loaded.spec.name} {code}" for s, code in zip(specs, exits, strict=True)
        )
        print(f"Specs: {len(specs)}; exit status {worst}, the worst of ({each})")
    return worst


class Printed(RunHooks):
    """The CLI's voice as a run goes: a progress bar per model, its summary after it, and
    of a folder each spec named, the skipped ones said, and a spec that aborts told on
    stderr while the others run."""

    def __init__(self, folder: bool) -> None:
        self.folder = folder

    def skipped(self, path: Path, model: str) -> None:
        print(f"Skipped: {path} (spec has no model {model!r})")

    def spec_starts(self, planned: PlannedSpec) -> None:
        if self.folder:
            print(f"Spec: {planned.loaded.spec.name} ({planned.loaded.path})")

    def progress(self, label: str) -> Progress:
        return ProgressBar(label)

    def model_done(self, done: CompletedRun) -> None:
        print(f"Run: {done.manifest.spec.name}/{done.manifest.model.requested} -> {done.run_dir}")
        # The whole command's, from the process's start to the last byte written.
        print(format_summary(done.totals, done.summary, since_start()))
        for line in summary_lines(done.run_dir):
            print(line)
        for warning in done.manifest.warnings:
            print(f"Warning: {warning}")

    def spec_aborted(self, planned: PlannedSpec, error: RunAborted) -> None:
        if not self.folder:
            raise error
        print(f"error: {planned.loaded.spec.name}: {error}", file=sys.stderr)


class Collected(Printed):
    """`--json`: each model's summary kept for one JSON document at the end, and nothing
    else on stdout (a spec that aborts is still told on stderr)."""

    def __init__(self, folder: bool) -> None:
        super().__init__(folder)
        self.runs: list[dict[str, Any]] = []

    def skipped(self, path: Path, model: str) -> None:
        pass

    def spec_starts(self, planned: PlannedSpec) -> None:
        pass

    def model_done(self, done: CompletedRun) -> None:
        manifest = done.manifest
        self.runs.append(
            {
                "spec": manifest.spec.name,
                "model": manifest.model.requested,
                "identity": manifest.identity,
                "run_dir": str(done.run_dir),
                "summary": done.summary.to_json(),
                "warnings": list(manifest.warnings),
            }
        )


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
    spec may list it). `--base-url` without them is the engine's rule to refuse."""
    wanted = [m.strip() for m in (args.models or "").split(",") if m.strip()]
    if args.models is not None and not wanted:
        raise UsageError("--models: give provider/name[,provider/name...]")
    for text in wanted:
        split_model(text)
    return wanted
