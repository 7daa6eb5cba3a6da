"""What the server checks of a posted form itself, whatever the browser checked: the confirmation boxes of a
session's takeover and close and of an evidence unit's review (every required checkbox of the templates is
accounted for), a body over the forms' limit (413, as errors.md says), and text that is not UTF-8 (refused,
never stored with replacement characters). Each refusal changes nothing."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from pathlib import Path

import httpx
import pytest

import armarius.web
from armarius.app import Armarius
from armarius.auth.permissions import Kind, Role
from armarius.errors import InvalidInput
from armarius.memory.service import RememberRequest
from armarius.web.api import BODY_MAX_BYTES as API_BODY_MAX_BYTES
from armarius.web.pages.gate import FORM_MAX_BYTES, Form, confirmed
from tests.helpers import OPERATOR, Team, make_team
from tests.web.people import Person, Visitors
from tests.web.test_gate_security import chain_events
from tests.web.test_http_abuse import port_of, raw, status_of
from tests.web.test_workspace_binding import PageForms, store

ADMIN = ("alpha-admin", "admin correct horse battery")
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def admin_of(app: Armarius, visitors: Visitors) -> tuple[Team, Person]:
    team = make_team(app)
    app.directory.add_principal(ADMIN[0], Kind.HUMAN, workspace="alpha", role=Role.ADMIN, by=OPERATOR,
                                password=ADMIN[1])
    return team, visitors.log_in(*ADMIN, "alpha")


def error_of(page: httpx.Response) -> tuple[str, str]:
    """The error page's message and code."""
    found = re.search(r'<div class="error-box" role="alert">\s*<p>(.*?)</p>\s*<p class="code">Code: <code>(\w+)</code>',
                      page.text, re.DOTALL)
    assert found, page.text
    return html.unescape(found.group(1)), found.group(2)


# The confirmation boxes ------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["takeover", "close"])
def test_a_takeover_or_close_without_its_confirmation_box_is_refused(action: str, app: Armarius,
                                                                      visitors: Visitors) -> None:
    team, person = admin_of(app, visitors)
    session = int(app.sessions.open(team.agent, "An open question")["session"])
    csrf = person.csrf()
    before = store(app)
    answers = [person.http.post(f"/sessions/{session}/{action}", data={"csrf": csrf, **fields})
               for fields in ({}, {"confirm": ""}, {"confirm": "no"}, {"confirm": "on"}, {"note": "x"})]
    for answer in answers:
        assert answer.status_code == 400, answer.text
        message, code = error_of(answer)
        assert code == "invalid_input"
        assert message.startswith("Tick the box that confirms")
    assert store(app) == before
    shown = app.sessions.show(team.agent, session)
    assert (shown["owner"], shown["status"]) == ("agent:alpha-agent", "open")
    done = person.http.post(f"/sessions/{session}/{action}", data={"csrf": csrf, "confirm": "yes"})
    assert done.status_code == 303, done.text
    shown = app.sessions.show(team.human, session)
    assert (shown["owner"] if action == "takeover" else shown["status"]) == (
        "human:alpha-admin" if action == "takeover" else "closed")


#: Ticked or not, as a script may send it: only ``confirm=yes`` (what the templates' boxes send) confirms.
UNCONFIRMED = ({}, {"confirm": ""}, {"confirm": "no"}, {"confirm": "on"}, {"confirm": "YES"}, {"confirm": "yes "})
UNIT = "incident/dns-outage"


