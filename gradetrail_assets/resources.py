"""Resources: where the cache, tables and run directories live, and how requests are sent."""

from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import dagster as dg

from gradetrail_assets.tables import DuckDBTables, PostgresTables, Tables
from gradetrail_lib.backends import Backend, build_backend
from gradetrail_lib.backends.batch import BatchMode, BatchOptions, parse_batch_mode
from gradetrail_lib.cache.location import (
    default_cache_location,
    open_cache,
    parse_location,
    store_location,
)
from gradetrail_lib.cache.postgres import PostgresCache
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.cache.urls import password_of, redact, without_password
from gradetrail_lib.errors import UsageError
from gradetrail_lib.history.entries import HistoryStore
from gradetrail_lib.history.store import open_history
from gradetrail_lib.settings import DEFAULT_DATABASE, DEFAULTS, ENVIRONMENT, Settings

# A run's tag that sets how its misses are sent (off, all, targets), over the resource's
# `batch`: the nightly schedule sets it.
BATCH_TAG = "gradetrail/batch"


class GradetrailResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings of the engine (`gradetrail_lib.settings.Settings`: what each means, its
    default and its environment variable). The response cache and the result tables share
    one DuckDB file by default (`database`); with a Postgres store (`store`, or a
    postgresql:// `database`) the tables and the run history are in Postgres."""

    # GRADETRAIL_CACHE as the definitions are loaded, as ever: a DuckDB file or a
    # postgresql:// URL (the response cache). Dagster's UI shows a field's default, so
    # a password is left out of it (libpq then reads PGPASSWORD or ~/.pgpass); the
    # definitions pass such a URL itself as an EnvVar (`settings_from_environment`).
    database: str = without_password(default_cache_location())
    # GRADETRAIL_STORE: a postgresql:// URL or `local`; None follows `database`
    # (`gradetrail_lib.cache.location.store_location`).
    store: str | None = None
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
    def from_settings(cls, settings: Settings, **given: Any) -> "GradetrailResource":
        """The resource of `settings`, fields in `given` set as given (a `dg.EnvVar`)."""
        values = {f.name: getattr(settings, f.name) for f in fields(Settings)}
        values["database"] = str(values["database"])
        values["results_dir"] = str(values.pop("results"))
        return cls(**{**values, **given})

    def cache(self) -> ResponseCache | PostgresCache:
        return open_cache(self.database)

    def tables_database(self) -> str:
        """The DuckDB file of the `scores` and `stats` tables when they are local: the
        cache's file, or with a Postgres cache (and a `local` store) the default file (a
        URL is no file DuckDB can open)."""
        location = parse_location(self.database)
        return str(location.path) if location.path is not None else str(DEFAULT_DATABASE)

    def tables(self) -> Tables:
        """The `scores` and `stats` tables: in the store's Postgres database when there
        is one, else in the DuckDB file (`tables_database`)."""
        location = store_location(self.store, self.database)
        if location is None:
            return DuckDBTables(self.tables_database())
        return PostgresTables(location.url or "", where=location.where)

    def history(self) -> HistoryStore:
        """Where a run is added to the history: the store, else the file under the
        results root."""
        return open_history(self.results_root(), store=self.store, cache=self.database)

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


def settings_from_environment(
    given: Mapping[str, Any] | None = None, *, where: str = "settings"
) -> GradetrailResource:
    """The resource as the environment configures it (GRADETRAIL_* variables), the
    settings in `given` (by `Settings` field, e.g. a Component's attributes) set as given.
    A cache or store URL from the environment that carries a password is given as
    `dg.EnvVar`, which Dagster reads when a run starts and shows by its variable's name:
    the password never enters the definitions, so no page of the UI shows it. A given
    one is refused (it was written in a file, `where`): the password belongs in
    PGPASSWORD or ~/.pgpass, or the URL in the environment."""
    given = dict(given or {})
    for name in ("database", "store"):
        value = given.get(name)
        if isinstance(value, str) and password_of(value):
            raise UsageError(
                f"{where}: {name} {redact(value)!r} holds a password; keep it out of the "
                f"file: set PGPASSWORD (or ~/.pgpass), or leave {name} unset and put the URL "
                f"in {ENVIRONMENT[name]}"
            )
    settings = replace(Settings.from_environment(), **given)
    secret: dict[str, Any] = {}
    for name in ("database", "store"):
        value = getattr(settings, name)
        if name not in given and value is not None and password_of(value):
            secret[name] = dg.EnvVar(ENVIRONMENT[name])
    return GradetrailResource.from_settings(settings, **secret)
