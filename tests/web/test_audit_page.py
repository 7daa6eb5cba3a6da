"""The audit log page (/audit) and its twin (/api/audit): administrators only, filters, paging, the chain's status,
escaping; over real HTTP on both engines."""

from __future__ import annotations

import re

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth.permissions import Role
from armarius.config import Settings
from armarius.web.pages.gate import PAGE_SIZE
from tests.helpers import OPERATOR, OwnerSQL, make_team
from tests.web.conftest import BrowserSession
from tests.web.people import Visitors


def rows(page_text: str) -> list[str]:
    body = page_text.split("<tbody>", 1)[1].split("</tbody>", 1)[0] if "<tbody>" in page_text else ""
    return re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)


def append(app: Armarius, workspace_id: int, count: int, *, action: str = "memory.created",
           actor: str = "agent:alpha-agent", subject: str = "notes/a") -> None:
    for index in range(count):
        with app.database.transaction(workspace_id=workspace_id, write=True) as tx:
            audit.append(tx, actor=actor, action=action, subject=subject, details={"index": index})


def test_an_administrator_reads_the_log_filters_and_pages_it(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app, human_role=Role.ADMIN)
    workspace = team.human.workspace_id
    append(app, workspace, PAGE_SIZE + 5)
    append(app, workspace, 3, action="approval.issued", actor="human:alpha-human", subject="notes/b")
    person = visitors.log_in_team(team)
    page = person.http.get("/audit")
    total = len(audit.tail(app.database, workspace, limit=10_000))
    next_link = re.search(r'href="(/audit\?before=\d+)" rel="next"', page.text)
    assert next_link, page.text
    second = person.http.get(next_link.group(1))
    by_action = person.http.get("/audit", params={"action": "approval."})
    by_actor = person.http.get("/api/audit", params={"actor": "human:alpha-human", "subject": "notes/b"}).json()
    assert "The chain verifies." in page.text
    assert f"{total} events checked" in page.text
    assert len(rows(page.text)) == PAGE_SIZE
    assert len(rows(second.text)) == total - PAGE_SIZE
    assert len(rows(by_action.text)) == 3
    assert '<a href="/audit?action=approval.&amp;actor=human%3Aalpha-human"' in by_action.text
    assert [item["action"] for item in by_actor["items"]] == ["approval.issued"] * 3
    assert by_actor["chain"] == {"intact": True, "events_checked": total, "legacy_events": 0, "problems": []}
    assert [item["seq"] for item in by_actor["items"]] == sorted((item["seq"] for item in by_actor["items"]),
                                                                reverse=True), "newest first"


def test_only_an_administrator_reads_the_log(app: Armarius, visitors: Visitors) -> None:
    person = visitors.log_in_team(make_team(app))
    page, twin = person.http.get("/audit"), person.http.get("/api/audit")
    assert page.status_code == 403
    assert "principals.manage" in page.text
    assert (twin.status_code, twin.json()["error"]["code"]) == (403, "not_allowed")
    with visitors.client(headers={"Authorization": f"Bearer {make_team(app, 'beta').agent_token}"}) as agent:
        assert agent.get("/api/audit").status_code == 403
        assert agent.get("/audit").status_code == 403


def test_a_broken_chain_is_shown_as_failed(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app, human_role=Role.ADMIN)
    append(app, team.human.workspace_id, 3)
    person = visitors.log_in_team(team)
    with OwnerSQL(settings) as sql:
        sql.execute("UPDATE audit_events SET details = ? WHERE workspace_id = ? AND seq = ?",
                    ('{"index":99}', team.human.workspace_id, 2))
    page = person.http.get("/audit")
    twin = person.http.get("/api/audit").json()
    assert "The chain FAILED verification." in page.text
    assert 'role="alert"' in page.text
    assert "Event 2 (broken_link)" in page.text
    assert twin["chain"]["intact"] is False
    assert [problem["seq"] for problem in twin["chain"]["problems"]] == [2]


def test_hostile_events_render_escaped_and_revealed(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app, human_role=Role.ADMIN)
    with app.database.transaction(workspace_id=team.human.workspace_id, write=True) as tx:
        audit.append(tx, actor="agent:alpha-agent", action="memory.curated_override", subject="<b>x</b>\u202e",
                     details={"reason": "<script>alert(1)</script>\u200b"})
    page = visitors.log_in_team(team).http.get("/audit", params={"action": "memory."}).text
    assert "<script>" not in page
    assert "<b>x</b>" not in page
    assert '&lt;b&gt;x&lt;/b&gt;<mark class="reveal">⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧</mark>' in page
    assert '&lt;script&gt;alert(1)&lt;/script&gt;<mark class="reveal">⟦U+200B ZERO WIDTH SPACE⟧</mark>' in page
    assert "\u202e" not in page
    assert "\u200b" not in page


def test_malformed_filters_are_refused(app: Armarius, visitors: Visitors) -> None:
    person = visitors.log_in_team(make_team(app, human_role=Role.ADMIN))
    assert person.http.get("/audit", params={"before": "x"}).status_code == 400
    refused = person.http.get("/api/audit", params={"actor": "a" * 301})
    assert (refused.status_code, refused.json()["error"]["details"]) == (400, {"field": "actor"})


@pytest.mark.browser
def test_an_administrator_filters_the_log_in_the_browser(browser_page: BrowserSession, app: Armarius) -> None:
    page, team = browser_page.page, browser_page.team
    page.goto("/audit")
    assert page.get_by_role("heading", level=1).inner_text() == "Not allowed"
    app.directory.set_role("alpha-human", workspace="alpha", role=Role.ADMIN, by=OPERATOR)
    append(app, team.human.workspace_id, 2, action="approval.issued", subject="notes/b")
    page.goto("/audit")
    assert "The chain verifies." in page.get_by_role("status").inner_text()
    page.get_by_label("Action starts with").fill("approval.")
    page.keyboard.press("Enter")
    page.wait_for_url("**/audit?action=approval.*")
    assert page.locator("table.audit-list tbody tr").count() == 2
    page.set_viewport_size({"width": 375, "height": 740})
    assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
