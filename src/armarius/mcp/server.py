"""The MCP server on the SDK's low-level ``Server``.

One tool list, filtered per principal on every request; one place where errors become tool
results (``isError`` with ``{code, message, details}``); every answer is one text content of
canonical JSON. The acting principal is resolved on each call, in the same worker thread as the
tool's work (one hop off the event loop per call, not one for the principal and one for the work):
over stdio from the token given at start, over HTTP from the request's; either reuses a token's check
for up to a second (:meth:`armarius.auth.directory.Directory.recently_checked`). A tool that only reads
an embedded SQLite store runs on the event loop itself, with no hop (:attr:`ToolSpec.store_read`), and so
does one that only writes it, when the writers' turn is free at once (:attr:`ToolSpec.store_write`), and on
every store one that answers from its principal alone (:attr:`ToolSpec.storeless`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from opentelemetry import trace

import armarius
from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.canonical import canonical_json
from armarius.errors import ArmariusError, InternalError, NotAllowed, NotFound, echo
from armarius.mcp import draft_tools, identity_tools, memory_tools, repair_tools, research_tools
from armarius.mcp.registry import ToolSpec

logger = logging.getLogger("armarius.mcp")

#: What :func:`build_server`'s ``on_the_loop`` answers for a tool that runs in a worker thread instead.
_HOP = object()

#: JSON-RPC error code for an unknown resource (MCP specification).
RESOURCE_NOT_FOUND = -32002

#: The acting principal of a request. It may block (a token is checked against the database): the
#: server calls it in a worker thread.
ActorResolver = Callable[[ServerRequestContext[Any]], Actor]
#: The acting principal when it is known without asking the database, else None.
KnownActor = Callable[[ServerRequestContext[Any]], Actor | None]

INSTRUCTIONS = (
    "Armarius keeps this project's governed memory. Humans decide what counts as trusted "
    "knowledge: when a tool answers judgment_required, nothing was written; read its "
    "instruction and follow it. Errors carry a stable code and say what to do next."
)

ALL_TOOLS: list[ToolSpec] = [*identity_tools.TOOLS, *memory_tools.TOOLS, *draft_tools.TOOLS, *research_tools.TOOLS,
                             *repair_tools.TOOLS]


def build_server(app: Armarius, resolve_actor: ActorResolver, tools: list[ToolSpec] | None = None, *,
                 known_actor: KnownActor | None = None) -> Server[Any]:
    """``known_actor``: the principal where it needs no look in the database (a store read or write runs on
    the event loop only then); by default ``resolve_actor`` never looks (HTTP: the request's, authenticated
    before)."""
    registry = {tool.name: tool for tool in (tools if tools is not None else ALL_TOOLS) if tool.offered(app)}
    embedded = app.database.dialect == "sqlite"  # see ToolSpec.store_read and store_write
    at_hand: KnownActor = known_actor or resolve_actor

    async def actor_of(ctx: ServerRequestContext[Any]) -> Actor:
        """The principal of a request that is no tool call (listing tools or resources): a refusal is a JSON-RPC
        error with a real code and the refusal's {code, message, details} as its data (the SDK would send
        code 0 and the exception's text)."""
        try:
            return await anyio.to_thread.run_sync(resolve_actor, ctx)
        except ArmariusError as error:
            raise MCPError(types.INTERNAL_ERROR if error.http_status >= 500 else types.INVALID_REQUEST, error.message,
                           data=error.to_dict()) from None

    def call(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, tool: ToolSpec | None,
             actor: Actor | None = None) -> Any:
        actor = actor or resolve_actor(ctx)
        if tool is None:
            raise NotFound(f"There is no tool named {echo(params.name)}; list the tools to see yours.")
        if not tool.allowed(actor):
            raise NotAllowed(
                f"Your role ({actor.role.value}) does not include {tool.name}.",
                permission=tool.permission.value if tool.permission else None,
            )
        return tool.handler(app, actor, tool.validate(params.arguments or {}))

    async def list_tools(
        ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        actor = await actor_of(ctx)
        return types.ListToolsResult(tools=[_describe(tool) for tool in registry.values() if tool.allowed(actor)])

    def on_the_loop(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, tool: ToolSpec | None
                    ) -> Any:
        """The tool's answer, where it runs on the event loop; :data:`_HOP` where it runs in a worker thread."""
        if tool is None or not _loop_may_run(app, tool, embedded=embedded):
            return _HOP
        actor = at_hand(ctx)
        if actor is None:
            return _HOP
        if tool.storeless or tool.store_read:
            return call(ctx, params, tool, actor)
        with app.database.writes_without_waiting() as held:
            return call(ctx, params, tool, actor) if held else _HOP

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = registry.get(params.name)
        try:
            result = on_the_loop(ctx, params, tool)
            if result is _HOP:
                result = await anyio.to_thread.run_sync(call, ctx, params, tool)
        except ArmariusError as error:
            return _result(error.to_dict(), is_error=True)
        except Exception:
            logger.exception("tool %s failed unexpectedly", params.name)
            return _result(InternalError().to_dict(), is_error=True)
        return _result(result)

    research = registry.get("project_query")

    async def list_resources(
        ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        actor = await actor_of(ctx)
        if research is None or not research.allowed(actor):
            return types.ListResourcesResult(resources=[])
        uri, _text = research_tools.schema_resource()
        return types.ListResourcesResult(resources=[types.Resource(
            uri=uri, name="project-query-v1", mime_type="application/schema+json",
            description="The JSON schema of project_query's arguments: every kind, field, operator and limit.",
        )])

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        actor = await actor_of(ctx)
        uri, text = research_tools.schema_resource()
        if research is None or not research.allowed(actor) or str(params.uri) != uri:
            raise MCPError(RESOURCE_NOT_FOUND, f"There is no resource {echo(params.uri)}; list the resources.")
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type="application/schema+json", text=text)])

    def input_schema(name: str) -> dict[str, Any] | None:
        tool = registry.get(name)
        return None if tool is None else tool.input_schema

    server: Server[Any] = Server(
        "armarius",
        version=armarius.__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        get_tool_input_schema=input_schema,
    )
    if not _tracing():
        server.middleware = [middleware for middleware in server.middleware
                             if not isinstance(middleware, OpenTelemetryMiddleware)]
    return server


def _loop_may_run(app: Armarius, tool: ToolSpec, *, embedded: bool) -> bool:
    """Whether the event loop may run the tool itself, its principal at hand (see :class:`ToolSpec`)."""
    if tool.storeless:
        return True
    if not (embedded and (tool.store_read or tool.store_write)):
        return False
    return not (tool.embeds and app.memory.vectors is not None and not app.memory.vectors.embedder.ready)


def _tracing() -> bool:
    """Whether OpenTelemetry spans go anywhere: a tracer provider was installed (by the OpenTelemetry SDK, or
    ``opentelemetry-instrument``) before the server was built. The SDK wraps every message in a span
    whatever happens to it; without a provider each one is a no-op that still costs the call some 0.05 ms."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _describe(tool: ToolSpec) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only, open_world_hint=False),
    )


def _result(payload: Any, *, is_error: bool = False) -> types.CallToolResult:
    """One copy of the answer: canonical JSON as text. No tool declares an output schema, so the MCP
    specification asks for no structured content; sending both doubled every answer's bytes and its
    encoding (every client reads the text; a JSON parse of it gives the same object)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=canonical_json(payload))],
                                is_error=is_error)
