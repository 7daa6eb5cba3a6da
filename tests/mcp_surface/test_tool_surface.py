"""The MCP tool surface through the SDK's in-memory client: filtering, validation, error mapping."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.context import ServerRequestContext

from armarius.app import Armarius, initialize, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission, Role
from armarius.config import Settings
from armarius.mcp.registry import ToolSpec
from armarius.mcp.server import ALL_TOOLS, build_server
from armarius.memory.service import RememberRequest
from tests.helpers import make_team, tool_payload, writing_elsewhere
from tests.research.repos import build_repo, source_entry, write_config

pytestmark = pytest.mark.anyio

HUMAN_ONLY_WORDS = ("approve", "curate", "repair_apply", "resume", "takeover", "take_over", "principal", "token",
                    "reject", "retry", "continue_pending", "choose")


def _boom(_app: Armarius, _actor: Actor, _arguments: dict[str, Any]) -> Any:
    raise RuntimeError("secret connection string postgresql://user:hunter2@db")


def _echo(_app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return {"by": actor.principal, "arguments": arguments}


TEST_TOOLS = [
    *ALL_TOOLS,
    ToolSpec("write_something", "A test tool that needs memory.write.", _echo, Permission.MEMORY_WRITE,
             properties={"slug": {"type": "string", "pattern": "^[a-z]+$"}, "count": {"type": "integer"}},
             required=("slug",), read_only=False),
    ToolSpec("explode", "A test tool that fails unexpectedly.", _boom),
]


def client_for(app: Armarius, actor: Actor, tools: list[ToolSpec] | None = None) -> Client:
    def resolve(_ctx: ServerRequestContext[Any]) -> Actor:
        return actor

    return Client(build_server(app, resolve, tools))


async def test_the_tool_list_depends_on_the_principal(app: Armarius) -> None:
    editor = make_team(app, "alpha", agent_role=Role.EDITOR).agent
    reader = make_team(app, "beta", agent_role=Role.READER).agent
    async with client_for(app, editor, TEST_TOOLS) as client:
        editor_tools = {tool.name for tool in (await client.list_tools()).tools}
    async with client_for(app, reader, TEST_TOOLS) as client:
        reader_tools = {tool.name for tool in (await client.list_tools()).tools}
        refused = tool_payload(result := await client.call_tool("write_something", {"slug": "abc"}))
    assert "write_something" in editor_tools
    assert "write_something" not in reader_tools
    assert result.is_error
    assert refused["code"] == "not_allowed"
    assert refused["details"] == {"permission": "memory.write"}


async def test_no_human_operation_is_an_mcp_tool() -> None:
    for tool in ALL_TOOLS:
        assert not any(word in tool.name for word in HUMAN_ONLY_WORDS), tool.name
        assert tool.permission is None or tool.permission not in {
            Permission.APPROVALS_ISSUE, Permission.MEMORY_CURATE, Permission.MEMORY_MANAGE,
            Permission.EVIDENCE_MANAGE, Permission.PRINCIPALS_MANAGE, Permission.SESSIONS_MANAGE,
            Permission.SESSIONS_TAKEOVER,
        }


async def test_the_repair_tools_propose_and_follow_and_never_decide() -> None:
    repair_tools = {tool.name: tool for tool in ALL_TOOLS if tool.name.startswith("repair")}
    assert set(repair_tools) == {"repair_target", "repair_prepare", "repair_show"}
    assert {tool.permission for tool in repair_tools.values()} == {Permission.REPAIRS_PROPOSE}


async def test_every_tool_has_a_strict_schema_and_a_description() -> None:
    for tool in ALL_TOOLS:
        assert tool.input_schema["additionalProperties"] is False
        assert len(tool.description) > 40


@pytest.mark.parametrize(("arguments", "field"), [
    ({}, "arguments"),
    ({"slug": "abc", "extra": 1}, "arguments"),
    ({"slug": "ABC"}, "slug"),
    ({"slug": "abc", "count": "seven"}, "count"),
])
async def test_invalid_arguments_are_refused_without_echoing_values(
    app: Armarius, arguments: dict[str, Any], field: str
) -> None:
    actor = make_team(app).agent
    async with client_for(app, actor, TEST_TOOLS) as client:
        result = await client.call_tool("write_something", arguments)
    error = tool_payload(result)
    assert result.is_error
    assert error["code"] == "invalid_input"
    assert error["details"]["field"] == field
    assert "seven" not in error["message"]
    assert "ABC" not in error["message"]


async def test_a_valid_call_reaches_the_service(app: Armarius) -> None:
    actor = make_team(app).agent
    async with client_for(app, actor, TEST_TOOLS) as client:
        result = await client.call_tool("write_something", {"slug": "abc", "count": 2})
    assert not result.is_error
    assert tool_payload(result) == {"by": "alpha-agent", "arguments": {"slug": "abc", "count": 2}}


async def test_an_unknown_tool_is_not_found(app: Armarius) -> None:
    actor = make_team(app).agent
    async with client_for(app, actor) as client:
        result = await client.call_tool("approve_draft", {})
    assert result.is_error
    assert tool_payload(result)["code"] == "not_found"


async def test_an_unexpected_failure_is_internal_and_reveals_nothing(
    app: Armarius, caplog: pytest.LogCaptureFixture
) -> None:
    actor = make_team(app).agent
    async with client_for(app, actor, TEST_TOOLS) as client:
        result = await client.call_tool("explode", {})
    error = tool_payload(result)
    assert result.is_error
    assert error["code"] == "internal"
    assert "hunter2" not in result.content[0].text
    assert any("explode" in record.getMessage() for record in caplog.records)


async def test_whoami_and_workspace_info(app: Armarius) -> None:
    team = make_team(app, agent_role=Role.READER)
    async with client_for(app, team.agent) as client:
        whoami = tool_payload(await client.call_tool("whoami", {}))
        info = tool_payload(await client.call_tool("workspace_info", {}))
    assert whoami == {"principal": "alpha-agent", "kind": "agent", "role": "reader", "workspace": "alpha",
                      "permissions": ["memory.read", "research.query"]}
    assert info["workspace"] == "alpha"
    assert info["members"] == {"reader": 1, "editor": 1}


def _thread(_app: Armarius, _actor: Actor, _arguments: dict[str, Any]) -> Any:
    return {"thread": threading.get_ident()}


async def test_a_store_read_runs_on_the_event_loop_only_on_sqlite(app: Armarius) -> None:
    """The thread hop to a worker and back costs a call more than a short read of an embedded store: such a
    read runs on the event loop; a tool that may write or wait, a read whose principal needs a look in the
    database, and every tool on PostgreSQL, does not."""
    agent = make_team(app).agent
    probes = [ToolSpec("read_probe", "Answers from the store.", _thread, store_read=True),
              ToolSpec("other_probe", "May write or wait.", _thread, read_only=False)]
    async with client_for(app, agent, probes) as client:
        loop_thread = threading.get_ident()
        read_thread = tool_payload(await client.call_tool("read_probe", {}))["thread"]
        other_thread = tool_payload(await client.call_tool("other_probe", {}))["thread"]
    # A principal that needs a look in the database first (a token checked again, which may write when it
    # was last used) sends the store read to a worker thread too.
    async with Client(build_server(app, lambda _ctx: agent, probes, known_actor=lambda _ctx: None)) as client:
        looked_up_thread = tool_payload(await client.call_tool("read_probe", {}))["thread"]
    assert other_thread != loop_thread
    assert looked_up_thread != loop_thread
    assert (read_thread == loop_thread) == (app.database.dialect == "sqlite")


async def test_a_tool_that_asks_no_store_runs_on_the_event_loop_on_every_store(app: Armarius) -> None:
    """A tool that answers from its principal alone (whoami) runs on the event loop on PostgreSQL too, where
    every tool that asks the store runs in a worker thread; not when its principal needs a look in the
    database."""
    agent = make_team(app).agent
    probes = [ToolSpec("principal_probe", "Answers from the principal.", _thread, storeless=True),
              ToolSpec("read_probe", "Answers from the store.", _thread, store_read=True)]
    loop_thread = threading.get_ident()
    async with client_for(app, agent, probes) as client:
        storeless = tool_payload(await client.call_tool("principal_probe", {}))["thread"]
        store_read = tool_payload(await client.call_tool("read_probe", {}))["thread"]
    async with Client(build_server(app, lambda _ctx: agent, probes, known_actor=lambda _ctx: None)) as client:
        looked_up = tool_payload(await client.call_tool("principal_probe", {}))["thread"]
    assert storeless == loop_thread
    assert (store_read == loop_thread) == (app.database.dialect == "sqlite")
    assert looked_up != loop_thread
    assert {tool.name for tool in ALL_TOOLS if tool.storeless} == {"whoami"}


async def test_a_tool_that_embeds_runs_in_a_worker_thread_until_the_model_is_loaded(
        app: Armarius, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first text embedded in a process loads the embedding model (0.6 s): until it is loaded, a store read
    or write that embeds (recall, remember, create_draft) runs in a worker thread, so that the event loop's other
    requests do not wait for the load; a store read that embeds nothing stays on the loop; once the model is
    loaded, the tool that embeds runs on the loop too (on SQLite)."""
    agent = make_team(app).agent
    assert app.memory.vectors is not None
    embedder = type(app.memory.vectors.embedder)
    probes = [ToolSpec("embed_probe", "Reads the store and embeds.", _thread, store_read=True, embeds=True),
              ToolSpec("read_probe", "Reads the store.", _thread, store_read=True)]
    loop_thread, sqlite = threading.get_ident(), app.database.dialect == "sqlite"
    with monkeypatch.context() as patched:
        patched.setattr(embedder, "ready", property(lambda _self: False))
        async with client_for(app, agent, probes) as client:
            loading = tool_payload(await client.call_tool("embed_probe", {}))["thread"]
            reading = tool_payload(await client.call_tool("read_probe", {}))["thread"]
    app.memory.vectors.embedder.embed(["the model, loaded"])
    assert app.memory.vectors.embedder.ready
    async with client_for(app, agent, probes) as client:
        loaded = tool_payload(await client.call_tool("embed_probe", {}))["thread"]
    assert loading != loop_thread
    assert (reading == loop_thread) == sqlite
    assert (loaded == loop_thread) == sqlite
    assert {tool.name for tool in ALL_TOOLS if tool.embeds} == {"recall", "remember", "create_draft"}


