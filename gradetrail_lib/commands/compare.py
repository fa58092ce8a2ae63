"""`gradetrail compare RUN_A RUN_B`: a paired comparison of two result sets, scorer by
scorer (every scorer the two runs share, primary first; `--scorer NAME` for one)."""

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradetrail_lib.analysis.stats import check_comparable, compare
from gradetrail_lib.analysis.stats.paired import MCNEMAR
from gradetrail_lib.commands.options import add_stats_options
from gradetrail_lib.commands.pairing import ScorerPair, dataset_differs, pick, scorer_pairs
from gradetrail_lib.errors import NotComparable, UsageError
from gradetrail_lib.results.runs import distinct_labels, load_run

if TYPE_CHECKING:
    from gradetrail_lib.analysis.calibration import CorrectedComparison
    from gradetrail_lib.analysis.stats import PairedComparison

EXIT_OK = 0


@dataclass(frozen=True)
class ScorerResult:
    """One scorer's comparison, or why there is none (`refused`)."""

    pair: ScorerPair
    comparison: "PairedComparison | None"
    refused: str | None

    def to_json(self) -> dict[str, Any]:
        head = {"scorer": self.pair.name, "role": self.pair.role or "secondary"}
        if self.comparison is None:
            return {**head, "compared": False, "reason": self.refused}
        return {**head, "compared": True, **self.comparison.to_json()}


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "compare",
        help="paired comparison of two run directories on every scorer they share "
        "(paired interval and test: exact McNemar, or a sign-flip test over cases with repeats)",
    )
    parser.add_argument("run_a", type=Path, metavar="RUN_A")
    parser.add_argument("run_b", type=Path, metavar="RUN_B")
    parser.add_argument(
        "--scorer", metavar="NAME", default=None, help="compare on this scorer only"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the result as JSON (a list per scorer)"
    )
    parser.add_argument(
        "--force", action="store_true", help="compare even if scorer or dataset hashes differ"
    )
    parser.add_argument(
        "--corrected",
        action="store_true",
        help="also compare each shared judge scorer's pass rate corrected by the human "
        "labels on each run (PPI++; `gradetrail calibrate`)",
    )
    add_stats_options(parser)
    parser.set_defaults(handler=compare_command)


def compare_command(args: argparse.Namespace) -> int:
    runs = [load_run(args.run_a), load_run(args.run_b)]
    a_label, b_label = distinct_labels(runs)
    labels = (a_label, b_label)
    a, b = runs[0].manifest, runs[1].manifest
    pairs = scorer_pairs(a, b, labels)
    if args.scorer is not None:
        pairs = [pick(pairs, args.scorer)]
    shared = [p for p in pairs if p.shared]
    if not shared:
        raise NotComparable(
            f"the runs share no scorer: A [{a_label}] has {', '.join(a.scorer_names)}; "
            f"B [{b_label}] has {', '.join(b.scorer_names)}"
        )
    if dataset_differs(a, b) and not args.force:
        # Every scorer would be refused for it: say so once, as check_comparable does.
        check_comparable(a, b, shared[0].name, labels=labels)
    results = []
    for pair in pairs:
        if not pair.shared:
            results.append(ScorerResult(pair, None, pair.only_in))
            continue
        try:
            notes = check_comparable(a, b, pair.name, force=args.force, labels=labels)
        except NotComparable as exc:
            if args.scorer is not None:
                raise
            results.append(ScorerResult(pair, None, str(exc)))
            continue
        comparison = compare(
            runs[0].sheet(pair.name),
            runs[1].sheet(pair.name),
            pair.name,
            labels=labels,
            threshold=args.pass_threshold,
            confidence=args.confidence,
            method=args.method,
            notes=notes,
        )
        results.append(ScorerResult(pair, comparison, None))
    if not any(r.comparison is not None for r in results):
        raise NotComparable("; ".join(str(r.refused) for r in results if r.pair.shared))
    corrected = _corrected(args, [p.name for p in shared]) if args.corrected else []
    if args.json:
        payload = {
            "run_a": str(args.run_a),
            "run_b": str(args.run_b),
            "a": a_label,
            "b": b_label,
            "scorers": [r.to_json() for r in results],
        }
        if args.corrected:
            payload["corrected"] = [c.to_json() for c in corrected]
        print(json.dumps(payload, indent=2))
    else:
        print(format_results(results, labels))
        if args.corrected:
            print("\n".join(["", *[c.format(labels) for c in corrected]]))
    return EXIT_OK


def _corrected(args: argparse.Namespace, shared: list[str]) -> "list[CorrectedComparison]":
    from gradetrail_lib.analysis.calibration import compare_corrected, judge_scorers

    judges = [name for name in shared if name in judge_scorers(args.run_a)]
    if not judges:
        raise UsageError("--corrected: the runs share no judge scorer")
    return [
        compare_corrected(
            args.run_a,
            args.run_b,
            name,
            threshold=args.pass_threshold,
            confidence=args.confidence,
        )
        for name in judges
    ]


