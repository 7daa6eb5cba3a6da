"""Oversized requests are refused before work is done (issue 16, item 8).

- Every text, list and object an agent tool takes (found by walking the tools' own schemas, so a new
  field needs a case here) is sent one past its limit: refused, and nothing written (no row, no file, no
  audit event, no budget).
- Research queries: line ranges, page sizes, offsets, long lists of filters, columns and values, deep
  nesting; an answer to the widest line range stays within the source's limit.
- Page sizes of the JSON API and the pages.
- The HTTP server itself (a real uvicorn, as `armarius serve` configures it): a declared body over the
  server's limit gets 413 before a byte is read, a chunked one as soon as it passes the limit, a body that
  does not arrive in time 408, a request head that does not arrive in time a closed connection; deeply
  nested JSON and oversized headers are refused; legitimate bodies at their services' limits pass every
  surface (a page's form, the JSON API, /mcp); and the server is well afterwards.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.evidence.model import BODY_MAX_BYTES as EVIDENCE_BODY_MAX
from armarius.mcp.limits import request_body_max_bytes
from armarius.mcp.server import ALL_TOOLS
from armarius.memory.model import REASON_MAX, SLUG_MAX, TAGS_MAX, TITLE_MAX
from armarius.memory.service import LIST_MAX, RECALL_MAX, RememberRequest
from armarius.repairs.model import ALTERNATIVES_MAX, TEXT_MAX
from armarius.sessions.enrichment import INPUTS_MAX
from armarius.sessions.model import SUBJECT_MAX
from armarius.web import limits
from tests import scale
from tests.helpers import OPERATOR, Agent, OwnerSQL, Team, agent_of, make_team, read_until_closed, tool_payload
from tests.research.repos import build_repo, source_entry, write_config
from tests.web.conftest import serving
from tests.web.people import Person, Visitors

pytestmark = pytest.mark.security

ENTRY = "ops/limits"
UNIT = "incident/limits"
ADMIN_PASSWORD = "admin correct horse battery staple"
#: The source's largest read (configured small, so that a file of the test repository exceeds it).
MAX_READ_LINES = 3


@dataclass
class Bench:
    app: Armarius
    team: Team
    admin: Actor
    session: int
    unit_revision: int
    proposal: int


@pytest.fixture
def bench(app: Armarius, tmp_path: Path) -> Iterator[Bench]:
    """A workspace with a research source, an entry, an active evidence unit and an open session."""
    repo = build_repo(tmp_path / "repo")
    write_config(app.settings.data_dir / "research.toml", [source_entry(repo, max_read_lines=MAX_READ_LINES)])
    application = open_app(replace(app.settings, research_config=Path("research.toml")))
    try:
        team = make_team(application)
        application.directory.add_principal("alpha-admin", Kind.HUMAN, workspace="alpha", role=Role.ADMIN,
                                            by=OPERATOR, password=ADMIN_PASSWORD)
        admin = application.directory.authenticate_password("alpha-admin", ADMIN_PASSWORD, workspace="alpha")
        application.memory.remember(team.agent, RememberRequest(ENTRY, "Limits", "Every request has one.\n"))
        application.evidence.create(team.human, UNIT, "Limits", "A unit to repair.\n")
        application.evidence.review(team.human, UNIT, 1)
        application.evidence.activate(admin, UNIT, 1)
        session = int(application.sessions.open(team.agent, "How large may a request be?")["session"])
        proposal = application.drafts.propose(team.agent, {"slug": "plans/p", "title": "Plan", "text": "Text.\n"})
        application.drafts.approve(admin, proposal_id=proposal["proposal"],
                                   reviewed_fingerprint=proposal["fingerprint"])
        yield Bench(application, team, admin, session, 1, int(proposal["proposal"]))
    finally:
        application.close()


def state(app: Armarius) -> dict[str, Any]:
    """Every table's rows (a session's invalid-request count and time aside), and every file of the data folder."""
    with OwnerSQL(app.settings) as sql:
        if app.settings.database_url is None:
            tables = [str(row[0]) for row in sql.rows("SELECT name FROM sqlite_master WHERE type = 'table'")]
        else:
            tables = [str(row[0]) for row in sql.rows("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        found: dict[str, Any] = {}
        for table in sorted(set(tables) - {"sessions", "agent_tokens", "web_sessions", "login_attempts"}):
            found[table] = sorted(map(repr, sql.rows(f"SELECT * FROM {table}")))
        found["sessions"] = sorted(map(repr, sql.rows("SELECT id, status, budget, used FROM sessions")))
    folder = app.settings.data_dir
    found["files"] = {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
                      for path in sorted(folder.rglob("*")) if path.is_file() and "sqlite3" not in path.name}
    return found


# Agent tools: every field one past its limit ------------------------------------------------------------


def schema_fields(schema: Mapping[str, Any], key: str) -> Iterator[str]:
    """The key of every text, list and free object in a tool's schema (enumerations and constants aside)."""
    kinds = schema.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "enum" in schema or "const" in schema:
        return
    if "array" in kinds:
        yield key
        yield from schema_fields(schema.get("items", {}), key + "[]")
    if "object" in kinds:
        if schema.get("properties"):
            for name, child in schema["properties"].items():
                yield from schema_fields(child, f"{key}.{name}")
        else:
            yield key
    if "string" in kinds:
        yield key


