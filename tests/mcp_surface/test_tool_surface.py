"""The MCP tool surface through the SDK's in-memory client: filtering, validation, error mapping."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.server.context import ServerRequestContext

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission, Role
from armarius.mcp.registry import ToolSpec
from armarius.mcp.server import ALL_TOOLS, build_server
from tests.helpers import make_team, tool_payload

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