async def test_a_store_write_runs_on_the_event_loop_only_on_sqlite_while_nobody_writes(app: Armarius) -> None:
    """A store write runs on the event loop when the writers' turn is free, holding it until the tool
    returns, so the tool's own transactions use it (a real remember, too); while another thread writes, or
    when the principal needs a look in the database, the call goes to a worker thread and queues there. Not
    on PostgreSQL, nor for a tool that may ask a provider."""
    agent = make_team(app).agent
    probes = [ToolSpec("write_probe", "Writes the store only.", _thread, read_only=False, store_write=True),
              ToolSpec("other_probe", "May ask a provider.", _thread, read_only=False)]
    tools = [*ALL_TOOLS, *probes]
    loop_thread = threading.get_ident()
    sqlite = app.database.dialect == "sqlite"
    async with client_for(app, agent, tools) as client:
        assert (tool_payload(await client.call_tool("write_probe", {}))["thread"] == loop_thread) == sqlite
        assert tool_payload(await client.call_tool("other_probe", {}))["thread"] != loop_thread
        with anyio.fail_after(30):
            written = tool_payload(await client.call_tool("remember", {
                "slug": "deploy/staging", "title": "Staging", "body": "The deploy host for pre-production."}))
        assert written["status"] == "written"
        with writing_elsewhere(app.database, "UPDATE entries SET title = title WHERE workspace_id = ?",
                               (agent.workspace_id,), workspace_id=agent.workspace_id):
            assert tool_payload(await client.call_tool("write_probe", {}))["thread"] != loop_thread
    async with Client(build_server(app, lambda _ctx: agent, tools, known_actor=lambda _ctx: None)) as client:
        assert tool_payload(await client.call_tool("write_probe", {}))["thread"] != loop_thread
    assert app.memory.read(agent, slug="deploy/staging")["revision"] == 1