def tool_fields() -> set[str]:
    return {field for tool in ALL_TOOLS for name, schema in tool.input_schema["properties"].items()
            for field in schema_fields(schema, f"{tool.name}.{name}")}


INVALID = frozenset({"invalid_input"})


def oversize_cases(bench: Bench) -> dict[str, tuple[str, dict[str, Any], frozenset[str]]]:
    """Per field: (tool, arguments with that one field past its limit, the codes that refuse it)."""
    app = bench.app
    body_max = app.memory.limits.body_max_bytes
    over_body, over_title, over_reason = "x" * (body_max + 1), "t" * (TITLE_MAX + 1), "r" * (REASON_MAX + 1)
    too_many_tags = [f"tag{index}" for index in range(TAGS_MAX + 1)]
    slug = "s" * (SLUG_MAX + 1)
    huge = "k" * (1024 * 1024)  # a field without a length of its own: as long as a request may carry, nearly
    payload = {"slug": "plans/p", "title": "Plan", "text": "Text.\n"}
    alternative = {"target": {"kind": "entry", "name": ENTRY, "revision": 1}, "title": "Limits",
                   "body": "Every request has a limit.\n", "rationale": "Observed."}

    def remember(**more: Any) -> tuple[str, dict[str, Any], frozenset[str]]:
        return "remember", {"slug": "new/entry", "title": "T", "body": "B.\n", **more}, INVALID

    def prepare(**more: Any) -> tuple[str, dict[str, Any], frozenset[str]]:
        return "repair_prepare", {"session": bench.session, "conflict": "c", "alternatives": [
            {**alternative, **more}]}, INVALID

    evidence_alternative = {"target": {"kind": "evidence", "name": UNIT, "revision": bench.unit_revision},
                            "title": "Limits", "body": "é" * (EVIDENCE_BODY_MAX // 2 + 1), "rationale": "r"}
    return {
        "remember.slug": remember(slug=slug),
        "remember.title": remember(title=over_title),
        "remember.body": remember(body=over_body),
        "remember.tags": remember(tags=too_many_tags),
        "remember.tags[]": remember(tags=["t" * 65]),
        "remember.reason": remember(reason=over_reason, confirm_distinct=True),
        "recall.query": ("recall", {"query": "q" * 1001}, INVALID),
        "recall.tags": ("recall", {"query": "q", "tags": too_many_tags}, INVALID),
        "recall.tags[]": ("recall", {"query": "q", "tags": ["t" * 65]}, INVALID),
        "read.slug": ("read", {"slug": slug}, INVALID),
        "history.slug": ("history", {"slug": slug}, INVALID),
        "list.prefix": ("list", {"prefix": slug}, INVALID),
        "list.tag": ("list", {"tag": "t" * 65}, INVALID),
        "list.after": ("list", {"after": slug}, INVALID),
        "propose_draft.slug": ("propose_draft", {**payload, "slug": slug}, INVALID),
        "propose_draft.title": ("propose_draft", {**payload, "title": over_title}, INVALID),
        "propose_draft.text": ("propose_draft", {**payload, "text": over_body}, INVALID),
        "proposal_status.collection_key": ("proposal_status", {"proposal": bench.proposal, "collection_key": huge},
                                           frozenset({"not_found", "invalid_input"})),
        "create_draft.slug": ("create_draft", {**payload, "slug": slug, "approval": "a", "operation": "o"}, INVALID),
        "create_draft.title": ("create_draft", {**payload, "title": over_title, "approval": "a", "operation": "o"},
                               INVALID),
        "create_draft.text": ("create_draft", {**payload, "text": over_body, "approval": "a", "operation": "o"},
                              INVALID),
        "create_draft.approval": ("create_draft", {**payload, "approval": huge, "operation": "o"}, INVALID),
        "create_draft.operation": ("create_draft", {**payload, "approval": "a", "operation": "o" * 129}, INVALID),
        "session_open.subject": ("session_open", {"subject": "s" * (SUBJECT_MAX + 1)}, INVALID),
        "session_open.inputs": ("session_open", {"subject": "s", "inputs": [
            {"entity_type": "part", "id": index} for index in range(INPUTS_MAX + 1)]}, INVALID),
        "session_open.inputs[].entity_type": ("session_open", {"subject": "s", "inputs": [
            {"entity_type": "e" * 65, "id": 1}]}, INVALID),
        "session_open.inputs[].id": ("session_open", {"subject": "s", "inputs": [
            {"entity_type": "part", "id": "i" * 201}]}, INVALID),
        "project_query.arguments": ("project_query", {"session": bench.session, "arguments": {
            "kind": "source.search", "text": "x" * 257}}, INVALID),
        "repair_target.name": ("repair_target", {"session": bench.session, "kind": "entry", "name": slug}, INVALID),
        "repair_prepare.conflict": ("repair_prepare", {"session": bench.session, "conflict": "c" * (TEXT_MAX + 1),
                                                       "alternatives": [alternative]}, INVALID),
        "repair_prepare.alternatives": ("repair_prepare", {"session": bench.session, "conflict": "c",
                                                           "alternatives": [alternative] * (ALTERNATIVES_MAX + 1)},
                                        INVALID),
        "repair_prepare.alternatives[].target.name": prepare(target={"kind": "entry", "name": slug, "revision": 1}),
        "repair_prepare.alternatives[].title": prepare(title=over_title),
        # An entry's body obeys memory.body_max_bytes, an evidence unit's 1 MiB of UTF-8 (not characters).
        "repair_prepare.alternatives[].body": prepare(body=over_body),
        "repair_prepare.alternatives[].body (evidence, in bytes)": (
            "repair_prepare", {"session": bench.session, "conflict": "c", "alternatives": [evidence_alternative]},
            INVALID),
        "repair_prepare.alternatives[].tags": prepare(tags=too_many_tags),
        "repair_prepare.alternatives[].tags[]": prepare(tags=["t" * 65]),
        "repair_prepare.alternatives[].rationale": prepare(rationale="r" * (TEXT_MAX + 1)),
        # Page sizes.
        "list.limit": ("list", {"limit": LIST_MAX + 1}, INVALID),
        "recall.limit": ("recall", {"query": "limit", "limit": RECALL_MAX + 1}, INVALID),
    }


# Research queries --------------------------------------------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


QUERY_REFUSALS = {
    "a line past the largest": {"kind": "source.read", "path": "src/app.py", "start_line": 2**31, "end_line": 2**31},
    "a page over the largest": {"kind": "source.files", "substring": "a", "limit": 10_001},
    "an offset over the largest": {"kind": "source.search", "text": "a", "offset": 1_000_001},
    "a path too long": {"kind": "source.read", "path": "p" * 1025, "start_line": 1, "end_line": 2},
    "a literal too long": {"kind": "source.search", "text": "t" * 257},
    "rows over the largest page": {"kind": "database.rows", "table": "t", "limit": 10_001},
    "too many filters": {"kind": "database.rows", "table": "t", "filters": [
        {"column": "c", "op": "eq", "value": 1}] * 17},
    "too many values in a list": {"kind": "database.rows", "table": "t", "filters": [
        {"column": "c", "op": "in", "value": list(range(1001))}]},
    "too many columns": {"kind": "database.rows", "table": "t", "columns": [f"c{index}" for index in range(257)]},
    "too many orderings": {"kind": "database.rows", "table": "t", "order_by": [{"column": f"c{index}"}
                                                                              for index in range(9)]},
    "a value too long": {"kind": "database.rows", "table": "t", "filters": [
        {"column": "c", "op": "eq", "value": "v" * 10_001}]},
    "a value nested deep": {"kind": "database.rows", "table": "t", "filters": [
        {"column": "c", "op": "in", "value": nested(150)}]},
    "an unknown field nested deep": {"kind": "source.files", "substring": "a", "extra": nested(150)},
}


async def tool_refusals(bench: Bench, call: Agent) -> int:
    """Every tool field one past its limit: refused, and nothing written at all."""
    cases = oversize_cases(bench)
    assert sorted(tool_fields() - {key.split(" ")[0] for key in cases}) == [], "every field needs a case here"
    before = state(bench.app)
    for key, (tool, arguments, refusals) in cases.items():
        answer = await call(tool, **arguments)
        assert answer.get("error") in refusals, (key, str(answer)[:500])
        assert len(json.dumps(answer)) < 4096, (key, "a refusal repeats a value only cut short")
    assert state(bench.app) == before
    return len(cases)


async def query_refusals(bench: Bench, call: Agent) -> int:
    """Every query past a limit: refused, nothing captured, recorded or spent; the widest line range is cut."""
    app = bench.app
    limit = app.settings.research_invalid_request_limit
    before = state(app)
    session = bench.session
    for index, (case, query) in enumerate(QUERY_REFUSALS.items()):
        if index % (limit - 1) == limit - 2:  # a fresh session before this one blocks for invalid requests
            session = (await call("session_open", subject=f"Session {index}"))["session"]
        answer = await call("project_query", session=session, arguments=query)
        assert answer.get("error") == "invalid_input", (case, str(answer)[:500])
        assert len(json.dumps(answer)) < 4096, case
    after = state(app)
    # Only the new sessions were written (and their audit events).
    for table in ("captures", "evidence_records", "session_reservations"):
        assert after[table] == before[table], table
    assert (await call("session_show", session=bench.session))["budget"]["used"] == 0
    widest = await call("project_query", session=session, arguments={
        "kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2**31 - 1})
    assert len(widest["result"]["lines"]) == MAX_READ_LINES, widest
    assert (widest["result"]["complete"], widest["result"]["next_start_line"]) == (False, MAX_READ_LINES + 1)
    return len(QUERY_REFUSALS) + 1


@pytest.mark.anyio
async def test_every_tool_argument_and_query_past_its_limit_is_refused_before_anything_is_done(bench: Bench) -> None:
    async with agent_of(bench.app, bench.team.agent) as call:
        count = await tool_refusals(bench, call)
        count += await query_refusals(bench, call)
    scale.record("oversized requests", count)


# The HTTP server -----------------------------------------------------------------------------------------


def raw_request(port: int, head: bytes, body_parts: Sequence[tuple[float, bytes]] = (), *,
                timeout: float = 10) -> tuple[bytes, float]:
    """Send a request's head, then each (pause, bytes) part; the server's answer and how long it took.

    A write the server no longer reads (it answered and closed) ends the sending."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(head)
        try:
            for pause, part in body_parts:
                time.sleep(pause)
                connection.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_until_closed(connection)
    return answer, time.monotonic() - started


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer[9:12])


def envelope_of(answer: bytes) -> dict[str, Any]:
    return dict(json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"])


@dataclass
class Served:
    bench: Bench
    base_url: str
    port: int
    person: Person
    visitors: Visitors


@pytest.fixture
def served(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """The bench's app on a real uvicorn server; time limits short enough for a test (a head in 0.5 s, a body
    0.5 s between parts and 1.5 s in all), the size limit as the product computes it."""
    monkeypatch.setattr(limits, "REQUEST_HEAD_SECONDS", 0.5)
    monkeypatch.setattr(limits, "BODY_IDLE_SECONDS", 0.5)
    monkeypatch.setattr(limits, "BODY_TOTAL_SECONDS", 1.5)
    with serving(bench.app) as base_url:
        visitors = Visitors(base_url)
        try:
            person = visitors.log_in("alpha-admin", ADMIN_PASSWORD, "alpha")
            yield Served(bench, base_url, int(base_url.rsplit(":", 1)[1]), person, visitors)
        finally:
            visitors.close()


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_the_server_refuses_bodies_too_large_too_slow_or_too_deep_before_reading_them(served: Served) -> None:
    bench, port = served.bench, served.port
    maximum = request_body_max_bytes(bench.app.settings)
    assert maximum == 31 * 1024 * 1024  # with the default settings
    token = bench.team.agent_token
    mcp = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
           "Accept": "application/json, text/event-stream"}
    before = state(bench.app)
    count = 0
    # A declared length over the limit: 413 at once, without a byte of the body sent, on any route.
    for method, path, headers in (("POST", "/mcp", mcp), ("POST", "/mcp", {"Content-Type": "application/json"}),
                                  ("POST", "/api/entries/curate", {"Content-Type": "application/json"}),
                                  ("POST", "/evidence/new", {"Content-Type": "application/x-www-form-urlencoded"}),
                                  ("GET", "/healthz", {})):
        answer, took = raw_request(port, head(method, path, {**headers, "Content-Length": str(maximum + 1)}))
        assert status_of(answer) == 413, (path, answer[:300])
        assert envelope_of(answer)["code"] == "request_too_large"
        assert envelope_of(answer)["details"] == {"limit": maximum}
        assert took < 5, "answered without waiting for the body"
        count += 1
    # A body without a declared length (chunked): refused as soon as it passes the limit.
    chunk = b"x" * (1024 * 1024)
    parts = [(0.0, b"%x\r\n%s\r\n" % (len(chunk), chunk))] * (maximum // len(chunk) + 2) + [(0.0, b"0\r\n\r\n")]
    answer, _took = raw_request(port, head("POST", "/mcp", {**mcp, "Transfer-Encoding": "chunked"}), parts)
    assert status_of(answer) == 413, answer[:300]
    count += 1
    # A body that stops arriving, and one that drips: 408 after the idle and the total limits.
    stalled, took = raw_request(port, head("POST", "/mcp", {**mcp, "Content-Length": "1000"}), [(0.0, b'{"json')])
    assert status_of(stalled) == 408, stalled[:300]
    assert envelope_of(stalled)["code"] == "request_timeout"
    assert took < 5
    dripping, took = raw_request(port, head("POST", "/mcp", {**mcp, "Content-Length": "1000"}),
                                 [(0.3, b"x")] * 8)
    assert status_of(dripping) == 408, dripping[:300]
    assert 1.4 < took < 5
    count += 2
    # A head that never comes, stops half-way or drips: the connection is closed (nothing to answer).
    for parts in ([], [(0.0, b"GET /healthz HTTP/1.1\r\nHo")], [(0.0, b"G"), *[(0.2, b"E")] * 10]):
        answer, took = raw_request(port, b"", parts)
        assert answer == b"", answer[:300]
        assert took < 2.5, took
        count += 1
    # Headers are bounded by uvicorn (h11 refuses a head still incomplete past 16 KiB; one read may bring more).
    answer, _took = raw_request(port, head("GET", "/healthz", {"X-Padding": "p" * 1024 * 1024}))
    assert answer == b"" or status_of(answer) in (400, 431), answer[:300]
    count += 1
    # JSON nested deeper than the parser goes: invalid, not an internal failure (the MCP SDK's parser stops at
    # 200 levels, and the query schemas refuse nesting, above).
    person = served.person
    deep = b'{"slug": ' + b"[" * 100_000 + b"]" * 100_000 + b', "revision": 1}'
    api = person.http.post("/api/entries/curate", content=deep,
                           headers={"X-CSRF-Token": person.csrf(), "Content-Type": "application/json"})
    assert api.status_code == 400, api.text[:300]
    assert api.json()["error"]["code"] == "invalid_input"
    count += 1
    assert state(bench.app) == before
    assert person.http.get("/healthz").status_code == 200, "the server is well"
    scale.record("oversized requests", count)


@pytest.mark.anyio
@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
async def test_bodies_at_their_services_limits_pass_every_surface(served: Served) -> None:
    """What a service accepts, every surface carries, however its encoding grows it: 1 MiB of non-ASCII text
    (3 MiB in a form, up to 6 MiB as escaped JSON) to an evidence unit through the page and the JSON API, and
    a repair proposal of ALTERNATIVES_MAX evidence bodies of 1 MiB each (over 5 MiB) through /mcp. The largest
    request a tool takes, escaped as JSON may escape it, is within the server's limit (counted, not sent)."""
    bench, person = served.bench, served.person
    body = "é" * (EVIDENCE_BODY_MAX // 2)  # exactly 1 MiB of UTF-8
    page = person.http.post("/evidence/new", data={"csrf": person.csrf(), "unit": "big/page", "title": "Big",
                                                   "body": body})
    assert page.status_code == 303, page.text[:500]
    escaped = json.dumps({"unit": "big/api", "title": "Big", "body": body})  # ensure_ascii: \u00e9
    api = person.http.post("/api/evidence/create", content=escaped,
                           headers={"X-CSRF-Token": person.csrf(), "Content-Type": "application/json"})
    assert api.status_code == 200, api.text[:500]
    for unit in ("big/page", "big/api"):
        assert bench.app.evidence.current(bench.admin, unit).body == body
    # The answer repeats the alternatives: the SDK's client reads no event over 1 MiB by default, so this one
    # is told to read more.
    alternative = {"target": {"kind": "evidence", "name": UNIT, "revision": bench.unit_revision}, "title": "Limits",
                   "body": "The resolver cache expired.\n" * (EVIDENCE_BODY_MAX // 29), "rationale": "r"}
    async with (create_mcp_http_client(headers={"Authorization": f"Bearer {bench.team.agent_token}"}) as http,
                Client(streamable_http_client(f"{served.base_url}/mcp", http_client=http,
                                              max_sse_event_size=64 * 1024 * 1024), mode="legacy") as client):
        result = await client.call_tool("repair_prepare", {"session": bench.session, "conflict": "c",
                                                           "alternatives": [alternative] * ALTERNATIVES_MAX})
    answer = tool_payload(result)
    assert not result.is_error, answer
    assert answer["status"] == "proposed"
    assert len(answer["alternatives"]) == ALTERNATIVES_MAX
    largest = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "repair_prepare", "arguments": {
        "session": bench.session, "conflict": "\x01" * TEXT_MAX, "alternatives": [
            {"target": {"kind": "evidence", "name": "n" * SLUG_MAX, "revision": 2**63 - 1},
             "title": "\U0001f600" * TITLE_MAX, "body": "\x01" * EVIDENCE_BODY_MAX, "tags": ["t" * 64] * TAGS_MAX,
             "rationale": "\x01" * TEXT_MAX},
        ] * ALTERNATIVES_MAX}}}
    assert len(json.dumps(largest).encode()) <= request_body_max_bytes(bench.app.settings)
    scale.record("oversized requests", 3)
