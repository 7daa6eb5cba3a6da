"""Evidence units on both engines: the lifecycle edited -> reviewed -> active, every refusal (showing that
nothing changed: no row, no audit event, no file), lineage across corrections, recall of active units
only, the active snapshot and its problems, and the canonical file format."""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from armarius.errors import AlreadyExists, Conflict, InvalidInput, NotAllowed, NotFound
from armarius.evidence.model import (
    BODY_MAX_BYTES,
    SEARCH_COST_MAX,
    Correction,
    UnitFile,
    fingerprint,
    parse,
    render,
    search_text,
)
from armarius.memory.service import RememberRequest
from tests.evidence.conftest import Lab, changes_nothing
from tests.helpers import OwnerSQL

NAME = "deploy/staging-host"
BODY = "Staging runs on the host zeppelin, behind the gateway.\n"
CAPTURE = "a" * 64


def audit_trail(lab: Lab) -> list[tuple[str, str, dict[str, object]]]:
    with OwnerSQL(lab.app.settings) as sql:
        rows = sql.rows("SELECT actor, action, details FROM audit_events WHERE action LIKE ? "
                        "ORDER BY workspace_id, seq", ("evidence.%",))
    return [(actor, action, json.loads(details)) for actor, action, details in rows]


# The lifecycle ---------------------------------------------------------------------------------------


def test_a_unit_goes_from_edited_to_reviewed_to_active(lab: Lab) -> None:
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    created = evidence.create(human, NAME, "Where staging runs", BODY, reason="from the ops call")
    path = lab.path(NAME)
    assert created == {"unit": NAME, "revision": 1, "status": "edited", "fingerprint": fingerprint(path.read_bytes()),
                       "path": str(path), "changed": True}
    assert path == lab.units_folder / "deploy" / "staging-host.md"
    written = parse(path.read_bytes(), NAME)
    assert (written.title, written.revision, written.provenance, written.body) == ("Where staging runs", 1, (), BODY)
    assert [(step["revision"], step["author"], step["via"]) for step in written.lineage] == [
        (1, "human:alpha-human", "created")]
    assert evidence.current(human, NAME).status == "edited"

    assert evidence.review(human, NAME, 1) == {"unit": NAME, "revision": 1, "status": "reviewed", "changed": True}
    assert evidence.review(human, NAME, 1)["changed"] is False
    activated = evidence.activate(admin, NAME, 1)
    assert activated == {"unit": NAME, "revision": 1, "status": "active", "fingerprint": created["fingerprint"],
                         "changed": True}
    assert evidence.activate(admin, NAME, 1)["changed"] is False

    view = evidence.current(lab.team.agent, NAME)
    assert (view.status, view.revision, view.reviewed_revision, view.active_revision) == ("active", 1, 1, 1)
    assert view.active_fingerprint == view.fingerprint == created["fingerprint"]
    assert (view.title, view.body, view.path) == ("Where staging runs", BODY, path)
    shown = evidence.show(human, NAME)
    assert shown["file"] == {"state": "matches", "fingerprint": created["fingerprint"]}
    assert (shown["reviewed_by"], shown["activated_by"]) == ("human:alpha-human", "human:alpha-admin")
    assert [r["reason"] for r in shown["revisions"]] == ["from the ops call"]
    assert evidence.snapshot(human) == {NAME: created["fingerprint"]}
    assert evidence.snapshot_problems(human) == []
    assert [(actor, action, details["revision"]) for actor, action, details in audit_trail(lab)] == [
        ("human:alpha-human", "evidence.created", 1), ("human:alpha-human", "evidence.reviewed", 1),
        ("human:alpha-admin", "evidence.activated", 1)]
    assert all(details["fingerprint"] == created["fingerprint"] and details["unit"] == NAME
               for _, _, details in audit_trail(lab))
    assert BODY not in json.dumps(audit_trail(lab))
    listing = evidence.list_units(lab.team.agent)["units"]
    assert [(u["unit"], u["status"], u["active_revision"]) for u in listing] == [(NAME, "active", 1)]


