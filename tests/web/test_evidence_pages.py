"""The evidence unit pages (/evidence, a unit, new, edit) and their JSON twins, over real HTTP and in a real
Chromium: list, show (revisions, provenance, lineage, the file's state), create, edit with the revision shown,
review, activate and restore; and every refusal changing nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.auth.permissions import Kind, Role
from tests.helpers import OPERATOR, OwnerSQL, Team, make_team
from tests.web.conftest import log_in_with_the_form
from tests.web.people import Person, Visitors

ADMIN = ("alpha-admin", "admin correct horse battery")
READER = ("alpha-reader", "reader correct horse battery")
UNIT = "incident/dns-outage"
BODY = "\nThe resolver cache expired while the primary was down.\n  Indented line.\n"
TABLES = ("evidence_units", "evidence_revisions", "evidence_search")


@pytest.fixture
def team(app: Armarius) -> Team:
    team = make_team(app)
    for (name, password), role in ((ADMIN, Role.ADMIN), (READER, Role.READER)):
        app.directory.add_principal(name, Kind.HUMAN, workspace="alpha", role=role, by=OPERATOR, password=password)
    return team


def snapshot(app: Armarius) -> dict[str, Any]:
    """The units' rows, the audit log's length and the units' files: what a refusal must leave as it was."""
    with OwnerSQL(app.settings) as sql:
        found: dict[str, Any] = {table: sorted(map(repr, sql.rows(f"SELECT * FROM {table}"))) for table in TABLES}
        found["audit_events"] = sql.count("audit_events")
    folder = app.evidence.evidence_dir / "alpha" / "units"
    found["files"] = {str(path): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}
    return found


def form(person: Person, **fields: str) -> dict[str, str]:
    return {"csrf": person.csrf(), **fields}


def flash_of(page: str) -> str:
    found = re.search(r'<p class="flash flash-\w+">(.*?)</p>', page, re.DOTALL)
    assert found, page
    return found.group(1)


# Reading -----------------------------------------------------------------------------------------


def test_a_unit_page_shows_its_revision_revisions_lineage_and_file(app: Armarius, team: Team,
                                                                   visitors: Visitors) -> None:
    app.evidence.create(team.human, UNIT, "The DNS <b>outage</b>", "Body \u202eevil\u200b <script>x()</script>\n",
                        reason="first draft")
    app.evidence.edit(team.human, UNIT, 1, body=BODY, reason="clearer")
    person = visitors.log_in_team(team)
    page = person.http.get(f"/evidence/units/{UNIT}").text
    older = person.http.get(f"/evidence/units/{UNIT}", params={"revision": 1}).text
    twin = person.http.get("/api/evidence/unit", params={"name": UNIT}).json()
    assert twin == app.evidence.show(team.human, UNIT)
    assert "<h1>Evidence unit <span class=\"unit-name\">incident/dns-outage</span></h1>" in page
    assert "latest revision 2, reviewed \u2013, active \u2013" in page
    assert "The file holds revision 2" in page
    assert "Written by hand: no captures." in page
    assert f'<pre class="revealed unit-body">\n{BODY}</pre>' in page, "a leading line break survives the parser"
    assert [int(n) for n in re.findall(r"<tr><td>(\d+)</td><td>(?:created|edited)</td>", page)] == [1, 2]
    assert f'<a href="/evidence/units/{UNIT}?revision=1">1</a>' in page
    assert "2 (shown)" in page
    assert "Review revision 2" in page
    assert "Edit: write revision 3" in page
    # An older revision: escaped and revealed, and no decision on it.
    assert "<script>" not in older
    assert "<b>outage" not in older
    assert "\u202e" not in older
    assert ('Body <mark class="reveal">⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧</mark>evil<mark class="reveal">⟦U+200B ZERO '
            'WIDTH SPACE⟧</mark> &lt;script&gt;x()&lt;/script&gt;') in older
    assert "The DNS &lt;b&gt;outage&lt;/b&gt;" in older
    assert "You are reading revision 1, not the latest" in older
    assert "Review revision" not in older
    assert person.http.get("/evidence/units/incident/none").status_code == 404
    assert person.http.get("/evidence/units/Not_A_Name").status_code == 400


