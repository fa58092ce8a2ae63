"""Each provider's batch adapter against the fake server's batch APIs (real HTTP on
loopback): the lines it uploads, the status it reads, the results (answers, per-request
errors, requests an expired batch did not run), cancelling, finding a batch by its claim,
and splitting by the provider's limits."""

import time
from collections.abc import Iterator

import httpx
import pytest

from gradetrail_lib.backends.transport import shared_ssl_context
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.batch import (
    BatchAPI,
    BatchLimits,
    BatchStatus,
    Connection,
    split,
)
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.requests import addition_requests

PROVIDERS = ("openai", "anthropic", "azure_openai")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as srv:
        yield srv


def requests_for(server: FakeLLMServer, provider: str, n: int) -> list[ModelRequest]:
    if provider == "azure_openai":
        endpoint = Endpoint(
            "azure_openai",
            "fake-model",
            server.base_url,
            "GT_KEY",
            (("api_version", "2024-10-21"),),
        )
        return [
            ModelRequest(key=r.key, endpoint=endpoint, messages=r.messages, params=r.params)
            for r in addition_requests(server.base_url, n)
        ]
    return addition_requests(f"{server.base_url}/v1", n, provider=provider, key_env="GT_KEY")


def connect(requests: list[ModelRequest]) -> Connection:
    # The process's one CA bundle (a client's own load is 50-100 ms).
    client = httpx.Client(verify=shared_ssl_context())
    return Connection(client=client, endpoint=requests[0].endpoint, api_key="sk-test")


def wait_until_final(api: BatchAPI, conn: Connection, batch_id: str) -> BatchStatus:
    for _ in range(200):
        status = api.status(conn, batch_id)
        if status.final:
            return status
        time.sleep(0.02)
    raise AssertionError("the batch never ended")


def api_of(provider: str) -> BatchAPI:
    api = registry.batch_api(provider)
    assert api is not None
    return api


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_batch_answers_each_request_by_its_key(server: FakeLLMServer, provider: str) -> None:
    server.batches.delay_s = 0.2
    requests = requests_for(server, provider, 5)
    api, conn = api_of(provider), connect(requests)
    batch_id = api.submit(conn, [api.line(r) for r in requests], "gt-sub-1")
    running = api.status(conn, batch_id)
    assert running.state == "running" and running.total == 5
    status = wait_until_final(api, conn, batch_id)
    assert (status.state, status.done, status.failed) == ("ended", 5, 0)
    answers = {r.key: r.outcome for r in api.results(conn, status)}
    assert server.batches.submitted == [r.key for r in requests]
    for i, request in enumerate(requests):
        answer = answers[request.key]
        assert isinstance(answer, ModelResponse)
        assert answer.text == f"Answer: {i + 1000}"
        assert answer.input_tokens and answer.output_tokens
    assert server.calls == 0  # nothing went the synchronous way


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_request_the_batch_fails_is_an_error_with_the_providers_message(
    server: FakeLLMServer, provider: str
) -> None:
    server.batches.error_for = lambda body: (
        "prompt is too long" if "Q: 1 + 1000" in str(body) else None
    )
    requests = requests_for(server, provider, 3)
    api, conn = api_of(provider), connect(requests)
    status = wait_until_final(api, conn, api.submit(conn, [api.line(r) for r in requests], "s"))
    assert status.failed == 1
    outcomes = {r.key: r.outcome for r in api.results(conn, status)}
    failed = outcomes[requests[1].key]
    assert isinstance(failed, ProviderError) and "prompt is too long" in failed.message
    assert isinstance(outcomes[requests[0].key], ModelResponse)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_expired_batch_says_which_requests_it_did_not_run(
    server: FakeLLMServer, provider: str
) -> None:
    server.batches.expire_after = [2]
    requests = requests_for(server, provider, 5)
    api, conn = api_of(provider), connect(requests)
    status = wait_until_final(api, conn, api.submit(conn, [api.line(r) for r in requests], "s"))
    assert status.state == "expired"
    outcomes = {r.key: r.outcome for r in api.results(conn, status)}
    assert [outcomes[r.key] is None for r in requests] == [False, False, True, True, True]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_cancel_ends_the_batch_with_nothing_more_run(server: FakeLLMServer, provider: str) -> None:
    server.batches.delay_s = 30
    requests = requests_for(server, provider, 4)
    api, conn = api_of(provider), connect(requests)
    batch_id = api.submit(conn, [api.line(r) for r in requests], "s")
    api.cancel(conn, batch_id)
    status = wait_until_final(api, conn, batch_id)
    assert status.state == "cancelled"
    assert all(r.outcome is None for r in api.results(conn, status))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_claim_finds_the_batch_it_submitted(server: FakeLLMServer, provider: str) -> None:
    requests = requests_for(server, provider, 3)
    api, conn = api_of(provider), connect(requests)
    since = time.time()
    assert api.find(conn, "gt-mine", since, 3) is None  # nothing submitted yet
    other = api.submit(conn, [api.line(r) for r in requests[:2]], "gt-other")
    mine = api.submit(conn, [api.line(r) for r in requests], "gt-mine")
    assert api.find(conn, "gt-mine", since, 3, frozenset({other})) == mine


def test_the_lines_are_the_synchronous_bodies(server: FakeLLMServer) -> None:
    import json

    [request] = requests_for(server, "openai", 1)
    line = json.loads(api_of("openai").line(request))
    assert line["custom_id"] == request.key
    assert (line["method"], line["url"]) == ("POST", "/v1/chat/completions")
    assert line["body"]["messages"] == request.messages and line["body"]["max_tokens"] == 16
    [request] = requests_for(server, "anthropic", 1)
    line = json.loads(api_of("anthropic").line(request))
    assert line["custom_id"] == request.key and line["params"]["model"] == "fake-model"
    [request] = requests_for(server, "azure_openai", 1)
    assert json.loads(api_of("azure_openai").line(request))["url"] == "/chat/completions"


def test_split_keeps_each_batch_within_the_limits() -> None:
    lines = [(f"k{i}", b"x" * 10) for i in range(10)]
    assert [len(g) for g in split(lines, BatchLimits(max_requests=4, max_bytes=1000))] == [4, 4, 2]
    # 11 bytes a line with its newline: 3 lines fit in 40 bytes.
    assert [len(g) for g in split(lines, BatchLimits(max_requests=100, max_bytes=40))] == [
        3,
        3,
        3,
        1,
    ]
    with pytest.raises(ProviderError, match="over the batch limit"):
        split([("big", b"x" * 50)], BatchLimits(max_requests=10, max_bytes=40))


def test_only_providers_with_a_batch_api_have_one() -> None:
    assert {n for n in registry.names() if registry.batch_api(n)} == set(PROVIDERS)
