"""How much and how slowly clients may send: limits on connections, on a request's head and body, and on a stop.

uvicorn bounds the size of a request's line and headers (h11: a head still incomplete past 16 KiB is
refused), but neither how many connections are open, nor how long a head may take to arrive, nor the
size of the body or its time. So:

- **Connections.** :class:`HeadTimeoutH11` answers a connection made while the process holds
  :func:`connection_limit` others with ``503`` and closes it at once: at most ``MAX_CONNECTIONS``
  (4,096), and always ``1/8`` of the limit on open files (at least 128) below it, so that the
  store, git and the logs keep file descriptors and the process does not reach the limit. (Past it,
  every ``accept()`` fails, the connections wait in the kernel's queue, and CPython's event loop
  logs each failure with a traceback, thousands a second. The loop accepts a burst of connections
  before it refuses any, so a burst larger than the reserve can still reach it for a moment:
  :func:`quiet_server_logs` makes that one line a minute.) ``armarius serve`` raises its soft limit
  on open files to the hard one as it starts (:func:`raise_open_files_limit`): systemd's default
  soft limit, 1,024, would allow 896 connections.
- **Connections spread evenly over the workers.** Each worker of ``armarius serve --workers N`` holds the
  connections the kernel gave it, for as long as their clients keep them alive; the kernel spreads new
  connections by their addresses and ports, so 32 agents' connections came out 18/14, 19/13, 22/10 over two
  workers, and the agents on the fuller worker waited longer (bench/compare.py, section 6). The workers count
  their open connections in memory they share (:class:`ConnectionShares`); a worker holding more than its
  share (all the workers' connections over the number of workers, rounded up) answers the next request on
  any of its connections with ``Connection: close``, and the client's next connection is spread again, until
  the shares are even. A client loses nothing: the answer is complete, and an HTTP/1.1 client opens another
  connection for its next request.
- **The head's time.** :class:`HeadTimeoutH11` (uvicorn's h11 protocol, which `armarius serve` runs)
  closes a connection whose request line and headers are not complete within ``REQUEST_HEAD_SECONDS``
  of its first byte (or of the connection, for its first request). uvicorn's own ``timeout_keep_alive``
  only ends a connection idle after a response; a client that sends half a head, or drips it, would
  otherwise hold its connection for ever.

:class:`RequestLimits` bounds the body for every route, before any route (and before authentication)
sees the request:

- **Size.** A body whose declared ``Content-Length`` is over
  :func:`armarius.mcp.limits.request_body_max_bytes` is refused with 413 (``request_too_large``) before
  a byte of it is read; a body sent without a length (chunked) is refused the moment it passes the
  limit. The limit admits the largest request any surface accepts (see the function); the JSON API and
  the pages refuse far smaller bodies of their own (their ``BODY_MAX_BYTES`` and ``FORM_MAX_BYTES``), so
  in practice it bounds ``/mcp``.
- **Time.** Once a route asks for the body, every part must come within ``BODY_IDLE_SECONDS`` of the
  previous one and the whole body within ``BODY_TOTAL_SECONDS`` of the request's start; otherwise the
  request is refused with 408 (``request_timeout``) and the connection closed.

Either way the route sees a disconnected client (and does nothing), and the client gets the one error
envelope. A client that hangs up before its body is complete is one INFO line, not an error. The MCP SDK's
transport gets the same size limit (its own default, 4 MiB, would refuse the largest ``repair_prepare``),
and so does MCP over stdio. The body limits are read when the app is made
(:func:`armarius.web.app.create_web_app`), the head's whenever a connection waits for one.

- **A stop.** At SIGTERM the server stops accepting, and requests in flight get
  ``SHUTDOWN_GRACE_SECONDS`` (20) to finish (uvicorn's ``timeout_graceful_shutdown``); then they are
  cancelled (one INFO line each, :class:`CancelledAtStopFilter`) and the process exits. The shipped
  systemd unit's ``TimeoutStopSec=30`` leaves room for it: without the bound a body trickled in under
  the limits above would hold a stop for two minutes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import mmap
import time
from dataclasses import dataclass

import anyio
import h11
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.flow_control import CLOSE_HEADER
from uvicorn.protocols.http.h11_impl import H11Protocol

from armarius.errors import ArmariusError, RequestTimeout, RequestTooLarge

logger = logging.getLogger("armarius.web")

#: The longest wait for the next part of a body, and for the whole body.
BODY_IDLE_SECONDS = 30.0
BODY_TOTAL_SECONDS = 120.0
#: The longest a request's line and headers may take to arrive.
REQUEST_HEAD_SECONDS = 30.0
#: At a stop, how long the requests in flight may still take (below systemd's TimeoutStopSec=30 of the unit).
SHUTDOWN_GRACE_SECONDS = 20
#: The most connections one server process keeps open (fewer where the limit on open files is low).
MAX_CONNECTIONS = 4096
#: The soft limit on open files set where the hard limit is unlimited (macOS), and the fallback below it.
_OPEN_FILES_WHEN_UNLIMITED = (65_536, 10_240)
#: How often a burst of the same refusal is logged, with the count of those not logged since.
_REPORT_EVERY_SECONDS = 60.0


@dataclass
class _Body:
    received: int = 0
    complete: bool = False
    #: The refusal this middleware answers with instead of the route (once the body broke a limit).
    refusal: ArmariusError | None = None
    response_started: bool = False
    #: The client went away before its body was complete.
    hung_up: bool = False


class RequestLimits:
    """Refuses request bodies over ``max_bytes`` (413) or too slow to arrive (408); see the module doc."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, idle_seconds: float = BODY_IDLE_SECONDS,
                 total_seconds: float = BODY_TOTAL_SECONDS) -> None:
        self.app, self.max_bytes = app, max_bytes
        self.idle_seconds, self.total_seconds = idle_seconds, total_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await _answer(self._too_large(), scope, receive, send)
            return
        body = _Body()
        deadline = anyio.current_time() + self.total_seconds

        async def limited_receive() -> Message:
            if body.refusal is not None:
                return {"type": "http.disconnect"}
            if body.complete:
                return await receive()  # after the body: only the disconnect is left to hear
            wait = min(self.idle_seconds, deadline - anyio.current_time())
            with anyio.move_on_after(max(wait, 0)):
                message = await receive()
                if message["type"] == "http.request":
                    body.received += len(message.get("body", b""))
                    if body.received > self.max_bytes:
                        body.refusal = self._too_large()
                        return {"type": "http.disconnect"}
                    body.complete = not message.get("more_body", False)
                else:  # the client went away: nothing more to wait for
                    body.complete = body.hung_up = True
                return message
            body.refusal = RequestTimeout(
                f"The request body did not arrive in time: each part must follow the last within "
                f"{self.idle_seconds:g} seconds, and the whole body within {self.total_seconds:g} seconds.",
                idle_seconds=self.idle_seconds, total_seconds=self.total_seconds)
            return {"type": "http.disconnect"}

        async def guarded_send(message: Message) -> None:
            if body.refusal is not None:
                return  # the route's answer to a client it saw disconnect; this middleware answers instead
            if message["type"] == "http.response.start":
                body.response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except ClientDisconnect:
            # A route reading a body its client stopped sending (a login form, a page's form): one brief line,
            # not two tracebacks (Starlette's and uvicorn's) that any client could have written by hanging up.
            if not body.hung_up and body.refusal is None:
                raise
            if body.refusal is None:
                logger.info("a client hung up before its request body to %s was complete", scope.get("path", "?"))
                return
        except Exception:
            if body.refusal is None:
                raise
        if body.refusal is not None and not body.response_started:
            await _answer(body.refusal, scope, receive, send)

    def _too_large(self) -> RequestTooLarge:
        return RequestTooLarge(f"The request body is larger than this server reads ({self.max_bytes} bytes).",
                               limit=self.max_bytes)


