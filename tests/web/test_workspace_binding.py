"""Every decision of the web gate is bound to the workspace its page was shown in.

A person in two workspaces opens a page of workspace alpha (tab 1), switches to beta (tab 2), then submits tab
1's form. Slugs, unit names and revisions are only unique within a workspace, and an agent of beta chooses its
own: before the binding, the form curated, reviewed, activated, edited (with alpha's text) or restored beta's
thing of the same name, which the person never saw (the tester's report, finding 1). Now every form of the pages
and every person's JSON write is refused with 409 ``conflict`` (``workspace_changed``) and changes nothing in
either workspace, while the same form rendered afresh in beta works. The forms are enumerated from the app's own
router (and the writes from the API's route table), so a new form without a case here fails the test.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest
from starlette.routing import Route

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.errors import InvalidInput, SessionBlocked
from armarius.memory.service import RememberRequest
from armarius.web.api import API_ROUTES
from armarius.web.app import create_web_app
from armarius.web.pages import drafts as drafts_page
from tests.helpers import OPERATOR, OwnerSQL, Team, make_team
from tests.repairs.conftest import files_of
from tests.research.conftest import research_app  # noqa: F401  (a fixture used here)
from tests.web.people import Person, Visitors
from tests.web.test_gate_security import chain_events

WORKSPACES = ("alpha", "beta")
EVE = ("eve", "eve correct horse battery")
#: The login's own bookkeeping, which every request may touch (last seen, flash messages, login attempts).
BOOKKEEPING = {"web_sessions", "login_attempts"}
STALE_PAGE = "This page belongs to workspace alpha, but you now work in workspace beta"


# A world of two workspaces with the same names in each -----------------------------------------------


@dataclass
class Place:
    """What one workspace holds, with its ids (names are the same in both workspaces)."""

    workspace: str
    team: Team
    eve: Actor
    proposal: int = 0
    fingerprint: str = ""
    session: int = 0
    blocked: int = 0
    repair: int = 0
    pending: int = 0


def make_world(app: Armarius, research: Armarius | None = None) -> dict[str, Place]:
    """Both workspaces: an agent, an editor and eve (administrator in both), each with an entry, a curated one,
    one overridden since its curation, a draft proposal, evidence units edited, reviewed, active and altered on
    disk, an open session of the agent, a proposed entry repair and an evidence repair left pending_activation,
    all under the same names; with ``research``, a blocked session too."""
    world = {}
    for workspace in WORKSPACES:
        team = make_team(app, workspace)
        if workspace == "alpha":
            app.directory.add_principal(EVE[0], Kind.HUMAN, workspace=workspace, role=Role.ADMIN, by=OPERATOR,
                                        password=EVE[1])
        else:
            app.directory.set_role(EVE[0], workspace=workspace, role=Role.ADMIN, by=OPERATOR)
        eve = app.directory.authenticate_password(*EVE, workspace=workspace)
        place = Place(workspace, team, eve)
        agent, editor, memory, evidence = team.agent, team.human, app.memory, app.evidence
        for slug in ("deploy/staging-host", "notes/curated", "notes/overridden", "deploy/repaired"):
            memory.remember(agent, RememberRequest(slug, f"{slug} in {workspace}", f"Only {workspace} says this.\n"))
        for slug in ("notes/curated", "notes/overridden"):
            memory.curate(eve, slug, 1)
        memory.remember(agent, RememberRequest("notes/overridden", "Overridden", f"{workspace} changed it.\n",
                                               expected_revision=1, override_curated=True, reason="newer"))
        proposed = app.drafts.propose(agent, {"slug": "drafts/same", "title": "Same", "text": f"{workspace} text"})
        place.proposal = int(proposed["proposal"])
        place.fingerprint = drafts_page.proposal(app, eve, place.proposal)["shown_fingerprint"]
        for unit in ("incident/edited", "incident/reviewed", "incident/active", "incident/altered"):
            evidence.create(editor, unit, f"{unit} in {workspace}", f"Only {workspace} read this.\n")
        for unit in ("incident/reviewed", "incident/active"):
            evidence.review(editor, unit, 1)
        evidence.activate(eve, "incident/active", 1)
        altered = evidence.unit_path(workspace, "incident/altered")
        altered.write_bytes(altered.read_bytes() + b"an edit in an editor\n")
        place.session = int(app.sessions.open(agent, f"An open question in {workspace}")["session"])
        place.repair = repair_of(app, agent, "deploy/repaired", "entry", f"Repaired in {workspace}.\n")
        place.pending = repair_of(app, agent, "incident/active", "evidence", f"Corrected in {workspace}.\n")
        app.repairs.apply(eve, place.pending, "opt-1", continue_pending=True)
        if research is not None:
            place.blocked = blocked_session(research, agent)
        world[workspace] = place
    return world


def repair_of(app: Armarius, agent: Actor, name: str, kind: str, body: str) -> int:
    """A repair of one entry or unit with one alternative, in a session the agent closed (so no takeover)."""
    session = int(app.sessions.open(agent, f"Repair {name}")["session"])
    revision = (app.memory.read(agent, name)["revision"] if kind == "entry"
                else app.evidence.current(agent, name).revision)
    alternative = {"target": {"kind": kind, "name": name, "revision": revision}, "title": f"{name} corrected",
                   "body": body, "rationale": "The session showed it."}
    repair = int(app.repairs.prepare(agent, session, "The two disagree.", [alternative])["repair"])
    app.sessions.close(agent, session)
    return repair


def blocked_session(research: Armarius, agent: Actor) -> int:
    """A session of the agent blocked by invalid requests (it may be resumed at once)."""
    session = int(research.sessions.open(agent, "A question asked badly")["session"])
    for _ in range(50):
        with contextlib.suppress(InvalidInput, SessionBlocked):  # each invalid request is refused
            research.sessions.query(agent, session, {"kind": "no.such.kind"})
        if research.sessions.show(agent, session)["status"] == "blocked":
            break
    assert research.sessions.show(agent, session)["status"] == "blocked"
    return session


def store(app: Armarius) -> dict[str, Any]:
    """Every row of every table but the login's bookkeeping, and every file under the evidence folder."""
    with OwnerSQL(app.settings) as sql:
        if app.settings.database_url is None:
            names = [row[0] for row in sql.rows("SELECT name FROM sqlite_master WHERE type = 'table'")]
        else:
            names = [row[0] for row in sql.rows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        found: dict[str, Any] = {name: sorted(map(repr, sql.rows(f'SELECT * FROM "{name}"'))) for name in names
                                 if name not in BOOKKEEPING and not name.startswith("sqlite_")}
    assert {"audit_events", "entry_revisions"} <= set(found)
    found["files"] = files_of(app.settings.data_dir / "evidence")
    return found


def chains(app: Armarius) -> dict[str, int]:
    return {workspace: len(chain_events(app, workspace)) for workspace in WORKSPACES}


# Reading a page's forms as a browser would submit them ---------------------------------------------


class PageForms(HTMLParser):
    """The forms of a page: each one's action and the fields a person submits (hidden and text fields, text
    areas as shown, required checkboxes ticked, a number field at its minimum)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []
        self._fields: dict[str, str] | None = None
        self._textarea: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        if tag == "form":
            self._fields = {}
            self.forms.append((found.get("action", ""), self._fields))
        elif self._fields is None or "name" not in found:
            return
        elif tag == "input" and found.get("type") == "checkbox":
            if "required" in found:
                self._fields[found["name"]] = found.get("value") or "on"
        elif tag == "input":
            self._fields[found["name"]] = found.get("value") or found.get("min", "")
        elif tag == "textarea":
            self._textarea = [found["name"], ""]

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._textarea[1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self._textarea is not None and self._fields is not None:
            name, text = self._textarea
            self._fields[name] = text.removeprefix("\n")  # a browser drops the line break after <textarea>
            self._textarea = None
        elif tag == "form":
            self._fields = None

    def of(self, action: str) -> dict[str, str]:
        matching = [fields for form_action, fields in self.forms if form_action == action]
        assert len(matching) == 1, (action, [form_action for form_action, _ in self.forms])
        return dict(matching[0])


@dataclass(frozen=True)
class Case:
    """One kind of form: the route, the page that shows it for a workspace's target, where it posts, and what
    the person types in."""

    route: str
    page: Callable[[Place], str]
    action: Callable[[Place], str]
    typed: dict[str, str] = field(default_factory=dict)
    #: False: the page shows the form only in a state hard to reach here; the page's token is posted.
    on_page: bool = True
    #: Whether a success writes to the workspace's audit chain.
    audited: bool = True
    #: Needs the blocked session (a research source to block it with).
    blocked: bool = False


def _at(path: str) -> Callable[[Place], str]:
    return lambda _place: path


CASES = [
    Case("/drafts/proposals/{proposal:int}/approve", lambda p: f"/drafts/proposals/{p.proposal}",
         lambda p: f"/drafts/proposals/{p.proposal}/approve"),
    Case("/drafts/proposals/{proposal:int}/reject", lambda p: f"/drafts/proposals/{p.proposal}",
         lambda p: f"/drafts/proposals/{p.proposal}/reject", {"note": "Not like this."}),
    Case("/entries/curate", _at("/entries/deploy/staging-host"), _at("/entries/curate")),
    Case("/entries/uncurate", _at("/entries/notes/curated"), _at("/entries/uncurate")),
    Case("/entries/revert", _at("/needs-review/notes/overridden"), _at("/entries/revert"),
         {"reason": "The curated text was right."}),
    Case("/evidence/new", _at("/evidence/new"), _at("/evidence/new"),
         {"unit": "incident/typed", "title": "Typed", "body": "Typed for alpha only.\n"}),
    Case("/evidence/edit/{name:path}", _at("/evidence/edit/incident/edited"), _at("/evidence/edit/incident/edited"),
         {"body": "Typed for alpha only: keep it there.\n"}),
    Case("/evidence/review/{name:path}", _at("/evidence/units/incident/edited"),
         _at("/evidence/review/incident/edited")),
    Case("/evidence/activate/{name:path}", _at("/evidence/units/incident/reviewed"),
         _at("/evidence/activate/incident/reviewed")),
    Case("/evidence/restore/{name:path}", _at("/evidence/units/incident/altered"),
         _at("/evidence/restore/incident/altered")),
    Case("/repairs/{repair:int}/apply", lambda p: f"/repairs/{p.repair}", lambda p: f"/repairs/{p.repair}/apply"),
    Case("/repairs/{repair:int}/reject", lambda p: f"/repairs/{p.repair}", lambda p: f"/repairs/{p.repair}/reject",
         {"comment": "Neither."}),
    Case("/repairs/{repair:int}/reformulate", lambda p: f"/repairs/{p.repair}",
         lambda p: f"/repairs/{p.repair}/reformulate", {"comment": "Say it otherwise."}),
    Case("/repairs/{repair:int}/retry", lambda p: f"/repairs/{p.pending}", lambda p: f"/repairs/{p.pending}/retry"),
    Case("/repairs/{repair:int}/continue-pending", lambda p: f"/repairs/{p.pending}",
         lambda p: f"/repairs/{p.pending}/continue-pending"),
    Case("/sessions/{session:int}/resume", lambda p: f"/sessions/{p.blocked}",
         lambda p: f"/sessions/{p.blocked}/resume", {"note": "Go on."}, blocked=True),
    Case("/sessions/{session:int}/takeover", lambda p: f"/sessions/{p.session}",
         lambda p: f"/sessions/{p.session}/takeover"),
    Case("/sessions/{session:int}/budget", lambda p: f"/sessions/{p.session}",
         lambda p: f"/sessions/{p.session}/budget"),
    Case("/sessions/{session:int}/close", lambda p: f"/sessions/{p.session}", lambda p: f"/sessions/{p.session}/close",
         {"note": "Answered."}),
    Case("/sessions/{session:int}/rebuild-files", lambda p: f"/sessions/{p.session}",
         lambda p: f"/sessions/{p.session}/rebuild-files", on_page=False, audited=False),
]
#: The forms that name their own target and act on no workspace's content: taken from a page of any workspace.
UNBOUND = {"/logout", "/workspace"}


def shown_form(person: Person, case: Case, place: Place) -> tuple[str, dict[str, str]]:
    """The page of ``place``'s target as the person sees it now, and its form as they would submit it."""
    page = person.http.get(case.page(place))
    assert page.status_code == 200, page.text
    forms = PageForms(page.text)
    action = case.action(place)
    # Off the page: the token every form of the page carries (the logout form's).
    fields = forms.of(action) if case.on_page else {"csrf": forms.of("/logout")["csrf"]}
    return action, {**fields, **case.typed}


def switch(person: Person, workspace: str) -> None:
    """The switcher of another tab."""
    answer = person.http.post("/workspace", data={"csrf": person.csrf(), "workspace": workspace})
    assert answer.status_code == 303, answer.text
    assert person.whoami().json()["workspace"] == workspace


# The forms of the pages -----------------------------------------------------------------------------


def test_every_form_of_the_pages_has_a_case_here(app: Armarius) -> None:
    posted = {route.path for route in create_web_app(app).routes
              if isinstance(route, Route) and "POST" in (route.methods or ())
              and not route.path.startswith(("/api", "/mcp"))}
    assert posted == {case.route for case in CASES} | UNBOUND | {"/login"}


@pytest.mark.parametrize("case", CASES, ids=[case.route for case in CASES])
def test_a_form_shown_in_one_workspace_is_refused_after_a_switch_and_changes_nothing(
        case: Case, app: Armarius, visitors: Visitors, request: pytest.FixtureRequest) -> None:
    research = request.getfixturevalue("research_app")[0] if case.blocked else None
    world = make_world(app, research)
    eve = visitors.log_in(*EVE, "alpha")
    action, fields = shown_form(eve, case, world["alpha"])  # tab 1
    switch(eve, "beta")  # tab 2
    before, lengths = store(app), chains(app)

    stale = eve.http.post(action, data=fields)

    assert stale.status_code == 409, stale.text
    shown = html.unescape(stale.text)
    assert STALE_PAGE in shown
    assert "nothing was done" in shown
    assert store(app) == before, "nothing changed in alpha or beta"
    assert chains(app) == lengths
    assert eve.whoami().json()["workspace"] == "beta"

    # The same form, rendered afresh in beta, works there (and only there).
    action, fields = shown_form(eve, case, world["beta"])
    assert fields["csrf"].startswith("beta:"), "the page's token is its workspace's"
    done = eve.http.post(action, data=fields)
    assert done.status_code in (200, 303), done.text  # the service's answer, not an error page
    after = chains(app)
    assert after["alpha"] == lengths["alpha"], "nothing recorded in alpha"
    if case.audited:  # (rebuilding files that are all there changes and records nothing)
        assert after["beta"] > lengths["beta"]
        assert store(app) != before


def test_the_reported_scenario_curates_nothing_the_person_was_not_shown(app: Armarius, visitors: Visitors) -> None:
    """The report's repro: an agent of beta set the trap under the same slug; eve's tab 1 shows alpha's entry."""
    world = make_world(app)
    eve = visitors.log_in(*EVE, "alpha")
    tab_1 = eve.http.get("/entries/deploy/staging-host").text
    assert "Only alpha says this." in tab_1
    fields = PageForms(tab_1).of("/entries/curate")
    switch(eve, "beta")
    refused = eve.http.post("/entries/curate", data=fields)
    assert refused.status_code == 409
    for place in world.values():
        entry = app.memory.read(place.eve, "deploy/staging-host")
        assert entry.get("curated_revision") is None, place.workspace
        assert "deploy/staging-host" not in {event.subject for event in chain_events(app, place.workspace)
                                             if event.action.startswith("memory.curate")}


def test_log_out_and_switch_still_work_from_a_page_of_another_workspace(app: Armarius, visitors: Visitors) -> None:
    make_world(app)
    eve = visitors.log_in(*EVE, "alpha")
    alpha_token = eve.csrf()
    switch(eve, "beta")
    back = eve.http.post("/workspace", data={"csrf": alpha_token, "workspace": "alpha"})
    assert back.status_code == 303
    assert eve.whoami().json()["workspace"] == "alpha"
    switch(eve, "beta")
    out = eve.http.post("/logout", data={"csrf": alpha_token})
    assert out.status_code == 303
    assert eve.http.get("/api/whoami").status_code == 401


def test_a_token_for_a_workspace_is_only_the_logins_own(app: Armarius, visitors: Visitors) -> None:
    """The workspace in a token is authenticated: another login's token, or the name with another MAC, is no
    token at all (403 csrf), whichever workspace it names."""
    make_world(app)
    eve, again = visitors.log_in(*EVE, "alpha"), visitors.log_in(*EVE, "beta")
    own, others = eve.csrf(), again.csrf()
    before = store(app)
    forged = [others, "alpha:" + own.partition(":")[2][::-1], "beta:" + own.partition(":")[2], own + "x", "alpha",
              own.partition(":")[2]]
    answers = [eve.http.post("/entries/curate", data={"csrf": token, "slug": "deploy/staging-host", "revision": "1"})
               for token in forged]
    for answer in answers:
        assert answer.status_code == 403, answer.text
        assert "security token" in answer.text
    assert store(app) == before


# The JSON writes of a person -------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """One JSON write: its route, its address and body for a workspace's target."""

    route: str
    path: Callable[[Place], str]
    body: Callable[[Place], dict[str, Any]]
    audited: bool = True
    blocked: bool = False


def _body(value: dict[str, Any]) -> Callable[[Place], dict[str, Any]]:
    return lambda _place: value


WRITES = [
    Write("/api/drafts/proposals/{proposal}/approve", lambda p: f"/api/drafts/proposals/{p.proposal}/approve",
          lambda p: {"fingerprint": p.fingerprint}),
    Write("/api/drafts/proposals/{proposal}/reject", lambda p: f"/api/drafts/proposals/{p.proposal}/reject",
          _body({"note": "Not like this."})),
    Write("/api/entries/curate", _at("/api/entries/curate"), _body({"slug": "deploy/staging-host", "revision": 1})),
    Write("/api/entries/uncurate", _at("/api/entries/uncurate"), _body({"slug": "notes/curated"})),
    Write("/api/entries/revert", _at("/api/entries/revert"), _body({"slug": "notes/overridden", "reason": "Back."})),
    Write("/api/repairs/{repair}/apply", lambda p: f"/api/repairs/{p.repair}/apply", _body({"option": "opt-1"})),
    Write("/api/repairs/{repair}/reject", lambda p: f"/api/repairs/{p.repair}/reject", _body({"comment": "Neither."})),
    Write("/api/repairs/{repair}/reformulate", lambda p: f"/api/repairs/{p.repair}/reformulate",
          _body({"comment": "Say it otherwise."})),
    Write("/api/repairs/{repair}/retry", lambda p: f"/api/repairs/{p.pending}/retry", _body({})),
    Write("/api/repairs/{repair}/continue-pending", lambda p: f"/api/repairs/{p.pending}/continue-pending",
          _body({})),
    Write("/api/sessions/{session}/resume", lambda p: f"/api/sessions/{p.blocked}/resume", _body({"note": "Go on."}),
          blocked=True),
    Write("/api/sessions/{session}/takeover", lambda p: f"/api/sessions/{p.session}/takeover", _body({})),
    Write("/api/sessions/{session}/budget", lambda p: f"/api/sessions/{p.session}/budget", _body({"budget": 60})),
    Write("/api/sessions/{session}/close", lambda p: f"/api/sessions/{p.session}/close", _body({"note": "Answered."})),
    Write("/api/evidence/create", _at("/api/evidence/create"),
          _body({"unit": "incident/typed", "title": "Typed", "body": "Typed for alpha only.\n"})),
    Write("/api/evidence/edit", _at("/api/evidence/edit"),
          _body({"unit": "incident/edited", "expected_revision": 1, "body": "Typed for alpha only.\n"})),
    Write("/api/evidence/review", _at("/api/evidence/review"), _body({"unit": "incident/edited", "revision": 1})),
    Write("/api/evidence/activate", _at("/api/evidence/activate"), _body({"unit": "incident/reviewed", "revision": 1})),
    Write("/api/evidence/restore", _at("/api/evidence/restore"), _body({"unit": "incident/altered"})),
]


def test_every_json_write_of_a_person_has_a_case_here() -> None:
    writes = {route.path for route in API_ROUTES if route.method == "POST" and Kind.HUMAN in route.callers}
    assert writes == {write.route for write in WRITES} | {"/api/workspace"}
    assert [route.path for route in API_ROUTES if route.any_workspace] == ["/api/workspace"]


@pytest.mark.parametrize("write", WRITES, ids=[write.route for write in WRITES])
def test_a_json_write_with_the_token_of_another_workspace_is_refused_and_changes_nothing(
        write: Write, app: Armarius, visitors: Visitors, request: pytest.FixtureRequest) -> None:
    research = request.getfixturevalue("research_app")[0] if write.blocked else None
    world = make_world(app, research)
    eve = visitors.log_in(*EVE, "alpha")
    alpha_token = eve.csrf()
    switched = eve.http.post("/api/workspace", json={"workspace": "beta"}, headers={"X-CSRF-Token": alpha_token})
    assert switched.status_code == 200, switched.text
    before, lengths = store(app), chains(app)

    stale = eve.http.post(write.path(world["alpha"]), json=write.body(world["alpha"]),
                          headers={"X-CSRF-Token": alpha_token})

    assert stale.status_code == 409, stale.text
    error = stale.json()["error"]
    assert error["code"] == "conflict"
    assert error["details"] == {"reason": "workspace_changed", "shown_in": "alpha", "workspace": "beta"}
    assert "read in workspace alpha, but your login now works in workspace beta" in error["message"]
    assert store(app) == before
    assert chains(app) == lengths

    beta_token = eve.csrf()
    assert switched.json()["csrf_token"] == beta_token, "the switch answers with the token beta's pages carry"
    done = eve.http.post(write.path(world["beta"]), json=write.body(world["beta"]),
                         headers={"X-CSRF-Token": beta_token})
    assert done.status_code == 200, done.text
    after = chains(app)
    assert after["alpha"] == lengths["alpha"]
    if write.audited:
        assert after["beta"] > lengths["beta"]


def test_the_api_document_names_the_refusal() -> None:
    from armarius.web.api import openapi_document

    paths = openapi_document()["paths"]
    assert "another workspace" in paths["/api/entries/curate"]["post"]["responses"]["409"]["description"]
    assert "another workspace" in paths["/api/repairs/{repair}/apply"]["post"]["responses"]["409"]["description"]
    assert "409" not in paths["/api/workspace"]["post"]["responses"]
    assert "csrf_token" in paths["/api/workspace"]["post"]["responses"]["200"]["content"]["application/json"][
        "schema"]["required"]
