"""Hostile input the gate refuses over real HTTP, each showing that nothing changed: ids no store holds, JSON
numbers Python will not read, agent tokens in any header, login form tokens the server never issued, and a login
that would tell whether the password was right. And every answer, an unexpected error too, carries the security
headers."""

from __future__ import annotations

import html
import logging
import re
import time

import httpx
import pytest
from starlette.convertors import IntegerConvertor
from starlette.routing import Route

from armarius.app import Armarius, open_app
from armarius.auth.permissions import Role
from armarius.config import Settings
from armarius.web.app import SECURITY_HEADERS, create_web_app
from armarius.web.pages.gate import ID_MAX, PageId
from armarius.web.pages.login import LOGIN_COOKIE, login_keys, login_token
from tests.helpers import OPERATOR, OwnerSQL, make_team
from tests.web.conftest import serving
from tests.web.people import HTTP_TIMEOUT, Visitors, login_form_token, post_login
from tests.web.test_gate_security import chain_events

_PROBLEM = re.compile(r'id="login-problem">([^<]*)<')
_CSRF_VALUE = re.compile(r'name="csrf" value="[^"]*"')
#: Ids no page can show: 0, one past the largest, one SQLite cannot bind, one Python will not even convert.
IMPOSSIBLE_IDS = ("0", str(ID_MAX + 1), "9" * 20, "9" * 5000)


def id_routes(app: Armarius) -> list[tuple[str, str, Route]]:
    """(method, path, route) of every page and form whose path takes a number, read from the app's own router."""
    found = []
    for route in create_web_app(app).routes:
        if not isinstance(route, Route) or route.path.startswith("/api"):
            continue
        if any(isinstance(convertor, (IntegerConvertor, PageId)) for convertor in route.param_convertors.values()):
            found.extend((method, route.path, route) for method in sorted((route.methods or set()) - {"HEAD"}))
    return found


def filled(route: Route, number: str) -> str:
    """The route's path with ``number`` for each numeric parameter and ``x`` for any other."""
    def value(match: re.Match[str]) -> str:
        convertor = route.param_convertors[match.group(1)]
        return number if isinstance(convertor, (IntegerConvertor, PageId)) else "x"

    return re.sub(r"\{(\w+)(?::\w+)?\}", value, route.path)


# Ids in the path --------------------------------------------------------------------------------------


def test_an_id_that_cannot_exist_is_not_found_on_every_page_and_form(
        app: Armarius, visitors: Visitors, caplog: pytest.LogCaptureFixture) -> None:
    """Every page and form with a number in its path, on both engines: 0, ten digits, twenty (more than SQLite
    binds) and 5,000 (more than Python converts) are all answered as an unknown address, 404, and change
    nothing; the largest id the JSON twins take is looked up as usual."""
    person = visitors.log_in_team(make_team(app))
    csrf = person.csrf()
    routes = id_routes(app)
    assert {path for _method, path, _route in routes} >= {
        "/drafts/proposals/{proposal:int}", "/drafts/proposals/{proposal:int}/reject", "/repairs/{repair:int}",
        "/repairs/{repair:int}/apply", "/sessions/{session:int}", "/sessions/{session:int}/resume"}
    before = len(chain_events(app, "alpha"))
    form = {"csrf": csrf, "note": "n", "comment": "c", "option": "1", "budget": "5", "fingerprint": "f"}
    with caplog.at_level(logging.WARNING):
        for method, path, route in routes:
            for number in (*IMPOSSIBLE_IDS, str(ID_MAX)):
                url = filled(route, number)
                answer = person.http.get(url) if method == "GET" else person.http.post(url, data=form)
                assert answer.headers["content-type"].startswith("text/html"), (method, path)
                if number == str(ID_MAX):  # the service's to refuse (unknown, or not for an editor), as usual
                    assert 400 <= answer.status_code < 500, (method, path, answer.status_code)
                    continue
                assert answer.status_code == 404, (method, path, number[:20], answer.status_code)
                assert "There is nothing at" in answer.text, (method, path, number[:20])
                assert "<code>not_found</code>" in answer.text, (method, path, number[:20])
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(chain_events(app, "alpha")) == before, "nothing was done"
    assert person.whoami().status_code == 200


