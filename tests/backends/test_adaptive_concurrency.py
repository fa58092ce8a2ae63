"""Adaptive concurrency (`--concurrency auto`): the AIMD limiter's arithmetic, and a run
against a loopback server that refuses (429) beyond an unannounced cap."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gradetrail_lib.backends import build_backend, parse_concurrency
from gradetrail_lib.backends.adaptive import AIMDLimiter
from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.errors import UsageError
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.policy import RetryPolicy
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.requests import addition_requests

REFUSED = ProviderError("transient", "HTTP 429", 429, retry_after_s=None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run_sync(limiter: AIMDLimiter) -> int:
    return asyncio.run(limiter.acquire())


def test_clean_answers_add_about_one_per_round() -> None:
    limiter = AIMDLimiter(64, initial=4)
    for _ in range(4):  # one round at 4 in flight
        limiter.done(run_sync(limiter), None)
    assert 4.9 < limiter.value < 5.0  # 4 + 4 * 1/4.x
    assert limiter.limit == 4
    for _ in range(5):
        limiter.done(run_sync(limiter), None)
    assert limiter.limit == 5


def test_growth_stops_at_the_maximum() -> None:
    limiter = AIMDLimiter(6, initial=4)
    for _ in range(200):
        limiter.done(run_sync(limiter), None)
    assert limiter.value == 6.0 and limiter.limit == 6


def test_a_429_halves_once_per_round_in_flight() -> None:
    async def scenario() -> AIMDLimiter:
        limiter = AIMDLimiter(64, initial=16)
        tickets = [await limiter.acquire() for _ in range(16)]
        limiter.done(tickets[0], REFUSED)  # halves: 16 -> 8
        assert limiter.limit == 8
        for ticket in tickets[1:6]:  # sent before the cut: no further cut
            limiter.done(ticket, REFUSED)
        assert limiter.limit == 8
        assert limiter.refused == 6 and limiter.cuts == 1
        for ticket in tickets[6:]:
            limiter.done(ticket, None)
        fresh = await limiter.acquire()  # sent after the cut: its 429 cuts again
        limiter.done(fresh, REFUSED)
        assert limiter.limit == 4 and limiter.cuts == 2
        return limiter

    asyncio.run(scenario())


def test_never_below_the_minimum_and_other_errors_leave_it() -> None:
    limiter = AIMDLimiter(64, initial=2)
    for _ in range(5):
        limiter.done(run_sync(limiter), REFUSED)
    assert limiter.limit == 1
    before = limiter.value
    limiter.done(run_sync(limiter), ProviderError("transient", "HTTP 503", 503))
    assert limiter.value == before


def test_acquire_waits_for_a_free_slot() -> None:
    async def scenario() -> list[str]:
        limiter = AIMDLimiter(64, initial=2)
        order: list[str] = []
        a, b = await limiter.acquire(), await limiter.acquire()
        third = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0.01)
        order.append("third waiting" if not third.done() else "third ran")
        limiter.done(a, None)
        c = await asyncio.wait_for(third, 1)
        order.append("third admitted")
        limiter.done(b, None)
        limiter.done(c, None)
        assert limiter.inflight == 0
        return order

    assert asyncio.run(scenario()) == ["third waiting", "third admitted"]


def test_retry_after_holds_new_attempts() -> None:
    async def scenario() -> float:
        limiter = AIMDLimiter(64, initial=4)
        ticket = await limiter.acquire()
        limiter.done(ticket, ProviderError("transient", "HTTP 429", 429, retry_after_s=0.2))
        loop = asyncio.get_running_loop()
        started = loop.time()
        limiter.done(await limiter.acquire(), None)
        return loop.time() - started

    assert asyncio.run(scenario()) >= 0.19


def test_cancelled_waiter_passes_its_slot_on() -> None:
    async def scenario() -> None:
        limiter = AIMDLimiter(64, initial=1)
        held = await limiter.acquire()
        first = asyncio.create_task(limiter.acquire())
        second = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0)
        first.cancel()
        limiter.done(held, None)
        ticket = await asyncio.wait_for(second, 1)
        limiter.abandon(ticket)
        assert limiter.inflight == 0

    asyncio.run(scenario())


def test_settings() -> None:
    assert parse_concurrency("auto") == "auto"
    assert parse_concurrency("12") == 12
    for bad in ("0", "many"):
        with pytest.raises(UsageError):
            parse_concurrency(bad)
    with pytest.raises(UsageError, match="local backend"):
        build_backend("ray", concurrency="auto")
    backend = build_backend("local", concurrency="auto", max_concurrency=32)
    assert isinstance(backend, LocalBackend) and backend.adaptive
    assert backend.concurrency == 32
    assert backend.describe()["concurrency"] == "auto"
    assert backend.limited(1).describe() == {"backend": "local", "concurrency": 1}
    assert build_backend("local", concurrency=8).describe() == {
        "backend": "local",
        "concurrency": 8,
    }


@pytest.fixture
def capped() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(latency_s=0.05) as server:
        server.inflight_cap = 16
        yield server


def test_run_settles_near_the_hidden_cap(capped: FakeLLMServer) -> None:
    n = 600
    requests = addition_requests(f"{capped.base_url}/v1", n)
    backend = LocalBackend(64, RetryPolicy(timeout_s=10.0), adaptive=True)
    execution = backend.describe()
    outcomes: list[tuple[ModelRequest, ModelResponse | ProviderError]] = []
    backend.run(requests, lambda r, o: outcomes.append((r, o)))

    assert len(outcomes) == n
    assert all(isinstance(o, ModelResponse) for _, o in outcomes)  # nothing lost
    assert sorted(r.key for r, _ in outcomes) == sorted(r.key for r in requests)
    refused = sum(1 for r in capped.requests if r["status"] == 429)
    assert capped.calls == n + refused
    assert refused < 0.05 * capped.calls, (refused, capped.calls)
    assert capped.max_inflight <= 17  # the cap, plus the refused one
    ((label, stats),) = backend.limiter_stats().items()
    assert "fake-model" in label
    assert stats["sent"] == capped.calls and stats["refused"] == refused
    assert refused >= 1  # it did find the cap (it was asked for up to 64)
    settled = execution["settled_concurrency"]
    assert isinstance(settled, dict)
    assert 8 <= settled[label] <= 24


def test_judge_queue_works_adaptive(capped: FakeLLMServer) -> None:
    backend = LocalBackend(8, RetryPolicy(timeout_s=10.0), adaptive=True)
    requests = addition_requests(f"{capped.base_url}/v1", 20)
    outcomes: list[ModelResponse | ProviderError] = []

    async def scenario() -> None:
        queue: asyncio.Queue[ModelRequest | None] = asyncio.Queue()
        for request in requests:
            queue.put_nowait(request)
        for _ in range(backend.concurrency):
            queue.put_nowait(None)
        await backend.run_queue(queue, lambda r, o: outcomes.append(o))

    asyncio.run(scenario())
    assert len(outcomes) == 20 and all(isinstance(o, ModelResponse) for o in outcomes)
