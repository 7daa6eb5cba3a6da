"""An agent's database query end to end: `armarius mcp` in a subprocess, the SDK's client over stdio,
the password only in the server's environment."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.e2e.servers import agent_token
from tests.research import world as game
from tests.research.repos import write_config
from tests.research.world import WorldServer

pytestmark = pytest.mark.anyio


async def test_an_agent_reads_rows_over_stdio(world_server: WorldServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = agent_token(data)
    write_config(data / "research.toml", databases=[game.database_entry(world_server)])
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "armarius", "--data-dir", str(data), "mcp"],
        env={"ARMARIUS_TOKEN": token, "ARMARIUS_RESEARCH_CONFIG": "research.toml",
             **game.password_environ(world_server)},
    )
    query = {"kind": "database.rows", "table": "item_template", "columns": ["entry", "name", "buy_price"],
             "filters": [{"column": "name", "op": "contains", "value": "% Off_"}]}
    async with Client(parameters) as client:
        assert "project_query" in {tool.name for tool in (await client.list_tools()).tools}
        opened = await client.call_tool("session_open", {"subject": "Which coupons are there?"})
        session = json.loads(opened.content[0].text)["session"]  # type: ignore[union-attr]
        result = await client.call_tool("project_query", {"session": session, "arguments": query})
        refused = await client.call_tool("project_query", {"session": session,
                                                           "arguments": {"kind": "database.rows", "table": "account"}})
    answer = json.loads(result.content[0].text)  # type: ignore[union-attr]
    price = game.BUY_PRICES[3]  # DECIMAL(12,4): exact text from the servers, what SQLite stored (a REAL) there
    assert answer["result"]["rows"] == [[3, "50% Off_Coupon",
                                         float(price) if world_server.dialect == "sqlite" else format(price, "f")]]
    assert answer["origin"] == {"kind": "database", "database": "world", "dialect": world_server.dialect,
                                "snapshot": "world-1"}
    assert refused.is_error
    assert json.loads(refused.content[0].text)["code"] == "not_found"  # type: ignore[union-attr]
    capture = data / "evidence" / "alpha" / "sessions" / str(session) / "captures" / f"{answer['capture']}.json"
    content = capture.read_text(encoding="utf-8")
    for secret in filter(None, (world_server.reader_password, world_server.reader_user, world_server.host)):
        assert secret not in content
