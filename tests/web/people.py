"""A person using the web pages over real HTTP (httpx): the login form, cookies and CSRF tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import httpx

from tests.helpers import Team

_CSRF_FIELD = re.compile(r'<input type="hidden" name="csrf" value="([^"]+)">')
_CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')

#: How long a test's HTTP client waits for an answer. httpx's default (5 s) is a timing assertion in
#: disguise: a login stalled behind the database server's checkpoint on a busy machine failed a run.
#: Only a server that hangs should fail a test, so the wait is long.
HTTP_TIMEOUT = 60.0


def login_form_token(http: httpx.Client) -> str:
    """GET /login: the login form's CSRF token (its twin is now in the client's cookie jar)."""
    page = http.get("/login")
    assert page.status_code == 200, page.text
    found = _CSRF_FIELD.search(page.text)
    assert found, "the login form carries a CSRF field"
    return found.group(1)


def post_login(http: httpx.Client, name: str, password: str, workspace: str, **extra: str) -> httpx.Response:
    """Fill in and send the login form as a browser would (a fresh form token each time)."""
    return http.post("/login", data={"csrf": login_form_token(http), "workspace": workspace, "name": name,
                                     "password": password, **extra})


@dataclass
class Person:
    """A logged-in browser without the browser: its cookie jar and the session's CSRF token."""

    http: httpx.Client

    @property
    def cookie(self) -> str:
        value = self.http.cookies.get("armarius_session")
        assert value
        return value

    def csrf(self) -> str:
        """The session's CSRF token, as a page carries it (<meta name="csrf-token">)."""
        page = self.http.get("/")
        found = _CSRF_META.search(page.text)
        assert found, page.text
        return found.group(1)

    def whoami(self) -> httpx.Response:
        return self.http.get("/api/whoami")


@dataclass
class Visitors:
    """HTTP clients of one test's server, all closed when the test ends."""

    base_url: str
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, **options: object) -> httpx.Client:
        options.setdefault("timeout", HTTP_TIMEOUT)
        http = httpx.Client(base_url=self.base_url, **options)  # type: ignore[arg-type]
        self.clients.append(http)
        return http

    def log_in(self, name: str, password: str, workspace: str, **options: object) -> Person:
        http = self.client(**options)
        answer = post_login(http, name, password, workspace)
        assert answer.status_code == 303, answer.text
        return Person(http)

    def log_in_team(self, team: Team) -> Person:
        return self.log_in(f"{team.workspace}-human", team.human_password, team.workspace)

    def close(self) -> None:
        for http in self.clients:
            http.close()
