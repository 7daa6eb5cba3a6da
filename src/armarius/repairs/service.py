"""Archive repairs: an agent proposes complete alternatives for archived knowledge, a human decides.

A repair moves through the statuses of :class:`~armarius.repairs.model.Status`; every move is one
transaction that updates the repair row, appends its event (the status history), appends the audit event
``repair.<event>`` naming the acting principal, and records the pending operation that mirrors the receipt
into the session's evidence folder (run right after the commit; a failure leaves it pending for a retry).

* **Prepare** (agents, or humans, with ``repairs.propose``, in their own open session): one to five
  alternatives, each with the target's revision it was prepared against and its complete resulting content;
  the service stores the target's complete current content beside each. Nothing else changes.
* **Decide** (humans only; never an MCP tool): reject all, or ask for a reformulation with a comment, with
  ``repairs.propose``; apply one option with ``memory.manage`` (entries) or ``evidence.manage`` (units). A
  target whose revision moved since preparation makes the repair ``superseded`` and nothing is written.
* **Entries** are applied in one transaction: the curated revision with exactly the chosen content
  (:meth:`MemoryService.write_chosen`) and the receipt commit together or not at all.
* **Evidence units** are applied in steps, each recoverable from the receipt (:mod:`armarius.repairs.publish`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.canonical import canonical_json
from armarius.errors import Conflict, InvalidInput, NotAllowed, NotFound
from armarius.memory.model import REASON_MAX
from armarius.memory.service import MemoryService
from armarius.repairs import queries, refusals, views
from armarius.repairs.model import (
    Alternative,
    Event,
    Operation,
    Status,
    TargetKind,
    check_alternatives,
    check_text,
    option_id,
)
from armarius.repairs.publish import apply_evidence, preflight, publish
from armarius.repairs.receipts import receipt_folder, write_receipt, writing_receipts
from armarius.sessions.service import SessionService
from armarius.store import Database, Row, Tx, every_page, iso_utc
from armarius.validation import check_filter

if TYPE_CHECKING:
    from armarius.evidence.service import EvidenceService

#: The most repairs one page holds (a listing reads them a page at a time).
LIST_LIMIT = 200
#: How many of a session's repairs session_show and the session's page list (the newest): a session may hold
#: any number, and an answer stays bounded.
SESSION_REPAIRS_SHOWN = 20
#: Who may apply a repair, by its target's kind.
APPLIER = {TargetKind.ENTRY: Permission.MEMORY_MANAGE, TargetKind.EVIDENCE: Permission.EVIDENCE_MANAGE}


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class RepairService:
    database: Database
    memory: MemoryService
    sessions: SessionService
    #: The evidence folder; a repair's receipt is mirrored under ``<workspace>/sessions/<session>/repairs/``.
    evidence_dir: Path
    evidence: EvidenceService | None = None
    clock: Callable[[], datetime] = _now

    # Preparing (agents and humans with repairs.propose) --------------------------------------------

    def target(self, actor: Actor, session_id: int, kind: Any, name: Any) -> dict[str, Any]:
        """The complete current content of an entry or evidence unit and its revision: what an alternative is
        prepared against. Needs an open session of the caller's own."""
        actor.require(Permission.REPAIRS_PROPOSE)
        if kind not in set(TargetKind):
            raise InvalidInput("kind is 'entry' or 'evidence'.", field="kind")
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            self.sessions.check_open(actor, session_id, within=tx)
        current = self._current(actor, TargetKind(kind), name)
        return {"session": session_id, "kind": kind, "name": name, **current}

    def prepare(self, actor: Actor, session_id: int, conflict: Any, alternatives: Any) -> dict[str, Any]:
        """Store a proposal of one to five complete alternatives (status ``proposed``); changes no content."""
        actor.require(Permission.REPAIRS_PROPOSE)
        described = check_text(conflict, "conflict", "A conflict says what you observed that the archive "
                               "contradicts: it")
        checked = check_alternatives(alternatives, self.memory.limits)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            self.sessions.check_open(actor, session_id, within=tx)  # refused before any target is read
        stored = [self._stored_alternative(actor, index, alternative) for index, alternative in enumerate(checked)]
        snapshot = None
        if any(alternative.target.kind is TargetKind.EVIDENCE for alternative in checked):
            evidence = self.require_evidence()
            problems = evidence.snapshot_problems(actor)
            if problems:
                raise refusals.files_changed(problems)
            snapshot = evidence.snapshot(actor)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            session = self.sessions.check_open(actor, session_id, within=tx)
            repair_id = queries.insert_repair(tx, session_id=session_id, subject=session["subject"],
                                              conflict=str(described), alternatives=stored, snapshot=snapshot,
                                              proposer_id=actor.principal_id, proposer=actor.audit_name, at=at)
            row = queries.repair(tx, repair_id)
            assert row is not None
            targets = [item["target"] for item in stored]
            self.transition(tx, actor, row, Event.PROPOSED, Status.PROPOSED, at=at,
                            details={"alternatives": len(stored), "targets": targets})
        return self.mirror(actor, row)

    def _stored_alternative(self, actor: Actor, index: int, alternative: Alternative) -> dict[str, Any]:
        """The alternative as stored: its option id, target, rationale, and the target's complete current content
        beside the complete resulting one. The target must be at exactly the revision it was prepared against."""
        target = alternative.target
        where = f"alternatives[{index}]"
        current = self._current(actor, target.kind, target.name)
        if current["revision"] != target.revision:
            raise refusals.target_moved(where, target.name, current["revision"], target.revision)
        if target.kind is TargetKind.EVIDENCE and current["status"] != "active":
            raise Conflict(f"{where}: evidence unit {target.name!r} is {current['status']}, not active: only the "
                           "archive's active units are repaired; a human edits the others directly.",
                           name=target.name, status=current["status"])
        before = {key: current[key] for key in ("title", "body", "tags") if key in current}
        after: dict[str, Any] = {"title": alternative.title, "body": alternative.body}
        if target.kind is TargetKind.ENTRY:
            after["tags"] = before["tags"] if alternative.tags is None else list(alternative.tags)
        if after == before:
            raise InvalidInput(f"{where} changes nothing: its content is the target's current content.",
                               field=where)
        return {"option": option_id(index), "target": target.to_dict(), "rationale": alternative.rationale,
                "current": before, "result": after}

    def _current(self, actor: Actor, kind: TargetKind, name: Any) -> dict[str, Any]:
        if kind is TargetKind.ENTRY:
            entry = self.memory.read(actor, name)
            return {key: entry[key] for key in ("revision", "title", "body", "tags", "curated")}
        unit = self.require_evidence().current(actor, name)
        return {"revision": unit.revision, "title": unit.title, "body": unit.body, "status": unit.status,
                "active_revision": unit.active_revision}

    # Reading ---------------------------------------------------------------------------------------

    def show(self, actor: Actor, repair_id: int) -> dict[str, Any]:
        """Status, alternatives, decision, history and pending operations. Refreshes the target status first:
        a saved correction whose target changed since is ``superseded``."""
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = self.readable(tx, actor, repair_id)
            events, operations = queries.events(tx, repair_id), queries.operations(tx, repair_id)
        if row["status"] in (Status.ACTIVE, Status.PENDING_ACTIVATION) and actor.can(Permission.MEMORY_READ) \
                and self._refresh(actor, row):
            return self.mirror(actor, row)
        return views.full(row, events, operations)

    def list_repairs(self, actor: Actor, *, session: int | None = None, status: str | None = None
                     ) -> list[dict[str, Any]]:
        """Receipts, newest first, every one: the caller's proposals, or all of the workspace's for a session
        manager."""
        proposer = _listing_scope(actor, status)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = every_page(lambda after: queries.repairs_page(
                tx, proposer_id=proposer, session_id=session, status=status, after=after, newest_first=True,
                limit=LIST_LIMIT, contains=None), size=LIST_LIMIT)
        return [views.summary(row) for row in rows]

    def repairs_page(self, actor: Actor, *, status: str | None = None, session: int | None = None,
                     after: int | None = None, limit: int = 50, newest_first: bool = False, q: str | None = None
                     ) -> dict[str, Any]:
        """One page of what ``list_repairs`` lists (the same repairs for the same caller, each as it shows them),
        by id: oldest first, or ``newest_first``. ``q``: only repairs whose conflict or proposer contains it
        (case-insensitive). ``next``: the ``after`` that gives the next page (None: this is the last)."""
        proposer = _listing_scope(actor, status)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= LIST_LIMIT:
            raise InvalidInput(f"limit is from 1 to {LIST_LIMIT}.", field="limit")
        for field, value in (("after", after), ("session", session)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidInput(f"{field} is a number.", field=field)
        needle = check_filter(q)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = queries.repairs_page(tx, proposer_id=proposer, session_id=session, status=status, after=after,
                                        newest_first=newest_first, limit=limit + 1, contains=needle)
        items = [views.summary(row) for row in rows[:limit]]
        return {"items": items, "next": items[-1]["repair"] if len(rows) > limit else None}

    def proposed_summary(self, actor: Actor) -> dict[str, Any]:
        """How many repairs wait for a human choice (of those ``list_repairs`` lists for the caller) and when the
        oldest was proposed (None: none waits), counted in SQL."""
        proposer = _listing_scope(actor, Status.PROPOSED)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = queries.summary(tx, proposer_id=proposer, status=Status.PROPOSED.value)
        return {"count": int(row["count"]), "oldest_at": row["oldest_at"]}

    def of_session(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """A session's repairs as session_show lists them, newest first: ``repairs``, at most
        SESSION_REPAIRS_SHOWN (id, status, reformulation request and comment), and ``more``, whether older ones
        are left out (each stays readable by its id: repair_show)."""
        if not actor.can(Permission.SESSIONS_MANAGE) and not actor.can(Permission.REPAIRS_PROPOSE):
            return {"repairs": [], "more": False}
        page = self.repairs_page(actor, session=session_id, limit=SESSION_REPAIRS_SHOWN, newest_first=True)
        return {"repairs": [{key: item[key] for key in ("repair", "status", "reformulation_requested", "comment",
                                                        "published")} for item in page["items"]],
                "more": page["next"] is not None}

    def _refresh(self, actor: Actor, row: Row) -> bool:
        """Whether the target moved past the saved correction (the repair is then superseded)."""
        picked = views.chosen(row)
        assert picked is not None
        target = picked["target"]
        try:
            current: int | None = self._current(actor, TargetKind(target["kind"]), target["name"])["revision"]
        except NotFound:
            current = None  # the target was removed
        if current == row["applied_revision"]:
            return False
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            locked = queries.repair(tx, row["id"], lock=True)
            assert locked is not None
            if locked["status"] == row["status"] and locked["applied_revision"] == row["applied_revision"]:
                self.supersede(tx, actor, locked, target, at=iso_utc(self.clock()), current=current,
                               found_by="repair_show")
        return True

    # Human decisions -------------------------------------------------------------------------------

    def reject(self, actor: Actor, repair_id: int, comment: Any = None, reformulate: bool = False
               ) -> dict[str, Any]:
        """Decline every alternative (``rejected``); with ``reformulate``, ask the agent for a new proposal,
        saying why in ``comment`` (which the agent reads with repair_show and session_show)."""
        actor.require_human(Permission.REPAIRS_PROPOSE, "reject a repair or ask for a reformulation")
        said = check_text(comment, "comment", "A comment tells the agent what to change: it", required=reformulate)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            row = self.readable(tx, actor, repair_id, lock=True)
            if row["status"] != Status.PROPOSED:
                raise refusals.not_proposed(repair_id, row["status"])
            event = Event.REFORMULATION_REQUESTED if reformulate else Event.REJECTED
            self.transition(tx, actor, row, event, Status.REJECTED, at=iso_utc(self.clock()),
                            details={"comment": said} if said else {}, reformulation_requested=bool(reformulate),
                            comment=said, decided_by=actor.audit_name)
        return self.mirror(actor, row)

    def apply(self, actor: Actor, repair_id: int, option: Any, *, take_over: bool = False,
              continue_pending: bool = False) -> dict[str, Any]:
        """Apply the chosen option (an administrator with memory.manage or evidence.manage). An open session of
        another principal must be taken over first: ``take_over`` does it, recorded, in the transaction that
        records the decision, so a refused apply takes nothing over. A target whose revision moved since
        preparation makes the repair ``superseded``: nothing is written, and the answer says so.
        ``continue_pending``: an evidence correction is saved and activation left pending on purpose."""
        self._require_applier(actor)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = self.readable(tx, actor, repair_id)
        picked = next((item for item in row["alternatives"] if item["option"] == option), None)
        if picked is None:
            raise refusals.unknown_option(repair_id, option, [item["option"] for item in row["alternatives"]])
        kind = TargetKind(picked["target"]["kind"])
        actor.require_human(APPLIER[kind], "apply a repair to an entry" if kind is TargetKind.ENTRY
                            else "apply a repair to an evidence unit")
        if row["status"] != Status.PROPOSED:
            raise refusals.not_proposed(repair_id, row["status"])
        if kind is TargetKind.ENTRY:
            view = self._apply_entry(actor, row, picked, take_over=take_over)
        else:
            view = apply_evidence(self, actor, row, picked, take_over=take_over, continue_pending=continue_pending)
        return {**view, "written": view["status"] in (Status.ACTIVE, Status.PENDING_ACTIVATION)}

    def _apply_entry(self, actor: Actor, row: Row, picked: dict[str, Any], *, take_over: bool) -> dict[str, Any]:
        """The takeover (if asked), the curated revision, the repair's move to ``active`` and the receipt: one
        transaction."""
        target, result, repair_id = picked["target"], picked["result"], row["id"]
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            row = self.locked_for_decision(tx, actor, repair_id, take_over=take_over, at=at)
            reason = f"Archive repair {repair_id} ({picked['option']}): {picked['rationale']}"[:REASON_MAX]
            try:
                saved = self.memory.write_chosen(actor, target["name"], target["revision"], result["title"],
                                                 result["body"], result["tags"], reason, within=tx)
            except (Conflict, NotFound) as moved:  # refused before it wrote anything: the transaction goes on
                self.supersede(tx, actor, row, target, at=at, current=moved.details.get("current_revision"),
                               found_by="apply", chosen_option=picked["option"], decided_by=actor.audit_name)
            else:
                self.transition(tx, actor, row, Event.APPLIED, Status.ACTIVE, at=at,
                                details={"option": picked["option"], "target": target, "revision": saved["revision"],
                                         "curated": True, "operation": saved["operation"]},
                                chosen_option=picked["option"], applied_revision=saved["revision"],
                                decided_by=actor.audit_name)
        return self.mirror(actor, row)

    def retry(self, actor: Actor, repair_id: int, *, continue_pending: bool = False) -> dict[str, Any]:
        """Go on with an interrupted application from the receipt (an evidence correction still ``applying`` or
        ``pending_activation``), and run the repair's pending operations (its receipt file).
        ``continue_pending``: save the correction but leave its activation pending, on purpose."""
        self._require_applier(actor)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = self.readable(tx, actor, repair_id)
        if row["status"] == Status.PROPOSED:
            raise Conflict(f"Repair {repair_id} is proposed: there is nothing to retry; choose an option "
                           "(repair-apply) or reject it.", repair=repair_id, status=row["status"])
        picked = views.chosen(row)
        if picked is not None:
            actor.require_human(APPLIER[TargetKind(picked["target"]["kind"])], "retry a repair")
        if row["status"] in (Status.APPLYING, Status.PENDING_ACTIVATION):
            preflight(self, actor, row)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            locked = self.readable(tx, actor, repair_id, lock=True)
            self.transition(tx, actor, locked, Event.RETRIED, Status(locked["status"]), at=iso_utc(self.clock()),
                            details={"from": locked["status"]})
        if row["status"] in (Status.APPLYING, Status.PENDING_ACTIVATION):
            return publish(self, actor, repair_id, continue_pending=continue_pending)
        return self.mirror(actor, row)

    def continue_pending(self, actor: Actor, repair_id: int) -> dict[str, Any]:
        """Leave a saved evidence correction's activation pending on purpose: recorded, and never a success."""
        actor.require_human(Permission.EVIDENCE_MANAGE, "leave a repair's activation pending")
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            row = self.readable(tx, actor, repair_id, lock=True)
            if row["status"] != Status.PENDING_ACTIVATION:
                raise Conflict(f"Repair {repair_id} is {row['status']}, not pending_activation: there is no "
                               "activation to leave pending.", repair=repair_id, status=row["status"])
            self.transition(tx, actor, row, Event.ACTIVATION_DEFERRED, Status.PENDING_ACTIVATION,
                            at=iso_utc(self.clock()), details={"revision": row["applied_revision"]},
                            activation_deferred=True)
        return self.mirror(actor, row)

    # Steps shared with the evidence publication ----------------------------------------------------

    def locked_for_decision(self, tx: Tx, actor: Actor, repair_id: int, *, take_over: bool, at: str) -> Row:
        """The repair locked for the actor's decision: still proposed, in a session the actor may decide in (a
        closed one, or one the actor owns). Another principal's open session is refused, or with ``take_over``
        taken over here, in the decision's own transaction (``tx``), after the repair is locked and found still
        proposed: a decision refused then or later (the transaction rolls back) takes nothing over."""
        row = self.readable(tx, actor, repair_id, lock=True)
        if row["status"] != Status.PROPOSED:
            raise refusals.not_proposed(repair_id, row["status"])
        session = self.sessions.state(actor, row["session_id"], within=tx)
        if session["status"] != "closed" and session["owner_id"] != actor.principal_id:
            if not take_over:
                raise NotAllowed(f"Session {row['session_id']} belongs to {session['owner']}: take it over first "
                                 "(repair-apply --take-over, or armarius sessions takeover), so that the receipt "
                                 "names you.", session=row["session_id"], owner=session["owner"])
            self.sessions.take_over_within(tx, actor, row["session_id"], at=at)
        return row

    def supersede(self, tx: Tx, actor: Actor, row: Row, target: dict[str, Any], *, at: str, current: int | None,
                  found_by: str, found: dict[str, Any] | None = None, **changes: Any) -> None:
        """The target moved (or is gone): the repair is ``superseded``, and nothing is written to the target.
        ``found_by``: the step that found it; ``found``: what else it saw; ``changes``: columns to set too."""
        self.transition(tx, actor, row, Event.SUPERSEDED, Status.SUPERSEDED, at=at, details={
            "target": target, "applied_revision": row["applied_revision"], "current_revision": current,
            "found_by": found_by, **(found or {})}, **changes)

    def transition(self, tx: Tx, actor: Actor, row: Row, event: Event, status: Status, *, at: str,
                   details: dict[str, Any], **changes: Any) -> None:
        """A repair's move: its row, its event, the audit event ``repair.<event>`` with the same details, and the
        pending operation that mirrors the receipt."""
        repair_id = row["id"]
        queries.update_repair(tx, repair_id, at=at, status=status.value, **changes)
        seq = queries.append_event(tx, repair_id, event=event, status=status, actor=actor.audit_name,
                                   details=details, at=at)
        audit.append(tx, actor=actor.audit_name, action=f"repair.{event.value}", subject=str(repair_id),
                     details={"repair": repair_id, "session": row["session_id"], "status": status.value, **details})
        queries.insert_operation(tx, repair_id, kind=Operation.MIRROR_RECEIPT, payload={"seq": seq}, at=at)

    def mirror(self, actor: Actor, row: Row) -> dict[str, Any]:
        """Run the repair's pending operations: write its receipt file from the store. A failure is counted on
        the operations, which stay pending for a retry. The repair's view as the store now has it."""
        repair_id = row["id"]
        try:
            with writing_receipts(self.evidence_dir,
                                  receipt_folder(self.evidence_dir, actor.workspace, row["session_id"])) as folder:
                current, events, operations = self._read(actor, repair_id)
                pending = [operation for operation in operations if operation["done_at"] is None]
                if pending:
                    receipt = views.receipt(current, events, workspace=actor.workspace, subject=current["subject"])
                    write_receipt(folder, repair_id, canonical_json(receipt).encode("utf-8"))
        except (OSError, Conflict) as failure:  # Conflict: a link in the receipt's folders, never followed
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                queries.fail_operations(tx, [operation["id"] for operation in queries.operations(
                    tx, repair_id, open_only=True)], error=f"the receipt file could not be written "
                                                           f"({type(failure).__name__})")
            return views.full(*self._read(actor, repair_id))
        if pending:
            covered, at = events[-1]["seq"], iso_utc(self.clock())
            done = [operation["id"] for operation in pending if operation["payload"]["seq"] <= covered]
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                queries.finish_operations(tx, done, at=at)
            operations = [{**operation, "done_at": at} if operation["id"] in done else operation
                          for operation in operations]
        return views.full(current, events, operations)

    def _read(self, actor: Actor, repair_id: int) -> tuple[Row, list[Row], list[Row]]:
        """The repair, its events and its operations, read together."""
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = queries.repair(tx, repair_id)
            assert row is not None
            return row, queries.events(tx, repair_id), queries.operations(tx, repair_id)

    # Helpers ---------------------------------------------------------------------------------------

    def require_evidence(self) -> EvidenceService:
        if self.evidence is None:
            raise NotFound("This server has no evidence units.", field="kind")
        return self.evidence

    def readable(self, tx: Tx, actor: Actor, repair_id: int, *, lock: bool = False) -> Row:
        """The repair, if the caller proposed it or manages sessions; otherwise it does not exist for them."""
        row = queries.repair(tx, repair_id, lock=lock)
        if row is None or (row["proposer_id"] != actor.principal_id and not actor.can(Permission.SESSIONS_MANAGE)):
            raise refusals.not_found(repair_id)
        return row

    def _require_applier(self, actor: Actor) -> None:
        """Human authority first: an agent is refused here whatever else it sends."""
        if not actor.can(Permission.MEMORY_MANAGE) and not actor.can(Permission.EVIDENCE_MANAGE):
            actor.require_human(Permission.MEMORY_MANAGE, "apply a repair")



def _listing_scope(actor: Actor, status: str | None) -> int | None:
    """Whose repairs a listing shows: every one of the workspace's to a session manager (None), otherwise the
    caller's own (who needs repairs.propose)."""
    if not actor.can(Permission.SESSIONS_MANAGE):
        actor.require(Permission.REPAIRS_PROPOSE)
    if status is not None and status not in set(Status):
        raise InvalidInput(f"status is one of {', '.join(Status)}.", field="status")
    return None if actor.can(Permission.SESSIONS_MANAGE) else actor.principal_id

