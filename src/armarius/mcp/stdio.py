"""MCP over stdio: the principal is the agent token given at start, checked again for the calls.

A refused token ends the server before it speaks MCP. Afterwards a call reuses the token's check for
up to a second, as over HTTP (:meth:`armarius.auth.directory.Directory.recently_checked`): a revocation
or a role change made elsewhere (``armarius token revoke``) refuses the calls made a second later.

**The transport.** When stdin and stdout are pipes or sockets (as every MCP client starts a server),
the lines are read and the answers written by the event loop itself (:class:`_Lines`, :class:`_Answers`):
no worker thread per line read and per answer written, and no task and stream in between, which the
SDK's transport (``mcp.server.stdio``) pays for every message. As the SDK does, the process's own fd 0
and fd 1 point at the null device and at stderr while it serves (a child process reads nothing, a
stray print misses the wire), and their blocking mode and targets are restored afterwards. Anything
else on stdin or stdout (a terminal, a file) is served by the SDK's transport.

On pipes, a request line longer than :func:`armarius.mcp.limits.request_body_max_bytes` (the HTTP
limit) is not read: it is skipped to its end and answered with an error for its id, as far as the
line's start names it. On either transport, at the end of stdin the requests read are answered
before the server ends (for at most :data:`END_ANSWERS_SECONDS`; a request the client cancelled is
not waited for): a client that sends its last request and closes stdin, or ``armarius mcp <
requests.jsonl``, gets every answer.

Every request gets an answer. pydantic's JSON parser, which reads each line, refuses some valid JSON (a
lone-surrogate escape such as ``"\\ud800"``; nesting deeper than about 200 levels, which the SDK's own
client writes up to 254), and the SDK's transport then drops the line without an answer: the client
would wait forever. Such a line is read again here with Python's parser, which takes both, and handled
like any other (the tools refuse such values as ``invalid_input``). A line that parser cannot read
either is answered with a JSON-RPC parse error for its id, or for none when no id can be found; JSON that
is no JSON-RPC message (a batch, version 1.0, params that are a list), which the SDK drops too, with an
invalid-request error for its id (a batch: for none).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, NoReturn

import anyio
import mcp_types as types
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.mcp.limits import request_body_max_bytes
from armarius.mcp.server import build_server

logger = logging.getLogger("armarius.mcp")

Item = SessionMessage | Exception
Streams = tuple[ObjectReceiveStream[Item], ObjectSendStream[SessionMessage]]

#: How long the end of stdin waits for the answers to the requests still running.
END_ANSWERS_SECONDS = 30.0


async def serve_stdio(app: Armarius, token: str) -> None:
    app.directory.authenticate_token(token)  # refuse a bad token before speaking MCP at all

    def resolve_actor(_ctx: ServerRequestContext[Any]) -> Actor:
        return app.directory.recently_checked(token) or app.directory.authenticate_token(token)

    server = build_server(app, resolve_actor, known_actor=lambda _ctx: app.directory.recently_checked(token))
    async with stdio_streams(request_body_max_bytes(app.settings)) as (lines, answers):
        await server.run(lines, answers, server.create_initialization_options())


@asynccontextmanager
async def stdio_streams(line_max_bytes: int) -> AsyncIterator[Streams]:
    """The messages read from stdin and the answers' stream to stdout (see the module doc)."""
    unanswered = _Unanswered()
    if not _pipes(0, 1):
        async with stdio_server() as (read_stream, write_stream):
            answers = _Counted(write_stream, unanswered)
            yield _LinesReadAgain(read_stream, answers, unanswered), answers
        return
    loop = asyncio.get_running_loop()
    with _wire() as (wire_in, wire_out):
        reader = asyncio.StreamReader(limit=line_max_bytes)
        # Each transport closes its own duplicate of the wire when it ends (the reader's at the end of stdin).
        reading, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                  open(os.dup(wire_in), "rb", buffering=0))  # noqa: SIM115
        writing, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                          open(os.dup(wire_out), "wb", buffering=0))  # noqa: SIM115
        writing.set_write_buffer_limits(0)  # an answer sent is an answer written (as the SDK flushes each)
        answers = _Counted(_Answers(asyncio.StreamWriter(writing, protocol, None, loop)), unanswered)
        try:
            yield _Lines(reader, line_max_bytes, answers, unanswered), answers
        finally:
            reading.close()
            writing.close()