async def test_the_store_reads_answer_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    """What lets a store read run on the event loop (of SQLite only: PostgreSQL runs it in a worker thread,
    the test above): it writes nothing and never waits for a writer, here one that holds SQLite's write
    lock (another connection's uncommitted write) for as long as the reads take."""
    settings = Settings(data_dir=tmp_path / "data", research_config=Path("research.toml"))
    initialize(settings)
    write_config(settings.data_dir / "research.toml", [source_entry(build_repo(tmp_path / "repo"))])
    app = open_app(settings)
    try:
        team = make_team(app)
        app.memory.remember(team.agent, RememberRequest(slug="deploy/staging", title="Staging",
                                                        body="The deploy host for pre-production."))
        session = app.sessions.open(team.agent, "Where is staging?")["session"]
        store_reads = [tool for tool in ALL_TOOLS if tool.store_read or tool.storeless]
        assert {tool.name for tool in store_reads} >= {"whoami", "read", "recall", "list", "sessions"}
        assert all(tool.read_only and tool.offered(app) for tool in store_reads)
        arguments = {"read": {"slug": "deploy/staging"}, "history": {"slug": "deploy/staging"},
                     "recall": {"query": "deploy host"},
                     "repair_target": {"session": session, "kind": "entry", "name": "deploy/staging"}}
        writer = sqlite3.connect(settings.sqlite_path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE workspaces SET name = 'renamed' WHERE name = 'alpha'")
        try:
            with anyio.fail_after(30):
                async with client_for(app, team.agent) as client:
                    for tool in store_reads:
                        result = await client.call_tool(tool.name, arguments.get(tool.name, {}))
                        assert not result.is_error, (tool.name, tool_payload(result))
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert app.memory.read(team.agent, slug="deploy/staging")["revision"] == 1
    finally:
        app.close()


_SPANS_CHILD = """
import sys
from pathlib import Path
from opentelemetry import trace
from opentelemetry.trace import NoOpTracerProvider
from mcp.server._otel import OpenTelemetryMiddleware
from armarius.app import open_app
from armarius.config import Settings
from armarius.mcp.server import build_server

if len(sys.argv) > 2:
    trace.set_tracer_provider(NoOpTracerProvider())
app = open_app(Settings(data_dir=Path(sys.argv[1])))
try:
    server = build_server(app, lambda _ctx: None)
    print(sum(isinstance(middleware, OpenTelemetryMiddleware) for middleware in server.middleware))
finally:
    app.close()
"""


@pytest.mark.parametrize("provider", [False, True], ids=["no tracer provider", "a tracer provider installed"])
def test_each_message_is_a_span_only_where_spans_go_somewhere(tmp_path: Path, provider: bool) -> None:
    """The SDK wraps every message in an OpenTelemetry span, a no-op costing each call some 0.05 ms until a
    tracer provider is installed: the server keeps the spans only where one was installed before it was built."""
    initialize(Settings(data_dir=tmp_path))
    arguments = [sys.executable, "-c", _SPANS_CHILD, str(tmp_path), *(["provider"] if provider else [])]
    found = subprocess.run(arguments, capture_output=True, text=True, check=True, timeout=60)
    assert found.stdout.strip() == ("1" if provider else "0"), found.stderr
