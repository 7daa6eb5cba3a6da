"""A session, its checkpoints, reservations and evidence records belong to one workspace and one owner:
invisible to everyone else through every agent tool, and to the application's login role scoped to
another workspace. Checkpoints and evidence records are records: the server role can only add them."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors
import pytest

from tests.helpers import OwnerSQL, agent_of, make_team
from tests.sessions.conftest import Lab

SESSION_TABLES = ("sessions", "session_checkpoints", "session_reservations", "evidence_records")
READ = {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2}


def populated(lab: Lab) -> int:
    """A session of alpha's agent with evidence, a checkpoint of each kind it can have, and a reservation."""
    sessions, team = lab.app.sessions, lab.team
    session = sessions.open(team.agent, "Where is the order handler?")["session"]
    sessions.query(team.agent, session, READ)
    sessions.raise_budget(team.human, session, 100)
    return int(session)


@pytest.mark.anyio
async def test_no_agent_tool_reaches_a_session_of_another_workspace_or_owner(lab: Lab) -> None:
    session = populated(lab)
    beta = make_team(lab.app, "beta")
    with OwnerSQL(lab.app.settings) as sql:
        before = {table: sql.count(table) for table in SESSION_TABLES}
    async with agent_of(lab.app, beta.agent) as call:
        tools = await call.tools()
        assert {"session_open", "session_show", "session_close", "sessions", "project_query"} <= tools
        assert not {tool for tool in tools if "resume" in tool or "takeover" in tool or "budget" in tool}
        for tool, arguments in (("session_show", {}), ("session_close", {}), ("project_query", {"arguments": READ})):
            answer = await call(tool, session=session, **arguments)
            assert answer["error"] == "not_found", (tool, answer)
            assert "Where is the order handler" not in str(answer)
        assert (await call("sessions"))["sessions"] == []
    with OwnerSQL(lab.app.settings) as sql:
        assert {table: sql.count(table) for table in SESSION_TABLES} == before


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgresql"], indirect=True)
def test_the_login_role_scoped_to_another_workspace_sees_no_session_rows(lab: Lab) -> None:
    populated(lab)
    beta = make_team(lab.app, "beta")
    url = lab.app.settings.database_url
    assert url is not None
    with psycopg.connect(url) as connection:
        def run(workspace: int, statement: str) -> Any:
            with connection.transaction():
                connection.execute("SELECT set_config('armarius.workspace_id', %s, true)", (str(workspace),))
                cursor = connection.execute(statement)
                return cursor.fetchone() if statement.startswith("SELECT") else None

        alpha = lab.team.agent.workspace_id
        for table in SESSION_TABLES:
            assert run(alpha, f"SELECT count(*) FROM {table}")[0] > 0, table
            assert run(beta.agent.workspace_id, f"SELECT count(*) FROM {table}")[0] == 0, table
        for statement in ("UPDATE evidence_records SET actor = 'forged'", "DELETE FROM evidence_records",
                          "UPDATE session_checkpoints SET actor = 'forged'", "DELETE FROM session_checkpoints",
                          "DELETE FROM sessions", "DELETE FROM session_reservations"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                run(alpha, statement)