def _pipes(*fds: int) -> bool:
    """Whether each of ``fds`` is a pipe or a socket (which the event loop can wait on), on POSIX."""
    if sys.platform == "win32":
        return False
    try:
        return all(stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) for mode in (os.fstat(fd).st_mode for fd in fds))
    except OSError:
        return False


@contextmanager
def _wire() -> Iterator[tuple[int, int]]:
    """Private descriptors of stdin and stdout, while fd 0 reads the null device and fd 1 writes to
    stderr; afterwards fd 0 and fd 1 are the wire again, as blocking as they were."""
    import fcntl

    sys.stdout.flush()
    blocking = {fd: os.get_blocking(fd) for fd in (0, 1)}
    wire = {fd: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in (0, 1)}
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    try:
        yield wire[0], wire[1]
    finally:
        for fd in (0, 1):
            os.dup2(wire[fd], fd)
            os.close(wire[fd])
            os.set_blocking(fd, blocking[fd])


class _Answers(ObjectSendStream[SessionMessage]):
    """Each message written to stdout as one line of JSON, in one write."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def send(self, item: SessionMessage) -> None:
        line = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
        self._writer.write(line.encode("utf-8"))
        await self._writer.drain()

    async def aclose(self) -> None:
        pass  # the pipe is closed with the transport, once the server is done with it


class _Unanswered:
    """The ids of the requests read and not answered yet (nor cancelled by the client)."""

    def __init__(self) -> None:
        self._ids: set[str | int] = set()
        self._none = anyio.Event()
        self._none.set()

    def read(self, item: Item) -> Item:
        message = item.message if isinstance(item, SessionMessage) else None
        if isinstance(message, types.JSONRPCRequest):
            if not self._ids:
                self._none = anyio.Event()
            self._ids.add(message.id)
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            self._done((message.params or {}).get("requestId"))
        return item

    def answered(self, item: SessionMessage) -> None:
        if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self._done(item.message.id)

    def _done(self, request_id: Any) -> None:
        self._ids.discard(request_id)
        if not self._ids:
            self._none.set()

    async def end(self) -> NoReturn:
        """The end of stdin: waits until every request read is answered (or END_ANSWERS_SECONDS)."""
        with anyio.move_on_after(END_ANSWERS_SECONDS):
            await self._none.wait()
        raise anyio.EndOfStream


class _Counted(ObjectSendStream[SessionMessage]):
    """An answers' stream that notes the requests answered."""

    def __init__(self, answers: ObjectSendStream[SessionMessage], unanswered: _Unanswered) -> None:
        self._answers = answers
        self._unanswered = unanswered

    async def send(self, item: SessionMessage) -> None:
        await self._answers.send(item)
        self._unanswered.answered(item)

    async def aclose(self) -> None:
        await self._answers.aclose()


class _Lines(ObjectReceiveStream[Item]):
    """The messages of stdin's lines, each read by the event loop and parsed where the SDK parses it."""

    def __init__(self, reader: asyncio.StreamReader, line_max_bytes: int, answers: ObjectSendStream[SessionMessage],
                 unanswered: _Unanswered) -> None:
        self._reader = reader
        self._line_max_bytes = line_max_bytes
        self._answers = answers
        self._unanswered = unanswered

    async def receive(self) -> Item:
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:  # the last line, without its line end
                line = end.partial
                if not line:
                    await self._unanswered.end()
            except asyncio.LimitOverrunError as over:
                await self._answers.send(SessionMessage(await self._skip_line(over.consumed)))
                continue
            text = line.decode("utf-8", errors="replace")
            try:
                return self._unanswered.read(
                    SessionMessage(types.jsonrpc_message_adapter.validate_json(text, by_name=False)))
            except ValidationError:
                pass  # not JSON pydantic reads, or JSON but no JSON-RPC message: read again, or answered
            again = await _read_again_or_answer(text, self._answers)
            if again is not None:
                return self._unanswered.read(again)

    async def _skip_line(self, looked_at: int) -> types.JSONRPCError:
        """Skips a line over the limit to its end; the error that answers it."""
        head = await self._reader.readexactly(looked_at)
        while True:
            try:
                await self._reader.readuntil(b"\n")
                break
            except asyncio.LimitOverrunError as over:
                await self._reader.readexactly(over.consumed)
            except asyncio.IncompleteReadError:
                break
        logger.warning("a request line is over %d bytes; answered with an error", self._line_max_bytes)
        return types.JSONRPCError(jsonrpc="2.0", id=_request_id(head.decode("utf-8", errors="replace")),
                                  error=types.ErrorData(code=types.INVALID_REQUEST, message=(
                                      f"The request is longer than this server reads ({self._line_max_bytes} "
                                      "bytes). Send smaller requests.")))

    async def aclose(self) -> None:
        pass  # the pipe is closed with the transport


