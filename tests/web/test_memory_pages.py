"""Needs review and entries in the web pages and their JSON twins, over real HTTP on both engines, and in a real
Chromium: curate one needs-review entry, revert another, each checked on the page and in the store.

Every refusal shows its status and that nothing changed (the entry's revision, curation and review mark).
"""

from __future__ import annotations

import re

import pytest

from armarius.app import Armarius
from armarius.auth.permissions import Role
from armarius.memory.service import RememberRequest
from armarius.web.pages.gate import PAGE_SIZE
from tests.helpers import OPERATOR, Team, make_team
from tests.web.conftest import BrowserSession, docs_screenshot
from tests.web.people import Visitors


def write(app: Armarius, team: Team, slug: str, body: str, *, title: str = "Staging", agent: bool = False,
          override: str | None = None, tags: list[str] | None = None) -> dict[str, object]:
    actor = team.agent if agent or override else team.human
    return app.memory.remember(actor, RememberRequest(
        slug=slug, title=title, body=body, tags=tags, override_curated=override is not None,
        reason=override or "a test entry of its own", confirm_distinct=True))


def overridden(app: Armarius, team: Team, slug: str = "ops/staging", *, reason: str = "I saw it on beta-2",
               body: str = "Host beta-2.\nPort 22.\n") -> None:
    """A curated entry (revision 1) that an agent overrode with a reason (revision 2)."""
    write(app, team, slug, "Host alpha-7.\nPort 22.\n", tags=["ops"])
    app.memory.curate(team.human, slug, 1)
    write(app, team, slug, body, override=reason)


def stored(app: Armarius, team: Team, slug: str) -> tuple[int, int | None, bool, str]:
    entry = app.memory.read(team.human, slug)
    return entry["revision"], entry["curated_revision"], entry["needs_review"], entry["body"]


def rows(page_text: str) -> list[str]:
    body = page_text.split("<tbody>", 1)[1].split("</tbody>", 1)[0] if "<tbody>" in page_text else ""
    return re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.DOTALL)


# Needs review -------------------------------------------------------------------------------------


