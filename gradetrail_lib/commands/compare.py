"""`gradetrail compare RUN_A RUN_B`: a paired comparison of two result sets."""

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from gradetrail_lib.commands.options import add_stats_options
from gradetrail_lib.runs import distinct_labels, load_run
from gradetrail_lib.stats import check_comparable, compare

if TYPE_CHECKING:
    from gradetrail_lib.stats import PairedComparison

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "compare", help="paired comparison of two run directories (McNemar, paired bootstrap)"
    )
    parser.add_argument("run_a", type=Path, metavar="RUN_A")
    parser.add_argument("run_b", type=Path, metavar="RUN_B")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--force", action="store_true", help="compare even if scorer or dataset hashes differ"
    )
    add_stats_options(parser)
    parser.set_defaults(handler=compare_command)


def compare_command(args: argparse.Namespace) -> int:
    runs = [load_run(args.run_a), load_run(args.run_b)]
    a_label, b_label = distinct_labels(runs)
    labels = (a_label, b_label)
    notes = check_comparable(runs[0].manifest, runs[1].manifest, force=args.force, labels=labels)
    result = compare(
        runs[0].rows,
        runs[1].rows,
        labels=labels,
        threshold=args.pass_threshold,
        confidence=args.confidence,
        method=args.method,
        notes=notes,
    )
    if args.json:
        payload = {"run_a": str(args.run_a), "run_b": str(args.run_b), **result.to_json()}
        print(json.dumps(payload, indent=2))
    else:
        print(format_comparison(result))
    return EXIT_OK


def format_comparison(c: "PairedComparison") -> str:
    from gradetrail_lib.stats.run_stats import percent

    level = percent(c.confidence)
    ci = c.difference.interval
    assert c.difference.value is not None and ci is not None
    rows = [
        ("", f"A: {c.label_a}", f"B: {c.label_b}"),
        ("n", str(c.n), str(c.n)),
        (f"pass rate [{level} CI]", c.pass_rate_a.format(), c.pass_rate_b.format()),
        ("mean score", f"{c.mean_a:.3f}", f"{c.mean_b:.3f}"),
        ("unscored (as failures)", str(c.unscored_a), str(c.unscored_b)),
    ]
    width = max(len(a) for _, a, _ in rows) + 3
    lines = [
        f"Paired comparison on {c.n} samples (joined on sample id; "
        f"pass = score >= {c.threshold:g}; unscored samples fail with score 0)",
        *(f"{name:<24}{a:<{width}}{b}" for name, a, b in rows),
        "",
        f"Difference B - A (mean score): {c.difference.value:+.3f} {ci.format()} "
        f"({level} paired {ci.method}, n={c.n})",
        f"Pass/fail pairs: both pass {c.both_pass}, both fail {c.both_fail}, "
        f"A only {c.a_only}, B only {c.b_only}",
        f"Exact McNemar p: {c.mcnemar_p:.4g} ({c.a_only + c.b_only} discordant pairs)",
        f"Verdict: {c.verdict}"
        + (
            f" ({c.winner_label()} is better)"
            if c.verdict != "no winner"
            else " (the interval on the difference contains zero)"
        ),
    ]
    lines += [f"Note: {n}" for n in c.notes]
    return "\n".join(lines)
