"""A release check that stops once the answer is known: a challenger (B) against the
incumbent (A) on the spec's cases in a seeded random order, a chunk at a time, until the
anytime-valid confidence sequence on their mean difference decides
(`analysis.stats.sequential`): B or A better, equivalent within the margin, or undecided
when the cases, `max_samples` or `max_cost` run out.

Each chunk is run for both models as a run of its own into a scratch folder (the
engine's `run_model`, unchanged: cache, backend, scorers and judges as any run), so only
the chunk's cases are sent and paid, and each answer lands in the cache. Once decided,
each model's cases so far are run again into the results root: every answer is in the
cache by then, and the keys the chunks sent are passed as this run's own
(`RunOptions.already_sent`), so the run directory counts them as its calls, not as cache
hits. The two go under `<results>/until-decided/<spec>-<challenger>-vs-<incumbent>/`, a
results root of the check's own with its own history file, so that a full run's
directory of the same spec and model (named by spec, model and identity) keeps its place
and `gate --baseline previous` never takes a check's few cases for a full run. Each is a
normal run directory (`compare`, `rank`, `view` and `report` read it) of the cases used,
whose manifest carries the decision (`Manifest.sequential`). A later full run of either
model reuses every answer from the cache.
"""

import math
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE, DEFAULT_GATE_THRESHOLD
from gradetrail_lib.analysis.stats.sequential import (
    METHOD,
    SequentialDecision,
    decide,
)
from gradetrail_lib.analysis.summary import all_local
from gradetrail_lib.backends.base import Backend
from gradetrail_lib.cache.base import Cache
from gradetrail_lib.datasets.dataset import Sample, in_memory
from gradetrail_lib.engine.plan import RunPlan
from gradetrail_lib.engine.rules import PYTHON_NAMES, OptionNames
from gradetrail_lib.engine.run import CompletedRun, RunOptions, run_model
from gradetrail_lib.errors import UsageError
from gradetrail_lib.history.entries import HistoryStore
from gradetrail_lib.providers.pricing import LOCAL_COST
from gradetrail_lib.results.keyset import AnyOf
from gradetrail_lib.results.runs import MANIFEST_FILE
from gradetrail_lib.results.trace import TraceRecord

DEFAULT_CHUNK = 50
# Where a release check's run directories go, under the results root: apart from the
# full runs, whose directories (named by spec, model and identity) they would replace.
CHECKS_DIR = "until-decided"


def check_root(results_root: Path, incumbent: RunPlan, challenger: RunPlan) -> Path:
    """`<results>/until-decided/<spec>-<challenger>-vs-<incumbent>`: a check's own results
    root, with its own history file, so that neither `gradetrail list` of the results root
    nor `gate --baseline previous` takes a check's few cases for a full run."""
    name = f"{incumbent.loaded.spec.name}-{challenger.model.name}-vs-{incumbent.model.name}"
    return results_root / CHECKS_DIR / re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


@dataclass(frozen=True)
class DecidedRuns:
    """The decision, the two run directories of the cases used, and what it cost."""

    decision: SequentialDecision
    incumbent: CompletedRun
    challenger: CompletedRun
    seed: int
    chunk: int
    # Dollars paid for the chunks sent (both models, judges included); None: unpriced.
    cost_usd: float | None
    # What the cases not sent would have cost at the average cost of a case so far.
    saved_usd: float | None
    # Every call was a local model's: no price, so both figures read `LOCAL_COST` (null).
    local: bool = False

    def sequential(self) -> dict[str, Any]:
        """The manifest's and the summary's record of the decision."""
        d = self.decision
        return {
            **d.to_json(),
            "incumbent": self.incumbent.manifest.label,
            "challenger": self.challenger.manifest.label,
            "winner": {
                "B": self.challenger.manifest.label,
                "A": self.incumbent.manifest.label,
            }.get(d.verdict),
            "order_seed": self.seed,
            "chunk": self.chunk,
            "cost_usd": None if self.local else self.cost_usd,
            "saved_usd": None if self.local else self.saved_usd,
            "local": self.local,
            "saved_usd_method": "the cases not sent at the mean cost per case sent",
        }

    def describe(self) -> str:
        d = self.decision
        saved = "unknown (no price)" if self.saved_usd is None else f"${self.saved_usd:.4f}"
        paid = "unknown (no price)" if self.cost_usd is None else f"${self.cost_usd:.4f}"
        if self.local:
            saved = paid = LOCAL_COST
        winner = {
            "B": f"{self.challenger.manifest.label} (challenger) is better",
            "A": f"{self.incumbent.manifest.label} (incumbent) is better",
            "equivalent": f"equivalent within ±{d.margin:g}",
            "undecided": "undecided at the budget",
        }[d.verdict]
        return (
            f"Verdict: {winner}. Mean difference challenger - incumbent "
            f"{d.difference:+.3f}, {d.confidence:.0%} confidence sequence "
            f"[{d.low:+.3f}, {d.high:+.3f}] ({METHOD}, anytime-valid); {d.cases} of "
            f"{d.available} cases used in {d.looks} chunks of {self.chunk} (order seed "
            f"{self.seed}); paid {paid}, saved {saved} against the full dataset "
            "(the cases not sent at the mean cost per case sent)."
        )


