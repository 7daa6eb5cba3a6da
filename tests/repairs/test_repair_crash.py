"""A server killed in the middle of applying a repair leaves it recoverable from its receipt alone.

A child process opens the application and applies option 1 of a prepared repair (its session closed, so no
takeover is needed) as an administrator; a real function on the way is wrapped to kill the process with
SIGKILL at one step boundary:

Evidence units
* ``recorded``: the choice is recorded (``applying``, the receipt mirrored), before the file is written;
* ``temporary_file``: the temporary file is written and forced to disk, before the rename;
* ``renamed``: the rename is done (the file holds the correction), before the correction is saved;
* ``before_activation``: the correction is saved (``pending_activation``), before the activation;
* ``after_activation``: the activation ran inside its transaction, before the commit;
* ``activated``: the activation committed, before the receipt's file is written.

Entries
* ``entry_before_commit``: the curated revision was written inside the transaction, before the commit;
* ``entry_committed``: the transaction committed, before the pending operation ran (no receipt file yet);
* ``receipt_written``: the receipt file was written, before its pending operation was marked done.

After each kill a fresh ``open_app`` (the restart) finds the repair in one of the six statuses, the unit's
file holding exactly the original or the approved content (nothing else), and the receipt file a consistent
earlier state of the store's receipt. Then a retry (for an entry killed before its commit: applying again)
completes it: ``active``, the file the approved content, exactly one new revision, every pending operation
done, the receipt file equal to the store's, an intact audit chain.

An intervening change between the recorded choice and the retry is never overwritten: a human's edit of the
unit, or an edit of its file outside Armarius, makes the retry ``superseded``; an unrelated curated file
edited meanwhile refuses the retry, naming the file, until it is restored.

On SQLite the parent closes its connections first and the child keeps a tiny page cache, so an open
transaction's pages reach the WAL before the kill (tests/crash_child.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.audit import chain as audit
from armarius.errors import Conflict
from armarius.evidence.model import Correction, fingerprint, parse
from armarius.repairs.model import Status
from tests.crash_child import PRELUDE, run_child
from tests.helpers import OwnerSQL
from tests.repairs.conftest import ADMINS, CORRECT_BODY, ENTRY, OTHER_UNIT, UNIT, Desk, changes_nothing

FIXED = "The resolver cache expired: the TTL was 60 s, not 3600 s.\n"

CHILD = PRELUDE + r"""
from armarius import files
from armarius.evidence.service import EvidenceService
from armarius.memory.service import MemoryService
from armarius.repairs import service as repair_service
from armarius.repairs.service import RepairService

admin = app.directory.authenticate_password(job["admin"], job["password"], workspace="alpha")
kill = job["kill"]
seen = {"pid": os.getpid()}
done = {"activated": False}


def die(**more):
    seen.update(more)
    report_and_die(seen)


real_replace = os.replace
real_write_file = EvidenceService.write_file


def write_file(self, correction, **where):
    if kill == "recorded":
        die(step=kill)
    if kill == "temporary_file":
        def replace(source, target, **folders):
            with open(os.open(source, os.O_RDONLY, dir_fd=folders.get("src_dir_fd")), "rb") as temporary:
                intact = temporary.read() == correction.content
            die(step=kill, temporary=Path(source).name, temporary_intact=intact)
        files.os.replace = replace
    if kill == "renamed":
        def replace(source, target, **folders):
            real_replace(source, target, **folders)
            die(step=kill)
        files.os.replace = replace
    return real_write_file(self, correction, **where)


real_activate = EvidenceService.activate


def activate(self, *args, **kwargs):
    if kill == "before_activation":
        die(step=kill)
    answer = real_activate(self, *args, **kwargs)
    if kill == "after_activation":
        die(step=kill, wal_grew=wal_size() > 0)
    done["activated"] = True
    return answer


real_mirror = RepairService.mirror


def mirror(self, actor, repair_id):
    if (kill == "activated" and done["activated"]) or kill == "entry_committed":
        die(step=kill)
    return real_mirror(self, actor, repair_id)


real_write_chosen = MemoryService.write_chosen


def write_chosen(self, *args, **kwargs):
    answer = real_write_chosen(self, *args, **kwargs)
    if kill == "entry_before_commit":
        die(step=kill, revision=answer["revision"])
    return answer


real_write_receipt = repair_service.write_receipt


def write_receipt(folder, repair_id, content):
    path = real_write_receipt(folder, repair_id, content)
    if kill == "receipt_written":
        die(step=kill)
    return path


