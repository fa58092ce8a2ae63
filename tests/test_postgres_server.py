"""The throwaway Postgres the cache, history and Dagster tests share starts, answers and
keeps databases apart."""

import pytest

pytestmark = pytest.mark.timeout(120)


def test_fresh_databases_are_separate(postgres_url: str, postgres_server) -> None:
    import psycopg  # the `postgres` extra: the fixtures skip this test without it

    other = postgres_server.create_database()
    assert other != postgres_url
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES ('a')")
    with psycopg.connect(other) as conn:
        found = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 't'").fetchone()
    assert found == (0,)
    assert postgres_url.startswith("postgresql://postgres@127.0.0.1:")
