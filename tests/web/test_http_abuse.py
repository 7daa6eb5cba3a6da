"""One client against everyone else, on a real uvicorn server configured as `armarius serve` configures it:
MCP sessions held per agent token, DNS rebinding on every route, the login form's body, connections past
the process's limit, and a stop that a trickled upload cannot hold."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import uvicorn

from armarius.app import Armarius
from armarius.config import load_settings
from armarius.web import limits
from armarius.web.app import (
    MCP_SESSION_IDLE_SECONDS,
    MCP_SESSIONS_MAX,
    AgentSessions,
    create_web_app,
    is_loopback_host,
    is_loopback_origin,
    server_config,
)
from armarius.web.pages.gate import FORM_MAX_BYTES
from armarius.web.pages.login import LOGIN_FORM_MAX_BYTES
from tests.e2e.servers import free_port
from tests.helpers import make_team, read_until_closed
from tests.web.conftest import serving
from tests.web.people import HTTP_TIMEOUT, login_form_token, post_login

#: The tests with an app need one engine: what they test is the HTTP server's.
SQLITE = pytest.mark.parametrize("settings", ["sqlite"], indirect=True)

PROTOCOL = "2025-06-18"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def open_session(base_url: str, token: str, **headers: str) -> httpx.Response:
    """An MCP initialize without a session id (a new session), on a connection of its own."""
    return httpx.post(f"{base_url}/mcp", json=INITIALIZE, timeout=HTTP_TIMEOUT,
                      headers={**MCP_HEADERS, "Authorization": f"Bearer {token}", **headers})


def in_session(base_url: str, token: str, session: str, method: str = "POST") -> httpx.Response:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}", "Mcp-Session-Id": session,
               "MCP-Protocol-Version": PROTOCOL}
    if method == "DELETE":
        return httpx.delete(f"{base_url}/mcp", headers=headers, timeout=HTTP_TIMEOUT)
    return httpx.post(f"{base_url}/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers,
                      timeout=HTTP_TIMEOUT)


def port_of(base_url: str) -> int:
    return int(base_url.rsplit(":", 1)[1])


def raw(port: int, data: bytes, *, timeout: float = 20) -> bytes:
    """Send ``data`` and read until the server closes the connection (or ``timeout`` passes: a hang)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        if data:
            connection.sendall(data)
        return read_until_closed(connection)


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:300]
    return int(answer[9:12])


# MCP sessions per agent token --------------------------------------------------------------------------


@SQLITE
def test_one_token_holds_at_most_its_sessions_and_every_other_agent_still_gets_in(app: Armarius) -> None:
    """One token opening sessions without end (the SDK's 10,000 are shared by every token of the process) is
    refused past its own limit with a JSON-RPC error saying what to do; parallel openings do not overshoot it;
    another workspace's agent, and the token's open sessions, are served all along."""
    first, second = make_team(app, "alpha"), make_team(app, "beta")
    limit = app.settings.mcp_sessions_per_token
    assert limit == 128
    with serving(app) as base_url:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: open_session(base_url, first.agent_token), range(limit + 8)))
        assert Counter(answer.status_code for answer in answers) == {200: limit, 429: 8}
        refusal = next(answer for answer in answers if answer.status_code == 429)
        body = refusal.json()
        assert body["jsonrpc"] == "2.0"
        assert body["error"]["data"] == {"reason": "too_many_sessions", "limit": limit}
        assert "DELETE /mcp" in body["error"]["message"]
        assert "Reuse an open session" in body["error"]["message"]
        assert "mcp-session-id" not in refusal.headers

        assert open_session(base_url, second.agent_token).status_code == 200, "another token is not held up"
        sessions = [answer.headers["mcp-session-id"] for answer in answers if answer.status_code == 200]
        assert in_session(base_url, first.agent_token, sessions[0]).status_code == 200

        # A session ended by its client frees its place, at once.
        assert in_session(base_url, first.agent_token, sessions[0], "DELETE").status_code == 200
        assert open_session(base_url, first.agent_token).status_code == 200
        assert open_session(base_url, first.agent_token).status_code == 429


@SQLITE
def test_the_sessions_a_token_may_hold_is_a_setting(app: Armarius, tmp_path: Path) -> None:
    assert load_settings(tmp_path, environ={"ARMARIUS_MCP_SESSIONS_PER_TOKEN": "2"}).mcp_sessions_per_token == 2
    (tmp_path / "armarius.toml").write_text("[server]\nmcp_sessions_per_token = 3\n")
    assert load_settings(tmp_path, environ={}).mcp_sessions_per_token == 3
    team = make_team(app)
    two = replace(app, settings=replace(app.settings, mcp_sessions_per_token=2))
    with serving(two) as base_url:
        assert [open_session(base_url, team.agent_token).status_code for _ in range(3)] == [200, 200, 429]


