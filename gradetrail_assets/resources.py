"""Resources: where the cache, tables and run directories live, and how requests are sent."""

from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path

import dagster as dg

from gradetrail_lib.backends import Backend, build_backend
from gradetrail_lib.cache.location import default_cache_location, open_cache, parse_location
from gradetrail_lib.cache.postgres import PostgresCache
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.engine.batch_send import BatchMode, BatchOptions, parse_batch_mode
from gradetrail_lib.settings import DEFAULT_DATABASE, DEFAULTS, Settings

# A run's tag that sets how its misses are sent (off, all, targets), over the resource's
# `batch`: the nightly schedule sets it.
BATCH_TAG = "gradetrail/batch"


class GradetrailResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings of the engine (`gradetrail_lib.settings.Settings`: what each means, its
    default and its environment variable). The response cache and the result tables share
    one DuckDB file by default (`database`), as the DuckDB resource is configured with it
    too."""

    # GRADETRAIL_CACHE as the definitions are loaded, as ever: a DuckDB file or a
    # postgresql:// URL (the response cache; the tables stay in DuckDB for now).
    database: str = default_cache_location()
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
    batch: str = DEFAULTS.batch
    batch_timeout_s: float = DEFAULTS.batch_timeout_s
    batch_poll_s: float = DEFAULTS.batch_poll_s
    batch_poll_max_s: float = DEFAULTS.batch_poll_max_s

    @classmethod
    def from_settings(cls, settings: Settings) -> "GradetrailResource":
        values = {f.name: getattr(settings, f.name) for f in fields(Settings)}
        values["database"] = str(values["database"])
        values["results_dir"] = str(values.pop("results"))
        return cls(**values)

    def cache(self) -> ResponseCache | PostgresCache:
        return open_cache(self.database)

    def tables_database(self) -> str:
        """The DuckDB file of the `scores` and `stats` tables: the cache's file, or with a
        Postgres cache the default file (the tables are DuckDB's alone; a URL is no
        file DuckDB can open)."""
        location = parse_location(self.database)
        return str(location.path) if location.path is not None else str(DEFAULT_DATABASE)

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

    def batch_mode(self, tags: Mapping[str, str]) -> BatchMode:
        """Off, all or targets: the run's `gradetrail/batch` tag, else `batch`."""
        return parse_batch_mode(tags.get(BATCH_TAG, self.batch))

    def batch_options(self, notify: Callable[[str], None]) -> BatchOptions:
        return BatchOptions(
            timeout_s=self.batch_timeout_s,
            poll_s=self.batch_poll_s,
            poll_max_s=self.batch_poll_max_s,
            notify=notify,
            resume_hint="materialize the partition again to resume them",
        )


def settings_from_environment() -> GradetrailResource:
    """The resource as the environment configures it (GRADETRAIL_* variables)."""
    return GradetrailResource.from_settings(Settings.from_environment())
