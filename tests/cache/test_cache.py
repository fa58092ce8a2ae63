"""The response cache, DuckDB's and Postgres's alike (`cache_location`): the first answer
of a key is the one read, and answers are written one burst at a time."""

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from gradetrail_lib.cache.location import open_cache
from gradetrail_lib.cache.responses import CacheWriter, ResponseCache
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.responses import look_up
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse
from gradetrail_lib.spec.spec import load_spec
from tests.cache.conftest import direct
from tests.conftest import write_spec
from tests.support.plans import whole

ENDPOINT = Endpoint("openai_compatible", "fake-1", "http://127.0.0.1:1/v1", None)

# The table as files written before the log format hold it.
KEYED_SCHEMA = """
CREATE TABLE responses (
    key VARCHAR PRIMARY KEY, provider VARCHAR NOT NULL, model VARCHAR NOT NULL,
    served_model VARCHAR, text VARCHAR NOT NULL, stop_reason VARCHAR NOT NULL,
    input_tokens BIGINT, output_tokens BIGINT, latency_s DOUBLE NOT NULL,
    attempts INTEGER NOT NULL, raw VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
)
"""


def counting(location: str) -> Any:
    """The cache at `location`, counting the writer's transactions (a put_many each) and
    what they wrote."""
    cache = open_cache(location)
    stored = cache.put_many
    cache.transactions = 0
    cache.written = 0

    def put_many(items: Sequence[tuple[ModelRequest, ModelResponse]]) -> None:
        stored(items)
        cache.transactions += 1
        cache.written += len(items)

    cache.put_many = put_many
    return cache


def item(key: str, text: str = "42") -> tuple[ModelRequest, ModelResponse]:
    request = ModelRequest(key, ENDPOINT, [{"role": "user", "content": "Q"}], {})
    response = ModelResponse(
        text=text,
        served_model="fake-1",
        stop_reason="stop",
        input_tokens=3,
        output_tokens=1,
        latency_s=0.2,
        raw={"choices": [{"message": {"content": text}}]},
    )
    return request, response


def test_cached_keys_says_which_keys_are_answered_without_reading_them(new_cache: Any) -> None:
    cache = new_cache
    assert cache.cached_keys(["a"]) == set() and cache.cached_keys([]) == set()
    cache.put_many([item("a", "1"), item("b", "2"), item("a", "again")])
    assert cache.cached_keys(["a", "b", "c", "a"]) == {"a", "b"}


def test_lookup_returns_what_was_put(new_cache: Any) -> None:
    cache = new_cache
    cache.put_many([item("a", "1"), item("b", "2")])
    found = cache.lookup(["a", "b", "c"])
    assert {k: r.text for k, r in found.items()} == {"a": "1", "b": "2"}
    assert found["a"].input_tokens == 3 and found["a"].stop_reason == "stop"
    assert found["a"].raw == {}  # the raw body stays in the file


def test_a_second_answer_of_one_key_reads_as_the_first(cache_location: str) -> None:
    cache = open_cache(cache_location)
    cache.put_many([item("a", "first")])
    time.sleep(0.01)  # created_at is the transaction's start time
    cache.put_many([item("a", "second")])
    assert cache.lookup(["a"])["a"].text == "first"
    assert cache.count() == 1
    # The DuckDB log keeps both rows; Postgres's key stores the first only.
    rows = direct(cache_location, "SELECT count(*) FROM responses")
    assert rows == ([(2,)] if cache_location.endswith(".duckdb") else [(1,)])


def test_a_keyed_file_is_rewritten_as_the_log_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as old:
        old.execute(KEYED_SCHEMA)
        old.execute(
            "INSERT INTO responses (key, provider, model, text, stop_reason, latency_s,"
            " attempts, raw) VALUES ('k1', 'openai', 'm', 'kept', 'stop', 0.5, 2, '{}')"
        )
    cache = ResponseCache(path)
    (response,) = cache.lookup(["k1"]).values()
    assert (response.text, response.latency_s, response.attempts) == ("kept", 0.5, 2)
    cache.put_many([item("k1", "again"), item("k2")])  # a PRIMARY KEY would refuse k1
    assert cache.count() == 2
    assert cache.lookup(["k1"])["k1"].text == "kept"
    with duckdb.connect(str(path)) as direct:
        kinds = direct.execute(
            "SELECT constraint_type FROM duckdb_constraints() WHERE table_name = 'responses'"
        ).fetchall()
        assert ("PRIMARY KEY",) not in kinds
        assert ("NOT NULL",) in kinds
    ResponseCache(path)  # opening the log again changes nothing
    assert cache.count() == 2


def test_a_burst_goes_in_one_transaction(cache_location: str) -> None:
    cache = counting(cache_location)
    with cache.writer() as writer:
        for i in range(64):
            writer.put(*item(f"k{i}"))
    assert cache.written == 64
    # Queued within microseconds of each other: one pause-delimited batch (two if the
    # writer woke between the first put and the rest).
    assert cache.transactions <= 2
    assert cache.count() == 64


