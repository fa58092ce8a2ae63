"""Resources: where the cache, tables and run directories live, and how requests are sent."""

from dataclasses import fields
from pathlib import Path

import dagster as dg

from gradetrail_lib.backends import Backend, build_backend
from gradetrail_lib.cache.responses import ResponseCache, default_cache_path
from gradetrail_lib.settings import DEFAULTS, Settings


class GradetrailResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings of the engine (`gradetrail_lib.settings.Settings`: what each means, its
    default and its environment variable). The response cache and the result tables share
    one DuckDB file by default (`database`), as the DuckDB resource is configured with it
    too."""

    # GRADETRAIL_CACHE as the definitions are loaded, as ever.
    database: str = str(default_cache_path())
    results_dir: str = str(DEFAULTS.results)
    backend: str = DEFAULTS.backend
    concurrency: str = DEFAULTS.concurrency
    max_concurrency: int = DEFAULTS.max_concurrency
    workers: int = DEFAULTS.workers
    ray_address: str | None = DEFAULTS.ray_address
    max_provider_error_rate: float = DEFAULTS.max_provider_error_rate
    max_truncation_rate: float = DEFAULTS.max_truncation_rate
    max_judge_error_rate: float = DEFAULTS.max_judge_error_rate
    max_agent_stop_rate: float = DEFAULTS.max_agent_stop_rate
    min_judge_kappa: float = DEFAULTS.min_judge_kappa

    @classmethod
    def from_settings(cls, settings: Settings) -> "GradetrailResource":
        values = {f.name: getattr(settings, f.name) for f in fields(Settings)}
        values["database"] = str(values["database"])
        values["results_dir"] = str(values.pop("results"))
        return cls(**values)

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
    return GradetrailResource.from_settings(Settings.from_environment())
