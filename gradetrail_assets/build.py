"""The one function that builds gradetrail's Dagster definitions: a spec's asset graph
(dataset → responses → scores → stats → report, and the leaderboard) per spec, its job and
nightly schedule, the sensors that register models, evaluate new releases and carry an
edit down the graph, the `gradetrail` resource and the executor.

`GradetrailComponent` (a `dg` project's `defs.yaml`) and `gradetrail_assets.definitions`
(`workspace.yaml`, `dagster dev`) both build through it. A spec that fails to load is
logged with its file and line and shown as a failing `gradetrail/spec_errors` asset; the
other specs load as usual.
"""

import logging
from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from gradetrail_assets.automation import (
    build_nightly_schedule,
    build_partition_sensor,
    build_release_sensor,
)
from gradetrail_assets.discovery import discover, discover_paths, specs_dir
from gradetrail_assets.executors import executor_from_environment
from gradetrail_assets.factory import SpecGraph, build_spec_graph
from gradetrail_assets.resources import GradetrailResource, settings_from_environment
from gradetrail_lib.errors import InputError, InputErrors

log = logging.getLogger("gradetrail_assets")

# What `executor` means when it is not given: GRADETRAIL_DAGSTER_EXECUTOR's.
FROM_ENVIRONMENT = "from_environment"


def _spec_errors_asset(errors: list[str]) -> dg.AssetsDefinition:
    listing = "\n".join(f"- `{e}`" for e in errors)

    @dg.asset(
        key=["gradetrail", "spec_errors"],
        group_name="gradetrail",
        description=f"Specs that did not load:\n\n{listing}",
    )
    def spec_errors() -> None:
        raise dg.Failure(description="Specs did not load:\n" + "\n".join(errors))

    return spec_errors


def build_definitions(
    specs: Path | Sequence[Path] | None = None,
    settings: GradetrailResource | None = None,
    *,
    executor: dg.ExecutorDefinition | None | str = FROM_ENVIRONMENT,
    nightly_schedule: bool = True,
    release_sensor: bool = True,
) -> dg.Definitions:
    """The definitions of the specs in `specs` (a folder; or spec files and folders; None:
    GRADETRAIL_SPECS, else `specs/`), run with `settings` (None: the environment's).
    `executor`: an executor, None for Dagster's default, or (unset) the one
    GRADETRAIL_DAGSTER_EXECUTOR names. Without `nightly_schedule` the specs have no
    nightly schedule, without `release_sensor` no sensor polls the model listings."""
    settings = settings or settings_from_environment()
    if specs is None or isinstance(specs, Path):
        found = discover(specs or specs_dir())
    else:
        found = discover_paths(specs)
    graphs: list[SpecGraph] = []
    errors = list(found.errors)
    for loaded in found.specs:
        try:
            graphs.append(build_spec_graph(loaded))
        except (InputError, InputErrors) as exc:
            errors.append(str(exc))
            log.error("spec not loaded: %s", exc)
    assets: list[dg.AssetsDefinition] = [a for g in graphs for a in g.assets]
    if errors:
        assets.append(_spec_errors_asset(errors))
    sensors: list[dg.SensorDefinition] = [build_partition_sensor(graphs)]
    if release_sensor:
        sensors.append(build_release_sensor(graphs))
    # Dagster's default automation sensor starts stopped; this one runs, so a scorer
    # edit is carried down scores → stats → report without anyone asking.
    sensors.append(
        dg.AutomationConditionSensorDefinition(
            "gradetrail_automation",
            target=dg.AssetSelection.all(),
            default_status=dg.DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=30,
        )
    )
    return dg.Definitions(
        assets=assets,
        jobs=[job for g in graphs for job in g.jobs],
        schedules=[build_nightly_schedule(g) for g in graphs] if nightly_schedule else [],
        sensors=sensors,
        # The tables (DuckDB or Postgres) come from the gradetrail resource's `tables()`.
        resources={"gradetrail": settings},
        executor=executor_from_environment() if isinstance(executor, str) else executor,
    )
