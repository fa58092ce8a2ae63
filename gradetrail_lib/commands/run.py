"""`gradetrail run SPEC`: the whole pipeline for one spec, one run directory per model."""

import argparse
import os
import sys
import time
from pathlib import Path

from gradetrail_lib.backends import Backend, build_backend
from gradetrail_lib.cache import ResponseCache, default_cache_path
from gradetrail_lib.commands.progress import ProgressBar
from gradetrail_lib.pipeline import look_up, plan
from gradetrail_lib.run import run_model
from gradetrail_lib.spec import load_spec
from gradetrail_lib.summary import format_summary

EXIT_OK, EXIT_FAILED = 0, 1


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    run = commands.add_parser("run", help="run an eval spec")
    run.add_argument("spec", type=Path)
    run.add_argument("--model", help="run only this model of the spec")
    run.add_argument(
        "--repeats", type=int, default=None, help="run each sample N times (default: the spec's)"
    )
    run.add_argument(
        "--backend",
        default=os.environ.get("GRADETRAIL_BACKEND", "local"),
        help="where requests are sent from: local (this process) or ray "
        "(env GRADETRAIL_BACKEND; default local)",
    )
    run.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="requests in flight (with --backend ray: per worker)",
    )
    run.add_argument(
        "--workers", type=int, default=None, help="Ray worker actors (--backend ray; default 2)"
    )
    run.add_argument(
        "--ray-address",
        default=None,
        help="existing Ray cluster to use (env RAY_ADDRESS); default: start a local one",
    )
    run.add_argument(
        "--results",
        type=Path,
        default=Path(os.environ.get("GRADETRAIL_RESULTS", "results")),
        help="where run directories go (env GRADETRAIL_RESULTS; default ./results)",
    )
    run.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="response cache file (env GRADETRAIL_CACHE; default .gradetrail/gradetrail.duckdb)",
    )
    run.add_argument(
        "--no-cache",
        action="store_true",
        help="do not read the cache (every request is sent); responses are still stored",
    )
    run.set_defaults(handler=run_command)


def make_backend(args: argparse.Namespace) -> Backend:
    return build_backend(
        args.backend, concurrency=args.concurrency, workers=args.workers, address=args.ray_address
    )


def run_command(args: argparse.Namespace) -> int:
    out = sys.stdout
    loaded = load_spec(args.spec).with_repeats(args.repeats)
    spec = loaded.spec
    models = [spec.model_named(args.model)] if args.model else list(spec.models)
    plans = [plan(loaded, m) for m in models]  # every input error is found before any call
    backend = make_backend(args)
    cache = ResponseCache(args.cache or default_cache_path())
    found = [None if args.no_cache else look_up(p, cache) for p in plans]
    if any(f is None or not f.complete(p) for p, f in zip(plans, found, strict=True)):
        backend.prepare()
    any_scored = False
    with backend.session():  # one Ray cluster for all the models, not one each
        for eval_plan, looked_up in zip(plans, found, strict=True):
            started = time.perf_counter()
            label = f"{spec.name}/{eval_plan.model.name}"
            done = run_model(
                eval_plan,
                cache,
                backend,
                args.results,
                read_cache=not args.no_cache,
                looked_up=looked_up,
                progress=ProgressBar(label),
            )
            any_scored = any_scored or done.summary.any_scored
            print(f"Run: {label} -> {done.run_dir}", file=out)
            summary = format_summary(done.records, done.summary, time.perf_counter() - started)
            print(summary, file=out)
            for warning in done.manifest.warnings:
                print(f"Warning: {warning}", file=out)
    return EXIT_OK if any_scored else EXIT_FAILED
