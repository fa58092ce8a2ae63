"""The asset graph of one spec: dataset → responses → scores → stats → report.

Every asset is partitioned by model (a dynamic partition per model name). Code versions
make staleness honest: `responses` covers only what enters the target's requests, `scores`
covers every scorer (its config, a judge's prompt file and model, a Python scorer's
source, a schema file), and each asset reports a content hash of its output as its data
version. A judge's calls are made by `scores`, so a judge edit re-materializes scores and
never responses. The engine does the work; these functions only orchestrate and describe it.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg

from gradetrail_assets.checks import (
    check_specs,
    latest_data_version,
    latest_materialization,
    score_checks,
)
from gradetrail_assets.leaderboard import build_leaderboard, leaderboard_metadata
from gradetrail_assets.metadata import (
    FirstFailures,
    responses_metadata,
    scores_metadata,
    stats_metadata,
    viewer_metadata,
)
from gradetrail_assets.names import dagster_name, job_name, partitions_name, release_job_name
from gradetrail_assets.resources import GradetrailResource
from gradetrail_assets.tables import (
    SCORE_COLUMNS,
    STATS_COLUMNS,
    score_rows,
    stats_rows,
)
from gradetrail_lib.analysis.calibration import run_calibrations
from gradetrail_lib.analysis.stats import run_stats
from gradetrail_lib.backends.not_sent import NotSent
from gradetrail_lib.datasets.materialized import write_rows
from gradetrail_lib.engine.api import plan_spec
from gradetrail_lib.engine.fetch import FetchedRun, fetch_run
from gradetrail_lib.engine.plan import RunPlan, batch_samples, entry_field, load_spec_dataset
from gradetrail_lib.engine.run import RunOptions, run_model
from gradetrail_lib.engine.until_decided import DecidedRuns, run_until_decided
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import hash_json, sha256_hex
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.models import model_from_value
from gradetrail_lib.providers.pricing import LOCAL_COST, load_prices
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.report.html import write_report
from gradetrail_lib.results.runs import RESULTS_FILE, load_run
from gradetrail_lib.results.text import markdown_text
from gradetrail_lib.results.trace import iter_records
from gradetrail_lib.spec.identity import dataset_media_hash, scorer_hash, spec_requests_hash
from gradetrail_lib.spec.prompts import media_digest
from gradetrail_lib.spec.spec import LoadedSpec

DB_POOL = "gradetrail_duckdb"
# Under the results root: the rows of specs whose dataset is another asset.
DATASETS_DIR = ".datasets"
STEPS = ("dataset", "responses", "scores", "stats", "report")
# Bumped by hand when the statistics or the report template change meaning.
STATS_VERSION = "stats-2"  # 2: figures per scorer
REPORT_VERSION = "report-3"  # 2: every scorer, a judge's calls apart; 3: agents' steps

# Carries an edit down the graph tick by tick: Dagster's staleness goes one edge deep.
PROPAGATE = dg.AutomationCondition.eager() | dg.AutomationCondition.code_version_changed()


def new_model_condition(model: dg.AssetKey) -> dg.AutomationCondition:  # type: ignore[type-arg]
    """`responses` of a spec with a model from another asset: requested when its
    partition's `model` asset has a new data version (a new value: another checkpoint),
    not when it is materialized again with the same one, nor when only `dataset` changes
    (a new dataset leaves responses stale for a person or a schedule, as elsewhere)."""
    changed = dg.AutomationCondition.any_deps_match(
        dg.AutomationCondition.data_version_changed()
    ).allow(dg.AssetSelection.assets(model))
    return (
        changed.since_last_handled()
        & ~dg.AutomationCondition.any_deps_missing()
        & ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("new model")


class SpecGraph:
    """A spec's assets and its job, which materializes them for one model partition."""

    def __init__(
        self,
        spec: LoadedSpec,
        partitions: dg.DynamicPartitionsDefinition,
        assets: list[dg.AssetsDefinition],
    ) -> None:
        self.spec = spec
        self.partitions = partitions
        self.assets = assets
        # Built here so that mypy infers the job's type: Dagster does not export the name
        # of what define_asset_job returns (UnresolvedAssetJobDefinition) publicly.
        release = dg.AssetKey([dagster_name(spec.spec.name), "release"])
        selection: dg.AssetSelection = dg.AssetSelection.groups(dagster_name(spec.spec.name))
        if incumbent_of(spec) is not None:
            # The release check is a job of its own (below), never part of an evaluation.
            selection = selection - dg.AssetSelection.assets(release)
        self.job = dg.define_asset_job(
            job_name(spec.spec.name),
            selection=selection,
            description=f"Evaluate spec {spec.spec.name} for one model partition.",
        )
        # A spec whose `watch` names an incumbent checks a release against it, until
        # decided, rather than evaluating it on every case.
        self.release_job = None
        if incumbent_of(spec) is not None:
            self.release_job = dg.define_asset_job(
                release_job_name(spec.spec.name),
                selection=dg.AssetSelection.assets(release),
                description=f"Check a release (the partition's model) against "
                f"{incumbent_of(spec)} on spec {spec.spec.name}, until decided.",
            )

    @property
    def jobs(self) -> list[Any]:
        return [self.job] + ([self.release_job] if self.release_job is not None else [])

    def key(self, step: str) -> dg.AssetKey:
        return dg.AssetKey([dagster_name(self.spec.spec.name), step])


