"""`gradetrail batches [--cache PATH]`: the provider batches recorded in a cache file,
with their state; `gradetrail batches cancel ID`: cancels one (what it answered before
the cancel is read by the next run; the rest is sent again)."""

import argparse
import sys
from datetime import UTC, datetime

from gradetrail_lib.backends.batch import cancel_batch
from gradetrail_lib.cache.batches import BatchRecord, BatchStore
from gradetrail_lib.cache.location import existing_cache
from gradetrail_lib.commands.options import add_cache_option
from gradetrail_lib.errors import UsageError

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "batches", help="the provider batches recorded in the cache (run --batch), or cancel one"
    )
    add_cache_option(parser, "the cache the batches are recorded in")
    parser.set_defaults(handler=list_command)
    actions = parser.add_subparsers(dest="action")
    cancel = actions.add_parser("cancel", help="cancel a recorded batch by its id")
    cancel.add_argument("batch_id", metavar="ID", help="the provider's batch id")
    add_cache_option(cancel, "the cache the batches are recorded in")
    cancel.set_defaults(handler=cancel_command)


def _store(location: str) -> BatchStore:
    cache = existing_cache(location)
    if cache is None:  # nothing is created for a mistyped path
        raise UsageError(f"{location}: no cache file here")
    return cache.batch_store()


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_batches(records: list[BatchRecord]) -> str:
    if not records:
        return "No batches recorded."
    lines = [
        f"{'batch':<34} {'model':<32} {'state':<10} {'done/total':>11} {'failed':>6}  claimed (UTC)"
    ]
    for r in records:
        batch = r.batch_id or f"({r.submission[:20]}…)"
        model = f"{r.provider}/{r.model}"
        lines.append(
            f"{batch:<34} {model:<32} {r.state:<10} {f'{r.done}/{r.total}':>11} "
            f"{r.failed:>6}  {_when(r.claimed_at)}"
        )
    return "\n".join(lines)


def list_command(args: argparse.Namespace) -> int:
    print(format_batches(_store(args.cache).all()))
    return EXIT_OK


def cancel_command(args: argparse.Namespace) -> int:
    status = cancel_batch(_store(args.cache), args.batch_id)
    print(
        f"batch {status.batch_id}: cancel requested ({status.provider_state}); "
        "the next run reads what it answered and sends the rest again",
        file=sys.stdout,
    )
    return EXIT_OK
