"""`gradetrail retrieval RUN...`: precision@k, recall@k, MRR and citation faithfulness
per run (model), each with its n (definitions in gradetrail_lib.analysis.retrieval)."""

import argparse
import json
import re
from pathlib import Path

from gradetrail_lib.analysis.retrieval import DEFAULT_CITATION_PATTERN, DEFAULT_K, citation_pattern
from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.commands.options import add_pass_threshold, confidence_level, positive_int
from gradetrail_lib.errors import UsageError

EXIT_OK = 0


def pattern_argument(text: str) -> re.Pattern[str]:
    try:
        return citation_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "retrieval",
        help="retrieval metrics (precision@k, recall@k, MRR) and citation faithfulness per run",
    )
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN")
    parser.add_argument(
        "--k", type=positive_int, default=DEFAULT_K, help=f"the cut-off (default {DEFAULT_K})"
    )
    parser.add_argument(
        "--citation-pattern",
        type=pattern_argument,
        default=DEFAULT_CITATION_PATTERN,
        metavar="REGEX",
        help="how an answer cites a document: a regular expression whose one group is the id "
        f"(default {DEFAULT_CITATION_PATTERN}, i.e. [doc:ID])",
    )
    parser.add_argument(
        "--support-scorer",
        metavar="NAME",
        default=None,
        help="a scorer (a judge) whose verdict on a record applies to every retrieved "
        "document its answer cites: supported when its score is at least --pass-threshold",
    )
    parser.add_argument(
        "--confidence",
        type=confidence_level,
        default=DEFAULT_CONFIDENCE,
        help=f"confidence level of every interval (default {DEFAULT_CONFIDENCE})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_pass_threshold(parser)
    parser.set_defaults(handler=retrieval_command)


def retrieval_command(args: argparse.Namespace) -> int:
    from gradetrail_lib.analysis.retrieval import format_figures, retrieval_figures
    from gradetrail_lib.results.runs import distinct_labels, load_runs

    pattern = args.citation_pattern  # compiled (argparse applies `type` to the default too)
    runs = load_runs(args.runs)
    if args.support_scorer is not None:
        for run in runs:
            try:
                run.manifest.scorer(args.support_scorer)
            except KeyError as exc:
                raise UsageError(f"--support-scorer: {exc.args[0]}") from exc
    results = []
    for label, run in zip(distinct_labels(runs), runs, strict=True):
        figures = retrieval_figures(
            iter(run),
            args.k,
            pattern,
            support_scorer=args.support_scorer,
            threshold=args.pass_threshold,
            confidence=args.confidence,
        )
        results.append((label, run, figures))
    if args.json:
        entries = [
            {"run": label, "path": str(run.path), **figures.to_json()}
            for label, run, figures in results
        ]
        print(json.dumps(entries, indent=2))
    else:
        print("\n\n".join(format_figures(lbl, f, pattern.pattern) for lbl, _, f in results))
    return EXIT_OK