EvidenceService.write_file = write_file
EvidenceService.activate = activate
RepairService.mirror = mirror
MemoryService.write_chosen = write_chosen
repair_service.write_receipt = write_receipt
app.repairs.apply(admin, job["repair"], "opt-1")
print("apply returned: the process was not killed", flush=True)
"""

EVIDENCE_KILLS = {  # the kill, and the status and file the restart finds
    "recorded": (Status.APPLYING, "original"),
    "temporary_file": (Status.APPLYING, "original"),
    "renamed": (Status.APPLYING, "approved"),
    "before_activation": (Status.PENDING_ACTIVATION, "approved"),
    "after_activation": (Status.PENDING_ACTIVATION, "approved"),
    "activated": (Status.ACTIVE, "approved"),
}
ENTRY_KILLS = {
    "entry_before_commit": (Status.PROPOSED, 1),
    "entry_committed": (Status.ACTIVE, 2),
    "receipt_written": (Status.ACTIVE, 2),
}


def crash(app: Armarius, desk: Desk, kind: str, kill: str) -> tuple[int, int, dict[str, Any]]:
    """A repair prepared in a session since closed, and a child killed at ``kill`` applying it."""
    session = desk.open_session()
    repair = desk.prepare(session, desk.alternative() if kind == "entry" else desk.unit_alternative())["repair"]
    desk.app.sessions.close(desk.agent, session)
    if app.database.dialect == "sqlite":  # the child is then the only connection
        app.database.close()
    seen = run_child(app.settings, {"agent_token": desk.team.agent_token, "admin": "alpha-admin",
                                    "password": ADMINS["alpha-admin"], "repair": repair, "kill": kill}, CHILD)
    assert seen["step"] == kill
    return session, repair, seen


def stored(app: Armarius, repair: int) -> dict[str, Any]:
    """The repair's row and operations as the owner reads them, past Armarius."""
    with OwnerSQL(app.settings) as sql:
        status, correction = sql.rows("SELECT status, correction FROM repairs WHERE id = ?", (repair,))[0]
        operations = sql.rows("SELECT kind, attempts, done_at IS NULL FROM pending_operations WHERE repair_id = ? "
                              "ORDER BY id", (repair,))
        integrity = sql.rows("PRAGMA integrity_check") if app.settings.database_url is None else [("ok",)]
    return {"status": status, "correction": None if correction is None else json.loads(correction),
            "open_operations": sum(1 for _kind, _attempts, still_open in operations if still_open),
            "integrity": integrity}


def receipt_consistent(desk: Desk, app: Armarius, session: int, repair: int, *, complete: bool) -> None:
    """The receipt file is the store's receipt as it was after one of its transitions (``complete``: the
    latest), never anything else."""
    view = app.repairs.show(desk.admin, repair)
    path = desk.receipt_path(session, repair)
    mirrored = json.loads(path.read_bytes())
    history = mirrored["history"]
    assert history == view["history"][:len(history)]
    assert mirrored["decision"]["status"] == history[-1]["status"]
    if complete:
        assert history == view["history"]
        assert mirrored["decision"]["status"] == view["status"]
        assert mirrored["publication"]["published"] == (view["status"] == "active")


def chain_holds(app: Armarius, workspace: int) -> None:
    _checked, broken = audit.verify_chain(app.database, workspace)
    assert broken is None, broken


@pytest.mark.parametrize("kill", list(EVIDENCE_KILLS))
def test_an_evidence_repair_killed_at_any_step_is_completed_by_a_retry(app: Armarius, desk: Desk, kill: str) -> None:
    original = desk.unit_file()
    session, repair, seen = crash(app, desk, "evidence", kill)
    expected_status, expected_file = EVIDENCE_KILLS[kill]
    restarted = open_app(app.settings)
    try:
        admin = restarted.directory.authenticate_password("alpha-admin", ADMINS["alpha-admin"], workspace="alpha")
        found = stored(restarted, repair)
        assert found["status"] == expected_status
        assert found["integrity"] == [("ok",)]
        approved = Correction.from_dict(found["correction"]).content
        assert parse(approved, UNIT).body == FIXED
        assert desk.unit_file() == {"original": original, "approved": approved}[expected_file]
        folder = restarted.evidence.unit_path("alpha", UNIT).parent
        leftovers = sorted(path.name for path in folder.glob(".*.tmp"))
        assert leftovers == ([seen["temporary"]] if kill == "temporary_file" else [])
        if kill == "temporary_file":
            assert seen["temporary_intact"] is True
        unit = restarted.evidence.current(admin, UNIT)
        saved = expected_status != Status.APPLYING
        assert (unit.revision, unit.active_revision) == ((2 if saved else 1), (2 if kill == "activated" else 1))
        receipt_consistent(desk, restarted, session, repair, complete=kill != "activated")

        retried = restarted.repairs.retry(admin, repair)
        assert (retried["status"], retried["applied_revision"], retried["pending_operations"]) == ("active", 2, [])
        assert desk.unit_file() == approved
        unit = restarted.evidence.current(admin, UNIT)
        assert (unit.revision, unit.status, unit.active_revision) == (2, "active", 2)
        assert unit.active_fingerprint == fingerprint(approved)
        assert restarted.evidence.snapshot_problems(admin) == []
        assert [hit["unit"] for hit in restarted.memory.recall(admin, "TTL")["evidence"]] == [UNIT]
        events = [event["event"] for event in retried["history"]]
        assert events[0] == "proposed"
        assert events.count("applying") == events.count("pending_activation") == events.count("activated") == 1
        assert stored(restarted, repair)["open_operations"] == 0
        receipt_consistent(desk, restarted, session, repair, complete=True)
        chain_holds(restarted, admin.workspace_id)
    finally:
        restarted.close()


