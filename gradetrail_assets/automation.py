"""Schedules and sensors: nightly runs, partition registration, new model releases."""

import json
import os

import dagster as dg

from gradetrail_assets.factory import SpecGraph
from gradetrail_assets.names import dagster_name
from gradetrail_assets.resources import BATCH_TAG
from gradetrail_lib.providers.model_listing import ListingError, list_models, matching

DEFAULT_CRON = "0 2 * * *"


def nightly_batch() -> str:
    """How the nightly runs send their misses: by batch (half price; a nightly eval can
    wait for it) unless GRADETRAIL_NIGHTLY_BATCH=0."""
    off = os.environ.get("GRADETRAIL_NIGHTLY_BATCH", "1").strip().lower() in (
        "0",
        "off",
        "no",
        "false",
    )
    return "off" if off else "all"


def build_nightly_schedule(graph: SpecGraph) -> dg.ScheduleDefinition:
    """Requests every model partition of the spec once a night (cron and zone
    configurable), by batch by default (`nightly_batch`: the run's `gradetrail/batch` tag)."""
    name = dagster_name(graph.spec.spec.name)
    partitions = graph.partitions
    batch = nightly_batch()

    @dg.schedule(
        name=f"{name}__nightly",
        cron_schedule=os.environ.get("GRADETRAIL_NIGHTLY_CRON", DEFAULT_CRON),
        execution_timezone=os.environ.get("GRADETRAIL_NIGHTLY_TZ", "UTC"),
        job=graph.job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Nightly evaluation of every model of spec {graph.spec.spec.name}.",
    )
    def nightly(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        tick = context.scheduled_execution_time
        stamp = tick.isoformat() if tick else "unscheduled"
        keys = context.instance.get_dynamic_partitions(partitions.name or "")
        # The run key makes a retried tick idempotent: one run per partition per night.
        return [
            dg.RunRequest(
                run_key=f"{name}:{key}:{stamp}", partition_key=key, tags={BATCH_TAG: batch}
            )
            for key in keys
        ]

    return nightly


def build_partition_sensor(graphs: list[SpecGraph]) -> dg.SensorDefinition:
    """Registers each model a spec lists as a partition (no network, no runs)."""

    @dg.sensor(
        name="gradetrail_spec_models",
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Adds the models that specs list as partitions of their graphs.",
    )
    def spec_models(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        requests = []
        for graph in graphs:
            name = graph.partitions.name or ""
            existing = set(context.instance.get_dynamic_partitions(name))
            missing = [m.name for m in graph.spec.spec.models if m.name not in existing]
            if missing:
                requests.append(graph.partitions.build_add_request(missing))
        if not requests:
            return dg.SkipReason("every listed model is already a partition")
        return dg.SensorResult(dynamic_partitions_requests=requests)

    return spec_models


def build_release_sensor(graphs: list[SpecGraph]) -> dg.SensorDefinition:
    """Polls the model listings of specs that `watch` a provider; evaluates new matches
    (with `watch.incumbent`: checks each against the incumbent until decided).

    The first tick for a spec records what is listed as already seen: the sensor evaluates
    releases, not the back catalogue (list those models in the spec to evaluate them).
    """
    watching = [g for g in graphs if g.spec.spec.watch is not None]

    @dg.sensor(
        name="gradetrail_model_releases",
        jobs=[g.release_job or g.job for g in watching] or None,
        minimum_interval_seconds=int(os.environ.get("GRADETRAIL_RELEASE_POLL_S", "900")),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Adds and evaluates new models that match a spec's watch pattern.",
    )
    def model_releases(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        seen: dict[str, list[str]] = json.loads(context.cursor) if context.cursor else {}
        partition_requests = []
        run_requests: list[dg.RunRequest] = []
        problems = []
        for graph in watching:
            spec = graph.spec.spec
            assert spec.watch is not None
            try:
                listed = matching(spec.watch, list_models(spec.watch))
            except ListingError as exc:
                problems.append(f"{spec.name}: {exc}")
                continue
            first_look = spec.name not in seen
            known = set(seen.get(spec.name, [])) | {m.name for m in spec.models}
            new = [] if first_look else [m for m in listed if m not in known]
            seen[spec.name] = sorted(set(seen.get(spec.name, [])) | set(listed))
            if new:
                partition_requests.append(graph.partitions.build_add_request(new))
                # With an incumbent (`watch.incumbent`) the release is checked against
                # it until decided; without, evaluated on every case.
                job = graph.release_job or graph.job
                run_requests.extend(
                    dg.RunRequest(
                        run_key=f"{spec.name}:{model}:release",
                        job_name=job.name,
                        partition_key=model,
                        tags={"gradetrail/trigger": "model_release"},
                    )
                    for model in new
                )
        for problem in problems:
            context.log.warning(f"model listing failed: {problem}")
        if not run_requests and problems:
            return dg.SkipReason("model listing failed: " + "; ".join(problems))
        return dg.SensorResult(
            run_requests=run_requests,
            dynamic_partitions_requests=partition_requests,
            cursor=json.dumps(seen, sort_keys=True),
        )

    return model_releases
