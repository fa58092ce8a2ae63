"""`gradetrail view [RESULTS_ROOT] [--port 8765] [--labels]`: serve the read-only results
viewer on 127.0.0.1; `--labels` adds the labelling queue and label forms, which write
`<results>/.labels.jsonl` and nothing else. Starlette and uvicorn are imported only when
the command runs."""

import argparse
import contextlib
import sys
from pathlib import Path

from gradetrail_lib.errors import UsageError
from gradetrail_lib.history.store import open_history
from gradetrail_lib.labels.store import default_labeller
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
    parser.add_argument(
        "--labels",
        action="store_true",
        help="also label samples pass/fail (a labelling queue, and buttons on the sample "
        "and failures pages), written to RESULTS_ROOT/.labels.jsonl",
    )
    parser.add_argument(
        "--labeller",
        default=None,
        help="the name recorded with each label (default: your login name)",
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
    labeller = args.labeller or default_labeller()
    if args.labeller is not None and not args.labeller.strip():
        raise UsageError("--labeller must not be empty")
    mode = f"labelling as {labeller!r}" if args.labels else "read-only"
    # The history plots read the shared store when there is one (GRADETRAIL_STORE, or the
    # cache's URL); the run directories always come from the root.
    settings = cli_settings()
    history = open_history(root, store=settings.store, cache=settings.database)

    def ready(url: str) -> None:
        print(f"Viewing {root} at {url} ({mode}; Ctrl-C to stop)", flush=True)

    with contextlib.suppress(KeyboardInterrupt):  # uvicorn stops on Ctrl-C by itself
        serve(
            root, args.host, args.port, on_ready=ready, labels=args.labels, labeller=labeller,
            history=history,
        )  # fmt: skip
    print("viewer stopped", file=sys.stderr)
    return EXIT_OK
