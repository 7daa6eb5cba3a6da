"""Repairs of evidence units against what happens around them between the decision and the retry.

* Another unit edited, reviewed and activated through Armarius meanwhile: its file is what the store says is
  published, so a proposed repair still applies and a crashed one is still recovered from its receipt (only
  an unreviewed revision or an outside edit of another unit refuses, naming the file, changing nothing).
* The data folder moved (or mounted elsewhere by another host) after a crash: the retry writes the unit's
  file where the folder is now, never to a path the receipt kept.
* The unit corrected meanwhile and its file put back to the base revision's bytes: the retry never writes the
  file (``superseded``): the store's revision decides before the file does.
* A link put in place of a session's receipt folder is never written through: the receipt stays a pending
  operation until the link is gone and the next step writes it.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from armarius.app import Armarius, open_app
from armarius.errors import Conflict
from armarius.evidence.model import Correction, parse
from tests.repairs.conftest import ADMINS, OTHER_UNIT, UNIT, Desk, changes_nothing, statuses

FIXED = "The resolver cache expired: the TTL was 60 s, not 3600 s.\n"
OTHER_BODY = "Logs are rotated daily now.\n"


class Killed(Exception):
    """Stands for a server killed after the choice was recorded, before the unit's file was written."""


def _crashed(desk: Desk, monkeypatch: pytest.MonkeyPatch) -> int:
    """A repair of UNIT whose apply stopped after step 1: ``applying``, the file still the base revision's."""
    repair = desk.prepare(desk.open_session(), desk.unit_alternative(FIXED))["repair"]

    def killed(correction: Correction, **where: str) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(desk.app.evidence, "write_file", killed)
        with pytest.raises(Killed):
            desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert desk.app.repairs.show(desk.admin, repair)["status"] == "applying"
    return int(repair)


def _activate_other(desk: Desk) -> None:
    """A normal revision of the other unit through Armarius: edited, reviewed, activated."""
    desk.app.evidence.edit(desk.human, OTHER_UNIT, 1, body=OTHER_BODY)
    desk.app.evidence.review(desk.human, OTHER_UNIT, 2)
    desk.app.evidence.activate(desk.admin, OTHER_UNIT, 2)


def test_a_proposed_repair_applies_after_another_unit_was_activated(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session(), desk.unit_alternative(FIXED))["repair"]
    _activate_other(desk)
    done = desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert (done["status"], done["applied_revision"]) == ("active", 2)
    assert parse(desk.unit_file(), UNIT).body == FIXED
    assert parse(desk.unit_file(OTHER_UNIT), OTHER_UNIT).body == OTHER_BODY


def test_a_crashed_repair_is_recovered_after_another_unit_was_activated(desk: Desk,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    repair = _crashed(desk, monkeypatch)
    _activate_other(desk)
    done = desk.app.repairs.retry(desk.admin, repair)
    assert (done["status"], done["applied_revision"]) == ("active", 2)
    assert statuses(desk, repair)[-2:] == [("pending_activation", "pending_activation"), ("activated", "active")]
    assert parse(desk.unit_file(), UNIT).body == FIXED


@pytest.mark.parametrize("change", ["unreviewed_revision", "outside_edit", "outside_edit_after_activation"])
def test_another_units_unreviewed_or_outside_edit_still_refuses(desk: Desk, monkeypatch: pytest.MonkeyPatch,
                                                               change: str) -> None:
    """The purpose kept: a decision never publishes another unit's edits nobody reviewed (before the apply and
    before the retry), whether the proposal's or the store's active revision was what the file held."""
    proposed = desk.prepare(desk.open_session(), desk.unit_alternative(FIXED))["repair"]
    crashed = _crashed(desk, monkeypatch)
    if change == "outside_edit_after_activation":
        _activate_other(desk)
    if change == "unreviewed_revision":
        desk.app.evidence.edit(desk.human, OTHER_UNIT, 1, body="Not reviewed yet.\n")
    else:
        path = desk.app.evidence.unit_path("alpha", OTHER_UNIT)
        path.write_bytes(path.read_bytes() + b"Edited outside Armarius.\n")
    for attempt in (lambda: desk.app.repairs.apply(desk.admin, proposed, "opt-1", take_over=True),
                    lambda: desk.app.repairs.retry(desk.admin, crashed)):
        with changes_nothing(desk, Conflict) as caught:
            attempt()
        assert f"{OTHER_UNIT}: its file" in caught[0].message


def test_a_retry_writes_the_units_file_where_the_data_folder_is_now(app: Armarius, desk: Desk, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    repair = _crashed(desk, monkeypatch)
    app.close()
    old = app.settings.data_dir
    moved = tmp_path / "moved"
    shutil.move(old, moved)
    old.mkdir()  # the old path exists (another mount), but is not this deployment's folder
    restarted = open_app(dataclasses.replace(app.settings, data_dir=moved))
    try:
        admin = restarted.directory.authenticate_password("alpha-admin", ADMINS["alpha-admin"], workspace="alpha")
        done = restarted.repairs.retry(admin, repair)
        assert (done["status"], done["applied_revision"]) == ("active", 2)
        assert parse(restarted.evidence.unit_path("alpha", UNIT).read_bytes(), UNIT).body == FIXED
        assert restarted.evidence.show(admin, UNIT)["file"]["state"] == "matches"
        assert list(old.rglob("*")) == []
    finally:
        restarted.close()


def test_a_retry_never_writes_over_a_unit_corrected_meanwhile(desk: Desk, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit got a human's revision 2 after the crash, and its file was put back to revision 1's bytes
    (a backup restored, a checkout): the bytes match the receipt's base, the store does not."""
    repair = _crashed(desk, monkeypatch)
    path = desk.app.evidence.unit_path("alpha", UNIT)
    base = path.read_bytes()
    desk.app.evidence.edit(desk.human, UNIT, 1, body="A human's own correction.\n")
    path.write_bytes(base)
    retried = desk.app.repairs.retry(desk.admin, repair)
    assert (retried["status"], retried["applied_revision"]) == ("superseded", None)
    assert retried["history"][-1]["details"]["found_by"] == "save"
    assert path.read_bytes() == base  # never written
    shown = desk.app.evidence.show(desk.admin, UNIT)
    assert (shown["revision"], shown["body"], [row["revision"] for row in shown["revisions"]]) == (
        2, "A human's own correction.\n", [1, 2])
    assert desk.app.repairs.retry(desk.admin, repair)["status"] == "superseded"  # and a second retry neither
    assert path.read_bytes() == base
    assert desk.app.evidence.current(desk.admin, UNIT).revision == 2


def test_a_link_in_place_of_the_receipt_folder_is_never_written_through(desk: Desk, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    session = desk.open_session()
    folder = desk.evidence_dir / "alpha" / "sessions" / str(session) / "repairs"
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to(outside, target_is_directory=True)
    prepared = desk.prepare(session, desk.unit_alternative(FIXED))
    assert list(outside.iterdir()) == []
    (pending,) = prepared["pending_operations"]
    assert pending["attempts"] == 1
    folder.unlink()
    done = desk.app.repairs.apply(desk.admin, prepared["repair"], "opt-1", take_over=True)
    assert (done["status"], done["pending_operations"]) == ("active", [])
    assert desk.receipt_path(session, prepared["repair"]).is_file()
    assert list(outside.iterdir()) == []
