"""Many writers on one Postgres cache (step 14, item 2): processes and threads running
the same spec at once lose no answer and store every key once; a request two of them
both found missing is claimed by one and sent once (the fake server's calls against the
distinct requests). And the Postgres-only machinery under it: bursts that overlap in
any order do not deadlock, claims on batch keys take turns, N processes create the
tables at once."""

import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gradetrail_lib.cache.batches import NewBatch
from gradetrail_lib.cache.location import open_cache
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse
from tests.cache.conftest import direct
from tests.conftest import read_results, write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer, last_user_message
from tests.support.together import run_span, run_together

pytestmark = pytest.mark.timeout(300)

ENDPOINT = Endpoint("openai_compatible", "fake-1", "http://127.0.0.1:1/v1", None)


@pytest.fixture(autouse=True)
def _close_pools() -> object:
    yield
    from gradetrail_lib.cache.postgres import close_pools

    close_pools()


def answer(key: str, text: str) -> tuple[ModelRequest, ModelResponse]:
    request = ModelRequest(key, ENDPOINT, [{"role": "user", "content": key}], {})
    return request, ModelResponse(
        text=text, served_model="fake-1", stop_reason="stop", input_tokens=1,
        output_tokens=1, latency_s=0.1, raw={"text": text},
    )  # fmt: skip


def test_processes_and_threads_running_one_spec_store_every_answer_once(
    tmp_path: Path, postgres_url: str
) -> None:
    n, processes, threads = 60, 2, 2
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    # 60 requests of 0.1 s, 8 at a time: 0.75 s of sending, which the processes' runs
    # (a few tenths of a second behind the threads' from the word go) overlap.
    with FakeLLMServer(latency_s=0.1) as server:
        spec = write_spec(tmp_path / "add.yaml", base_url=f"{server.base_url}/v1")
        # Started at one moment: the processes make their imports first (the threads
        # used to be done before the processes had started, which found every answer).
        run_together(spec, tmp_path, postgres_url, processes=processes, threads=threads)
        sent = [last_user_message(r["body"]) for r in server.requests]
    spans = [run_span(tmp_path / f"r{i}") for i in range(processes + threads)]
    assert max(s for s, _ in spans) < min(f for _, f in spans), spans  # all at once
    distinct = set(sent)
    assert len(distinct) == n  # every request was sent by some run
    assert n <= len(sent) <= n * 1.05  # claimed before sent (gradetrail_lib.cache.claims)
    # Stored once each, and every run's records hold an answer for every sample.
    stored = direct(postgres_url, "SELECT count(*), count(DISTINCT key) FROM responses")
    assert stored == [(n, n)]
    for i in range(processes + threads):
        records = read_results(tmp_path / f"r{i}")
        assert len(records) == n and all(r["response"] for r in records), i
    print(f"sent {len(sent)} for {n} distinct requests ({len(sent) / n:.2f}x) by "
          f"{processes} processes and {threads} threads started at once")  # fmt: skip


def test_overlapping_bursts_in_any_order_store_each_key_once_without_deadlock(
    postgres_url: str,
) -> None:
    cache = open_cache(postgres_url)
    keys = [f"k{i:03d}" for i in range(200)]
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        order = keys[:]
        random.Random(seed).shuffle(order)
        try:
            other = open_cache(postgres_url)
            for start in range(0, len(order), 50):
                other.put_many([answer(k, f"w{seed}") for k in order[start : start + 50]])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert cache.count() == len(keys)
    texts = {r.text for r in cache.lookup(keys).values()}
    assert texts <= {f"w{seed}" for seed in range(6)}


def test_a_burst_keeps_the_first_answer_of_a_key(postgres_url: str) -> None:
    cache = open_cache(postgres_url)
    cache.put_many([answer("b", "one"), answer("a", "x"), answer("b", "two")])
    assert cache.lookup(["b"])["b"].text == "one"


def test_concurrent_claims_on_the_same_keys_claim_each_key_once(postgres_url: str) -> None:
    store = open_cache(postgres_url).batch_store()
    keys = [f"k{i}" for i in range(40)]
    claimed: list[list[str]] = []
    errors: list[BaseException] = []

    def plan(free: list[str]) -> list[NewBatch]:
        return [
            NewBatch(provider="openai", endpoint="/v1/chat/completions",
                     base_url="http://127.0.0.1:1/v1", model="m", api_key_env=None,
                     settings=(), keys=free)
        ]  # fmt: skip

    def claim(seed: int) -> None:
        mine = keys[:]
        random.Random(seed).shuffle(mine)
        try:
            result = open_cache(postgres_url).batch_store().claim(mine, plan)
            claimed.extend(k for _, ks in result.claimed for k in ks)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(claimed) == sorted(keys)  # each key claimed by exactly one
    assert len(store.all()) == 1


def test_processes_opening_an_empty_database_at_once_all_succeed(postgres_url: str) -> None:
    code = (
        "import sys; from gradetrail_lib.cache.location import open_cache; open_cache(sys.argv[1])"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, postgres_url], stderr=subprocess.PIPE, text=True
        )  # fmt: skip
        for _ in range(6)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert direct(postgres_url, "SELECT count(*) FROM responses") == [(0,)]
