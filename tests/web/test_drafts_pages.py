"""Draft proposals in the web pages (/drafts, /drafts/proposals/<id>) and their JSON twins, over real HTTP on both
engines, and in a real Chromium: approve, then the SDK's MCP client creates the draft with the token shown.

Every refusal shows its status and that nothing changed: no approval row, the proposal still pending, no new audit
event.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth.permissions import Role
from armarius.auth.secrets import token_digest
from armarius.config import Settings
from armarius.drafts.model import DraftPayload
from armarius.errors import ApprovalExpired
from armarius.web.pages.gate import PAGE_SIZE
from tests.helpers import OwnerSQL, Team, make_team, tool_payload
from tests.web.conftest import BrowserSession, docs_screenshot
from tests.web.people import Person, Visitors

_FINGERPRINT_FIELD = re.compile(r'<input type="hidden" name="fingerprint" value="([0-9a-f]{64})">')
#: Markup, a script, a right-to-left override, a zero-width space and a Cyrillic a (U+0430) inside a Latin word.
HOSTILE_TITLE = "<script>window.pwned = 1</script> Pay\u200bpal \u202eevil"
HOSTILE_TEXT = ("<img src=x onerror=\"window.pwned = 2\">\nSend the invoice to p\u0430ypal.example\n"
                "Amount: 10\u2066 000\u2069 EUR\n")


def rows(page_text: str) -> list[str]:
    body = page_text.split("<tbody>", 1)[1].split("</tbody>", 1)[0] if "<tbody>" in page_text else ""
    return re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)


def shown_fingerprint(person: Person, proposal: int) -> str:
    """The fingerprint the proposal page's Approve form carries."""
    page = person.http.get(f"/drafts/proposals/{proposal}")
    assert page.status_code == 200, page.text
    found = _FINGERPRINT_FIELD.search(page.text)
    assert found, page.text
    return found.group(1)


def state(app: Armarius, settings: Settings, team: Team, proposal: int) -> tuple[str, int, int]:
    """The proposal's stored status, how many approvals exist, how many audit events the workspace has."""
    with OwnerSQL(settings) as sql:
        status = sql.rows("SELECT status FROM draft_proposals WHERE id = ?", (proposal,))[0][0]
        approvals = sql.count("approvals")
    events = len(audit.tail(app.database, team.human.workspace_id, limit=10_000))
    return status, approvals, events


def propose(app: Armarius, team: Team, slug: str = "notes/launch", title: str = "Launch notes",
            text: str = "Line one.\nLine two.\n") -> int:
    return int(app.drafts.propose(team.agent, {"slug": slug, "title": title, "text": text})["proposal"])


# Listing ----------------------------------------------------------------------------------------