# JSON bodies ----------------------------------------------------------------------------------------


def test_a_json_number_too_long_to_read_is_invalid_input(app: Armarius, visitors: Visitors) -> None:
    """A number of 5,000 digits (Python converts at most 4,300) in a JSON body: 400 invalid_input, not a 500."""
    person = visitors.log_in_team(make_team(app))
    headers = {"X-CSRF-Token": person.csrf(), "Content-Type": "application/json"}
    before = len(chain_events(app, "alpha"))
    answers = [
        person.http.post("/api/entries/curate", content='{"slug": "a", "revision": %s}' % ("1" * 5000),
                         headers=headers),
        person.http.post("/api/drafts/proposals/1/approve", content='{"fingerprint": -%s}' % ("7" * 5000),
                         headers=headers),
    ]
    for answer in answers:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "invalid_input"
        assert answer.json()["error"]["details"] == {"field": "body"}
        assert "number too long" in answer.json()["error"]["message"]
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert len(chain_events(app, "alpha")) == before
    assert person.whoami().status_code == 200


# Security headers -----------------------------------------------------------------------------------


def test_an_unexpected_error_carries_the_security_headers(
        app: Armarius, visitors: Visitors, monkeypatch: pytest.MonkeyPatch) -> None:
    """A route that raises something no handler expects is answered 500 by Starlette's outermost middleware:
    the security headers are on that answer too."""
    person = visitors.log_in_team(make_team(app))

    def fails(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app, "health", fails)
    monkeypatch.setattr(app.directory, "workspace_info", fails)
    answers = [visitors.client().get("/healthz"), person.http.get("/api/workspace")]
    for answer in answers:
        assert answer.status_code == 500
        assert answer.json()["error"]["code"] == "internal"
        assert "a bug" not in answer.text
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers[name] == value, (answer.url, name)


# Agent tokens in any header ---------------------------------------------------------------------------


def test_an_agent_token_in_any_header_is_refused_on_pages_and_forms(
        app: Armarius, settings: Settings, visitors: Visitors) -> None:
    make_team(app, "beta")
    person = visitors.log_in_team(make_team(app))
    app.directory.set_role("alpha-human", workspace="beta", role=Role.EDITOR, by=OPERATOR)
    token = make_team(app, "gamma").agent_token
    csrf = person.csrf()
    custom = person.http.get("/", headers={"X-Agent-Token": token})
    in_a_cookie = person.http.get("/", headers={"Cookie": f"armarius_session={person.cookie}; agent={token}"})
    switch = person.http.post("/workspace", data={"csrf": csrf, "workspace": "beta"}, headers={"X-Api-Key": token})
    with visitors.client(headers={"X-Api-Key": token}) as no_cookie:
        anonymous = no_cookie.get("/entries")
        login = no_cookie.get("/login")
    for refused in (custom, in_a_cookie, switch, anonymous, login):
        assert refused.status_code == 403, refused.url
        assert refused.headers["content-type"].startswith("text/html")
        assert "agent tokens never open them" in refused.text
    assert person.whoami().json()["workspace"] == "alpha", "not switched"
    # The prefix alone is no token: another app's cookie, a search for it in the Referer.
    lookalikes = person.http.get("/", headers={"Referer": "http://127.0.0.1/entries?q=arm_x", "X-Note": "farm_"})
    assert lookalikes.status_code == 200
    with OwnerSQL(settings) as sql:
        assert sql.rows("SELECT count(*) FROM web_sessions WHERE ended_at IS NOT NULL")[0][0] == 0


# The login form -------------------------------------------------------------------------------------


