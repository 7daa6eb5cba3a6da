"""A workspace's audit log a page at a time, newest first, with filters, and its chain's status, on both engines.

Who may read it is the caller's rule (the listing is core and knows no principals); see armarius.audit.listing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.audit.listing import chain_status, events_page
from armarius.errors import InvalidInput
from tests.audit.tamper import append_forged, forged_event
from tests.helpers import OwnerSQL

ACTIONS = ("memory.created", "memory.updated", "memory.curated", "memory.curated_override", "draft.proposed",
           "approval.issued", "memoryless.event")


@pytest.fixture
def chains(app: Armarius) -> tuple[int, int]:
    """Workspace alpha: 21 events by two actors about three subjects; beta: 2 events."""
    alpha = app.directory.create_workspace("alpha", by="operator:test").id
    beta = app.directory.create_workspace("beta", by="operator:test").id
    for index in range(21):
        with app.database.transaction(workspace_id=alpha, write=True) as tx:
            audit.append(tx, actor="human:ada" if index % 3 == 0 else "agent:bot", action=ACTIONS[index % 7],
                         subject=f"notes/s{index % 3}", details={"index": index})
    for index in range(2):
        with app.database.transaction(workspace_id=beta, write=True) as tx:
            audit.append(tx, actor="human:ada", action="memory.created", subject="notes/s0", details={"index": index})
    return alpha, beta


def walk(app: Armarius, workspace: int, limit: int, **filters: Any) -> tuple[list[dict[str, Any]], int]:
    items: list[dict[str, Any]] = []
    before, pages = None, 0
    while True:
        page = events_page(app.database, workspace, before=before, limit=limit, **filters)
        pages, items = pages + 1, items + page["items"]
        assert len(page["items"]) <= limit
        if page["next"] is None:
            return items, pages
        assert page["next"] == page["items"][-1]["seq"]
        before = page["next"]


def test_events_page_newest_first_without_gaps_or_repeats(app: Armarius, chains: tuple[int, int]) -> None:
    alpha, beta = chains
    items, pages = walk(app, alpha, 5)
    assert pages == 5
    assert [item["seq"] for item in items] == list(range(21, 0, -1))
    assert items == [event.to_dict() for event in reversed(audit.tail(app.database, alpha, 100))]
    assert {item["workspace_id"] for item in items} == {alpha}
    exact = events_page(app.database, alpha, limit=21)
    assert (len(exact["items"]), exact["next"]) == (21, None)
    assert [item["seq"] for item in events_page(app.database, alpha, before=4)["items"]] == [3, 2, 1]
    assert [item["details"]["index"] for item in walk(app, beta, 1)[0]] == [1, 0]


def test_filters_by_action_prefix_actor_and_subject(app: Armarius, chains: tuple[int, int]) -> None:
    alpha, _ = chains
    everything = walk(app, alpha, 200)[0]

    def expected(keep: Callable[[dict[str, Any]], bool]) -> list[int]:
        return [item["seq"] for item in everything if keep(item)]

    cases: list[tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
        ({"action": "memory."}, lambda e: e["action"].startswith("memory.")),
        ({"action": "memory.curated"}, lambda e: e["action"] in ("memory.curated", "memory.curated_override")),
        ({"action": "MEMORY."}, lambda _: False),  # an action prefix is case-sensitive
        ({"action": "%"}, lambda _: False),  # and no pattern
        ({"actor": "human:ada"}, lambda e: e["actor"] == "human:ada"),
        ({"subject": "notes/s1"}, lambda e: e["subject"] == "notes/s1"),
        ({"action": "memory.", "actor": "agent:bot", "subject": "notes/s2"},
         lambda e: e["action"].startswith("memory.") and e["actor"] == "agent:bot" and e["subject"] == "notes/s2"),
        ({"action": "", "actor": None}, lambda _: True),
    ]
    for filters, keep in cases:
        items, _ = walk(app, alpha, 2, **filters)
        assert [item["seq"] for item in items] == expected(keep), filters
    assert expected(lambda e: e["action"].startswith("memory.")) != []


def test_chain_status_reports_an_intact_chain_and_a_forged_event(app: Armarius, chains: tuple[int, int]) -> None:
    alpha, beta = chains
    assert chain_status(app.database, alpha) == {"intact": True, "events_checked": 21, "legacy_events": 0,
                                                 "problems": []}
    with OwnerSQL(app.settings) as owner:
        owner.execute("UPDATE audit_events SET details = ? WHERE workspace_id = ? AND seq = ?",
                      ('{"index":99}', alpha, 7))
    broken = chain_status(app.database, alpha)
    assert broken["intact"] is False
    assert [(problem["seq"], problem["kind"]) for problem in broken["problems"]] == [(7, audit.BROKEN_LINK)]
    assert "edited" in broken["problems"][0]["problem"]
    assert chain_status(app.database, beta)["intact"] is True  # each workspace its own chain
    with OwnerSQL(app.settings) as owner:
        append_forged(owner, beta, forged_event())
    forged = chain_status(app.database, beta)
    assert (forged["intact"], [problem["kind"] for problem in forged["problems"]]) == (False, [audit.BAD_MAC])


def test_an_empty_chain(app: Armarius) -> None:
    empty = app.directory.create_workspace("gamma", by="operator:test").id
    assert events_page(app.database, empty) == {"items": [], "next": None}
    assert chain_status(app.database, empty)["intact"] is True


def test_bad_arguments_are_refused(app: Armarius, chains: tuple[int, int]) -> None:
    alpha, _ = chains
    for arguments in ({"limit": 0}, {"limit": 201}, {"limit": False}, {"before": "9"}, {"action": 3},
                      {"actor": "a" * 301}, {"subject": "x\x00"}):
        with pytest.raises(InvalidInput):
            events_page(app.database, alpha, **arguments)
    with pytest.raises(ValueError, match="a workspace's chain"):
        events_page(app.database, audit.SYSTEM_CHAIN)
