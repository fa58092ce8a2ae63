"""`gradetrail gate RUN --baseline RUN`: exit 1 on a real regression, for CI.

It gates one scorer (`--scorer NAME`, by default the candidate's primary scorer), or
each scorer the two runs share (`--all-scorers`), failing when any regresses. Runs that
cannot be compared on a gated scorer exit 2, never 1: a refusal is not a regression.

`--baseline previous` takes the baseline from the run history under the candidate's
results root (its parent directory; `gradetrail_lib.history.entries`): the most recent earlier
run of the same spec and model whose results differ from the candidate's and whose
directory still holds it. Which run it picked (and which it passed over) is printed
first (to stderr with `--json`, where the JSON says it too). With a shared store
(`GRADETRAIL_STORE`, or the cache's URL) the history holds every machine's runs; when the
run picked was written on another machine, the gate says where and exits 2.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gradetrail_lib.analysis.stats import GateDecision, check_comparable, compare, gate
from gradetrail_lib.analysis.stats.defaults import DEFAULT_GATE_THRESHOLD
from gradetrail_lib.commands.options import add_stats_options, non_negative
from gradetrail_lib.commands.pairing import ScorerPair, pick, scorer_pairs
from gradetrail_lib.errors import NotComparable, UsageError
from gradetrail_lib.history.entries import Baseline, previous_run
from gradetrail_lib.history.store import open_history
from gradetrail_lib.results.runs import Run, distinct_labels, load_run
from gradetrail_lib.settings import cli_settings
from gradetrail_lib.spec.identity import records_fingerprint

EXIT_OK, EXIT_REGRESSION = 0, 1


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "gate",
        help="exit 1 when RUN is worse than the baseline by more than the threshold "
        "and the paired interval excludes zero and the paired test rejects",
    )
    parser.add_argument("run", type=Path, metavar="RUN", help="the candidate run directory")
    parser.add_argument(
        "--baseline",
        required=True,
        metavar="RUN|previous",
        help="the baseline run directory, or `previous`: the most recent earlier run of the "
        "same spec and model (in the run history) whose results differ",
    )
    parser.add_argument(
        "--threshold",
        type=non_negative,
        default=DEFAULT_GATE_THRESHOLD,
        help=f"largest tolerated drop in mean score (default {DEFAULT_GATE_THRESHOLD})",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--scorer",
        metavar="NAME",
        default=None,
        help="the scorer to gate on (default: the candidate's primary scorer)",
    )
    which.add_argument(
        "--all-scorers",
        action="store_true",
        help="gate each scorer both runs share; fail when any regresses",
    )
    parser.add_argument(
        "--force", action="store_true", help="gate even if scorer or dataset hashes differ"
    )
    parser.add_argument(
        "--require-kappa",
        type=kappa_level,
        default=None,
        metavar="K",
        help="refuse (exit 2) to gate on a judge scorer whose Cohen's kappa with the human "
        "labels on the candidate's responses is below K, or that has no labels",
    )
    parser.add_argument("--json", action="store_true", help="print the decision as JSON")
    add_stats_options(parser)
    parser.set_defaults(handler=gate_command)


def kappa_level(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not -1.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a kappa lies in [-1, 1], not {text}")
    return value


def gate_command(args: argparse.Namespace) -> int:
    candidate = load_run(args.run)
    if args.require_kappa is not None and not args.all_scorers:
        # The judge's agreement with people is the candidate's alone: a distrusted judge is
        # refused before any baseline is looked for (else the refusal could be a missing
        # baseline's, and say nothing of the judge).
        scorer = args.scorer or candidate.manifest.primary_scorer
        _refuse_distrusted(args.run, [scorer], args.require_kappa)
    picked = _previous(args.run, candidate) if args.baseline == PREVIOUS else None
    baseline = load_run(picked.path if picked else Path(args.baseline))
    if picked is not None:
        _say_picked(picked, json_mode=args.json)
    labels_list = distinct_labels([baseline, candidate])
    labels = (f"baseline {labels_list[0]}", f"candidate {labels_list[1]}")
    a, b = baseline.manifest, candidate.manifest
    sides = ("the baseline", "the candidate")
    pairs = scorer_pairs(a, b, (labels_list[0], labels_list[1]), sides=sides, first="b")
    if args.all_scorers:
        gated = [p for p in pairs if p.shared]
        if not gated:
            raise NotComparable(
                f"the runs share no scorer: the baseline has {', '.join(a.scorer_names)}; "
                f"the candidate has {', '.join(b.scorer_names)}"
            )
    else:
        gated = [pick(pairs, args.scorer or b.primary_scorer)]
    # Every gated scorer is checked before any is computed: one refusal refuses the gate.
    if args.require_kappa is not None and args.all_scorers:
        _refuse_distrusted(args.run, [pair.name for pair in gated], args.require_kappa)
    refusals, notes = [], {}
    for pair in gated:
        try:
            notes[pair.name] = check_comparable(a, b, pair.name, force=args.force, labels=labels)
        except NotComparable as exc:
            refusals.append(str(exc))
    if refusals:
        raise NotComparable("; ".join(refusals))
    decisions = []
    for pair in gated:
        comparison = compare(
            baseline.sheet(pair.name),
            candidate.sheet(pair.name),
            pair.name,
            labels=labels,
            threshold=args.pass_threshold,
            confidence=args.confidence,
            method=args.method,
            notes=notes[pair.name],
        )
        decisions.append((pair, gate(comparison, args.threshold)))
    passed = all(d.passed for _, d in decisions)
    skipped = [p.only_in for p in pairs if not p.shared] if args.all_scorers else []
    if args.json:
        result = _json(decisions, skipped, args)
        if picked is not None:
            result["baseline"] = {
                "run_dir": str(picked.path),
                "chosen": PREVIOUS,
                "finished_at": picked.entry.finished_at,
                "skipped": picked.skipped,
            }
        print(json.dumps(result, indent=2))
    elif args.all_scorers:
        print(_all_text(decisions, skipped, passed))
    else:
        ((pair, decision),) = decisions
        print(_explain(pair, decision))
    return EXIT_OK if passed else EXIT_REGRESSION


PREVIOUS = "previous"


def _refuse_distrusted(run_dir: Path, scorers: list[str], minimum: float) -> None:
    """UsageError (exit 2) when any of `scorers` is a judge whose kappa with the human
    labels on the run is below `minimum` (or unknown)."""
    from gradetrail_lib.analysis.calibration import kappa_refusal

    distrusted = [
        why for name in scorers if (why := kappa_refusal(run_dir, name, minimum)) is not None
    ]
    if distrusted:
        raise UsageError("not gated: " + "; ".join(distrusted))


def _previous(run_dir: Path, candidate: Run) -> Baseline:
    """The baseline `--baseline previous` names: see the module docstring."""
    # The candidate's results root (as given, for the paths printed; `.` resolved).
    root = run_dir.parent if run_dir.name not in ("", ".", "..") else run_dir.resolve().parent
    settings = cli_settings()
    store = open_history(root, store=settings.store, cache=settings.database)
    return previous_run(root, candidate.manifest, records_fingerprint(candidate), store)


def _say_picked(picked: Baseline, *, json_mode: bool) -> None:
    out = sys.stderr if json_mode else sys.stdout
    for reason in picked.skipped:
        print(f"passed over: {reason}", file=out)
    entry = picked.entry
    print(
        f"baseline: {picked.path} (previous run of {entry.label}, finished {entry.finished_at})",
        file=out,
    )
    if not json_mode:
        print(file=out)


def _explain(pair: ScorerPair, decision: GateDecision) -> str:
    """The decision's paragraph, naming its scorer: `FAIL: scorer 'x' (primary): ...`."""
    verdict, _, rest = decision.explanation.partition(": ")
    role = f" ({pair.role})" if pair.role else ""
    return f"{verdict}: scorer {pair.name!r}{role}: {rest}"