@pytest.mark.parametrize("kill", list(ENTRY_KILLS))
def test_an_entry_repair_killed_around_its_commit_is_completed(app: Armarius, desk: Desk, kill: str) -> None:
    session, repair, seen = crash(app, desk, "entry", kill)
    expected_status, expected_revision = ENTRY_KILLS[kill]
    if kill == "entry_before_commit":
        assert seen["revision"] == 2  # written inside the transaction the kill rolled back
    restarted = open_app(app.settings)
    try:
        admin = restarted.directory.authenticate_password("alpha-admin", ADMINS["alpha-admin"], workspace="alpha")
        found = stored(restarted, repair)
        assert (found["status"], found["integrity"]) == (expected_status, [("ok",)])
        entry = restarted.memory.read(admin, ENTRY)
        assert entry["revision"] == expected_revision
        # The revision and the receipt committed together, or neither did.
        assert entry["curated"] is (expected_revision == 2)
        assert found["open_operations"] == (0 if kill == "entry_before_commit" else 1)
        receipt_consistent(desk, restarted, session, repair, complete=kill != "entry_committed")
        if kill == "entry_before_commit":
            with pytest.raises(Conflict):  # nothing to retry: the choice was never recorded
                restarted.repairs.retry(admin, repair)
            done = restarted.repairs.apply(admin, repair, "opt-1")
        else:
            done = restarted.repairs.retry(admin, repair)
        assert (done["status"], done["applied_revision"], done["pending_operations"]) == ("active", 2, [])
        entry = restarted.memory.read(admin, ENTRY)
        assert (entry["revision"], entry["body"], entry["curated"]) == (2, CORRECT_BODY, True)
        assert stored(restarted, repair)["open_operations"] == 0
        receipt_consistent(desk, restarted, session, repair, complete=True)
        chain_holds(restarted, admin.workspace_id)
    finally:
        restarted.close()


@pytest.mark.parametrize("change", ["human_edit", "outside_edit"])
def test_an_intervening_change_of_the_unit_before_the_retry_is_never_overwritten(app: Armarius, desk: Desk,
                                                                                 change: str) -> None:
    session, repair, _seen = crash(app, desk, "evidence", "recorded")
    restarted = open_app(app.settings)
    try:
        admin = restarted.directory.authenticate_password("alpha-admin", ADMINS["alpha-admin"], workspace="alpha")
        human = restarted.directory.authenticate_password("alpha-human", desk.team.human_password, workspace="alpha")
        path = restarted.evidence.unit_path("alpha", UNIT)
        if change == "human_edit":
            restarted.evidence.edit(human, UNIT, 1, body="A human's own correction.\n")
        else:
            path.write_bytes(path.read_bytes() + b"\nAn edit made in an editor, outside Armarius.\n")
        intervening = path.read_bytes()
        retried = restarted.repairs.retry(admin, repair)
        assert (retried["status"], retried["applied_revision"]) == ("superseded", None)
        # the store shows a human's revision before the file is looked at; an outside edit only the file shows
        assert retried["history"][-1]["details"]["found_by"] == ("save" if change == "human_edit" else "file")
        assert path.read_bytes() == intervening
        assert restarted.evidence.current(admin, UNIT).revision == (2 if change == "human_edit" else 1)
        receipt_consistent(desk, restarted, session, repair, complete=True)
        chain_holds(restarted, admin.workspace_id)
    finally:
        restarted.close()


def test_an_unrelated_file_edited_before_the_retry_refuses_it_and_is_named(app: Armarius, desk: Desk) -> None:
    _session, repair, _seen = crash(app, desk, "evidence", "recorded")
    restarted = open_app(app.settings)
    try:
        admin = restarted.directory.authenticate_password("alpha-admin", ADMINS["alpha-admin"], workspace="alpha")
        other = restarted.evidence.unit_path("alpha", OTHER_UNIT)
        original, target = other.read_bytes(), desk.unit_file()
        other.write_bytes(original + b"Unreviewed.\n")
        with changes_nothing(desk, Conflict) as refused:  # not even the retry is recorded
            restarted.repairs.retry(admin, repair)
        assert str(other) in refused[0].details["files"][0]
        assert stored(restarted, repair)["status"] == "applying"
        assert desk.unit_file() == target
        other.write_bytes(original)
        assert restarted.repairs.retry(admin, repair)["status"] == "active"
    finally:
        restarted.close()