@SQLITE
def test_idle_sessions_end_sooner_than_the_sdks_default(app: Armarius) -> None:
    route = next(route for route in create_web_app(app).routes if getattr(route, "path", None) == "/mcp")
    manager = route.endpoint.manager  # type: ignore[attr-defined]
    assert isinstance(manager, AgentSessions)
    assert manager.session_idle_timeout == MCP_SESSION_IDLE_SECONDS == 600
    assert manager.max_sessions == MCP_SESSIONS_MAX >= 10 * 1000  # one token (at most 1000) cannot fill it


# DNS rebinding ------------------------------------------------------------------------------------------


@SQLITE
def test_a_loopback_server_answers_only_loopback_hosts_on_every_route(app: Armarius) -> None:
    team = make_team(app)
    bearer = {"Authorization": f"Bearer {team.agent_token}"}
    with serving(app) as base_url, httpx.Client(base_url=base_url, timeout=HTTP_TIMEOUT) as http:
        port = port_of(base_url)
        requests = [("GET", "/healthz", {}, None), ("GET", "/login", {}, None), ("GET", "/", {}, None),
                    ("POST", "/login", {"Content-Type": "application/x-www-form-urlencoded"}, b"name=admin"),
                    ("GET", "/api/whoami", bearer, None), ("GET", "/static/app.css", {}, None),
                    ("POST", "/mcp", {**MCP_HEADERS, **bearer}, None)]
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", "localhost.evil",
                     f"127.0.0.1:{port}@evil.example", f"[::1]evil:{port}", f"127.0.0.1:{port}:1"):
            for method, path, headers, content in requests:
                answer = http.request(method, path, headers={**headers, "Host": host}, content=content,
                                      json=INITIALIZE if path == "/mcp" else None)
                assert answer.status_code == 421, (host, path, answer.text[:300])
                error = answer.json()["error"]
                assert error["code"] == "not_allowed"
                assert error["details"] == {"reason": "host_not_loopback"}
                assert "Host: 127.0.0.1:<port>" in error["message"]
        for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", f"LocalHost:{port}", f"[::1]:{port}",
                     "[::1]", f"127.0.0.2:{port}"):
            assert http.get("/healthz", headers={"Host": host}).status_code == 200, host
            assert http.get("/api/whoami", headers={**bearer, "Host": host}).status_code == 200, host


@SQLITE
def test_mcp_takes_loopback_origins_only_and_the_pages_take_the_proxys(app: Armarius) -> None:
    """An Origin on /mcp must be a loopback one (the MCP specification asks servers to check it). The pages
    and /api take any: behind the documented proxy a browser sends the site's public origin with every form
    it posts, and the forms carry CSRF tokens."""
    team = make_team(app)
    with serving(app) as base_url:
        port = port_of(base_url)
        for origin in ("http://evil.example", f"http://evil.example:{port}", "null", f"http://127.0.0.1.evil:{port}",
                       f"file://127.0.0.1:{port}"):
            refused = open_session(base_url, team.agent_token, Origin=origin)
            assert refused.status_code == 403, origin
            assert refused.json()["error"]["details"] == {"reason": "origin_not_loopback"}
        for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"https://[::1]:{port}"):
            assert open_session(base_url, team.agent_token, Origin=origin).status_code == 200, origin
        with httpx.Client(base_url=base_url, timeout=HTTP_TIMEOUT,
                          headers={"Origin": "https://armarius.example.org"}) as browser:
            logged_in = post_login(browser, "alpha-human", team.human_password, "alpha")
            assert logged_in.status_code == 303, logged_in.text[:300]


@SQLITE
def test_a_rebinding_page_can_neither_read_nor_post_the_login_form(app: Armarius) -> None:
    """A page at evil.example, rebound to 127.0.0.1, posting wrong passwords for a person: without the check
    it read the form's token and locked the person out (5 failures from one address)."""
    team = make_team(app)
    with serving(app) as base_url:
        port = port_of(base_url)
        with httpx.Client(base_url=base_url, timeout=HTTP_TIMEOUT, headers={"Host": f"evil.example:{port}"}) as page:
            assert page.get("/login").status_code == 421
            with httpx.Client(base_url=base_url, timeout=HTTP_TIMEOUT) as helper:  # a token it could never read
                token = login_form_token(helper)
                page.cookies.update(helper.cookies)
            for _ in range(8):
                answer = page.post("/login", data={"csrf": token, "workspace": "alpha", "name": "alpha-human",
                                                   "password": "wrong"})
                assert answer.status_code == 421
        with httpx.Client(base_url=base_url, timeout=HTTP_TIMEOUT) as person:
            assert post_login(person, "alpha-human", team.human_password, "alpha").status_code == 303


