"""`gradetrail cost RUN...`: reprice every call from the versioned pricing data."""

import argparse
import json
from pathlib import Path

from gradetrail_lib.analysis.cost import format_cost, reprice
from gradetrail_lib.commands.options import add_pass_threshold
from gradetrail_lib.errors import GradetrailError, InputError
from gradetrail_lib.providers.pricing import DEFAULT_VERSION, load_prices
from gradetrail_lib.results.runs import load_runs

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "cost", help="reprice run directories: totals per model, cost per passing sample"
    )
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN")
    parser.add_argument(
        "--pricing-version",
        default=DEFAULT_VERSION,
        help=f"pricing data version (default {DEFAULT_VERSION})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_pass_threshold(parser)
    parser.set_defaults(handler=cost_command)


def cost_command(args: argparse.Namespace) -> int:
    runs = load_runs(args.runs)
    try:
        prices = load_prices(args.pricing_version)
    except GradetrailError as exc:  # a bad argument (exit 2), not a failed run
        raise InputError("--pricing-version", None, None, str(exc)) from exc
    report = reprice([(r.manifest, iter(r)) for r in runs], prices, threshold=args.pass_threshold)
    print(json.dumps(report.to_json(), indent=2) if args.json else format_cost(report))
    return EXIT_OK
