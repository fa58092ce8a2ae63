"""StreamTransport against real loopback servers: keep-alive, framing, errors, TLS.

Each test server is an asyncio server on 127.0.0.1 whose per-connection behaviour the
test scripts, so the transport is checked against the bytes a server really sends.
"""

import asyncio
import gzip
import json
import os
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from gradetrail_lib.backends.transport import StreamTransport

# anyio's pytest plugin (installed with httpx) runs the async tests, on asyncio only.
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Server:
    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[bytes] = []


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request (head and Content-Length body), or None at end of stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


def reply(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@asynccontextmanager
async def serve(
    answer: Callable[[Server, int], bytes | None],
    ssl_context: ssl.SSLContext | None = None,
    *,
    close_after_answer: bool = False,
) -> AsyncIterator[tuple[Server, str]]:
    """A server answering each request with `answer(server, request_index)`; None closes
    the connection without answering. It closes after an answer that says so
    ("connection: close"), or after every answer with `close_after_answer`."""
    server = Server()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            while (request := await read_request(reader)) is not None:
                server.requests.append(request)
                data = answer(server, len(server.requests) - 1)
                if data is None:
                    break
                writer.write(data)
                await writer.drain()
                if close_after_answer or b"connection: close" in data.lower():
                    break
        finally:
            writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ssl_context)
    port = listener.sockets[0].getsockname()[1]
    scheme = "https" if ssl_context else "http"
    host = "localhost" if ssl_context else "127.0.0.1"
    async with listener:
        yield server, f"{scheme}://{host}:{port}"


async def post(client: httpx.AsyncClient, url: str, payload: object) -> httpx.Response:
    response = await client.post(f"{url}/v1/chat/completions", json=payload)
    await response.aread()
    return response


def ok(body: bytes = b'{"ok": true}') -> Callable[[Server, int], bytes]:
    return lambda _server, _i: reply(body, "content-type: application/json")


