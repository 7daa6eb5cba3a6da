"""The HTTP surface on a real uvicorn server: bearer tokens on /mcp and /api, sessions, OpenAPI."""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Role
from armarius.config import Settings
from armarius.errors import ERROR_CODES, Unauthenticated
from armarius.web.app import create_web_app
from armarius.web.auth import authenticate
from tests.helpers import OPERATOR, make_team, tool_payload, writing_elsewhere
from tests.web.people import HTTP_TIMEOUT

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def mcp_client(base_url: str, token: str) -> AsyncIterator[Client]:
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode="legacy") as client,
    ):
        yield client


async def test_a_role_change_applies_to_the_next_call(app: Armarius, base_url: str) -> None:
    team = make_team(app)
    async with mcp_client(base_url, team.agent_token) as client:
        before = tool_payload(await client.call_tool("whoami", {}))
        app.directory.set_role("alpha-agent", workspace="alpha", role=Role.READER, by=OPERATOR)
        after = tool_payload(await client.call_tool("whoami", {}))
    assert before["role"] == "editor"
    assert after["role"] == "reader"
    assert "memory.write" not in after["permissions"]


async def test_a_revoked_token_is_refused_at_once(app: Armarius, base_url: str) -> None:
    team = make_team(app)
    headers = {"Authorization": f"Bearer {team.agent_token}"}
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        assert (await http.get(f"{base_url}/api/whoami", headers=headers)).status_code == 200
        app.directory.revoke_token(team.agent.token_id or 0, by=OPERATOR)
        api = await http.get(f"{base_url}/api/whoami", headers=headers)
        mcp = await http.post(f"{base_url}/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert api.status_code == 401
    assert mcp.status_code == 401
    assert api.json()["error"]["code"] == "unauthenticated"


async def test_an_mcp_session_belongs_to_the_token_that_opened_it(app: Armarius, base_url: str) -> None:
    first, second = make_team(app, "alpha"), make_team(app, "beta")
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        opened = await http.post(f"{base_url}/mcp", json=initialize,
                                 headers={**accept, "Authorization": f"Bearer {first.agent_token}"})
        session = opened.headers["mcp-session-id"]
        hijack = await http.post(
            f"{base_url}/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**accept, "Authorization": f"Bearer {second.agent_token}", "mcp-session-id": session,
                     "mcp-protocol-version": "2025-06-18"},
        )
    assert opened.status_code == 200
    assert hijack.status_code == 404


