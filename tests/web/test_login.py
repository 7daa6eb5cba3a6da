"""Logging in, out and across workspaces over real HTTP: who gets a session, what it holds, when it ends."""

from __future__ import annotations

import hashlib
import html
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from armarius.app import Armarius, open_app
from armarius.audit import chain as audit
from armarius.auth.permissions import Role
from armarius.config import Settings
from armarius.store import iso_utc
from tests.helpers import OPERATOR, OwnerSQL, make_team
from tests.web.conftest import serving
from tests.web.people import HTTP_TIMEOUT, Visitors, login_form_token, post_login


def events(app: Armarius, workspace: str, action: str) -> list[audit.AuditEvent]:
    chain = app.directory.workspace(workspace).id
    return [event for event in audit.tail(app.database, chain, limit=500) if event.action == action]


def test_a_human_logs_in_and_sees_the_queue(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    queue = person.http.get("/")
    whoami = person.whoami()
    assert queue.status_code == 200
    assert "Review queue" in queue.text
    assert "alpha-human" in queue.text
    assert whoami.json()["principal"] == "alpha-human"
    assert whoami.json()["kind"] == "human"
    # make_team's own login, then the web login.
    assert [event.subject for event in events(app, "alpha", "login.succeeded")] == ["alpha-human"] * 2


def test_the_pages_need_a_login_and_return_where_they_were_asked(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    with visitors.client() as http:
        asked = http.get("/?kind=needs_review")
        answer = post_login(http, "alpha-human", team.human_password, "alpha", next="/?kind=needs_review")
    assert asked.status_code == 303
    assert asked.headers["location"] == "/login?next=%2F%3Fkind%3Dneeds_review"
    assert answer.headers["location"] == "/?kind=needs_review"


@pytest.mark.parametrize("target", ["//evil.example/", "https://evil.example/", "/\\evil.example", "javascript:1"])
def test_after_login_only_a_path_on_this_site(app: Armarius, visitors: Visitors, target: str) -> None:
    team = make_team(app)
    with visitors.client() as http:
        answer = post_login(http, "alpha-human", team.human_password, "alpha", next=target)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/"


def test_a_wrong_password_is_refused_on_the_login_page_and_audited(app: Armarius, visitors: Visitors) -> None:
    make_team(app)
    with visitors.client() as http:
        answer = post_login(http, "alpha-human", "hunter2-typo", "alpha")
    assert answer.status_code == 401
    assert "The principal name or password is wrong." in answer.text
    assert 'value="alpha-human"' in answer.text, "the name stays filled in"
    assert "hunter2-typo" not in answer.text, "the password is never echoed"
    assert "armarius_session" not in answer.headers.get("set-cookie", "")
    assert [event.details for event in events(app, "alpha", "login.failed")] == [{"reason": "wrong_password"}]


def test_the_login_form_has_its_own_csrf_token(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    form = {"workspace": "alpha", "name": "alpha-human", "password": team.human_password}
    with visitors.client() as http:
        missing = http.post("/login", data=form)
        http.get("/login")  # the cookie half, without the form half
        wrong = http.post("/login", data={**form, "csrf": "forged"})
    with visitors.client() as other:
        stolen = other.post("/login", data={**form, "csrf": login_form_token(visitors.client())})
    for refused in (missing, wrong, stolen):
        assert refused.status_code == 403
        assert "security token" in refused.text
    assert len(events(app, "alpha", "login.succeeded")) == 1, "make_team's own login only"
    assert events(app, "alpha", "login.failed") == []
    with OwnerSQL(settings) as sql:
        assert sql.count("web_sessions") == 0


def test_the_session_cookie_flags_and_what_the_store_keeps(app: Armarius, settings: Settings,
                                                           visitors: Visitors) -> None:
    team = make_team(app)
    with visitors.client() as http:
        plain = post_login(http, "alpha-human", team.human_password, "alpha")
    # Behind a TLS-terminating proxy on this machine (X-Forwarded-Proto, which uvicorn honours from 127.0.0.1).
    # httpx keeps Secure cookies to https, so the login form's cookie goes back by hand, as a browser would send it.
    with visitors.client(headers={"X-Forwarded-Proto": "https"}) as http:
        form = http.get("/login")
        token = form.cookies["armarius_login"]
        assert "secure" in form.headers["set-cookie"].lower()
        secure = http.post("/login", headers={"Cookie": f"armarius_login={token}"}, data={
            "csrf": token, "workspace": "alpha", "name": "alpha-human", "password": team.human_password})
    for answer in (plain, secure):
        cookie = next(value for value in answer.headers.get_list("set-cookie") if value.startswith("armarius_session="))
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "path", "samesite"} <= attributes
        assert "path=/" in cookie.lower().replace("; ", ";").split(";")
        assert "samesite=lax" in cookie.lower()
        assert "max-age" not in attributes
        assert "expires" not in attributes
        assert ("secure" in attributes) is (answer is secure)
    secrets = [answer.cookies["armarius_session"] for answer in (plain, secure)]
    with OwnerSQL(settings) as sql:
        stored = {row[0] for row in sql.rows("SELECT secret_digest FROM web_sessions")}
        every_value = json.dumps(sql.rows("SELECT * FROM web_sessions"), default=str)
    assert stored == {hashlib.sha256(secret.encode()).hexdigest() for secret in secrets}
    assert not any(secret in every_value for secret in secrets), "the store keeps only the digest"


def test_logout_ends_the_session_in_the_store(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    cookie, csrf = person.cookie, person.csrf()
    answer = person.http.post("/logout", data={"csrf": csrf})
    # The copied cookie (another tab, a stolen copy) is dead too: the end is in the store.
    with visitors.client(cookies={"armarius_session": cookie}) as copy:
        page = copy.get("/")
        api = copy.get("/api/whoami")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/login?ended=1"
    assert 'armarius_session=""' in answer.headers["set-cookie"]
    assert page.status_code == 303
    assert page.headers["location"] == "/login"
    assert api.status_code == 401
    assert api.json()["error"]["code"] == "unauthenticated"
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT count(*) FROM web_sessions WHERE ended_at IS NOT NULL")[0][0] == 1
    assert [event.actor for event in events(app, "alpha", "login.logged_out")] == ["human:alpha-human"]
    assert "You are logged out." in person.http.get("/login?ended=1").text


def test_an_idle_or_old_session_ends(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    idle, old = visitors.log_in_team(team), visitors.log_in_team(team)
    assert idle.whoami().status_code == 200
    long_ago = iso_utc(datetime.now(UTC) - timedelta(minutes=settings.web_session_idle_minutes, seconds=1))
    with OwnerSQL(settings) as sql:
        sql.execute("UPDATE web_sessions SET last_seen_at = ? WHERE secret_digest = ?",
                    (long_ago, hashlib.sha256(idle.cookie.encode()).hexdigest()))
        sql.execute("UPDATE web_sessions SET expires_at = ? WHERE secret_digest = ?",
                    (iso_utc(datetime.now(UTC)), hashlib.sha256(old.cookie.encode()).hexdigest()))
    assert idle.whoami().status_code == 401
    assert old.whoami().status_code == 401
    assert idle.http.get("/").headers["location"] == "/login"


def test_a_role_withdrawn_between_two_requests_applies_at_the_next(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    before, queue_before = person.whoami().json(), person.http.get("/?kind=repairs").text
    app.directory.set_role("alpha-human", workspace="alpha", role=Role.READER, by=OPERATOR)
    after, queue_after = person.whoami().json(), person.http.get("/?kind=repairs").text
    assert before["role"] == "editor"
    assert "approvals.issue" in before["permissions"]
    assert after["role"] == "reader"
    assert "approvals.issue" not in after["permissions"]
    assert "not available to your role" not in queue_before
    assert "not available to your role" in queue_after
    app.directory.set_role("alpha-human", workspace="alpha", role=Role.ADMIN, by=OPERATOR)
    assert person.whoami().json()["role"] == "admin", "a role granted applies at the next request too"


def test_a_person_switches_between_their_workspaces(app: Armarius, visitors: Visitors) -> None:
    make_team(app, "alpha")
    make_team(app, "beta")
    team_password = "alpha-correct horse battery"
    app.directory.set_role("alpha-human", workspace="beta", role=Role.READER, by=OPERATOR)
    person = visitors.log_in("alpha-human", team_password, "alpha")
    page = person.http.get("/")
    switched = person.http.post("/workspace", data={"csrf": person.csrf(), "workspace": "beta"})
    landing = person.http.get("/")
    again = person.http.get("/")
    refused = person.http.post("/workspace", data={"csrf": person.csrf(), "workspace": "gamma"})
    assert 'id="workspace-switch"' in page.text
    assert switched.status_code == 303
    assert person.whoami().json()["workspace"] == "beta"
    assert person.whoami().json()["role"] == "reader"
    assert "You are now working in workspace beta." in landing.text
    assert "You are now working in workspace beta." not in again.text, "a flash message shows once"
    assert refused.status_code == 403
    assert "not a member of a workspace named 'gamma'" in html.unescape(refused.text)
    assert person.whoami().json()["workspace"] == "beta"
    assert [event.details for event in events(app, "beta", "login.workspace_switched")] == [
        {"from": "alpha", "role": "reader"}]


def test_unknown_pages_and_api_routes(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    page = person.http.get("/no/such/page")
    api = person.http.get("/api/no-such-route")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "There is nothing at" in page.text
    assert api.status_code == 404
    assert api.json()["error"]["code"] == "not_found"


def test_a_changed_password_ends_the_persons_sessions(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    person, other_tab = visitors.log_in_team(team), visitors.log_in_team(team)
    assert person.whoami().status_code == other_tab.whoami().status_code == 200
    app.directory.set_password("alpha-human", "a-new-password-of-length", by=OPERATOR)
    assert person.whoami().status_code == other_tab.whoami().status_code == 401
    assert person.http.get("/").headers["location"] == "/login"
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT count(*) FROM web_sessions WHERE ended_at IS NULL")[0][0] == 0
    changed = [event for event in audit.tail(app.database, None, 50) if event.action == "principal.password_changed"]
    assert changed[-1].details == {"web_sessions_ended": 2}
    assert visitors.log_in(f"{team.workspace}-human", "a-new-password-of-length", team.workspace).whoami().status_code \
        == 200


def test_a_withdrawn_membership_ends_the_session(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    assert person.whoami().status_code == 200
    with OwnerSQL(settings) as sql:  # no command removes a membership yet: as the operator would, in SQL
        sql.execute("DELETE FROM memberships WHERE principal_id = (SELECT id FROM principals WHERE name = ?)",
                    ("alpha-human",))
    api = person.whoami()
    page = person.http.get("/")
    assert api.status_code == 401
    assert "no longer a member of workspace 'alpha'" in api.json()["error"]["message"]
    assert page.headers["location"] == "/login"
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT count(*) FROM web_sessions WHERE ended_at IS NOT NULL")[0][0] == 1


def test_a_session_works_on_every_server_process_of_the_store(
        app: Armarius, settings: Settings, visitors: Visitors) -> None:
    """Sessions live in the store: a login on one server is good on another (and a logout on it ends it)."""
    team = make_team(app)
    person = visitors.log_in_team(team)
    second_app = open_app(settings)
    try:
        with serving(second_app) as second_url, httpx.Client(base_url=second_url, timeout=HTTP_TIMEOUT,
                                                            cookies={"armarius_session": person.cookie}) as other:
            there = other.get("/api/whoami")
            csrf = person.csrf()
            logout = other.post("/logout", data={"csrf": csrf})
            here = person.whoami()
    finally:
        second_app.close()
    assert there.json()["principal"] == "alpha-human"
    assert logout.status_code == 303
    assert here.status_code == 401
