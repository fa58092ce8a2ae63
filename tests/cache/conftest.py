"""Every cache test runs against both implementations of the cache's interface: the
DuckDB file and Postgres (a fresh database on the session's throwaway server)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gradetrail_lib.cache.location import open_cache, parse_location


@pytest.fixture(params=["duckdb", "postgres"])
def cache_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A location with no cache yet: a DuckDB file's path, or a Postgres URL."""
    if request.param == "duckdb":
        yield str(tmp_path / "c.duckdb")
        return
    from gradetrail_lib.cache.postgres import close_pools

    yield request.getfixturevalue("postgres_url")
    close_pools()  # each test's database is fresh: its connections go with it


@pytest.fixture
def new_cache(cache_location: str) -> Any:
    return open_cache(cache_location)


def direct(location: str, sql: str) -> list[tuple[Any, ...]]:
    """`sql` run on the cache's database itself, past the cache's interface."""
    parsed = parse_location(location)
    if parsed.path is not None:
        with duckdb.connect(str(parsed.path)) as connection:
            return connection.execute(sql).fetchall()
    import psycopg

    with psycopg.connect(parsed.url or "", autocommit=True) as connection:
        cursor = connection.execute(sql)
        return cursor.fetchall() if cursor.description is not None else []
