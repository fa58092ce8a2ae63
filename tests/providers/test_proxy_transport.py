"""Proxies from the environment, the User-Agent and the keep-alive limit, end to end.

A loopback proxy started here (CONNECT tunnels, absolute-form requests forwarded) stands in
front of the loopback FakeLLMServer; requests go through `RequestSender` / `call_model` as
a run's do, with the proxy variables set in the environment by each test.
"""

import asyncio
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest

import gradetrail_lib
from gradetrail_lib.backends.clients import RequestSender
from gradetrail_lib.backends.transport import StreamTransport, environment_proxies, proxy_for
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse
from gradetrail_lib.providers.caller import call_model
from gradetrail_lib.providers.policy import RetryPolicy
from tests.support.fake_llm_server import FakeLLMServer

pytestmark = pytest.mark.anyio

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
USER_AGENT = f"gradetrail/{gradetrail_lib.__version__}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def make_request(base_url: str) -> ModelRequest:
    return ModelRequest(
        key="k" * 64,
        endpoint=Endpoint("openai_compatible", "test-model", base_url, None),
        messages=[{"role": "user", "content": "Q: 2 + 3"}],
        params={"max_tokens": 16},
    )


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        with suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
    finally:
        writer.close()


class Proxy:
    """What the proxy saw: CONNECT targets, forwarded absolute-form targets, connections."""

    def __init__(self) -> None:
        self.tunnels: list[str] = []
        self.forwarded: list[str] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream: asyncio.StreamWriter | None = None
        pump: asyncio.Task[None] | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, OSError):
                    return
                line, _, rest = head.partition(b"\r\n")
                method, target, version = line.split(b" ")
                if method == b"CONNECT":
                    self.tunnels.append(target.decode())
                    host, port = target.decode().rsplit(":", 1)
                    up_reader, up_writer = await asyncio.open_connection(host, int(port))
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await writer.drain()
                    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
                    return
                # Absolute-form: forwarded in origin-form on one upstream connection.
                url = urllib.parse.urlsplit(target.decode())
                self.forwarded.append(target.decode())
                if upstream is None:
                    up_reader, upstream = await asyncio.open_connection(url.hostname, url.port)
                    pump = asyncio.create_task(pipe(up_reader, writer))
                length = 0
                for header in rest.split(b"\r\n"):
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":", 1)[1])
                body = await reader.readexactly(length)
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                upstream.write(b"%s %s %s\r\n" % (method, path.encode(), version) + rest + body)
                await upstream.drain()
        finally:
            if upstream is not None:
                upstream.close()
            if pump is not None:
                pump.cancel()
            writer.close()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def listen(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    """A loopback server running `handler` per connection; its port. Closes every
    connection at the end (Server.close_clients is Python 3.13's)."""
    writers: list[asyncio.StreamWriter] = []
    tasks: list[asyncio.Task[None]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        if (task := asyncio.current_task()) is not None:
            tasks.append(task)
        with suppress(OSError, asyncio.CancelledError):
            await handler(reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ssl_context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in writers:
            writer.close()
        for task in tasks:  # each closes its upstream connection as it stops
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


@asynccontextmanager
async def relay(port: int) -> AsyncIterator[tuple[list[int], int]]:
    """A TCP relay to 127.0.0.1:`port` (optionally terminating TLS): counts connections."""
    count = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count[0] += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async with listen(handle) as relay_port:
        yield count, relay_port


def assert_answered(outcome: object, srv: FakeLLMServer) -> None:
    assert isinstance(outcome, ModelResponse), outcome
    assert srv.requests[-1]["headers"]["user-agent"] == USER_AGENT


async def test_http_proxy_from_the_environment_carries_the_request(
    srv: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = Proxy()
    async with listen(proxy.handle) as proxy_port:
        monkeypatch.setenv("HTTP_PROXY", f"127.0.0.1:{proxy_port}")  # no scheme: http
        sender = RequestSender()
        try:
            for _ in range(2):
                assert_answered(
                    await sender.send(make_request(f"{srv.base_url}/v1"), RetryPolicy()), srv
                )
        finally:
            await sender.aclose()
    assert proxy.forwarded == [f"{srv.base_url}/v1/chat/completions"] * 2
    assert proxy.connections == 1  # kept alive by httpx's pool
    assert srv.calls == 2


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*", "localhost, 127.0.0.1"])
async def test_no_proxy_covering_the_host_goes_direct(
    srv: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    proxy = Proxy()
    async with listen(proxy.handle) as proxy_port:
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy_port}")
        monkeypatch.setenv("NO_PROXY", no_proxy)
        sender = RequestSender()
        try:
            assert_answered(
                await sender.send(make_request(f"{srv.base_url}/v1"), RetryPolicy()), srv
            )
        finally:
            await sender.aclose()
    assert proxy.connections == 0
    assert srv.calls == 1


async def test_https_proxy_tunnels_with_connect(
    srv: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, tls_files: tuple[Path, Path]
) -> None:
    cert, key = tls_files
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)

    async def terminate_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(srv.host, srv.port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    proxy = Proxy()
    async with listen(terminate_tls, server_context) as tls_port, listen(proxy.handle) as port:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # not for https origins
        transport = StreamTransport(ssl.create_default_context(cafile=str(cert)))
        try:
            for _ in range(2):
                request = make_request(f"https://localhost:{tls_port}/v1")
                assert_answered(await call_model(transport, request, RetryPolicy()), srv)
        finally:
            await transport.aclose()
    assert proxy.tunnels == [f"localhost:{tls_port}"]  # one tunnel, kept alive
    assert proxy.forwarded == []
    assert srv.calls == 2


async def test_direct_requests_send_the_user_agent(srv: FakeLLMServer) -> None:
    sender = RequestSender()
    try:
        assert_answered(await sender.send(make_request(f"{srv.base_url}/v1"), RetryPolicy()), srv)
    finally:
        await sender.aclose()


@pytest.mark.parametrize(("keepalive_s", "connections"), [(60.0, 1), (0.05, 2)])
async def test_a_connection_idle_past_the_keepalive_limit_is_not_reused(
    srv: FakeLLMServer, keepalive_s: float, connections: int
) -> None:
    async with relay(srv.port) as (count, port):
        transport = StreamTransport(keepalive_s=keepalive_s)
        try:
            for _ in range(2):
                request = make_request(f"http://127.0.0.1:{port}/v1")
                assert_answered(await call_model(transport, request, RetryPolicy()), srv)
                await asyncio.sleep(0.15)
        finally:
            await transport.aclose()
    assert count[0] == connections
    assert srv.calls == 2


def test_proxy_choice_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert environment_proxies() == {}
    monkeypatch.setenv("ALL_PROXY", "http://all:1")
    monkeypatch.setenv("https_proxy", "proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "internal.corp, 10.0.0.5:8000")
    proxies = environment_proxies()
    assert proxy_for(proxies, "https", "api.openai.com", 443) == "http://proxy.corp:3128"
    assert proxy_for(proxies, "http", "api.openai.com", 80) == "http://all:1"
    assert proxy_for(proxies, "https", "llm.internal.corp", 443) is None  # a subdomain
    assert proxy_for(proxies, "http", "10.0.0.5", 8000) is None
    assert proxy_for(proxies, "http", "10.0.0.5", 8001) == "http://all:1"
    for no_proxy, host, direct in [
        ("*", "x.y", True),
        ("corp", "corp", True),
        ("corp", "a.b.corp", True),
        ("corp", "notcorp", False),
        (".corp", "corp", False),
        (".corp", "a.corp", True),
        ("*.corp", "a.corp", True),
        ("https://api.corp", "api.corp", True),
        ("http://api.corp", "api.corp", False),  # another scheme
        ("https://corp", "api.corp", False),  # with a scheme: that host only
        ("127.0.0.1", "127.0.0.1", True),
        ("::1", "::1", True),
        ("[::1]:443", "::1", True),
        ("Localhost", "localhost", True),
        ("", "x.y", False),
    ]:
        proxies = {"https": "http://p:1", "no": no_proxy}
        assert (proxy_for(proxies, "https", host, 443) is None) == direct, (no_proxy, host)
    assert StreamTransport(trust_env=False)._proxies == {}
