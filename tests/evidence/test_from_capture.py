"""A unit made from a session's captures (real queries over a real git repository, on both engines): its
provenance is the capture ids, kept unchanged across edits and corrections while lineage grows; nothing is
fetched again, not even when the source is gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from armarius.app import Armarius
from armarius.errors import Conflict, InvalidInput, NotAllowed, NotFound
from armarius.evidence.model import parse
from tests.evidence.conftest import Lab, add_admin, changes_nothing
from tests.helpers import OwnerSQL, make_team
from tests.research.conftest import research_app  # noqa: F401  (a fixture used here)
from tests.research.repos import Repo

READ = {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2}
SEARCH = {"kind": "source.search", "text": "handle_order"}
NAME = "orders/handler"


@pytest.fixture
def research_lab(research_app: tuple[Armarius, Repo]) -> tuple[Lab, Repo]:  # noqa: F811
    application, repo = research_app
    return Lab(application, make_team(application, "alpha"), add_admin(application)), repo


def queried(lab: Lab) -> tuple[int, list[str]]:
    """A session of the agent with two answers: its id and the two capture ids."""
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "Where are orders handled?\nAnd by whom?")["session"]
    captures = [sessions.query(agent, session, request)["capture"] for request in (READ, SEARCH)]
    return int(session), captures


def test_a_unit_from_captures_keeps_their_ids_as_provenance_through_corrections(
        research_lab: tuple[Lab, Repo]) -> None:
    lab, repo = research_lab
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    session, captures = queried(lab)
    away = repo.path.with_name("repo-away")
    repo.path.rename(away)  # the source is gone: nothing is fetched again
    made = evidence.from_capture(human, NAME, session)
    view = evidence.current(human, NAME)
    assert view.provenance == tuple(captures)
    assert view.title == f"Evidence from research session {session}"
    assert [(step["revision"], step["via"]) for step in view.lineage] == [(1, "capture")]
    folder = lab.app.sessions.session_folder(human.workspace, session)
    for capture in captures:
        document = json.loads((folder / f"{capture}.json").read_bytes())
        assert json.dumps(document, ensure_ascii=False, indent=2, sort_keys=True) in view.body
        assert f"capture {capture}" in view.body
    assert "> Where are orders handled?\n> And by whom?" in view.body
    assert parse(lab.path(NAME).read_bytes(), NAME).provenance == tuple(captures)
    created = [json.loads(row[0]) for row in _audit(lab, "evidence.created")]
    assert created == [{"unit": NAME, "revision": 1, "fingerprint": made["fingerprint"], "via": "capture",
                        "session": session, "provenance": captures}]

    evidence.edit(human, NAME, 1, body="handle_order in src/app.py handles one order.\n", reason="summarized")
    evidence.review(human, NAME, 2)
    evidence.activate(admin, NAME, 2)
    assert [hit["unit"] for hit in lab.app.memory.recall(lab.team.agent, "handle_order")["evidence"]] == [NAME]
    correction = evidence.correction(admin, NAME, base_revision=2, title="Who handles orders",
                                     body="handle_order and handle_order_line in src/app.py.\n", via="repair 4")
    evidence.write_file(correction, workspace=admin.workspace)
    evidence.record_correction(admin, correction, within=None)
    evidence.activate(admin, NAME, 3)
    corrected = evidence.current(human, NAME)
    assert corrected.provenance == tuple(captures)
    assert [(step["revision"], step["via"]) for step in corrected.lineage] == [
        (1, "capture"), (2, "edited"), (3, "repair 4")]
    assert parse(lab.path(NAME).read_bytes(), NAME).provenance == tuple(captures)
    away.rename(repo.path)


def _audit(lab: Lab, action: str) -> list[tuple[str]]:
    with OwnerSQL(lab.app.settings) as sql:
        return [(row[0],) for row in sql.rows("SELECT details FROM audit_events WHERE action = ? ORDER BY seq",
                                              (action,))]


def test_named_captures_only_and_every_refusal_changes_nothing(research_lab: tuple[Lab, Repo]) -> None:
    lab, _repo = research_lab
    evidence, human, agent = lab.app.evidence, lab.team.human, lab.team.agent
    session, captures = queried(lab)
    evidence.from_capture(human, NAME, session, [captures[1]], title="The search")
    assert evidence.current(human, NAME).provenance == (captures[1],)
    assert evidence.current(human, NAME).title == "The search"

    with changes_nothing(lab.app, NotAllowed):
        evidence.from_capture(agent, "orders/agent", session)
    with changes_nothing(lab.app, NotFound) as caught:
        evidence.from_capture(human, "orders/unknown", session, ["f" * 64])
    assert caught[0].details["captures"] == ["f" * 64]
    with changes_nothing(lab.app, InvalidInput):
        evidence.from_capture(human, "orders/bad", session, ["not-a-capture"])
    with changes_nothing(lab.app, NotFound):
        evidence.from_capture(human, "orders/nowhere", session + 100)
    empty = int(lab.app.sessions.open(agent, "Nothing asked yet")["session"])
    with changes_nothing(lab.app, InvalidInput):
        evidence.from_capture(human, "orders/empty", empty)

    folder: Path = lab.app.sessions.session_folder(human.workspace, session)
    altered = folder / f"{captures[0]}.json"
    altered.write_bytes(altered.read_bytes() + b"\n")
    with changes_nothing(lab.app, Conflict) as conflict:
        evidence.from_capture(human, "orders/altered", session)
    assert str(altered) in conflict[0].message
    assert "rebuild-files" in conflict[0].message

    beta = make_team(lab.app, "beta")
    with changes_nothing(lab.app, NotFound):  # another workspace's session does not exist for beta's human
        evidence.from_capture(beta.human, "orders/beta", session)