def test_a_steady_stream_is_written_at_least_every_max_delay(cache_location: str) -> None:
    cache = counting(cache_location)
    seen_while_running: list[int] = []
    with cache.writer() as writer:
        started = time.monotonic()
        i = 0
        # Arrivals closer than the pause the writer waits for: only the cap ends a batch.
        while time.monotonic() - started < 0.5:
            writer.put(*item(f"k{i}"))
            i += 1
            time.sleep(0.001)
        seen_while_running.append(cache.count())
    assert cache.written == i
    assert cache.transactions >= 3
    assert seen_while_running[0] > 0  # written during the stream, not only at the end


def test_the_writer_takes_a_stream_per_pause_not_per_response(cache_location: str) -> None:
    # Each wake-up of the writer thread costs the sending thread a GIL hand-over: it
    # sleeps through arrivals and takes what came, not one response at a time.
    class CountingWriter(CacheWriter):
        wakeups = 0

        def _drain(self) -> list[object]:
            CountingWriter.wakeups += 1
            return super()._drain()

    cache = counting(cache_location)
    writer = CountingWriter(cache)
    for i in range(100):
        writer.put(*item(f"k{i}"))
        time.sleep(0.0005)
    writer.close()
    assert cache.written == 100 and cache.count() == 100
    assert CountingWriter.wakeups < 40


def test_close_writes_what_is_queued_without_waiting_for_a_pause(new_cache: Any) -> None:
    cache = new_cache
    writer_scope = cache.writer()
    writer = writer_scope.__enter__()
    writer.put(*item("a"))
    started = time.monotonic()
    writer_scope.__exit__(None, None, None)
    assert time.monotonic() - started < 5
    assert cache.lookup(["a"])


def test_writer_threads_and_lookups_share_the_cache(new_cache: Any) -> None:
    cache = new_cache
    errors: list[BaseException] = []

    def read_while_writing() -> None:
        try:
            for _ in range(20):
                cache.lookup(["k0"])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    with cache.writer() as writer:
        reader = threading.Thread(target=read_while_writing)
        reader.start()
        for i in range(200):
            writer.put(*item(f"k{i}"))
        reader.join()
    assert errors == []
    assert cache.count() == 200


def test_look_up_of_a_plan_is_complete_only_when_every_distinct_key_is_cached(
    tmp_path: Path, cache_location: str
) -> None:
    # Four samples, two of which render alike: three distinct requests.
    data = tmp_path / "data" / "add.jsonl"
    data.parent.mkdir()
    data.write_text(
        "".join(f'{{"id": "{i}", "q": "{q}", "answer": 1}}\n' for i, q in enumerate("abca"))
    )
    write_spec(tmp_path / "x.yaml", base_url="http://127.0.0.1:1/v1", prompt="{{ q }}")
    loaded = load_spec(tmp_path / "x.yaml")
    eval_plan = whole(plan(loaded, loaded.spec.models[0]))
    keys = eval_plan.request_keys()
    assert len(keys) == 3
    cache = open_cache(cache_location)
    assert not look_up(eval_plan, cache).complete(eval_plan)
    cache.put_many([item(keys[0]), item(keys[1])])
    partial = look_up(eval_plan, cache)
    assert set(partial.responses) == {keys[0], keys[1]} and not partial.complete(eval_plan)
    cache.put_many([item(keys[2]), item(keys[0])])  # a second row of a key changes nothing
    assert look_up(eval_plan, cache).complete(eval_plan)


def test_whole_rows_move_between_caches_and_only_new_keys_are_added(
    cache_location: str, tmp_path: Path
) -> None:
    source = open_cache(tmp_path / "source.duckdb")
    request, response = item("a", "one")
    response.tool_calls = [{"id": "c1", "name": "add", "arguments": {"x": 1}}]
    source.put_many([(request, response), item("b", "two")])
    rows = source.read_rows(["b", "a", "missing"])
    assert [row["key"] for row in rows] == ["b", "a"]
    assert rows[1]["raw"] == '{"choices": [{"message": {"content": "one"}}]}'
    target = open_cache(cache_location)
    target.put_many([item("b", "kept")])
    assert target.write_rows([*rows, rows[0]]) == 1  # "b" is held, and given twice
    assert target.write_rows(rows) == 0
    assert target.read_rows(["a"]) == [rows[1]]
    found = target.lookup(["a", "b"])
    assert (found["a"].text, found["b"].text) == ("one", "kept")
    assert found["a"].tool_calls == response.tool_calls


def test_a_response_holding_nul_reads_back_exactly(
    new_cache: Any,
) -> None:
    # Postgres's text type refuses NUL; a model may still answer one, and the answer must
    # be kept byte for byte, as the DuckDB file keeps it, beside the burst's other answers.
    texts = {"a": "before\x00after", "b": "plain", "c": "\x01nul:looks like an escape"}
    with new_cache.writer() as writer:
        for key, text in texts.items():
            writer.put(*item(key, text))
    found = new_cache.lookup(list(texts))
    assert {k: r.text for k, r in found.items()} == texts
    moved = new_cache.read_rows(["a"])
    assert moved[0]["text"] == texts["a"]