def test_an_evidence_review_without_its_confirmation_box_is_refused_and_changes_nothing(
        app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    app.evidence.create(team.human, UNIT, "DNS outage", "The resolver cache expired.\n")
    person = visitors.log_in_team(team)
    shown = PageForms(person.http.get(f"/evidence/units/{UNIT}").text).of(f"/evidence/review/{UNIT}")
    assert shown["confirm"] == "yes", "the page's box sends what the server checks"
    without = {key: value for key, value in shown.items() if key != "confirm"}
    before, events = store(app), len(chain_events(app, "alpha"))
    answers = [person.http.post(f"/evidence/review/{UNIT}", data={**without, **fields}) for fields in UNCONFIRMED]
    for answer in answers:
        assert answer.status_code == 400, answer.text
        message, code = error_of(answer)
        assert code == "invalid_input"
        assert message == "Tick the box that confirms that you read revision 1 as shown, then submit the form again."
    assert store(app) == before, "no row, audit event or file changed"
    assert len(chain_events(app, "alpha")) == events
    unit = app.evidence.current(team.human, UNIT)
    assert (unit.status, unit.reviewed_revision) == ("edited", None)
    # The page's form as a browser sends it, the box ticked: reviewed, and recorded.
    done = person.http.post(f"/evidence/review/{UNIT}", data=shown)
    assert done.status_code == 303, done.text
    unit = app.evidence.current(team.human, UNIT)
    assert (unit.status, unit.reviewed_revision) == ("reviewed", 1)
    assert len(chain_events(app, "alpha")) > events


@pytest.mark.parametrize("pairs", [[(key, value) for key, value in fields.items()] for fields in UNCONFIRMED]
                         + [[("confirm", "no"), ("confirm", "yes")], [("Confirm", "yes")], [("x", "yes")]], ids=repr)
def test_the_confirmation_check_refuses_all_but_confirm_yes_and_names_its_field(pairs: list[tuple[str, str]]) -> None:
    """The one check every page's confirmation box goes through (gate.confirmed): the error the page shows is a
    400 invalid_input naming the field confirm."""
    with pytest.raises(InvalidInput) as refused:
        confirmed(Form(pairs), "the takeover")
    assert refused.value.http_status == 400
    assert refused.value.to_dict(for_agent=False) == {
        "code": "invalid_input", "details": {"field": "confirm"},
        "message": "Tick the box that confirms the takeover, then submit the form again."}
    confirmed(Form([("confirm", "yes"), *pairs]), "the takeover")  # ticked: passes, whatever else the form holds


#: Every required checkbox of the page templates: (template, name, value) and how many. Each one is checked on the
#: server, and shown to be by a test: ``confirm`` with gate.confirmed (the sessions' takeover and close and the
#: evidence review, tested in this module; ``post_button``'s ``confirm_label``), ``take_over`` by the repair
#: service itself (an apply in another principal's open session is refused without it:
#: test_repair_pages.test_an_administrator_must_confirm_the_takeover_and_then_applies). A new one belongs here
#: only with its server-side check and a test that a form without it is refused and changes nothing.
REQUIRED_BOXES = Counter({
    ("evidence/show.html", "confirm", "yes"): 1,
    ("macros.html", "confirm", "yes"): 1,
    ("repairs/show.html", "take_over", "yes"): 1,
    ("sessions/show.html", "confirm", "yes"): 2,
})


def test_every_required_checkbox_of_the_templates_is_one_the_server_checks() -> None:
    folder = Path(armarius.web.__file__).parent / "templates"
    found: Counter[tuple[str, str, str]] = Counter()
    for template in sorted(folder.rglob("*.html")):
        for tag in re.findall(r"<input\b[^>]*>", template.read_text(encoding="utf-8")):
            attributes = dict(re.findall(r'([\w-]+)(?:="([^"]*)")?', tag[len("<input"):]))
            if attributes.get("type") == "checkbox" and "required" in attributes:
                found[(template.relative_to(folder).as_posix(), attributes.get("name", ""),
                       attributes.get("value", ""))] += 1
    assert found == REQUIRED_BOXES


# A body over the forms' limit --------------------------------------------------------------------------


def refused_as_too_large(base_url: str, person: Person, path: str, content_type: str, limit: int, start: bytes, *,
                         csrf: str | None = None) -> bytes:
    """POST to ``path`` a body declared one byte over ``limit``, of which only ``start`` and 1 KiB are sent: the
    answer is 413 and closes the connection before the rest is read. Its body."""
    port = port_of(base_url)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: armarius_session={person.cookie}\r\n"
            + (f"X-CSRF-Token: {csrf}\r\n" if csrf else "")
            + f"Content-Type: {content_type}\r\nContent-Length: {limit + 1}\r\n\r\n").encode()
    answer = raw(port, head + start + b"x" * 1024)
    assert status_of(answer) == 413, answer[:400]
    head_part, _, body = answer.partition(b"\r\n\r\n")
    assert re.search(rb"\r\nconnection: close\r\n", head_part.lower() + b"\r\n")
    return body


