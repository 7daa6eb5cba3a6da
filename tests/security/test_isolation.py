"""Workspace isolation on every surface (issue 16, item 6), on both engines.

Workspace B (``beta``) holds one of everything: an entry that needs review, draft proposals (one approved,
with its token and the agent's collection key), a research session with a capture, an active evidence
unit, a repair proposal and their audit events. From workspace A (``alpha``) every agent tool, every JSON
route and every web page is exercised against B's ids and names, by A's agent and A's administrator (the
strongest principals of A, so that a refusal is never just a missing permission). Each answer is "not
found" (or the documented refusal), no answer holds any of B's content, and B's rows and files are the
same afterwards.

The tools come from the server's own tool list and the routes from the web app's route table: a tool, a
route or a page without a case here fails the test that enumerates it.

On PostgreSQL the application's login role is also used directly: every table with a ``workspace_id``
column (found in the catalogue) has row-level security enabled and forced, and with the transaction set to
workspace A, B's rows can be neither read, changed, deleted nor forged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest
from starlette.routing import Mount, Route

from armarius.app import Armarius, open_app
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.drafts.model import DraftPayload
from armarius.mcp.server import ALL_TOOLS
from armarius.memory.service import RememberRequest
from armarius.web.api import API_ROUTES
from armarius.web.app import create_web_app
from tests import scale
from tests.helpers import OPERATOR, OwnerSQL, Team, agent_of, make_team
from tests.research.repos import build_repo, source_entry, write_config
from tests.web.conftest import serving
from tests.web.people import Person, Visitors, post_login

pytestmark = pytest.mark.security

ENTRY = "ops/wind-notes"
UNIT = "incident/night-outage"
PENDING_SLUG, APPROVED_SLUG = "plans/night-shift", "plans/day-shift"
ADMIN_PASSWORD = "admin correct horse battery staple"
#: Words only B's content holds (never part of an id, slug, name or query a probe sends), and B's principals.
B_MARKERS = ("kestrel", "zephyr", "HANDLERS", "beta-agent", "beta-human", "beta-admin")
B_READ = {"kind": "source.read", "path": "src/registry.py", "start_line": 1, "end_line": 3}
A_READ = {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2}
#: A word of B's content that probes search for: a search that leaked would answer with B's markers.
SEARCHED = "quillwort"
NOT_FOUND = frozenset({"not_found"})


@dataclass
class World:
    app: Armarius
    alpha: Team
    alpha_admin: Actor
    alpha_session: int
    beta: Team
    beta_admin: Actor
    ids: dict[str, Any] = field(default_factory=dict)


def add_admin(app: Armarius, workspace: str) -> Actor:
    name = f"{workspace}-admin"
    app.directory.add_principal(name, Kind.HUMAN, workspace=workspace, role=Role.ADMIN, by=OPERATOR,
                                password=ADMIN_PASSWORD)
    return app.directory.authenticate_password(name, ADMIN_PASSWORD, workspace=workspace)


def populate_beta(app: Armarius, beta: Team, beta_admin: Actor) -> dict[str, Any]:
    """One of everything in B; the ids and names a probe from A aims at."""
    memory = app.memory
    first = "The kestrel roosts on zephyr ridge among quillwort.\n"
    memory.remember(beta.agent, RememberRequest(ENTRY, "Kestrel roosts", first, tags=["birds"]))
    memory.curate(beta.human, ENTRY, 1)
    override = memory.remember(beta.agent, RememberRequest(
        ENTRY, "Kestrel roosts", "The kestrel moved to zephyr pass, past the quillwort.\n", expected_revision=1,
        override_curated=True, reason="The kestrel was seen on the pass."))
    assert override["status"] == "written", override
    pending = app.drafts.propose(beta.agent, {"slug": PENDING_SLUG, "title": "Kestrel night watch",
                                              "text": "Zephyr watch rota by the quillwort.\n"})
    approved_payload = {"slug": APPROVED_SLUG, "title": "Kestrel day watch", "text": "Zephyr day rota.\n"}
    approved = app.drafts.propose(beta.agent, approved_payload)
    fingerprint = DraftPayload(**approved_payload).fingerprint
    issued = app.drafts.approve(beta.human, proposal_id=approved["proposal"], reviewed_fingerprint=fingerprint)
    drafted_payload = {"slug": "plans/dusk-shift", "title": "Kestrel dusk watch", "text": "Zephyr dusk rota.\n"}
    drafted = app.drafts.propose(beta.agent, drafted_payload)
    app.drafts.approve(beta.human, proposal_id=drafted["proposal"],
                       reviewed_fingerprint=DraftPayload(**drafted_payload).fingerprint)
    collected = app.drafts.proposal_status(beta.agent, drafted["proposal"], drafted["collection_key"])
    app.drafts.create_draft(beta.agent, drafted_payload, collected["approval"], "beta-dusk")
    written = memory.remember(beta.agent, RememberRequest("ops/wind-index", "Kestrel index",
                                                          "See [[ops/wind-notes]] and [[ops/missing]].\n"))
    assert written["status"] == "written", written
    session = int(app.sessions.open(beta.agent, "Where does the kestrel registry live, quillwort?")["session"])
    capture = app.sessions.query(beta.agent, session, B_READ)["capture"]
    app.evidence.create(beta.human, UNIT, "Kestrel outage", "The zephyr relay by the quillwort failed at night.\n")
    app.evidence.review(beta.human, UNIT, 1)
    app.evidence.activate(beta_admin, UNIT, 1)
    repair = app.repairs.prepare(beta.agent, session, "The kestrel registry contradicts the zephyr notes.", [{
        "target": {"kind": "entry", "name": ENTRY, "revision": 2}, "title": "Kestrel roosts",
        "body": "The kestrel roosts on zephyr hill.\n", "rationale": "The registry says hill."}])["repair"]
    return {"entry": ENTRY, "entry_revision": 2, "unit": UNIT, "pending": pending["proposal"],
            "pending_fingerprint": pending["fingerprint"], "approved": approved["proposal"],
            "approved_payload": approved_payload, "approval": issued.token,
            "collection_key": approved["collection_key"], "session": session, "capture": capture,
            "repair": int(repair)}


@pytest.fixture
def world(app: Armarius, tmp_path: Path) -> Iterator[World]:
    """Workspaces A and B on an application with a research source (so every agent tool is offered)."""
    repo = build_repo(tmp_path / "repo")
    write_config(app.settings.data_dir / "research.toml", [source_entry(repo)])
    application = open_app(replace(app.settings, research_config=Path("research.toml")))
    try:
        alpha, beta = make_team(application, "alpha"), make_team(application, "beta")
        alpha_admin, beta_admin = add_admin(application, "alpha"), add_admin(application, "beta")
        ids = populate_beta(application, beta, beta_admin)
        # A has content of its own, with other names: its lists are not empty, and its session has a capture.
        application.memory.remember(alpha.agent, RememberRequest("alpha/own", "Alpha's own", "Alpha's note.\n"))
        alpha_session = int(application.sessions.open(alpha.agent, "Alpha's own question")["session"])
        application.sessions.query(alpha.agent, alpha_session, A_READ)
        yield World(application, alpha, alpha_admin, alpha_session, beta, beta_admin, ids)
    finally:
        application.close()


# What B is, before and after -------------------------------------------------------------------------


def workspace_tables(sql: OwnerSQL, postgres: bool) -> list[str]:
    """Every table with a workspace_id column, from the catalogue."""
    if postgres:
        rows = sql.rows("SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
                        "AND column_name = 'workspace_id' ORDER BY 1")
        return [str(row[0]) for row in rows]
    tables = [str(row[0]) for row in sql.rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")]
    return [table for table in tables
            if any(column[1] == "workspace_id" for column in sql.rows(f"PRAGMA table_info('{table}')"))]


def snapshot(world: World) -> dict[str, Any]:
    """B's rows in every workspace table, its members, tokens and principals, and every file of B's folder."""
    app, beta_id = world.app, world.beta.agent.workspace_id
    with OwnerSQL(app.settings) as sql:
        tables = workspace_tables(sql, app.settings.database_url is not None)
        found: dict[str, Any] = {table: sorted(map(repr, sql.rows(f"SELECT * FROM {table} WHERE workspace_id = ?",
                                                                   (beta_id,)))) for table in tables}
        found["memberships"] = sorted(map(repr, sql.rows("SELECT * FROM memberships WHERE workspace_ref = ?",
                                                         (beta_id,))))
        found["agent_tokens"] = sorted(map(repr, sql.rows("SELECT * FROM agent_tokens WHERE workspace_ref = ?",
                                                          (beta_id,))))
        found["principals"] = sorted(map(repr, sql.rows("SELECT * FROM principals WHERE name LIKE ?", ("beta-%",))))
    folder = app.settings.data_dir / "evidence" / "beta"
    found["files"] = {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
                      for path in sorted(folder.rglob("*")) if path.is_file()}
    assert all(found[part] for part in ("files", "entries", "captures", "repairs")), "B holds content"
    return found


def leaked(text: str) -> list[str]:
    return [marker for marker in B_MARKERS if marker in text]


# Agent tools -------------------------------------------------------------------------------------------

ToolCases = dict[str, list[tuple[dict[str, Any], frozenset[str] | None]]]


def tool_cases(world: World) -> ToolCases:
    """Per tool: (arguments aimed at B, the error codes allowed; None: an answer, which must hold nothing of B)."""
    b = world.ids
    payload = b["approved_payload"]
    b_alternative = {"target": {"kind": "entry", "name": b["entry"], "revision": b["entry_revision"]},
                     "title": "Forged", "body": "Forged body.\n", "rationale": "Forged."}
    return {
        "whoami": [({}, None)],
        "workspace_info": [({}, None)],
        "remember": [({"slug": b["entry"], "title": "Forged", "body": "Forged.\n",
                       "expected_revision": b["entry_revision"]}, frozenset({"conflict", "not_found"})),
                     ({"slug": b["entry"], "title": "Forged", "body": "Forged.\n", "expected_revision": 1,
                       "override_curated": True, "reason": "forged"}, frozenset({"conflict", "not_found"}))],
        "recall": [({"query": SEARCHED}, None), ({"query": SEARCHED, "curated_only": True}, None)],
        "read": [({"slug": b["entry"]}, NOT_FOUND), ({"slug": b["entry"], "revision": 1}, NOT_FOUND)],
        "history": [({"slug": b["entry"]}, NOT_FOUND)],
        "list": [({}, None), ({"prefix": "ops"}, None), ({"needs_review": True}, None), ({"curated": True}, None)],
        "propose_draft": [({"slug": PENDING_SLUG, "title": "Alpha's own plan", "text": "Alpha's text.\n"}, None)],
        "proposal_status": [({"proposal": b["pending"]}, NOT_FOUND),
                            ({"proposal": b["approved"], "collection_key": b["collection_key"]}, NOT_FOUND)],
        "create_draft": [({**payload, "approval": b["approval"], "operation": "cross-1"},
                          frozenset({"approval_missing"}))],
        "session_open": [({"subject": "Alpha's second question"}, None)],
        "session_show": [({"session": b["session"]}, NOT_FOUND)],
        "sessions": [({}, None), ({"status": "open"}, None)],
        "session_close": [({"session": b["session"]}, NOT_FOUND)],
        "project_query": [({"session": b["session"], "arguments": A_READ}, NOT_FOUND)],
        "repair_target": [({"session": b["session"], "kind": "entry", "name": b["entry"]}, NOT_FOUND),
                          ({"session": world.alpha_session, "kind": "entry", "name": b["entry"]}, NOT_FOUND),
                          ({"session": world.alpha_session, "kind": "evidence", "name": b["unit"]}, NOT_FOUND)],
        "repair_prepare": [({"session": b["session"], "conflict": "Forged.", "alternatives": [b_alternative]},
                            NOT_FOUND),
                           ({"session": world.alpha_session, "conflict": "Forged.", "alternatives": [b_alternative]},
                            NOT_FOUND)],
        "repair_show": [({"repair": b["repair"]}, NOT_FOUND)],
    }


@pytest.mark.anyio
async def test_no_agent_tool_reaches_another_workspace(world: World) -> None:
    cases = tool_cases(world)
    before = snapshot(world)
    probes = 0
    async with agent_of(world.app, world.alpha.agent) as call:
        listed = await call.tools()
        assert listed == {tool.name for tool in ALL_TOOLS}, "an editor agent is offered every tool"
        assert sorted(listed - set(cases)) == [], "every agent tool needs a cross-workspace case here"
        for tool in sorted(listed):
            for arguments, refusals in cases[tool]:
                answer = await call(tool, **arguments)
                probes += 1
                if refusals is None:
                    assert "error" not in answer, (tool, arguments, answer)
                else:
                    assert answer.get("error") in refusals, (tool, arguments, answer)
                assert leaked(json.dumps(answer)) == [], (tool, arguments, answer)
    assert snapshot(world) == before
    scale.record("isolation probes", probes)


# JSON routes and pages -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One request aimed at B: ``expect`` is the status (200: an answer that must hold nothing of B)."""

    method: str
    route: str
    url: str
    expect: int
    body: dict[str, Any] | None = None
    #: 0: any time; 1: after every other probe (it writes in A under one of B's names); 2: last (logs out).
    order: int = 0


