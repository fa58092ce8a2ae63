"""`gradetrail list [ROOT]`: the run history, newest first (`gradetrail_lib.history.entries`).

One line per completed run: finish time (UTC), spec/model, identity prefix, the primary
scorer's pass rate with its interval and n, git SHA (`+dirty` for a dirty tree) and the
run directory, marked `(replaced)` or `(gone)` when it no longer holds that run, or, from
a shared store (`GRADETRAIL_STORE`, or the cache's URL), `(elsewhere: host:/root/dir)`
when another machine or results root wrote it.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gradetrail_lib.errors import InputError
from gradetrail_lib.history.entries import (
    DirectoryState,
    HistoryEntry,
    elsewhere,
    newest_first,
    select,
)
from gradetrail_lib.history.store import open_history
from gradetrail_lib.settings import DEFAULTS, cli_settings


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("list", help="the run history, newest first")
    parser.add_argument(
        "root",
        nargs="?",
        type=Path,
        default=cli_settings().results,
        metavar="ROOT",
        help=f"the results root (env GRADETRAIL_RESULTS; default ./{DEFAULTS.results})",
    )
    parser.add_argument("--spec", default=None, help="only runs of this spec")
    parser.add_argument("--model", default=None, help="only runs of this model")
    parser.add_argument("--json", action="store_true", help="print the entries as JSON")
    parser.set_defaults(handler=list_command)


def list_command(args: argparse.Namespace) -> int:
    root: Path = args.root
    if not root.is_dir():
        raise InputError(str(root), None, None, "not a results root (no such directory)")
    settings = cli_settings()
    store = open_history(root, store=settings.store, cache=settings.database)
    entries = newest_first(select(store.read(), spec=args.spec, model=args.model))
    state = DirectoryState(root)
    if args.json:
        print(json.dumps([_json(e, root, state) for e in entries], indent=2))
        return 0
    if not entries:
        which = " matching" if args.spec or args.model else ""
        print(f"no{which} runs recorded in {store.where}", file=sys.stderr)
        return 0
    for entry in entries:
        print(_line(entry, state))
    return 0


def _state(entry: HistoryEntry, state: DirectoryState) -> str:
    """`current`, `replaced` (a later run of the identity is there), `gone`, or
    `elsewhere` (written on another machine or under another root)."""
    return state.state_of(entry)


def _line(entry: HistoryEntry, state: DirectoryState) -> str:
    when = entry.finished.strftime("%Y-%m-%d %H:%M:%SZ")
    git = (entry.git_sha or "no-git")[:10] + ("+dirty" if entry.git_dirty else "")
    where = _state(entry, state)
    mark = "" if where == "current" else f" ({where})"
    if where == "elsewhere":
        mark = f" (elsewhere: {elsewhere(entry)})"
    rate = entry.pass_rate.describe()
    return (
        f"{when}  {entry.label}  {entry.identity[:12]}  {entry.primary_scorer} pass {rate}  "
        f"git {git}  {entry.run_dir}{mark}"
    )


def _json(entry: HistoryEntry, root: Path, state: DirectoryState) -> dict[str, Any]:
    # `origin` only from a shared store: the file's entries print as ever.
    origin = {"origin": entry.origin} if entry.origin is not None else {}
    return {**entry.model_dump(mode="json"), "path": str(root / entry.run_dir),
            "state": _state(entry, state), **origin}  # fmt: skip