async def test_requests_reuse_one_kept_alive_connection() -> None:
    async with (
        serve(ok()) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        for i in range(5):
            response = await post(client, url, {"i": i})
            assert response.status_code == 200
            assert response.json() == {"ok": True}
    assert server.connections == 1
    assert len(server.requests) == 5
    # The body is on the wire as sent, after the head.
    assert server.requests[3].endswith(b'{"i":3}')
    assert server.requests[3].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")


async def test_concurrent_requests_get_a_connection_each_and_their_own_answer() -> None:
    def echo(server: Server, i: int) -> bytes:
        return reply(server.requests[i].split(b"\r\n\r\n", 1)[1])

    async with (
        serve(echo) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        responses = await asyncio.gather(*(post(client, url, {"n": n}) for n in range(20)))
        assert [r.json() for r in responses] == [{"n": n} for n in range(20)]
        assert server.connections == 20
        # Afterwards all 20 are idle and kept: a second wave opens none.
        await asyncio.gather(*(post(client, url, {"n": n}) for n in range(20)))
    assert server.connections == 20


async def test_chunked_and_gzip_bodies_are_decoded() -> None:
    text = os.urandom(2500).hex()  # incompressible enough to fill all three chunks
    payload = json.dumps({"text": text}).encode()
    packed = gzip.compress(payload)
    assert len(packed) > 2100
    chunked = (
        b"".join(
            f"{len(part):x}\r\n".encode() + part + b"\r\n"
            for part in (packed[:100], packed[100:2000], packed[2000:])
        )
        + b"0\r\n\r\n"
    )
    answer = reply(chunked, "transfer-encoding: chunked", "content-encoding: gzip")
    async with (
        serve(lambda _s, _i: answer) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        first = await post(client, url, {})
        second = await post(client, url, {})
    assert first.content == payload
    assert second.json() == {"text": text}
    assert server.connections == 1  # a chunked answer ends cleanly, so the connection stays


async def test_connection_close_answer_is_not_reused() -> None:
    answer = reply(b"{}", "connection: close")
    async with (
        serve(lambda _s, _i: answer) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        for _ in range(3):
            assert (await post(client, url, {})).status_code == 200
    assert server.connections == 3


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    # The server answers and then closes every connection (no "connection: close"
    # header): the client notices the closed idle connection and opens another.
    async with (
        serve(ok(b"{}"), close_after_answer=True) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        for _ in range(3):
            assert (await post(client, url, {})).status_code == 200
            await asyncio.sleep(0.05)  # the close reaches the client while it is idle
    assert server.connections == 3


async def test_server_hanging_up_without_an_answer_is_a_protocol_error() -> None:
    async with (
        serve(lambda _s, _i: None) as (_, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        with pytest.raises(httpx.RemoteProtocolError):
            await post(client, url, {})


async def test_truncated_body_is_a_protocol_error() -> None:
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\nconnection: close\r\n\r\n{}"
    async with (
        serve(lambda _s, _i: answer) as (_, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        with pytest.raises(httpx.RemoteProtocolError):
            await post(client, url, {})


async def test_read_timeout_and_refused_connection_are_httpx_errors() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)
        writer.close()

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    transport = StreamTransport()
    async with listener, httpx.AsyncClient(transport=transport, timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await post(client, url, {})
    # Nothing listens on a port just released.
    probe = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    async with httpx.AsyncClient(transport=StreamTransport()) as client:
        with pytest.raises(httpx.ConnectError):
            await post(client, f"http://127.0.0.1:{port}", {})


async def test_unsupported_scheme_is_refused() -> None:
    async with httpx.AsyncClient(transport=StreamTransport()) as client:
        with pytest.raises(httpx.UnsupportedProtocol):
            await client.get("ftp://127.0.0.1/x")


async def test_https_verifies_the_server_certificate(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with serve(ok(), ssl_context=server_context) as (server, url):
        async with httpx.AsyncClient(transport=StreamTransport(trusting)) as client:
            assert (await post(client, url, {})).json() == {"ok": True}
            assert (await post(client, url, {})).json() == {"ok": True}
        assert server.connections == 1
        # The default context does not trust a self-signed certificate.
        async with httpx.AsyncClient(transport=StreamTransport()) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await post(client, url, {})


async def test_informational_answer_is_skipped_for_the_final_one() -> None:
    answer = b"HTTP/1.1 100 Continue\r\nx-early: 1\r\n\r\n" + reply(b'{"final": 1}', "x-late: 2")
    async with (
        serve(lambda _s, _i: answer) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        for _ in range(2):
            response = await post(client, url, {})
            assert (response.status_code, response.json()) == (200, {"final": 1})
            assert "x-early" not in response.headers and response.headers["x-late"] == "2"
    assert server.connections == 1


async def test_body_delimited_by_close_is_read_whole_and_not_reused() -> None:
    # No content-length, not chunked: the body is what comes until the server closes.
    answer = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{"to": "eof"}'
    async with (
        serve(lambda _s, _i: answer, close_after_answer=True) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        for _ in range(2):
            assert (await post(client, url, {})).json() == {"to": "eof"}
    assert server.connections == 2


async def test_bytes_after_an_answer_retire_the_connection() -> None:
    answer = reply(b"{}") + b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
    async with (
        serve(lambda _s, _i: answer) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        for _ in range(3):
            assert (await post(client, url, {})).json() == {}
    assert server.connections == 3


async def test_malformed_answer_is_a_protocol_error() -> None:
    async with (
        serve(lambda _s, _i: b"HTTP/1.1 abc\r\n\r\n") as (_, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        with pytest.raises(httpx.RemoteProtocolError, match="malformed"):
            await post(client, url, {})


async def test_header_that_could_inject_is_refused_without_showing_its_value() -> None:
    async with (
        serve(ok()) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        secret = "sk-secret\r\nx-injected: 1"
        with pytest.raises(httpx.LocalProtocolError) as info:
            await client.post(f"{url}/v1/x", json={}, headers={"authorization": secret})
        assert "sk-secret" not in str(info.value) and "authorization" in str(info.value)
        assert server.requests == []


async def test_request_head_carries_host_and_the_body_length() -> None:
    async with (
        serve(ok()) as (server, url),
        httpx.AsyncClient(transport=StreamTransport()) as client,
    ):
        await post(client, url, {"a": "é"})
    head, body = server.requests[0].split(b"\r\n\r\n", 1)
    lines = head.lower().split(b"\r\n")
    assert f"host: {url.split('//')[1]}".encode() in lines
    assert f"content-length: {len(body)}".encode() in lines
    assert json.loads(body) == {"a": "é"}
