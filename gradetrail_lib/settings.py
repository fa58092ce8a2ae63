"""The engine's settings, their defaults and the environment variables that set them, in
one place: the CLI's options take their defaults from here and the Dagster resource
(`gradetrail_assets.resources.GradetrailResource`) its fields.

Which variables each reads: the CLI honours `GRADETRAIL_CACHE`, `GRADETRAIL_STORE`,
`GRADETRAIL_RESULTS`,
`GRADETRAIL_BACKEND` and the batch ones (`GRADETRAIL_BATCH`, `..._BATCH_TIMEOUT_S`,
`..._BATCH_POLL_S`, `..._BATCH_POLL_MAX_S`; its flags set the rest), Dagster every one.
"""

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

DEFAULT_DATABASE = Path(".gradetrail") / "gradetrail.duckdb"
DEFAULT_CONCURRENCY = 8
DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_WORKERS = 2


@dataclass(frozen=True)
class Settings:
    # Where the response cache is: the project's DuckDB file (response cache and, under
    # Dagster, the tables; relative to the working directory), or a postgresql:// URL
    # (`gradetrail_lib.cache.location`). Text, since a URL is no path.
    database: str = str(DEFAULT_DATABASE)
    # Where the run history and Dagster's `scores`/`stats` tables are: a postgresql://
    # URL, `local` (the history file under the results root, the tables in the DuckDB
    # file), or None: the cache's database when the cache is a URL, else local
    # (`gradetrail_lib.cache.location.store_location`).
    store: str | None = None
    # Where run directories go.
    results: Path = Path("results")
    # Where requests are sent from: "local" (this process) or "ray".
    backend: str = "local"
    # Requests in flight: a count, or "auto" (adaptive, up to max_concurrency).
    concurrency: str = str(DEFAULT_CONCURRENCY)
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    # Ray worker actors (the ray backend only).
    workers: int = DEFAULT_WORKERS
    ray_address: str | None = None
    # Dagster's asset checks: the most of the samples that may fail each way.
    max_provider_error_rate: float = 0.05
    max_truncation_rate: float = 0.10
    # Per judge scorer: samples whose judge gave no usable grade, over the answered ones.
    max_judge_error_rate: float = 0.05
    # An agent's cases stopped early (thrash, over the step budget), over all samples.
    max_agent_stop_rate: float = 0.10
    # A judge's Cohen's kappa with the human labels, once 30 random labels exist.
    min_judge_kappa: float = 0.6
    # Send cache misses through provider batch APIs: off, all (targets, then judges) or
    # targets; the longest wait for the batches, and the polls' first and longest pause.
    batch: str = "off"
    batch_timeout_s: float = 24 * 3600.0
    batch_poll_s: float = 5.0
    batch_poll_max_s: float = 60.0

    @classmethod
    def from_environment(
        cls, env: Mapping[str, str] | None = None, only: Collection[str] | None = None
    ) -> "Settings":
        """The settings as the environment sets them, the defaults elsewhere; `only` the
        named fields read from it (the others keep their defaults)."""
        env = os.environ if env is None else env
        read: dict[str, Any] = {}
        for f in fields(cls):
            if only is not None and f.name not in only:
                continue
            text = env.get(ENVIRONMENT[f.name])
            if not text:  # unset, or set to nothing
                continue
            default = getattr(DEFAULTS, f.name)
            read[f.name] = text if default is None else type(default)(text)
        return replace(DEFAULTS, **read)


# The variable of each setting.
ENVIRONMENT = {
    "database": "GRADETRAIL_CACHE",
    "store": "GRADETRAIL_STORE",
    "results": "GRADETRAIL_RESULTS",
    "backend": "GRADETRAIL_BACKEND",
    "concurrency": "GRADETRAIL_CONCURRENCY",
    "max_concurrency": "GRADETRAIL_MAX_CONCURRENCY",
    "workers": "GRADETRAIL_WORKERS",
    "ray_address": "RAY_ADDRESS",
    "max_provider_error_rate": "GRADETRAIL_MAX_PROVIDER_ERROR_RATE",
    "max_truncation_rate": "GRADETRAIL_MAX_TRUNCATION_RATE",
    "max_judge_error_rate": "GRADETRAIL_MAX_JUDGE_ERROR_RATE",
    "max_agent_stop_rate": "GRADETRAIL_MAX_AGENT_STOP_RATE",
    "min_judge_kappa": "GRADETRAIL_MIN_JUDGE_KAPPA",
    "batch": "GRADETRAIL_BATCH",
    "batch_timeout_s": "GRADETRAIL_BATCH_TIMEOUT_S",
    "batch_poll_s": "GRADETRAIL_BATCH_POLL_S",
    "batch_poll_max_s": "GRADETRAIL_BATCH_POLL_MAX_S",
}

DEFAULTS = Settings()

# What the CLI reads from the environment (its flags set the rest).
CLI_ENVIRONMENT = (
    "database", "store", "results", "backend", "batch", "batch_timeout_s", "batch_poll_s",
    "batch_poll_max_s",
)  # fmt: skip


def cli_settings() -> Settings:
    """The defaults of the CLI's options: `GRADETRAIL_CACHE`, `GRADETRAIL_STORE`,
    `GRADETRAIL_RESULTS`,
    `GRADETRAIL_BACKEND` and the `GRADETRAIL_BATCH*` variables read, the rest the
    defaults."""
    return Settings.from_environment(only=CLI_ENVIRONMENT)