@SQLITE
def test_a_server_not_on_loopback_takes_any_host(app: Armarius) -> None:
    """Behind a proxy on another machine (`serve --host 10.0.0.11`) the Host is the site's name."""
    port = free_port()
    server = uvicorn.Server(server_config(app, loopback=False, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        answer = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"Host": "armarius.example.org"},
                           timeout=HTTP_TIMEOUT)
        assert answer.status_code == 200
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_loopback_names() -> None:
    assert all(map(is_loopback_host, ["127.0.0.1", "127.0.0.1:1", "localhost:65535", "[::1]:8765", "127.9.9.9"]))
    assert not any(map(is_loopback_host, ["", "::1", "[::1", "localhost:", "localhost:x", "localhost:123456",
                                          "10.0.0.1:80", "0.0.0.0:80", "[::]:80", "127.0.0.1 :80", "localhost:٣"]))
    assert is_loopback_origin("http://localhost:3000")
    assert is_loopback_origin("https://127.0.0.1")
    assert not any(map(is_loopback_origin, ["null", "localhost", "ftp://localhost", "http://localhost/x",
                                            "http://evil.example"]))


# The login form's body ----------------------------------------------------------------------------------


@SQLITE
def test_a_login_form_over_its_small_limit_is_refused_before_it_is_read(app: Armarius) -> None:
    """Anyone may post the login form: each connection held with all but the last byte of a body the size of a
    page's form (3 MiB) held that much memory (1,000 of them: 2.6 GB). A login form is a few hundred bytes."""
    team = make_team(app)
    with serving(app) as base_url:
        port = port_of(base_url)
        for declared in (FORM_MAX_BYTES, LOGIN_FORM_MAX_BYTES + 1):
            head = (f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\n"
                    f"Content-Length: {declared}\r\n\r\n").encode()
            answer = raw(port, head + b"a=" + b"x" * 1024)  # a fraction of the body, then nothing
            assert status_of(answer) == 413, answer[:300]
            assert b"request_too_large" in answer
            assert re.search(rb"\r\nconnection: close\r\n", answer.split(b"\r\n\r\n")[0].lower() + b"\r\n")
        # A form at the limit is read: here a wrong password, refused as such.
        with httpx.Client(base_url=base_url, timeout=HTTP_TIMEOUT) as person:
            token = login_form_token(person)
            fields = {"csrf": token, "workspace": "alpha", "name": "alpha-human", "next": ""}
            encoded = httpx.QueryParams({**fields, "password": ""}).__str__()
            padded = {**fields, "password": "p" * (LOGIN_FORM_MAX_BYTES - len(encoded))}
            answer = person.post("/login", data=padded)
            assert int(answer.request.headers["content-length"]) == LOGIN_FORM_MAX_BYTES
            assert answer.status_code == 401, answer.text[:300]
            assert post_login(person, "alpha-human", team.human_password, "alpha").status_code == 303


@SQLITE
def test_a_client_hanging_up_in_a_login_body_is_one_brief_line(app: Armarius, caplog: pytest.LogCaptureFixture) -> None:
    """Anyone could write two tracebacks to the log (Starlette's and uvicorn's) by hanging up in a login form."""
    caplog.set_level(logging.INFO)
    with serving(app) as base_url:
        port = port_of(base_url)
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=20) as connection:
                connection.sendall((f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 100\r\n"
                                    "Content-Type: application/x-www-form-urlencoded\r\n\r\ncsrf=").encode())
                time.sleep(0.2)
        deadline = time.monotonic() + 20
        while sum("hung up" in record.getMessage() for record in caplog.records) < 3:
            assert time.monotonic() < deadline, [record.getMessage() for record in caplog.records]
            time.sleep(0.05)
        assert httpx.get(f"{base_url}/healthz", timeout=HTTP_TIMEOUT).status_code == 200
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert all(record.exc_info is None for record in caplog.records if "hung up" in record.getMessage())


# Connections -------------------------------------------------------------------------------------------


