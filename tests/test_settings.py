"""One settings object (`gradetrail_lib.settings`) for the CLI's defaults and the Dagster
resource's: its defaults, the variables it reads, and the resource mirroring it."""

import os
from dataclasses import fields
from pathlib import Path

import pytest

from gradetrail_assets.resources import GradetrailResource, settings_from_environment
from gradetrail_assets.tables import DuckDBTables
from gradetrail_lib import cli
from gradetrail_lib.cache.location import store_location
from gradetrail_lib.errors import UsageError
from gradetrail_lib.settings import DEFAULT_DATABASE, DEFAULTS, ENVIRONMENT, Settings, cli_settings


def test_every_setting_has_a_variable() -> None:
    assert set(ENVIRONMENT) == {f.name for f in fields(Settings)}


def test_the_environment_sets_each_setting_with_its_type() -> None:
    env = {
        "GRADETRAIL_CACHE": "c.duckdb",
        "GRADETRAIL_STORE": "postgresql://u@db.example/runs",
        "GRADETRAIL_RESULTS": "out",
        "GRADETRAIL_BACKEND": "ray",
        "GRADETRAIL_CONCURRENCY": "auto",
        "GRADETRAIL_MAX_CONCURRENCY": "32",
        "GRADETRAIL_WORKERS": "3",
        "RAY_ADDRESS": "ray://head:10001",
        "GRADETRAIL_MAX_PROVIDER_ERROR_RATE": "0.2",
        "GRADETRAIL_MAX_TRUNCATION_RATE": "0.3",
        "GRADETRAIL_MAX_JUDGE_ERROR_RATE": "0.4",
        "GRADETRAIL_MAX_AGENT_STOP_RATE": "0.5",
        "GRADETRAIL_BATCH": "targets",
        "GRADETRAIL_BATCH_TIMEOUT_S": "600",
        "GRADETRAIL_BATCH_POLL_S": "0.5",
        "GRADETRAIL_BATCH_POLL_MAX_S": "2",
    }
    assert Settings.from_environment(env) == Settings(
        database="c.duckdb",
        store="postgresql://u@db.example/runs",
        results=Path("out"),
        backend="ray",
        concurrency="auto",
        max_concurrency=32,
        workers=3,
        ray_address="ray://head:10001",
        max_provider_error_rate=0.2,
        max_truncation_rate=0.3,
        max_judge_error_rate=0.4,
        max_agent_stop_rate=0.5,
        batch="targets",
        batch_timeout_s=600.0,
        batch_poll_s=0.5,
        batch_poll_max_s=2.0,
    )
    assert Settings.from_environment({}) == DEFAULTS
    assert Settings.from_environment({"RAY_ADDRESS": "", "GRADETRAIL_CACHE": ""}) == DEFAULTS
    only = Settings.from_environment(env, only=("results",))
    assert only == Settings(results=Path("out"))
    # A cache location is text: a URL's `//` survives (a Path would fold it to one `/`).
    url = "postgresql://u@db.example:5432/evals"
    assert Settings.from_environment({"GRADETRAIL_CACHE": url}).database == url


def test_the_resource_has_every_setting_with_its_default() -> None:
    resource = GradetrailResource.from_settings(DEFAULTS)
    names = {f.name for f in fields(Settings)} - {"results"} | {"results_dir"}
    assert set(GradetrailResource.model_fields) == names
    for name, spec in GradetrailResource.model_fields.items():
        if name != "database":  # GRADETRAIL_CACHE as the module was imported
            assert spec.default == getattr(resource, name), name


def test_dagster_reads_every_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADETRAIL_CONCURRENCY", "auto")
    monkeypatch.setenv("GRADETRAIL_WORKERS", "5")
    monkeypatch.setenv("GRADETRAIL_RESULTS", "elsewhere")
    resource = settings_from_environment()
    assert (resource.concurrency, resource.workers, resource.results_dir) == (
        "auto",
        5,
        "elsewhere",
    )


def test_the_cli_reads_cache_results_backend_and_batch_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = str(tmp_path / "c.duckdb")
    monkeypatch.setenv("GRADETRAIL_CACHE", cache)
    monkeypatch.setenv("GRADETRAIL_RESULTS", str(tmp_path / "out"))
    monkeypatch.setenv("GRADETRAIL_BACKEND", "ray")
    monkeypatch.setenv("GRADETRAIL_CONCURRENCY", "auto")  # Dagster's only
    monkeypatch.setenv("GRADETRAIL_MAX_CONCURRENCY", "not a number")  # Dagster's only
    assert cli_settings() == Settings(database=cache, results=tmp_path / "out", backend="ray")
    args = cli.build_parser().parse_args(["run", "spec.yaml"])
    assert (args.cache, args.results, args.backend) == (
        cache,
        tmp_path / "out",
        "ray",
    )
    assert (args.concurrency, args.max_concurrency, args.workers) == ("8", 64, None)
    assert cli.build_parser().parse_args(["plan", "spec.yaml"]).cache == cache
    assert cli.build_parser().parse_args(["list"]).root == tmp_path / "out"
    assert cli.build_parser().parse_args(["view"]).root == tmp_path / "out"
    assert cli.build_parser().parse_args(["batches"]).cache == cache


