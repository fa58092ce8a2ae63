"""The asset graph of one spec: dataset → responses → scores → stats → report.

Every asset is partitioned by model (a dynamic partition per model name). Code versions
make staleness honest: `responses` covers only what enters the requests, `scores` covers
the scorer, and each asset reports a content hash of its output as its data version.
The engine does the work; these functions only orchestrate and describe it.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)
from dagster_duckdb import DuckDBResource

from gradetrail_assets.metadata import responses_metadata, scores_metadata
from gradetrail_assets.names import dagster_name, job_name, partitions_name
from gradetrail_assets.resources import GradetrailResource
from gradetrail_assets.tables import SCORE_COLUMNS, replace_partition, score_rows
from gradetrail_lib.identity import (
    responses_fingerprint,
    rows_fingerprint,
    run_identity,
    scorer_hash,
    spec_requests_hash,
)
from gradetrail_lib.pipeline import EvalPlan, Responses, fetch_responses, load_spec_dataset, plan
from gradetrail_lib.run import complete_run
from gradetrail_lib.spec import LoadedSpec

DB_POOL = "gradetrail_duckdb"

# Carries an edit down the graph tick by tick: Dagster's staleness goes one edge deep.
PROPAGATE = dg.AutomationCondition.eager() | dg.AutomationCondition.code_version_changed()


@dataclass(frozen=True)
class SpecGraph:
    spec: LoadedSpec
    partitions: dg.DynamicPartitionsDefinition
    assets: list[dg.AssetsDefinition]
    job: UnresolvedAssetJobDefinition

    def key(self, step: str) -> dg.AssetKey:
        return dg.AssetKey([dagster_name(self.spec.spec.name), step])


def _plan_for(loaded: LoadedSpec, model_name: str) -> EvalPlan:
    return plan(loaded, loaded.spec.model(model_name))


def build_spec_graph(loaded: LoadedSpec) -> SpecGraph:
    spec = loaded.spec
    name = dagster_name(spec.name)
    partitions = dg.DynamicPartitionsDefinition(name=partitions_name(spec.name))
    dataset_hash = load_spec_dataset(loaded).content_hash
    keys = {step: dg.AssetKey([name, step]) for step in ("dataset", "responses", "scores")}
    common: dict[str, Any] = {"group_name": name, "partitions_def": partitions}

    @dg.asset(
        key=keys["dataset"],
        code_version=dataset_hash,
        description=f"The samples of `{spec.dataset.path}`, validated and content-hashed.",
        **common,
    )
    def dataset(context: dg.AssetExecutionContext) -> dg.MaterializeResult:  # type: ignore[type-arg]
        loaded_dataset = load_spec_dataset(loaded)
        return dg.MaterializeResult(
            data_version=dg.DataVersion(loaded_dataset.content_hash),
            metadata={
                "samples": dg.MetadataValue.int(len(loaded_dataset)),
                "content_hash": dg.MetadataValue.text(loaded_dataset.content_hash),
                "path": dg.MetadataValue.path(str(loaded_dataset.path)),
            },
        )

    @dg.asset(
        key=keys["responses"],
        deps=[keys["dataset"]],
        code_version=spec_requests_hash(loaded),
        description=(
            "Model responses, memoized by request key in the response cache: only cache misses "
            "call the provider, each response is stored as it arrives."
        ),
        **common,
    )
    def responses(
        context: dg.AssetExecutionContext, gradetrail: GradetrailResource
    ) -> dg.Output[Responses]:
        eval_plan = _plan_for(loaded, context.partition_key)
        fetched = fetch_responses(eval_plan, gradetrail.cache(), gradetrail.make_backend())
        context.log.info(
            f"{len(fetched.cache_hits)} cache hits, {fetched.calls} provider calls, "
            f"{len(fetched.errors)} errors"
        )
        return dg.Output(
            fetched,
            data_version=dg.DataVersion(responses_fingerprint(fetched)),
            metadata=responses_metadata(fetched, len(eval_plan.items)),
        )

    check_names = ("provider_error_rate", "truncation_rate", "identity_recorded")

    @dg.asset(
        key=keys["scores"],
        ins={"responses": dg.AssetIn(keys["responses"])},
        code_version=scorer_hash(loaded),
        automation_condition=PROPAGATE,
        pool=DB_POOL,
        check_specs=[dg.AssetCheckSpec(c, asset=keys["scores"]) for c in check_names],
        description="Every response scored; writes the run directory and the `scores` table.",
        **common,
    )
    def scores(
        context: dg.AssetExecutionContext,
        gradetrail: GradetrailResource,
        duckdb: DuckDBResource,
        responses: Responses,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        eval_plan = _plan_for(loaded, context.partition_key)
        done = complete_run(eval_plan, responses, gradetrail.results_root())
        identity = done.manifest["identity"]
        replace_partition(
            duckdb, "scores", SCORE_COLUMNS, spec.name, context.partition_key,
            score_rows(spec.name, context.partition_key, identity, done.rows),
        )  # fmt: skip
        return dg.MaterializeResult(
            data_version=dg.DataVersion(rows_fingerprint(done.rows)),
            metadata=scores_metadata(done.summary, done.rows, done.manifest, str(done.run_dir)),
            check_results=_checks(eval_plan, done.summary.samples, done.summary, done.manifest,
                                  gradetrail),
        )  # fmt: skip

    job = dg.define_asset_job(
        job_name(spec.name),
        selection=dg.AssetSelection.groups(name),
        description=f"Evaluate spec {spec.name} for one model partition.",
    )
    return SpecGraph(loaded, partitions, [dataset, responses, scores], job)


def _checks(
    eval_plan: EvalPlan,
    n: int,
    summary: Any,
    manifest: dict[str, Any],
    settings: GradetrailResource,
) -> list[dg.AssetCheckResult]:
    errors = summary.outcomes.get("provider_error", 0)
    truncated = summary.failure_modes.get("truncated", 0)
    error_rate = errors / n if n else 0.0
    truncation_rate = truncated / n if n else 0.0
    expected_identity = run_identity(eval_plan.loaded, eval_plan.dataset.content_hash)
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
            check_name="identity_recorded",
            passed=manifest.get("identity") == expected_identity,
            metadata={"identity": manifest.get("identity", ""), "expected": expected_identity},
        ),
    ]  # fmt: skip


def run_dir_of(loaded: LoadedSpec, settings: GradetrailResource, model: str) -> Path:
    from gradetrail_lib.rundir import run_dir_name

    identity = run_identity(loaded, load_spec_dataset(loaded).content_hash)
    return settings.results_root() / run_dir_name(loaded.spec.name, model, identity)
