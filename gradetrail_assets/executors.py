"""Which executor runs a job's steps: GRADETRAIL_DAGSTER_EXECUTOR, read as the definitions load.

* unset (or empty): Dagster's default, which runs each step in its own process when a
  run is launched (`dagster dev`, `dagster asset materialize`) and in the caller's
  process for `execute_in_process`, as before this variable existed;
* `in_process`: every step of a run in the run's process;
* `multiprocess`: every step in its own process on this machine;
* `ray`: every step as a Ray job on a cluster (dagster-ray's `ray_executor`; the extra
  `dagster-ray`). The cluster is the one RAY_API_SERVER_ADDRESS or RAY_ADDRESS names,
  as for `ray job submit`.

A step on Ray runs `dagster api execute_step` on whichever node Ray picks, in that node's
environment, not the launcher's: `dagster` must be on the nodes' PATH with gradetrail
installed, the IO manager's folder (under DAGSTER_HOME by default) must be one that every
node sees, and the provider API keys must be set on the nodes. The launcher's GRADETRAIL_*
variables are passed to each step (by name, read when the step is launched), so the step
builds the same definitions and cache as the launcher (docs/dagster.md).
"""

import logging
import os
from collections.abc import Callable, Mapping

import dagster as dg

from gradetrail_lib.cache.urls import password_of
from gradetrail_lib.errors import UsageError

log = logging.getLogger("gradetrail_assets")

EXECUTOR_ENV = "GRADETRAIL_DAGSTER_EXECUTOR"
# What the Ray steps inherit from the launcher: gradetrail's own settings (where the
# specs, the cache and the results are), nothing else of its environment.
FORWARDED_PREFIX = "GRADETRAIL_"
# Each step reserves a CPU: without one Ray runs every job's entrypoint on the head node.
RAY_STEP_CPUS = 1.0


def _ray(env: Mapping[str, str]) -> dg.ExecutorDefinition:
    try:
        from dagster_ray import ray_executor
    except ImportError as exc:
        raise UsageError(
            f"{EXECUTOR_ENV}=ray needs dagster-ray: pip install 'gradetrail[dagster-ray]'"
        ) from exc
    if password_of(env.get("GRADETRAIL_CACHE", "")):
        # The step's environment is part of the Ray job's record (the dashboard shows it).
        log.warning(
            "GRADETRAIL_CACHE holds a password; Ray keeps the environment of each step's "
            "job, so set PGPASSWORD (or ~/.pgpass) on the nodes instead"
        )
    names = sorted(name for name in env if name.startswith(FORWARDED_PREFIX))
    # Names only: the values are read when a step is launched, and never shown as config.
    # Typed here: without the extra installed, mypy sees dagster_ray as Any.
    executor: dg.ExecutorDefinition = ray_executor.configured(
        {"ray": {"env_vars": names, "num_cpus": RAY_STEP_CPUS}}, name="gradetrail_ray"
    )
    return executor


# One registry: the executor's name in GRADETRAIL_DAGSTER_EXECUTOR -> how to build it.
EXECUTORS: dict[str, Callable[[Mapping[str, str]], dg.ExecutorDefinition]] = {
    "in_process": lambda env: dg.in_process_executor,
    "multiprocess": lambda env: dg.multiprocess_executor,
    "ray": _ray,
}


def executor_from_environment(env: Mapping[str, str] | None = None) -> dg.ExecutorDefinition | None:
    """The executor GRADETRAIL_DAGSTER_EXECUTOR names, or None for Dagster's default."""
    env = os.environ if env is None else env
    return build_executor(env.get(EXECUTOR_ENV, ""), env, named_by=EXECUTOR_ENV)


def build_executor(
    name: str | None, env: Mapping[str, str] | None = None, *, named_by: str = "executor"
) -> dg.ExecutorDefinition | None:
    """The executor called `name` (`EXECUTORS`), or None (no name) for Dagster's default.
    `named_by` says where the name came from in the error for an unknown one."""
    env = os.environ if env is None else env
    name = (name or "").strip()
    if not name:
        return None
    build = EXECUTORS.get(name)
    if build is None:
        raise UsageError(
            f"{named_by}={name!r}: unknown executor; use one of {', '.join(EXECUTORS)} "
            "(or leave it unset for Dagster's default)"
        )
    return build(env)