def _all_text(
    decisions: list[tuple[ScorerPair, GateDecision]], skipped: list[str], passed: bool
) -> str:
    failed = [p.name for p, d in decisions if not d.passed]
    paragraphs = [_explain(p, d) for p, d in decisions]
    paragraphs += [f"Not gated: {s} (the other run has no such scorer)." for s in skipped]
    if passed:
        overall = f"PASS: none of the {len(decisions)} gated scorers regressed."
    else:
        overall = (
            f"FAIL: {len(failed)} of the {len(decisions)} gated scorers regressed: "
            + ", ".join(failed)
            + "."
        )
    return "\n\n".join([*paragraphs, overall])


def _json(
    decisions: list[tuple[ScorerPair, GateDecision]],
    skipped: list[str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    def one(pair: ScorerPair, decision: GateDecision) -> dict[str, Any]:
        return {"scorer": pair.name, "role": pair.role or "secondary", **decision.to_json()}

    if not args.all_scorers:
        ((pair, decision),) = decisions
        return one(pair, decision)
    return {
        "passed": all(d.passed for _, d in decisions),
        "threshold": args.threshold,
        "failed": [p.name for p, d in decisions if not d.passed],
        "decisions": [one(p, d) for p, d in decisions],
        "not_gated": skipped,
    }
