"""Repairs of evidence units on both engines: the choice recorded before the file is written, the
file replaced atomically, the correction saved and then activated; the snapshot of the other curated
files checked before preparing and applying; and every refusal changing nothing."""

from __future__ import annotations

import json

import pytest

from armarius.errors import Conflict, InvalidInput, NotAllowed
from armarius.evidence.model import fingerprint, parse
from tests.helpers import OwnerSQL
from tests.repairs.conftest import OTHER_UNIT, UNIT, UNIT_BODY, UNIT_TITLE, Desk, audit_of, changes_nothing, statuses

FIXED = "The resolver cache expired: the TTL was 60 s, not 3600 s.\n"


def test_a_proposal_on_evidence_stores_the_active_snapshot(desk: Desk) -> None:
    session = desk.open_session()
    before = desk.unit_file()
    view = desk.prepare(session, desk.unit_alternative())
    (alternative,) = view["alternatives"]
    assert alternative["current"] == {"title": UNIT_TITLE, "body": UNIT_BODY}
    assert alternative["result"] == {"title": UNIT_TITLE, "body": FIXED}
    assert alternative["target"] == {"kind": "evidence", "name": UNIT, "revision": 1}
    assert desk.unit_file() == before
    assert desk.app.repairs.target(desk.agent, session, "evidence", UNIT)["body"] == UNIT_BODY
    with OwnerSQL(desk.app.settings) as sql:
        (snapshot,) = sql.rows("SELECT snapshot FROM repairs WHERE id = ?", (view["repair"],))[0]
    assert json.loads(snapshot) == {name: fingerprint(desk.unit_file(name)) for name in (UNIT, OTHER_UNIT)}


def test_an_evidence_body_over_one_megabyte_is_refused(desk: Desk) -> None:
    session = desk.open_session()
    with changes_nothing(desk, InvalidInput) as caught:
        desk.prepare(session, desk.unit_alternative("x" * (1_048_576 + 1)))
    assert caught[0].details == {"field": "alternatives[0].body", "size": 1_048_577, "limit": 1_048_576}
    assert desk.prepare(session, desk.unit_alternative("y" * 1_048_576))["status"] == "proposed"  # at the bound


def test_an_evidence_alternative_has_no_tags(desk: Desk) -> None:
    session = desk.open_session()
    with changes_nothing(desk, InvalidInput) as caught:
        desk.prepare(session, desk.unit_alternative(tags=["ops"]))
    assert caught[0].details["field"] == "alternatives[0].tags"


def test_a_unit_that_is_not_active_is_not_repaired(desk: Desk) -> None:
    desk.app.evidence.create(desk.human, "incident/draft", "Not yet reviewed", "Draft.\n")
    session = desk.open_session()
    with changes_nothing(desk, Conflict) as caught:
        desk.prepare(session, desk.unit_alternative(name="incident/draft", title="Not yet reviewed"))
    assert caught[0].details == {"name": "incident/draft", "status": "edited"}


def test_files_that_differ_from_the_active_snapshot_refuse_a_proposal_and_are_named(desk: Desk) -> None:
    session = desk.open_session()
    other = desk.app.evidence.unit_path("alpha", OTHER_UNIT)
    other.write_bytes(other.read_bytes() + b"An edit nobody reviewed.\n")
    with changes_nothing(desk, Conflict) as caught:
        desk.prepare(session, desk.unit_alternative())
    (problem,) = caught[0].details["files"]
    assert OTHER_UNIT in problem
    assert str(other) in problem


def test_applying_an_evidence_repair_writes_saves_and_activates(desk: Desk) -> None:
    session = desk.open_session()
    assert desk.app.memory.recall(desk.agent, "TTL")["evidence"] == []
    repair = desk.prepare(session, desk.unit_alternative())["repair"]
    original = desk.unit_file()
    applied = desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert (applied["status"], applied["written"], applied["applied_revision"]) == ("active", True, 2)
    assert statuses(desk, repair) == [("proposed", "proposed"), ("applying", "applying"),
                                      ("pending_activation", "pending_activation"), ("activated", "active")]
    written = parse(desk.unit_file(), UNIT)
    assert (written.revision, written.title, written.body) == (2, UNIT_TITLE, FIXED)
    assert [(step["revision"], step["via"], step["author"]) for step in written.lineage] == [
        (1, "created", "human:alpha-human"), (2, f"repair {repair}", "human:alpha-admin")]
    unit = desk.app.evidence.current(desk.agent, UNIT)
    assert (unit.status, unit.active_revision, unit.active_fingerprint) == ("active", 2, fingerprint(desk.unit_file()))
    assert [hit["unit"] for hit in desk.app.memory.recall(desk.agent, "TTL")["evidence"]] == [UNIT]
    assert desk.app.memory.recall(desk.agent, "primary")["evidence"] == []  # the old revision is no longer searched
    assert [action for actor, action, _ in audit_of(desk) if actor == "human:alpha-admin"] == [
        "repair.applying", "repair.pending_activation", "repair.activated"]
    receipt = json.loads(desk.receipt_path(session, repair).read_bytes())
    assert receipt["result"] == {"title": UNIT_TITLE, "body": FIXED, "fingerprint": fingerprint(desk.unit_file())}
    assert receipt["target"]["base_fingerprint"] == fingerprint(original)
    assert receipt["publication"] == {"status": "active", "published": True, "activation_deferred": False,
                                      "outcome": "Applied: revision 2 is the target's current revision."}
    assert desk.app.evidence.snapshot_problems(desk.admin) == []


