"""A lean MCP client over streamable HTTP, to generate load (bench/compare.py, section 6).

It sends what the SDK's client (``mcp.Client`` over ``streamable_http_client``) sends for the same calls, byte
for byte in shape: protocol 2026-07-28 without sessions, ``server/discover`` once, then one POST per
``tools/call`` with the request envelope in ``params._meta`` and the routing headers (``MCP-Protocol-Version``,
``Mcp-Method``, ``Mcp-Name``), on one keep-alive HTTP/1.1 connection (another after an answer that says
``Connection: close``, as a worker of ``armarius serve`` holding more than its share of connections does).
What it leaves out is the SDK's machinery around those bytes (task groups, memory streams, pydantic models of
every message, an ``httpx`` request per call): in section 6 the 32 SDK clients in one process took 0.75-1.15 ms
of CPU per call on the same two cores as the server, more than the no-op server itself, so the clients, not the
server, set the no-op floor's rate. An answer is read as the JSON body it is (``Content-Length``); anything else
(another framing, an event stream, a JSON-RPC error) raises, and counts as an error of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

PROTOCOL_VERSION = "2026-07-28"
_META = {"io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
         "io.modelcontextprotocol/clientInfo": {"name": "armarius-bench", "version": "1"},
         "io.modelcontextprotocol/clientCapabilities": {}}


class ProtocolProblem(Exception):
    """An answer the client cannot read, or a JSON-RPC error."""


@dataclass(frozen=True)
class Content:
    text: str


@dataclass(frozen=True)
class ToolResult:
    """What bench/compare.py's answer check reads of the SDK's CallToolResult."""

    content: list[Content]
    is_error: bool


class LeanClient:
    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"an http:// URL, not {url!r}")
        self._host, self._port, self._path = parts.hostname, parts.port or 80, parts.path or "/"
        self._headers = (f"Host: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
                         "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
                         f"MCP-Protocol-Version: {PROTOCOL_VERSION}\r\n")
        self._ids = itertools.count(1)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._active = False
        #: Connections opened: the first, and one after each answer with ``Connection: close``.
        self.connections = 0

    async def __aenter__(self) -> LeanClient:
        self._active = True
        try:
            await self.request("server/discover", {})
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self._active = False
        await self._close()

    async def _close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):  # a connection the server reset: closed all the same
                await writer.wait_closed()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        result = await self.request("tools/call", {"name": name, "arguments": arguments}, name=name)
        return ToolResult([Content(part["text"]) for part in result["content"] if part.get("type") == "text"],
                          bool(result.get("isError")))

    async def request(self, method: str, params: dict[str, Any], *, name: str | None = None) -> Any:
        """One JSON-RPC request and its result."""
        if not self._active:
            raise RuntimeError("use the client in `async with`")
        if self._reader is None or self._writer is None:  # the first request, or the server closed the last
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
            self.connections += 1
        number = next(self._ids)
        body = json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": {**params, "_meta": _META}},
                          separators=(",", ":")).encode()
        self._writer.write((f"POST {self._path} HTTP/1.1\r\n{self._headers}Mcp-Method: {method}\r\n"
                            + (f"Mcp-Name: {name}\r\n" if name is not None else "")
                            + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body)
        head = (await self._reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = head[0].split(" ", 2)
        headers = dict(line.split(":", 1) for line in head[1:] if line)
        length = next((value for key, value in headers.items() if key.strip().lower() == "content-length"), None)
        if length is None:
            raise ProtocolProblem(f"{method}: an answer without Content-Length ({head[0]})")
        answer = await self._reader.readexactly(int(length))
        if any(key.strip().lower() == "connection" and value.strip().lower() == "close"
               for key, value in headers.items()):
            await self._close()  # the server's last answer on this connection: the next request opens another
        if len(status) < 2 or status[1] != "200":
            raise ProtocolProblem(f"{method}: HTTP {' '.join(status[1:])}: {answer[:200]!r}")
        message = json.loads(answer)
        if message.get("id") != number or "result" not in message:
            raise ProtocolProblem(f"{method}: {str(message.get('error', message))[:200]}")
        return message["result"]