def test_an_edit_makes_a_new_edited_revision_and_the_active_one_stays_until_activated(lab: Lab) -> None:
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    lab.active(NAME, "Where staging runs", BODY)
    first = evidence.current(human, NAME).fingerprint
    edited = evidence.edit(human, NAME, 1, body=BODY + "Moved to the host airship in May.\n", reason="moved")
    assert (edited["revision"], edited["status"]) == (2, "edited")
    view = evidence.current(human, NAME)
    assert (view.status, view.revision, view.reviewed_revision, view.active_revision) == ("edited", 2, 1, 1)
    assert view.active_fingerprint == first
    assert evidence.snapshot(human) == {NAME: first}
    # The active revision is still the one searched (by its words; by meaning, "airship" is near "zeppelin").
    assert [hit["revision"] for hit in lab.app.memory.recall(human, "zeppelin")["evidence"]] == [1]
    assert lab.app.memory.recall(human, "airship", mode="lexical")["evidence"] == []
    assert evidence.edit(human, NAME, 2, body=view.body) == {"unit": NAME, "revision": 2, "status": "unchanged",
                                                             "changed": False}
    evidence.review(human, NAME, 2)
    evidence.activate(admin, NAME, 2)
    assert [hit["revision"] for hit in lab.app.memory.recall(human, "airship")["evidence"]] == [2]
    assert evidence.snapshot(human) == {NAME: evidence.current(human, NAME).fingerprint}
    assert [details["replaced"] for _, action, details in audit_trail(lab) if action == "evidence.activated"] == [
        None, 1]


def test_an_edit_from_the_file_takes_its_title_and_body(lab: Lab) -> None:
    evidence, human = lab.app.evidence, lab.team.human
    evidence.create(human, NAME, "Where staging runs", BODY)
    path = lab.path(NAME)
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('title: "Where staging runs"', 'title: "Where staging runs now"')
                    + "Edited in an editor.\n", encoding="utf-8")
    edited = evidence.edit(human, NAME, 1)
    assert edited["revision"] == 2
    view = evidence.current(human, NAME)
    assert (view.title, view.body) == ("Where staging runs now", BODY + "Edited in an editor.\n")
    assert fingerprint(path.read_bytes()) == view.fingerprint == edited["fingerprint"]
    assert [step["via"] for step in view.lineage] == ["created", "edited"]
    # A title given on the command line wins over the file's.
    path.write_bytes(path.read_bytes() + b"More.\n")
    evidence.edit(human, NAME, 2, title="Staging")
    assert (evidence.current(human, NAME).title, evidence.current(human, NAME).body.endswith("More.\n")) == (
        "Staging", True)


def test_lineage_grows_and_provenance_stays_across_corrections(lab: Lab) -> None:
    """A unit written by hand has no provenance, and keeps none; tests/evidence/test_from_capture.py shows a
    capture's provenance kept across a correction."""
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    evidence.create(human, NAME, "Where staging runs", BODY)
    evidence.edit(human, NAME, 1, body=BODY + "Second.\n")
    evidence.review(human, NAME, 2)
    evidence.activate(admin, NAME, 2)
    correction = evidence.correction(admin, NAME, base_revision=2, title="Where staging runs", body="Corrected.\n",
                                     via="repair 7")
    assert (correction.revision, correction.base_fingerprint) == (3, evidence.current(human, NAME).fingerprint)
    assert Correction.from_dict(json.loads(json.dumps(correction.to_dict()))) == correction
    assert state_of(lab) == (2, "active")  # a correction alone writes nothing
    evidence.write_file(correction, workspace=admin.workspace)
    assert evidence.file_fingerprint(human, NAME) == correction.fingerprint
    with lab.app.database.transaction(workspace_id=admin.workspace_id, write=True) as tx:
        assert evidence.record_correction(admin, correction, within=tx) == 3
    assert state_of(lab) == (3, "reviewed")
    evidence.activate(admin, NAME, 3)
    view = evidence.current(human, NAME)
    assert view.provenance == ()
    assert [(step["revision"], step["author"], step["via"]) for step in view.lineage] == [
        (1, "human:alpha-human", "created"), (2, "human:alpha-human", "edited"), (3, "human:alpha-admin", "repair 7")]
    assert parse(lab.path(NAME).read_bytes(), NAME).lineage == view.lineage
    history = evidence.show(human, NAME)["revisions"]
    assert [(r["revision"], r["via"]) for r in history] == [(1, "created"), (2, "edited"), (3, "repair 7")]
    assert all(evidence.show(human, NAME, r)["provenance"] == [] for r in (1, 2, 3))
    # The same arguments (and time) give the same file: a retry writes exactly the same bytes.
    again = evidence.correction(admin, NAME, base_revision=2, title="Where staging runs", body="Corrected.\n",
                                via="repair 7", at=correction.at)
    assert again.content == correction.content


