"""An httpx transport for HTTP/1.1 over plain asyncio streams, parsed by httptools.

httpx's default transport (httpcore on anyio) costs about 0.7 ms of CPU per request on
these machines, and its pool degrades with many requests in flight (docs/performance.md);
at 64 in flight that CPU alone stretches every 200 ms round by tens of milliseconds.
Framing with h11 instead still cost ~150 us a request in its pure-Python state machine;
httptools (llhttp, the parser uvicorn uses) parses an answer in ~3 us. The request head
is written here: method, path, and httpx's own headers (Host and Content-Length
included), each checked as h11 would check it. Each connection carries one request at a
time and is kept alive for the next; the backends bound how many are in flight, so the
transport does not.

Errors are httpx's own (ConnectError, ReadTimeout, RemoteProtocolError, ...), so the
retry policy in `providers.caller` treats this transport and httpx's alike.
"""

import asyncio
import re
import ssl
from collections import defaultdict
from contextlib import suppress
from functools import cache
from typing import Any

import httptools
import httpx

Origin = tuple[str, str, int]

DEFAULT_PORTS = {"http": 80, "https": 443}
READ_SIZE = 64 * 1024

# RFC 9110: a header name is a token; a value holds no CR, LF or NUL (which would let a
# value, an API key read from the environment say, start a header or request of its own).
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_FORBIDDEN_IN_VALUE = re.compile(rb"[\r\n\x00]")
# Set here from the body actually sent, whatever the request said.
_FRAMING_HEADERS = frozenset({b"content-length", b"transfer-encoding"})


@cache
def shared_ssl_context() -> ssl.SSLContext:
    """One CA bundle load per process, on first use: each costs ~30 ms, which a plain-http
    run should not pay and a many-client run should not pay many times."""
    return httpx.create_ssl_context()


def request_bytes(request: httpx.Request, body: bytes) -> bytes:
    """The request on the wire: head and body, with the body's length as its framing."""
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    for name, value in request.headers.raw:
        if _TOKEN.fullmatch(name) is None or _FORBIDDEN_IN_VALUE.search(value) is not None:
            # The value is not shown: it may be a key.
            raise httpx.LocalProtocolError(
                f"header {name.decode('latin-1')!r} has a forbidden character", request=request
            )
        if name.lower() not in _FRAMING_HEADERS:
            lines.append(name + b": " + value)
    if body or request.method not in ("GET", "HEAD"):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class _Answer:
    """httptools' callbacks for one exchange: the final (non-1xx) response's parts."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.status = 0
        self.headers_done = False
        self.complete = False
        self.trailing = False  # bytes after the answer: the connection is out of step
        self.keep_alive = False
        self.http_version = "1.1"

    def on_message_begin(self) -> None:
        if self.complete:
            self.trailing = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if not self.complete:
            self.status = self.parser.get_status_code()
            self.http_version = self.parser.get_http_version()
            self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if 100 <= self.status < 200:  # informational: the final answer follows
            self.headers, self.body, self.headers_done = [], [], False
            return
        # Read now: llhttp resets its state for the next message after this callback.
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True

    def ends_at_close(self) -> bool:
        """Framed by neither length nor chunks: the body runs to the end of the stream."""
        names = {name.lower() for name, _ in self.headers}
        return self.headers_done and not names & _FRAMING_HEADERS and self.status not in (204, 304)


class _Connection:
    """One keep-alive connection; `exchange` sends a request and reads its whole answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._reusable = True

    @property
    def usable(self) -> bool:
        """Idle and not closed by the server meanwhile (a closed one would fail the send)."""
        return self._reusable and not self._reader.at_eof()

    async def exchange(
        self, request: httpx.Request, timeouts: dict[str, float | None]
    ) -> httpx.Response:
        self._reusable = False  # until a whole answer is read
        data = request_bytes(request, await request.aread())
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

    async def _read_response(self, request: httpx.Request) -> httpx.Response:
        answer = _Answer()
        at_close = False
        while not answer.complete:
            data = await self._reader.read(READ_SIZE)
            if not data:
                if not answer.ends_at_close():
                    raise httpx.RemoteProtocolError(
                        "server disconnected without sending a complete response",
                        request=request,
                    )
                at_close = True
                break
            try:
                answer.parser.feed_data(data)
            except httptools.HttpParserUpgrade as exc:
                raise httpx.RemoteProtocolError(
                    "server switched protocols", request=request
                ) from exc
            except httptools.HttpParserError as exc:
                if not answer.complete:
                    raise httpx.RemoteProtocolError(
                        f"malformed response: {exc}", request=request
                    ) from exc
                answer.trailing = True  # garbage after a whole answer
        self._reusable = not at_close and not answer.trailing and answer.keep_alive
        response = httpx.Response(
            answer.status,
            headers=answer.headers,
            # Raw bytes: httpx decodes any content-encoding when the body is read.
            stream=httpx.ByteStream(b"".join(answer.body)),
            extensions={"http_version": b"HTTP/" + answer.http_version.encode()},
            request=request,
        )
        response.read()  # in memory already: a plain read, not aread's async generators
        return response

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
