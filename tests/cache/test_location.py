"""A cache location is a path (DuckDB) or a URL of a known scheme (Postgres); any other
scheme is refused before anything is written, and a URL's password reaches no message,
log line or file."""

import builtins
import os
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib.cache.location import (
    SCHEMES,
    existing_cache,
    open_cache,
    parse_location,
)
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.cache.urls import password_of, redact
from gradetrail_lib.errors import GradetrailError, UsageError
from tests.conftest import read_results, run_cli, write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.optional import need

PASSWORD = "pw-n3ver-in-a-file"


def with_password(url: str) -> str:
    """`url` (`postgresql://postgres@host:port/db`) with a password in it: the test
    server trusts loopback connections, so any password is accepted and none is needed."""
    return url.replace("postgres@", f"postgres:{PASSWORD}@", 1)


def test_a_path_is_a_duckdb_file_and_a_postgres_url_is_postgres(tmp_path: Path) -> None:
    assert parse_location(str(tmp_path / "c.duckdb")).path == tmp_path / "c.duckdb"
    assert parse_location("relative/c.duckdb").is_file
    assert parse_location(r"C:\cache\c.duckdb").is_file  # a drive letter is no scheme
    for url in ("postgresql://u@h/db", "postgres://u@h:5433/db", "POSTGRESQL://u@h/db"):
        assert parse_location(url).url == url
    assert isinstance(open_cache(tmp_path / "c.duckdb"), ResponseCache)


@pytest.mark.parametrize(
    "text", ["mysql://u@h/db", "postgressql://u@h/db", "s3://bucket/c.duckdb", "file:///x.duckdb"]
)
def test_another_scheme_is_refused_naming_the_accepted_ones(text: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as raised:
        open_cache(text)
    message = str(raised.value)
    assert "unknown scheme" in message
    assert all(f"{scheme}://" in message for scheme in SCHEMES)


def test_redact_hides_a_password_in_the_user_part_and_in_the_query() -> None:
    assert redact("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact("postgresql://u@h/db?password=secret&sslmode=require") == (
        "postgresql://u@h/db?password=***&sslmode=require"
    )
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
    assert password_of("postgresql://u:secret@h/db") == "secret"
    assert password_of("postgresql://u@h/db?password=s2") == "s2"
    assert password_of("postgresql://u@h/db") is None
    with pytest.raises(UsageError) as raised:
        parse_location("mysql://u:secret@h/db")
    assert "secret" not in str(raised.value)


def test_a_postgres_url_without_psycopg_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = builtins.__import__

    def no_psycopg(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in ("psycopg", "psycopg_pool"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(UsageError, match=r"pip install 'gradetrail\[postgres\]'"):
        open_cache("postgresql://u:secret@127.0.0.1:1/db")


def test_an_unreachable_server_is_an_error_without_the_password() -> None:
    need("psycopg")
    with pytest.raises(GradetrailError) as raised:
        open_cache(f"postgresql://u:{PASSWORD}@127.0.0.1:1/db")
    message = str(raised.value)
    assert "cannot open the cache" in message and "127.0.0.1" in message
    assert PASSWORD not in message and PASSWORD not in repr(raised.value.__cause__)


def test_existing_cache_creates_no_file_for_a_missing_path(tmp_path: Path) -> None:
    assert existing_cache(str(tmp_path / "nope" / "c.duckdb")) is None
    assert not (tmp_path / "nope").exists()


def test_run_refuses_an_unknown_scheme_and_writes_nothing(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 4)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    before = set(os.listdir(tmp_path))
    done = run_cli(
        "run", str(spec), "--cache", f"mysql://u:{PASSWORD}@h/db", "--results", "out",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "unknown scheme 'mysql'" in done.stderr and "postgresql://" in done.stderr
    assert PASSWORD not in done.stderr + done.stdout
    assert set(os.listdir(tmp_path)) == before  # no `mysql:` folder, no results
    assert fake_server.calls == 0


def test_run_with_a_postgres_cache_reruns_free_and_keeps_the_password_out_of_files(
    tmp_path: Path, fake_server: FakeLLMServer, postgres_url: str
) -> None:
    n = 12
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    url = with_password(postgres_url)
    cold = run_cli("run", str(spec), "--cache", url, "--results", "cold", cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert fake_server.calls == n
    assert f"Cache hits: 0/{n}" in cold.stdout
    # GRADETRAIL_CACHE takes a URL too.
    warm = run_cli(
        "run", str(spec), "--results", "warm", cwd=tmp_path, env={"GRADETRAIL_CACHE": url}
    )
    assert warm.returncode == 0, warm.stderr
    assert fake_server.calls == n, "a re-run on the Postgres cache must not call the provider"
    assert f"Cache hits: {n}/{n}" in warm.stdout
    cold_rows, warm_rows = read_results(tmp_path / "cold"), read_results(tmp_path / "warm")
    assert [r["response"] for r in warm_rows] == [r["response"] for r in cold_rows]
    assert not any(p.name.startswith("postgres") for p in tmp_path.iterdir())  # no folder
    assert open_cache(postgres_url).count() == n
    planned = run_cli("plan", str(spec), "--cache", url, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert f"cache hits {n}, misses 0" in planned.stdout
    for output in (cold, warm, planned):
        assert PASSWORD not in output.stdout + output.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_batches_lists_a_postgres_cache_and_refuses_a_missing_file(
    tmp_path: Path, postgres_url: str
) -> None:
    listed = run_cli("batches", "--cache", postgres_url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "No batches recorded." in listed.stdout
    missing = run_cli("batches", "--cache", str(tmp_path / "none.duckdb"), cwd=tmp_path)
    assert missing.returncode == 2 and "no cache file here" in missing.stderr
    assert not (tmp_path / "none.duckdb").exists()
