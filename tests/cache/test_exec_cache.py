"""The code scorer's execution cache belongs to the response cache: a SQLite file beside
a DuckDB file, a table in a Postgres cache's database (shared by every machine)."""

from pathlib import Path

from gradetrail_lib.cache.location import open_cache
from gradetrail_lib.sandbox import Execution
from tests.cache.conftest import direct

RAN = Execution(status="exited", exit_code=1, stdout="out", stderr="Traceback", seconds=0.25)


def test_an_execution_is_kept_by_key_and_replaced(cache_location: str) -> None:
    cache = open_cache(cache_location).exec_cache()
    assert cache.get("k") is None
    cache.put("k", RAN)
    again = open_cache(cache_location).exec_cache()  # another process, as it were
    assert again.get("k") == RAN and again.get("other") is None
    timed_out = Execution(status="timeout", exit_code=None, stdout="", stderr="", seconds=3.0)
    again.put("k", timed_out)
    assert cache.get("k") == timed_out
    if cache_location.endswith(".duckdb"):  # a file beside the DuckDB file
        assert Path(cache_location + ".exec.sqlite").exists()
    else:
        assert direct(cache_location, "SELECT count(*) FROM executions") == [(1,)]
