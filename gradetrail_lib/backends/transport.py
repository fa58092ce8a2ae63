"""An httpx transport for HTTP/1.1 over plain asyncio streams, parsed by httptools.

httpx's default transport (httpcore on anyio) costs CPU on every request, and its pool
degrades with many requests in flight (docs/performance.md); with many in flight that CPU
alone stretches every round of answers. Framing with h11 instead still cost much of it in
its pure-Python state machine; httptools (llhttp, the parser uvicorn uses) parses an answer
in a small fraction of that. The request head
is written here: method, path, and httpx's own headers (Host and Content-Length
included), each checked as h11 would check it. Each connection carries one request at a
time and is kept alive for the next; the backends bound how many are in flight, so the
transport does not.

Errors are httpx's own (ConnectError, ReadTimeout, RemoteProtocolError, ...), so the
retry policy in `providers.caller` treats this transport and httpx's alike.

Proxies are read from the environment as httpx reads them (`HTTPS_PROXY`, `HTTP_PROXY`,
`ALL_PROXY`, `NO_PROXY`, upper or lower case), once, when the transport is made. An origin
that goes through a proxy is sent by httpx's own transport, which speaks CONNECT for https
and absolute-form requests for http; the choice is made once per origin. A connection idle
longer than `KEEPALIVE_S` is closed rather than reused: servers drop idle connections
(often after 5 to 60 s) and a request sent on one that is being dropped fails.
"""

import asyncio
import ipaddress
import re
import ssl
import time
import urllib.request
from collections import defaultdict
from contextlib import suppress
from functools import cache
from typing import Any

import httptools
import httpx

Origin = tuple[str, str, int]

DEFAULT_PORTS = {"http": 80, "https": 443}
READ_SIZE = 64 * 1024
# Seconds a connection may sit idle and still be reused (httpx's default keepalive_expiry
# is 5 s; the providers' servers keep idle connections for longer than that).
KEEPALIVE_S = 30.0

# RFC 9110: a header name is a token; a value holds no CR, LF or NUL (which would let a
# value, an API key read from the environment say, start a header or request of its own).
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_FORBIDDEN_IN_VALUE = re.compile(rb"[\r\n\x00]")
# Set here from the body actually sent, whatever the request said.
_FRAMING_HEADERS = frozenset({b"content-length", b"transfer-encoding"})


def environment_proxies() -> dict[str, str]:
    """Proxy URL by scheme (`http`, `https`, `all`) and the raw `no` list, from the
    environment only (as httpx: not the system settings `urllib.request.getproxies` adds on
    macOS and Windows). A proxy given without a scheme is an http one, as httpx reads it."""
    proxies = urllib.request.getproxies_environment()
    found = {k: v for k, v in proxies.items() if k in ("http", "https", "all") and v}
    found = {k: v if "://" in v else f"http://{v}" for k, v in found.items()}
    if found and proxies.get("no"):
        found["no"] = proxies["no"]
    return found


def proxy_for(proxies: dict[str, str], scheme: str, host: str, port: int) -> str | None:
    """The proxy URL an origin goes through, or None when it goes direct."""
    url = proxies.get(scheme) or proxies.get("all")
    if url is None:
        return None
    entries = proxies.get("no", "").split(",")
    if any(_bypasses(entry.strip().lower(), scheme, host.lower(), port) for entry in entries):
        return None
    return url


def _bypasses(entry: str, scheme: str, host: str, port: int) -> bool:
    """Whether one `NO_PROXY` entry covers the origin, read as httpx reads it: `*` covers
    all; `name` covers the name and its subdomains, `.name` its subdomains only; an IP
    address or `localhost`, or an entry with a scheme (`http://name`), that host only; a
    `:port` limits the entry to that port."""
    if entry == "*":
        return True
    explicit, _, rest = entry.rpartition("://")
    if explicit not in ("", "all", scheme):
        return False
    entry_host, entry_port = rest, ""
    if rest.startswith("["):  # [IPv6]:port
        entry_host, _, tail = rest[1:].partition("]")
        entry_port = tail.removeprefix(":")
    elif rest.count(":") == 1:
        entry_host, entry_port = rest.split(":")
    if not entry_host or (entry_port and entry_port != str(port)):
        return False
    if entry_host.startswith(("*.", ".")):
        return host.endswith("." + entry_host.lstrip("*."))
    entry_host = entry_host.removeprefix("*")
    if host == entry_host:
        return True
    return not explicit and not _is_ip(entry_host) and host.endswith("." + entry_host)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@cache
def shared_ssl_context() -> ssl.SSLContext:
    """One CA bundle load per process, on first use: each is slow, which a plain-http
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
        self.idle_since = 0.0  # time.monotonic() when last put back idle

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
    """Keep-alive connections per origin, one request in flight on each; an origin behind
    a proxy (from the environment, with `trust_env`) goes through httpx's transport."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        *,
        trust_env: bool = True,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        # None: the shared default context, loaded on the first https connection.
        self._ssl_context = ssl_context
        self._keepalive_s = keepalive_s
        self._idle: defaultdict[Origin, list[_Connection]] = defaultdict(list)
        self._proxies = environment_proxies() if trust_env else {}
        # Per origin: the proxying transport, or None for a direct connection.
        self._routes: dict[Origin, httpx.AsyncHTTPTransport | None] = {}
        self._proxy_transports: dict[str, httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        origin = (url.scheme, url.host, url.port or DEFAULT_PORTS[url.scheme])
        if self._proxies:  # no proxy in the environment: no lookup at all
            try:
                route = self._routes[origin]
            except KeyError:
                route = self._routes[origin] = self._route(origin)
            if route is not None:
                return await route.handle_async_request(request)
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
            connection.idle_since = time.monotonic()
            self._idle[origin].append(connection)
        else:
            connection.close()
        return response

    def _route(self, origin: Origin) -> httpx.AsyncHTTPTransport | None:
        scheme, host, port = origin
        proxy = proxy_for(self._proxies, scheme, host, port)
        if proxy is None:
            return None
        transport = self._proxy_transports.get(proxy)
        if transport is None:
            transport = self._proxy_transports[proxy] = httpx.AsyncHTTPTransport(
                verify=self._ssl_context or shared_ssl_context(),
                trust_env=False,
                proxy=httpx.Proxy(proxy),  # credentials in the URL: Proxy-Authorization
                limits=httpx.Limits(
                    max_connections=None,
                    max_keepalive_connections=None,
                    keepalive_expiry=self._keepalive_s,
                ),
            )
        return transport

    def _idle_connection(self, origin: Origin) -> _Connection | None:
        idle = self._idle[origin]
        while idle:
            connection = idle.pop()  # the most recently used: idle the shortest time
            if time.monotonic() - connection.idle_since > self._keepalive_s:
                # Idle too long, and so has every one put back before it.
                for stale in (connection, *idle):
                    stale.close()
                idle.clear()
                return None
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
        proxying = list(self._proxy_transports.values())
        self._proxy_transports.clear()
        self._routes.clear()
        await asyncio.gather(*(c.aclose() for c in connections), *(t.aclose() for t in proxying))
