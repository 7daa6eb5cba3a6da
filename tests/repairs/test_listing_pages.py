"""Repair proposals a page at a time, and their summary, on both engines: the same repairs for the same caller as
``list_repairs``."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.errors import InvalidInput, NotAllowed
from armarius.repairs import service as repair_service
from armarius.store import iso_utc
from tests.helpers import OPERATOR
from tests.repairs.conftest import Desk, state

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def at(desk: Desk, minutes: int) -> None:
    desk.app.repairs.clock = lambda: START + timedelta(minutes=minutes)


def walk(desk: Desk, actor: Actor, limit: int, **filters: Any) -> tuple[list[dict[str, Any]], int]:
    items: list[dict[str, Any]] = []
    after, pages = None, 0
    while True:
        page = desk.app.repairs.repairs_page(actor, after=after, limit=limit, **filters)
        pages, items = pages + 1, items + page["items"]
        if page["next"] is None:
            return items, pages
        assert page["next"] == page["items"][-1]["repair"]
        after = page["next"]


@pytest.fixture
def proposals(desk: Desk) -> dict[str, list[int]]:
    """Repairs of the agent (five, one rejected) and of the human editor (two), filed out of time order."""
    made: dict[str, list[int]] = {"agent": [], "human": []}
    for minutes, who in ((30, "agent"), (10, "agent"), (50, "human"), (5, "agent"), (40, "agent"), (20, "human"),
                         (60, "agent")):
        at(desk, minutes)
        actor = desk.agent if who == "agent" else desk.human
        session = desk.open_session(f"Question {minutes}", owner=actor)
        made[who].append(int(desk.prepare(session, actor=actor)["repair"]))
    desk.app.repairs.reject(desk.human, made["agent"][0], "not this one")
    return made


def test_a_session_manager_pages_every_proposed_repair_oldest_first(desk: Desk, proposals: dict[str, list[int]]
                                                                    ) -> None:
    proposed = sorted(set(proposals["agent"] + proposals["human"]) - {proposals["agent"][0]})
    items, pages = walk(desk, desk.admin, 2, status="proposed")
    assert [item["repair"] for item in items] == proposed
    assert pages == 3
    listed = {view["repair"]: view for view in desk.app.repairs.list_repairs(desk.admin, status="proposed")}
    assert items == [listed[item["repair"]] for item in items]

    newest, _ = walk(desk, desk.admin, 4, status="proposed", newest_first=True)
    assert newest == list(listed.values())  # list_repairs is newest first
    everything, _ = walk(desk, desk.human, 3)  # a human editor manages sessions: every repair, any status
    assert [item["repair"] for item in everything] == sorted(proposals["agent"] + proposals["human"])

    assert desk.app.repairs.proposed_summary(desk.admin) == {"count": 6,
                                                             "oldest_at": iso_utc(START + timedelta(minutes=5))}


def test_an_agent_pages_and_counts_only_its_own(desk: Desk, proposals: dict[str, list[int]]) -> None:
    own = [repair for repair in proposals["agent"] if repair != proposals["agent"][0]]
    items, _ = walk(desk, desk.agent, 1, status="proposed")
    assert [item["repair"] for item in items] == own
    assert desk.app.repairs.proposed_summary(desk.agent) == {"count": 4,
                                                             "oldest_at": iso_utc(START + timedelta(minutes=5))}
    rejected = desk.app.repairs.repairs_page(desk.agent, status="rejected")
    assert [item["repair"] for item in rejected["items"]] == [proposals["agent"][0]]
    assert rejected["items"][0]["comment"] == "not this one"


def test_filters_by_session_and_text(desk: Desk, proposals: dict[str, list[int]]) -> None:
    first = desk.app.repairs.show(desk.admin, proposals["human"][0])["session"]
    assert [item["repair"] for item in desk.app.repairs.repairs_page(desk.admin, session=first)["items"]] == [
        proposals["human"][0]]
    by_human = desk.app.repairs.repairs_page(desk.admin, q="HUMAN:alpha-human")["items"]
    assert [item["repair"] for item in by_human] == proposals["human"]
    assert len(desk.app.repairs.repairs_page(desk.admin, q="another host")["items"]) == 7  # in every conflict
    assert desk.app.repairs.repairs_page(desk.admin, q="%")["items"] == []


def test_no_repairs(desk: Desk) -> None:
    assert desk.app.repairs.repairs_page(desk.admin, status="proposed") == {"items": [], "next": None}
    assert desk.app.repairs.proposed_summary(desk.admin) == {"count": 0, "oldest_at": None}


def test_refusals_change_nothing(desk: Desk, proposals: dict[str, list[int]]) -> None:
    directory = desk.app.directory
    directory.add_principal("alpha-reader", Kind.AGENT, workspace="alpha", role=Role.READER, by=OPERATOR)
    reader = directory.authenticate_token(directory.issue_token("alpha-reader", workspace="alpha", by=OPERATOR).token)
    withdrawn = dataclasses.replace(desk.admin, permissions=frozenset())
    before = state(desk)
    for actor in (reader, withdrawn):
        with pytest.raises(NotAllowed):
            desk.app.repairs.repairs_page(actor, status="proposed")
        with pytest.raises(NotAllowed):
            desk.app.repairs.proposed_summary(actor)
    for arguments in ({"limit": 0}, {"limit": 201}, {"status": "waiting"}, {"after": "1"}, {"session": 1.5},
                      {"q": "a\x00b"}):
        with pytest.raises(InvalidInput):
            desk.app.repairs.repairs_page(desk.admin, **arguments)
    assert state(desk) == before


@pytest.mark.parametrize("page", [2, 7])  # the last page short, and the last page full
def test_list_repairs_leaves_none_out_past_a_page(desk: Desk, proposals: dict[str, list[int]], page: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repair_service, "LIST_LIMIT", page)
    listed = [view["repair"] for view in desk.app.repairs.list_repairs(desk.human)]
    assert listed == sorted(proposals["agent"] + proposals["human"], reverse=True)
    assert len(listed) == 7
