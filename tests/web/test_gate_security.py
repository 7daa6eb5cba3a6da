"""The gate's refusals over real HTTP, each showing that nothing changed: CSRF, agent tokens, login rate limits."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth.permissions import Role
from armarius.auth.web_sessions import ADDRESS_ATTEMPT_LIMIT, LOGIN_ATTEMPT_LIMIT
from armarius.config import Settings
from armarius.web.app import SECURITY_HEADERS
from tests.helpers import OPERATOR, OwnerSQL, make_team
from tests.web.people import Person, Visitors, login_form_token, post_login


def chain_events(app: Armarius, workspace: str | None) -> list[audit.AuditEvent]:
    chain = app.directory.workspace(workspace).id if workspace else None
    return audit.tail(app.database, chain, limit=1000)


def two_workspace_person(app: Armarius, visitors: Visitors) -> Person:
    make_team(app, "alpha")
    make_team(app, "beta")
    app.directory.set_role("alpha-human", workspace="beta", role=Role.EDITOR, by=OPERATOR)
    return visitors.log_in("alpha-human", "alpha-correct horse battery", "alpha")


# CSRF ---------------------------------------------------------------------------------------------


def test_a_form_without_or_with_a_wrong_csrf_token_is_refused_and_changes_nothing(
        app: Armarius, settings: Settings, visitors: Visitors) -> None:
    person = two_workspace_person(app, visitors)
    other = visitors.log_in("beta-human", "beta-correct horse battery", "beta")
    before = len(chain_events(app, "beta"))
    attempts = {
        "missing": {"workspace": "beta"},
        "wrong": {"workspace": "beta", "csrf": "x" * 43},
        "another session's": {"workspace": "beta", "csrf": other.csrf()},
    }
    answers = {name: person.http.post("/workspace", data=form) for name, form in attempts.items()}
    json_body = person.http.post("/workspace", json={"workspace": "beta", "csrf": person.csrf()})
    logouts = [person.http.post("/logout"), person.http.post("/logout", data={"csrf": "nope"})]
    for answer in [*answers.values(), json_body, *logouts]:
        assert answer.status_code == 403
        assert "security token" in answer.text
    assert person.whoami().json()["workspace"] == "alpha", "not switched"
    assert person.http.get("/").status_code == 200, "still logged in"
    assert len(chain_events(app, "beta")) == before
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT count(*) FROM web_sessions WHERE ended_at IS NOT NULL")[0][0] == 0


def test_an_api_write_by_a_person_needs_the_csrf_header(app: Armarius, visitors: Visitors) -> None:
    person = two_workspace_person(app, visitors)
    missing = person.http.post("/api/workspace", json={"workspace": "beta"})
    wrong = person.http.post("/api/workspace", json={"workspace": "beta"}, headers={"X-CSRF-Token": "forged"})
    unchanged = person.whoami().json()["workspace"]
    right = person.http.post("/api/workspace", json={"workspace": "beta"}, headers={"X-CSRF-Token": person.csrf()})
    for refused in (missing, wrong):
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "not_allowed"
        assert refused.json()["error"]["details"] == {"reason": "csrf"}
    assert unchanged == "alpha"
    assert right.status_code == 200
    assert right.json()["workspace"] == "beta"
    assert right.json()["csrf_token"] == person.csrf(), "the new workspace's token, as its pages carry it"
    assert person.whoami().json()["workspace"] == "beta"


def test_an_api_body_that_does_not_fit_is_refused(app: Armarius, visitors: Visitors) -> None:
    person = two_workspace_person(app, visitors)
    headers = {"X-CSRF-Token": person.csrf()}
    extra = person.http.post("/api/workspace", json={"workspace": "beta", "role": "admin"}, headers=headers)
    not_json = person.http.post("/api/workspace", content=b"workspace=beta", headers={
        **headers, "Content-Type": "application/x-www-form-urlencoded"})
    newline = person.http.post("/api/workspace", json={"workspace": "beta\n"}, headers=headers)
    for answer in (extra, not_json, newline):
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "invalid_input"
    assert newline.json()["error"]["details"] == {"field": "workspace"}, "refused by the published pattern"
    assert person.whoami().json()["workspace"] == "alpha"


# Agent tokens -------------------------------------------------------------------------------------


def test_an_agent_token_never_opens_a_page_or_a_form(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    person = two_workspace_person(app, visitors)
    agent_token = make_team(app, "gamma").agent_token
    bearer = {"Authorization": f"Bearer {agent_token}"}
    with visitors.client(headers=bearer) as agent:
        pages = [agent.get("/"), agent.get("/login"), agent.get("/?kind=drafts")]
        login = agent.post("/login", data={"workspace": "gamma", "name": "gamma-agent", "password": "x"})
        queue_twin = agent.get("/api/queue")
        switch_twin = agent.post("/api/workspace", json={"workspace": "gamma"})
    # The token next to a valid human session and its CSRF token changes nothing either.
    csrf = person.csrf()
    mixed = person.http.post("/workspace", data={"csrf": csrf, "workspace": "beta"}, headers=bearer)
    mixed_logout = person.http.post("/logout", data={"csrf": csrf}, headers=bearer)
    for refused in [*pages, login, mixed, mixed_logout]:
        assert refused.status_code == 403
        assert refused.headers["content-type"].startswith("text/html")
        assert "agent tokens never open them" in refused.text
    for refused in (queue_twin, switch_twin):
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "not_allowed"
    assert person.whoami().json()["workspace"] == "alpha"
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT count(*) FROM web_sessions WHERE ended_at IS NOT NULL")[0][0] == 0
        assert sql.count("web_sessions") == 1


def test_any_agent_token_is_refused_but_a_proxys_basic_login_is_ignored(app: Armarius, visitors: Visitors) -> None:
    person = visitors.log_in_team(make_team(app))
    token = make_team(app, "beta").agent_token
    refused = [person.http.get("/", headers={"Authorization": value})
               for value in (f"bearer {token}", "Bearer not-a-token", f"Token {token}", token)]
    behind_basic_auth = person.http.get("/", headers={"Authorization": "Basic cmV2aWV3ZXI6cHJveHk="})
    api_behind_basic_auth = person.http.get("/api/whoami", headers={"Authorization": "Basic cmV2aWV3ZXI6cHJveHk="})
    assert [answer.status_code for answer in refused] == [403] * 4
    assert behind_basic_auth.status_code == 200
    assert api_behind_basic_auth.json()["principal"] == "alpha-human"


def test_an_agent_principal_cannot_log_in(app: Armarius, settings: Settings, visitors: Visitors) -> None:
    make_team(app)
    with visitors.client() as http:
        answer = post_login(http, "alpha-agent", "anything at all", "alpha")
    assert answer.status_code == 401
    failed = [event.details for event in chain_events(app, "alpha") if event.action == "login.failed"]
    assert failed == [{"reason": "not_a_human"}]
    with OwnerSQL(settings) as sql:
        assert sql.count("web_sessions") == 0


# Headers ------------------------------------------------------------------------------------------


def test_every_response_carries_the_security_headers(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    person = visitors.log_in_team(team)
    answers = [person.http.get(path) for path in ("/", "/login", "/api/whoami", "/api", "/static/armarius.css",
                                                  "/nowhere", "/healthz")]
    answers.append(visitors.client().get("/"))
    for answer in answers:
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers[name] == value, (answer.url, name)
    assert "frame-ancestors 'none'" in SECURITY_HEADERS["Content-Security-Policy"]
    assert answers[0].headers["cache-control"] == "no-store"
    assert answers[4].headers["content-type"].startswith("text/css")


# Rate limits --------------------------------------------------------------------------------------


def test_failed_logins_are_rate_limited_per_name_and_address_and_audited_once(
        app: Armarius, settings: Settings, visitors: Visitors) -> None:
    team = make_team(app)
    with visitors.client() as http:
        failures = [post_login(http, "alpha-human", f"guess {n}", "alpha") for n in range(LOGIN_ATTEMPT_LIMIT)]
        refused = post_login(http, "alpha-human", team.human_password, "alpha")
        refused_again = post_login(http, "alpha-human", team.human_password, "alpha")
    # Another address is not locked out (a proxy on this machine names the client: X-Forwarded-For).
    with visitors.client(headers={"X-Forwarded-For": "192.0.2.7"}) as elsewhere:
        other_address = post_login(elsewhere, "alpha-human", team.human_password, "alpha")
    assert [answer.status_code for answer in failures] == [401] * LOGIN_ATTEMPT_LIMIT
    for answer in (refused, refused_again):
        assert answer.status_code == 429
        assert 1 <= int(answer.headers["retry-after"]) <= 15 * 60
        assert "Too many failed logins" in answer.text
        assert "armarius_session" not in answer.headers.get("set-cookie", "")
    assert other_address.status_code == 303
    actions = [event.action for event in chain_events(app, "alpha") if event.action.startswith("login.")]
    # The refused attempts never reached the password check: no login.failed for them, one throttle event.
    assert actions == ["login.succeeded"] + ["login.failed"] * LOGIN_ATTEMPT_LIMIT + ["login.throttled",
                                                                                      "login.succeeded"]
    throttled = next(event for event in chain_events(app, "alpha") if event.action == "login.throttled")
    assert throttled.actor == "unauthenticated"
    assert throttled.subject == "alpha-human"
    assert throttled.details["limit"] == "name_and_address"
    with OwnerSQL(settings) as sql:
        kept = repr(sql.rows("SELECT * FROM login_attempts"))
    assert "alpha-human" not in kept, "the limiter keeps names only as digests"


def test_a_success_clears_the_failures_of_its_name_and_address(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    for round_ in range(2):
        with visitors.client() as http:
            failures = [post_login(http, "alpha-human", f"typo {round_}.{n}", "alpha")
                        for n in range(LOGIN_ATTEMPT_LIMIT - 1)]
            success = post_login(http, "alpha-human", team.human_password, "alpha")
            assert [answer.status_code for answer in failures] == [401] * (LOGIN_ATTEMPT_LIMIT - 1)
            assert success.status_code == 303


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_one_address_is_limited_whatever_the_names(app: Armarius, visitors: Visitors) -> None:
    team = make_team(app)
    with visitors.client(headers={"X-Forwarded-For": "198.51.100.9"}) as http:
        names = [f"nobody-{n}" for n in range(ADDRESS_ATTEMPT_LIMIT)]
        failures = [post_login(http, name, "x", "alpha") for name in names]
        refused = post_login(http, "alpha-human", team.human_password, "alpha")
    assert {answer.status_code for answer in failures} == {401}
    assert refused.status_code == 429
    throttled = [event for event in chain_events(app, "alpha") if event.action == "login.throttled"]
    assert [event.details["limit"] for event in throttled] == ["address"]


def test_attempts_made_at_once_are_counted_before_any_password_check(
        app: Armarius, visitors: Visitors) -> None:
    """The attempt is admitted (counted) before its password is checked: a burst in parallel gets no more guesses."""
    make_team(app)
    burst = 3 * LOGIN_ATTEMPT_LIMIT
    clients = [visitors.client() for _ in range(burst)]
    tokens = [login_form_token(http) for http in clients]
    start = threading.Barrier(burst)

    def guess(index: int) -> int:
        start.wait()
        return clients[index].post("/login", data={"csrf": tokens[index], "workspace": "alpha",
                                                   "name": "alpha-human", "password": f"guess {index}"}).status_code

    with ThreadPoolExecutor(max_workers=burst) as pool:
        statuses = sorted(pool.map(guess, range(burst)))
    checked = [event for event in chain_events(app, "alpha") if event.action == "login.failed"]
    assert statuses == [401] * LOGIN_ATTEMPT_LIMIT + [429] * (burst - LOGIN_ATTEMPT_LIMIT)
    assert len(checked) == LOGIN_ATTEMPT_LIMIT