def _values(
    records: Sequence[TraceRecord], scorer: str, names: OptionNames = PYTHON_NAMES
) -> dict[tuple[str, int], float]:
    """Each record's value on `scorer` (an unscored record scores 0), by (id, repeat)."""
    out: dict[tuple[str, int], float] = {}
    for record in records:
        value = record.score_of(scorer)
        if value is not None and not 0.0 <= value <= 1.0:
            raise UsageError(
                f"{names.until_decided} needs scores in [0, 1]: scorer {scorer!r} gave {value} "
                f"on sample {record.id!r}"
            )
        out[(record.id, record.repeat)] = 0.0 if value is None else value
    return out


def _paid(run: CompletedRun) -> float | None:
    # A local model's calls have no price: nothing paid, as `--max-cost` reads them.
    roles = (run.manifest.target, run.manifest.judge)
    paid = [0.0 if t.local else t.cost_paid_usd for t in roles]
    return None if any(p is None for p in paid) else math.fsum(p or 0.0 for p in paid)


def _subset(plan: RunPlan, samples: list[Sample]) -> RunPlan:
    """The plan on `samples` only (the dataset's hash kept: the same data, fewer cases)."""
    data = in_memory(plan.dataset.path, plan.dataset.content_hash, samples)
    return replace(plan, dataset=data, samples=len(samples))


def run_until_decided(
    incumbent: RunPlan,
    challenger: RunPlan,
    cache: Cache | None,
    backend: Backend,
    results_root: Path,
    *,
    seed: int = 0,
    chunk: int = DEFAULT_CHUNK,
    max_samples: int | None = None,
    max_cost: float | None = None,
    margin: float = DEFAULT_GATE_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    history: HistoryStore | None = None,
    names: OptionNames = PYTHON_NAMES,
) -> DecidedRuns:
    """Run both models chunk by chunk until decided (module docstring), the two run
    directories into `check_root` (its history file, unless `history` says where);
    raises UsageError when the two plans are not of one spec's cases or a score is
    outside [0, 1]; its messages name the options as `names` spells them (the CLI's
    flags from `gradetrail run`)."""
    until = names.until_decided
    if incumbent.loaded.spec.name != challenger.loaded.spec.name:
        raise UsageError(f"{until} compares two models of one spec")
    if incumbent.dataset.content_hash != challenger.dataset.content_hash:
        raise UsageError(f"{until}: the two models' datasets differ")
    if chunk < 1:
        raise UsageError(f"{names.chunk} must be at least 1, not {chunk}")
    samples = list(incumbent.dataset)
    order = [samples[i] for i in np.random.default_rng(seed).permutation(len(samples))]
    limit = len(order) if max_samples is None else min(max_samples, len(order))
    if limit < 1:
        raise UsageError(f"{until}: no case to send ({names.max_samples} or an empty dataset)")
    scorer = incumbent.scorer_names[0]
    sent: dict[str, list[AnyOf]] = {"A": [], "B": []}
    values: dict[str, dict[tuple[str, int], float]] = {"A": {}, "B": {}}
    paid: float | None = 0.0
    used = 0
    looks = 0
    decision: SequentialDecision | None = None
    with tempfile.TemporaryDirectory(prefix="gradetrail-until-decided-") as scratch:
        while decision is None:
            part = order[used : min(used + chunk, limit)]
            costs: list[float | None] = []
            for side, plan in (("A", incumbent), ("B", challenger)):
                done = run_model(_subset(plan, part), cache, backend, Path(scratch), RunOptions())
                sent[side].append(done.totals.sent)
                values[side].update(_values(done.records, scorer, names))
                costs.append(_paid(done))
            used += len(part)
            looks += 1
            chunk_cost = None if any(c is None for c in costs) else math.fsum(c or 0 for c in costs)
            paid = None if paid is None or chunk_cost is None else paid + chunk_cost
            out_of_money = (
                max_cost is not None
                and paid is not None
                and chunk_cost is not None
                and paid + chunk_cost > max_cost
            )
            # Each case's mean difference over its repeats, in the order sent.
            repeats = range(incumbent.repeats)
            differences = [
                math.fsum(values["B"][(s.id, r)] - values["A"][(s.id, r)] for r in repeats)
                / incumbent.repeats
                for s in order[:used]
            ]
            decision = decide(
                differences,
                available=len(order),
                looks_so_far=looks,
                budget_spent=used >= limit or out_of_money,
                confidence=confidence,
                margin=margin,
            )
    runs = {}
    root = check_root(results_root, incumbent, challenger)
    for side, plan in (("A", incumbent), ("B", challenger)):
        options = RunOptions(already_sent=AnyOf(*sent[side]), history=history)
        runs[side] = run_model(_subset(plan, order[:used]), cache, backend, root, options)
    saved = None
    if paid is not None:
        saved = paid / used * (len(order) - used)
    result = DecidedRuns(
        decision=decision,
        incumbent=runs["A"],
        challenger=runs["B"],
        seed=seed,
        chunk=chunk,
        cost_usd=paid,
        saved_usd=saved,
        local=all_local(
            t for run in runs.values() for t in (run.manifest.target, run.manifest.judge)
        ),
    )
    record = result.sequential()
    return replace(
        result, incumbent=_record(runs["A"], record), challenger=_record(runs["B"], record)
    )


def _record(run: CompletedRun, sequential: dict[str, Any]) -> CompletedRun:
    """Put the decision in the run directory's manifest (written whole and renamed)."""
    manifest = run.manifest.model_copy(update={"sequential": sequential})
    target = run.run_dir / MANIFEST_FILE
    staging = target.with_name(f".{target.name}.tmp")
    staging.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    staging.replace(target)
    return replace(run, manifest=manifest)
