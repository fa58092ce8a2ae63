"""`gradetrail report RUN...`: write the self-contained HTML report."""

import argparse
from pathlib import Path

from gradetrail_lib.commands.options import add_stats_options
from gradetrail_lib.report.html import write_report

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "report", help="write one self-contained HTML report for run directories of one identity"
    )
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN")
    parser.add_argument(
        "--output", type=Path, default=None, help="where to write (default RUN/report.html)"
    )
    add_stats_options(parser)
    parser.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace) -> int:
    path = write_report(
        args.runs,
        args.output,
        threshold=args.pass_threshold,
        confidence=args.confidence,
        method=args.method,
    )
    print(f"Report: {path}")
    return EXIT_OK
