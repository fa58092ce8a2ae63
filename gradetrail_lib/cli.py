"""The `gradetrail` command: parses arguments, dispatches, maps errors to exit codes.

Exit codes: 0 success; 1 the run failed (nothing scored, aborted, a gate that fails, a
full disk or a spent quota: one line naming the file or folder, no traceback); 2 bad
input (a spec, dataset, run directory or argument), named by file, line and field, or two
runs that cannot be compared.
"""

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence

from gradetrail_lib._version import __version__
from gradetrail_lib.errors import (
    GradetrailError,
    InputError,
    InputErrors,
    NotComparable,
    RunAborted,
    UsageError,
    disk_full,
    disk_full_message,
)

EXIT_FAILED, EXIT_USAGE = 1, 2

# Each command and the module under gradetrail_lib.commands that registers it, in the
# order `--help` lists them.
COMMANDS = {
    "run": "run",
    "plan": "plan",
    "list": "list_runs",
    "compare": "compare",
    "rank": "rank",
    "gate": "gate",
    "cost": "cost",
    "report": "report",
    "retrieval": "retrieval",
    "calibrate": "calibrate",
    "labels": "labels",
    "view": "view",
    "batches": "batches",
    "bundle": "bundle",
    "catalog": "catalog",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Given the `argv` it will parse, only the command that
    names is registered, and only its module imported: all of them took a command's
    process about 0.7 s of imports before it started (`gradetrail view` needs 0.5 s, all
    of them 1.2 s); a command line naming none (`--help`, a typo) gets every command."""
    parser = argparse.ArgumentParser(
        prog="gradetrail", description="LLM evals as tests: cached, reproducible, defensible."
    )
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command", required=True)
    named = argv[0] if argv else None  # the top level's options take no value
    for name, module in COMMANDS.items():
        if named not in COMMANDS or name == named:
            importlib.import_module(f"gradetrail_lib.commands.{module}").register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    if argv is None:  # the process is this command's own, not a caller's (tests)
        _tune_gc()
    try:
        return int(args.handler(args))
    except (InputError, InputErrors, NotComparable, UsageError) as exc:
        # NotComparable is a usage error (wrong pair of runs, or --force needed), and
        # must not exit 1, which `gate` reserves for a regression.
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RunAborted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except GradetrailError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; the responses received so far are cached", file=sys.stderr)
        return 130
    except Exception as exc:
        # A full disk (ENOSPC, EDQUOT) anywhere, often as the context of the error that
        # closing a half-written file raised: the environment failed, not the input. A run
        # directory is staged and renamed into place, so the previous one is intact.
        full = disk_full(exc)
        if full is None:
            raise
        print(f"error: {disk_full_message(full, _destination(args))}", file=sys.stderr)
        return EXIT_FAILED


def _destination(args: argparse.Namespace) -> object | None:
    """Where the command writes (`run --results`, `report --output`), to name it when a
    write to an open file fails without naming the file."""
    return getattr(args, "results", None) or getattr(args, "output", None)


def _tune_gc() -> None:
    """The commands build a few objects per sample that form no reference cycles, and the
    default collector walks them again and again until they age out; the modules loaded
    so far are frozen out of every pass, and passes run less often (docs/performance.md
    has what this saves). Only the CLI's own process is tuned: library callers keep
    their collector as they set it."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


if __name__ == "__main__":
    sys.exit(main())
