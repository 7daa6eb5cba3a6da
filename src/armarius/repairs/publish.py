"""Applying a repair of an evidence unit: steps that each commit, so a crash between any two is recovered
from the receipt alone.

1. **Record the choice** (one transaction, with the session's takeover when one is asked for and needed, after
   the repair is locked and found still proposed): the repair becomes ``applying`` with the chosen option, the
   complete correction (the unit's next revision and the exact bytes of its file), the base revision's
   file fingerprint and the correction's. Before that, the other active units' files are checked (see
   :func:`file_problems`), and the target's file against its active fingerprint: a mismatch refuses, names
   the file, and records nothing (a decision never publishes unrelated edits).
2. **Write the file and save** (one transaction, the target's row locked): the file is written by atomic
   replace (temporary file, fsync, rename, fsync of the folder) as the last step before the commit, as every
   revision's file is; the correction becomes the unit's next revision, ``reviewed`` (a human chose its exact
   content); the repair becomes ``pending_activation``. A crash before the commit leaves the file ahead of
   the store, which recovery takes as written.
3. **Activate** (one transaction): the revision is indexed and active; the repair becomes ``active``.

Recovery (:func:`publish`, run by a retry) starts where the receipt says. From ``applying``, with the unit's
row locked: a unit no longer at the correction's base revision was corrected meanwhile, and its file is
never written (``superseded``); else the file on disk decides. Holding the base revision's bytes, it is
written (again); holding the correction's, it is kept; anything else is someone's intervening correction,
never overwritten: the repair becomes ``superseded``. The other files are checked again first. From
``pending_activation`` only the activation remains.

The unit's file is found from the workspace and the unit's name where it is written, never from a path
kept in the receipt: a data folder moved (or another host's mount) is where a retry writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from armarius.auth.model import Actor
from armarius.evidence.model import Correction
from armarius.repairs import refusals
from armarius.repairs.model import Event, Status
from armarius.store import iso_utc

if TYPE_CHECKING:
    from armarius.evidence.service import EvidenceService
    from armarius.repairs.service import RepairService
    from armarius.store import Tx


def apply_evidence(service: RepairService, actor: Actor, row: dict[str, Any], picked: dict[str, Any], *,
                   take_over: bool = False, continue_pending: bool = False) -> dict[str, Any]:
    """Apply the chosen alternative of an evidence repair (the caller checked the option and the authority);
    the repair's view after the last step."""
    evidence = service.require_evidence()
    target, result, repair_id = picked["target"], picked["result"], row["id"]
    name, prepared = target["name"], target["revision"]
    unit = evidence.current(actor, name)
    correction: Correction | None = None
    if unit.revision == prepared:
        problems = file_problems(evidence, actor, row["snapshot"] or {}, name)
        found = evidence.file_fingerprint(actor, name)
        if found != unit.active_fingerprint:
            problems.insert(0, f"{name}: its file {evidence.unit_path(actor.workspace, name)} "
                               f"{'is missing' if found is None else 'differs from its active revision'}")
        if problems:
            raise refusals.files_changed(problems)
        correction = evidence.correction(actor, name, base_revision=prepared, title=result["title"],
                                         body=result["body"], via=f"repair {repair_id}")
    with service.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
        at = iso_utc(service.clock())
        row = service.locked_for_decision(tx, actor, repair_id, take_over=take_over, at=at)
        chosen = {"chosen_option": picked["option"], "decided_by": actor.audit_name}
        current = evidence.current(actor, name, within=tx).revision
        moved = correction is None or current != prepared
        if correction is None or moved:
            service.supersede(tx, actor, row, target, at=at, current=current, found_by="apply", **chosen)
        else:
            service.transition(tx, actor, row, Event.APPLYING, Status.APPLYING, at=at, details={
                "option": picked["option"], "target": target, "revision": correction.revision,
                "base_fingerprint": correction.base_fingerprint, "result_fingerprint": correction.fingerprint,
            }, correction=correction.to_dict(), base_fingerprint=correction.base_fingerprint,
                result_fingerprint=correction.fingerprint, **chosen)
    view = service.mirror(actor, row)
    if moved:
        return view
    return publish(service, actor, repair_id, continue_pending=continue_pending)


def publish(service: RepairService, actor: Actor, repair_id: int, *, continue_pending: bool = False
            ) -> dict[str, Any]:
    """Go on from the repair's recorded state (``applying`` or ``pending_activation``) to ``active`` (or stop
    at ``superseded``); the repair's view after the last step. ``continue_pending``: stop before activation,
    on purpose."""
    with service.database.transaction(workspace_id=actor.workspace_id) as tx:
        row = service.readable(tx, actor, repair_id)
    if row["status"] == Status.APPLYING:
        saved = _save(service, actor, row)
        if saved["status"] != Status.PENDING_ACTIVATION:
            return saved
    if continue_pending:
        return service.continue_pending(actor, repair_id)
    return _activate(service, actor, row)