def state_of(lab: Lab) -> tuple[int, str]:
    view = lab.app.evidence.current(lab.team.human, NAME)
    return view.revision, view.status


def test_a_correction_is_refused_once_the_unit_moved_past_its_base(lab: Lab) -> None:
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    lab.active(NAME, "Where staging runs", BODY)
    correction = evidence.correction(admin, NAME, base_revision=1, title="T", body="Corrected.\n", via="repair 1")
    evidence.edit(human, NAME, 1, body="A human's intervening edit.\n")
    with changes_nothing(lab.app, Conflict) as caught:
        evidence.record_correction(admin, correction, within=None)
    assert caught[0].details["current_revision"] == 2
    with changes_nothing(lab.app, NotAllowed):
        evidence.record_correction(lab.team.human, correction, within=None)  # an editor, not an administrator
    with changes_nothing(lab.app, NotFound):
        evidence.correction(admin, NAME, base_revision=9, title="T", body="b", via="repair 1")
    for via in ("repaired", "repair", "repair a b", ""):
        with changes_nothing(lab.app, InvalidInput):
            evidence.correction(admin, NAME, base_revision=1, title="T", body="b", via=via)
    forged = dataclasses.replace(correction, body="Something else.\n")
    with changes_nothing(lab.app, InvalidInput):
        evidence.record_correction(admin, forged, within=None)


# Refusals ---------------------------------------------------------------------------------------------


def test_agents_may_not_create_edit_review_or_activate(lab: Lab) -> None:
    evidence, agent, human = lab.app.evidence, lab.team.agent, lab.team.human
    evidence.create(human, NAME, "Where staging runs", BODY)
    attempts: list[Callable[[], object]] = [
        lambda: evidence.create(agent, "other", "T", "b"), lambda: evidence.edit(agent, NAME, 1, body="b"),
        lambda: evidence.review(agent, NAME, 1), lambda: evidence.activate(agent, NAME, 1),
        lambda: evidence.restore(agent, NAME)]
    for attempt in attempts:
        with changes_nothing(lab.app, NotAllowed) as caught:
            attempt()
        assert caught[0].message.startswith("Only a human")
    evidence.review(human, NAME, 1)
    with changes_nothing(lab.app, NotAllowed) as caught:  # an editor reviews; only an administrator activates
        evidence.activate(human, NAME, 1)
    assert caught[0].details == {"permission": "evidence.manage"}


def test_review_and_activation_are_of_the_current_revision_only(lab: Lab) -> None:
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    evidence.create(human, NAME, "Where staging runs", BODY)
    evidence.edit(human, NAME, 1, body="Second.\n")
    for wrong in (1, 3):
        with changes_nothing(lab.app, Conflict) as caught:
            evidence.review(human, NAME, wrong)
        assert caught[0].details == {"unit": NAME, "current_revision": 2, "revision": wrong}
    with changes_nothing(lab.app, Conflict) as caught:
        evidence.activate(admin, NAME, 2)  # edited, never reviewed
    assert "not reviewed" in caught[0].message
    evidence.review(human, NAME, 2)
    with changes_nothing(lab.app, Conflict):
        evidence.activate(admin, NAME, 1)
    with changes_nothing(lab.app, Conflict):
        evidence.edit(human, NAME, 1, body="Based on an old read.\n")


def test_review_and_activation_refuse_a_file_that_differs_or_is_missing(lab: Lab) -> None:
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    evidence.create(human, NAME, "Where staging runs", BODY)
    path = lab.path(NAME)
    original = path.read_bytes()
    path.write_bytes(original + b"A change outside Armarius.\n")
    with changes_nothing(lab.app, Conflict) as caught:
        evidence.review(human, NAME, 1)
    assert str(path) in caught[0].message
    assert caught[0].details["file"] == "differs"
    path.write_bytes(original)
    evidence.review(human, NAME, 1)
    path.unlink()
    with changes_nothing(lab.app, Conflict) as caught:
        evidence.activate(admin, NAME, 1)
    assert caught[0].details["file"] == "missing"
    assert evidence.show(human, NAME)["file"] == {"state": "missing", "fingerprint": None}
    assert evidence.restore(human, NAME) == {"unit": NAME, "revision": 1, "path": str(path), "restored": True,
                                             "was": "missing"}
    assert path.read_bytes() == original
    assert evidence.restore(human, NAME)["restored"] is False
    assert evidence.activate(admin, NAME, 1)["changed"] is True
    assert [details["was"] for _, action, details in audit_trail(lab) if action == "evidence.file_restored"] == [
        "missing"]


