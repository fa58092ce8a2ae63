"""The viewer's web app (Starlette) and its server (uvicorn), on loopback only.

Read-only: every route is GET (and HEAD); any other method is 405 and nothing anywhere
writes. With `labels` (`gradetrail view --labels`) there is one route that writes, POST
/label/<run>, which appends to the labels file only and refuses (403) any post that is
not from the viewer's own page with its token (labelling.py).

Every response carries a Content-Security-Policy that allows no script at all
(`default-src 'none'`), the viewer's own style sheet and nothing else, and forbids
framing; so a `<script>` in a model response would not run even if it were not escaped
(it is). A Host header other than the address the viewer listens on (and `localhost`
when it listens on 127.0.0.1 or ::1, or was started with `--host localhost`) is refused,
so a web page cannot reach the viewer through a DNS name rebound to a loopback address.
"""

import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradetrail_lib.errors import UsageError
from gradetrail_lib.history.entries import HistoryStore
from gradetrail_lib.viewer.catalog import Catalog
from gradetrail_lib.viewer.label_pages import LabelPages
from gradetrail_lib.viewer.labelling import (
    MAX_BODY,
    BadLabel,
    LabelDesk,
    Refused,
    check_origin,
    form_fields,
)
from gradetrail_lib.viewer.pages import Page, Pages, viewer_css

NO_LABELS = (
    "the labelling queue is served by `gradetrail view --labels`; this viewer was started "
    "without it, so it shows runs read-only"
)
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-cache"),
]


class AnyText(PathConvertor):
    """A path segment holding anything, line breaks too: a sample id may hold a newline,
    which Starlette's `path` (`.*`) does not match."""

    regex = "[\\s\\S]*"


register_url_convertor("text", AnyText())


class SecurityHeaders:
    """Adds HEADERS to every HTTP response, errors included (outermost middleware);
    `referrer` replaces the referrer policy (labelling needs `same-origin`)."""

    def __init__(self, app: ASGIApp, referrer: bytes = b"no-referrer") -> None:
        self.app = app
        self.headers = [(k, referrer if k == b"referrer-policy" else v) for k, v in HEADERS]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in self.headers if k not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def host_names(host: str) -> frozenset[str]:
    """The Host header names (port left off, lower case) that mean this viewer: the
    address it listens on, as a URL writes it, and `localhost` for 127.0.0.1 and ::1."""
    address = check_loopback(host)
    names = {f"[{address}]" if ":" in address else address}
    if host == "localhost" or address in ("127.0.0.1", "::1"):
        names.add("localhost")
    return frozenset(names)


