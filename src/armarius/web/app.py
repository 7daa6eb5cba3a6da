"""The ASGI application served by `armarius serve`."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import uvicorn
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.web_sessions import WebSessions
from armarius.config import request_threads
from armarius.errors import ArmariusError, InternalError, NotAllowed, NotFound, echo
from armarius.mcp.limits import request_body_max_bytes
from armarius.mcp.server import build_server
from armarius.web import limits
from armarius.web.api import HUMAN_CALLER_SCOPE_KEY, api_routes
from armarius.web.auth import actor_from_scope, authenticate
from armarius.web.pages import page_routes
from armarius.web.pages.gate import Web

logger = logging.getLogger("armarius.web")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: An MCP session with no request in flight (and no open GET stream) for this long is ended; the client's next
#: request with its id gets 404 and the client initializes again (the SDK's default is 30 minutes).
MCP_SESSION_IDLE_SECONDS = 10 * 60
#: The most MCP sessions one server process holds for all tokens together (the SDK's default, named here);
#: each token holds at most ``server.mcp_sessions_per_token`` of them (at most 1000), so one token never fills it.
MCP_SESSIONS_MAX = 10_000

#: What a client that hangs up mid-request raises inside the server; not a server failure.
_DISCONNECTS: tuple[type[BaseException], ...] = (
    ClientDisconnect, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError,
)


class ClientDisconnectFilter(logging.Filter):
    """Turns the SDK's ERROR-with-traceback for a client that hung up into one brief INFO line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None or not _is_disconnect(error):
            return True
        logger.info("an MCP client disconnected during a request (%s)", record.getMessage())
        return False


def _is_disconnect(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_is_disconnect(inner) for inner in error.exceptions)
    return isinstance(error, _DISCONNECTS)


def _quiet_client_disconnects() -> None:
    sdk_logger = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(existing, ClientDisconnectFilter) for existing in sdk_logger.filters):
        sdk_logger.addFilter(ClientDisconnectFilter())


#: On every response: no framing, no content sniffing, no foreign resources or form targets.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every HTTP response (a plain ASGI wrapper: streaming stays streaming)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class WebApp(Starlette):
    """Starlette with SecurityHeaders outside everything, so that they are on every response: Starlette answers
    an unexpected error (500) from its ServerErrorMiddleware, which is outside any middleware the app lists."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def error_response(error: ArmariusError, *, for_agent: bool = True) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if error.http_status == 401 else None
    return JSONResponse({"error": error.to_dict(for_agent=for_agent)}, status_code=error.http_status,
                        headers=headers)


class McpEndpoint:
    """Authenticates every request to /mcp, then hands it to the SDK's session manager."""

    def __init__(self, app: Armarius, manager: StreamableHTTPSessionManager) -> None:
        self.app, self.manager = app, manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await authenticate(self.app, scope)
        except ArmariusError as error:
            await error_response(error)(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)


class _TokenAtItsLimit(Exception):
    """A new MCP session refused: its token holds as many as it may (raised under the SDK's admission lock)."""


class AgentSessions(StreamableHTTPSessionManager):
    """The SDK's session manager, holding at most ``per_token`` open sessions for each agent token.

    Without it one token could open the SDK's ``max_sessions`` (10,000 by default, shared by every token of the
    process) and every other agent would be refused until they idled out. The count is taken when the SDK admits
    a session (under its admission lock, so parallel openings cannot overshoot it), from the SDK's own record of
    which credential opened each session, which it keeps until the session ends however it ends (DELETE, idle
    timeout, a failed opening request). A session over the limit is refused 429 with a JSON-RPC error.
    """

    def __init__(self, *args: Any, per_token: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not (hasattr(StreamableHTTPSessionManager, "_admit_session")
                and isinstance(getattr(self, "_session_owners", None), dict)):
            raise RuntimeError("This MCP SDK no longer admits sessions as AgentSessions expects; the per-token "
                               "session limit would not apply (armarius/web/app.py).")
        self.per_token = per_token

    async def handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().handle_request(scope, receive, send)
        except _TokenAtItsLimit:
            await self._too_many(scope, receive, send)

    def _admit_session(self, requestor: AuthorizationContext | None) -> Any:
        if requestor is not None:
            held = sum(owner == requestor for owner in self._session_owners.values())
            if held >= self.per_token:
                raise _TokenAtItsLimit
        return super()._admit_session(requestor)

    async def _too_many(self, scope: Scope, receive: Receive, send: Send) -> None:
        idle = f"{self.session_idle_timeout / 60:g} minutes" if self.session_idle_timeout else "never"
        message = (f"This agent token holds {self.per_token} open MCP sessions, the most it may hold at once "
                   "(server.mcp_sessions_per_token). Reuse an open session (send its Mcp-Session-Id), or end the "
                   f"sessions you no longer use with DELETE /mcp and their Mcp-Session-Id; a session with no request "
                   f"also ends by itself after {idle} idle.")
        body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
            code=INVALID_REQUEST, message=message, data={"reason": "too_many_sessions", "limit": self.per_token}))
        response = Response(body.model_dump_json(by_alias=True, exclude_unset=True), status_code=429,
                            media_type="application/json")
        await response(scope, receive, send)