def format_results(results: list[ScorerResult], labels: tuple[str, str]) -> str:
    """A table with a row per scorer, then each compared scorer's figures in full."""
    from gradetrail_lib.analysis.stats.run_stats import percent

    done = [r.comparison for r in results if r.comparison is not None]
    first = done[0]
    cases = f" of {first.cases} cases" if first.clustered else ""
    joined = "sample id and repeat; intervals resample cases" if first.clustered else "sample id"
    header = (
        f"Paired comparison of A: {labels[0]} and B: {labels[1]} on {first.n} samples{cases} "
        f"(joined on {joined}; pass = score >= {first.threshold:g}; unscored samples fail "
        f"with score 0; {percent(first.confidence)} intervals)"
    )
    columns = ("pass rate A", "pass rate B", "difference B - A", "paired test p", "verdict")
    table = [("scorer", *columns)]
    for r in results:
        c = r.comparison
        if c is None:
            table.append((r.pair.title, "not compared", "", "", "", ""))
            continue
        ci = c.difference.interval
        assert c.difference.value is not None and ci is not None
        table.append(
            (
                r.pair.title,
                c.pass_rate_a.format(),
                c.pass_rate_b.format(),
                f"{c.difference.value:+.3f} {ci.format()}",
                f"{c.p_value:.4g} ({c.test})",
                c.verdict if c.verdict == "no winner" else f"{c.verdict} ({c.winner_label()})",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [header, ""]
    lines += ["  ".join(f"{v:<{w}}" for v, w in zip(row, widths, strict=True)).rstrip()
              for row in table]  # fmt: skip
    for r in results:
        if r.comparison is None:
            lines.append(f"Not compared: {r.pair.name}: {r.refused}")
    for r in results:
        if r.comparison is not None:
            lines += ["", f"Scorer {r.pair.title}", format_comparison(r.comparison)]
    return "\n".join(lines)


def format_comparison(c: "PairedComparison") -> str:
    """One scorer's comparison in full."""
    from gradetrail_lib.analysis.stats.run_stats import percent

    level = percent(c.confidence)
    ci = c.difference.interval
    assert c.difference.value is not None and ci is not None
    rows = [
        ("", f"A: {c.label_a}", f"B: {c.label_b}"),
        ("n", str(c.n), str(c.n)),
        (f"pass rate [{level} CI]", c.pass_rate_a.format(), c.pass_rate_b.format()),
        (
            "mean score (of scored)",
            _mean(c.scored_mean_a, c.scored_a),
            _mean(c.scored_mean_b, c.scored_b),
        ),
        ("unscored (as failures)", str(c.unscored_a), str(c.unscored_b)),
    ]
    if c.clustered:
        rows.insert(2, ("cases", str(c.cases), str(c.cases)))
    width = max(len(a) for _, a, _ in rows) + 3
    lines = [
        *(f"  {name:<24}{a:<{width}}{b}".rstrip() for name, a, b in rows),
        f"  Difference B - A (mean score, unscored as 0): {c.difference.value:+.3f} "
        f"[{ci.low:.3f}, {ci.high:.3f}] ({level} paired {ci.method}, {c.difference.n_text})",
        *([f"  Warning: {ci.warning}"] if ci.warning else []),
        f"  Pass/fail pairs: both pass {c.both_pass}, both fail {c.both_fail}, "
        f"A only {c.a_only}, B only {c.b_only}",
        *_test_lines(c),
        f"  Verdict: {c.verdict}" + _verdict_reason(c),
    ]
    lines += [f"  Note: {n}" for n in c.notes]
    lines += [f"  {mde[0].upper()}{mde[1:]}" for mde in [c.mde_text()] if mde]
    return "\n".join(lines)


def _mean(value: float | None, scored: int) -> str:
    """The mean over the scored samples as the run's summary prints it, with its n."""
    return f"{'n/a' if value is None else f'{value:.4f}'} (n={scored})"


def _test_lines(c: "PairedComparison") -> list[str]:
    """McNemar's p where it is computed (no repeats), the paired test's where that is
    another test (the sign-flip test over cases or pairs)."""
    lines = []
    if c.mcnemar_p is not None:
        lines.append(
            f"  Exact McNemar p: {c.mcnemar_p:.4g} ({c.a_only + c.b_only} discordant pairs)"
        )
    if c.mcnemar_p is None or c.test != MCNEMAR:
        units = f"{c.cases} cases" if c.clustered else f"{c.n} pairs"
        lines.append(f"  Paired test ({c.test}, {units} as units): p = {c.p_value:.4g}")
    return lines


def _verdict_reason(c: "PairedComparison") -> str:
    if c.verdict != "no winner":
        return f" ({c.winner_label()} is better)"
    ci = c.difference.interval
    if ci is not None and (ci.low > 0 or ci.high < 0):
        return f" (the {c.test_label()} does not reject)"
    return " (the interval on the difference contains zero)"