def api_probes(world: World) -> list[Probe]:
    b = world.ids
    session, repair, unit, entry = b["session"], b["repair"], b["unit"], b["entry"]
    return [
        Probe("GET", "/healthz", "/healthz", 200),
        Probe("GET", "/api", "/api", 200),
        Probe("GET", "/api/openapi.json", "/api/openapi.json", 200),
        Probe("GET", "/api/whoami", "/api/whoami", 200),
        Probe("GET", "/api/workspace", "/api/workspace", 200),
        Probe("POST", "/api/workspace", "/api/workspace", 403, {"workspace": "beta"}),
        *(Probe("GET", "/api/queue", f"/api/queue?kind={kind}", 200)
          for kind in ("drafts", "repairs", "needs_review", "sessions")),
        Probe("GET", "/api/drafts/proposals", "/api/drafts/proposals?status=all", 200),
        Probe("GET", "/api/drafts/proposals/{proposal}", f"/api/drafts/proposals/{b['pending']}", 404),
        Probe("GET", "/api/drafts/proposals/{proposal}", f"/api/drafts/proposals/{b['approved']}", 404),
        Probe("POST", "/api/drafts/proposals/{proposal}/approve", f"/api/drafts/proposals/{b['pending']}/approve",
              404, {"fingerprint": b["pending_fingerprint"]}),
        Probe("POST", "/api/drafts/proposals/{proposal}/reject", f"/api/drafts/proposals/{b['pending']}/reject", 404,
              {"note": "forged"}),
        Probe("GET", "/api/needs-review", "/api/needs-review", 200),
        Probe("GET", "/api/needs-review/entry", f"/api/needs-review/entry?slug={entry}", 404),
        Probe("GET", "/api/entries", "/api/entries", 200),
        Probe("GET", "/api/entries", "/api/entries?prefix=ops&needs_review=yes", 200),
        Probe("GET", "/api/entries/search", f"/api/entries/search?q={SEARCHED}", 200),
        Probe("GET", "/api/entries/entry", f"/api/entries/entry?slug={entry}", 404),
        Probe("GET", "/api/entries/entry", f"/api/entries/entry?slug={entry}&revision=1", 404),
        Probe("GET", "/api/entries/diff", f"/api/entries/diff?slug={entry}&from=1&to=2", 404),
        Probe("POST", "/api/entries/curate", "/api/entries/curate", 404, {"slug": entry, "revision": 2}),
        Probe("POST", "/api/entries/uncurate", "/api/entries/uncurate", 404, {"slug": entry}),
        Probe("POST", "/api/entries/revert", "/api/entries/revert", 404, {"slug": entry, "reason": "forged"}),
        Probe("GET", "/api/audit", "/api/audit", 200),
        Probe("GET", "/api/audit", f"/api/audit?subject={entry}&before=999", 200),
        Probe("GET", "/api/repairs", "/api/repairs?status=proposed", 200),
        Probe("GET", "/api/repairs/{repair}", f"/api/repairs/{repair}", 404),
        Probe("POST", "/api/repairs/{repair}/apply", f"/api/repairs/{repair}/apply", 404,
              {"option": "opt-1", "take_over": True}),
        Probe("POST", "/api/repairs/{repair}/reject", f"/api/repairs/{repair}/reject", 404, {"comment": "forged"}),
        Probe("POST", "/api/repairs/{repair}/reformulate", f"/api/repairs/{repair}/reformulate", 404,
              {"comment": "forged"}),
        Probe("POST", "/api/repairs/{repair}/retry", f"/api/repairs/{repair}/retry", 404, {}),
        Probe("POST", "/api/repairs/{repair}/continue-pending", f"/api/repairs/{repair}/continue-pending", 404),
        Probe("GET", "/api/sessions", "/api/sessions", 200),
        Probe("GET", "/api/sessions/{session}", f"/api/sessions/{session}", 404),
        Probe("GET", "/api/sessions/{session}/verify", f"/api/sessions/{session}/verify", 404),
        Probe("GET", "/api/sessions/{session}/captures/{capture}", f"/api/sessions/{session}/captures/{b['capture']}",
              404),
        Probe("GET", "/api/sessions/{session}/captures/{capture}",
              f"/api/sessions/{world.alpha_session}/captures/{b['capture']}", 404),
        Probe("POST", "/api/sessions/{session}/resume", f"/api/sessions/{session}/resume", 404, {"note": "forged"}),
        Probe("POST", "/api/sessions/{session}/takeover", f"/api/sessions/{session}/takeover", 404),
        Probe("POST", "/api/sessions/{session}/budget", f"/api/sessions/{session}/budget", 404, {"budget": 400}),
        Probe("POST", "/api/sessions/{session}/close", f"/api/sessions/{session}/close", 404, {"note": "forged"}),
        Probe("GET", "/api/evidence", "/api/evidence", 200),
        Probe("GET", "/api/evidence/unit", f"/api/evidence/unit?name={unit}", 404),
        Probe("POST", "/api/evidence/edit", "/api/evidence/edit", 404,
              {"unit": unit, "expected_revision": 1, "title": "Forged", "body": "Forged.\n"}),
        Probe("POST", "/api/evidence/review", "/api/evidence/review", 404, {"unit": unit, "revision": 1}),
        Probe("POST", "/api/evidence/activate", "/api/evidence/activate", 404, {"unit": unit, "revision": 1}),
        Probe("POST", "/api/evidence/restore", "/api/evidence/restore", 404, {"unit": unit}),
        # A unit of A's own under B's name: A's, in A's folder; B's stays as it was.
        Probe("POST", "/api/evidence/create", "/api/evidence/create", 200,
              {"unit": unit, "title": "Alpha's unit", "body": "Alpha's own text.\n"}, order=1),
    ]