def incumbent_of(loaded: LoadedSpec) -> str | None:
    watch = loaded.spec.watch
    return watch.incumbent if watch is not None else None


def _usd_metadata(usd: float | None, *, local: bool) -> Any:
    """A float Dagster plots; text where there is no figure: a local model's no price, or
    an unknown one."""
    if local:
        return dg.MetadataValue.text(LOCAL_COST)
    if usd is None:
        return dg.MetadataValue.text("unknown (no price)")
    return dg.MetadataValue.float(usd)


def release_metadata(decided: DecidedRuns) -> dict[str, Any]:
    """The release check's verdict, its method, the cases used and what it cost."""
    d = decided.decision
    winner = {
        "B": decided.challenger.manifest.model.requested,
        "A": decided.incumbent.manifest.model.requested,
    }.get(d.verdict)
    return {
        "verdict": dg.MetadataValue.text(d.verdict if winner is None else f"{d.verdict}: {winner}"),
        "summary": dg.MetadataValue.md(markdown_text(decided.describe())),
        "method": dg.MetadataValue.text(d.method),
        "samples_used": dg.MetadataValue.int(d.cases),
        "samples_available": dg.MetadataValue.int(d.available),
        "difference": dg.MetadataValue.float(d.difference),
        "sequence_low": dg.MetadataValue.float(d.low),
        "sequence_high": dg.MetadataValue.float(d.high),
        "cost_usd": _usd_metadata(decided.cost_usd, local=decided.local),
        "saved_usd": _usd_metadata(decided.saved_usd, local=decided.local),
        "incumbent_run": dg.MetadataValue.path(str(decided.incumbent.run_dir)),
        "challenger_run": dg.MetadataValue.path(str(decided.challenger.run_dir)),
        "sequential": dg.MetadataValue.json(decided.sequential()),
    }


def _plan_for(loaded: LoadedSpec, model: str | ModelConfig) -> RunPlan:
    """The partition's plan (its model's name, or the model an asset's value resolved
    to), made the way every run's is (`plan_spec`)."""
    (planned,) = plan_spec(loaded, [model]).plans
    return planned


def _dataset_result(loaded: LoadedSpec) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """The dataset asset's materialization: every row checked as it is read, none kept
    (`len` would hold every sample); its content hash is the data version."""
    loaded_dataset = load_spec_dataset(loaded)
    samples = sum(1 for _ in loaded_dataset.validated())
    # A spec showing images or documents: the data version covers those files too, so
    # editing one makes the dataset (and what reads it) stale, as the run identity does.
    media = media_digest(
        loaded.spec, loaded_dataset, loaded_dataset.path.parent, loaded.spec.dataset.label
    )
    version = dataset_media_hash(loaded_dataset.content_hash, media)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(version),
        metadata={
            "samples": dg.MetadataValue.int(samples),
            "content_hash": dg.MetadataValue.text(loaded_dataset.content_hash),
            "path": dg.MetadataValue.path(str(loaded_dataset.path)),
        },
    )