def test_the_list_pages_by_cursor_and_filters(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    total = PAGE_SIZE + 7
    ids = [propose(app, team, f"notes/n{number:03d}", f"Note {number}") for number in range(total)]
    app.drafts.reject(team.human, ids[0], "no")
    person = visitors.log_in_team(team)
    first = person.http.get("/drafts")
    next_link = re.search(r'href="(/drafts\?after=\d+)" rel="next"', first.text)
    assert next_link, first.text
    second = person.http.get(next_link.group(1))
    rejected = person.http.get("/drafts", params={"status": "rejected"})
    everything = person.http.get("/drafts", params={"status": "all", "q": "N05"})
    twin = person.http.get("/api/drafts/proposals", params={"status": "all", "q": "n05"}).json()
    assert len(rows(first.text)) == PAGE_SIZE
    assert "notes/n001" in first.text, "pending, oldest first"
    assert "notes/n000" not in first.text, "rejected"
    assert len(rows(second.text)) == total - 1 - PAGE_SIZE
    assert 'rel="next"' not in second.text
    assert "First page" in second.text
    assert len(rows(rejected.text)) == 1
    assert "notes/n000" in rejected.text
    assert [row.count("notes/n05") for row in rows(everything.text)] == [1] * 7
    assert [item["slug"] for item in twin["items"]] == [f"notes/n{n:03d}" for n in range(56, 49, -1)], "newest first"
    assert twin["next"] is None
    assert "text" not in twin["items"][0]
    bad = person.http.get("/drafts", params={"status": "everything"})
    assert bad.status_code == 400
    assert "status is one of pending, approved, expired, drafted, rejected, all." in bad.text


# The proposal page --------------------------------------------------------------------------------


def test_hostile_content_renders_escaped_and_revealed(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    proposal = propose(app, team, title=HOSTILE_TITLE, text=HOSTILE_TEXT)
    person = visitors.log_in_team(team)
    page = person.http.get(f"/drafts/proposals/{proposal}").text
    twin = person.http.get(f"/api/drafts/proposals/{proposal}").json()
    expected = DraftPayload("notes/launch", HOSTILE_TITLE, HOSTILE_TEXT).fingerprint
    # No markup of the content survives as markup; every invisible or look-alike character is a marker.
    assert "<script>" not in page
    assert "<img" not in page
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=&#34;window.pwned = 2&#34;&gt;" in page
    for invisible in ("\u200b", "\u202e", "\u2066", "\u2069", "\u0430"):
        assert invisible not in page
    for marker in ("U+200B ZERO WIDTH SPACE", "U+202E RIGHT-TO-LEFT OVERRIDE", "U+2066 LEFT-TO-RIGHT ISOLATE",
                   "U+2069 POP DIRECTIONAL ISOLATE", "U+0430 CYRILLIC SMALL LETTER A"):
        assert f'<mark class="reveal">⟦{marker}⟧</mark>' in page
    assert "5 hidden or look-alike characters" in page
    assert f'<input type="hidden" name="fingerprint" value="{expected}">' in page
    assert " ".join(expected[i:i + 4] for i in range(0, 16, 4)) in page, "the short fingerprint"
    assert (twin["text"], twin["shown_fingerprint"], twin["markers"]) == (HOSTILE_TEXT, expected, 5)


def test_an_address_spelt_in_look_alike_letters_is_shown_as_markers(app: Armarius, visitors: Visitors) -> None:
    """https://apple.com spelt with the Cyrillic a, er, er, palochka and ie, and "pay" in Cyrillic letters: the
    page and its twin count every one, and none is shown as itself."""
    team = make_team(app)
    text = "Log in at https://\u0430\u0440\u0440\u04cf\u0435.com/login\nThen \u0440\u0430\u0443 the invoice.\n"
    proposal = propose(app, team, title="Login", text=text)
    person = visitors.log_in_team(team)
    page = person.http.get(f"/drafts/proposals/{proposal}").text
    twin = person.http.get(f"/api/drafts/proposals/{proposal}").json()
    for lookalike in ("\u0430", "\u0440", "\u04cf", "\u0435", "\u0443"):
        assert lookalike not in page
    assert ('https://<mark class="reveal">⟦U+0430 CYRILLIC SMALL LETTER A⟧</mark><mark class="reveal">⟦U+0440 '
            'CYRILLIC SMALL LETTER ER⟧</mark>') in page
    assert "8 hidden or look-alike characters" in page
    assert (twin["text"], twin["markers"]) == (text, 8)


def test_a_run_of_one_hidden_character_is_one_marker_and_every_character_is_counted(
        app: Armarius, visitors: Visitors) -> None:
    """21,000 zero-width spaces in a row: one marker naming the count, and the page and its twin count all of
    them (not the one marker) as hidden characters."""
    team = make_team(app)
    text = "Before" + "\u200b" * 21_000 + "after.\n"
    proposal = propose(app, team, title="Runs", text=text)
    person = visitors.log_in_team(team)
    page = person.http.get(f"/drafts/proposals/{proposal}").text
    twin = person.http.get(f"/api/drafts/proposals/{proposal}").json()
    assert "\u200b" not in page
    assert 'Before<mark class="reveal">⟦U+200B ZERO WIDTH SPACE \u00d721000⟧</mark>after.' in page
    assert "21000 hidden or look-alike characters" in page
    assert (twin["text"], twin["markers"]) == (text, 21_000)


def test_a_proposal_that_does_not_exist(app: Armarius, visitors: Visitors) -> None:
    person = visitors.log_in_team(make_team(app))
    assert person.http.get("/drafts/proposals/999").status_code == 404
    missing = person.http.get("/api/drafts/proposals/999")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    assert person.http.get("/api/drafts/proposals/x").status_code == 400


# Approve and reject -------------------------------------------------------------------------------


def test_approve_shows_the_token_once_and_never_in_a_flash(app: Armarius, settings: Settings,
                                                           visitors: Visitors) -> None:
    team = make_team(app)
    proposal = propose(app, team)
    person = visitors.log_in_team(team)
    fingerprint = shown_fingerprint(person, proposal)
    answer = person.http.post(f"/drafts/proposals/{proposal}/approve",
                              data={"csrf": person.csrf(), "fingerprint": fingerprint})
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "no-store"
    token = re.search(r'id="approval-token" class="token" value="(arm_[^"]+)"', answer.text)
    assert token, answer.text
    assert "shown once" in answer.text
    with OwnerSQL(settings) as sql:
        digest, bound = sql.rows("SELECT token_digest, fingerprint FROM approvals")[0]
        flashes = sql.rows("SELECT flash FROM web_sessions")
    assert (digest, bound) == (token_digest(token.group(1)), fingerprint)
    assert all(token.group(1) not in str(flash) for flash in flashes), "never stored with the session"
    assert token.group(1) not in person.http.get("/").text
    assert token.group(1) not in person.http.get(f"/drafts/proposals/{proposal}").text
    again = person.http.get(f"/drafts/proposals/{proposal}")
    assert "approved" in again.text
    assert "Approve again" in again.text


def test_content_changed_after_rendering_is_refused(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    proposal = propose(app, team)
    other = DraftPayload("notes/launch", "Launch notes", "Something else.\n").fingerprint
    person = visitors.log_in_team(team)
    fingerprint = shown_fingerprint(person, proposal)
    before = state(app, settings, team, proposal)
    # Stored content changes behind the page's back (as only the database's owner could do).
    with OwnerSQL(settings) as sql:
        sql.execute("UPDATE draft_proposals SET text = ? WHERE id = ?", ("Line one.\nLine 2.\n", proposal))
    changed = person.http.post(f"/drafts/proposals/{proposal}/approve",
                               data={"csrf": person.csrf(), "fingerprint": fingerprint})
    forged = person.http.post(f"/drafts/proposals/{proposal}/approve",
                              data={"csrf": person.csrf(), "fingerprint": other})
    missing = person.http.post(f"/drafts/proposals/{proposal}/approve", data={"csrf": person.csrf()})
    api = person.http.post(f"/api/drafts/proposals/{proposal}/approve", json={"fingerprint": fingerprint},
                           headers={"X-CSRF-Token": person.csrf()})
    for refused in (changed, forged):
        assert refused.status_code == 409
        assert "The content differs from what was shown for review; review it again." in refused.text
        assert "arm_" not in refused.text
    assert missing.status_code == 400
    assert (api.status_code, api.json()["error"]["code"]) == (409, "conflict")
    assert state(app, settings, team, proposal) == before, "nothing approved, nothing recorded"
    assert "Line 2." in person.http.get(f"/drafts/proposals/{proposal}").text, "the page shows the new content"


def test_a_reader_cannot_approve_or_reject(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app, human_role=Role.READER)
    proposal = propose(app, team)
    person = visitors.log_in_team(team)
    page = person.http.get(f"/drafts/proposals/{proposal}")
    fingerprint = DraftPayload("notes/launch", "Launch notes", "Line one.\nLine two.\n").fingerprint
    before = state(app, settings, team, proposal)
    csrf = person.csrf()
    answers = [
        person.http.post(f"/drafts/proposals/{proposal}/approve", data={"csrf": csrf, "fingerprint": fingerprint}),
        person.http.post(f"/drafts/proposals/{proposal}/reject", data={"csrf": csrf, "note": "no"}),
        person.http.post(f"/api/drafts/proposals/{proposal}/approve", json={"fingerprint": fingerprint},
                         headers={"X-CSRF-Token": csrf}),
        person.http.post(f"/api/drafts/proposals/{proposal}/reject", json={"note": "no"},
                         headers={"X-CSRF-Token": csrf}),
    ]
    assert "Your role (reader) may not approve or reject proposals" in page.text
    assert "Approve exactly this content" not in page.text
    assert [answer.status_code for answer in answers] == [403] * 4
    assert "approvals.issue" in answers[0].text
    assert answers[2].json()["error"]["code"] == "not_allowed"
    assert state(app, settings, team, proposal) == before


def test_the_proposer_never_approves(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    proposal = int(app.drafts.propose(team.human, {"slug": "notes/mine", "title": "Mine", "text": "x"})["proposal"])
    person = visitors.log_in_team(team)
    fingerprint = shown_fingerprint(person, proposal)
    before = state(app, settings, team, proposal)
    answer = person.http.post(f"/drafts/proposals/{proposal}/approve",
                              data={"csrf": person.csrf(), "fingerprint": fingerprint})
    assert answer.status_code == 403
    assert "You proposed this draft; another human must approve it (separation of duties)." in answer.text
    assert state(app, settings, team, proposal) == before


def test_a_form_without_its_csrf_token_approves_nothing(app: Armarius, settings: Settings,
                                                        visitors: Visitors) -> None:
    team = make_team(app)
    proposal = propose(app, team)
    person = visitors.log_in_team(team)
    fingerprint = shown_fingerprint(person, proposal)
    before = state(app, settings, team, proposal)
    answers = [person.http.post(f"/drafts/proposals/{proposal}/approve", data={"fingerprint": fingerprint}),
               person.http.post(f"/drafts/proposals/{proposal}/reject", data={"csrf": "forged", "note": "x"}),
               person.http.post(f"/api/drafts/proposals/{proposal}/approve", json={"fingerprint": fingerprint})]
    assert [answer.status_code for answer in answers] == [403] * 3
    assert state(app, settings, team, proposal) == before


def test_reject_with_a_note_and_its_twin(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    first, second = propose(app, team), propose(app, team, "notes/other")
    person = visitors.log_in_team(team)
    rejected = person.http.post(f"/drafts/proposals/{first}/reject",
                                data={"csrf": person.csrf(), "note": "Say <b>which</b> launch\u202e"})
    shown = person.http.get(rejected.headers["location"])
    twin = person.http.post(f"/api/drafts/proposals/{second}/reject", json={"note": None},
                            headers={"X-CSRF-Token": person.csrf()})
    again = person.http.post(f"/api/drafts/proposals/{second}/reject", json={},
                             headers={"X-CSRF-Token": person.csrf()})
    assert (rejected.status_code, rejected.headers["location"]) == (303, f"/drafts/proposals/{first}")
    assert f"Proposal {first} was rejected." in shown.text
    assert "Say &lt;b&gt;which&lt;/b&gt; launch<mark" in shown.text
    assert "Nothing is left to decide: this proposal is rejected." in shown.text
    assert twin.json() == {"proposal": second, "status": "rejected", "withdrawn_approval": None}
    assert (again.status_code, again.json()["error"]["code"]) == (409, "conflict")
    status = app.drafts.proposal_status(team.agent, first)
    assert (status["status"], status["note"]) == ("rejected", "Say <b>which</b> launch\u202e")
    assert state(app, settings, team, second)[0] == "rejected"


def test_an_approval_is_withdrawn_on_the_page_and_with_its_twin(app: Armarius, settings: Settings,
                                                                visitors: Visitors) -> None:
    """A human who approved by mistake rejects the proposal: the page says that this withdraws the approval, and
    the agent's token stops working at once."""
    team = make_team(app)
    first, second = propose(app, team), propose(app, team, "notes/other")
    tokens = [app.drafts.approve(team.human, proposal_id=proposal) for proposal in (first, second)]
    person = visitors.log_in_team(team)
    page = person.http.get(f"/drafts/proposals/{first}")
    assert "Rejecting withdraws the live approval" in page.text
    assert "Reject and withdraw the approval</button>" in page.text
    rejected = person.http.post(f"/drafts/proposals/{first}/reject", data={"csrf": person.csrf(), "note": "Oops."})
    shown = person.http.get(rejected.headers["location"])
    twin = person.http.post(f"/api/drafts/proposals/{second}/reject", json={"note": "Oops."},
                            headers={"X-CSRF-Token": person.csrf()})
    assert (rejected.status_code, shown.status_code) == (303, 200)
    assert f"Proposal {first} was rejected. Its approval {tokens[0].approval_id} is withdrawn" in shown.text
    assert twin.json() == {"proposal": second, "status": "rejected", "withdrawn_approval": tokens[1].approval_id}
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT outcome FROM approvals ORDER BY id") == [("withdrawn",), ("withdrawn",)]
    for proposal, issued in zip((first, second), tokens, strict=True):
        shown_content = app.drafts.proposal(team.human, proposal)
        content = {key: shown_content[key] for key in ("slug", "title", "text")}
        with pytest.raises(ApprovalExpired) as refused:
            app.drafts.create_draft(team.agent, content, issued.token, f"op-{proposal}")
        assert refused.value.details["reason"] == "withdrawn"


def test_the_api_twin_approves_with_the_csrf_header(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    proposed = app.drafts.propose(team.agent, {"slug": "notes/api", "title": "Via API", "text": "x"})
    person = visitors.log_in_team(team)
    shown = person.http.get(f"/api/drafts/proposals/{proposed['proposal']}").json()
    answer = person.http.post(f"/api/drafts/proposals/{proposed['proposal']}/approve",
                              json={"fingerprint": shown["shown_fingerprint"]}, headers={"X-CSRF-Token": person.csrf()})
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "no-store", "the token is in this answer: no cache keeps it"
    issued = answer.json()
    collected = app.drafts.proposal_status(team.agent, proposed["proposal"], proposed["collection_key"])
    assert collected["approval"] == issued["approval"]
    assert issued["fingerprint"] == shown["shown_fingerprint"] == shown["fingerprint"]


# In a real browser --------------------------------------------------------------------------------


def mcp(base_url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The SDK's MCP client over streamable HTTP with the agent's token, in a thread of its own (Playwright's
    sync API holds this thread's event loop)."""
    async def run() -> list[dict[str, Any]]:
        answers = []
        async with (create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
                    Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client):
            for tool, arguments in calls:
                result = await client.call_tool(tool, arguments)
                answers.append(tool_payload(result))
        return answers

    with ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(anyio.run, run).result(timeout=120)


@pytest.mark.browser
def test_a_human_approves_in_the_browser_and_the_agent_creates_the_draft(
        browser_page: BrowserSession, app: Armarius, settings: Settings) -> None:
    page, team, base_url = browser_page.page, browser_page.team, browser_page.base_url
    content = {"slug": "notes/launch", "title": "Launch of Pay\u200bpal \u202eevil",
               "text": "Send the invoice to p\u0430ypal.example\nAmount: 10\u2066 000\u2069 EUR\n"}
    [proposed] = mcp(base_url, team.agent_token, [("propose_draft", content)])
    page.goto(f"/drafts/proposals/{proposed['proposal']}")
    assert page.get_by_role("heading", level=1).inner_text() == f"Draft proposal {proposed['proposal']}"
    markers = page.locator("#proposal-title mark.reveal, #proposal-text mark.reveal").all_inner_texts()
    assert markers == ["⟦U+200B ZERO WIDTH SPACE⟧", "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧",
                       "⟦U+0430 CYRILLIC SMALL LETTER A⟧", "⟦U+2066 LEFT-TO-RIGHT ISOLATE⟧",
                       "⟦U+2069 POP DIRECTIONAL ISOLATE⟧"]
    assert proposed["fingerprint_short"] in page.locator(".fingerprint").inner_text()
    docs_screenshot(page, app, "draft-proposal")
    page.get_by_role("button", name="Approve exactly this content").click()
    page.wait_for_load_state()
    assert page.get_by_role("heading", level=1).inner_text() == f"Proposal {proposed['proposal']} approved"
    token = page.get_by_label(re.compile("Single-use approval token")).input_value()
    assert token.startswith("arm_")
    # The agent collects the same token, and the MCP client creates the draft with the one the page showed.
    collected, created = mcp(base_url, team.agent_token, [
        ("proposal_status", {"proposal": proposed["proposal"], "collection_key": proposed["collection_key"]}),
        ("create_draft", {**content, "approval": token, "operation": "op-browser-1"}),
    ])
    assert collected["approval"] == token
    assert created == {"slug": "notes/launch", "draft": True, "replayed": False}
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT slug, title, text FROM drafts") == [(content["slug"], content["title"],
                                                                     content["text"])]
        assert sql.rows("SELECT outcome FROM approvals") == [("consumed",)]
    page.goto(f"/drafts/proposals/{proposed['proposal']}")
    assert page.locator(".state").first.inner_text() == "drafted"
    assert "Nothing is left to decide" in page.locator("main").inner_text()
    assert token not in page.content()


@pytest.mark.browser
def test_rejecting_in_the_browser_by_keyboard(browser_page: BrowserSession, app: Armarius) -> None:
    page, team = browser_page.page, browser_page.team
    proposal = propose(app, team)
    page.goto(f"/drafts/proposals/{proposal}")
    page.get_by_label("Note for the proposing agent (what to change)").fill("Name the launch date.")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Reject"
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/drafts/proposals/{proposal}")
    assert page.get_by_role("status").inner_text() == f"Proposal {proposal} was rejected."
    assert app.drafts.proposal(team.human, proposal)["note"] == "Name the launch date."


def test_an_agent_token_never_opens_the_drafts_pages(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    proposal = propose(app, team)
    with visitors.client(headers={"Authorization": f"Bearer {team.agent_token}"}) as agent:
        pages = [agent.get("/drafts"), agent.get(f"/drafts/proposals/{proposal}")]
        api = agent.get(f"/api/drafts/proposals/{proposal}")
        approve = agent.post(f"/api/drafts/proposals/{proposal}/approve", json={"fingerprint": "0" * 64})
    assert [answer.status_code for answer in [*pages, api, approve]] == [403] * 4
    assert isinstance(api, httpx.Response)
    assert api.json()["error"]["code"] == "not_allowed"
    assert app.drafts.proposal(team.human, proposal)["status"] == "pending"


@pytest.mark.browser
def test_the_drafts_pages_fit_a_phone_screen(browser_page: BrowserSession, app: Armarius) -> None:
    page, team = browser_page.page, browser_page.team
    proposal = propose(app, team, "notes/a-rather-long-slug-that-goes-on/and-on-and-on-without-a-break",
                       HOSTILE_TITLE, HOSTILE_TEXT + "x" * 300 + "\n")
    page.set_viewport_size({"width": 375, "height": 740})
    for path in ("/drafts", f"/drafts/proposals/{proposal}"):
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} is wider than a phone screen"
    page.get_by_role("button", name="Approve exactly this content").click()
    page.wait_for_load_state()
    assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
