"""The ASGI application served by `armarius serve`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
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
from armarius.errors import ArmariusError, InternalError, NotFound, echo
from armarius.mcp.limits import request_body_max_bytes
from armarius.mcp.server import build_server
from armarius.web import limits
from armarius.web.api import HUMAN_CALLER_SCOPE_KEY, api_routes
from armarius.web.auth import actor_from_scope, authenticate
from armarius.web.pages import page_routes
from armarius.web.pages.gate import Web

logger = logging.getLogger("armarius.web")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")

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


def _actor_of_request(ctx: ServerRequestContext[Any]) -> Actor:
    request = ctx.request
    return actor_from_scope(request.scope if isinstance(request, Request) else None)


def server_config(app: Armarius, *, stateless: bool = False, **overrides: Any) -> uvicorn.Config:
    """How `armarius serve` runs the web app: its settings (keep-alive), no Server header."""
    options: dict[str, Any] = {"log_level": "info", "server_header": False,
                               "timeout_keep_alive": app.settings.keep_alive_seconds,
                               "http": limits.HeadTimeoutH11}  # h11, with a time limit on a request's head
    return uvicorn.Config(create_web_app(app, stateless=stateless), **(options | overrides))


def create_web_app(app: Armarius, *, stateless: bool = False) -> Starlette:
    """The web app. ``stateless``: MCP over streamable HTTP without sessions (no Mcp-Session-Id), every
    request answered on its own, so that any of several server processes can answer any request."""
    _quiet_client_disconnects()
    host = app.settings.host
    security = (
        TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
        if host in _LOOPBACK
        else None
    )
    # The SDK's own body limit (4 MiB by default) would refuse the largest request a tool takes. Each request is
    # answered with one JSON body, not an event stream: a tool sends nothing before its answer (no progress,
    # no requests to the client), and one body costs the server and the client less than a stream of one event.
    manager = StreamableHTTPSessionManager(app=build_server(app, _actor_of_request), security_settings=security,
                                           stateless=stateless, json_response=True,
                                           max_request_body_size=request_body_max_bytes(app.settings))
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
        middleware=[Middleware(limits.RequestLimits, max_bytes=request_body_max_bytes(app.settings),
                               idle_seconds=limits.BODY_IDLE_SECONDS, total_seconds=limits.BODY_TOTAL_SECONDS)],
        exception_handlers={ArmariusError: armarius_error, Exception: unexpected_error, 404: not_found},
    )

