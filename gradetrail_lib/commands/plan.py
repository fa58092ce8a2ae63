"""`gradetrail plan SPEC [--model M] [--cache PATH]`: what a run would send and cost, per
model, before any call (see `gradetrail_lib.engine.estimate`). Sends nothing, writes nothing.

`gradetrail plan SPEC --detect D [--power P] [--confidence C] [--results DIR]`: how many
samples (or cases x repeats) a paired comparison needs to detect a difference of D in pass
rate (`gradetrail_lib.engine.api.samples_needed`), and what that costs per model (the plan's
estimate, pro rata); with `--until-decided`, the cases and cost a release check that
stops once decided is expected to use at true differences 0, D and 2D (the sequential
rule simulated, `analysis.stats.sequential.forecast`)."""

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE, DEFAULT_GATE_THRESHOLD
from gradetrail_lib.analysis.stats.power import DEFAULT_POWER
from gradetrail_lib.analysis.stats.sequential import METHOD, Forecast, forecast
from gradetrail_lib.cache.location import existing_cache
from gradetrail_lib.commands.options import add_cache_option, confidence_level
from gradetrail_lib.engine.api import samples_needed
from gradetrail_lib.engine.estimate import ModelPlan, estimate_run, format_plan, total_worst_case
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.until_decided import DEFAULT_CHUNK
from gradetrail_lib.history.store import open_history
from gradetrail_lib.providers.pricing import LOCAL_COST, format_usd, load_prices
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
        "--until-decided",
        action="store_true",
        help="with --detect: also the cases and cost a run --until-decided is expected to "
        "use at true differences 0, D and 2D (simulated)",
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
    if all(e.local for e in estimates):  # local models only: no price, no total
        worst = batch_worst = None
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
    if len(estimates) > 1 and all(e.local for e in estimates):
        print(f"Worst case, every model: {LOCAL_COST}")
    elif len(estimates) > 1:
        print(f"Worst case, every model: {format_usd(worst)}; by batch: {format_usd(batch_worst)}")
    return EXIT_OK


def samples_command(args: argparse.Namespace) -> int:
    """`plan --detect`: reads the spec, the cache and the run history; writes nothing."""
    # --repeats is checked as for the cost (an InputError naming it, exit 2).
    loaded = load_spec(args.spec).with_repeats(args.repeats)
    spec = loaded.spec
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
    models = [spec.model_named(args.model)] if args.model else list(spec.models)
    cache = existing_cache(args.cache)
    prices = load_prices()
    estimates = [estimate_run(plan(loaded, m), cache, prices) for m in models]
    needed = sizes[-1].samples
    costs = [ModelCost.of(e, needed) for e in estimates]
    forecasts: list[Forecast] = []
    if args.until_decided:
        cases = estimates[0].samples // max(loaded.spec.repeats, 1) if estimates else 0
        forecasts = [
            forecast(
                delta,
                cases=cases,
                discordance=sizes[0].discordance,
                chunk=DEFAULT_CHUNK,
                confidence=args.confidence,
            )
            for delta in (0.0, args.detect, min(2 * args.detect, 1.0))
        ]
    if args.json:
        body = {
            "spec": name,
            "samples_needed": [s.to_json() for s in sizes],
            "cost": [c.to_json() for c in costs],
            "pricing_version": prices.version,
        }
        if args.until_decided:
            body["until_decided"] = [_forecast_json(f, costs) for f in forecasts]
        print(json.dumps(body, indent=2))
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
    print(
        f"Cost per model (price list {prices.version}, the cache's hits counted; "
        f"{needed:,} samples: the full run's estimate pro rata):"
    )
    for cost in costs:
        print(f"  {cost.describe()}")
    if forecasts:
        print(
            f"Run --until-decided (a look every {DEFAULT_CHUNK} cases, margin "
            f"{DEFAULT_GATE_THRESHOLD:g}, {METHOD}; {forecasts[0].runs:,} simulated runs "
            f"at discordance {max(first.discordance, 0):.3g}), expected:"
        )
        for f in forecasts:
            print(f"  {_forecast_text(f, costs)}")
    return EXIT_OK


@dataclass(frozen=True)
class ModelCost:
    """A model's cost: its full run's estimate (the cache's hits counted) and the share of
    it `samples` would take."""

    model: str
    samples: int  # the full run's
    hits: int
    calls: int
    low: float | None
    worst: float | None
    needed: int

    @classmethod
    def of(cls, estimate: ModelPlan, needed: int) -> "ModelCost":
        return cls(
            model=estimate.model,
            samples=estimate.samples,
            hits=estimate.target.hits,
            calls=estimate.target.calls,
            low=estimate.cost_low,
            worst=estimate.worst_case,
            needed=needed,
        )

    def share(self, samples: float) -> tuple[float | None, float | None]:
        """The cost of `samples` of the full run's, pro rata."""
        ratio = min(samples / self.samples, 1.0) if self.samples else 0.0
        return (
            None if self.low is None else self.low * ratio,
            None if self.worst is None else self.worst * ratio,
        )

    def describe(self) -> str:
        low, worst = self.share(self.needed)
        return (
            f"{self.model}: {self.samples:,} samples (full run) {format_usd(self.low)} to "
            f"{format_usd(self.worst)} ({self.hits:,}/{self.calls:,} requests cached); "
            f"{min(self.needed, self.samples):,} samples {format_usd(low)} to {format_usd(worst)}"
        )

    def to_json(self) -> dict[str, Any]:
        low, worst = self.share(self.needed)
        return {
            "model": self.model,
            "samples": self.samples,
            "cache_hits": self.hits,
            "requests": self.calls,
            "full_run_usd": {"low": self.low, "worst": self.worst},
            "needed_samples": min(self.needed, self.samples),
            "needed_usd": {"low": low, "worst": worst},
            "method": "the full run's estimate pro rata",
        }


def _forecast_json(f: Forecast, costs: list[ModelCost]) -> dict[str, Any]:
    body = f.to_json()
    body["cost"] = [
        {"model": c.model, "low": low, "worst": worst}
        for c in costs
        for low, worst in [c.share(f.mean_cases / f.cases * c.samples if f.cases else 0)]
    ]
    return body


def _forecast_text(f: Forecast, costs: list[ModelCost]) -> str:
    shares = ", ".join(f"{v} {share:.0%}" for v, share in f.shares.items())
    spend = "; ".join(
        f"{c.model} {format_usd(low)} to {format_usd(worst)}"
        for c in costs
        for low, worst in [c.share(f.mean_cases / f.cases * c.samples if f.cases else 0)]
    )
    return (
        f"true difference {f.delta:g}: {f.mean_cases:,.0f} of {f.cases:,} cases ({shares}); {spend}"
    )
