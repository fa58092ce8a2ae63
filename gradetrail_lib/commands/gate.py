"""`gradetrail gate RUN --baseline RUN`: exit 1 on a real regression, for CI."""

import argparse
import json
from pathlib import Path

from gradetrail_lib.commands.options import add_stats_options, non_negative
from gradetrail_lib.runs import distinct_labels, load_run
from gradetrail_lib.stats import check_comparable, compare, gate
from gradetrail_lib.stats_defaults import DEFAULT_GATE_THRESHOLD

EXIT_OK, EXIT_REGRESSION = 0, 1


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "gate",
        help="exit 1 when RUN is worse than the baseline by more than the threshold "
        "and the paired interval excludes zero",
    )
    parser.add_argument("run", type=Path, metavar="RUN", help="the candidate run directory")
    parser.add_argument("--baseline", type=Path, required=True, metavar="RUN")
    parser.add_argument(
        "--threshold",
        type=non_negative,
        default=DEFAULT_GATE_THRESHOLD,
        help=f"largest tolerated drop in mean score (default {DEFAULT_GATE_THRESHOLD})",
    )
    parser.add_argument(
        "--force", action="store_true", help="gate even if scorer or dataset hashes differ"
    )
    parser.add_argument("--json", action="store_true", help="print the decision as JSON")
    add_stats_options(parser)
    parser.set_defaults(handler=gate_command)


def gate_command(args: argparse.Namespace) -> int:
    baseline, candidate = load_run(args.baseline), load_run(args.run)
    labels_list = distinct_labels([baseline, candidate])
    labels = (f"baseline {labels_list[0]}", f"candidate {labels_list[1]}")
    notes = check_comparable(baseline.manifest, candidate.manifest, force=args.force, labels=labels)
    comparison = compare(
        baseline.rows,
        candidate.rows,
        labels=labels,
        threshold=args.pass_threshold,
        confidence=args.confidence,
        method=args.method,
        notes=notes,
    )
    decision = gate(comparison, args.threshold)
    if args.json:
        print(json.dumps(decision.to_json(), indent=2))
    else:
        print(decision.explanation)
    return EXIT_OK if decision.passed else EXIT_REGRESSION
