"""Sessions a page at a time (blocked ones for the review queue), and the blocked summary, on both engines: the
same sessions for the same caller as ``list_sessions``."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.errors import InvalidInput, NotAllowed
from armarius.sessions import service as session_service
from armarius.store import iso_utc
from tests.helpers import OPERATOR, OwnerSQL, agent_of
from tests.sessions.conftest import Lab

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
INVALID = {"kind": "source.files"}


def at(lab: Lab, minutes: int) -> None:
    lab.clock.now = START + timedelta(minutes=minutes)


def block(lab: Lab, actor: Actor, session: int, minutes: int) -> None:
    at(lab, minutes)
    with pytest.raises(InvalidInput):
        lab.app.sessions.query(actor, session, INVALID)
    assert lab.app.sessions.show(actor, session)["status"] == "blocked"


def walk(lab: Lab, actor: Actor, limit: int, **filters: Any) -> tuple[list[dict[str, Any]], int]:
    items: list[dict[str, Any]] = []
    after, pages = None, 0
    while True:
        page = lab.app.sessions.sessions_page(actor, after=after, limit=limit, **filters)
        pages, items = pages + 1, items + page["items"]
        if page["next"] is None:
            return items, pages
        assert page["next"] == page["items"][-1]["session"]
        after = page["next"]


def snapshot(lab: Lab) -> tuple[Any, ...]:
    with OwnerSQL(lab.app.settings) as sql:
        return (sorted(map(repr, sql.rows("SELECT * FROM sessions"))), sql.count("session_checkpoints"),
                sql.count("audit_events"))


@pytest.fixture
def sessions(lab: Lab) -> dict[str, Any]:
    """Sessions of two agents and a human editor; six blocked, out of time order; one of them blocked twice."""
    lab.app.sessions.limits = dataclasses.replace(lab.app.sessions.limits, invalid_request_limit=1)
    directory = lab.app.directory
    directory.add_principal("alpha-agent-2", Kind.AGENT, workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    other = directory.authenticate_token(directory.issue_token("alpha-agent-2", workspace="alpha", by=OPERATOR).token)
    owners = {"agent": lab.team.agent, "other": other, "human": lab.team.human}
    made: dict[str, Any] = {"owners": owners, "blocked": {}, "open": []}
    plan = [("agent", 30), ("other", 10), ("agent", None), ("human", 50), ("agent", 5), ("other", None),
            ("agent", 40), ("other", 20)]
    for number, (who, minutes) in enumerate(plan):
        at(lab, number)
        session = int(lab.app.sessions.open(owners[who], f"Question {number} of {who}")["session"])
        if minutes is None:
            made["open"].append(session)
        else:
            block(lab, owners[who], session, minutes)
            made["blocked"][session] = (who, iso_utc(START + timedelta(minutes=minutes)))
    # The one blocked first: blocked, resumed and blocked again; it has waited since the second block.
    again = next(session for session, (_, when) in made["blocked"].items() if when == iso_utc(START + timedelta(
        minutes=5)))
    at(lab, 70)
    lab.app.sessions.resume(lab.team.human, again)
    block(lab, lab.team.agent, again, 80)
    made["blocked"][again] = ("agent", iso_utc(START + timedelta(minutes=80)))
    return made


def test_a_session_manager_pages_every_blocked_session_oldest_first(lab: Lab, sessions: dict[str, Any]) -> None:
    manager = lab.team.human
    blocked = sessions["blocked"]
    items, pages = walk(lab, manager, 4, status="blocked", everyone=True)
    assert [item["session"] for item in items] == sorted(blocked)
    assert pages == 2
    assert all(item["status"] == "blocked" and item["reason"] == "invalid_requests" for item in items)
    assert {item["session"]: item["blocked_at"] for item in items} == {s: when for s, (_, when) in blocked.items()}
    listed = {view["session"]: view for view in lab.app.sessions.list_sessions(manager, status="blocked",
                                                                               everyone=True)}
    assert [{k: v for k, v in item.items() if k != "blocked_at"} for item in items] == [
        listed[item["session"]] for item in items]

    newest, _ = walk(lab, manager, 1, status="blocked", everyone=True, newest_first=True)
    assert [item["session"] for item in newest] == sorted(blocked, reverse=True)
    everything, _ = walk(lab, manager, 3, everyone=True)
    assert [item["session"] for item in everything] == sorted([*blocked, *sessions["open"]])
    assert all("blocked_at" not in item for item in everything if item["status"] == "open")

    assert lab.app.sessions.blocked_summary(manager, everyone=True) == {
        "count": 6, "oldest_at": iso_utc(START + timedelta(minutes=10))}
    assert lab.app.sessions.blocked_summary(manager) == {"count": 1,
                                                         "oldest_at": iso_utc(START + timedelta(minutes=50))}


def test_an_agent_pages_and_counts_only_its_own(lab: Lab, sessions: dict[str, Any]) -> None:
    agent = lab.team.agent
    own = sorted(s for s, (who, _) in sessions["blocked"].items() if who == "agent")
    items, _ = walk(lab, agent, 1, status="blocked", everyone=True)  # everyone is for session managers only
    assert [item["session"] for item in items] == own
    assert lab.app.sessions.blocked_summary(agent, everyone=True) == {
        "count": 3, "oldest_at": iso_utc(START + timedelta(minutes=30))}
    assert lab.app.sessions.blocked_summary(sessions["owners"]["other"]) == {
        "count": 2, "oldest_at": iso_utc(START + timedelta(minutes=10))}


def test_q_filters_by_subject_or_owner(lab: Lab, sessions: dict[str, Any]) -> None:
    manager = lab.team.human
    by_other = lab.app.sessions.sessions_page(manager, everyone=True, q="AGENT:alpha-agent-2")["items"]
    assert {item["owner"] for item in by_other} == {"agent:alpha-agent-2"}
    assert len(by_other) == 3
    found = lab.app.sessions.sessions_page(manager, everyone=True, status="blocked", q="question 3 of")["items"]
    assert [item["subject"] for item in found] == ["Question 3 of human"]
    assert lab.app.sessions.sessions_page(manager, everyone=True, q="_")["items"] == []


def test_no_blocked_session(lab: Lab) -> None:
    assert lab.app.sessions.sessions_page(lab.team.human, status="blocked", everyone=True) == {"items": [],
                                                                                              "next": None}
    assert lab.app.sessions.blocked_summary(lab.team.human, everyone=True) == {"count": 0, "oldest_at": None}


def test_refusals_change_nothing(lab: Lab, sessions: dict[str, Any]) -> None:
    withdrawn = dataclasses.replace(lab.team.human, permissions=frozenset())
    before = snapshot(lab)
    with pytest.raises(NotAllowed):
        lab.app.sessions.sessions_page(withdrawn, status="blocked", everyone=True)
    with pytest.raises(NotAllowed):
        lab.app.sessions.blocked_summary(withdrawn, everyone=True)
    for arguments in ({"limit": 0}, {"limit": 201}, {"status": "stuck"}, {"after": "2"}, {"q": "y" * 201}):
        with pytest.raises(InvalidInput):
            lab.app.sessions.sessions_page(lab.team.human, **arguments)
    assert snapshot(lab) == before


@pytest.mark.anyio
async def test_the_sessions_tool_pages_an_agents_sessions_newest_first(lab: Lab, sessions: dict[str, Any]) -> None:
    """The agent's tool leaves none out: every page says where the next begins (null after the last)."""
    mine = [view["session"] for view in lab.app.sessions.list_sessions(lab.team.agent)]
    assert len(mine) == 4
    assert mine == sorted(mine, reverse=True)
    before = snapshot(lab)
    async with agent_of(lab.app, lab.team.agent) as call:
        everything = await call("sessions")
        assert [item["session"] for item in everything["sessions"]] == mine
        assert everything["next_after"] is None
        seen, after = [], None
        while True:
            page = await call("sessions", limit=3, **({} if after is None else {"after": after}))
            seen += [item["session"] for item in page["sessions"]]
            if (after := page["next_after"]) is None:
                break
            assert after == seen[-1]
        assert seen == mine
        blocked = await call("sessions", status="blocked", limit=1)
        assert [item["session"] for item in blocked["sessions"]] == [max(
            s for s, (who, _) in sessions["blocked"].items() if who == "agent")]
        for refused in ({"limit": 0}, {"limit": 201}, {"after": 0}, {"after": "2"}):
            assert (await call("sessions", **refused))["error"] == "invalid_input", refused
    assert snapshot(lab) == before


@pytest.mark.parametrize("page", [3, 4])  # the last page short, and the last page full
def test_list_sessions_leaves_none_out_past_a_page(lab: Lab, sessions: dict[str, Any], page: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_service, "LIST_LIMIT", page)
    listed = [view["session"] for view in lab.app.sessions.list_sessions(lab.team.human, everyone=True)]
    assert listed == sorted([*sessions["blocked"], *sessions["open"]], reverse=True)
    assert len(listed) == 8
