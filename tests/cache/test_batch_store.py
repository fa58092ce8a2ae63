"""The batch tables of the cache (DuckDB's and Postgres's): a claim records the keys no
live batch carries and adopts the batches that carry the rest; what a batch did not
answer is free again."""

import os
import subprocess
import sys

from gradetrail_lib.cache.batches import ERROR, NOT_RUN, BatchStore, NewBatch, owner_id
from gradetrail_lib.cache.location import open_cache


def store_at(location: str) -> BatchStore:
    return open_cache(location).batch_store()


def new(keys: list[str]) -> list[NewBatch]:
    return [
        NewBatch(
            provider="openai",
            endpoint="/v1/chat/completions",
            base_url="http://127.0.0.1:1/v1",
            model="m",
            api_key_env="K",
            settings=(("api_version", "x"),),
            keys=keys,
        )
    ]


def test_a_claim_records_its_keys_and_a_second_claim_adopts_them(cache_location: str) -> None:
    store = store_at(cache_location)
    first = store.claim(["a", "b"], new)
    assert first.adopted == [] and [keys for _, keys in first.claimed] == [["a", "b"]]
    record = first.claimed[0][0]
    assert (record.state, record.batch_id, record.owner) == ("claimed", None, owner_id())
    assert record.settings == (("api_version", "x"),)
    second = store.claim(["b", "c"], new)
    assert [r.submission for r in second.adopted] == [record.submission]
    assert [keys for _, keys in second.claimed] == [["c"]]  # only what none carries
    store.submitted(record.submission, "batch_1")
    found = store.find("batch_1")
    assert found is not None and (found.state, found.batch_id) == ("running", "batch_1")
    assert sorted(store.keys(record.submission)) == ["a", "b"]
    assert store.batch_ids() == frozenset({"batch_1"})


def test_keys_a_batch_did_not_answer_are_free_again(cache_location: str) -> None:
    store = store_at(cache_location)
    [(record, _)] = store.claim(["a", "b", "c"], new).claimed
    store.submitted(record.submission, "batch_1")
    store.update(record.submission, state="expired", total=3, done=1, failed=1)
    store.read(record.submission, {"b": ERROR, "c": NOT_RUN})
    again = store.claim(["a", "b", "c"], new)
    # "a" was answered (its answer is in the responses table; a lost write is read again
    # from the same batch); "b" and "c" go again.
    assert [r.submission for r in again.adopted] == [record.submission]
    assert [keys for _, keys in again.claimed] == [["b", "c"]]


def test_an_abandoned_claim_carries_nothing(cache_location: str) -> None:
    store = store_at(cache_location)
    [(record, _)] = store.claim(["a"], new).claimed
    store.abandon(record.submission)
    again = store.claim(["a"], new)
    assert again.adopted == [] and [keys for _, keys in again.claimed] == [["a"]]
    assert [r.state for r in store.all()] == ["abandoned", "claimed"]


def test_a_claims_owner_is_gone_once_its_process_has_ended(cache_location: str) -> None:
    store = store_at(cache_location)
    [(mine, _)] = store.claim(["a"], new).claimed
    assert not mine.owner_gone
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    host = owner_id().rpartition(":")[0]
    from dataclasses import replace

    assert replace(mine, owner=f"{host}:{int(ended.stdout)}").owner_gone
    assert not replace(mine, owner=f"{host}:{os.getppid()}").owner_gone
