"""The floor of bench/compare.py's per-call CPU comparison: an MCP server over stdio on the same SDK
as Armarius (the low-level ``Server``, as ``armarius.mcp.server`` uses it) with one tool, ``noop``,
that does nothing and answers ``{}`` the way Armarius answers (one text content).

    .venv/bin/python bench/noop_server.py      # speaks MCP on stdin/stdout until stdin closes
"""

from __future__ import annotations

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


async def main() -> None:
    server: Server[Any] = Server("noop", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