def upstream_key(loaded: LoadedSpec) -> dg.AssetKey | None:
    """The asset whose value is the spec's dataset (`dataset: {asset: KEY}`), if any."""
    asset = loaded.spec.dataset.asset
    return None if asset is None else dg.AssetKey.from_user_string(asset)


def with_materialized_dataset(
    loaded: LoadedSpec, instance: dg.DagsterInstance, dataset: dg.AssetKey, partition: str
) -> LoadedSpec:
    """The spec as a step plans it: an asset dataset's rows are the file the `dataset`
    asset last wrote for this partition (its metadata's `path`)."""
    if loaded.spec.dataset.asset is None:
        return loaded
    path = _materialized(
        instance, dataset, partition, "path", dg.PathMetadataValue,
        reads=f"asset {loaded.spec.dataset.asset}",
    )  # fmt: skip
    return loaded.model_copy(update={"dataset_file": Path(path.path)})


_V = TypeVar("_V", bound=dg.MetadataValue)


def _materialized(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    partition: str,
    entry: str,
    kind: type[_V],
    *,
    reads: str,
) -> _V:
    """The metadata entry `entry` of the latest materialization of `key`'s partition; a
    step fails, saying what to materialize, when there is none."""
    materialization = latest_materialization(instance, key, partition)
    value = materialization.metadata.get(entry) if materialization is not None else None
    if not isinstance(value, kind):
        raise dg.Failure(
            description=f"{key.to_user_string()} has no materialization of partition "
            f"{partition!r}: materialize it first (it reads {reads})"
        )
    return value


def model_upstreams(loaded: LoadedSpec) -> dict[str, dg.AssetKey]:
    """The assets whose values are the spec's models (entries with `asset:`), by the
    partition (the entry's name)."""
    return {
        m.name: dg.AssetKey.from_user_string(m.asset)
        for m in loaded.spec.models
        if m.asset is not None
    }


def resolve_model(loaded: LoadedSpec, partition: str, values: dict[str, Any]) -> ModelConfig:
    """The partition's model: an entry with `asset:` read from that asset's value (in
    `values`, by asset key), any other the spec's."""
    entry = loaded.spec.model_named(partition)
    if entry.asset is None:
        return entry
    value = values[dg.AssetKey.from_user_string(entry.asset).to_user_string()]
    field = entry_field(loaded, entry)
    try:
        return model_from_value(entry, value, where=str(loaded.path), field=field)
    except InputError as exc:
        raise dg.Failure(description=str(exc)) from None


def with_resolved_model(
    loaded: LoadedSpec, instance: dg.DagsterInstance, model: dg.AssetKey, partition: str
) -> str | ModelConfig:
    """What a step plans the partition with: its name, or, for an entry with `asset:`,
    the model the spec's `model` asset last resolved for it (its metadata's `model`)."""
    if partition not in model_upstreams(loaded):
        return partition
    value = _materialized(
        instance, model, partition, "model", dg.JsonMetadataValue,
        reads=f"the model from asset {loaded.spec.model_named(partition).asset}",
    )  # fmt: skip
    return ModelConfig.model_validate(value.data)


