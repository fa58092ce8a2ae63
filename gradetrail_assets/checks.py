"""The asset checks of `scores`, each of which can fail on a real run:

* `provider_error_rate`, `truncation_rate`: samples without an answer, and answers cut off
  by `max_tokens` that failed the primary scorer, under their thresholds;
* `judge_error_rate`: per judge scorer, answered samples its judge gave no usable grade
  (a failed call, or output the grade pattern does not match), under the threshold;
* `served_model_matches`: the provider served the model the spec requested (a dated
  snapshot of the requested alias, `gpt-4o` served as `gpt-4o-2024-08-06`, fails with
  severity WARN; another model fails with ERROR); passes when nothing was served;
* `dataset_hash_matches`: the run scored the data the `dataset` asset last recorded for
  this partition (its data version), not a file edited since;
* `judge_agreement`: per judge scorer with at least 30 random human labels on the run's
  responses, Cohen's kappa with them is at least the threshold (passes, saying so, where
  no judge has that many);
* `agent_stop_rate` (a spec with tools only): an agent's cases stopped early, repeating a
  call with nothing new observed (`thrash`) or still calling tools at the step budget
  (`budget_exhausted`), over all samples, under the threshold.
"""

from collections.abc import Sequence

import dagster as dg

from gradetrail_assets.resources import GradetrailResource
from gradetrail_lib.analysis.calibration import MIN_RANDOM_LABELS, Calibration
from gradetrail_lib.analysis.summary import RunSummary
from gradetrail_lib.results.trace import AGENT_STOPS, Manifest

# Where Dagster stores an asset materialization's data version (dagster._core's
# DATA_VERSION_TAG, not exported at the top level).
DATA_VERSION_TAG = "dagster/data_version"

CHECK_DESCRIPTIONS = {
    "provider_error_rate": "Samples the provider gave no answer for, over all samples, "
    "at most GRADETRAIL_MAX_PROVIDER_ERROR_RATE.",
    "truncation_rate": "Samples that failed because the answer hit max_tokens, at most "
    "GRADETRAIL_MAX_TRUNCATION_RATE.",
    "judge_error_rate": "Per judge scorer, answered samples without a usable grade (judge "
    "call failed, or no grade in its output), at most GRADETRAIL_MAX_JUDGE_ERROR_RATE.",
    "served_model_matches": "Every model the provider reports having served is the requested one.",
    "dataset_hash_matches": "The run's dataset hash is the dataset asset's data version "
    "for this partition.",
    "judge_agreement": "Per judge scorer with at least 30 random human labels, Cohen's "
    "kappa with them at least GRADETRAIL_MIN_JUDGE_KAPPA.",
}
AGENT_CHECK_DESCRIPTIONS = {
    "agent_stop_rate": "Agent cases stopped early (thrash: the same call again with nothing "
    "new observed; budget_exhausted: still calling tools at step_budget), over all samples, "
    "at most GRADETRAIL_MAX_AGENT_STOP_RATE.",
}


def check_specs(asset: dg.AssetKey, *, agent: bool = False) -> list[dg.AssetCheckSpec]:
    """The checks of a spec's scores; an agent's (a spec with tools) has `agent_stop_rate`."""
    descriptions = {**CHECK_DESCRIPTIONS, **(AGENT_CHECK_DESCRIPTIONS if agent else {})}
    return [
        dg.AssetCheckSpec(name, asset=asset, description=description)
        for name, description in descriptions.items()
    ]


def latest_materialization(
    instance: dg.DagsterInstance, asset: dg.AssetKey, partition: str
) -> dg.AssetMaterialization | None:
    """The asset's latest materialization of `partition`, if any."""
    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[partition]), limit=1
    )
    return found.records[0].asset_materialization if found.records else None


def latest_data_version(
    instance: dg.DagsterInstance, asset: dg.AssetKey, partition: str
) -> str | None:
    """The data version of the asset's latest materialization of `partition`, if any."""
    materialization = latest_materialization(instance, asset, partition)
    tags = materialization.tags if materialization is not None else None
    return (tags or {}).get(DATA_VERSION_TAG)


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def judge_error_rates(summary: RunSummary) -> dict[str, dict[str, float | int]]:
    """Per judge scorer (and any other scorer that reported a judge error), its judge
    errors over the answered samples, from the run's summary (as every surface counts
    them)."""
    answered = summary.answered
    return {
        name: {"errors": errors, "answered": answered, "rate": _rate(errors, answered)}
        for name, errors in summary.judge_errors.items()
    }