async def test_a_token_is_checked_on_the_event_loop_only_on_sqlite_while_nobody_writes(
        app: Armarius, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token not checked within the last second is checked on the event loop where the store is embedded
    and its writers' turn is free, else in a worker thread: on PostgreSQL, and while another thread writes.
    The check is the real one either way: a revoked token is refused on the loop too."""
    team = make_team(app)
    checked_in: list[int] = []
    real_check = app.directory.authenticate_token

    def check(token: str) -> Actor:
        checked_in.append(threading.get_ident())
        return real_check(token)

    monkeypatch.setattr(app.directory, "authenticate_token", check)

    def new_token() -> str:
        return app.directory.issue_token("alpha-agent", workspace="alpha", by=OPERATOR).token

    def scope(token: str) -> dict[str, Any]:
        return {"type": "http", "headers": [(b"authorization", f"Bearer {token}".encode())]}

    loop_thread = threading.get_ident()
    sqlite = app.database.dialect == "sqlite"
    assert (await authenticate(app, scope(new_token()))).principal == "alpha-agent"
    assert (checked_in.pop() == loop_thread) == sqlite
    used, revoked = new_token(), new_token()
    real_check(used)  # used just now: checking it again writes nothing
    app.directory.revoke_token(real_check(revoked).token_id or 0, by=OPERATOR)  # every token is checked anew
    with writing_elsewhere(app.database, "UPDATE workspaces SET name = name WHERE name = ?", ("alpha",)):
        assert (await authenticate(app, scope(used))).principal == "alpha-agent"
    assert checked_in.pop() != loop_thread
    with pytest.raises(Unauthenticated):
        await authenticate(app, scope(revoked))
    assert (checked_in.pop() == loop_thread) == sqlite
    assert (await authenticate(app, scope(team.agent_token))).principal == "alpha-agent"


async def test_a_tool_call_is_answered_with_one_json_body(app: Armarius, base_url: str) -> None:
    team = make_team(app)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "Authorization": f"Bearer {team.agent_token}"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        opened = await http.post(f"{base_url}/mcp", json=initialize, headers=headers)
        headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        await http.post(f"{base_url}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                        headers=headers)
        called = await http.post(f"{base_url}/mcp", headers=headers, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}})
    assert called.status_code == 200
    assert called.headers["content-type"] == "application/json"
    answer = called.json()
    assert answer["id"] == 2
    assert json.loads(answer["result"]["content"][0]["text"])["principal"] == "alpha-agent"


async def test_each_token_sees_only_its_own_workspace(app: Armarius, base_url: str) -> None:
    alpha, beta = make_team(app, "alpha"), make_team(app, "beta")
    async with mcp_client(base_url, alpha.agent_token) as client:
        seen_by_alpha = tool_payload(await client.call_tool("workspace_info", {}))
    async with mcp_client(base_url, beta.agent_token) as client:
        seen_by_beta = tool_payload(await client.call_tool("workspace_info", {}))
    assert (seen_by_alpha["workspace"], seen_by_beta["workspace"]) == ("alpha", "beta")


async def test_api_and_health(app: Armarius, base_url: str) -> None:
    team = make_team(app)
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        health = await http.get(f"{base_url}/healthz")
        whoami = await http.get(f"{base_url}/api/whoami", headers={"Authorization": f"Bearer {team.agent_token}"})
        document = (await http.get(f"{base_url}/api/openapi.json")).json()
        home = await http.get(f"{base_url}/", follow_redirects=True)
    assert health.json() == {"status": "ok"}
    assert whoami.json()["principal"] == "alpha-agent"
    assert {"/api/whoami", "/api/workspace", "/healthz"} <= set(document["paths"])
    codes = document["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"]
    assert set(codes) == set(ERROR_CODES)
    assert str(home.url).endswith("/login"), "the pages need a login"
    assert "Armarius" in home.text


async def test_requests_share_the_configured_threads_and_the_health_check_never_waits_for_them(
        settings: Settings) -> None:
    application = open_app(replace(settings, request_threads=3))
    web = create_web_app(application)
    try:
        async with web.router.lifespan_context(web):
            limiter = anyio.to_thread.current_default_thread_limiter()
            assert limiter.total_tokens == 3
            holders = [object() for _ in range(3)]
            for holder in holders:  # every request thread busy
                await limiter.acquire_on_behalf_of(holder)
            try:
                with anyio.fail_after(HTTP_TIMEOUT):
                    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=web),
                                                 base_url="http://127.0.0.1") as http:
                        health = await http.get("/healthz")
            finally:
                for holder in holders:
                    limiter.release_on_behalf_of(holder)
    finally:
        application.close()
    assert health.json() == {"status": "ok"}


async def test_the_request_threads_default_to_the_stores(settings: Settings) -> None:
    """Left unset, a server on SQLite runs 8 request threads, one on PostgreSQL 4 (config.py says why)."""
    application = open_app(settings)
    web = create_web_app(application)
    try:
        async with web.router.lifespan_context(web):
            threads = anyio.to_thread.current_default_thread_limiter().total_tokens
    finally:
        application.close()
    assert settings.request_threads is None
    assert threads == {"sqlite": 8, "postgresql": 4}[application.database.dialect]


async def test_the_api_root_lists_its_routes_and_the_openapi_document(app: Armarius, base_url: str) -> None:
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        index = await http.get(f"{base_url}/api")
        document = (await http.get(f"{base_url}{index.json()['openapi']}")).json()
    assert index.status_code == 200
    listed = {route["path"] for route in index.json()["routes"]}
    assert listed == set(document["paths"]) - {"/api", "/healthz"}


def test_the_http_api_offers_no_identity_action_and_agents_no_write() -> None:
    """Identity actions on a network surface would need principals.manage (docs/security.md): the API
    offers none today. Its writes are people's decisions and their own web-session actions, each the twin of
    a page's form (CSRF-checked); an agent token writes nothing over /api. A new route that writes must
    revisit this."""
    from armarius.auth.permissions import Kind
    from armarius.web.api import API_ROUTES

    writes = [route for route in API_ROUTES if route.method != "GET"]
    assert ("POST", "/api/workspace") in {(route.method, route.path) for route in writes}
    assert not [route.path for route in API_ROUTES if route.path.startswith(("/api/principals", "/api/tokens"))]
    assert all(Kind.AGENT not in route.callers for route in writes)


def _patterns(schema: Any) -> list[str]:
    """Every regular expression a JSON document's schemas publish (``pattern``, also under ``not``)."""
    if isinstance(schema, dict):
        own = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
        return own + [pattern for value in schema.values() for pattern in _patterns(value)]
    if isinstance(schema, list):
        return [pattern for value in schema for pattern in _patterns(value)]
    return []


def test_the_published_patterns_read_alike_in_every_regular_expression_engine() -> None:
    """A client checks a request against the OpenAPI document with its own engine (JSON Schema names
    ECMAScript's), the server with Python's: classes like \\s and \\w differ between them (Python's \\s holds
    U+0085 and U+001C-U+001F, ECMAScript's U+FEFF), so the document spells characters out. And "not blank"
    means what the services' str.strip() means, for every character."""
    from armarius.web.api import openapi_document
    from armarius.web.pages.repairs import WHITE_SPACE

    patterns = _patterns(openapi_document())
    assert patterns
    assert not [pattern for pattern in patterns if re.search(r"\\[sSwWdDbB]", pattern)]
    kept = re.compile(f"[^{WHITE_SPACE}]")
    assert [code for code in range(sys.maxunicode + 1)
            if (kept.match(chr(code)) is None) != chr(code).isspace()] == []


@given(data=st.data())
def test_a_published_pattern_ends_where_the_text_ends(data: st.DataObject) -> None:
    """JSON Schema reads ``$`` as ECMAScript does, the end of the text; Python's ``$`` also matches before a
    final newline, so the server's check took "beta\\n" for the workspace pattern ^[a-z0-9]...$. Every
    published ^...$ pattern: the server accepts exactly the texts its inside matches whole, also with a
    newline after one that it matches."""
    from armarius.validation import PublishedValidator, ecmascript_ends
    from armarius.web.api import openapi_document

    anchored = sorted({pattern for pattern in _patterns(openapi_document())
                       if pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")})
    assert len(anchored) >= 5
    pattern = data.draw(st.sampled_from(anchored))
    text = data.draw(st.from_regex(ecmascript_ends(pattern), fullmatch=True))
    validator = PublishedValidator({"type": "string", "pattern": pattern})
    for candidate in (text, text + "\n", "\n" + text):
        assert validator.is_valid(candidate) == (re.fullmatch(pattern[1:-1], candidate) is not None)