def test_needs_review_lists_and_shows_reasons_and_the_diff(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    overridden(app, team, reason="Saw <b>beta</b>\u202e on the console")
    overridden(app, team, "ops/prod")
    write(app, team, "ops/quiet", "Nothing to see.\n")
    person = visitors.log_in_team(team)
    listing = person.http.get("/needs-review")
    filtered = person.http.get("/needs-review", params={"q": "PROD"})
    page = person.http.get("/needs-review/ops/staging")
    twin = person.http.get("/api/needs-review/entry", params={"slug": "ops/staging"}).json()
    assert [re.findall(r'href="(/needs-review/[^"]+)"', row) for row in rows(listing.text)] == [
        ["/needs-review/ops/prod"], ["/needs-review/ops/staging"]]
    assert len(rows(filtered.text)) == 1
    assert "ops/prod" in filtered.text
    assert "curated 1 → now 2" in listing.text
    # The reason is text, revealed; the diff is against the curated revision, line by line.
    assert 'Saw &lt;b&gt;beta&lt;/b&gt;<mark class="reveal">⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧</mark> on' in page.text
    assert "\u202e" not in page.text
    assert '<span class="meta">--- ops/staging@1 (curated)</span>' in page.text
    assert '<span class="del">-Host alpha-7.</span>' in page.text
    assert '<span class="add">+Host beta-2.</span>' in page.text
    assert '<input type="hidden" name="revision" value="2">' in page.text
    assert "Curate this revision (2)" in page.text
    assert "Revert to the curated revision (1)" in page.text
    assert (twin["revision"], twin["curated_revision"], twin["overrides"][0]["reason"]) == (
        2, 1, "Saw <b>beta</b>\u202e on the console")
    assert "+Host beta-2." in twin["diff"]
    missing = person.http.get("/needs-review/ops/quiet")
    assert missing.status_code == 404
    assert "No entry &#39;ops/quiet&#39; needs review" in missing.text
    assert person.http.get("/api/needs-review/entry", params={"slug": "Not A Slug"}).status_code == 400


def test_the_needs_review_list_pages_by_cursor(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    for number in range(PAGE_SIZE + 2):
        slug = f"notes/n{number:03d}"
        write(app, team, slug, f"Body {number}.\n", title=f"Note {number}")
        app.memory.curate(team.human, slug, 1)
        write(app, team, slug, f"Body {number} changed.\n", title=f"Note {number}", override="newer")
    person = visitors.log_in_team(team)
    first = person.http.get("/needs-review")
    twin = person.http.get("/api/needs-review").json()
    second = person.http.get("/api/needs-review", params={"after": twin["next"]}).json()
    assert len(rows(first.text)) == PAGE_SIZE
    assert f'href="/needs-review?after=notes%2Fn{PAGE_SIZE - 1:03d}" rel="next"' in first.text
    assert len(twin["items"]) == PAGE_SIZE
    assert twin["next"] == f"notes/n{PAGE_SIZE - 1:03d}"
    assert [item["slug"] for item in second["items"]] == [f"notes/n{PAGE_SIZE:03d}", f"notes/n{PAGE_SIZE + 1:03d}"]
    assert second["next"] is None


def test_curate_exactly_the_revision_shown(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    overridden(app, team)
    person = visitors.log_in_team(team)
    assert '<input type="hidden" name="revision" value="2">' in person.http.get("/needs-review/ops/staging").text
    # An agent changes the entry again after the page was rendered: the revision shown is no longer current.
    write(app, team, "ops/staging", "Host gamma-3.\n", agent=True)
    before = stored(app, team, "ops/staging")
    stale = person.http.post("/entries/curate", data={"csrf": person.csrf(), "slug": "ops/staging", "revision": "2"})
    assert stale.status_code == 409
    assert "&#39;ops/staging&#39; is at revision 3; you reviewed revision 2." in stale.text
    assert stored(app, team, "ops/staging") == before == (3, 1, True, "Host gamma-3.\n")
    # The page now shows revision 3; curating it settles the review.
    assert '<input type="hidden" name="revision" value="3">' in person.http.get("/needs-review/ops/staging").text
    done = person.http.post("/entries/curate", data={"csrf": person.csrf(), "slug": "ops/staging", "revision": "3"})
    assert (done.status_code, done.headers["location"]) == (303, "/entries/ops/staging")
    assert "ops/staging revision 3 is curated." in person.http.get(done.headers["location"]).text
    assert stored(app, team, "ops/staging") == (3, 3, False, "Host gamma-3.\n")
    assert person.http.get("/needs-review/ops/staging").status_code == 404
    missing_revision = person.http.post("/entries/curate", data={"csrf": person.csrf(), "slug": "ops/staging"})
    assert missing_revision.status_code == 400


def test_revert_to_the_curated_revision_needs_a_reason(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    overridden(app, team)
    person = visitors.log_in_team(team)
    blank = person.http.post("/entries/revert", data={"csrf": person.csrf(), "slug": "ops/staging", "reason": "  "})
    assert blank.status_code == 400
    assert "A revert needs a reason" in blank.text
    assert stored(app, team, "ops/staging") == (2, 1, True, "Host beta-2.\nPort 22.\n")
    done = person.http.post("/entries/revert", data={"csrf": person.csrf(), "slug": "ops/staging",
                                                     "reason": "beta-2 is the standby"})
    shown = person.http.get(done.headers["location"])
    assert done.status_code == 303
    assert "ops/staging is back to curated revision 1&#39;s content as revision 3, curated by you." in shown.text
    assert stored(app, team, "ops/staging") == (3, 3, False, "Host alpha-7.\nPort 22.\n")
    history = app.memory.history(team.human, "ops/staging")["revisions"]
    assert history[-1]["reason"] == "beta-2 is the standby"


def test_a_reader_cannot_curate_or_revert(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app, human_role=Role.READER)
    editor = make_team(app, "beta")
    app.directory.set_role("beta-human", workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    editor_in_alpha = app.directory.authenticate_password("beta-human", editor.human_password, workspace="alpha")
    app.memory.remember(editor_in_alpha, RememberRequest(slug="ops/staging", title="Staging", body="Host alpha-7.\n"))
    app.memory.curate(editor_in_alpha, "ops/staging", 1)
    write(app, team, "ops/staging", "Host beta-2.\n", override="I saw it")
    person = visitors.log_in_team(team)
    page = person.http.get("/needs-review/ops/staging")
    before = stored(app, team, "ops/staging")
    csrf = person.csrf()
    answers = [
        person.http.post("/entries/curate", data={"csrf": csrf, "slug": "ops/staging", "revision": "2"}),
        person.http.post("/entries/revert", data={"csrf": csrf, "slug": "ops/staging", "reason": "no"}),
        person.http.post("/entries/uncurate", data={"csrf": csrf, "slug": "ops/staging"}),
        person.http.post("/api/entries/curate", json={"slug": "ops/staging", "revision": 2},
                         headers={"X-CSRF-Token": csrf}),
        person.http.post("/api/entries/revert", json={"slug": "ops/staging", "reason": "no"},
                         headers={"X-CSRF-Token": csrf}),
    ]
    assert page.status_code == 200
    assert "Your role (reader) may not curate or revert entries" in page.text
    assert [answer.status_code for answer in answers] == [403] * 5
    assert "memory.curate" in answers[0].text
    assert answers[3].json()["error"]["code"] == "not_allowed"
    assert stored(app, team, "ops/staging") == before == (2, 1, True, "Host beta-2.\n")


def test_the_api_twins_curate_and_revert(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    overridden(app, team, "ops/one")
    overridden(app, team, "ops/two")
    person = visitors.log_in_team(team)
    headers = {"X-CSRF-Token": person.csrf()}
    curated = person.http.post("/api/entries/curate", json={"slug": "ops/one", "revision": 2}, headers=headers)
    reverted = person.http.post("/api/entries/revert", json={"slug": "ops/two", "reason": "wrong"}, headers=headers)
    stale = person.http.post("/api/entries/curate", json={"slug": "ops/two", "revision": 2}, headers=headers)
    uncurated = person.http.post("/api/entries/uncurate", json={"slug": "ops/one"}, headers=headers)
    unknown = person.http.post("/api/entries/revert", json={"slug": "ops/none", "reason": "x"}, headers=headers)
    assert curated.json() == {"slug": "ops/one", "revision": 2, "curated": True, "changed": True}
    assert reverted.json()["revision"] == 3
    assert reverted.json()["reverted_to"] == 1
    assert (stale.status_code, stale.json()["error"]["code"]) == (409, "conflict")
    assert uncurated.json() == {"slug": "ops/one", "curated": False, "changed": True}
    assert unknown.status_code == 404
    assert stored(app, team, "ops/one")[1:3] == (None, False)
    assert stored(app, team, "ops/two") == (3, 3, False, "Host alpha-7.\nPort 22.\n")


# Entries ------------------------------------------------------------------------------------------


def test_an_entry_with_history_links_backlinks_and_broken_links(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    write(app, team, "ops/db", "The database.\n", title="Database")
    write(app, team, "ops/staging", "Uses [[ops/db]] and [[ops/gone]].\nLine two.\n", tags=["ops", "hosts"])
    write(app, team, "ops/staging", "Uses [[ops/db]] and [[ops/gone]].\nLine 2 <script>x</script>.\n",
          title="St\u0430ging", agent=True)
    write(app, team, "ops/index", "See [[ops/staging]].\n", title="Index")
    person = visitors.log_in_team(team)
    page = person.http.get("/entries/ops/staging")
    old = person.http.get("/entries/ops/staging", params={"revision": "1"})
    compared = person.http.get("/entries/ops/staging", params={"from": "1", "to": "2"})
    twin = person.http.get("/api/entries/entry", params={"slug": "ops/staging"}).json()
    diff = person.http.get("/api/entries/diff", params={"slug": "ops/staging", "from": 1, "to": 2}).json()
    assert page.status_code == 200
    assert '<a href="/entries/ops/db">ops/db</a>' in page.text
    assert '<span class="broken-link">ops/gone</span>' in page.text
    assert '<a href="/entries/ops/index">ops/index</a>' in page.text
    assert "Line 2 &lt;script&gt;x&lt;/script&gt;." in page.text
    assert "<script>" not in page.text
    assert 'St<mark class="reveal">⟦U+0430 CYRILLIC SMALL LETTER A⟧</mark>ging' in page.text
    assert len(rows(page.text)) == 2, "the history"
    assert "This is revision 1; the current revision is" in old.text
    assert "Line two." in old.text
    assert '<span class="del">-Line two.</span>' in compared.text
    assert '<span class="add">+Line 2 &lt;script&gt;x&lt;/script&gt;.</span>' in compared.text
    assert (twin["entry"]["links"], twin["entry"]["broken_links"], twin["entry"]["backlinks"]) == (
        ["ops/db"], ["ops/gone"], ["ops/index"])
    assert [row["revision"] for row in twin["history"]["revisions"]] == [1, 2]
    assert "+Line 2 <script>x</script>." in diff["diff"]
    assert person.http.get("/entries/ops/staging", params={"revision": "9"}).status_code == 404
    assert person.http.get("/entries/ops/staging", params={"from": "1", "to": "9"}).status_code == 404
    assert person.http.get("/entries/ops/nowhere").status_code == 404
    assert person.http.get("/entries/ops/staging", params={"revision": "x"}).status_code == 400


def test_entries_list_filters_and_pages(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    for number in range(PAGE_SIZE + 3):
        write(app, team, f"notes/n{number:03d}", f"Body number {number}.\n", title=f"Note {number}",
              tags=["even"] if number % 2 == 0 else None)
    write(app, team, "ops/staging", "Host.\n")
    app.memory.curate(team.human, "ops/staging", 1)
    person = visitors.log_in_team(team)
    first = person.http.get("/entries")
    next_link = re.search(r'href="(/entries\?after=[^"]+)" rel="next"', first.text)
    assert next_link, first.text
    second = person.http.get(next_link.group(1).replace("&amp;", "&"))
    curated = person.http.get("/entries", params={"curated": "yes"})
    tagged = person.http.get("/api/entries", params={"tag": "even", "prefix": "notes/n00"}).json()
    assert len(rows(first.text)) == PAGE_SIZE
    assert len(rows(second.text)) == 4
    assert len(rows(curated.text)) == 1
    assert "ops/staging" in curated.text
    assert [item["slug"] for item in tagged["items"]] == [f"notes/n00{n}" for n in (0, 2, 4, 6, 8)]
    assert person.http.get("/entries", params={"curated": "maybe"}).status_code == 400
    assert person.http.get("/api/entries", params={"prefix": "a\x00b"}).status_code == 400


def test_search_is_recall_with_evidence_hits(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app, human_role=Role.ADMIN)
    write(app, team, "ops/staging", "The staging database runs on beta-2.\n", title="Staging <i>db</i>")
    write(app, team, "ops/prod", "Production has no staging.\n", title="Production")
    app.evidence.create(team.human, "incident/staging", "Staging outage", "The staging database was down.\n")
    app.evidence.review(team.human, "incident/staging", 1)
    app.evidence.activate(team.human, "incident/staging", 1)
    person = visitors.log_in_team(team)
    page = person.http.get("/entries", params={"q": "staging database"})
    twin = person.http.get("/api/entries/search", params={"q": "staging database"}).json()
    assert "Best matches of all the words" in page.text
    assert '<a href="/entries/ops/staging">ops/staging</a>' in page.text
    assert "Staging &lt;i&gt;db&lt;/i&gt;" in page.text
    assert "**staging** **database**" in page.text
    assert "Evidence units" in page.text
    assert 'href="/evidence/units/incident/staging"' in page.text
    assert twin["mode"] == "hybrid"
    assert twin["results"][0]["slug"] == "ops/staging"
    assert twin["results"][0]["ranked_by"] == ["lexical", "semantic"]
    assert [unit["unit"] for unit in twin["evidence"]] == ["incident/staging"]
    by_words = person.http.get("/api/entries/search", params={"q": "staging database", "mode": "lexical"}).json()
    assert [(hit["slug"], hit["ranked_by"]) for hit in by_words["results"]] == [("ops/staging", ["lexical"])]
    none = person.http.get("/entries", params={"q": "zebra", "mode": "lexical"})
    assert "No entry matches" in none.text
    assert '<option value="lexical" selected>' in none.text
    assert "found by words and meaning" in page.text
    refused = person.http.get("/api/entries/search", params={"q": "zebra", "mode": "fuzzy"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_input")


# In a real browser --------------------------------------------------------------------------------


@pytest.mark.browser
def test_a_human_curates_one_entry_and_reverts_another_in_the_browser(browser_page: BrowserSession,
                                                                       app: Armarius) -> None:
    page, team = browser_page.page, browser_page.team
    overridden(app, team, "ops/staging", reason="The console says beta-2\u200b now")
    overridden(app, team, "ops/prod", reason="Moved", body="Host gamma-9.\nPort 2222.\n")
    page.goto("/needs-review")
    assert page.locator("table.queue-list tbody tr").count() == 2
    page.get_by_role("link", name="ops/staging").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Review ops/staging"
    assert page.locator("pre.diff .del").all_inner_texts() == ["-Host alpha-7."]
    assert page.locator("pre.diff .add").all_inner_texts() == ["+Host beta-2."]
    assert page.locator("td mark.reveal").all_inner_texts() == ["⟦U+200B ZERO WIDTH SPACE⟧"]
    docs_screenshot(page, app, "needs-review")
    page.get_by_role("button", name="Curate this revision (2)").click()
    page.wait_for_url("**/entries/ops/staging")
    assert page.get_by_role("status").inner_text() == "ops/staging revision 2 is curated."
    assert page.locator("#entry-curation").inner_text() == "curated by human:alpha-human"
    assert stored(app, team, "ops/staging") == (2, 2, False, "Host beta-2.\nPort 22.\n")

    page.goto("/needs-review/ops/prod")
    reason = page.get_by_label("Reason (recorded with the new revision)")
    reason.fill("gamma-9 is decommissioned")
    reason.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Revert to the curated revision (1)"
    page.keyboard.press("Enter")
    page.wait_for_url("**/entries/ops/prod")
    assert "ops/prod is back to curated revision 1's content as revision 3" in page.get_by_role("status").inner_text()
    assert page.locator("#entry-body").inner_text() == "Host alpha-7.\nPort 22.\n"
    assert stored(app, team, "ops/prod") == (3, 3, False, "Host alpha-7.\nPort 22.\n")
    page.goto("/needs-review")
    assert "Nothing needs review." in page.locator("main").inner_text()
    page.goto("/")
    assert page.locator('[data-kind="needs_review"]').inner_text() == "0"


@pytest.mark.browser
def test_comparing_two_revisions_in_the_browser(browser_page: BrowserSession, app: Armarius) -> None:
    page, team = browser_page.page, browser_page.team
    for body in ("One.\n", "One.\nTwo.\n", "One.\nTwo.\nThree.\n"):
        write(app, team, "notes/count", body, title="Count")
    page.goto("/entries")
    page.get_by_role("link", name="notes/count").click()
    page.get_by_label("From revision").select_option("1")
    page.get_by_label("to revision").select_option("3")
    page.get_by_role("button", name="Show the diff").click()
    page.wait_for_url("**/entries/notes/count?from=1&to=3")
    assert page.locator("pre.diff .add").all_inner_texts() == ["+Two.", "+Three."]


@pytest.mark.browser
def test_the_memory_pages_fit_a_phone_screen(browser_page: BrowserSession, app: Armarius) -> None:
    page, team = browser_page.page, browser_page.team
    overridden(app, team, "ops/staging", body="Host beta-2 " + "with-a-very-long-unbroken-word-" * 8 + "\n")
    page.set_viewport_size({"width": 375, "height": 740})
    for path in ("/needs-review", "/needs-review/ops/staging", "/entries", "/entries?q=host",
                 "/entries/ops/staging", "/entries/ops/staging?from=1&to=2"):
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} is wider than a phone screen"