def test_the_list_pages_by_name_and_filters_by_status(app: Armarius, team: Team, visitors: Visitors,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from armarius.web.pages import evidence as pages

    monkeypatch.setattr(pages, "PAGE_SIZE", 2)
    for name in ("b/two", "a/one", "c/three"):
        app.evidence.create(team.human, name, f"Unit {name}", "body\n")
    app.evidence.review(team.human, "c/three", 1)
    person = visitors.log_in_team(team)
    first = person.http.get("/evidence").text
    assert re.findall(r'<td><a href="/evidence/units/([a-z/]+)">', first) == ["a/one", "b/two"]
    following = re.search(r'<a href="(/evidence\?after=[^"]+)" rel="next">', first)
    assert following
    assert re.findall(r'<td><a href="/evidence/units/([a-z/]+)">', person.http.get(
        following.group(1).replace("&amp;", "&")).text) == ["c/three"]
    reviewed = person.http.get("/api/evidence", params={"status": "reviewed"}).json()
    assert [unit["unit"] for unit in reviewed["units"]] == ["c/three"]
    assert person.http.get("/evidence", params={"status": "lost"}).status_code == 400


# Changing over HTTP ------------------------------------------------------------------------------


def test_create_edit_and_review_with_the_forms(app: Armarius, team: Team, visitors: Visitors) -> None:
    person = visitors.log_in_team(team)
    bad = person.http.post("/evidence/new", data=form(person, unit="Bad Name", title="T", body="b"))
    assert bad.status_code == 400
    created = person.http.post("/evidence/new", data=form(person, unit=UNIT, title="DNS outage",
                                                           body="Line one\r\nLine two\r\n"), follow_redirects=True)
    assert created.url.path == f"/evidence/units/{UNIT}"
    assert "was written as revision 1 (edited)" in flash_of(created.text)
    assert app.evidence.current(team.human, UNIT).body == "Line one\nLine two\n", "a browser's CRLF made LF again"
    before = snapshot(app)
    stale = person.http.post(f"/evidence/edit/{UNIT}", data=form(person, expected_revision="2", title="DNS outage",
                                                                 body="new"))
    assert stale.status_code == 409
    assert "is at revision 1, not 2" in stale.text
    assert snapshot(app) == before
    edited = person.http.post(f"/evidence/edit/{UNIT}", data=form(person, expected_revision="1", title="DNS outage",
                                                                  body="Line one\r\nLine 2\r\n", reason="typo"),
                              follow_redirects=True)
    assert "revision 2 is written (edited)" in flash_of(edited.text)
    unchanged = person.http.post(f"/evidence/edit/{UNIT}", data=form(person, expected_revision="2",
                                                                     title="DNS outage", body="Line one\nLine 2\n"),
                                 follow_redirects=True)
    assert "is unchanged at revision 2" in flash_of(unchanged.text)
    reviewed = person.http.post(f"/evidence/review/{UNIT}", data=form(person, revision="2", confirm="yes"),
                                follow_redirects=True)
    assert "revision 2 is reviewed" in flash_of(reviewed.text)
    assert "an administrator (evidence.manage) activates it" in reviewed.text
    assert app.evidence.current(team.human, UNIT).status == "reviewed"


def test_an_editor_cannot_activate_and_a_reader_cannot_edit_or_review(app: Armarius, team: Team,
                                                                       visitors: Visitors) -> None:
    app.evidence.create(team.human, UNIT, "DNS outage", "body\n")
    app.evidence.review(team.human, UNIT, 1)
    editor, reader = visitors.log_in_team(team), visitors.log_in(*READER, "alpha")
    before = snapshot(app)
    answers = [editor.http.post(f"/evidence/activate/{UNIT}", data=form(editor, revision="1")),
               reader.http.post(f"/evidence/edit/{UNIT}", data=form(reader, expected_revision="1", title="X",
                                                                    body="y")),
               reader.http.post(f"/evidence/review/{UNIT}", data=form(reader, revision="1", confirm="yes")),
               reader.http.post("/evidence/new", data=form(reader, unit="a/b", title="T", body="b"))]
    twin = editor.http.post("/api/evidence/activate", json={"unit": UNIT, "revision": 1},
                            headers={"X-CSRF-Token": editor.csrf()})
    for answer in answers:
        assert answer.status_code == 403
        assert "may not do this" in answer.text
    assert twin.status_code == 403
    assert twin.json()["error"]["details"]["permission"] == "evidence.manage"
    assert snapshot(app) == before
    assert "Activate revision" not in editor.http.get(f"/evidence/units/{UNIT}").text


def test_a_file_changed_outside_is_shown_and_restored(app: Armarius, team: Team, visitors: Visitors) -> None:
    app.evidence.create(team.human, UNIT, "DNS outage", "body\n")
    path = app.evidence.unit_path("alpha", UNIT)
    original = path.read_bytes()
    path.write_bytes(original + b"an edit in an editor\n")
    person = visitors.log_in_team(team)
    page = person.http.get(f"/evidence/units/{UNIT}").text
    assert "<strong>differs from revision 1</strong>" in page
    assert "Review revision" not in page
    assert "Take the file as revision 2" in page
    assert "Restore the file from revision 1" in page
    before = snapshot(app)
    refused = person.http.post(f"/evidence/review/{UNIT}", data=form(person, revision="1", confirm="yes"))
    assert refused.status_code == 409
    assert "differs from it" in refused.text
    assert snapshot(app) == before
    restored = person.http.post(f"/evidence/restore/{UNIT}", data=form(person), follow_redirects=True)
    assert "The file holds revision 1 again." in flash_of(restored.text)
    assert path.read_bytes() == original


def test_the_api_twins_write_as_the_forms_do(app: Armarius, team: Team, visitors: Visitors) -> None:
    admin = visitors.log_in(*ADMIN, "alpha")
    headers = {"X-CSRF-Token": admin.csrf()}
    created = admin.http.post("/api/evidence/create", json={"unit": UNIT, "title": "DNS", "body": "b\n"},
                              headers=headers)
    bad_title = admin.http.post("/api/evidence/create", json={"unit": "a/b", "title": "x\u202ey", "body": "b"},
                                headers=headers)
    edited = admin.http.post("/api/evidence/edit", json={"unit": UNIT, "expected_revision": 1.0, "body": "c\n"},
                             headers=headers)
    reviewed = admin.http.post("/api/evidence/review", json={"unit": UNIT, "revision": 2}, headers=headers)
    activated = admin.http.post("/api/evidence/activate", json={"unit": UNIT, "revision": 2}, headers=headers)
    assert [answer.status_code for answer in (created, edited, reviewed, activated)] == [200] * 4
    assert bad_title.status_code == 400
    assert bad_title.json()["error"]["details"]["field"] == "title"
    assert activated.json()["status"] == "active"
    assert activated.json()["changed"] is True
    assert app.evidence.current(team.human, UNIT).active_revision == 2


# In a real browser --------------------------------------------------------------------------------


@pytest.fixture
def admin_page(chromium: Any, team: Team, base_url: str) -> Iterator[Any]:
    context = chromium.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        log_in_with_the_form(page, "alpha", *ADMIN)
        page.wait_for_url(f"{base_url}/")
        yield page
    finally:
        context.close()


@pytest.mark.browser
def test_an_administrator_edits_reviews_and_activates_a_unit_in_the_browser(
        admin_page: Any, app: Armarius, team: Team) -> None:
    page = admin_page
    app.evidence.create(team.human, UNIT, "The DNS outage", BODY)
    page.get_by_role("link", name="Evidence", exact=True).click()
    page.get_by_role("link", name=UNIT).click()
    assert page.get_by_role("heading", level=1).inner_text() == f"Evidence unit {UNIT}"
    assert page.locator("pre.unit-body").inner_text() == BODY
    # The edit form shows the body exactly (its leading line break too): saved untouched, nothing changes.
    page.get_by_role("link", name="Edit: write revision 2").click()
    assert page.get_by_label("Body (Markdown)").input_value() == BODY
    page.get_by_role("button", name="Save revision 2").click()
    page.wait_for_load_state()
    assert page.get_by_role("status").inner_text() == f"{UNIT} is unchanged at revision 1."
    page.get_by_role("link", name="Edit: write revision 2").click()
    page.get_by_label("Body (Markdown)").fill("The resolver cache expired.\nThe TTL was 60 s.\n")
    page.get_by_label("Why (optional, recorded with the revision)").fill("shorter")
    page.get_by_role("button", name="Save revision 2").click()
    page.wait_for_load_state()
    assert "revision 2 is written (edited)" in page.get_by_role("status").inner_text()
    page.get_by_label("I read revision 2 as shown below").check()
    page.get_by_role("button", name="Review revision 2").click()
    page.wait_for_load_state()
    assert "revision 2 is reviewed" in page.get_by_role("status").inner_text()
    page.get_by_role("button", name="Activate revision 2").click()
    page.wait_for_load_state()
    assert page.get_by_role("status").inner_text() == f"{UNIT} revision 2 is active: recall finds it."
    assert "Status: active" in page.locator("#unit-status").inner_text()
    unit = app.evidence.current(team.human, UNIT)
    assert (unit.status, unit.active_revision, unit.body) == ("active", 2, "The resolver cache expired.\nThe TTL "
                                                                          "was 60 s.\n")
    found = app.memory.recall(team.human, "resolver TTL")
    assert [hit["unit"] for hit in found["evidence"]] == [UNIT]


@pytest.mark.browser
def test_a_unit_is_reviewed_by_keyboard_and_readable_at_phone_width(admin_page: Any, app: Armarius,
                                                                    team: Team) -> None:
    page = admin_page
    app.evidence.create(team.human, "incident/a-rather-long-name-for-a-phone-screen-of-a-unit", "T", "x " * 400)
    page.set_viewport_size({"width": 375, "height": 740})
    page.goto("/evidence/units/incident/a-rather-long-name-for-a-phone-screen-of-a-unit")
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, "nothing wider than a phone screen"
    page.get_by_label("I read revision 1 as shown below").focus()
    page.keyboard.press("Space")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Review revision 1"
    page.keyboard.press("Enter")
    page.wait_for_load_state()
    assert "revision 1 is reviewed" in page.get_by_role("status").inner_text()
    assert app.evidence.current(team.human, "incident/a-rather-long-name-for-a-phone-screen-of-a-unit").status == \
        "reviewed"