@SQLITE
def test_a_connection_past_the_limit_is_refused_at_once_and_the_server_recovers(
        app: Armarius, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Connections that never finish their head (slowloris) used to fill the process's file descriptors, and
    every client waited until the head timer closed them. Past the limit a connection is now told 503 and closed
    at once (logged once a minute), and the process keeps the rest of its descriptors."""
    monkeypatch.setattr(limits, "MAX_CONNECTIONS", 8)
    monkeypatch.setattr(limits, "_refused_connections", limits._Throttled())
    assert limits.connection_limit() == 8
    caplog.set_level(logging.WARNING)
    with serving(app) as base_url:
        port = port_of(base_url)
        held = []
        for _ in range(8):
            connection = socket.create_connection(("127.0.0.1", port), timeout=20)
            connection.sendall(b"G")
            held.append(connection)
        try:
            for _ in range(3):
                answer = raw(port, b"")  # read only: the server's answer arrives before anything it would not read
                assert status_of(answer) == 503, answer[:300]
                assert b"Connection: close" in answer
            with suppress(httpx.TransportError):  # a client that sends at once may see the close first
                assert httpx.get(f"{base_url}/healthz", timeout=HTTP_TIMEOUT).status_code == 503
        finally:
            for connection in held:
                connection.close()
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{base_url}/healthz", timeout=HTTP_TIMEOUT).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not recover"
            time.sleep(0.05)
    refused = [record for record in caplog.records if "refused a connection" in record.getMessage()]
    assert len(refused) == 1, [record.getMessage() for record in caplog.records]


def test_the_connection_limit_stays_below_the_open_files_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    resource = pytest.importorskip("resource")
    for soft, expected in ((1024, 896), (256, 128), (4096, 3584), (65_536, 4096), (resource.RLIM_INFINITY, 4096)):
        monkeypatch.setattr(resource, "getrlimit", lambda _which, soft=soft: (soft, soft))
        assert limits.connection_limit() == expected, soft


@SQLITE
def test_a_burst_of_failed_accepts_is_one_line_without_a_traceback(app: Armarius,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Past the limit on open files CPython's loop logs every failed accept with its traceback, up to the
    backlog's 2,048 on each turn of the loop (290,000 in 35 s); the server's app collapses them."""
    create_web_app(app)  # installs the filter, as `armarius serve` does
    (collapse,) = [found for found in logging.getLogger("asyncio").filters
                   if isinstance(found, limits.AcceptErrorFilter)]
    collapse.throttle = limits._Throttled()
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop = asyncio.new_event_loop()
    try:
        for _ in range(5000):
            loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                         "exception": OSError(24, "Too many open files")})
    finally:
        loop.close()
    lines = [record for record in caplog.records if record.name == "asyncio"]
    assert len(lines) == 1
    assert lines[0].exc_info is None
    assert "Too many open files" in lines[0].getMessage()


@SQLITE
def test_a_retry_to_listen_after_the_stop_leaves_no_traceback(app: Armarius, caplog: pytest.LogCaptureFixture) -> None:
    """After a failed accept asyncio listens again a second later; a server stopped within that second has closed
    its socket, and the retry failed with a traceback at every stop that came soon after a burst. Other errors of
    a callback are still logged whole."""
    create_web_app(app)
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop = asyncio.new_event_loop()
    retry = "Exception in callback BaseSelectorEventLoop._start_serving(<function>, <socket>, None, 2048)"
    try:
        loop.call_exception_handler({"message": retry, "exception": ValueError("Invalid file descriptor: -1")})
        loop.call_exception_handler({"message": retry, "exception": RuntimeError("something else")})
    finally:
        loop.close()
    lines = [record for record in caplog.records if record.name == "asyncio"]
    assert len(lines) == 1
    assert lines[0].exc_info is not None
    assert "something else" in str(lines[0].exc_info[1])


# A stop -------------------------------------------------------------------------------------------------


@SQLITE
def test_a_stop_gives_requests_in_flight_a_bounded_grace(app: Armarius, monkeypatch: pytest.MonkeyPatch) -> None:
    """A login body trickled one byte at a time (within the body's time limits) held a stop for two minutes;
    the server now cancels what is still in flight after SHUTDOWN_GRACE_SECONDS (here 1)."""
    assert server_config(app).timeout_graceful_shutdown == limits.SHUTDOWN_GRACE_SECONDS == 20
    monkeypatch.setattr(limits, "SHUTDOWN_GRACE_SECONDS", 1)
    port = free_port()
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    stop_trickling = threading.Event()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        with socket.create_connection(("127.0.0.1", port), timeout=20) as upload:
            upload.sendall((f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1000\r\n"
                            "Content-Type: application/x-www-form-urlencoded\r\n\r\na").encode())

            def trickle() -> None:
                while not stop_trickling.wait(0.3):
                    try:
                        upload.sendall(b"a")
                    except OSError:
                        return

            trickler = threading.Thread(target=trickle, daemon=True)
            trickler.start()
            time.sleep(0.5)  # the request is in flight
            server.should_exit = True
            thread.join(timeout=30)  # without the grace: until the body's total limit (120 s)
            assert not thread.is_alive(), "the stop waited for the trickled upload"
    finally:
        stop_trickling.set()
        server.should_exit = True
        thread.join(timeout=150)
