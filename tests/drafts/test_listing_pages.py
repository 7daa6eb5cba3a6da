"""The review queue's proposals a page at a time, and its summary, on both engines."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.errors import InvalidInput, NotAllowed
from armarius.store import iso_utc
from tests.helpers import OwnerSQL, Team, make_team

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


@pytest.fixture
def clock(app: Armarius) -> Clock:
    ticking = Clock()
    app.drafts.clock = ticking
    return ticking


def propose(app: Armarius, team: Team, clock: Clock, number: int, *, minutes: int) -> int:
    clock.now = START + timedelta(minutes=minutes)
    payload = {"slug": f"notes/item-{number}", "title": f"Item {number}", "text": f"Body of item {number}.\n"}
    return int(app.drafts.propose(team.agent, payload)["proposal"])


def walk(fetch: Callable[..., dict[str, Any]], limit: int, **filters: Any) -> tuple[list[dict[str, Any]], int]:
    """Every item, page after page; and how many pages that took."""
    items: list[dict[str, Any]] = []
    after, pages = None, 0
    while True:
        page = fetch(after=after, limit=limit, **filters)
        pages += 1
        assert len(page["items"]) <= limit
        items += page["items"]
        if page["next"] is None:
            return items, pages
        assert page["next"] == page["items"][-1]["proposal"]
        after = page["next"]


def snapshot(app: Armarius) -> tuple[Any, ...]:
    with OwnerSQL(app.settings) as sql:
        return (sorted(map(repr, sql.rows("SELECT * FROM draft_proposals"))),
                sorted(map(repr, sql.rows("SELECT * FROM approvals"))), sql.count("audit_events"))


def test_pending_proposals_page_oldest_first_without_gaps_or_repeats(app: Armarius, team: Team, clock: Clock) -> None:
    # Filed out of time order: the summary's oldest is the earliest time, not the first id.
    ids = [propose(app, team, clock, number, minutes=minutes)
           for number, minutes in enumerate([30, 10, 50, 5, 40, 20, 60])]
    app.drafts.reject(team.human, ids[2], note="no")
    pending = [ids[n] for n in (0, 1, 3, 4, 5, 6)]

    items, pages = walk(lambda **kw: app.drafts.proposals_page(team.human, **kw), limit=2)
    assert [item["proposal"] for item in items] == pending
    assert pages == 3
    assert all(item["status"] == "pending" and "text" not in item for item in items)
    full = {view["proposal"]: view for view in app.drafts.proposals(team.human, "pending")}
    assert items == [{key: value for key, value in full[item["proposal"]].items() if key != "text"} for item in items]

    newest, _ = walk(lambda **kw: app.drafts.proposals_page(team.human, newest_first=True, **kw), limit=4)
    assert [item["proposal"] for item in newest] == pending[::-1]

    last = app.drafts.proposals_page(team.human, limit=6)
    assert (len(last["items"]), last["next"]) == (6, None)  # exactly one page: no empty page after it

    summary = app.drafts.pending_summary(team.human)
    assert summary == {"count": 6, "oldest_at": iso_utc(START + timedelta(minutes=5))}


def test_each_state_pages_as_the_full_listing_names_it(app: Armarius, team: Team, clock: Clock) -> None:
    ids = [propose(app, team, clock, number, minutes=number) for number in range(6)]
    app.drafts.reject(team.human, ids[0])
    issued = app.drafts.approve(team.human, proposal_id=ids[1])
    app.drafts.create_draft(team.agent, {"slug": "notes/item-1", "title": "Item 1", "text": "Body of item 1.\n"},
                            issued.token, "op-1")
    app.drafts.approve(team.human, proposal_id=ids[2])  # expires below
    clock.now += app.drafts.approval_ttl + timedelta(seconds=1)
    app.drafts.approve(team.human, proposal_id=ids[3])  # live
    for status in ("pending", "approved", "expired", "drafted", "rejected", None):
        items, _ = walk(lambda status=status, **kw: app.drafts.proposals_page(team.human, status=status, **kw),
                        limit=1)
        expected = app.drafts.proposals(team.human, status)
        assert [item["proposal"] for item in items] == [view["proposal"] for view in expected], status
        assert [item["status"] for item in items] == [view["status"] for view in expected], status
    assert [item["proposal"] for item in app.drafts.proposals_page(team.human, status="expired")["items"]] == [ids[2]]
    assert app.drafts.pending_summary(team.human)["count"] == 2


def test_q_filters_by_slug_title_or_proposer(app: Armarius, team: Team, clock: Clock) -> None:
    ids = [propose(app, team, clock, number, minutes=number) for number in range(12)]
    found = app.drafts.proposals_page(team.human, q="ITEM-1")["items"]  # item-1, item-10, item-11
    assert [item["proposal"] for item in found] == [ids[1], ids[10], ids[11]]
    assert len(app.drafts.proposals_page(team.human, q="alpha-AGENT", limit=200)["items"]) == 12
    assert app.drafts.proposals_page(team.human, q="%")["items"] == []  # no pattern syntax
    assert app.drafts.proposals_page(team.human, q="  ")["next"] is None


def test_another_workspace_is_neither_listed_nor_counted(app: Armarius, team: Team, clock: Clock) -> None:
    propose(app, team, clock, 1, minutes=1)
    other = make_team(app, "beta")
    assert app.drafts.proposals_page(other.human) == {"items": [], "next": None}
    assert app.drafts.pending_summary(other.human) == {"count": 0, "oldest_at": None}


def test_refusals_change_nothing(app: Armarius, team: Team, clock: Clock) -> None:
    propose(app, team, clock, 1, minutes=1)
    before = snapshot(app)
    withdrawn = dataclasses.replace(team.human, permissions=frozenset())
    with pytest.raises(NotAllowed):
        app.drafts.proposals_page(withdrawn)
    with pytest.raises(NotAllowed):
        app.drafts.pending_summary(withdrawn)
    for arguments in ({"limit": 0}, {"limit": 201}, {"limit": True}, {"status": "lost"}, {"after": "3"},
                      {"q": "x" * 201}, {"q": "a\x00"}):
        with pytest.raises(InvalidInput):
            app.drafts.proposals_page(team.human, **arguments)
    assert snapshot(app) == before
