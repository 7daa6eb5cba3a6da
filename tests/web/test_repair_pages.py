"""The repair pages (/repairs, /repairs/<id>) and their JSON twins, over real HTTP and in a real Chromium: the
conflict and each alternative's diff and complete result, revealed; choose (apply, with the takeover
confirmed), reject, reformulate, retry and "continue with activation pending"; and every refusal changing
nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from armarius.app import Armarius
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from tests.helpers import OPERATOR
from tests.repairs.conftest import ADMINS, CORRECT_BODY, ENTRY, ENTRY_BODY, UNIT, Desk, make_desk, state
from tests.web.conftest import docs_screenshot, log_in_with_the_form
from tests.web.people import Person, Visitors

READER = ("alpha-reader", "reader correct horse battery")
#: Markup, a script, a right-to-left override and a zero-width space.
HOSTILE = "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"> Pay\u200bpal \u202eevil"


@pytest.fixture
def desk(app: Armarius) -> Desk:
    desk = make_desk(app)
    app.directory.add_principal(READER[0], Kind.HUMAN, workspace="alpha", role=Role.READER, by=OPERATOR,
                                password=READER[1])
    return desk


def admin(visitors: Visitors, name: str = "alpha-admin") -> Person:
    return visitors.log_in(name, ADMINS[name], "alpha")


def form(person: Person, **fields: str) -> dict[str, str]:
    return {"csrf": person.csrf(), **fields}


def flash_of(page: str) -> str:
    found = re.search(r'<p class="flash flash-\w+">(.*?)</p>', page, re.DOTALL)
    assert found, page
    return found.group(1)


def two_alternatives(desk: Desk, **conflict: Any) -> tuple[int, int]:
    """A session of the agent (open) and a repair of the entry with two alternatives in it."""
    session = desk.open_session()
    view = desk.app.repairs.prepare(desk.agent, session, conflict.get("conflict", "The captured config names "
                                    "another host."), [desk.alternative(), desk.alternative(
                                        "Staging runs on **stage-09**.", title="Staging, the other way")])
    return session, int(view["repair"])


# Reading -----------------------------------------------------------------------------------------


def test_a_proposal_shows_each_alternative_as_a_diff_and_in_full(desk: Desk, visitors: Visitors) -> None:
    session, repair = two_alternatives(desk)
    person = visitors.log_in_team(desk.team)  # an editor: may read, reject, reformulate; not apply
    page = person.http.get(f"/repairs/{repair}").text
    twin = person.http.get(f"/api/repairs/{repair}").json()
    assert twin == desk.app.repairs.show(desk.human, repair)
    assert "<h1>Repair" in page
    assert "The captured config names another host." in page
    assert f'<span class="del">-{ENTRY_BODY}</span>' in page
    assert f'<span class="add">+{CORRECT_BODY}</span>' in page
    assert '<span class="add">+# Staging, the other way</span>' in page
    assert page.count("Resulting content, complete") == 2
    assert f'<pre class="revealed result"># Where staging runs\ntags: ops, staging\n\n{CORRECT_BODY}</pre>' in page
    assert f'href="/sessions/{session}"' in page
    assert f'href="/entries/{ENTRY}"' in page
    assert "Applying this option needs an administrator (memory.manage)." in page
    assert "Choose and apply" not in page
    assert "Take over and apply" not in page
    assert "Reject all alternatives" in page
    assert "Ask for a reformulation" in page
    assert '<td>proposed</td>' in page, "the receipt's history"


def test_the_list_pages_and_filters_by_status(desk: Desk, visitors: Visitors) -> None:
    made = [two_alternatives(desk)[1] for _ in range(3)]
    desk.app.repairs.reject(desk.human, made[0], "no")
    person = admin(visitors)
    everything = person.http.get("/repairs").text
    proposed = person.http.get("/repairs", params={"status": "proposed"}).text
    twin = person.http.get("/api/repairs", params={"status": "rejected"}).json()
    assert [int(found) for found in re.findall(r'<a href="/repairs/(\d+)">', everything)] == made[::-1]
    assert [int(found) for found in re.findall(r'<a href="/repairs/(\d+)">', proposed)] == made[:0:-1]
    assert [item["repair"] for item in twin["items"]] == [made[0]]
    assert twin["next"] is None
    assert person.http.get("/repairs", params={"status": "lost"}).status_code == 400
    assert person.http.get("/repairs", params={"after": "x"}).status_code == 400


def test_the_list_is_paged_never_whole(desk: Desk, visitors: Visitors, monkeypatch: pytest.MonkeyPatch) -> None:
    from armarius.web.pages import repairs as pages

    monkeypatch.setattr(pages, "PAGE_SIZE", 2)
    made = [two_alternatives(desk)[1] for _ in range(3)]
    person = admin(visitors)
    first = person.http.get("/repairs").text
    assert [int(found) for found in re.findall(r'<a href="/repairs/(\d+)">', first)] == made[:0:-1]
    older = re.search(r'<a href="(/repairs\?after=\d+)" rel="next">', first)
    assert older
    second = person.http.get(older.group(1)).text
    assert [int(found) for found in re.findall(r'<a href="/repairs/(\d+)">', second)] == made[:1]
    assert 'rel="next"' not in second
    assert "← Newest" in second


def test_a_session_page_lists_its_newest_repairs_and_says_when_older_ones_are_left_out(
        desk: Desk, visitors: Visitors, monkeypatch: pytest.MonkeyPatch) -> None:
    from armarius.repairs import service

    monkeypatch.setattr(service, "SESSION_REPAIRS_SHOWN", 2)
    session = desk.open_session()
    made = [int(desk.app.repairs.prepare(desk.agent, session, f"Observation {number}.",
                                         [desk.alternative()])["repair"]) for number in range(3)]
    person = admin(visitors)
    page = person.http.get(f"/sessions/{session}").text
    shown = re.search(r'<section aria-labelledby="repairs-heading">(.*?)</section>', page, re.DOTALL)
    assert shown
    assert [int(found) for found in re.findall(r'<a href="/repairs/(\d+)">', shown.group(1))] == made[:0:-1]
    assert "The newest 2 are listed; the session's older repairs are on the" in shown.group(1)
    monkeypatch.setattr(service, "SESSION_REPAIRS_SHOWN", 3)
    page = person.http.get(f"/sessions/{session}").text
    assert "older repairs" not in page


# Deciding over HTTP ------------------------------------------------------------------------------


def test_a_reader_and_an_editor_cannot_choose_and_nothing_changes(desk: Desk, visitors: Visitors) -> None:
    _, repair = two_alternatives(desk)
    reader, editor = visitors.log_in(*READER, "alpha"), visitors.log_in_team(desk.team)
    before = state(desk)
    answers = [person.http.post(f"/repairs/{repair}/apply", data=form(person, option="opt-1", take_over="yes"))
               for person in (reader, editor)]
    twins = [person.http.post(f"/api/repairs/{repair}/apply", json={"option": "opt-1", "take_over": True},
                              headers={"X-CSRF-Token": person.csrf()}) for person in (reader, editor)]
    retried = reader.http.post(f"/repairs/{repair}/retry", data=form(reader))
    rejected = reader.http.post(f"/repairs/{repair}/reject", data=form(reader, comment="no"))
    for answer in (*answers, retried, rejected):
        assert answer.status_code == 403
        assert "may not do this" in answer.text
    for twin in twins:
        assert twin.status_code == 403
        assert twin.json()["error"]["code"] == "not_allowed"
    assert state(desk) == before
    assert desk.app.memory.read(desk.agent, ENTRY)["body"] == ENTRY_BODY
    assert reader.http.get(f"/repairs/{repair}").status_code == 404, "a reader does not see repairs"


def test_an_editor_rejects_and_asks_for_a_reformulation(desk: Desk, visitors: Visitors) -> None:
    _, first = two_alternatives(desk)
    _, second = two_alternatives(desk)
    editor = visitors.log_in_team(desk.team)
    before = state(desk)
    blank = editor.http.post(f"/repairs/{second}/reformulate", data=form(editor, comment="  "))
    assert blank.status_code == 400
    assert state(desk) == before
    rejected = editor.http.post(f"/repairs/{first}/reject", data=form(editor, comment=""), follow_redirects=True)
    assert rejected.url.path == f"/repairs/{first}"
    assert "Repair" in flash_of(rejected.text)
    assert "you rejected every alternative. It is rejected." in rejected.text
    reformulated = editor.http.post(f"/api/repairs/{second}/reformulate", json={"comment": "Name the cloud account."},
                                    headers={"X-CSRF-Token": editor.csrf()})
    assert reformulated.status_code == 200
    assert (reformulated.json()["status"], reformulated.json()["reformulation_requested"]) == ("rejected", True)
    shown = {repair: desk.app.repairs.show(desk.admin, repair) for repair in (first, second)}
    assert (shown[first]["status"], shown[first]["comment"], shown[first]["decided_by"]) == (
        "rejected", None, "human:alpha-human")
    assert shown[second]["comment"] == "Name the cloud account."
    page = editor.http.get(f"/repairs/{second}").text
    assert "a reformulation was requested" in page
    assert "Name the cloud account." in page
    assert "Reject all alternatives" not in page, "decided: no more decisions"
    assert desk.app.memory.read(desk.agent, ENTRY)["body"] == ENTRY_BODY


def test_an_administrator_must_confirm_the_takeover_and_then_applies(desk: Desk, visitors: Visitors) -> None:
    session, repair = two_alternatives(desk)
    person = admin(visitors)
    page = person.http.get(f"/repairs/{repair}").text
    assert page.count('name="take_over" value="yes" required') == 2
    assert "Take over and apply opt-1" in page
    before = state(desk)
    refused = person.http.post(f"/repairs/{repair}/apply", data=form(person, option="opt-1"))
    assert refused.status_code == 403
    assert "take it over first" in refused.text
    assert state(desk) == before
    applied = person.http.post(f"/repairs/{repair}/apply", data=form(person, option="opt-2", take_over="yes"),
                               follow_redirects=True)
    assert "you chose opt-2. It is active. Applied: revision 2" in flash_of(applied.text)
    assert 'class="outcome outcome-success"' in applied.text
    entry = desk.app.memory.read(desk.agent, ENTRY)
    assert (entry["revision"], entry["title"], entry["body"], entry["curated"]) == (
        2, "Staging, the other way", "Staging runs on **stage-09**.", True)
    assert desk.app.sessions.show(desk.admin, session)["owner"] == "human:alpha-admin"
    again = person.http.post(f"/repairs/{repair}/apply", data=form(person, option="opt-1"))
    assert again.status_code == 409


def test_an_evidence_correction_left_pending_is_not_shown_as_a_success(desk: Desk, visitors: Visitors) -> None:
    session = desk.open_session()
    repair = int(desk.prepare(session, desk.unit_alternative())["repair"])
    desk.app.sessions.close(desk.agent, session)  # a closed session needs no takeover
    person = admin(visitors)
    page = person.http.get(f"/repairs/{repair}").text
    assert "Take over" not in page
    assert 'name="continue_pending" value="yes"' in page
    pending = person.http.post(f"/repairs/{repair}/apply",
                               data=form(person, option="opt-1", continue_pending="yes"), follow_redirects=True)
    assert '<p class="flash flash-error">' in pending.text
    assert "It is pending_activation. NOT a success" in pending.text
    assert 'class="outcome outcome-warning"' in pending.text
    assert "— <strong>NOT a success</strong>" in pending.text
    assert "Retry (activate the saved correction)" in pending.text
    assert "Continue with activation pending" in pending.text
    deferred = person.http.post(f"/repairs/{repair}/continue-pending", data=form(person), follow_redirects=True)
    assert "left pending on purpose (NOT a success)" in deferred.text
    assert desk.app.repairs.show(desk.admin, repair)["activation_deferred"] is True
    assert desk.app.evidence.current(desk.admin, UNIT).active_revision == 1
    retried = person.http.post(f"/repairs/{repair}/retry", data=form(person), follow_redirects=True)
    assert "It is active." in flash_of(retried.text)
    assert desk.app.evidence.current(desk.admin, UNIT).active_revision == 2
    history = [event["event"] for event in desk.app.repairs.show(desk.admin, repair)["history"]]
    assert history == ["proposed", "applying", "pending_activation", "activation_deferred", "activation_deferred",
                       "retried", "activated"]


def test_hostile_content_in_a_proposal_is_escaped_and_revealed(desk: Desk, visitors: Visitors) -> None:
    session = desk.open_session()
    repair = int(desk.app.repairs.prepare(desk.agent, session, HOSTILE, [desk.alternative(
        f"{HOSTILE}\nsecond line", title="<b onmouseover=alert(1)>bold</b>", rationale=HOSTILE)])["repair"])
    page = visitors.log_in_team(desk.team).http.get(f"/repairs/{repair}").text
    assert "<script>" not in page
    assert "<img" not in page
    assert "<b onmouseover" not in page
    assert "\u202e" not in page
    assert "\u200b" not in page
    escaped = "&lt;script&gt;window.pwned = 1&lt;/script&gt;&lt;img src=x onerror=&#34;window.pwned = 2&#34;&gt; Pay"
    revealed = (escaped + '<mark class="reveal">⟦U+200B ZERO WIDTH SPACE⟧</mark>pal '
                '<mark class="reveal">⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧</mark>evil')
    assert page.count(revealed) == 4, "the conflict, the rationale, the diff's line and the complete result"
    assert '<span class="add">+# &lt;b onmouseover=alert(1)&gt;bold&lt;/b&gt;</span>' in page


# In a real browser --------------------------------------------------------------------------------


@pytest.fixture
def admin_page(chromium: Any, desk: Desk, base_url: str) -> Iterator[Any]:
    context = chromium.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        log_in_with_the_form(page, "alpha", "alpha-admin", ADMINS["alpha-admin"])
        page.wait_for_url(f"{base_url}/")
        yield page
    finally:
        context.close()


@pytest.mark.browser
def test_an_administrator_chooses_an_alternative_in_the_browser_and_the_entry_changes(
        admin_page: Any, desk: Desk, settings: Settings) -> None:
    page = admin_page
    session, repair = two_alternatives(desk, conflict="The captured config names host stage-07, not stage-01.")
    page.get_by_role("link", name="Repairs", exact=True).click()
    page.get_by_role("link", name=f"Repair {repair}").click()
    assert page.get_by_role("heading", level=1).inner_text() == f"Repair {repair}"
    first = page.locator("article#opt-1")
    assert first.locator("pre.diff .del").inner_text() == f"-{ENTRY_BODY}"
    assert first.locator("pre.diff .add").inner_text() == f"+{CORRECT_BODY}"
    assert first.locator("pre.result").inner_text().endswith(CORRECT_BODY)
    top, bottom = page.get_by_role("heading", level=1).bounding_box(), first.bounding_box()
    assert top
    assert bottom
    docs_screenshot(page, desk.app, "repair-proposal", clip={
        "x": 0, "y": top["y"] - 8, "width": 1280, "height": bottom["y"] + bottom["height"] - top["y"] + 24})
    choose = first.get_by_role("button", name="Take over and apply opt-1")
    choose.click()  # the takeover is not confirmed yet: the browser does not send the form
    assert page.url.endswith(f"/repairs/{repair}")
    assert desk.app.repairs.show(desk.admin, repair)["status"] == "proposed"
    first.get_by_label(re.compile("Take session .* over from agent:alpha-agent first")).check()
    choose.click()
    page.wait_for_load_state()
    assert "you chose opt-1. It is active." in page.get_by_role("status").inner_text()
    assert page.locator("#outcome").inner_text().startswith("Status: active")
    assert page.locator("article#opt-1 .badge").inner_text() == "chosen"
    entry = desk.app.memory.read(desk.agent, ENTRY)
    assert (entry["revision"], entry["body"], entry["curated"]) == (2, CORRECT_BODY, True)
    shown = desk.app.repairs.show(desk.admin, repair)
    assert (shown["status"], shown["chosen_option"], shown["decided_by"]) == ("active", "opt-1", "human:alpha-admin")
    assert desk.app.sessions.show(desk.admin, session)["owner"] == "human:alpha-admin"
    history = page.locator("table.history tbody tr td:nth-child(2)").all_inner_texts()
    assert history == ["proposed", "applied"]


# The JSON twins keep their document -----------------------------------------------------------------


def test_the_twins_keep_their_document_for_an_administrator(desk: Desk, visitors: Visitors, base_url: str) -> None:
    """Schemathesis against the repair, session and evidence twins as an administrator (who passes the role checks
    that stop the editor of test_openapi_conformance): no server error, no response off the document."""
    person = admin(visitors)
    headers = {"Cookie": f"armarius_session={person.cookie}", "X-CSRF-Token": person.csrf()}
    schema = schemathesis.openapi.from_url(f"{base_url}/api/openapi.json")
    checked = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if not operation.path.startswith(("/api/repairs", "/api/sessions", "/api/evidence")):
            continue

        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case: Any) -> None:
            case.call_and_validate(headers=headers)

        call()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert {"POST /api/repairs/{repair}/apply", "POST /api/sessions/{session}/resume",
            "POST /api/evidence/activate"} <= set(checked)


@pytest.mark.browser
def test_a_proposal_is_readable_at_phone_width(admin_page: Any, desk: Desk) -> None:
    page = admin_page
    _, repair = two_alternatives(desk)
    page.set_viewport_size({"width": 375, "height": 740})
    page.goto(f"/repairs/{repair}")
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, "nothing wider than a phone screen"
    assert page.get_by_role("button", name="Take over and apply opt-2").is_visible()
