"""The project-query-v1 schema is reachable over MCP as a resource, named in the tool's description."""

from __future__ import annotations

import json

import pytest
from mcp.shared.exceptions import MCPError

from armarius.app import Armarius
from armarius.auth.permissions import Role
from armarius.mcp.research_tools import SCHEMA_URI
from armarius.research.service import query_schema
from tests.helpers import agent_of, make_team
from tests.research.repos import Repo

pytestmark = pytest.mark.anyio


async def test_an_agent_reads_the_full_schema_that_the_tool_description_names(
        research_app: tuple[Armarius, Repo]) -> None:
    application, _repo = research_app
    team = make_team(application, agent_role=Role.READER)
    async with agent_of(application, team.agent) as agent:
        listed = (await agent.client.list_resources()).resources
        tool = next(t for t in (await agent.client.list_tools()).tools if t.name == "project_query")
        read = await agent.client.read_resource(SCHEMA_URI)
        with pytest.raises(MCPError):
            await agent.client.read_resource("armarius://schemas/other.json")
    assert [str(resource.uri) for resource in listed] == [SCHEMA_URI]
    assert SCHEMA_URI in (tool.description or "")
    assert json.loads(read.contents[0].text) == query_schema()  # type: ignore[union-attr]


async def test_without_research_there_is_no_schema_resource(app: Armarius) -> None:
    team = make_team(app)
    async with agent_of(app, team.agent) as agent:
        assert (await agent.client.list_resources()).resources == []
        with pytest.raises(MCPError):
            await agent.client.read_resource(SCHEMA_URI)