def _host_name(header: str) -> str:
    """`Host: [::1]:8765` as `[::1]`, `127.0.0.2:8765` as `127.0.0.2` (a bare IPv6
    address without brackets is not a valid Host header and stays whole, so refused)."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        return header[: end + 1] if end >= 0 and header[end + 1 :][:1] in ("", ":") else ""
    name, _, port = header.partition(":")
    return name if port.isdigit() or not port and ":" not in header else ""


class HostCheck:
    """Refuses (400) a request whose Host header names anything but this viewer."""

    def __init__(self, app: ASGIApp, names: frozenset[str]) -> None:
        self.app = app
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers", []))
            host = headers.get(b"host", b"").decode("latin-1")
            if _host_name(host) not in self.names:
                response = Response("Invalid host header", status_code=400)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _response(page: Page) -> Response:
    if page.location is not None:
        return RedirectResponse(page.location, status_code=page.status)
    if page.media_type != "text/html":
        return Response(page.html, status_code=page.status, media_type=page.media_type)
    return HTMLResponse(page.html, status_code=page.status)


def create_app(
    root: Path, host: str = "127.0.0.1", *, labels: bool = False, labeller: str = "viewer",
    history: HistoryStore | None = None,
) -> ASGIApp:  # fmt: skip
    """The viewer over the run directories under `root`, answering as `host` (the
    address it listens on, which `bind` checks); `labels`: with the labelling queue and
    label forms, labels written as by `labeller`; `history`: the run history its plots
    read (by default the file under `root`)."""
    names = host_names(host)
    catalog = Catalog(root)
    desk = LabelDesk(catalog.root, labeller) if labels else None
    pages = Pages(catalog, desk, history)
    css = viewer_css()

    def params(request: Request) -> dict[str, str]:
        return dict(request.query_params)

    # Plain functions: Starlette runs them in its thread pool, so reading a big run
    # never blocks the event loop.
    def runs(request: Request) -> Response:
        return _response(pages.handle(pages.runs, params(request)))

    def run(request: Request) -> Response:
        name = request.path_params["name"]
        return _response(pages.handle(pages.run, name, params(request)))

    def sample(request: Request) -> Response:
        p = request.path_params
        return _response(pages.handle(pages.sample, p["name"], p["sample_id"], params(request)))

    def diff_form(request: Request) -> Response:
        return _response(pages.handle(pages.diff_form, params(request)))

    def diff(request: Request) -> Response:
        p = request.path_params
        return _response(pages.handle(pages.diff, p["a"], p["b"], params(request)))

    def stylesheet(request: Request) -> Response:
        return Response(css, media_type="text/css")

    def label_queue(request: Request) -> Response:
        assert label_pages is not None
        name = request.path_params["name"]
        return _response(pages.handle(label_pages.queue, name, params(request)))

    async def label_post(request: Request) -> Response:
        assert label_pages is not None and desk is not None
        try:
            check_origin(request.headers, names, request.scope.get("server"))
            body = await _body(request, MAX_BODY)
            fields = form_fields(body, request.headers.get("content-type", ""))
            if not desk.valid_token(fields.get("token")):
                raise Refused("the form's token is missing or not this viewer's")
        except Refused as exc:
            return _response(pages.error(403, "Refused", str(exc)))
        except BadLabel as exc:
            return _response(pages.error(exc.status, "This label was not saved", str(exc)))
        name = request.path_params["name"]
        page = await run_in_threadpool(pages.handle, label_pages.post, name, fields)
        return _response(page)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        title = {404: "Not found", 405: "Method not allowed"}.get(status, "Error")
        page = pages.error(status, title)
        headers = {"allow": "GET, HEAD, POST" if labels else "GET, HEAD"} if status == 405 else None
        return HTMLResponse(page.html, status_code=status, headers=headers)

    routes = [
        Route("/", runs, methods=["GET"]),
        Route("/run/{name}", run, methods=["GET"]),
        Route("/run/{name}/sample/{sample_id:text}", sample, methods=["GET"]),
        Route("/diff", diff_form, methods=["GET"]),
        Route("/diff/{a}/{b}", diff, methods=["GET"]),
        Route("/static/viewer.css", stylesheet, methods=["GET"]),
    ]

    def no_labels(request: Request) -> Response:
        return _response(pages.error(404, "Not found", NO_LABELS))

    label_pages = LabelPages(pages, desk) if desk is not None else None
    if label_pages is not None:
        routes += [
            Route("/label/{name}", label_queue, methods=["GET"]),
            Route("/label/{name}", label_post, methods=["POST"]),
        ]
    else:
        # A queue link (shared, or from a viewer started with --labels) still answers
        # 404 here, and says what serves it; a post writes nothing either way.
        routes.append(Route("/label/{name}", no_labels, methods=["GET", "POST"]))
    app = Starlette(
        routes=routes,
        middleware=[Middleware(HostCheck, names=names)],
        exception_handlers={HTTPException: http_error, Exception: http_error},
    )
    # /run/x/ is not /run/x: no redirect that would turn `/run/../` into `/run/..`.
    app.router.redirect_slashes = False
    return SecurityHeaders(app, b"same-origin" if labels else b"no-referrer")


async def _body(request: Request, limit: int) -> bytes:
    """The request body, refused (BadLabel, 413) past `limit` bytes without reading on."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadLabel(f"the form is over {limit} bytes", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def check_loopback(host: str) -> str:
    """The address to bind: `host` when it is a loopback address (or `localhost`),
    else UsageError: the viewer shows prompts and responses and has no login."""
    address = "127.0.0.1" if host == "localhost" else host
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UsageError(
            f"the viewer listens on loopback only (127.0.0.1), not {host!r}: it serves your "
            "prompts and responses without a login; to view it from another machine, "
            "forward the port (ssh -L 8765:127.0.0.1:8765 HOST)"
        )
    return address


def bind(host: str, port: int) -> socket.socket:
    address = check_loopback(host)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {address}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


def server(app: ASGIApp) -> uvicorn.Server:
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", server_header=False
    )
    return uvicorn.Server(config)


def serve(
    root: Path, host: str, port: int, on_ready: Callable[[str], Any] | None = None,
    *, labels: bool = False, labeller: str = "viewer", history: HistoryStore | None = None,
) -> None:  # fmt: skip
    """Serve the viewer until interrupted (Ctrl-C). `on_ready` gets the URL."""
    sock = bind(host, port)
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    if on_ready is not None:
        on_ready(f"http://{shown}:{actual}/")
    app = create_app(root, host, labels=labels, labeller=labeller, history=history)
    server(app).run(sockets=[sock])
