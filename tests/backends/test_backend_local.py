"""The asyncio backend against the fake provider server on a real loopback socket."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.errors import RunAborted
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.policy import RetryPolicy
from tests.support.fake_llm_server import FakeLLMServer, Fault
from tests.support.requests import addition_requests

# Retries without real waiting: the backend uses asyncio.sleep.
FAST = RetryPolicy(base_delay_s=0.001, max_delay_s=0.002, timeout_s=10.0)

Outcomes = list[tuple[ModelRequest, ModelResponse | ProviderError]]


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def run(backend: LocalBackend, requests: list[ModelRequest]) -> Outcomes:
    outcomes: Outcomes = []
    backend.run(requests, lambda req, outcome: outcomes.append((req, outcome)))
    return outcomes


@pytest.mark.parametrize(
    ("provider", "key_env"), [("openai_compatible", None), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_every_request_answered_once_within_concurrency(
    srv: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, provider: str, key_env: str | None
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-loopback")
    srv.latency_s = 0.02
    requests = addition_requests(f"{srv.base_url}/v1", 30, provider=provider, key_env=key_env)
    outcomes = run(LocalBackend(concurrency=3, policy=FAST), requests)

    assert len(outcomes) == 30
    assert sorted(r.key for r, _ in outcomes) == sorted(r.key for r in requests)
    for request, outcome in outcomes:
        assert isinstance(outcome, ModelResponse), outcome
        i = int(request.key, 16)
        assert outcome.text == f"Answer: {i + 1000}"  # each answer goes to its own request
        assert outcome.attempts == 1
    assert srv.calls == 30
    assert 1 < srv.max_inflight <= 3


def test_transient_failures_are_retried(srv: FakeLLMServer) -> None:
    srv.script = [Fault(status=503), Fault(status=429, headers={"retry-after": "0"}), Fault(500)]
    outcomes = run(
        LocalBackend(concurrency=2, policy=FAST), addition_requests(f"{srv.base_url}/v1", 10)
    )
    assert len(outcomes) == 10
    assert all(isinstance(o, ModelResponse) for _, o in outcomes)
    assert sum(o.attempts for _, o in outcomes if isinstance(o, ModelResponse)) == 13
    assert srv.calls == 13


def test_dropped_connection_is_retried(srv: FakeLLMServer) -> None:
    srv.script = [Fault(close=True)]
    outcomes = run(
        LocalBackend(concurrency=1, policy=FAST), addition_requests(f"{srv.base_url}/v1", 3)
    )
    assert [o.attempts for _, o in outcomes if isinstance(o, ModelResponse)] == [2, 1, 1]


def test_identical_fatal_errors_abort_the_run(srv: FakeLLMServer) -> None:
    srv.fail_always = Fault(status=401)
    outcomes: Outcomes = []
    with pytest.raises(RunAborted, match="3 identical errors in a row: HTTP 401"):
        LocalBackend(concurrency=2, policy=FAST).run(
            addition_requests(f"{srv.base_url}/v1", 50),
            lambda req, outcome: outcomes.append((req, outcome)),
        )
    assert 3 <= srv.calls <= 6  # far fewer than 50
    assert len(outcomes) >= 3
    for _, outcome in outcomes:
        assert isinstance(outcome, ProviderError)
        assert (outcome.kind, outcome.status) == ("fatal", 401)


def test_missing_key_aborts_without_any_request(
    srv: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RunAborted, match="OPENAI_API_KEY"):
        run(
            LocalBackend(concurrency=4),
            addition_requests(
                f"{srv.base_url}/v1", 50, provider="openai", key_env="OPENAI_API_KEY"
            ),
        )
    assert srv.calls == 0


def test_errors_broken_by_a_success_do_not_abort(srv: FakeLLMServer) -> None:
    # 401, 401, success, 401, 401, success: never three identical errors in a row.
    completion = {
        "model": "fake-model",
        "choices": [{"message": {"content": "scripted"}, "finish_reason": "stop"}],
    }
    ok = Fault(status=200, body=json.dumps(completion))
    srv.script = [Fault(status=401), Fault(status=401), ok, Fault(status=401), Fault(status=401)]
    outcomes = run(
        LocalBackend(concurrency=1, policy=FAST), addition_requests(f"{srv.base_url}/v1", 6)
    )
    kinds = [type(o).__name__ for _, o in outcomes]
    assert kinds == ["ProviderError", "ProviderError", "ModelResponse"] * 2
    assert srv.calls == 6


def test_empty_request_list(srv: FakeLLMServer) -> None:
    assert run(LocalBackend(concurrency=4), []) == []
    assert srv.calls == 0


def test_limited_and_describe() -> None:
    backend = LocalBackend(concurrency=8)
    assert backend.limited(16) is backend
    assert backend.limited(8) is backend
    smaller = backend.limited(2)
    assert smaller.concurrency == 2
    assert smaller.policy is backend.policy
    assert backend.describe() == {"backend": "local", "concurrency": 8}
    with pytest.raises(ValueError):
        LocalBackend(concurrency=0)


def test_prepare_loads_the_http_stack_that_construction_does_not() -> None:
    # A fully cached run builds a backend and never sends; one that sends loads the HTTP
    # stack in prepare(), with start-up, not in its first responses step.
    code = (
        "import sys\n"
        "from gradetrail_lib.backends import build_backend\n"
        "backend = build_backend('local', concurrency=4)\n"
        "before = 'httpx' in sys.modules\n"
        "backend.prepare()\n"
        "print(before, 'httpx' in sys.modules, 'httptools' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]
