"""`gradetrail bundle export RUN_DIR... -o FILE [--cache PATH|URL]`: every answer those
runs' records reference (targets', judges', agents' steps), out of the cache into one
Parquet file with its manifest (the cache the runs' manifests record unless `--cache`
names another); `gradetrail bundle import FILE [--cache PATH|URL]`: the
file verified, then its answers added to a cache (DuckDB or Postgres) that lacks them
(gradetrail_lib.cache.bundle)."""

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gradetrail_lib.cache.bundle import (
    BundleManifest,
    check_destination,
    export_bundle,
    import_bundle,
)
from gradetrail_lib.cache.location import existing_cache, parse_location
from gradetrail_lib.commands.options import add_cache_option
from gradetrail_lib.errors import UsageError
from gradetrail_lib.results.runs import Run, load_run
from gradetrail_lib.settings import DEFAULTS, cli_settings

if TYPE_CHECKING:
    from gradetrail_lib.cache.postgres import PostgresCache
    from gradetrail_lib.cache.responses import ResponseCache

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
    exporting.add_argument(
        "--cache",
        default=None,
        metavar="PATH|URL",
        help="the cache the answers are read from: a DuckDB file or a postgresql://user@host/db "
        "URL (default: the cache the runs' manifests record, else GRADETRAIL_CACHE or "
        f"{DEFAULTS.database})",
    )
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


def recorded_cache(runs: Sequence[Run]) -> tuple[str, Run] | None:
    """The cache the runs' manifests record (with the first run that records it), or
    None when none does (made with `--no-cache`, or before runs recorded their cache).
    Runs that record different caches are refused: one bundle is read from one cache."""
    found: dict[str, Run] = {}
    for run in runs:
        if run.manifest.cache is not None:
            found.setdefault(run.manifest.cache, run)
    if len(found) > 1:
        named = "; ".join(f"{parse_location(c).where} ({r.path})" for c, r in found.items())
        raise UsageError(
            f"the runs were made with different caches: {named}; export each cache's runs "
            "apart, or name the one cache that holds every answer with --cache"
        )
    return next(iter(found.items()), None)


def export_cache(given: str | None, runs: Sequence[Run]) -> "ResponseCache | PostgresCache":
    """The cache an export reads: `--cache`, else the one the runs recorded, else
    GRADETRAIL_CACHE or the default file. One that is not there is an error naming it
    and where it came from; nothing is created for it."""
    recorded = None if given is not None else recorded_cache(runs)
    if given is not None:
        text, source = given, ""
    elif recorded is not None:
        text, source = recorded[0], f" (the cache run {recorded[1].path} was made with)"
    else:
        text = cli_settings().database
        source = " (no run names its cache: made with --no-cache, or before runs recorded it)"
    location = parse_location(text)
    cache = existing_cache(text)
    if cache is None:  # nothing is created for a mistyped path
        hint = "" if given is not None else "; name the cache that holds its answers with --cache"
        raise UsageError(f"{location.where}: no cache file here{source}{hint}")
    return cache


def export_command(args: argparse.Namespace) -> int:
    check_destination(args.output)  # before reading anything: a typo fails at once
    runs = [load_run(path) for path in dict.fromkeys(args.runs)]
    cache = export_cache(args.cache, runs)
    manifest = export_bundle(runs, cache, args.output, cache.where)
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
