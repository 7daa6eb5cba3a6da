"""MCP over stdio: the principal is the agent token given at start, checked again for the calls.

A refused token ends the server before it speaks MCP. Afterwards a call reuses the token's check for
up to a second, as over HTTP (:meth:`armarius.auth.directory.Directory.recently_checked`): a revocation
or a role change made elsewhere (``armarius token revoke``) refuses the calls made a second later.

Every request gets an answer. The SDK's stdio transport reads each line with pydantic's JSON
parser, which refuses some valid JSON (a lone-surrogate escape such as ``"\\ud800"``; nesting deeper
than about 200 levels, which the SDK's own client writes up to 254) and then drops the line without
an answer: the client would wait forever. Such a line is read again here with Python's parser,
which takes both, and handled like any other (the tools refuse such values as ``invalid_input``).
A line that parser cannot read either is answered with a JSON-RPC parse error for its id, or for
none when no id can be found.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import mcp_types as types
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.mcp.server import build_server

logger = logging.getLogger("armarius.mcp")

Item = SessionMessage | Exception


async def serve_stdio(app: Armarius, token: str) -> None:
    app.directory.authenticate_token(token)  # refuse a bad token before speaking MCP at all

    def resolve_actor(_ctx: ServerRequestContext[Any]) -> Actor:
        return app.directory.recently_checked(token) or app.directory.authenticate_token(token)

    server = build_server(app, resolve_actor, known_actor=lambda _ctx: app.directory.recently_checked(token))
    async with stdio_server() as (read_stream, write_stream):
        lines = _LinesReadAgain(read_stream, write_stream)
        await server.run(lines, write_stream, server.create_initialization_options())


class _LinesReadAgain(ObjectReceiveStream[Item]):
    """The transport's messages as they come, except that a line its parser refused is read again, or
    answered. It transforms in the reader's own task: no relay task and stream of its own, whose hop
    every message would pay."""

    def __init__(self, lines: ObjectReceiveStream[Item], answers: ObjectSendStream[SessionMessage]) -> None:
        self._lines = lines
        self._answers = answers

    async def receive(self) -> Item:
        while True:
            item = await self._lines.receive()
            line = _refused_line(item)
            if line is None:
                return item
            again = _read_again(line)
            if not isinstance(again, types.JSONRPCError):
                return again
            await self._answers.send(SessionMessage(again))

    async def aclose(self) -> None:
        await self._lines.aclose()


def _refused_line(item: Item) -> str | None:
    """The line a JSON parse error was about; None for anything else (a message, or a line that is
    JSON but no JSON-RPC message, which the SDK deals with itself). The transport hands on pydantic's
    ValidationError, a ValueError whose ``errors()`` name the kind of problem and its input."""
    errors = getattr(item, "errors", None) if isinstance(item, ValueError) else None
    problems: list[Any] = errors() if callable(errors) else []
    if not problems or problems[0].get("type") != "json_invalid":
        return None
    line = problems[0].get("input")
    return line if isinstance(line, str) else None


def _read_again(line: str) -> SessionMessage | types.JSONRPCError:
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        logger.warning("a request line is not JSON that can be read; answered with a parse error")
        return _parse_error(_request_id(line))
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(message, by_name=False))
    except ValueError:  # pydantic's ValidationError
        found = message.get("id") if isinstance(message, dict) else None
        return types.JSONRPCError(jsonrpc="2.0", id=found if _is_id(found) else None, error=types.ErrorData(
            code=types.INVALID_REQUEST, message="The request is JSON but no JSON-RPC message."))


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
