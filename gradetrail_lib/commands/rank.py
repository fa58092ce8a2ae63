"""`gradetrail rank RUN_DIR...`: K runs on the same samples ranked on one scorer (the
first run's primary by default), with the family-wise error held: every pair tested as
`compare` tests it, Holm's adjustment over the pairs, a simultaneous rank interval per
model and tiers of models that cannot be told apart (`analysis.stats.ranking`)."""

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gradetrail_lib.analysis.pairwise import rank_runs
from gradetrail_lib.analysis.stats.clusters import cluster_proportion, group_by
from gradetrail_lib.analysis.stats.defaults import ProportionMethod
from gradetrail_lib.analysis.stats.intervals import Estimate
from gradetrail_lib.analysis.stats.ranking import HOLM, RANK_INTERVAL, Ranking
from gradetrail_lib.analysis.stats.run_stats import percent
from gradetrail_lib.commands.options import add_stats_options
from gradetrail_lib.errors import UsageError
from gradetrail_lib.results.runs import Run, distinct_labels, load_run

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "rank",
        help="rank several run directories on one scorer: rank intervals and tiers that "
        "hold a family-wise error rate (paired tests, Holm's adjustment)",
    )
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR", help="two or more")
    parser.add_argument(
        "--scorer", metavar="NAME", default=None, help="default: the first run's primary scorer"
    )
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")
    parser.add_argument(
        "--force", action="store_true", help="rank even if scorer or dataset hashes differ"
    )
    add_stats_options(parser)
    parser.set_defaults(handler=rank_command)


def rank_command(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        raise UsageError("rank: give two or more run directories")
    runs = [load_run(p) for p in args.runs]
    labels = distinct_labels(runs)
    scorer = args.scorer or runs[0].manifest.primary_scorer
    # Refused (exit 2) unless --force, as `compare` refuses a pair.
    ranking, notes = rank_runs(
        list(zip(labels, runs, strict=True)), scorer, force=args.force,
        threshold=args.pass_threshold, confidence=args.confidence,
    )  # fmt: skip
    rates = {
        label: pass_rate(run, scorer, args.pass_threshold, args.confidence, args.method)
        for run, label in zip(runs, labels, strict=True)
    }
    if args.json:
        body = ranking_json(ranking, rates)
        body["runs"] = {label: str(p) for label, p in zip(labels, args.runs, strict=True)}
        body["notes"] = notes
        print(json.dumps(body, indent=2))
        return EXIT_OK
    print(format_ranking(ranking, rates))
    for note in notes:
        print(f"Note: {note}")
    return EXIT_OK


def pass_rate(
    run: Run, scorer: str, threshold: float, confidence: float, method: ProportionMethod
) -> Estimate:
    """The run's pass rate on `scorer` with its interval (cases as units with repeats)."""
    sheet = run.sheet(scorer)
    cases = group_by(range(len(sheet)), lambda i: sheet.ids[i])
    passes = [[sheet.scores[i] >= threshold for i in case] for case in cases]
    return cluster_proportion(passes, confidence, method)


def ranking_json(ranking: Ranking, rates: dict[str, Estimate]) -> dict[str, Any]:
    body = ranking.to_json()
    for model in body["models"]:
        model["pass_rate"] = rates[model["model"]].to_json()
    return body


def format_ranking(ranking: Ranking, rates: dict[str, Estimate]) -> str:
    cases = f" of {ranking.cases} cases" if ranking.cases < ranking.n else ""
    level = percent(ranking.confidence)
    lines = [
        f"Ranking on {ranking.scorer} of {len(ranking.models)} runs on the same {ranking.n} "
        f"samples{cases}: {ranking.method_text()}.",
        f"With {level} confidence every model's true rank lies in its rank interval at "
        "once (1 = best; models with the same mean share a rank); models of one tier are "
        "not told apart.",
        "",
    ]
    table = [
        (
            "tier",
            f"rank interval ({RANK_INTERVAL})",
            "model",
            "mean (unscored as 0)",
            f"pass rate [{level} CI]",
        ),
    ]
    for m in ranking.models:
        table.append(
            (str(m.tier), m.interval_text(), m.label, f"{m.mean:.3f}", _rate(rates[m.label]))
        )
    lines += _table(table)
    lines += ["", "Pairs (difference B - A of mean scores; p adjusted by Holm's step-down):"]
    pairs = [("A", "B", "difference", "paired test p", f"adjusted p ({HOLM})", "separated")]
    for p in ranking.pairs:
        pairs.append(
            (
                p.a,
                p.b,
                f"{p.difference:+.3f}",
                f"{p.p_value:.4g} ({p.test})",
                f"{p.adjusted_p:.4g}",
                f"{p.separated} is better" if p.separated else "no",
            )
        )
    lines += _table(pairs)
    return "\n".join(lines)


def _rate(rate: Estimate) -> str:
    method = f" ({rate.interval.method})" if rate.interval else ""
    return rate.format() + method


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(f"{v:<{w}}" for v, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