class _LinesReadAgain(ObjectReceiveStream[Item]):
    """The SDK transport's messages as they come, except that a line its parser refused is read again,
    or answered. It transforms in the reader's own task: no relay task and stream of its own, whose hop
    every message would pay."""

    def __init__(self, lines: ObjectReceiveStream[Item], answers: ObjectSendStream[SessionMessage],
                 unanswered: _Unanswered) -> None:
        self._lines = lines
        self._answers = answers
        self._unanswered = unanswered

    async def receive(self) -> Item:
        while True:
            try:
                item = await self._lines.receive()
            except anyio.EndOfStream:
                await self._unanswered.end()
            line = _refused_line(item)
            if line is None:
                if isinstance(item, ValidationError):  # JSON, but no JSON-RPC message, which the SDK drops
                    await self._answers.send(SessionMessage(_invalid_request(_given_id(item))))
                    continue
                return self._unanswered.read(item)
            again = await _read_again_or_answer(line, self._answers)
            if again is not None:
                return self._unanswered.read(again)

    async def aclose(self) -> None:
        await self._lines.aclose()


def _refused_line(item: Item) -> str | None:
    """The line a JSON parse error was about; None for anything else (a message, or a line that is
    JSON but no JSON-RPC message). The transport hands on pydantic's ValidationError, a ValueError whose
    ``errors()`` name the kind of problem and its input."""
    errors = getattr(item, "errors", None) if isinstance(item, ValueError) else None
    problems: list[Any] = errors() if callable(errors) else []
    if not problems or problems[0].get("type") != "json_invalid":
        return None
    line = problems[0].get("input")
    return line if isinstance(line, str) else None


async def _read_again_or_answer(line: str, answers: ObjectSendStream[SessionMessage]) -> SessionMessage | None:
    """A line pydantic's parser refused, read again: its message, or None once an error answered it."""
    again = _read_again(line)
    if isinstance(again, types.JSONRPCError):
        await answers.send(SessionMessage(again))
        return None
    return again


def _read_again(line: str) -> SessionMessage | types.JSONRPCError:
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        logger.warning("a request line is not JSON that can be read; answered with a parse error")
        return _parse_error(_request_id(line))
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(message, by_name=False))
    except ValueError:  # pydantic's ValidationError
        return _invalid_request(message.get("id") if isinstance(message, dict) else None)


def _invalid_request(found: Any) -> types.JSONRPCError:
    """The answer to JSON that is no JSON-RPC message (a batch, a wrong version, params that are a list…): for
    its id if it has one, else for none, as JSON-RPC 2.0 asks (a batch's elements are not answered one by one:
    MCP has no batches)."""
    return types.JSONRPCError(jsonrpc="2.0", id=found if _is_id(found) else None, error=types.ErrorData(
        code=types.INVALID_REQUEST, message="The request is JSON but no JSON-RPC message."))


def _given_id(refused: ValidationError) -> Any:
    """The id of the message pydantic refused, as its errors show the input (None if none is found)."""
    for problem in refused.errors():
        given = problem.get("input")
        if isinstance(given, dict) and "id" in given:
            return given["id"]
    return None


def _parse_error(request_id: str | int | None) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(
        code=types.PARSE_ERROR, message="The request is not JSON this server can read (malformed, or nested too "
                                        "deeply); send it again as plain JSON."))


def _is_id(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


#: What the id scan stops at: a string, or a run of opening or closing brackets.
_STRUCTURE = re.compile(r'"|[\[{]+|[\]}]+')
_COLON = re.compile(r"\s*:\s*")


def _request_id(line: str) -> str | int | None:
    """The ``id`` member of the line's top-level object, found without parsing the rest (which may
    nest deeper than any parser here goes); None if there is none."""
    depth, index = 0, 0
    while (found := _STRUCTURE.search(line, index)) is not None:
        run, index = found.group(), found.end()
        if run != '"':
            depth += len(run) if run[0] in "[{" else -len(run)
            continue
        try:
            text, index = json.decoder.scanstring(line, index)  # type: ignore[attr-defined]
        except ValueError:
            return None
        colon = _COLON.match(line, index)
        if depth == 1 and text == "id" and colon is not None:
            try:
                value, _end = json.JSONDecoder().raw_decode(line, colon.end())
            except (ValueError, RecursionError):
                return None
            return value if _is_id(value) else None
    return None
