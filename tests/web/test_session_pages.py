"""The session pages (/sessions, /sessions/<id>, a capture) and their JSON twins, over real HTTP and in a real
Chromium: status, budget, evidence with captures readable in the page, resume (refused before
retry_not_before, with the wait shown), take over, raise the budget, close, rebuild files; and every refusal
changing nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.auth.permissions import Kind, Role
from armarius.errors import SessionBlocked
from tests.helpers import OPERATOR, OwnerSQL, Team, make_team
from tests.research.conftest import research_app  # noqa: F401  (a fixture used here)
from tests.research.repos import Repo, write_config
from tests.web.conftest import log_in_with_the_form
from tests.web.people import Person, Visitors

SEARCH = {"kind": "source.search", "text": "def "}
ADMIN = ("alpha-admin", "admin correct horse battery")
READER = ("alpha-reader", "reader correct horse battery")
HOSTILE_SUBJECT = "Why <script>window.pwned = 1</script> fails\u202e \u200bsilently"
TABLES = ("sessions", "session_checkpoints", "session_reservations", "evidence_records", "captures", "audit_events")


@dataclass
class Lab:
    research: Armarius  # the same store as the server's application, with the git source configured
    repo: Repo
    team: Team


@pytest.fixture
def lab(app: Armarius, research_app: tuple[Armarius, Repo]) -> Lab:  # noqa: F811
    research, repo = research_app
    team = make_team(app)
    for (name, password), role in ((ADMIN, Role.ADMIN), (READER, Role.READER)):
        app.directory.add_principal(name, Kind.HUMAN, workspace="alpha", role=role, by=OPERATOR, password=password)
    return Lab(research, repo, team)


def snapshot(lab: Lab) -> dict[str, Any]:
    with OwnerSQL(lab.research.settings) as sql:
        found: dict[str, Any] = {table: sorted(map(repr, sql.rows(f"SELECT * FROM {table}"))) for table in TABLES[:-1]}
        found["audit_events"] = sql.count("audit_events")
    return found


def blocked_session(lab: Lab, *, minutes_ago: float = 0, subject: str = "Where is the order handler?") -> int:
    """A session of the agent with one answer as evidence, then blocked by a missing repository, as the sessions'
    clock saw it ``minutes_ago``: retry_not_before is 60 s after that."""
    sessions = lab.research.sessions
    sessions.clock = lambda: datetime.now(UTC) - timedelta(minutes=minutes_ago)
    session = int(sessions.open(lab.team.agent, subject, budget=5)["session"])
    sessions.query(lab.team.agent, session, SEARCH)
    moved = lab.repo.path.with_name("moved-away")
    lab.repo.path.rename(moved)
    try:
        with pytest.raises(SessionBlocked):
            sessions.query(lab.team.agent, session, {"kind": "source.search", "text": "import"})
    finally:
        moved.rename(lab.repo.path)
    return session


def form(person: Person, **fields: str) -> dict[str, str]:
    return {"csrf": person.csrf(), **fields}


# Reading -----------------------------------------------------------------------------------------


def test_a_session_page_shows_status_budget_evidence_and_captures(lab: Lab, visitors: Visitors) -> None:
    session = blocked_session(lab, subject=HOSTILE_SUBJECT)
    person = visitors.log_in_team(lab.team)
    page = person.http.get(f"/sessions/{session}").text
    history = lab.research.sessions.history(lab.team.human, session)
    assert person.http.get(f"/api/sessions/{session}").json() == {
        **history, "fact_revisions": {}}  # JSON object keys are strings; there are no facts
    assert "Status: <span class=\"badge status-blocked\">blocked</span></strong> (research_unavailable)" in page
    assert "1 used of 5, 1 held; <strong>3 left</strong>" in page
    assert "wait " in page
    assert "Resume session" in page
    # The subject, escaped and revealed; nothing of it runs.
    assert "<script>" not in page
    assert "\u202e" not in page
    assert "\u200b" not in page
    assert ('Why &lt;script&gt;window.pwned = 1&lt;/script&gt; fails<mark class="reveal">⟦U+202E RIGHT-TO-LEFT '
            'OVERRIDE⟧</mark> <mark class="reveal">⟦U+200B ZERO WIDTH SPACE⟧</mark>silently') in page
    # The capture of record 1, read from its file and shown escaped in the page.
    (record,) = history["evidence"]["records_list"]
    capture = lab.research.sessions.session_folder("alpha", session) / f"{record['capture']}.json"
    assert f'<a href="/sessions/{session}/captures/{record["capture"]}">' in page
    assert "<summary>Show the capture of record 1</summary>" in page
    assert '&#34;kind&#34;: &#34;source.search&#34;' in page
    assert '&#34;text&#34;: &#34;def &#34;' in page
    assert "All 1 capture files and 1 records agree with the store." in page
    whole = person.http.get(f"/sessions/{session}/captures/{record['capture']}")
    twin = person.http.get(f"/api/sessions/{session}/captures/{record['capture']}").json()
    assert whole.status_code == 200
    assert "The file holds exactly this capture" in whole.text
    assert twin["document"]["request"] == SEARCH
    assert twin["size"] == capture.stat().st_size
    assert person.http.get(f"/sessions/{session}/captures/{'0' * 64}").status_code == 404
    assert person.http.get(f"/sessions/{session}/captures/..%2f..%2fetc").status_code in (400, 404)
    assert person.http.get(f"/sessions/{session}/captures/not-an-id").status_code == 400


def test_an_altered_capture_file_is_shown_as_such_and_rebuilt(lab: Lab, visitors: Visitors) -> None:
    session = blocked_session(lab)
    (record,) = lab.research.sessions.history(lab.team.human, session)["evidence"]["records_list"]
    path = lab.research.sessions.session_folder("alpha", session) / f"{record['capture']}.json"
    original = path.read_bytes()
    path.write_bytes(b'{"forged": "<b>yes</b>"}')
    person = visitors.log_in_team(lab.team)
    page = person.http.get(f"/sessions/{session}").text
    assert "<strong class=\"problem\">file altered</strong>" in page
    assert "forged" not in page
    assert "<strong>modified_file</strong>" in page
    twin = person.http.get(f"/api/sessions/{session}/captures/{record['capture']}")
    assert twin.status_code == 409
    assert twin.json()["error"]["details"]["file"] == "altered"
    rebuilt = person.http.post(f"/sessions/{session}/rebuild-files", data=form(person), follow_redirects=True)
    assert "1 capture file written again from the store." in rebuilt.text
    assert path.read_bytes() == original
    assert "All 1 capture files and 1 records agree with the store." in rebuilt.text


def test_the_list_pages_and_filters(lab: Lab, visitors: Visitors, monkeypatch: pytest.MonkeyPatch) -> None:
    from armarius.web.pages import sessions as pages

    monkeypatch.setattr(pages, "PAGE_SIZE", 2)
    opened = [int(lab.research.sessions.open(lab.team.agent, f"Question {n}")["session"]) for n in range(3)]
    blocked = blocked_session(lab)
    person = visitors.log_in_team(lab.team)
    first = person.http.get("/sessions").text
    assert [int(n) for n in re.findall(r'<a href="/sessions/(\d+)">', first)] == [blocked, opened[2]]
    older = re.search(r'<a href="(/sessions\?after=\d+)" rel="next">', first)
    assert older
    assert [int(n) for n in re.findall(r'<a href="/sessions/(\d+)">', person.http.get(older.group(1)).text)] == \
        [opened[1], opened[0]]
    only_blocked = person.http.get("/sessions", params={"status": "blocked"}).text
    assert [int(n) for n in re.findall(r'<a href="/sessions/(\d+)">', only_blocked)] == [blocked]
    twin = person.http.get("/api/sessions", params={"q": "question 1"}).json()
    assert [item["session"] for item in twin["items"]] == [opened[1]]
    assert person.http.get("/sessions", params={"status": "asleep"}).status_code == 400


# Deciding over HTTP ------------------------------------------------------------------------------


def test_a_resume_before_retry_not_before_is_refused_with_the_wait(lab: Lab, visitors: Visitors) -> None:
    session = blocked_session(lab)  # blocked just now: resumable in about 60 s
    person = visitors.log_in_team(lab.team)
    page = person.http.get(f"/sessions/{session}").text
    wait = re.search(r"<strong>wait (\d+) s</strong> more", page)
    assert wait
    assert 50 <= int(wait.group(1)) <= 60
    before = snapshot(lab)
    refused = person.http.post(f"/sessions/{session}/resume", data=form(person, note="the repository is back"))
    twin = person.http.post(f"/api/sessions/{session}/resume", json={}, headers={"X-CSRF-Token": person.csrf()})
    assert refused.status_code == 409
    assert re.search(rf"Session {session} may be resumed from \S+, in \d+ s\.", refused.text)
    assert twin.status_code == 409
    assert 0 < twin.json()["error"]["details"]["wait_seconds"] <= 60
    assert snapshot(lab) == before
    assert lab.research.sessions.show(lab.team.human, session)["status"] == "blocked"


def test_a_reader_cannot_resume_and_an_editor_cannot_take_over(lab: Lab, visitors: Visitors) -> None:
    session = blocked_session(lab, minutes_ago=5)
    reader, editor = visitors.log_in(*READER, "alpha"), visitors.log_in_team(lab.team)
    before = snapshot(lab)
    assert reader.http.get(f"/sessions/{session}").status_code == 404, "another's session does not exist for them"
    answers = [reader.http.post(f"/sessions/{session}/{action}", data=form(reader, budget="9", confirm="yes"))
               for action in ("resume", "budget", "takeover")]
    answers.append(editor.http.post(f"/sessions/{session}/takeover", data=form(editor, confirm="yes")))
    for answer in answers:
        assert answer.status_code == 403
        assert "may not do this" in answer.text
    closed = reader.http.post(f"/sessions/{session}/close", data=form(reader, confirm="yes"))
    assert closed.status_code == 404
    assert snapshot(lab) == before
    assert "Take over session" not in editor.http.get(f"/sessions/{session}").text


def test_raise_the_budget_take_over_and_close(lab: Lab, visitors: Visitors) -> None:
    session = int(lab.research.sessions.open(lab.team.agent, "Budget, owner, end", budget=3)["session"])
    admin = visitors.log_in(*ADMIN, "alpha")
    page = admin.http.get(f"/sessions/{session}").text
    assert 'min="4"' in page
    assert "Take over session" in page
    assert "Resume session" not in page
    lower = admin.http.post(f"/sessions/{session}/budget", data=form(admin, budget="2"))
    assert lower.status_code == 400
    assert "above the current 3" in lower.text
    raised = admin.http.post(f"/sessions/{session}/budget", data=form(admin, budget="7"), follow_redirects=True)
    assert "has a budget of 7 actions now" in raised.text
    assert "0 used of 7" in raised.text
    taken = admin.http.post(f"/sessions/{session}/takeover", data=form(admin, confirm="yes"), follow_redirects=True)
    assert "is now yours" in taken.text
    assert lab.research.sessions.show(lab.team.human, session)["owner"] == "human:alpha-admin"
    closed = admin.http.post(f"/sessions/{session}/close", data=form(admin, note="answered", confirm="yes"),
                             follow_redirects=True)
    assert "is closed; its evidence stays readable" in closed.text
    assert "<h2 id=\"decide-heading\">" not in closed.text
    checkpoints = lab.research.sessions.history(lab.team.human, session)["checkpoints"]
    assert [(point["event"], point["actor"]) for point in checkpoints] == [
        ("opened", "agent:alpha-agent"), ("budget_raised", "human:alpha-admin"), ("taken_over", "human:alpha-admin"),
        ("closed", "human:alpha-admin")]
    assert checkpoints[-1]["details"]["note"] == "answered"
    again = admin.http.post(f"/api/sessions/{session}/takeover", headers={"X-CSRF-Token": admin.csrf()})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "session_closed"


# In a real browser --------------------------------------------------------------------------------


@pytest.fixture
def editor_page(chromium: Any, lab: Lab, base_url: str) -> Iterator[Any]:
    context = chromium.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        log_in_with_the_form(page, "alpha", "alpha-human", lab.team.human_password)
        page.wait_for_url(f"{base_url}/")
        yield page
    finally:
        context.close()


@pytest.mark.browser
def test_a_human_resumes_a_blocked_session_in_the_browser(editor_page: Any, lab: Lab) -> None:
    page = editor_page
    session = blocked_session(lab, minutes_ago=5)  # retry_not_before passed four minutes ago
    page.goto("/?kind=sessions")
    page.get_by_role("link", name=f"Session {session}").click()
    assert page.get_by_role("heading", level=1).inner_text() == f"Session {session}"
    assert "blocked (research_unavailable)" in page.locator("#session-status").inner_text()
    capture = page.locator("#record-1 details")
    assert not capture.locator("pre").is_visible()
    capture.locator("summary").click()
    shown = capture.locator("pre").inner_text()
    assert '"kind": "source.search"' in shown
    assert '"text": "def "' in shown
    page.get_by_label("Note (optional)").first.fill("The repository <is> back")
    page.get_by_role("button", name=f"Resume session {session}").click()
    page.wait_for_load_state()
    assert page.get_by_role("status").inner_text() == f"Session {session} resumed: it is open again."
    assert page.locator("#session-status").inner_text().startswith("Status: open")
    assert "Resume session" not in page.locator("main").inner_text()
    shown_now = lab.research.sessions.history(lab.team.human, session)
    assert shown_now["status"] == "open"
    assert shown_now["budget"]["held"] == 1
    resumed = shown_now["checkpoints"][-1]
    assert (resumed["event"], resumed["actor"], resumed["details"]["note"]) == (
        "resumed", "human:alpha-human", "The repository <is> back")
    assert "The repository &lt;is&gt; back" in page.content()


@pytest.mark.browser
def test_a_session_page_is_readable_at_phone_width(editor_page: Any, lab: Lab) -> None:
    page = editor_page
    session = blocked_session(lab, subject="A question " * 30)
    page.set_viewport_size({"width": 375, "height": 740})
    page.goto(f"/sessions/{session}")
    page.locator("#record-1 summary").click()
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, "nothing wider than a phone screen"
    assert page.get_by_role("button", name=f"Resume session {session}").is_visible()


def test_facts_are_shown_with_the_capture_and_pointer_they_come_from(app: Armarius, visitors: Visitors,
                                                                      tmp_path: Path) -> None:
    from tests.research.world import build_sqlite_world, database_entry, password_environ
    from tests.sessions.test_enrichment import QUEST, QUEST_TEXT, enrichment

    world = build_sqlite_world(tmp_path / "world.sqlite")
    path = write_config(app.settings.data_dir / "world.toml", databases=[database_entry(world)])
    path.write_text(path.read_text(encoding="utf-8") + enrichment([QUEST], [QUEST_TEXT]), encoding="utf-8")
    research = open_app(replace(app.settings, research_config=Path("world.toml"), environ=password_environ(world)))
    try:
        team = make_team(app)
        session = int(research.sessions.open(team.agent, "Quest 1?", inputs=[{"entity_type": "quest", "id": 1}])[
            "session"])
        found = research.sessions.history(team.human, session)["fact_revisions"][1]
    finally:
        research.close()
    page = visitors.log_in_team(team).http.get(f"/sessions/{session}").text
    assert "Facts of input revision 1, each with the capture" in page
    table = page.split('class="facts-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>\s*<td>(\d+)</td><td>(\w+)</td>", table)
    assert [(int(seq), kind) for seq, kind in rows] == [(fact["seq"], fact["kind"]) for fact in found]
    cited = next(fact for fact in found if fact["pointer"])
    assert (f'<a href="/sessions/{session}/captures/{cited["capture"]}"><code>{cited["capture"][:12]}…</code></a> '
            f'<code class="revealed">{cited["pointer"]}</code>') in page
