"""The review queue (/) and its JSON twin (/api/queue): counts, ages, filters, paging, escaping."""

from __future__ import annotations

import re

from armarius.app import Armarius
from armarius.auth.permissions import Role
from armarius.memory.service import RememberRequest
from armarius.web.pages.gate import PAGE_SIZE
from tests.helpers import OPERATOR, make_team
from tests.web.people import Visitors


def rows(page_text: str) -> list[str]:
    body = page_text.split("<tbody>", 1)[1].split("</tbody>", 1)[0] if "<tbody>" in page_text else ""
    return re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)


def test_the_queue_pages_its_items_and_never_renders_everything(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    total = PAGE_SIZE + 7
    for number in range(total):
        app.drafts.propose(team.agent, {"slug": f"notes/n{number:03d}", "title": f"Note {number}", "text": "x"})
    person = visitors.log_in_team(team)
    first = person.http.get("/")
    twin_first = person.http.get("/api/queue", params={"kind": "drafts"}).json()
    cursor = twin_first["next"]
    second = person.http.get("/", params={"kind": "drafts", "after": cursor})
    twin = person.http.get("/api/queue", params={"kind": "drafts", "after": cursor}).json()
    assert len(rows(first.text)) == PAGE_SIZE
    assert len(rows(second.text)) == 7
    assert "notes/n000" in first.text, "oldest first"
    assert "notes/n056" in second.text
    assert "notes/n000" not in second.text
    assert f'data-kind="drafts">{total}<' in first.text
    assert f"{total} items" in first.text
    assert f'href="/?after={cursor}"' in first.text
    assert "First page" in second.text
    assert "Next page" not in second.text
    assert (twin["after"], twin["next"], len(twin["items"])) == (cursor, None, 7)
    assert [item["label"] for item in twin_first["items"] + twin["items"]] == [
        f"notes/n{number:03d}" for number in range(total)], "every item once, in order, across the pages"
    assert twin["items"][0]["url"].startswith("/drafts/proposals/")
    drafts = next(section for section in twin["sections"] if section["kind"] == "drafts")
    assert drafts["count"] == total
    assert drafts["oldest_seconds"] >= 0


def test_the_filter_and_the_kinds(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    for slug, title in (("notes/alpha", "Apples"), ("notes/beta", "Bananas"), ("notes/gamma", "Apple pie")):
        app.drafts.propose(team.agent, {"slug": slug, "title": title, "text": "x"})
    person = visitors.log_in_team(team)
    filtered = person.http.get("/", params={"q": "APPLE"})
    needs_review = person.http.get("/", params={"kind": "needs_review"})
    assert len(rows(filtered.text)) == 2
    assert "Items matching the filter" in filtered.text
    assert "Nothing waits here." in needs_review.text


def test_malformed_parameters_are_refused(app: Armarius, visitors: Visitors) -> None:
    person = visitors.log_in_team(make_team(app))
    bad_kind, bad_page = person.http.get("/?kind=everything"), person.http.get("/?after=two")
    api_kind, api_page = person.http.get("/api/queue?kind=x"), person.http.get("/api/queue?after=0")
    assert bad_kind.status_code == bad_page.status_code == 400
    assert "kind is one of drafts, repairs, needs_review, sessions." in bad_kind.text
    assert api_kind.status_code == api_page.status_code == 400
    assert api_kind.json()["error"]["details"] == {"field": "kind"}
    assert api_page.json()["error"]["details"] == {"field": "after"}


def test_hostile_content_is_escaped_and_revealed(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    app.drafts.propose(team.agent, {"slug": "notes/x", "title": "<b onmouseover=alert(1)>bold</b>\u2066rtl\u2069",
                                    "text": "x"})
    page = visitors.log_in_team(team).http.get("/").text
    assert "<b onmouseover" not in page
    assert "&lt;b onmouseover=alert(1)&gt;bold&lt;/b&gt;" in page
    assert '<mark class="reveal">⟦U+2066 LEFT-TO-RIGHT ISOLATE⟧</mark>rtl' in page
    assert "\u2066" not in page


def test_a_typed_marker_is_not_dressed_as_a_revealed_one(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    app.drafts.propose(team.agent, {"slug": "notes/y", "title": "clean ⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧", "text": "x"})
    page = visitors.log_in_team(team).http.get("/").text
    assert "clean ⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧" in page
    assert '<mark class="reveal">' not in page


def test_what_a_role_may_not_list_is_said_so(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app, human_role=Role.READER)
    person = visitors.log_in_team(team)
    twin = person.http.get("/api/queue").json()
    available = {section["kind"]: section["available"] for section in twin["sections"]}
    assert available == {"drafts": True, "repairs": False, "needs_review": True, "sessions": True}
    assert "Your role (reader) may not list these" in person.http.get("/?kind=repairs").text
    app.directory.set_role("alpha-human", workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    assert all(section["available"] for section in person.http.get("/api/queue").json()["sections"])


def test_entries_that_need_review_are_listed_with_their_overrides(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    app.memory.remember(team.human, RememberRequest(slug="ops/staging", title="Staging", body="Host alpha-7."))
    app.memory.curate(team.human, "ops/staging", 1)
    app.memory.remember(team.agent, RememberRequest(slug="ops/staging", title="Staging", body="Host beta-2.",
                                                    override_curated=True, reason="I saw it on beta-2"))
    person = visitors.log_in_team(team)
    page = person.http.get("/?kind=needs_review")
    twin = person.http.get("/api/queue?kind=needs_review").json()
    assert 'data-kind="needs_review">1<' in page.text
    assert 'href="/needs-review/ops/staging"' in page.text
    assert "1 override since curated revision 1" in page.text
    assert twin["items"][0]["by"] == "agent:alpha-agent"
    assert twin["items"][0]["since"] is not None