def test_a_form_over_its_limit_is_413_request_too_large_before_it_is_read(app: Armarius, visitors: Visitors,
                                                                          base_url: str) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    app.memory.remember(team.agent, RememberRequest("notes/big", "Big", "body\n"))
    csrf = person.csrf()
    before = store(app)
    body = refused_as_too_large(base_url, person, "/entries/curate", "application/x-www-form-urlencoded",
                                FORM_MAX_BYTES, f"csrf={csrf}&slug=notes/big&revision=1&pad=".encode())
    assert b"<code>request_too_large</code>" in body
    assert f"at most 3 MB ({FORM_MAX_BYTES} bytes)".encode() in body
    assert store(app) == before
    assert app.memory.read(team.agent, "notes/big")["curated"] is False
    # At the limit a form is read as usual.
    fields = {"csrf": csrf, "slug": "notes/big", "revision": "1"}
    padding = "x" * (FORM_MAX_BYTES - len(str(httpx.QueryParams({**fields, "pad": ""}))))
    done = person.http.post("/entries/curate", data={**fields, "pad": padding})
    assert int(done.request.headers["content-length"]) == FORM_MAX_BYTES
    assert done.status_code == 303, done.text[:300]
    assert app.memory.read(team.agent, "notes/big")["curated"] is True


def test_a_json_body_over_its_limit_is_413_request_too_large_before_it_is_read(app: Armarius, visitors: Visitors,
                                                                               base_url: str) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    app.memory.remember(team.agent, RememberRequest("notes/big", "Big", "body\n"))
    csrf = person.csrf()
    before = store(app)
    body = refused_as_too_large(base_url, person, "/api/entries/curate", "application/json", API_BODY_MAX_BYTES,
                                b'{"slug": "notes/big", "revision": 1, "pad": "', csrf=csrf)
    error = json.loads(body)["error"]
    assert (error["code"], error["details"]) == ("request_too_large", {"limit": API_BODY_MAX_BYTES})
    assert store(app) == before


# Text that is not UTF-8 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("encoded", ["%FF%FE", "ok%C3", "%ED%A0%80", "%C0%AF"])
def test_a_field_that_is_not_utf8_is_refused_not_stored_with_replacement_characters(
        encoded: str, app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    proposal = int(app.drafts.propose(team.agent, {"slug": "notes/one", "title": "One", "text": "x"})["proposal"])
    csrf = person.csrf()
    before, events = store(app), len(chain_events(app, "alpha"))
    refused = person.http.post(f"/drafts/proposals/{proposal}/reject", content=f"csrf={csrf}&note={encoded}".encode(),
                               headers=FORM)
    named = person.http.post(f"/drafts/proposals/{proposal}/reject", content=f"csrf={csrf}&n{encoded}=x".encode(),
                             headers=FORM)
    for answer in (refused, named):
        assert answer.status_code == 400, answer.text
        message, code = error_of(answer)
        assert code == "invalid_input"
        assert "is not UTF-8 text" in message
    assert "'note'" in error_of(refused)[0]
    assert store(app) == before
    assert len(chain_events(app, "alpha")) == events
    assert app.drafts.proposal(team.human, proposal)["status"] == "pending"
    # Without the page's token the form is refused as such first; valid UTF-8 is taken as typed.
    forged = person.http.post(f"/drafts/proposals/{proposal}/reject", content=f"note={encoded}".encode(), headers=FORM)
    assert forged.status_code == 403
    done = person.http.post(f"/drafts/proposals/{proposal}/reject", content=f"csrf={csrf}&note=%C3%A9t%C3%A9".encode(),
                            headers=FORM)
    assert done.status_code == 303, done.text
    assert app.drafts.proposal(team.human, proposal)["status"] == "rejected"


def test_a_login_with_a_password_that_is_not_utf8_is_refused(app: Armarius, visitors: Visitors) -> None:
    make_team(app)
    http = visitors.client()
    page = http.get("/login")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token
    answer = http.post("/login", content=f"csrf={token.group(1)}&workspace=alpha&name=alpha-human&password=%FF"
                       .encode(), headers=FORM)
    assert answer.status_code == 400, answer.text
    assert error_of(answer)[1] == "invalid_input"
    assert "armarius_session" not in http.cookies
