"""The floor of bench/compare.py's comparisons: an MCP server on the same SDK as Armarius (the low-level
``Server``, as ``armarius.mcp.server`` uses it) with one tool, ``noop``, that does nothing and answers
``{}`` the way Armarius answers (one text content).

Over stdio (section 2, CPU per call), or over streamable HTTP the way `armarius serve` runs it with one
worker (section 6, many clients): uvicorn's h11 protocol, the SDK's session manager with sessions, at
``/mcp``, and ``/healthz``; no authentication, no store.

    .venv/bin/python bench/noop_server.py              # speaks MCP on stdin/stdout until stdin closes
    .venv/bin/python bench/noop_server.py --armarius-stdio  # the same through Armarius's stdio transport
    .venv/bin/python bench/noop_server.py --http 8999  # serves http://127.0.0.1:8999/mcp until SIGTERM
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

NOOP = types.Tool(name="noop", description="Does nothing.", input_schema={"type": "object", "properties": {}},
                  annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False))


async def list_tools(_ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
                     ) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[NOOP])


async def call_tool(_ctx: ServerRequestContext[Any], _params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text="{}")], is_error=False)


def server() -> Server[Any]:
    return Server("noop", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(armarius_transport: bool) -> None:
    noop = server()
    if armarius_transport:
        from armarius.mcp.stdio import stdio_streams

        streams = stdio_streams(2**25)
    else:
        streams = stdio_server()
    async with streams as (read_stream, write_stream):
        await noop.run(read_stream, write_stream, noop.create_initialization_options())


def serve_http(port: int) -> None:
    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.types import Receive, Scope, Send

    manager = StreamableHTTPSessionManager(app=server())

    class Endpoint:
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            await manager.handle_request(scope, receive, send)

    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(routes=[Route("/healthz", healthz, methods=["GET"]),
                            Route("/mcp", Endpoint(), methods=["GET", "POST", "DELETE"])], lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=port, http="h11", log_level="warning", server_header=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="An MCP server with one tool that does nothing.")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on this port")
    parser.add_argument("--armarius-stdio", action="store_true",
                        help="over stdio, through Armarius's transport (armarius.mcp.stdio) instead of the SDK's")
    options = parser.parse_args()
    if options.http is None:
        anyio.run(serve_stdio, options.armarius_stdio)
    else:
        serve_http(options.http)
