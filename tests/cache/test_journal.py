"""The cache writer's journal (`cache/journal.py`), DuckDB's and Postgres's alike
(`cache_location`): an answer is in the journal the moment `put` returns, a journal its
writer left (killed) is replayed when the cache is next opened, a live writer's journal is
left alone, and a replay stores each key once however often it runs."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib.cache.bursts import CacheWriter
from gradetrail_lib.cache.journal import Journal, replay
from gradetrail_lib.cache.location import open_cache
from gradetrail_lib.cache.responses import COLUMN_NAMES, response_row
from gradetrail_lib.errors import GradetrailError
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse
from tests.cache.conftest import direct
from tests.conftest import REPO

ENDPOINT = Endpoint("openai_compatible", "fake-1", "http://127.0.0.1:1/v1", None)
# Delays no test waits for: nothing reaches the cache but through the journal or close().
SLOW = {"quiet_s": 60.0, "max_delay_s": 60.0}


def item(key: str, text: str = "42") -> tuple[ModelRequest, ModelResponse]:
    request = ModelRequest(key, ENDPOINT, [{"role": "user", "content": "Q"}], {})
    response = ModelResponse(
        text=text, served_model="fake-1", stop_reason="stop", input_tokens=3,
        output_tokens=1, latency_s=0.2, raw={"choices": [{"message": {"content": text}}]},
    )  # fmt: skip
    return request, response


def journals(cache: Any) -> list[Path]:
    return sorted(Path(cache.journals).glob("*.jsonl"))


@pytest.fixture(autouse=True)
def own_journals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Postgres cache journals under $XDG_CACHE_HOME: the test's own folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def test_an_answer_is_in_the_journal_when_put_returns(cache_location: str) -> None:
    cache = open_cache(cache_location)
    writer = CacheWriter(cache, **SLOW, journal=Journal(cache.journals, response_row))
    writer.put(*item("a", "first"))
    (journal,) = journals(cache)
    (line,) = journal.read_text().splitlines()
    row = dict(zip(COLUMN_NAMES, json.loads(line), strict=True))
    assert (row["key"], row["text"]) == ("a", "first")
    assert cache.lookup(["a"]) == {}  # the burst is still waiting
    # A live writer's journal is not replayed (its writer holds the lock).
    assert replay(cache.journals, cache, COLUMN_NAMES) == 0
    assert journals(cache) == [journal]
    writer.close()
    assert cache.lookup(["a"])["a"].text == "first"
    assert journals(cache) == []  # everything stored: the journal goes


def test_a_killed_writers_answers_are_stored_when_the_cache_is_next_opened(
    cache_location: str, tmp_path: Path
) -> None:
    child = textwrap.dedent(
        """
        import os, signal, sys
        from gradetrail_lib.cache.bursts import CacheWriter
        from gradetrail_lib.cache.journal import Journal
        from gradetrail_lib.cache.location import open_cache
        from gradetrail_lib.cache.responses import response_row
        from tests.cache.test_journal import SLOW, item

        cache = open_cache(sys.argv[1])
        writer = CacheWriter(cache, **SLOW, journal=Journal(cache.journals, response_row))
        for key in ("a", "b", "c"):
            writer.put(*item(key, "answer " + key))
        os.kill(os.getpid(), signal.SIGKILL)  # no burst written, nothing flushed
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child, cache_location], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert direct(cache_location, "SELECT count(*) FROM responses") == [(0,)]

    cache = open_cache(cache_location)  # replays the journal the child left
    found = cache.lookup(["a", "b", "c"])
    assert {k: r.text for k, r in found.items()} == {k: f"answer {k}" for k in "abc"}
    assert journals(cache) == []
    open_cache(cache_location)
    assert direct(cache_location, "SELECT count(*) FROM responses") == [(3,)]


def test_a_journal_replayed_twice_stores_each_key_once(cache_location: str) -> None:
    cache = open_cache(cache_location)
    cache.put_many([item("a", "stored first")])
    journal = Journal(cache.journals, response_row)
    for key in ("a", "b"):
        journal.append(*item(key, "journaled"))
    journal.keep()  # as a killed writer leaves it: unlocked
    copy = journal.path.read_bytes()
    assert replay(cache.journals, cache, COLUMN_NAMES) == 1  # b; a is held already
    journal.path.write_bytes(copy)  # as if deleting it had not happened
    assert replay(cache.journals, cache, COLUMN_NAMES) == 0
    assert direct(cache_location, "SELECT key, text FROM responses ORDER BY key") == [
        ("a", "stored first"),
        ("b", "journaled"),
    ]


def test_a_torn_last_line_is_left_out(cache_location: str) -> None:
    cache = open_cache(cache_location)
    journal = Journal(cache.journals, response_row)
    journal.append(*item("a"))
    journal.keep()
    with open(journal.path, "a") as torn:  # the process died inside its last write
        torn.write(json.dumps(response_row(*item("b")))[:40])
    open_cache(cache_location)
    assert sorted(cache.cached_keys(["a", "b"])) == ["a"]
    assert journals(cache) == []


def test_a_failed_write_keeps_the_journal_for_the_next_opening(cache_location: str) -> None:
    cache = open_cache(cache_location)

    class Refusing:
        def put_many(self, items: Any) -> None:
            raise OSError("disk full")

    writer = CacheWriter(Refusing(), journal=Journal(cache.journals, response_row))
    writer.put(*item("a"))
    with pytest.raises(GradetrailError, match="cache writer failed: disk full"):
        writer.close()
    assert len(journals(cache)) == 1
    assert open_cache(cache_location).cached_keys(["a"]) == {"a"}
    assert journals(cache) == []


def test_a_postgres_cache_goes_without_a_journal_where_it_cannot_make_one(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # as a read-only home folder
    cache = open_cache(postgres_url)
    with cache.writer() as writer:
        writer.put(*item("a"))
    assert cache.cached_keys(["a"]) == {"a"}