def test_evidence_repairs_need_evidence_manage(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session(), desk.unit_alternative())["repair"]
    with changes_nothing(desk, NotAllowed) as caught:
        desk.app.repairs.apply(desk.human, repair, "opt-1", take_over=True)
    assert caught[0].details == {"permission": "memory.manage"}  # an editor holds neither kind of authority


def test_an_unrelated_file_edited_outside_armarius_refuses_the_apply_and_is_named(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session, desk.unit_alternative())["repair"]
    other = desk.app.evidence.unit_path("alpha", OTHER_UNIT)
    original = other.read_bytes()
    other.write_bytes(original.replace(b"rotated", b"ROTATED"))
    with changes_nothing(desk, Conflict) as caught:
        desk.app.repairs.apply(desk.admin, repair, "opt-1")  # the admin owns nothing yet: refused on files first
    (problem,) = caught[0].details["files"]
    assert OTHER_UNIT in problem
    assert str(other) in problem
    other.write_bytes(original)
    assert desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)["status"] == "active"


def test_the_target_file_edited_outside_armarius_refuses_the_apply(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session(), desk.unit_alternative())["repair"]
    path = desk.app.evidence.unit_path("alpha", UNIT)
    path.write_bytes(path.read_bytes() + b"\nA note.\n")
    with changes_nothing(desk, Conflict) as caught:
        desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert str(path) in caught[0].details["files"][0]


def test_a_unit_changed_since_preparation_makes_the_repair_superseded_and_writes_nothing(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session(), desk.unit_alternative())["repair"]
    desk.app.evidence.edit(desk.human, UNIT, 1, body="A human's own correction.\n")
    edited = desk.unit_file()
    applied = desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert (applied["status"], applied["written"]) == ("superseded", False)
    assert applied["history"][-1]["details"]["current_revision"] == 2
    assert desk.unit_file() == edited
    assert desk.app.evidence.current(desk.agent, UNIT).revision == 2


def test_activation_left_pending_on_purpose_is_never_a_success_until_a_retry(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session, desk.unit_alternative())["repair"]
    applied = desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True, continue_pending=True)
    assert (applied["status"], applied["activation_deferred"], applied["published"]) == (
        "pending_activation", True, False)
    assert applied["outcome"].startswith("NOT a success")
    assert applied["history"][-1]["event"] == "activation_deferred"
    assert parse(desk.unit_file(), UNIT).body == FIXED  # saved (reviewed), not active
    assert desk.app.evidence.current(desk.agent, UNIT).status == "reviewed"
    assert desk.app.memory.recall(desk.agent, "TTL")["evidence"] == []
    receipt = json.loads(desk.receipt_path(session, repair).read_bytes())
    assert receipt["publication"]["published"] is False
    assert receipt["publication"]["activation_deferred"] is True
    listed = desk.app.repairs.list_repairs(desk.admin, status="pending_activation")
    assert [(item["repair"], item["published"]) for item in listed] == [(repair, False)]
    retried = desk.app.repairs.retry(desk.admin, repair)
    assert (retried["status"], retried["activation_deferred"], retried["published"]) == ("active", False, True)
    assert [hit["unit"] for hit in desk.app.memory.recall(desk.agent, "TTL")["evidence"]] == [UNIT]


def test_a_later_edit_of_the_unit_makes_repair_show_report_superseded(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session(), desk.unit_alternative())["repair"]
    desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    desk.app.evidence.edit(desk.human, UNIT, 2, body="Later knowledge.\n")
    shown = desk.app.repairs.show(desk.agent, repair)
    assert (shown["status"], shown["applied_revision"]) == ("superseded", 2)
    assert shown["history"][-1]["details"]["current_revision"] == 3


def test_an_entry_and_a_unit_in_one_proposal_are_applied_by_their_own_authority(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session(), desk.alternative(), desk.unit_alternative())["repair"]
    applied = desk.app.repairs.apply(desk.admin, repair, "opt-2", take_over=True)
    assert (applied["status"], applied["chosen_option"]) == ("active", "opt-2")
    assert desk.app.memory.read(desk.agent, "deploy/staging-host")["revision"] == 1  # the other option: untouched


@pytest.mark.parametrize("kind", ["entry", "evidence"])
def test_a_retry_of_an_active_repair_rewrites_a_missing_receipt(desk: Desk, kind: str) -> None:
    session = desk.open_session()
    alternative = desk.alternative() if kind == "entry" else desk.unit_alternative()
    repair = desk.prepare(session, alternative)["repair"]
    desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    desk.receipt_path(session, repair).unlink()
    retried = desk.app.repairs.retry(desk.admin, repair)
    assert retried["status"] == "active"
    assert json.loads(desk.receipt_path(session, repair).read_bytes())["history"][-1]["event"] == "retried"
