"""Repairs through the agent surface (the SDK's real client) and across workspaces: the agent tools propose
and follow a repair and never decide one; a session's repairs show in session_show; another workspace's
session and repairs do not exist for an agent; a blocked session refuses; and on PostgreSQL the login role
scoped to another workspace sees no repair, event or pending operation, and can never change the history."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors
import pytest

from armarius.app import Armarius
from armarius.errors import InvalidInput, SessionBlocked
from armarius.repairs.service import SESSION_REPAIRS_SHOWN
from tests.helpers import OwnerSQL, agent_of, make_team
from tests.repairs.conftest import ENTRY, Desk, changes_nothing, make_desk
from tests.research.conftest import research_app  # noqa: F401  (a fixture used here)
from tests.research.repos import Repo

REPAIR_TABLES = ("repairs", "repair_events", "pending_operations")


@pytest.fixture
def research_desk(research_app: tuple[Armarius, Repo]) -> Desk:  # noqa: F811
    """A desk whose application has a research source, so that agents are offered the session tools."""
    application, _repo = research_app
    return make_desk(application)


@pytest.mark.anyio
async def test_an_agent_proposes_and_follows_a_repair_through_its_tools(research_desk: Desk) -> None:
    desk = research_desk
    async with agent_of(desk.app, desk.agent) as call:
        tools = await call.tools()
        assert {"repair_target", "repair_prepare", "repair_show"} <= tools
        assert not {tool for tool in tools if any(word in tool for word in ("apply", "reject", "retry", "choose",
                                                                             "activate", "pending"))}
        session = (await call("session_open", subject="Why does the staging deploy fail?"))["session"]
        target = await call("repair_target", session=session, kind="entry", name=ENTRY)
        assert target["revision"] == 1
        alternative = {"target": {"kind": "entry", "name": ENTRY, "revision": target["revision"]},
                       "title": target["title"], "body": "Staging moved to stage-07.", "rationale": "Observed."}
        proposed = await call("repair_prepare", session=session, conflict="The config names stage-07.",
                              alternatives=[alternative])
        assert proposed["status"] == "proposed"
        repair = proposed["repair"]
        refused = await call("repair_prepare", session=session, conflict="c", alternatives=[alternative] * 6)
        assert refused["error"] == "invalid_input"
        desk.app.repairs.reject(desk.human, repair, "Say which account it moved to.", reformulate=True)
        shown = await call("repair_show", repair=repair)
        assert (shown["status"], shown["reformulation_requested"], shown["comment"]) == (
            "rejected", True, "Say which account it moved to.")
        summary = await call("session_show", session=session)
        assert summary["repairs"] == [{"repair": repair, "status": "rejected", "reformulation_requested": True,
                                       "comment": "Say which account it moved to.", "published": False}]
        # A decision is not the agent's, whatever it sends.
        assert (await call("repair_apply", repair=repair, option="opt-1"))["error"] == "not_found"
    assert desk.app.memory.read(desk.agent, ENTRY)["revision"] == 1


@pytest.mark.anyio
async def test_session_show_lists_the_newest_repairs_and_says_when_older_ones_are_left_out(
        research_desk: Desk) -> None:
    """A session may hold any number of repairs; session_show's answer stays bounded: the newest
    SESSION_REPAIRS_SHOWN, newest first, and repairs_more once older ones are left out."""
    desk = research_desk
    async with agent_of(desk.app, desk.agent) as call:
        session = (await call("session_open", subject="Which host does staging use?"))["session"]
        target = await call("repair_target", session=session, kind="entry", name=ENTRY)
        alternative = {"target": {"kind": "entry", "name": ENTRY, "revision": target["revision"]},
                       "title": target["title"], "body": "Staging moved to stage-07.", "rationale": "Observed."}
        made = [(await call("repair_prepare", session=session, conflict=f"Observation {number}.",
                            alternatives=[alternative]))["repair"] for number in range(SESSION_REPAIRS_SHOWN)]
        summary = await call("session_show", session=session)
        assert [item["repair"] for item in summary["repairs"]] == made[::-1]
        assert "repairs_more" not in summary
        made.append((await call("repair_prepare", session=session, conflict="One more.",
                                alternatives=[alternative]))["repair"])
        summary = await call("session_show", session=session)
        assert [item["repair"] for item in summary["repairs"]] == made[:0:-1]
        assert summary["repairs_more"] is True
        assert (await call("repair_show", repair=made[0]))["repair"] == made[0], "an older one stays readable"


@pytest.mark.anyio
async def test_no_agent_tool_reaches_a_repair_of_another_workspace(research_desk: Desk) -> None:
    desk = research_desk
    session = desk.open_session()
    repair = desk.prepare(session)["repair"]
    beta = make_team(desk.app, "beta")
    with OwnerSQL(desk.app.settings) as sql:
        before = {table: sql.count(table) for table in (*REPAIR_TABLES, "audit_events")}
    async with agent_of(desk.app, beta.agent) as call:
        assert (await call("repair_show", repair=repair))["error"] == "not_found"
        assert (await call("repair_target", session=session, kind="entry", name=ENTRY))["error"] == "not_found"
        prepared = await call("repair_prepare", session=session, conflict="c", alternatives=[desk.alternative()])
        assert prepared["error"] == "not_found"
        assert "captured config" not in str(prepared)
    with OwnerSQL(desk.app.settings) as sql:
        assert {table: sql.count(table) for table in (*REPAIR_TABLES, "audit_events")} == before
    assert desk.app.repairs.list_repairs(beta.human) == []


def test_a_blocked_session_refuses_preparing(research_desk: Desk) -> None:
    desk = research_desk
    session = desk.open_session()
    for _ in range(desk.app.sessions.limits.invalid_request_limit):
        with pytest.raises(InvalidInput):  # the last one blocks the session
            desk.app.sessions.query(desk.agent, session, {"kind": "no.such.kind"})
    assert desk.app.sessions.show(desk.agent, session)["status"] == "blocked"
    with changes_nothing(desk, SessionBlocked) as caught:
        desk.prepare(session)
    assert caught[0].details["reason"] == "invalid_requests"
    with changes_nothing(desk, SessionBlocked):
        desk.app.repairs.target(desk.agent, session, "entry", ENTRY)


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgresql"], indirect=True)
def test_the_login_role_scoped_to_another_workspace_sees_no_repair_rows(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session)["repair"]
    desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    beta = make_team(desk.app, "beta")
    url = desk.app.settings.database_url
    assert url is not None
    with psycopg.connect(url) as connection:
        def run(workspace: int, statement: str) -> Any:
            with connection.transaction():
                connection.execute("SELECT set_config('armarius.workspace_id', %s, true)", (str(workspace),))
                cursor = connection.execute(statement)
                return cursor.fetchone() if statement.startswith("SELECT") else cursor.rowcount

        alpha = desk.agent.workspace_id
        for table in REPAIR_TABLES:
            assert run(alpha, f"SELECT count(*) FROM {table}")[0] > 0, table
            assert run(beta.agent.workspace_id, f"SELECT count(*) FROM {table}")[0] == 0, table
        # Another workspace's rows cannot be changed: they are not there for it.
        assert run(beta.agent.workspace_id, "UPDATE repairs SET status = 'proposed'") == 0
        for statement in ("UPDATE repair_events SET actor = 'forged'", "DELETE FROM repair_events",
                          "DELETE FROM repairs", "DELETE FROM pending_operations"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                run(alpha, statement)
    assert desk.app.repairs.show(desk.admin, repair)["status"] == "active"
