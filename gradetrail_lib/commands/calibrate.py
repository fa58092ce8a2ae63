"""`gradetrail calibrate RUN_DIR`: each judge scorer measured against the human labels on
the run's responses (gradetrail_lib.analysis.calibration)."""

import argparse
import json
from pathlib import Path

from gradetrail_lib.analysis.calibration import (
    DEFAULT_TARGET_WIDTH,
    calibrate_run,
    format_calibration,
    judge_scorers,
)
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.commands.options import add_pass_threshold, confidence_level, fraction
from gradetrail_lib.errors import UsageError
from gradetrail_lib.labels.store import labels_path
from gradetrail_lib.results.runs import load_run

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "calibrate",
        help="a judge's agreement with human labels (kappa, sensitivity, specificity) and "
        "the pass rate corrected for its errors",
    )
    parser.add_argument("run", type=Path, metavar="RUN_DIR")
    parser.add_argument("--scorer", default=None, metavar="NAME", help="one judge scorer only")
    parser.add_argument(
        "--target-width",
        type=fraction,
        default=DEFAULT_TARGET_WIDTH,
        help="the corrected interval's width to count labels for "
        f"(default {DEFAULT_TARGET_WIDTH:g})",
    )
    parser.add_argument(
        "--confidence",
        type=confidence_level,
        default=DEFAULT_CONFIDENCE,
        help=f"confidence level of every interval (default {DEFAULT_CONFIDENCE})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_pass_threshold(parser)
    parser.set_defaults(handler=calibrate_command)


def calibrate_command(args: argparse.Namespace) -> int:
    run = load_run(args.run)
    judges = judge_scorers(args.run)
    if args.scorer is not None:
        if args.scorer not in run.manifest.scorer_names:
            raise UsageError(
                f"--scorer: no scorer {args.scorer!r} in this run "
                f"(scorers: {', '.join(run.manifest.scorer_names)})"
            )
        judges = [args.scorer]
    if not judges:
        raise UsageError(f"{run.label} has no judge scorer to calibrate")
    results = calibrate_run(
        args.run,
        scorers=judges,
        threshold=args.pass_threshold,
        confidence=args.confidence,
        target_width=args.target_width,
    )
    if not results:
        raise UsageError(
            f"no label in {labels_path(args.run.resolve().parent)} matches a response of "
            f"{run.label} (judges: {', '.join(judges)}); attach some with "
            "`gradetrail labels import FILE --run RUN_DIR`"
        )
    if args.json:
        print(json.dumps({c.scorer: c.to_json() for c in results}, indent=2))
    else:
        print("\n\n".join(format_calibration(c) for c in results))
    return EXIT_OK
