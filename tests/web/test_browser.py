"""The pages in a real headless Chromium (Debian's, through Playwright): log in, read the queue, log out."""

from __future__ import annotations

import pytest

from armarius.app import Armarius
from armarius.auth.permissions import Role
from armarius.config import Settings
from tests.helpers import OPERATOR, OwnerSQL, make_team
from tests.web.conftest import BrowserSession, docs_screenshot, log_in_with_the_form

pytestmark = pytest.mark.browser

HOSTILE_TITLE = "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"> Pay\u200bpal \u202eevil"


def test_a_human_logs_in_and_sees_the_queue(browser_page: BrowserSession, app: Armarius) -> None:
    page, team = browser_page.page, browser_page.team
    app.drafts.propose(team.agent, {"slug": "notes/hostile", "title": HOSTILE_TITLE, "text": "body"})
    app.drafts.propose(team.agent, {"slug": "notes/plain", "title": "A plain proposal", "text": "body"})
    page.reload()
    assert page.title() == "Review queue · Armarius"
    assert page.get_by_role("heading", level=1).inner_text() == "Review queue"
    assert page.locator('[data-kind="drafts"]').inner_text() == "2"
    assert "Logged in as alpha-human (editor)" in page.locator("header").inner_text()
    rows = page.locator("table.queue-list tbody tr")
    assert rows.count() == 2
    hostile = rows.filter(has_text="notes/hostile")
    detail = hostile.locator("td").nth(1)
    # The markup is text, never elements; nothing ran; the invisible characters are shown as markers.
    assert "<script>window.pwned = 1</script>" in detail.inner_text()
    assert detail.locator("script, img").count() == 0
    assert page.evaluate("window.pwned") is None
    markers = detail.locator("mark.reveal").all_inner_texts()
    assert markers == ["⟦U+200B ZERO WIDTH SPACE⟧", "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧"]
    docs_screenshot(page, app, "queue")
    hostile.get_by_role("link", name="notes/hostile").click()
    assert page.url.rsplit("/", 1)[0].endswith("/drafts/proposals")


def test_the_page_is_usable_by_keyboard_and_at_phone_width(browser_page: BrowserSession) -> None:
    page = browser_page.page
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to main content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    page.set_viewport_size({"width": 375, "height": 740})
    page.reload()
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, "nothing wider than a phone screen"
    assert page.get_by_role("button", name="Log out").is_visible()
    assert page.get_by_role("navigation", name="Main").is_visible()


def test_logging_out_in_the_browser_ends_the_session(browser_page: BrowserSession, settings: Settings) -> None:
    page = browser_page.page
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/login?ended=1")
    assert "You are logged out." in page.locator("main").inner_text()
    page.goto("/")
    assert page.url.endswith("/login")
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT count(*) FROM web_sessions WHERE ended_at IS NULL")[0][0] == 0


def test_a_person_in_two_workspaces_switches_in_the_header(chromium: object, app: Armarius, base_url: str) -> None:
    make_team(app, "alpha")
    beta = make_team(app, "beta")
    app.directory.set_role("alpha-human", workspace="beta", role=Role.READER, by=OPERATOR)
    app.drafts.propose(beta.agent, {"slug": "beta/only", "title": "Only in beta", "text": "body"})
    context = chromium.new_context(base_url=base_url)  # type: ignore[attr-defined]
    try:
        page = context.new_page()
        log_in_with_the_form(page, "alpha", "alpha-human", "alpha-correct horse battery")
        page.wait_for_url(f"{base_url}/")
        assert page.locator('[data-kind="drafts"]').inner_text() == "0"
        page.get_by_label("Workspace").select_option("beta")
        page.get_by_role("button", name="Switch").click()
        page.wait_for_load_state()
        assert page.get_by_role("status").inner_text() == "You are now working in workspace beta."
        assert page.locator('[data-kind="drafts"]').inner_text() == "1"
        assert "Logged in as alpha-human (reader)" in page.locator("header").inner_text()
    finally:
        context.close()
