"""`gradetrail run SPEC --models NEW --against INCUMBENT --until-decided`: a release check
that stops once the answer is known (`engine.until_decided`): the new model against the
incumbent on the spec's cases in a seeded random order, a chunk at a time, until the
anytime-valid confidence sequence on their mean difference decides, the cases or
`--max-samples` run out, or the next chunk would pass `--max-cost`."""

import argparse
import sys

from gradetrail_lib.analysis.stats.defaults import DEFAULT_GATE_THRESHOLD
from gradetrail_lib.commands.options import positive_int
from gradetrail_lib.engine.api import Decision, RunRequest, decide_request
from gradetrail_lib.engine.until_decided import DEFAULT_CHUNK
from gradetrail_lib.errors import UsageError

EXIT_OK = 0


def add_options(run: argparse.ArgumentParser) -> None:
    group = run.add_argument_group(
        "release check", "--until-decided: one new model against an incumbent, stopping early"
    )
    group.add_argument(
        "--until-decided",
        action="store_true",
        help="with --against: send cases in a seeded random order, a chunk at a time, until "
        "an anytime-valid confidence sequence decides (better, worse, equivalent) or the "
        "budget runs out; --max-cost is then the budget, not a refusal",
    )
    group.add_argument(
        "--against",
        metavar="INCUMBENT",
        default=None,
        help="with --until-decided: the model in use (one of the spec's models) that the "
        "new one (--model or --models) is checked against",
    )
    group.add_argument(
        "--max-samples",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --until-decided: send at most N cases (default: every case)",
    )
    group.add_argument(
        "--chunk",
        type=positive_int,
        default=DEFAULT_CHUNK,
        metavar="N",
        help=f"with --until-decided: cases a chunk, the rule checked after each (default "
        f"{DEFAULT_CHUNK})",
    )
    group.add_argument(
        "--order-seed",
        type=int,
        default=0,
        metavar="N",
        help="with --until-decided: the seed of the cases' random order (default 0)",
    )
    group.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_GATE_THRESHOLD,
        metavar="M",
        help=f"with --until-decided: equivalent when the sequence lies within ±M (default "
        f"{DEFAULT_GATE_THRESHOLD:g})",
    )


def check(args: argparse.Namespace) -> None:
    """The rules among the options, before anything is read: exit 2 naming the option."""
    if not args.until_decided:
        for flag, given in (
            ("--against", args.against is not None),
            ("--max-samples", args.max_samples is not None),
        ):
            if given:
                raise UsageError(f"{flag} needs --until-decided")
        return
    if args.against is None:
        raise UsageError("--until-decided needs --against INCUMBENT (the model in use)")
    # The rules of a release check among the run's options are the engine's
    # (`engine.rules.check_decision`); these are the flags of this mode alone.
    if not 0 <= args.margin < 1:
        raise UsageError(f"--margin must be in [0, 1), not {args.margin}")


def new_models(args: argparse.Namespace) -> list[str]:
    """The new model: names of the spec's models or provider/name, as `--against` is."""
    return [args.model] if args.model else [m for m in (args.models or "").split(",") if m]


def until_decided_command(args: argparse.Namespace, request: RunRequest) -> int:
    """`request`: what `run`'s flags ask for, its models `new_models(args)`."""
    check(args)
    decision = Decision(
        against=args.against, seed=args.order_seed, chunk=args.chunk,
        max_samples=args.max_samples, margin=args.margin,
    )  # fmt: skip
    decided = decide_request(request, decision)
    out = sys.stdout
    print(decided.describe(), file=out)
    print(f"Incumbent: {decided.incumbent.run_dir}", file=out)
    print(f"Challenger: {decided.challenger.run_dir}", file=out)
    return EXIT_OK
