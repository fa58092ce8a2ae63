"""The `gradetrail` command."""

import argparse
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import gradetrail_lib
from gradetrail_lib.backends import Backend, LocalBackend
from gradetrail_lib.cache import ResponseCache
from gradetrail_lib.errors import GradetrailError, InputError, InputErrors, RunAborted
from gradetrail_lib.pipeline import default_cache_path, fetch_responses, plan, score_all
from gradetrail_lib.pricing import load_prices
from gradetrail_lib.rundir import build_manifest, write_run_dir
from gradetrail_lib.spec import load_spec
from gradetrail_lib.summary import format_summary, summarize

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class ProgressBar:
    """A one-line bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str, stream: TextIO = sys.stderr) -> None:
        self.label = label
        self.stream = stream
        self.enabled = stream.isatty()
        self._last_draw = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (done < total and now - self._last_draw < 0.1):
            return
        self._last_draw = now
        width = 30
        filled = width * done // total if total else width
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gradetrail", description=__doc__)
    parser.add_argument("--version", action="version", version=gradetrail_lib.__version__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run an eval spec")
    run.add_argument("spec", type=Path)
    run.add_argument("--model", help="run only this model of the spec")
    run.add_argument("--concurrency", type=int, default=8, help="requests in flight")
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
        help="response cache file (env GRADETRAIL_CACHE; default .gradetrail/cache.duckdb)",
    )
    run.add_argument(
        "--no-cache",
        action="store_true",
        help="do not read the cache (every request is sent); responses are still stored",
    )
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.concurrency < 1:
        raise GradetrailError("--concurrency must be at least 1")
    loaded = load_spec(args.spec)
    spec = loaded.spec
    models = [spec.model(args.model)] if args.model else list(spec.models)
    plans = [plan(loaded, m) for m in models]  # every error is found before any call
    cache = ResponseCache(args.cache or default_cache_path())
    backend: Backend = LocalBackend(concurrency=args.concurrency)
    prices = load_prices()
    any_scored = False
    for eval_plan in plans:
        started_at, started = datetime.now(UTC), time.perf_counter()
        label = f"{spec.name}/{eval_plan.model.name}"
        responses = fetch_responses(
            eval_plan, cache, backend, read_cache=not args.no_cache, progress=ProgressBar(label)
        )
        scoring_started = time.perf_counter()
        rows = score_all(eval_plan, responses, prices)
        summary = summarize(rows)
        wall = time.perf_counter() - started
        timings = {
            "responses": responses.wall_s,
            "scoring": time.perf_counter() - scoring_started,
            "total": wall,
        }
        manifest = build_manifest(
            eval_plan, responses, summary, backend.describe(), prices, timings, started_at
        )
        run_dir = write_run_dir(args.results, rows, manifest)
        any_scored = any_scored or summary.any_scored
        print(f"Run: {label} -> {run_dir}", file=out)
        print(format_summary(summary, wall), file=out)
        for warning in manifest["warnings"]:
            print(f"Warning: {warning}", file=out)
    return EXIT_OK if any_scored else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args, sys.stdout)
    except (InputError, InputErrors) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RunAborted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (GradetrailError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        print(f"error: {message}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, KeyError) else EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; responses received so far are cached", file=sys.stderr)
        return 130
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
