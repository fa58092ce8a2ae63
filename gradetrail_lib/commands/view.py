"""`gradetrail view [RESULTS_ROOT] [--port 8765]`: serve the read-only results viewer on
127.0.0.1. Starlette and uvicorn are imported only when the command runs."""

import argparse
import contextlib
import sys
from pathlib import Path

from gradetrail_lib.errors import UsageError
from gradetrail_lib.settings import DEFAULTS, cli_settings

EXIT_OK = 0
DEFAULT_PORT = 8765


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "view",
        help="serve a read-only web viewer of the runs under a results root, on 127.0.0.1",
    )
    parser.add_argument(
        "root",
        type=Path,
        nargs="?",
        default=cli_settings().results,
        metavar="RESULTS_ROOT",
        help="where the run directories are "
        f"(env GRADETRAIL_RESULTS; default ./{DEFAULTS.results})",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free one"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="loopback only (the default, 127.0.0.1): any other address is refused",
    )
    parser.set_defaults(handler=view_command)


def view_command(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {args.port}")
    root: Path = args.root
    if not root.is_dir():
        raise UsageError(f"{root}: no such directory (run a spec first, or name the root)")
    from gradetrail_lib.viewer.app import check_loopback, serve

    check_loopback(args.host)

    def ready(url: str) -> None:
        print(f"Viewing {root} at {url} (read-only; Ctrl-C to stop)", flush=True)

    with contextlib.suppress(KeyboardInterrupt):  # uvicorn stops on Ctrl-C by itself
        serve(root, args.host, args.port, on_ready=ready)
    print("viewer stopped", file=sys.stderr)
    return EXIT_OK