def page_probes(world: World) -> list[Probe]:
    b = world.ids
    session, repair, unit, entry = b["session"], b["repair"], b["unit"], b["entry"]
    return [
        Probe("GET", "/login", "/login", 303),  # logged in already: on to the queue
        *(Probe("GET", "/", f"/?kind={kind}", 200) for kind in ("drafts", "repairs", "needs_review", "sessions")),
        Probe("POST", "/workspace", "/workspace", 403, {"workspace": "beta"}),
        Probe("GET", "/drafts", "/drafts?status=all", 200),
        Probe("GET", "/drafts/proposals/{proposal:int}", f"/drafts/proposals/{b['pending']}", 404),
        Probe("GET", "/drafts/proposals/{proposal:int}", f"/drafts/proposals/{b['approved']}", 404),
        Probe("POST", "/drafts/proposals/{proposal:int}/approve", f"/drafts/proposals/{b['pending']}/approve", 404,
              {"fingerprint": b["pending_fingerprint"]}),
        Probe("POST", "/drafts/proposals/{proposal:int}/reject", f"/drafts/proposals/{b['pending']}/reject", 404,
              {"note": "forged"}),
        Probe("GET", "/needs-review", "/needs-review", 200),
        Probe("GET", "/needs-review/{slug:path}", f"/needs-review/{entry}", 404),
        Probe("GET", "/entries", "/entries?prefix=ops", 200),
        Probe("GET", "/entries", f"/entries?q={SEARCHED}", 200),
        Probe("GET", "/entries/{slug:path}", f"/entries/{entry}", 404),
        Probe("GET", "/entries/{slug:path}", f"/entries/{entry}?from=1&to=2", 404),
        Probe("POST", "/entries/curate", "/entries/curate", 404, {"slug": entry, "revision": "2"}),
        Probe("POST", "/entries/uncurate", "/entries/uncurate", 404, {"slug": entry}),
        Probe("POST", "/entries/revert", "/entries/revert", 404, {"slug": entry, "reason": "forged"}),
        Probe("GET", "/audit", "/audit", 200),
        Probe("GET", "/audit", f"/audit?subject={entry}", 200),
        Probe("GET", "/repairs", "/repairs", 200),
        Probe("GET", "/repairs/{repair:int}", f"/repairs/{repair}", 404),
        Probe("POST", "/repairs/{repair:int}/apply", f"/repairs/{repair}/apply", 404,
              {"option": "opt-1", "take_over": "yes"}),
        Probe("POST", "/repairs/{repair:int}/reject", f"/repairs/{repair}/reject", 404, {"comment": "forged"}),
        Probe("POST", "/repairs/{repair:int}/reformulate", f"/repairs/{repair}/reformulate", 404,
              {"comment": "forged"}),
        Probe("POST", "/repairs/{repair:int}/retry", f"/repairs/{repair}/retry", 404, {}),
        Probe("POST", "/repairs/{repair:int}/continue-pending", f"/repairs/{repair}/continue-pending", 404, {}),
        Probe("GET", "/sessions", "/sessions", 200),
        Probe("GET", "/sessions/{session:int}", f"/sessions/{session}", 404),
        Probe("GET", "/sessions/{session:int}/captures/{capture}", f"/sessions/{session}/captures/{b['capture']}",
              404),
        Probe("GET", "/sessions/{session:int}/captures/{capture}",
              f"/sessions/{world.alpha_session}/captures/{b['capture']}", 404),
        Probe("POST", "/sessions/{session:int}/resume", f"/sessions/{session}/resume", 404, {"note": "forged"}),
        Probe("POST", "/sessions/{session:int}/takeover", f"/sessions/{session}/takeover", 404, {"confirm": "yes"}),
        Probe("POST", "/sessions/{session:int}/budget", f"/sessions/{session}/budget", 404, {"budget": "400"}),
        Probe("POST", "/sessions/{session:int}/close", f"/sessions/{session}/close", 404, {"confirm": "yes"}),
        Probe("POST", "/sessions/{session:int}/rebuild-files", f"/sessions/{session}/rebuild-files", 404, {}),
        Probe("GET", "/evidence", "/evidence", 200),
        Probe("GET", "/evidence/new", "/evidence/new", 200),
        Probe("GET", "/evidence/units/{name:path}", f"/evidence/units/{unit}", 404),
        Probe("GET", "/evidence/edit/{name:path}", f"/evidence/edit/{unit}", 404),
        Probe("POST", "/evidence/edit/{name:path}", f"/evidence/edit/{unit}", 404,
              {"expected_revision": "1", "title": "Forged", "body": "Forged.\n"}),
        Probe("POST", "/evidence/review/{name:path}", f"/evidence/review/{unit}", 404,
              {"revision": "1", "confirm": "yes"}),
        Probe("POST", "/evidence/activate/{name:path}", f"/evidence/activate/{unit}", 404, {"revision": "1"}),
        Probe("POST", "/evidence/restore/{name:path}", f"/evidence/restore/{unit}", 404, {}),
        Probe("POST", "/evidence/new", "/evidence/new", 303,
              {"unit": unit, "title": "Alpha's unit", "body": "Alpha's own text.\n"}, order=1),
        Probe("POST", "/logout", "/logout", 303, {}, order=2),
    ]