async def _answer(error: ArmariusError, scope: Scope, receive: Receive, send: Send) -> None:
    """The error envelope; the connection is closed after it (the rest of the body is never read)."""
    response = JSONResponse({"error": error.to_dict()}, status_code=error.http_status,
                            headers={"Connection": "close"})
    await response(scope, receive, send)


def raise_open_files_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit (children inherit it): systemd's default
    soft limit, 1,024, is too low for a server (module doc). Nothing happens where the system refuses."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    targets = (hard,) if hard != resource.RLIM_INFINITY else _OPEN_FILES_WHEN_UNLIMITED
    for target in targets:
        if soft != resource.RLIM_INFINITY and soft >= target:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
        except (ValueError, OSError):
            continue


def connection_limit() -> int:
    """How many connections this process keeps open at once: ``MAX_CONNECTIONS``, and at most the soft limit on
    open files less an eighth of it (at least 128), so that connections never take the last descriptors."""
    try:
        import resource
    except ImportError:
        return MAX_CONNECTIONS
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return min(MAX_CONNECTIONS, max(16, soft - max(128, soft // 8)))


class _Throttled:
    """Lets one of a burst of the same event through every ``seconds``, counting the ones it held back."""

    def __init__(self, seconds: float = _REPORT_EVERY_SECONDS) -> None:
        self.seconds, self.last, self.held = seconds, -math.inf, 0

    def due(self) -> int | None:
        """None while the last report is recent (this event is held back), else how many were held back since."""
        now = time.monotonic()
        if now - self.last < self.seconds:
            self.held += 1
            return None
        held, self.held, self.last = self.held, 0, now
        return held


class AcceptErrorFilter(logging.Filter):
    """asyncio's "socket.accept() out of system resource" (no file descriptor left): one line a minute, without
    a traceback, instead of one with a traceback for each failed accept (CPython retries up to the listening
    backlog's 2,048 times on each turn of its loop: 290,000 tracebacks, 122 MB of log in 35 s). After such a
    failure asyncio listens again a second later; a server stopped within that second has closed its socket by
    then, and each retry fails with a traceback ("Invalid file descriptor: -1"): nothing is left to listen on,
    so those are dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.throttle = _Throttled()

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("Exception in callback BaseSelectorEventLoop._start_serving"):
            error = record.exc_info[1] if record.exc_info else None
            return not (isinstance(error, ValueError) and "Invalid file descriptor" in str(error))
        if not message.startswith("socket.accept() out of system resource"):
            return True
        held = self.throttle.due()
        if held is None:
            return False
        error = record.exc_info[1] if record.exc_info else None
        record.msg = ("cannot accept connections: %s (the limit on open files; %d more failed accepts since the "
                      "last report were not logged)")
        record.args = (error, held)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


class CancelledAtStopFilter(logging.Filter):
    """uvicorn's "Exception in ASGI application" with a traceback for each request it cancels at the end of a
    stop's grace (SHUTDOWN_GRACE_SECONDS): one brief INFO line each instead (the cancellation is the design)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not (isinstance(error, asyncio.CancelledError)
                and str(record.msg).startswith("Exception in ASGI application")):
            return True
        record.msg = "cancelled a request still in flight after the stop's grace (%g seconds)"
        record.args = (SHUTDOWN_GRACE_SECONDS,)
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def quiet_server_logs() -> None:
    """Put :class:`AcceptErrorFilter` on asyncio's logger and :class:`CancelledAtStopFilter` on uvicorn's (once)."""
    for name, kind in (("asyncio", AcceptErrorFilter), ("uvicorn.error", CancelledAtStopFilter)):
        named = logging.getLogger(name)
        if not any(isinstance(existing, kind) for existing in named.filters):
            named.addFilter(kind())


#: What a connection over :func:`connection_limit` is told before it is closed.
_TOO_MANY_CONNECTIONS = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         b"Connection: close\r\nRetry-After: 5\r\nContent-Length: 66\r\n\r\n"
                         b"The server holds as many connections as it may; try again shortly.")
_refused_connections = _Throttled()


class ConnectionShares:
    """How many connections each worker process of one server holds open, in memory the workers share: made by
    the supervisor before it forks them, each worker writing its own count (module doc). A connection whose
    last answer is on its way no longer counts: other requests meanwhile must not close more."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        # Anonymous memory, mapped shared: a forked worker writes into the same pages as the others.
        self._counts = memoryview(mmap.mmap(-1, 4 * workers)).cast("i")
        self._mine = 0
        self._leaving = 0  # this worker's connections told to close, not yet closed

    def join(self, worker: int) -> None:
        """This process is worker number ``worker`` (one started in place of another takes its number)."""
        self._mine, self._leaving = worker, 0
        self._counts[worker] = 0

    def record(self, connections: int, *, left: bool = False) -> None:
        """This worker holds ``connections`` now, one fewer than before if one of those ``left`` (was told to close)."""
        self._leaving -= left
        self._counts[self._mine] = connections - self._leaving

    def shed(self, connections: int) -> bool:
        """Whether this worker's ``connections`` are more than its share of all the workers' (rounded up): then one
        of them is told to close, and counts no more."""
        held = connections - self._leaving
        if held <= -(-sum(self._counts) // self.workers):
            return False
        self._leaving += 1
        self._counts[self._mine] = held - 1
        return True


#: This worker's place among the workers of its server (None: the server runs in one process).
_shares: ConnectionShares | None = None


def share_connections(shares: ConnectionShares, worker: int) -> None:
    """In a worker process: even out its connections with the other workers' (module doc)."""
    global _shares  # noqa: PLW0603 - one per process, set as the worker starts
    shares.join(worker)
    _shares = shares


class HeadTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection over :func:`connection_limit` at once, and one whose request
    head does not arrive in time; in a worker process holding more than its share of connections, the answer
    to the next request says ``Connection: close`` (module doc).

    The timer runs while the connection waits for a request head (h11's client state ``IDLE``) and has
    received a byte of it, or has received nothing since it was made; it is not restarted by more bytes of
    the same head. An idle keep-alive connection between requests is left to uvicorn's ``timeout_keep_alive``.
    """

    _head_timer: asyncio.TimerHandle | None = None
    _leaving = False  # told to close after its answer (ConnectionShares)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limit = connection_limit()
        if len(self.connections) > limit:
            held = _refused_connections.due()
            if held is not None:
                logger.warning("refused a connection: this process holds %d, the most it keeps open (%d more "
                                    "refused since the last report were not logged)", limit, held)
            transport.write(_TOO_MANY_CONNECTIONS)
            transport.close()  # reads nothing more; connection_lost forgets it
            return
        if _shares is not None:
            _shares.record(len(self.connections))
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)
        if _shares is not None:
            _shares.record(len(self.connections), left=self._leaving)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if (self.cycle is not cycle and self.cycle is not None and _shares is not None and not self._leaving
                and _shares.shed(len(self.connections))):
            # A new request on a worker holding more than its share: its answer is this connection's last.
            self._leaving = True
            self.cycle.default_headers = [*self.cycle.default_headers, CLOSE_HEADER]

    def _watch_head(self) -> None:
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if not waiting:
            self._stop_head_timer()
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(REQUEST_HEAD_SECONDS, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.info("closed a connection whose request head did not arrive within %g seconds",
                             REQUEST_HEAD_SECONDS)
            self.conn.send(h11.ConnectionClosed())
            self.transport.close()
