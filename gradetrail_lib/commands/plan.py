"""`gradetrail plan SPEC [--model M] [--cache PATH]`: what a run would send and cost, per
model, before any call (see `gradetrail_lib.engine.estimate`). Sends nothing, writes nothing.

`gradetrail plan SPEC --detect D [--power P] [--confidence C] [--results DIR]`: how many
samples (or cases x repeats) a paired comparison needs to detect a difference of D in pass
rate (`gradetrail_lib.analysis.sample_size`), instead of the cost."""

import argparse
import json
import sys
from pathlib import Path

from gradetrail_lib.analysis.history_store import open_history
from gradetrail_lib.analysis.sample_size import samples_needed
from gradetrail_lib.analysis.stats.power import DEFAULT_POWER
from gradetrail_lib.cache.location import existing_cache
from gradetrail_lib.commands.options import add_cache_option, confidence_level
from gradetrail_lib.engine.estimate import ModelPlan, estimate_run, format_plan, total_worst_case
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.providers.pricing import format_usd, load_prices
from gradetrail_lib.results.defaults import DEFAULT_CONFIDENCE
from gradetrail_lib.settings import DEFAULTS, cli_settings
from gradetrail_lib.spec.spec import load_spec

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "plan", help="what a run would send and cost (cache hits, tokens, cost range)"
    )
    parser.add_argument("spec", type=Path, metavar="SPEC", help="a spec file")
    parser.add_argument("--model", help="plan only this model of the spec")
    parser.add_argument(
        "--repeats", type=int, default=None, help="each sample N times (default: the spec's)"
    )
    add_cache_option(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    power = parser.add_argument_group(
        "samples needed", "with --detect: the samples a paired comparison needs, not the cost"
    )
    power.add_argument(
        "--detect",
        type=confidence_level,
        metavar="D",
        default=None,
        help="the difference in pass rate to detect (between 0 and 1, e.g. 0.03)",
    )
    power.add_argument(
        "--power",
        type=confidence_level,
        default=DEFAULT_POWER,
        help=f"the chance of detecting it (default {DEFAULT_POWER})",
    )
    power.add_argument(
        "--confidence",
        type=confidence_level,
        default=DEFAULT_CONFIDENCE,
        help=f"the gate's confidence level: alpha = 1 - this (default {DEFAULT_CONFIDENCE})",
    )
    power.add_argument(
        "--results",
        type=Path,
        default=cli_settings().results,
        help="the results root whose run history gives the discordance "
        f"(env GRADETRAIL_RESULTS; default ./{DEFAULTS.results})",
    )
    parser.set_defaults(handler=plan_command)


def plan_command(args: argparse.Namespace) -> int:
    if args.detect is not None:
        return samples_command(args)
    loaded = load_spec(args.spec).with_repeats(args.repeats)
    spec = loaded.spec
    models = [spec.model_named(args.model)] if args.model else list(spec.models)
    plans = [plan(loaded, m) for m in models]
    # A cache file that does not exist yet is empty; opening it would create the file.
    cache = existing_cache(args.cache)
    prices = load_prices()
    estimates: list[ModelPlan] = [estimate_run(p, cache, prices) for p in plans]
    worst = total_worst_case(estimates)
    batch_worst = total_worst_case(estimates, batch=True)
    if args.json:
        body = {
            "pricing_version": prices.version,
            "models": [e.to_json() for e in estimates],
            "worst_case_usd": worst,
            "batch_worst_case_usd": batch_worst,
        }
        print(json.dumps(body, indent=2))
        return EXIT_OK
    for e in estimates:
        print(format_plan(e), file=sys.stdout)
    if len(estimates) > 1:
        print(f"Worst case, every model: {format_usd(worst)}; by batch: {format_usd(batch_worst)}")
    return EXIT_OK


def samples_command(args: argparse.Namespace) -> int:
    """`plan --detect`: reads the spec and the run history; writes nothing."""
    # --repeats is checked as for the cost (an InputError naming it, exit 2).
    spec = load_spec(args.spec).with_repeats(args.repeats).spec
    name = spec.name
    settings = cli_settings()
    history = open_history(args.results, store=settings.store, cache=settings.database)
    sizes = samples_needed(
        spec,
        args.detect,
        power=args.power,
        confidence=args.confidence,
        results=args.results,
        history=history,
    )
    if args.json:
        print(json.dumps({"spec": name, "samples_needed": [s.to_json() for s in sizes]}, indent=2))
        return EXIT_OK
    print(f"Samples needed for a paired comparison on {name} (pass/fail on the primary scorer):")
    for size in sizes:
        print(f"  {size.describe()}")
    first = sizes[0]
    for note in first.notes:
        print(f"  Note: {note}")
    if first.discordance_source == "assumed":
        print(
            f"  Note: no two runs of {name} in {args.results} to measure the discordance "
            "from, so it is assumed; run the spec twice (or two models) for a measured one"
        )
    return EXIT_OK