def routes_of(app: Armarius) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(method, path) of every JSON route and of every page or form of the web app (HEAD aside)."""
    api: set[tuple[str, str]] = set()
    pages: set[tuple[str, str]] = set()
    for route in create_web_app(app).routes:
        if isinstance(route, Mount):
            assert route.path == "/static", f"a mounted app needs isolation cases: {route.path}"
            continue
        assert isinstance(route, Route), route
        if route.path == "/mcp":
            continue  # the tools are probed one by one above
        for method in (route.methods or set()) - {"HEAD"}:
            (api if route.path.startswith(("/api", "/healthz")) else pages).add((method, route.path))
    return api, pages


def check_answer(probe: Probe, status: int, text: str, *, json_error: bool) -> None:
    assert status == probe.expect, (probe, status, text[:500])
    assert leaked(text) == [], (probe, leaked(text), text[:2000])
    if json_error and status == 404:
        assert json.loads(text)["error"]["code"] == "not_found", (probe, text)


def run_api(person: Person, agent: Any, probes: list[Probe]) -> int:
    """Every probe as A's administrator (cookie and CSRF), and the agent-callable ones as A's agent."""
    for_agents = {route.path for route in API_ROUTES if Kind.AGENT in route.callers and route.method == "GET"}
    csrf = {"X-CSRF-Token": person.csrf()}
    count = 0
    for probe in sorted(probes, key=lambda probe: probe.order):
        if probe.method == "GET":
            answer = person.http.get(probe.url)
        else:
            answer = person.http.post(probe.url, json=probe.body if probe.body is not None else {}, headers=csrf)
        check_answer(probe, answer.status_code, answer.text, json_error=True)
        count += 1
        if probe.method == "GET" and probe.route in for_agents:
            answer = agent.get(probe.url)
            check_answer(probe, answer.status_code, answer.text, json_error=True)
            count += 1
    return count


def run_pages(person: Person, probes: list[Probe]) -> int:
    csrf = person.csrf()
    for probe in sorted(probes, key=lambda probe: probe.order):
        if probe.method == "GET":
            answer = person.http.get(probe.url)
        else:
            answer = person.http.post(probe.url, data={"csrf": csrf, **(probe.body or {})})
        check_answer(probe, answer.status_code, answer.text, json_error=False)
    return len(probes)


def covered(probes: list[Probe]) -> set[tuple[str, str]]:
    return {(probe.method, probe.route) for probe in probes}


@dataclass
class Http:
    visitors: Visitors
    person: Person
    agent: Any


@pytest.fixture
def http(world: World) -> Iterator[Http]:
    """A real server for the world: A's administrator logged in, and A's agent with its token."""
    with serving(world.app) as base_url:
        visitors = Visitors(base_url)
        try:
            person = visitors.log_in("alpha-admin", ADMIN_PASSWORD, "alpha")
            agent = visitors.client(headers={"Authorization": f"Bearer {world.alpha.agent_token}"})
            yield Http(visitors, person, agent)
        finally:
            visitors.close()


def test_no_json_route_reaches_another_workspace(world: World, http: Http) -> None:
    probes = api_probes(world)
    api, _pages = routes_of(world.app)
    assert sorted(api - covered(probes)) == [], "every JSON route needs a cross-workspace case here"
    assert sorted(covered(probes) - api) == [], "a case for a route that does not exist"
    before = snapshot(world)
    count = run_api(http.person, http.agent, probes)
    assert snapshot(world) == before
    assert world.app.evidence.show(world.alpha_admin, UNIT)["title"] == "Alpha's unit"
    scale.record("isolation probes", count)


def test_no_page_or_form_reaches_another_workspace(world: World, http: Http) -> None:
    probes = page_probes(world)
    _api, pages = routes_of(world.app)
    assert sorted(pages - covered(probes) - {("POST", "/login")}) == [], "every page needs a cross-workspace case"
    assert sorted(covered(probes) - pages) == [], "a case for a page that does not exist"
    before = snapshot(world)
    count = run_pages(http.person, probes)
    assert snapshot(world) == before
    assert world.app.evidence.show(world.alpha_admin, UNIT)["title"] == "Alpha's unit"
    # The login form, with A's administrator's right password, into B: refused, and B's chain records exactly
    # the documented login.failed (reason not_a_member), naming no one and nothing of A's.
    with http.visitors.client() as stranger:
        refused = post_login(stranger, "alpha-admin", ADMIN_PASSWORD, "beta")
    assert refused.status_code in (401, 403), refused.status_code
    assert leaked(refused.text) == []
    assert "armarius_session" not in refused.cookies
    after = snapshot(world)
    new_events = sorted(set(after.pop("audit_events")) - set(before["audit_events"]))
    assert len(new_events) == 1, new_events
    assert "login.failed" in new_events[0]
    assert "not_a_member" in new_events[0]
    assert ADMIN_PASSWORD not in new_events[0]
    before.pop("audit_events")
    before.pop("audit_heads")
    after.pop("audit_heads")
    assert after == before
    scale.record("isolation probes", count + 1)


# PostgreSQL: the login role itself ---------------------------------------------------------------------


#: docs/security.md: the memory search vectors have no policy; the login role cannot touch them at all.
WITHOUT_POLICY = {"entry_search"}


def rls_state(sql: OwnerSQL, tables: list[str]) -> dict[str, tuple[bool, bool]]:
    rows = sql.rows("SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class "
                    "WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'")
    found = {str(name): (bool(enabled), bool(forced)) for name, enabled, forced in rows}
    return {table: found[table] for table in tables}


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgresql"], indirect=True)
def test_the_login_role_scoped_to_a_workspace_touches_no_row_of_another(world: World) -> None:
    settings = world.app.settings
    assert settings.database_url is not None
    alpha_id, beta_id = world.alpha.agent.workspace_id, world.beta.agent.workspace_id
    with OwnerSQL(settings) as sql:
        tables = workspace_tables(sql, postgres=True)
        # Row-level security enabled and forced, with a policy, on every such table but the documented one.
        assert rls_state(sql, tables) == {table: (table not in WITHOUT_POLICY,) * 2 for table in tables}
        with_policy = {str(row[0]) for row in sql.rows("SELECT tablename FROM pg_policies WHERE schemaname = 'public'")}
        assert sorted(set(tables) - WITHOUT_POLICY - with_policy) == []
        beta_rows = {table: sql.rows(f"SELECT count(*) FROM {table} WHERE workspace_id = ?", (beta_id,))[0][0]
                     for table in tables}
        beta_row = {table: sql.rows(f"SELECT row_to_json(t)::text FROM {table} t WHERE workspace_id = ? LIMIT 1",
                                    (beta_id,))[0][0] for table in tables if beta_rows[table]}
        # Columns a statement may name (an identity or generated column takes only its default).
        columns = {table: [str(row[0]) for row in sql.rows(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = ? "
            "AND is_identity = 'NO' AND is_generated = 'NEVER' ORDER BY ordinal_position", (table,))]
            for table in tables}
    assert sum(1 for count in beta_rows.values() if count) >= 15, beta_rows  # B holds rows in most of them
    before = snapshot(world)
    probes = forges = 0
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        def attempt(statement: str, params: tuple[Any, ...] = ()) -> int | None:
            """Run one statement as the login role in workspace A; its row count, or None when refused."""
            nonlocal probes
            probes += 1
            try:
                with connection.transaction():
                    connection.execute("SELECT set_config('armarius.workspace_id', %s, true)", (str(alpha_id),))
                    cursor = connection.execute(statement, params)
                    if statement.startswith("SELECT"):
                        row = cursor.fetchone()
                        return int(row[0]) if row else 0
                    return cursor.rowcount
            except psycopg.errors.InsufficientPrivilege:
                return None

        def privileged(table: str, privilege: str, column: str | None = None) -> bool:
            if column is None:
                row = connection.execute("SELECT has_table_privilege(current_user, %s, %s)", (table, privilege))
            else:
                row = connection.execute("SELECT has_column_privilege(current_user, %s, %s, %s)",
                                         (table, column, privilege))
            found = row.fetchone()
            return bool(found and found[0])

        for table in WITHOUT_POLICY:
            assert not any(privileged(table, privilege) for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE"))
        for table in tables:
            where = (f"FROM {table} WHERE workspace_id = %s", (beta_id,))
            selected = attempt(f"SELECT count(*) {where[0]}", where[1])
            assert selected in (0, None), (table, selected)
            assert (selected is None) == (not privileged(table, "SELECT")), table
            others = attempt(f"SELECT count(*) FROM {table} WHERE workspace_id NOT IN (%s, %s)",
                             (alpha_id, audit.SYSTEM_CHAIN))
            assert others in (0, None), (table, others)
            for column in columns[table]:
                if privileged(table, "UPDATE", column):
                    changed = attempt(f"UPDATE {table} SET {column} = {column} WHERE workspace_id = %s", (beta_id,))
                    assert changed == 0, (table, column, changed)
            if privileged(table, "UPDATE", "workspace_id"):
                moved = attempt(f"UPDATE {table} SET workspace_id = %s WHERE workspace_id = %s", (alpha_id, beta_id))
                assert moved == 0, (table, moved)
            deleted = attempt(f"DELETE {where[0]}", where[1])
            assert deleted in (0, None), (table, deleted)
            # Moving one of A's rows into B: refused by the policy's check (or by the grants).
            if privileged(table, "UPDATE", "workspace_id"):
                pushed = attempt(f"UPDATE {table} SET workspace_id = %s WHERE workspace_id = %s", (beta_id, alpha_id))
                assert pushed in (0, None), (table, pushed)
            # One of B's rows written again from A's scope, exactly as the owner reads it: refused.
            if beta_rows[table] and table not in WITHOUT_POLICY:
                listed = ", ".join(columns[table])
                try:
                    forged = attempt(f"INSERT INTO {table} ({listed}) SELECT {listed} FROM "
                                     f"json_populate_record(NULL::{table}, %s::json)", (beta_row[table],))
                except psycopg.errors.IntegrityError as error:  # the policy let it through to the constraints
                    pytest.fail(f"{table}: a row of B written from A's scope reached the constraints: {error}")
                assert forged is None, (table, forged)
                forges += 1
    assert forges == sum(1 for table, count in beta_rows.items() if count and table not in WITHOUT_POLICY)
    assert snapshot(world) == before
    scale.record("isolation probes", probes)