class LoopbackOnly:
    """DNS-rebinding protection for a server listening on a loopback address, for every route.

    A page elsewhere whose name was made to resolve to 127.0.0.1 reaches this server in the visitor's browser
    with its own name in ``Host``: any request whose ``Host`` is not a loopback name (127.0.0.1, localhost,
    [::1], with any port) is refused 421, before any route sees it (a reverse proxy on this machine sends
    ``Host: 127.0.0.1:<port>``; docs/deployment.md). A request without ``Host`` (HTTP/1.0, which no browser
    sends) passes. On /mcp an ``Origin``, where present, must be a loopback origin too (403), as the MCP
    specification asks of servers; the pages and /api are not held to it, because behind the proxy a browser
    sends the site's public origin there, and their forms and JSON writes carry CSRF tokens instead.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        origin = headers.get("origin")
        refusal: tuple[int, NotAllowed] | None = None
        if host is not None and not is_loopback_host(host):
            refusal = 421, NotAllowed(
                f"This server listens on a loopback address and answers only requests addressed to 127.0.0.1, "
                f"localhost or [::1]; this one was addressed to {echo(host)}. A reverse proxy must send "
                "'Host: 127.0.0.1:<port>'.", reason="host_not_loopback")
        elif origin is not None and scope["path"].startswith("/mcp") and not is_loopback_origin(origin):
            refusal = 403, NotAllowed(
                f"This server listens on a loopback address and answers MCP requests from loopback origins only; "
                f"this one came from {echo(origin)}.", reason="origin_not_loopback")
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, error = refusal
        await JSONResponse({"error": error.to_dict()}, status_code=status)(scope, receive, send)


def is_loopback_host(host: str) -> bool:
    """Whether a ``Host`` header names a loopback address: ``localhost``, an address of 127.0.0.0/8 or
    ``[::1]``, with or without a port. (A rebinding page's requests carry its own name, never an address.)"""
    host = host.strip().lower()
    if host.startswith("["):
        name, bracket, rest = host[1:].partition("]")
        if not bracket:
            return False
    else:
        name, colon, rest = host.partition(":")
        rest = colon + rest
    if rest and not (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit() and len(rest) <= 6):
        return False
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def listens_on_loopback(sockets: list[socket.socket]) -> bool:
    """Whether every one of a server's listening sockets is bound to a loopback address."""
    return bool(sockets) and all(ipaddress.ip_address(listener.getsockname()[0]).is_loopback for listener in sockets)


def is_loopback_origin(origin: str) -> bool:
    """Whether an ``Origin`` header is ``http://`` or ``https://`` and a loopback host (:func:`is_loopback_host`)."""
    scheme, separator, host = origin.strip().partition("://")
    return bool(separator) and scheme.lower() in ("http", "https") and is_loopback_host(host)


def _actor_of_request(ctx: ServerRequestContext[Any]) -> Actor:
    request = ctx.request
    return actor_from_scope(request.scope if isinstance(request, Request) else None)


def server_config(app: Armarius, *, stateless: bool = False, loopback: bool | None = None,
                  **overrides: Any) -> uvicorn.Config:
    """How `armarius serve` runs the web app: its settings (keep-alive), no Server header. ``loopback``: whether
    the server listens on loopback addresses only (:func:`listens_on_loopback`), which turns on
    :class:`LoopbackOnly`; None: whether the ``host`` it is given (else ``server.host``) is a loopback name."""
    if loopback is None:
        loopback = overrides.get("host", app.settings.host) in _LOOPBACK
    options: dict[str, Any] = {"log_level": "info", "server_header": False,
                               "timeout_keep_alive": app.settings.keep_alive_seconds,
                               # at a stop, requests in flight get this long, then they are cancelled
                               "timeout_graceful_shutdown": limits.SHUTDOWN_GRACE_SECONDS,
                               "http": limits.HeadTimeoutH11}  # h11, with limits on connections and heads
    return uvicorn.Config(create_web_app(app, stateless=stateless, loopback=loopback), **(options | overrides))


def create_web_app(app: Armarius, *, stateless: bool = False, loopback: bool | None = None) -> Starlette:
    """The web app. ``stateless``: MCP over streamable HTTP without sessions (no Mcp-Session-Id), every
    request answered on its own, so that any of several server processes can answer any request.
    ``loopback``: guard every route with :class:`LoopbackOnly` (None: when ``server.host`` is a loopback name)."""
    if loopback is None:
        loopback = app.settings.host in _LOOPBACK
    _quiet_client_disconnects()
    limits.quiet_server_logs()
    # The SDK's own body limit (4 MiB by default) would refuse the largest request a tool takes. Each request is
    # answered with one JSON body, not an event stream: a tool sends nothing before its answer (no progress,
    # no requests to the client), and one body costs the server and the client less than a stream of one event.
    # Host and Origin are checked for every route by LoopbackOnly, not by the SDK (for /mcp only).
    manager = AgentSessions(app=build_server(app, _actor_of_request), stateless=stateless, json_response=True,
                            max_request_body_size=request_body_max_bytes(app.settings),
                            session_idle_timeout=MCP_SESSION_IDLE_SECONDS, max_sessions=MCP_SESSIONS_MAX,
                            per_token=app.settings.mcp_sessions_per_token)
    sessions = WebSessions(app.database, app.directory,
                           idle=timedelta(minutes=app.settings.web_session_idle_minutes),
                           lifetime=timedelta(hours=app.settings.web_session_max_hours))
    web = Web(app, sessions)

    health_thread = anyio.CapacityLimiter(1)  # the health check never waits behind the requests' tools

    async def healthz(_request: Request) -> JSONResponse:
        await anyio.to_thread.run_sync(app.health, limiter=health_thread)
        return JSONResponse({"status": "ok"})

    async def armarius_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ArmariusError)
        return error_response(exc, for_agent=not request.scope.get(HUMAN_CALLER_SCOPE_KEY))

    async def not_found(request: Request, exc: Exception) -> Response:
        """An unknown address: the error envelope under /api (and /mcp), a page elsewhere."""
        assert isinstance(exc, HTTPException)
        error = NotFound(f"There is nothing at {echo(request.url.path)}.")
        if request.url.path == "/api" or request.url.path.startswith(("/api/", "/mcp")):
            return error_response(error)
        return await web.error_page_of(request, error)

    async def unexpected_error(_request: Request, exc: Exception) -> Response:
        logger.error("request failed unexpectedly", exc_info=exc)
        return error_response(InternalError())

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # Requests beyond server.request_threads wait in line instead of all taking turns on one interpreter:
        # 32 busy clients had a p99 of 570 ms with anyio's default of 40 threads, 290-390 ms with 4-8.
        anyio.to_thread.current_default_thread_limiter().total_tokens = request_threads(app.settings,
                                                                                        app.database.dialect)
        async with manager.run():
            yield

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        *api_routes(app, sessions),
        Route("/mcp", McpEndpoint(app, manager), methods=["GET", "POST", "DELETE"]),
        Mount("/static", StaticFiles(packages=[("armarius.web", "static")]), name="static"),
        *page_routes(web),
    ]
    return WebApp(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            *([Middleware(LoopbackOnly)] if loopback else []),
            Middleware(limits.RequestLimits, max_bytes=request_body_max_bytes(app.settings),
                       idle_seconds=limits.BODY_IDLE_SECONDS, total_seconds=limits.BODY_TOTAL_SECONDS),
        ],
        exception_handlers={ArmariusError: armarius_error, Exception: unexpected_error, 404: not_found},
    )