def test_a_login_form_token_the_server_never_issued_is_refused(
        app: Armarius, settings: Settings, visitors: Visitors) -> None:
    """The form's token must be one a server of this store issued within the hour: a value the client put in
    both the cookie and the field itself is refused, and so is a forged or an expired one. A served one works,
    also on another server process of the store."""
    team = make_team(app)
    form = {"workspace": "alpha", "name": "alpha-human", "password": team.human_password}
    served = login_form_token(visitors.client())
    nonce, issued, _mac = served.split(".")
    made_up = ["attacker-chosen-value", f"{nonce}.{issued}.{'A' * 43}", f"{nonce}.{int(issued) + 1}.{_mac}",
               login_token(login_keys(app)[-1], now=time.time() - 3601), "..", "x" * 5000]
    refusals = []
    for token in made_up:
        with visitors.client() as http:
            http.cookies.set(LOGIN_COOKIE, token, domain="127.0.0.1", path="/login")
            refusals.append(http.post("/login", data={**form, "csrf": token}))
    for refused in refusals:
        assert refused.status_code == 403
        assert "security token" in refused.text
        assert "armarius_session" not in refused.headers.get("set-cookie", "")
    assert [event.action for event in chain_events(app, "alpha") if event.action.startswith("login.")] == [
        "login.succeeded"], "make_team's own login only: nothing was checked"
    with OwnerSQL(settings) as sql:
        assert sql.count("web_sessions") == 0
        assert sql.count("login_attempts") == 0
    with visitors.client() as http:
        assert post_login(http, "alpha-human", team.human_password, "alpha").status_code == 303
    second_app = open_app(settings)  # another server process of the store: the same installation's key
    try:
        with serving(second_app) as second_url, httpx.Client(base_url=second_url, timeout=HTTP_TIMEOUT) as other, \
                visitors.client() as first:
            token = login_form_token(first)
            other.cookies.set(LOGIN_COOKIE, token, domain="127.0.0.1", path="/login")
            elsewhere = other.post("/login", data={**form, "csrf": token})
    finally:
        second_app.close()
    assert elsewhere.status_code == 303


def test_a_right_password_outside_the_workspace_is_told_as_a_wrong_one(
        app: Armarius, settings: Settings, visitors: Visitors) -> None:
    """Not a member of the workspace: the page says exactly what a wrong password gets (the password is
    checked either way); the audit log alone has the reason."""
    team = make_team(app)
    app.directory.create_workspace("beta", by=OPERATOR)
    with visitors.client() as http:
        wrong = post_login(http, "alpha-human", "a wrong password", "beta")
        right = post_login(http, "alpha-human", team.human_password, "beta")
    for answer in (wrong, right):
        assert answer.status_code == 401
        assert answer.headers.get("www-authenticate") == wrong.headers.get("www-authenticate")
        assert "armarius_session" not in answer.headers.get("set-cookie", "")
    assert _CSRF_VALUE.sub("", right.text) == _CSRF_VALUE.sub("", wrong.text), "the same page, but its new token"
    problems = [html.unescape(found.group(1)) for answer in (wrong, right) if (found := _PROBLEM.search(answer.text))]
    assert problems == ["The principal name or password is wrong."] * 2
    assert "member" not in right.text
    assert [event.details for event in chain_events(app, "beta") if event.action == "login.failed"] == [
        {"reason": "wrong_password"}, {"reason": "not_a_member"}]
    with OwnerSQL(settings) as sql:
        assert sql.count("web_sessions") == 0


@pytest.mark.parametrize("field", ["workspace", "name"])
def test_a_nul_in_the_login_form_answers_the_login_page(
        app: Armarius, settings: Settings, visitors: Visitors, field: str) -> None:
    make_team(app)
    before = len(chain_events(app, None))
    fields = {"workspace": "alpha", "name": "alpha-human"} | {field: "al\x00pha"}
    with visitors.client() as http:
        answer = post_login(http, fields["name"], "a password", fields["workspace"])
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("text/html")
    assert _PROBLEM.search(answer.text) is not None
    assert f"The {field} cannot contain a NUL character." in answer.text
    assert 'name="csrf"' in answer.text, "the login form, to try again"
    assert len(chain_events(app, None)) == before
    assert [event.action for event in chain_events(app, "alpha") if event.action == "login.failed"] == []
    with OwnerSQL(settings) as sql:
        assert sql.count("login_attempts") == 0
