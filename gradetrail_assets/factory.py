"""The asset graph of one spec: dataset → responses → scores → stats → report.

Every asset is partitioned by model (a dynamic partition per model name). Code versions
make staleness honest: `responses` covers only what enters the requests, `scores` covers
the scorer, and each asset reports a content hash of its output as its data version.
The engine does the work; these functions only orchestrate and describe it.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)
from dagster_duckdb import DuckDBResource

from gradetrail_assets.leaderboard import build_leaderboard, leaderboard_metadata
from gradetrail_assets.metadata import responses_metadata, scores_metadata, stats_metadata
from gradetrail_assets.names import dagster_name, job_name, partitions_name
from gradetrail_assets.resources import GradetrailResource
from gradetrail_assets.tables import (
    SCORE_COLUMNS,
    STATS_COLUMNS,
    read_stats,
    replace_partition,
    score_rows,
    stats_row,
)
from gradetrail_lib.hashing import hash_json, sha256_hex
from gradetrail_lib.identity import (
    responses_fingerprint,
    rows_fingerprint,
    run_identity,
    scorer_hash,
    spec_requests_hash,
)
from gradetrail_lib.pipeline import EvalPlan, Responses, fetch_responses, load_spec_dataset, plan
from gradetrail_lib.report import write_report
from gradetrail_lib.run import complete_run
from gradetrail_lib.runs import load_run
from gradetrail_lib.spec import LoadedSpec
from gradetrail_lib.stats import run_stats
from gradetrail_lib.summary import RunSummary

DB_POOL = "gradetrail_duckdb"
STEPS = ("dataset", "responses", "scores", "stats", "report")
# Bumped by hand when the statistics or the report template change meaning.
STATS_VERSION = "stats-1"
REPORT_VERSION = "report-1"

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
    return plan(loaded, loaded.spec.model_named(model_name))


def build_spec_graph(loaded: LoadedSpec) -> SpecGraph:
    spec = loaded.spec
    name = dagster_name(spec.name)
    partitions = dg.DynamicPartitionsDefinition(name=partitions_name(spec.name))
    dataset_hash = load_spec_dataset(loaded).content_hash
    keys = {step: dg.AssetKey([name, step]) for step in STEPS}
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
    ) -> Iterator[dg.Output[str] | dg.AssetCheckResult]:
        eval_plan = _plan_for(loaded, context.partition_key)
        done = complete_run(eval_plan, responses, gradetrail.results_root())
        identity = done.manifest["identity"]
        replace_partition(
            duckdb, "scores", SCORE_COLUMNS, spec.name, context.partition_key,
            score_rows(spec.name, context.partition_key, identity, done.rows),
        )  # fmt: skip
        # The run directory is what the steps downstream read.
        yield dg.Output(
            str(done.run_dir),
            data_version=dg.DataVersion(rows_fingerprint(done.rows)),
            metadata=scores_metadata(done.summary, done.rows, done.manifest, str(done.run_dir)),
        )
        yield from _checks(eval_plan, done.summary, done.manifest, gradetrail)

    @dg.asset(
        key=keys["stats"],
        ins={"scores": dg.AssetIn(keys["scores"])},
        code_version=STATS_VERSION,
        automation_condition=PROPAGATE,
        pool=DB_POOL,
        description="Pass rate and mean score with intervals and n, outcomes, tokens, cost, "
        "latency percentiles; writes the `stats` table.",
        **common,
    )
    def stats(
        context: dg.AssetExecutionContext, duckdb: DuckDBResource, scores: str
    ) -> dg.Output[str]:
        run = load_run(Path(scores))
        figures = run_stats(run.rows)
        replace_partition(
            duckdb, "stats", STATS_COLUMNS, spec.name, context.partition_key,
            [stats_row(spec.name, context.partition_key, run, figures)],
        )  # fmt: skip
        return dg.Output(
            scores,
            data_version=dg.DataVersion(hash_json(figures.to_json())),
            metadata=stats_metadata(figures),
        )

    @dg.asset(
        key=keys["report"],
        ins={"stats": dg.AssetIn(keys["stats"])},
        code_version=REPORT_VERSION,
        automation_condition=PROPAGATE,
        description="One self-contained HTML report (no scripts, no network) in the run directory.",
        **common,
    )
    def report(stats: str) -> dg.MaterializeResult:  # type: ignore[type-arg]
        path = write_report(Path(stats))
        return dg.MaterializeResult(
            data_version=dg.DataVersion(sha256_hex(path.read_bytes())),
            metadata={
                "report": dg.MetadataValue.path(str(path.resolve())),
                "url": dg.MetadataValue.url(path.resolve().as_uri()),
                "run_dir": dg.MetadataValue.path(stats),
            },
        )

    @dg.asset(
        key=dg.AssetKey([name, "leaderboard"]),
        group_name=name,
        deps=[dg.AssetDep(keys["stats"], partition_mapping=dg.AllPartitionMapping())],
        automation_condition=dg.AutomationCondition.eager(),
        pool=DB_POOL,
        description="Every model of the spec ranked by pass rate, with intervals, n, and "
        "paired verdicts (exact McNemar, bootstrap interval) between them.",
    )
    def leaderboard(duckdb: DuckDBResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
        board = build_leaderboard(read_stats(duckdb, spec.name))
        return dg.MaterializeResult(
            data_version=dg.DataVersion(hash_json(board)),
            metadata=leaderboard_metadata(board),
        )

    job = dg.define_asset_job(
        job_name(spec.name),
        selection=dg.AssetSelection.groups(name),
        description=f"Evaluate spec {spec.name} for one model partition.",
    )
    return SpecGraph(
        loaded, partitions, [dataset, responses, scores, stats, report, leaderboard], job
    )


def _checks(
    eval_plan: EvalPlan,
    summary: RunSummary,
    manifest: dict[str, Any],
    settings: GradetrailResource,
) -> list[dg.AssetCheckResult]:
    n = summary.samples
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