def test_the_cli_reads_the_batch_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.build_parser().parse_args(["run", "spec.yaml"]).batch == "off"
    monkeypatch.setenv("GRADETRAIL_BATCH", "1")
    monkeypatch.setenv("GRADETRAIL_BATCH_TIMEOUT_S", "90")
    args = cli.build_parser().parse_args(["run", "spec.yaml"])
    assert (args.batch, args.batch_timeout) == ("1", 90.0)
    assert cli.build_parser().parse_args(["run", "s.yaml", "--batch"]).batch == "all"
    args = cli.build_parser().parse_args(
        ["run", "s.yaml", "--batch", "targets", "--batch-timeout", "2h"]
    )
    assert (args.batch, args.batch_timeout) == ("targets", 7200.0)


def test_the_resource_opens_the_cache_its_database_names(tmp_path: Path, postgres_url: str) -> None:
    from gradetrail_lib.cache.postgres import PostgresCache, close_pools
    from gradetrail_lib.cache.responses import ResponseCache

    assert isinstance(GradetrailResource(database=postgres_url).cache(), PostgresCache)
    file = GradetrailResource(database=str(tmp_path / "c.duckdb")).cache()
    assert isinstance(file, ResponseCache) and file.path == tmp_path / "c.duckdb"
    close_pools()


def test_with_a_postgres_cache_and_a_local_store_the_tables_stay_in_the_default_duckdb_file(
    tmp_path: Path,
) -> None:
    url = "postgresql://u@db.example/evals"
    local = GradetrailResource(database=url, store="local")
    assert local.tables_database() == str(DEFAULT_DATABASE)
    assert isinstance(local.tables(), DuckDBTables)
    assert local.tables().where == str(DEFAULT_DATABASE)
    here = str(tmp_path / "c.duckdb")
    assert GradetrailResource(database=here).tables_database() == here
    assert GradetrailResource(database=here).tables().where == here


def test_the_store_follows_a_cache_url_unless_set() -> None:
    url, other = "postgresql://u:pw@db.example/evals", "postgresql://v@store.example/runs"
    assert store_location(None, "c.duckdb") is None
    assert store_location("local", url) is None
    followed = store_location(None, url)
    assert followed is not None and followed.url == url
    assert followed.where == "postgresql://u:***@db.example/evals"
    chosen = store_location(other, url)
    assert chosen is not None and chosen.url == other
    with pytest.raises(UsageError, match="a store is a postgresql:// URL"):
        store_location("results/", url)
    with pytest.raises(UsageError, match="GRADETRAIL_STORE 'mysql://h/db': unknown scheme"):
        store_location("mysql://h/db", "c.duckdb")


def test_a_password_in_a_url_reaches_the_resource_as_an_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dagster shows a resource's configuration in its UI: a URL with a password is given
    as `dg.EnvVar`, shown by its variable's name and read when a run starts."""
    import dagster as dg

    monkeypatch.setenv("GRADETRAIL_STORE", "postgresql://u:s3cret@db.example/evals")
    monkeypatch.setenv("GRADETRAIL_CACHE", "postgresql://u:s3cret@db.example/cache")
    resource = settings_from_environment()
    assert resource.store == dg.EnvVar("GRADETRAIL_STORE")
    assert resource.database == dg.EnvVar("GRADETRAIL_CACHE")
    assert "s3cret" not in repr(resource)
    monkeypatch.setenv("GRADETRAIL_STORE", "postgresql://u@db.example/evals")
    monkeypatch.setenv("GRADETRAIL_CACHE", "c.duckdb")
    plain = settings_from_environment()
    assert (plain.store, plain.database) == ("postgresql://u@db.example/evals", "c.duckdb")


def test_a_password_in_gradetrail_cache_is_not_the_resource_fields_default(
    tmp_path: Path,
) -> None:
    """The field's default is taken as the module is imported, and Dagster's UI shows
    it (the config schema of the repository snapshot): it leaves the password out."""
    import subprocess
    import sys

    script = (
        "from pathlib import Path\n"
        "from dagster._core.remote_representation.external_data import RepositorySnap\n"
        "from dagster._serdes import serialize_value\n"
        "from gradetrail_assets.definitions import build_definitions\n"
        "from gradetrail_assets.resources import GradetrailResource, settings_from_environment\n"
        "print(GradetrailResource.model_fields['database'].default)\n"
        "defs = build_definitions(Path('specs'), settings_from_environment())\n"
        "snapshot = serialize_value(RepositorySnap.from_def(defs.get_repository_def()))\n"
        "print('s3cret' in snapshot, 'GRADETRAIL_CACHE' in snapshot)\n"
    )
    (tmp_path / "specs").mkdir()
    url = "postgresql://u:s3cret@db.example:5432/evals?sslmode=require&password=s3cret"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, env={**os.environ, "GRADETRAIL_CACHE": url},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "postgresql://u@db.example:5432/evals?sslmode=require", "False True",
    ]  # fmt: skip