def preflight(service: RepairService, actor: Actor, row: dict[str, Any]) -> None:
    """Refuse a retry that could not go on, before anything is recorded: another curated file changed since the
    proposal, or (once the correction is saved) the target's file no longer holds it."""
    evidence = service.require_evidence()
    target = _target(row)
    problems = file_problems(evidence, actor, row["snapshot"] or {}, target["name"])
    if row["status"] == Status.PENDING_ACTIVATION:
        found = evidence.file_fingerprint(actor, target["name"])
        if found != row["result_fingerprint"]:
            path = evidence.unit_path(actor.workspace, target["name"])
            problems.insert(0, f"{target['name']}: its file {path} {'is missing' if found is None else 'has changed'}"
                               " since the correction was saved")
    if problems:
        raise refusals.files_changed(problems)


def _save(service: RepairService, actor: Actor, row: dict[str, Any]) -> dict[str, Any]:
    """Step 2 from ``applying``, in one transaction holding the unit's row: write the file unless it holds the
    correction already, then save the revision. When the unit moved past the base revision, or its file holds
    anything else, the repair is superseded, the file untouched. The view.

    The unit's revision is checked before the file is touched (after a human's correction the file holds the
    base revision's bytes only when someone put them back: they are not the retry's to overwrite), and the row
    stays locked until the commit, so no revision comes between the check, the write and the save."""
    evidence = service.require_evidence()
    correction = Correction.from_dict(row["correction"])
    name, repair_id = correction.name, row["id"]
    with service.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
        at = iso_utc(service.clock())
        locked = service.readable(tx, actor, repair_id, lock=True)
        if locked["status"] == Status.APPLYING:  # else another retry got there first
            current = evidence.current(actor, name, within=tx, lock=True).revision
            found = evidence.file_fingerprint(actor, name) if current == correction.base_revision else None
            if current != correction.base_revision:  # corrected meanwhile: nothing is written
                service.supersede(tx, actor, locked, _target(locked), at=at, current=current, found_by="save")
            elif problems := file_problems(evidence, actor, locked["snapshot"] or {}, name, within=tx):
                raise refusals.files_changed(problems)
            elif found not in (correction.base_fingerprint, correction.fingerprint):
                service.supersede(tx, actor, locked, _target(locked), at=at, current=current, found_by="file",
                                  found={"file_fingerprint": found})
            else:
                if found == correction.base_fingerprint:
                    evidence.write_file(correction, workspace=actor.workspace)
                revision = evidence.record_correction(actor, correction, within=tx)
                service.transition(tx, actor, locked, Event.PENDING_ACTIVATION, Status.PENDING_ACTIVATION, at=at,
                                   details={"revision": revision, "fingerprint": correction.fingerprint,
                                            "file": "written" if found == correction.base_fingerprint else "found"},
                                   applied_revision=revision)
    return service.mirror(actor, row)


def _activate(service: RepairService, actor: Actor, row: dict[str, Any]) -> dict[str, Any]:
    """Step 4 from ``pending_activation``; a file changed meanwhile refuses (conflict) and leaves it pending."""
    evidence = service.require_evidence()
    with service.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
        locked = service.readable(tx, actor, row["id"], lock=True)
        if locked["status"] == Status.PENDING_ACTIVATION:  # else another retry got there first
            target = _target(locked)
            evidence.activate(actor, target["name"], locked["applied_revision"], within=tx)
            service.transition(tx, actor, locked, Event.ACTIVATED, Status.ACTIVE, at=iso_utc(service.clock()),
                               details={"revision": locked["applied_revision"]}, activation_deferred=False)
    return service.mirror(actor, row)


def file_problems(evidence: EvidenceService, actor: Actor, snapshot: dict[str, str], target: str, *,
                  within: Tx | None = None) -> list[str]:
    """The other units whose files hold neither the fingerprint stored with the proposal nor the one the store
    now has active for them, in words naming the file: an edit outside Armarius, or a revision not reviewed
    and activated. (A unit activated meanwhile through Armarius is fine: its file is what the store says is
    published. Checking only the proposal's fingerprints would refuse such a repair, and every retry of it,
    for ever.) ``within``: the store is read in the caller's transaction."""
    active = evidence.snapshot(actor, within=within)
    found = []
    for name, expected in sorted(snapshot.items()):
        if name == target:
            continue
        now = evidence.file_fingerprint(actor, name)
        if now not in (expected, active.get(name, expected)):
            path = evidence.unit_path(actor.workspace, name)
            found.append(f"{name}: its file {path} {'is missing' if now is None else 'has changed'} since the "
                         "repair was proposed")
    return found


def _target(row: dict[str, Any]) -> dict[str, Any]:
    target: dict[str, Any] = next(item["target"] for item in row["alternatives"]
                                  if item["option"] == row["chosen_option"])
    return target