def build_spec_graph(loaded: LoadedSpec) -> SpecGraph:
    spec = loaded.spec
    name = dagster_name(spec.name)
    partitions = dg.DynamicPartitionsDefinition(name=partitions_name(spec.name))
    keys = {step: dg.AssetKey([name, step]) for step in STEPS}
    # An agent (a spec with tools): the same graph, its failure modes counted and checked.
    agent = spec.tools is not None
    common: dict[str, Any] = {"group_name": name, "partitions_def": partitions}
    upstream = upstream_key(loaded)
    models_from = model_upstreams(loaded)
    model_key = dg.AssetKey([name, "model"])

    def planned(context: dg.AssetExecutionContext) -> RunPlan:
        """The partition's plan, an asset dataset read as `dataset` last wrote it, an
        asset's model as `model` last resolved it."""
        partition = context.partition_key
        current = with_materialized_dataset(loaded, context.instance, keys["dataset"], partition)
        return _plan_for(
            current, with_resolved_model(loaded, context.instance, model_key, partition)
        )

    if upstream is None:

        @dg.asset(
            key=keys["dataset"],
            code_version=load_spec_dataset(loaded).content_hash,
            description=f"The samples of `{spec.dataset.label}`, validated and content-hashed.",
            **common,
        )
        def dataset(context: dg.AssetExecutionContext) -> dg.MaterializeResult:  # type: ignore[type-arg]
            return _dataset_result(loaded)

    else:
        # Another asset's value, as its IO manager loads it: rows written to a file named
        # by their hash, whose content hash is the data version, so the same rows again
        # leave `responses` fresh and others make it stale. Eager: the upstream asset's
        # new materialization is followed by Dagster's own automation.
        @dg.asset(
            key=keys["dataset"],
            ins={"rows": dg.AssetIn(upstream)},
            code_version=hash_json({"asset": spec.dataset.asset, "id": spec.dataset.id_field}),
            automation_condition=dg.AutomationCondition.eager(),
            description=f"The rows of asset `{spec.dataset.asset}`, validated and "
            "content-hashed (written under the results root's `.datasets`).",
            **common,
        )
        def dataset(
            context: dg.AssetExecutionContext, gradetrail: GradetrailResource, rows: Any
        ) -> dg.MaterializeResult:  # type: ignore[type-arg]
            folder = gradetrail.results_root() / DATASETS_DIR / name
            path = write_rows(rows, folder, f"asset {spec.dataset.asset}")
            return _dataset_result(loaded.model_copy(update={"dataset_file": path}))

    model_assets: list[dg.AssetsDefinition] = []
    if models_from:
        # Another asset's value is a model of the spec (a fine-tuning job's served
        # checkpoint): resolved here, per partition, into a model like any other, whose
        # hash is the data version, so only a partition whose model changed turns its
        # responses stale. Eager: it follows the upstream's new materializations.
        inputs = {f"upstream_{i}": key for i, key in enumerate(dict.fromkeys(models_from.values()))}

        @dg.asset(
            key=model_key,
            ins={arg: dg.AssetIn(key) for arg, key in inputs.items()},
            code_version=hash_json(
                [m.model_dump(mode="json", exclude_none=True) for m in spec.models]
            ),
            automation_condition=dg.AutomationCondition.eager(),
            description="The partition's model: for "
            + ", ".join(f"`{p}`" for p in models_from)
            + " the value of "
            + ", ".join(f"`{k.to_user_string()}`" for k in dict.fromkeys(models_from.values()))
            + " (provider/name and endpoint), for the others the spec's entry.",
            **common,
        )
        def model(context: dg.AssetExecutionContext, **values: Any) -> dg.MaterializeResult:  # type: ignore[type-arg]
            by_key = {inputs[arg].to_user_string(): value for arg, value in values.items()}
            resolved = resolve_model(loaded, context.partition_key, by_key)
            dumped = resolved.model_dump(mode="json", exclude_none=True)
            return dg.MaterializeResult(
                data_version=dg.DataVersion(hash_json(dumped)),
                metadata={
                    "model": dg.MetadataValue.json(dumped),
                    "provider_model": dg.MetadataValue.text(f"{resolved.provider}/{resolved.name}"),
                },
            )

        model_assets.append(model)

    @dg.asset(
        key=keys["responses"],
        deps=[keys["dataset"], *([model_key] if models_from else [])],
        code_version=spec_requests_hash(loaded),
        automation_condition=new_model_condition(model_key) if models_from else None,
        description=(
            "Model responses, memoized by request key in the response cache: only cache misses "
            "call the provider, each response is stored as it arrives. An agent's (a spec "
            "with tools): every step of every case, its tools run here."
        ),
        **common,
    )
    def responses(
        context: dg.AssetExecutionContext, gradetrail: GradetrailResource
    ) -> dg.Output[FetchedRun]:
        eval_plan = planned(context)
        # By batch (the resource's setting or the run's tag, as the nightly schedule's):
        # the batch ids are logged as they are submitted and the step waits for them; a
        # re-materialization after a crash resumes the batches the cache recorded.
        mode = gradetrail.batch_mode(context.run.tags)
        fetched = fetch_run(
            eval_plan, gradetrail.cache(), gradetrail.make_backend(),
            batch=mode, batch_options=gradetrail.batch_options(context.log.info),
        )  # fmt: skip
        context.log.info(
            f"{fetched.cache_hits} cache hits, {fetched.calls} provider calls, "
            f"{len(fetched.errors)} errors"
        )
        # What scores reads is in the cache, by request key: the output is the counts
        # and the errors (which the cache does not keep), not the responses.
        return dg.Output(
            fetched,
            data_version=dg.DataVersion(fetched.fingerprint),
            metadata=responses_metadata(
                fetched, local=registry.runs_locally(eval_plan.model.provider)
            ),
        )

    @dg.asset(
        key=keys["scores"],
        ins={"responses": dg.AssetIn(keys["responses"])},
        code_version=scorer_hash(loaded),
        automation_condition=PROPAGATE,
        pool=DB_POOL,
        check_specs=check_specs(keys["scores"], agent=agent),
        description=(
            "Every response scored by every scorer of the spec; a judge's calls are made "
            "here (through the response cache), never by `responses`. Writes the run "
            "directory and the `scores` table (a row per sample and scorer)."
        ),
        **common,
    )
    def scores(
        context: dg.AssetExecutionContext,
        gradetrail: GradetrailResource,
        responses: FetchedRun,
    ) -> Iterator[dg.Output[str] | dg.AssetCheckResult]:
        partition = context.partition_key
        eval_plan = planned(context)
        # The target's answers come from the cache (responses put them there); none is
        # sent from here, and what responses could not get keeps its error.
        options = RunOptions(
            prices=load_prices(),
            phase_seconds={"responses": responses.wall_s},
            targets=NotSent(responses.errors),
            already_sent=responses.sent,
            history=gradetrail.history(),
            # The judges' calls by batch when the run's mode is `all`.
            batch=gradetrail.batch_mode(context.run.tags),
            batch_options=gradetrail.batch_options(context.log.info),
        )
        done = run_model(
            eval_plan, gradetrail.cache(), gradetrail.make_backend(), gradetrail.results_root(),
            options,
        )  # fmt: skip
        judge = done.summary.judge
        context.log.info(
            f"judge calls: {judge.calls} sent, {judge.cache_hits} cache hits, "
            f"{judge.errors} failed; {done.summary.judge_error_count} judge errors (no "
            "usable grade); no target call (responses made them)"
        )
        # The table's rows from the records as the run directory holds them, a batch at
        # a time (none of the run's records in memory), the failures shown kept on the way.
        failures = FirstFailures()
        rebuilt = gradetrail.tables().replace_partition(
            "scores", SCORE_COLUMNS, spec.name, partition,
            lambda: score_rows(
                spec.name, partition, done.manifest,
                failures.watch(iter_records(done.run_dir / RESULTS_FILE)),
            ),
        )  # fmt: skip
        if rebuilt:
            context.log.warning("the scores table had an older layout; it was rebuilt")
        # The judges measured against the human labels on these responses, if any.
        calibrations = run_calibrations(done.run_dir)
        # The run directory is what the steps downstream read; its name holds the
        # identity, which the data version covers with the records.
        yield dg.Output(
            str(done.run_dir),
            data_version=dg.DataVersion(
                hash_json(
                    {
                        "records": done.history.fingerprint,  # computed once, for both
                        "identity": done.manifest.identity,
                    }
                )
            ),
            metadata=scores_metadata(
                done.summary, failures.records, done.manifest, str(done.run_dir), agent=agent,
                calibrations=calibrations,
            ),
        )  # fmt: skip
        dataset_version = latest_data_version(context.instance, keys["dataset"], partition)
        yield from score_checks(
            done.summary, done.manifest, gradetrail, dataset_version, agent=agent,
            calibrations=calibrations,
        )  # fmt: skip

    @dg.asset(
        key=keys["stats"],
        ins={"scores": dg.AssetIn(keys["scores"])},
        code_version=STATS_VERSION,
        automation_condition=PROPAGATE,
        pool=DB_POOL,
        description="Per scorer: pass rate and mean score with intervals and n; outcomes, "
        "tokens, cost, latency percentiles; writes the `stats` table (a row per scorer).",
        **common,
    )
    def stats(
        context: dg.AssetExecutionContext, gradetrail: GradetrailResource, scores: str
    ) -> dg.Output[str]:
        run = load_run(Path(scores))
        # Its records streamed once, none held, each batch's calls counted as the run did.
        repeats = run.manifest.repeats
        totals = run.totals(batch_samples(repeats) * repeats)
        figures = {name: run_stats(totals, name) for name in run.manifest.scorer_names}
        rebuilt = gradetrail.tables().replace_partition(
            "stats", STATS_COLUMNS, spec.name, context.partition_key,
            stats_rows(spec.name, context.partition_key, run, figures, totals),
        )  # fmt: skip
        if rebuilt:
            context.log.warning("the stats table had an older layout; it was rebuilt")
        return dg.Output(
            scores,
            data_version=dg.DataVersion(
                hash_json(
                    {
                        "identity": run.manifest.identity,
                        "stats": {name: f.to_json() for name, f in figures.items()},
                    }
                )
            ),
            metadata=stats_metadata(
                figures,
                run.manifest.primary_scorer,
                target=totals.target.totals(),
                judge=totals.judge.totals(),
                agent=agent,
            ),
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
                **viewer_metadata(stats),
            },
        )

    @dg.asset(
        key=dg.AssetKey([name, "leaderboard"]),
        group_name=name,
        deps=[dg.AssetDep(keys["stats"], partition_mapping=dg.AllPartitionMapping())],
        automation_condition=dg.AutomationCondition.eager(),
        pool=DB_POOL,
        description="Every model of the spec ranked by the primary scorer's pass rate, with "
        "intervals, n, the other scorers' pass rates, and paired verdicts on the primary "
        "scorer between them (paired interval and test: exact McNemar, or a sign-flip "
        "test over cases with repeats).",
    )
    def leaderboard(gradetrail: GradetrailResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
        board = build_leaderboard(gradetrail.tables().read_stats(spec.name), spec.primary_scorer)
        return dg.MaterializeResult(
            data_version=dg.DataVersion(hash_json(board)),
            metadata=leaderboard_metadata(board),
        )

    built = [dataset, *model_assets, responses, scores, stats, report, leaderboard]
    incumbent = incumbent_of(loaded)
    if incumbent is not None:

        @dg.asset(
            key=dg.AssetKey([name, "release"]),
            deps=[keys["dataset"]],
            pool=DB_POOL,
            description=f"The partition's model (a release) against the incumbent "
            f"`{incumbent}` on the spec's cases in a seeded random order, a chunk at a time, "
            "until an anytime-valid confidence sequence on their mean difference decides "
            "(betting-cs-wsr-2024): the challenger or the incumbent better, equivalent, or "
            "undecided when the cases run out. Only the cases sent are paid; the two run "
            "directories hold them.",
            **common,
        )
        def release(
            context: dg.AssetExecutionContext, gradetrail: GradetrailResource
        ) -> dg.MaterializeResult:  # type: ignore[type-arg]
            challenger = context.partition_key
            if challenger == incumbent:
                raise dg.Failure(description=f"{challenger} is the incumbent: nothing to check")
            decided = run_until_decided(
                _plan_for(loaded, incumbent), _plan_for(loaded, challenger),
                gradetrail.cache(), gradetrail.make_backend(), gradetrail.results_root(),
            )  # fmt: skip
            context.log.info(decided.describe())
            return dg.MaterializeResult(
                data_version=dg.DataVersion(hash_json(decided.sequential())),
                metadata=release_metadata(decided),
            )

        built.append(release)
    return SpecGraph(loaded, partitions, built)
