"""The response cache (DuckDB's and Postgres's) keeps a response's usage fields (batch,
prompt-cache and reasoning tokens, thinking text) in one JSON column, `usage`, and reads
DuckDB files written before it."""

from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from gradetrail_lib.cache.location import open_cache
from gradetrail_lib.cache.memory import MemoryCache
from gradetrail_lib.cache.responses import USAGE_FIELDS, ResponseCache
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse
from tests.cache.conftest import direct

ENDPOINT = Endpoint("anthropic", "claude-haiku-4-5", "http://127.0.0.1:1", None)

# The table as files written by step 10 (tool calls, no usage) hold it.
STEP10_SCHEMA = """
CREATE TABLE responses (
    key VARCHAR NOT NULL, provider VARCHAR NOT NULL, model VARCHAR NOT NULL,
    served_model VARCHAR, text VARCHAR NOT NULL, stop_reason VARCHAR NOT NULL,
    input_tokens BIGINT, output_tokens BIGINT, latency_s DOUBLE NOT NULL,
    attempts INTEGER NOT NULL, raw VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    tool_calls VARCHAR
)
"""


def request(key: str) -> ModelRequest:
    return ModelRequest(key, ENDPOINT, [{"role": "user", "content": "Q"}], {})


def plain(text: str = "42") -> ModelResponse:
    return ModelResponse(
        text=text,
        served_model="claude-haiku-4-5",
        stop_reason="stop",
        input_tokens=1200,
        output_tokens=300,
        latency_s=0.5,
    )


FULL = replace(
    plain(),
    batch=True,
    cached_input_tokens=1000,
    cache_write_input_tokens=150,
    cache_write_1h_input_tokens=20,
    reasoning_tokens=250,
    thinking="First, 6 times 7 is 42.",
)


def test_every_usage_field_round_trips(cache_location: str) -> None:
    cache = open_cache(cache_location)
    cache.put_many([(request("a"), FULL), (request("b"), plain("7"))])
    found = open_cache(cache_location).lookup(["a", "b"])
    for name in USAGE_FIELDS:
        assert getattr(found["a"], name) == getattr(FULL, name), name
    assert found["a"].batch is True
    b = found["b"]
    assert (b.batch, b.cached_input_tokens, b.reasoning_tokens, b.thinking) == (
        False, 0, 0, None
    )  # fmt: skip
    assert (found["a"].text, found["a"].input_tokens) == ("42", 1200)


def test_the_usage_column_holds_only_fields_off_their_default(cache_location: str) -> None:
    open_cache(cache_location).put_many(
        [(request("a"), plain()), (request("b"), replace(plain(), batch=True))]
    )
    rows = dict(direct(cache_location, "SELECT key, usage FROM responses"))
    assert rows == {"a": None, "b": '{"batch": true}'}


def test_a_file_from_before_the_usage_column_is_migrated_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as direct:
        direct.execute(STEP10_SCHEMA)
        direct.execute(
            "INSERT INTO responses (key, provider, model, text, stop_reason, input_tokens,"
            " output_tokens, latency_s, attempts, raw, tool_calls) VALUES"
            " ('old', 'anthropic', 'claude-haiku-4-5', 'yes', 'stop', 5, 2, 0.1, 1, '{}', NULL)"
        )
    cache = ResponseCache(path)
    old = cache.lookup(["old"])["old"]
    assert (old.text, old.input_tokens, old.batch, old.cached_input_tokens) == ("yes", 5, False, 0)
    cache.put_many([(request("new"), FULL)])
    assert cache.lookup(["new"])["new"].reasoning_tokens == 250
    with duckdb.connect(str(path)) as direct:
        columns = [row[1] for row in direct.execute("PRAGMA table_info('responses')").fetchall()]
    assert columns[-1] == "usage" and columns.count("usage") == 1
    ResponseCache(path)  # opening a migrated file again changes nothing
    assert set(cache.lookup(["old", "new"])) == {"old", "new"}


def test_a_usage_name_from_a_later_version_is_ignored(cache_location: str) -> None:
    open_cache(cache_location).put_many([(request("a"), plain())])
    direct(cache_location, """UPDATE responses SET usage = '{"batch": true, "audio_tokens": 9}'""")
    found = open_cache(cache_location).lookup(["a"])["a"]
    assert found.batch is True and not hasattr(found, "audio_tokens")


@pytest.mark.parametrize("response", [FULL, plain()])
def test_the_memory_cache_keeps_the_usage_fields_too(response: ModelResponse) -> None:
    cache = MemoryCache()
    with cache.writer() as writer:
        writer.put(request("a"), response)
    found = cache.lookup(["a"])["a"]
    assert [getattr(found, n) for n in USAGE_FIELDS] == [getattr(response, n) for n in USAGE_FIELDS]