def judge_agreement_check(
    calibrations: Sequence[Calibration], minimum: float
) -> dg.AssetCheckResult:
    """Fails when a judge with 30 random labels agrees with people below `minimum`."""
    counted = [c for c in calibrations if c.n_random >= MIN_RANDOM_LABELS]
    kappas = {c.scorer: c.kappa.value for c in counted}
    low = {name: k for name, k in kappas.items() if k is None or k < minimum}
    if not counted:
        description = f"no judge scorer has {MIN_RANDOM_LABELS} random human labels yet"
    elif low:
        description = "below the threshold: " + ", ".join(
            f"{name} kappa {'undefined' if k is None else f'{k:.3f}'}" for name, k in low.items()
        )
    else:
        description = "every labelled judge agrees with people at least as required"
    return dg.AssetCheckResult(
        check_name="judge_agreement",
        passed=not low,
        description=f"{description} (threshold {minimum:g})",
        metadata={
            "threshold": minimum,
            "kappas": dg.MetadataValue.json(kappas),
            "random_labels": dg.MetadataValue.json({c.scorer: c.n_random for c in calibrations}),
        },
    )


def served_model_check(manifest: Manifest) -> dg.AssetCheckResult:
    requested, served = manifest.model.requested, manifest.model.served
    others = [s for s in served if s != requested]
    snapshots = all(s.startswith(f"{requested}-") for s in others)
    return dg.AssetCheckResult(
        check_name="served_model_matches",
        passed=not others,
        severity=dg.AssetCheckSeverity.WARN if snapshots else dg.AssetCheckSeverity.ERROR,
        description=(
            f"served {', '.join(others)} for requested {requested}"
            if others
            else (f"served {requested}" if served else "no answer reported a served model")
        ),
        metadata={"requested": requested, "served": dg.MetadataValue.json(served)},
    )


def dataset_check(manifest: Manifest, dataset_version: str | None) -> dg.AssetCheckResult:
    run_hash = manifest.dataset.hash
    if dataset_version is None:
        description = "the dataset asset has no materialization for this partition"
    elif dataset_version != run_hash:
        description = (
            f"the run scored data hashed {run_hash[:12]}, the dataset asset recorded "
            f"{dataset_version[:12]}: the file changed since; re-materialize dataset"
        )
    else:
        description = f"dataset {run_hash[:12]}"
    return dg.AssetCheckResult(
        check_name="dataset_hash_matches",
        passed=dataset_version == run_hash,
        description=description,
        metadata={"run_dataset_hash": run_hash, "dataset_data_version": dataset_version or ""},
    )


def agent_stop_check(summary: RunSummary, settings: GradetrailResource) -> dg.AssetCheckResult:
    n = summary.samples
    stopped: dict[str, int] = {mode: summary.failure_modes.get(mode, 0) for mode in AGENT_STOPS}
    rate = _rate(sum(stopped.values()), n)
    limit = settings.max_agent_stop_rate
    return dg.AssetCheckResult(
        check_name="agent_stop_rate",
        passed=rate <= limit,
        description=(
            f"{stopped['thrash']} thrash + {stopped['budget_exhausted']} over the step budget "
            f"of {n} samples: {rate:.4f} (threshold {limit:g})"
        ),
        metadata={"rate": rate, **stopped, "n": n, "threshold": limit},
    )


def score_checks(
    summary: RunSummary,
    manifest: Manifest,
    settings: GradetrailResource,
    dataset_version: str | None,
    *,
    agent: bool = False,
    calibrations: Sequence[Calibration] = (),
) -> list[dg.AssetCheckResult]:
    n = summary.samples
    errors = summary.outcomes.get("provider_error", 0)
    truncated = summary.failure_modes.get("truncated", 0)
    error_rate, truncation_rate = _rate(errors, n), _rate(truncated, n)
    judges = judge_error_rates(summary)
    worst = max(judges.items(), key=lambda kv: kv[1]["rate"], default=None)
    worst_rate = float(worst[1]["rate"]) if worst else 0.0
    limit = settings.max_judge_error_rate
    return [
        dg.AssetCheckResult(
            check_name="provider_error_rate",
            passed=error_rate <= settings.max_provider_error_rate,
            metadata={"rate": error_rate, "errors": errors, "n": n,
                      "threshold": settings.max_provider_error_rate},
        ),
        dg.AssetCheckResult(
            check_name="truncation_rate",
            passed=truncation_rate <= settings.max_truncation_rate,
            metadata={"rate": truncation_rate, "truncated": truncated, "n": n,
                      "threshold": settings.max_truncation_rate},
        ),
        dg.AssetCheckResult(
            check_name="judge_error_rate",
            passed=worst_rate <= limit,
            description=(
                "no judge scorer" if worst is None
                else f"worst: {worst[0]} at {worst_rate:.4f} (threshold {limit:g})"
            ),
            metadata={"rate": worst_rate, "threshold": limit,
                      "scorers": dg.MetadataValue.json(judges),
                      "judge_call_errors": summary.judge.errors},
        ),
        served_model_check(manifest),
        dataset_check(manifest, dataset_version),
        judge_agreement_check(calibrations, settings.min_judge_kappa),
        *([agent_stop_check(summary, settings)] if agent else []),
    ]  # fmt: skip