def test_an_unknown_unit_is_not_found(lab: Lab) -> None:
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    for attempt in (lambda: evidence.edit(human, "nothing/here", 1, body="b"),
                    lambda: evidence.review(human, "nothing/here", 1),
                    lambda: evidence.activate(admin, "nothing/here", 1),
                    lambda: evidence.show(human, "nothing/here"),
                    lambda: evidence.current(human, "nothing/here"),
                    lambda: evidence.restore(human, "nothing/here")):
        with changes_nothing(lab.app, NotFound) as caught:
            attempt()
        assert caught[0].details["unit"] == "nothing/here"
    assert evidence.file_fingerprint(human, "nothing/here") is None
    evidence.create(human, NAME, "Where staging runs", BODY)
    with changes_nothing(lab.app, NotFound):
        evidence.show(human, NAME, 2)


def test_names_titles_bodies_and_duplicates_are_checked(lab: Lab) -> None:
    evidence, human = lab.app.evidence, lab.team.human
    names: list[Any] = ["Deploy", "a//b", "../escape", "a/../b", "x" * 129, "", 7]
    for name in names:
        with changes_nothing(lab.app, InvalidInput):
            evidence.create(human, name, "T", "b")
    for title in ("", " ", "two\nlines", "x" * 201):
        with changes_nothing(lab.app, InvalidInput):
            evidence.create(human, NAME, title, "b")
    oversize = "x" * (BODY_MAX_BYTES + 1)
    bodies: list[Any] = [oversize, "a\x00b", "\ud800", 7]
    for body in bodies:
        with changes_nothing(lab.app, InvalidInput) as caught:
            evidence.create(human, NAME, "T", body)
        assert caught[0].details["field"] == "body"
    evidence.create(human, NAME, "T", "y" * BODY_MAX_BYTES)  # exactly the limit
    with changes_nothing(lab.app, InvalidInput) as caught:
        evidence.edit(human, NAME, 1, body="é" * (BODY_MAX_BYTES // 2 + 1))  # in bytes, not characters
    assert caught[0].details["size"] == BODY_MAX_BYTES + 2
    with changes_nothing(lab.app, AlreadyExists):
        evidence.create(human, NAME, "T", "b")


@pytest.mark.parametrize("damage", [
    "not utf-8", "crlf", "no front matter", "keys out of order", "bad json", "other id", "bad title", "bad revision",
    "bad provenance", "bad lineage", "no blank line", "provenance changed", "lineage changed", "missing",
])
def test_an_edit_from_a_file_that_is_not_a_valid_unit_file_is_refused(lab: Lab, damage: str) -> None:
    evidence, human = lab.app.evidence, lab.team.human
    evidence.create(human, NAME, "Where staging runs", BODY)
    path = lab.path(NAME)
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    damaged = {
        "not utf-8": text.encode("utf-8").replace(b"Staging", b"Stag\xffing"),
        "crlf": text.replace("\n", "\r\n").encode("utf-8"),
        "no front matter": BODY.encode("utf-8"),
        "keys out of order": "\n".join([lines[0], lines[2], lines[1], *lines[3:]]).encode("utf-8"),
        "bad json": text.replace('title: "Where staging runs"', "title: Where staging runs").encode("utf-8"),
        "other id": text.replace(f'id: "{NAME}"', 'id: "deploy/other"').encode("utf-8"),
        "bad title": text.replace('"Where staging runs"', '"two\\nlines"').encode("utf-8"),
        "bad revision": text.replace("revision: 1\n", "revision: true\n").encode("utf-8"),
        "bad provenance": text.replace("provenance: []", 'provenance: ["not a capture"]').encode("utf-8"),
        "bad lineage": text.replace('"via":"created"', '"via":"invented"').encode("utf-8"),
        "no blank line": text.replace("---\n\n", "---\n", 1).encode("utf-8"),
        "provenance changed": text.replace("provenance: []", f'provenance: ["{CAPTURE}"]').encode("utf-8"),
        "lineage changed": text.replace('"author":"human:alpha-human"', '"author":"human:someone"').encode("utf-8"),
        "missing": None,
    }[damage]
    if damaged is None:
        path.unlink()
    else:
        path.write_bytes(damaged + b"An edit.\n")
    with changes_nothing(lab.app, InvalidInput) as caught:
        evidence.edit(human, NAME, 1)
    assert caught[0].details["field"] == "file"


def test_an_edit_from_a_file_of_an_older_revision_is_a_conflict(lab: Lab) -> None:
    evidence, human = lab.app.evidence, lab.team.human
    evidence.create(human, NAME, "Where staging runs", BODY)
    old = lab.path(NAME).read_bytes()
    evidence.edit(human, NAME, 1, body="Second.\n")
    lab.path(NAME).write_bytes(old + b"Edited from a stale copy.\n")
    with changes_nothing(lab.app, Conflict) as caught:
        evidence.edit(human, NAME, 2)
    assert caught[0].details["file_revision"] == 1


# Recall ----------------------------------------------------------------------------------------------


def test_recall_finds_active_units_and_not_edited_or_reviewed_ones(lab: Lab) -> None:
    evidence, human, agent, memory = lab.app.evidence, lab.team.human, lab.team.agent, lab.app.memory
    evidence.create(human, "notes/edited", "Edited only", "The quokka colony is edited only.\n")
    evidence.create(human, "notes/reviewed", "Reviewed only", "The quokka colony is reviewed only.\n")
    evidence.review(human, "notes/reviewed", 1)
    lab.active("notes/active", "Active", "The quokka colony lives on Rottnest.\n")
    for mode in ("lexical", "hybrid"):
        found = memory.recall(agent, "quokka colony", mode=mode)
        assert found["results"] == []
        assert found["match"] == "none"  # match speaks of the entries
        assert found["evidence"] == [{
            "unit": "notes/active", "title": "Active", "revision": 1, "kind": "evidence",
            "snippet": "The **quokka** **colony** lives on Rottnest.\n",
            "ranked_by": ["lexical"] if mode == "lexical" else ["lexical", "semantic"]}]
    # Any word when no unit holds all of them, as for entries; a search by tags finds no unit.
    assert [hit["unit"] for hit in memory.recall(agent, "quokka zebra", mode="lexical")["evidence"]] == [
        "notes/active"]
    assert memory.recall(agent, "quokka", tags=["ops"])["evidence"] == []
    assert memory.recall(agent, "?!")["evidence"] == []
    # Entries and units are found side by side; the unit's name is searched too.
    memory.remember(agent, _entry("ops/quokka", "Quokka notes", "The quokka colony count."))
    both = memory.recall(agent, "quokka", mode="lexical")
    assert [hit["slug"] for hit in both["results"]] == ["ops/quokka"]
    assert [hit["unit"] for hit in both["evidence"]] == ["notes/active"]
    assert [hit["unit"] for hit in memory.recall(agent, "notes", mode="lexical")["evidence"]] == ["notes/active"]



def test_recall_folds_the_accents_of_units_too(lab: Lab) -> None:
    lab.active("notes/visit", "Besuch in Zürich", "Herr Müller führte uns durchs Café.\n")
    for query in ("zurich", "MULLER cafe", "Café"):
        assert [hit["unit"] for hit in lab.app.memory.recall(lab.team.agent, query, mode="lexical")["evidence"]] == [
            "notes/visit"], query

def _entry(slug: str, title: str, body: str) -> RememberRequest:
    return RememberRequest(slug=slug, title=title, body=body)


def test_a_unit_at_the_body_limit_is_activated_and_found_on_both_engines(lab: Lab) -> None:
    """1 MiB of distinct words outgrows a PostgreSQL tsvector (1 MiB): the index is given the words up to a
    budget; ordinary text at the limit is indexed whole, and a word repeated past 255 times only 255."""
    evidence, human, admin = lab.app.evidence, lab.team.human, lab.admin
    distinct = " ".join(f"w{index}x" for index in range(200_000))[:BODY_MAX_BYTES - 20] + " lastword"
    prose = ("The quick brown fox jumps over the lazy dog near the riverbank. " * 20_000)[:BODY_MAX_BYTES - 20]
    prose += " finalword"
    for name, body in (("big/distinct", distinct), ("big/prose", prose)):
        evidence.create(human, name, "Big", body)
        evidence.review(human, name, 1)
        evidence.activate(admin, name, 1)
    recall = partial(lab.app.memory.recall, human, mode="lexical")
    assert [hit["unit"] for hit in recall("w5x")["evidence"]] == ["big/distinct"]
    assert [hit["unit"] for hit in recall("finalword")["evidence"]] == ["big/prose"]
    assert recall("lastword")["evidence"] == []  # past the budget
    indexed = search_text(distinct)
    assert indexed is not None
    assert "lastword" not in indexed
    assert search_text("short text") is None
    assert search_text(prose) is not None
    assert (search_text(prose) or "").lower().split().count("the") == 255
    assert len(indexed.encode()) < SEARCH_COST_MAX


# The active snapshot ------------------------------------------------------------------------------------


def test_snapshot_problems_name_each_file_and_what_is_wrong(lab: Lab) -> None:
    evidence, human = lab.app.evidence, lab.team.human
    for name in ("units/modified", "units/missing", "units/edited", "units/fine"):
        lab.active(name, "T", f"Body of {name}.\n")
    evidence.create(human, "units/never-active", "T", "Never activated.\n")
    lab.path("units/never-active").unlink()  # not in the active snapshot: not a problem of it
    lab.path("units/modified").write_bytes(lab.path("units/modified").read_bytes() + b"Outside.\n")
    lab.path("units/missing").unlink()
    evidence.edit(human, "units/edited", 1, body="Not yet activated.\n")
    problems = evidence.snapshot_problems(human)
    assert len(problems) == 3, problems
    modified, missing, edited = (next(p for p in problems if p.startswith(name + ":"))
                                 for name in ("units/modified", "units/missing", "units/edited"))
    assert str(lab.path("units/modified")) in modified
    assert "modified outside Armarius" in modified
    assert str(lab.path("units/missing")) in missing
    assert "missing" in missing
    assert str(lab.path("units/edited")) in edited
    assert "edited but not activated" in edited
    assert evidence.snapshot_problems(human, exclude="units/modified") == [p for p in problems if p != modified]
    assert evidence.snapshot_problems(human, exclude={"units/missing", "units/edited"}) == [modified]
    assert set(evidence.snapshot(human)) == {"units/modified", "units/missing", "units/edited", "units/fine"}
    with lab.app.database.transaction(workspace_id=human.workspace_id) as tx:
        assert evidence.snapshot_problems(human, within=tx) == problems


# The file format ---------------------------------------------------------------------------------------


def test_the_file_renders_deterministically_and_parses_back() -> None:
    unit = UnitFile(NAME, "Wh\u00e9re \u201cstaging\u201d runs", 2, (CAPTURE,), (
        {"revision": 1, "author": "human:ada", "at": "2026-01-01T00:00:00.000000Z", "via": "capture"},
        {"revision": 2, "author": "human:bob", "at": "2026-01-02T00:00:00.000000Z", "via": "repair 3"}),
        "---\nA body may hold fences.\n---\n\n")
    content = render(unit)
    assert render(unit) == content
    assert content.decode("utf-8").split("\n")[:9] == [
        "---", f'id: "{NAME}"', 'title: "Wh\u00e9re \u201cstaging\u201d runs"', "revision: 2",
        f'provenance: ["{CAPTURE}"]',
        'lineage: [{"at":"2026-01-01T00:00:00.000000Z","author":"human:ada","revision":1,"via":"capture"},'
        '{"at":"2026-01-02T00:00:00.000000Z","author":"human:bob","revision":2,"via":"repair 3"}]',
        "---", "", "---"]
    assert parse(content, NAME) == unit
    assert fingerprint(content) == __import__("hashlib").sha256(content).hexdigest()
    with pytest.raises(InvalidInput):
        parse(content, "deploy/other")


# Activation fetches nothing ----------------------------------------------------------------------------

_LOCAL = ("127.0.0.1", "::1", "localhost")


def test_activation_needs_no_research_and_no_network(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """No research source is configured, and every connection or name lookup beyond this host fails (the
    database is on this host): creation, review, activation and recall still work."""
    assert lab.app.research is None
    reached: list[object] = []
    real_connect, real_lookup = socket.socket.connect, socket.getaddrinfo

    def local_connect(self: socket.socket, address: Any) -> Any:
        if self.family != socket.AF_UNIX and address[0] not in _LOCAL:
            reached.append(address)
            raise OSError("the network is switched off for this test")
        return real_connect(self, address)

    def local_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in _LOCAL:
            reached.append(host)
            raise socket.gaierror("no name lookups in this test")
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", local_connect)
    monkeypatch.setattr(socket, "getaddrinfo", local_lookup)
    lab.active(NAME, "Where staging runs", "See https://staging.example.com/status for zeppelin.\n")
    assert lab.app.evidence.current(lab.team.human, NAME).status == "active"
    assert [hit["unit"] for hit in lab.app.memory.recall(lab.team.agent, "zeppelin")["evidence"]] == [NAME]
    assert reached == []
