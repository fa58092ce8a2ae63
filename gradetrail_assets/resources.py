"""Resources: where the cache, tables and run directories live, and how requests are sent."""

import os
from pathlib import Path

import dagster as dg

from gradetrail_lib.backends import DEFAULT_MAX_CONCURRENCY, Backend, build_backend
from gradetrail_lib.cache import ResponseCache, default_cache_path


class GradetrailResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings of the engine. The response cache and the result tables share one DuckDB
    file by default (`database`), as the DuckDB resource is configured with it too."""

    database: str = str(default_cache_path())
    results_dir: str = "results"
    backend: str = "local"
    concurrency: str = "8"  # a count, or "auto" (adaptive, up to max_concurrency)
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    workers: int = 2
    ray_address: str | None = None
    max_provider_error_rate: float = 0.05
    max_truncation_rate: float = 0.10
    # Per judge scorer: samples whose judge gave no usable grade, over the answered ones.
    max_judge_error_rate: float = 0.05
    # An agent's cases stopped early (thrash, over the step budget), over all samples.
    max_agent_stop_rate: float = 0.10

    def cache(self) -> ResponseCache:
        return ResponseCache(Path(self.database))

    def results_root(self) -> Path:
        return Path(self.results_dir)

    def make_backend(self) -> Backend:
        # One worker count for both backends in config; only the ray backend uses it.
        workers = self.workers if self.backend == "ray" else None
        address = self.ray_address if self.backend == "ray" else None
        return build_backend(
            self.backend,
            concurrency=self.concurrency,
            workers=workers,
            address=address,
            max_concurrency=self.max_concurrency,
        )


def settings_from_environment() -> GradetrailResource:
    """The resource as the environment configures it (GRADETRAIL_* variables)."""
    env = os.environ
    return GradetrailResource(
        database=str(default_cache_path()),
        results_dir=env.get("GRADETRAIL_RESULTS", "results"),
        backend=env.get("GRADETRAIL_BACKEND", "local"),
        concurrency=env.get("GRADETRAIL_CONCURRENCY", "8"),
        max_concurrency=int(env.get("GRADETRAIL_MAX_CONCURRENCY", str(DEFAULT_MAX_CONCURRENCY))),
        workers=int(env.get("GRADETRAIL_WORKERS", "2")),
        ray_address=env.get("RAY_ADDRESS") or None,
        max_provider_error_rate=float(env.get("GRADETRAIL_MAX_PROVIDER_ERROR_RATE", "0.05")),
        max_truncation_rate=float(env.get("GRADETRAIL_MAX_TRUNCATION_RATE", "0.10")),
        max_judge_error_rate=float(env.get("GRADETRAIL_MAX_JUDGE_ERROR_RATE", "0.05")),
        max_agent_stop_rate=float(env.get("GRADETRAIL_MAX_AGENT_STOP_RATE", "0.10")),
    )
