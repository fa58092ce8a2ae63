"""`gradetrail plan SPEC [--model M] [--cache PATH]`: what a run would send and cost, per
model, before any call (see `gradetrail_lib.engine.estimate`). Sends nothing, writes nothing."""

import argparse
import json
import sys
from pathlib import Path

from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.engine.estimate import ModelPlan, estimate_run, format_plan, total_worst_case
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.providers.pricing import format_usd, load_prices
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
    parser.add_argument(
        "--cache",
        type=Path,
        default=cli_settings().database,
        help=f"response cache file (env GRADETRAIL_CACHE; default {DEFAULTS.database})",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=plan_command)


def plan_command(args: argparse.Namespace) -> int:
    loaded = load_spec(args.spec).with_repeats(args.repeats)
    spec = loaded.spec
    models = [spec.model_named(args.model)] if args.model else list(spec.models)
    plans = [plan(loaded, m) for m in models]
    path: Path = args.cache
    # A cache that does not exist yet is empty; opening it would create the file.
    cache = ResponseCache(path) if path.exists() else None
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
        print(
            f"Worst case, every model: {format_usd(worst)}; by batch: {format_usd(batch_worst)}"
        )
    return EXIT_OK
