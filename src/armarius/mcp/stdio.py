"""MCP over stdio: the principal is the agent token given at start, re-checked on every call."""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.mcp.server import build_server


async def serve_stdio(app: Armarius, token: str) -> None:
    app.directory.authenticate_token(token)  # refuse a bad token before speaking MCP at all

    def resolve_actor(_ctx: ServerRequestContext[Any]) -> Actor:
        return app.directory.authenticate_token(token)

    server = build_server(app, resolve_actor)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
