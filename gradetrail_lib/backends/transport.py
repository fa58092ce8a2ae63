"""An httpx transport for HTTP/1.1 over plain asyncio streams, framed by h11.

httpx's default transport (httpcore on anyio) costs about 0.7 ms of CPU per request on
these machines, and its pool degrades with many requests in flight (notes/FACTS.md);
at 64 in flight that CPU alone stretches every 200 ms round by tens of milliseconds.
The same exchange over asyncio streams with h11 doing the HTTP/1.1 framing costs a
fraction of that. Each connection carries one request at a time and is kept alive for
the next; the backends bound how many are in flight, so the transport does not.

Errors are httpx's own (ConnectError, ReadTimeout, RemoteProtocolError, ...), so the
retry policy in `providers.caller` treats this transport and httpx's alike.
"""

import asyncio
import ssl
from collections import defaultdict
from contextlib import suppress
from functools import cache
from typing import Any

import h11
import httpx

Origin = tuple[str, str, int]

DEFAULT_PORTS = {"http": 80, "https": 443}
READ_SIZE = 64 * 1024


@cache
def shared_ssl_context() -> ssl.SSLContext:
    """One CA bundle load per process, on first use: each costs ~30 ms, which a plain-http
    run should not pay and a many-client run should not pay many times."""
    return httpx.create_ssl_context()


class _Connection:
    """One keep-alive connection; `exchange` sends a request and reads its whole answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._h11 = h11.Connection(h11.CLIENT)

    @property
    def usable(self) -> bool:
        """Idle and not closed by the server meanwhile (a closed one would fail the send)."""
        return self._h11.our_state is h11.IDLE and not self._reader.at_eof()

    async def exchange(
        self, request: httpx.Request, timeouts: dict[str, float | None]
    ) -> httpx.Response:
        body = await request.aread()
        head = h11.Request(
            method=request.method, target=request.url.raw_path, headers=request.headers.raw
        )
        data = self._h11.send(head) or b""
        if body:
            data += self._h11.send(h11.Data(data=body)) or b""
        data += self._h11.send(h11.EndOfMessage()) or b""
        try:
            async with asyncio.timeout(timeouts.get("write")):
                self._writer.write(data)
                await self._writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("timed out writing the request", request=request) from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc), request=request) from exc
        try:
            async with asyncio.timeout(timeouts.get("read")):
                return await self._read_response(request)
        except TimeoutError as exc:
            raise httpx.ReadTimeout("timed out reading the response", request=request) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc), request=request) from exc
        except h11.RemoteProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc

    async def _read_response(self, request: httpx.Request) -> httpx.Response:
        response: h11.Response | None = None
        chunks: list[bytes] = []
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                self._h11.receive_data(await self._reader.read(READ_SIZE))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError(
                    "server disconnected without sending a complete response", request=request
                )
            # InformationalResponse (1xx): wait for the final response.
        assert response is not None  # h11 yields EndOfMessage only after a Response
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()  # else MUST_CLOSE: `usable` turns False
        return httpx.Response(
            response.status_code,
            headers=list(response.headers),
            # Raw bytes: httpx decodes any content-encoding when the body is read.
            stream=httpx.ByteStream(b"".join(chunks)),
            extensions={"http_version": b"HTTP/" + response.http_version},
            request=request,
        )

    def close(self) -> None:
        self._writer.close()

    async def aclose(self) -> None:
        self._writer.close()
        with suppress(OSError):
            await self._writer.wait_closed()


class StreamTransport(httpx.AsyncBaseTransport):
    """Keep-alive connections per origin, one request in flight on each."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        # None: the shared default context, loaded on the first https connection.
        self._ssl_context = ssl_context
        self._idle: defaultdict[Origin, list[_Connection]] = defaultdict(list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        origin = (url.scheme, url.host, url.port or DEFAULT_PORTS[url.scheme])
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        connection = self._idle_connection(origin) or await self._connect(
            origin, timeouts.get("connect"), request
        )
        try:
            response = await connection.exchange(request, timeouts)
        except BaseException:
            connection.close()
            raise
        if connection.usable:
            self._idle[origin].append(connection)
        else:
            connection.close()
        return response

    def _idle_connection(self, origin: Origin) -> _Connection | None:
        idle = self._idle[origin]
        while idle:
            connection = idle.pop()
            if connection.usable:
                return connection
            connection.close()
        return None

    async def _connect(
        self, origin: Origin, timeout: float | None, request: httpx.Request
    ) -> _Connection:
        scheme, host, port = origin
        tls = scheme == "https"
        if tls and self._ssl_context is None:
            self._ssl_context = shared_ssl_context()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=self._ssl_context if tls else None,
                    server_hostname=host if tls else None,
                    limit=READ_SIZE,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(
                f"timed out connecting to {host}:{port}", request=request
            ) from exc
        except OSError as exc:  # ssl.SSLError included
            raise httpx.ConnectError(
                f"cannot connect to {host}:{port}: {exc}", request=request
            ) from exc
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        connections = [c for idle in self._idle.values() for c in idle]
        self._idle.clear()
        await asyncio.gather(*(c.aclose() for c in connections))
