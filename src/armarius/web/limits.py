"""How much and how slowly a client may send: limits on a request's head and body.

uvicorn bounds the size of a request's line and headers (h11: a head still incomplete past 16 KiB is
refused), but neither how long they may take to arrive, nor the size of the body or its time. So:

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
envelope. The MCP SDK's transport gets the same size limit (its own default, 4 MiB, would refuse the largest
``repair_prepare``), and so does MCP over stdio. The body limits are read when the app is made
(:func:`armarius.web.app.create_web_app`), the head's whenever a connection waits for one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import anyio
import h11
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from armarius.errors import ArmariusError, RequestTimeout, RequestTooLarge

#: The longest wait for the next part of a body, and for the whole body.
BODY_IDLE_SECONDS = 30.0
BODY_TOTAL_SECONDS = 120.0
#: The longest a request's line and headers may take to arrive.
REQUEST_HEAD_SECONDS = 30.0


@dataclass
class _Body:
    received: int = 0
    complete: bool = False
    #: The refusal this middleware answers with instead of the route (once the body broke a limit).
    refusal: ArmariusError | None = None
    response_started: bool = False


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
                    body.complete = True
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


class HeadTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head does not arrive in time (module doc).

    The timer runs while the connection waits for a request head (h11's client state ``IDLE``) and has
    received a byte of it, or has received nothing since it was made; it is not restarted by more bytes of
    the same head. An idle keep-alive connection between requests is left to uvicorn's ``timeout_keep_alive``.
    """

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

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
