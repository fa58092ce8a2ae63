"""`gradetrail bundle export RUN_DIR... -o FILE [--cache PATH|URL]`: every answer those
runs' records reference (targets', judges', agents' steps), out of the cache into one
Parquet file with its manifest; `gradetrail bundle import FILE [--cache PATH|URL]`: the
file verified, then its answers added to a cache (DuckDB or Postgres) that lacks them
(gradetrail_lib.cache.bundle)."""

import argparse
from pathlib import Path

from gradetrail_lib.cache.bundle import (
    BundleManifest,
    check_destination,
    export_bundle,
    import_bundle,
)
from gradetrail_lib.cache.location import existing_cache, parse_location
from gradetrail_lib.commands.options import add_cache_option
from gradetrail_lib.errors import UsageError
from gradetrail_lib.results.runs import load_run

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "bundle",
        help="move the answers runs reference to another cache: export them to a Parquet "
        "file, import one",
    )
    actions = parser.add_subparsers(dest="bundle_action", required=True)
    exporting = actions.add_parser(
        "export", help="write every answer the runs' records reference to one Parquet file"
    )
    exporting.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    exporting.add_argument(
        "-o", "--output", type=Path, required=True, metavar="FILE", help="the bundle to write"
    )
    add_cache_option(exporting, "the cache the answers are read from")
    exporting.set_defaults(handler=export_command)
    importing = actions.add_parser(
        "import", help="verify a bundle, then add its answers to a cache (keys it has: skipped)"
    )
    importing.add_argument("file", type=Path, metavar="FILE")
    add_cache_option(importing, "the cache the answers are added to")
    importing.set_defaults(handler=import_command)


def _kinds(manifest: BundleManifest) -> str:
    kinds = manifest.kinds
    return f"{kinds['target']} target, {kinds['judge']} judge, {kinds['agent_step']} agent step"


def export_command(args: argparse.Namespace) -> int:
    check_destination(args.output)  # before reading anything: a typo fails at once
    runs = [load_run(path) for path in dict.fromkeys(args.runs)]
    location = parse_location(args.cache)
    cache = existing_cache(args.cache)
    if cache is None:  # nothing is created for a mistyped path
        raise UsageError(f"{location.where}: no cache file here")
    manifest = export_bundle(runs, cache, args.output, location.where)
    size = args.output.stat().st_size
    print(
        f"{manifest.responses} answer(s) ({_kinds(manifest)}) of {len(runs)} run(s) "
        f"-> {args.output} ({size:,} bytes)"
    )
    return EXIT_OK


def import_command(args: argparse.Namespace) -> int:
    done = import_bundle(args.file, args.cache)
    manifest = done.manifest
    runs = ", ".join(f"{r.spec}/{r.model} {r.identity[:12]}" for r in manifest.runs)
    print(
        f"{args.file}: {manifest.responses} answer(s) ({_kinds(manifest)}) of "
        f"{len(manifest.runs)} run(s) verified ({runs}); {done.added} added to {done.where}, "
        f"{done.held} already there"
    )
    return EXIT_OK
