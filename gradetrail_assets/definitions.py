"""What `dagster dev` loads: one asset graph per spec in the specs folder.

The folder is `specs/` (relative to the working directory) unless GRADETRAIL_SPECS says
otherwise. A spec that fails to load is logged with its file and line and shown as a
failing `gradetrail/spec_errors` asset; the other specs load as usual.
"""

import logging
from pathlib import Path

import dagster as dg

from gradetrail_assets.automation import (
    build_nightly_schedule,
    build_partition_sensor,
    build_release_sensor,
)
from gradetrail_assets.discovery import discover, specs_dir
from gradetrail_assets.executors import executor_from_environment
from gradetrail_assets.factory import SpecGraph, build_spec_graph
from gradetrail_assets.resources import GradetrailResource, settings_from_environment
from gradetrail_lib.errors import InputError, InputErrors

log = logging.getLogger("gradetrail_assets")


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
    folder: Path | None = None, settings: GradetrailResource | None = None
) -> dg.Definitions:
    settings = settings or settings_from_environment()
    found = discover(folder or specs_dir())
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
    return dg.Definitions(
        assets=assets,
        jobs=[job for g in graphs for job in g.jobs],
        schedules=[build_nightly_schedule(g) for g in graphs],
        sensors=[
            build_partition_sensor(graphs),
            build_release_sensor(graphs),
            # Dagster's default automation sensor starts stopped; this one runs, so a scorer
            # edit is carried down scores → stats → report without anyone asking.
            dg.AutomationConditionSensorDefinition(
                "gradetrail_automation",
                target=dg.AssetSelection.all(),
                default_status=dg.DefaultSensorStatus.RUNNING,
                minimum_interval_seconds=30,
            ),
        ],
        # The tables (DuckDB or Postgres) come from the gradetrail resource's `tables()`.
        resources={"gradetrail": settings},
        executor=executor_from_environment(),
    )


defs = build_definitions()
