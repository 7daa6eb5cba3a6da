"""Session use cases: open, query (the controller), block, resume, take over, raise the budget, close.

The controller (:meth:`SessionService.query`) runs one project query inside a session in three steps:

1. **Reserve** (one transaction): the session is the caller's, open, and has budget left; one unit
   is reserved for this query (or the unit a failed source left held is taken up again).
2. **Run**: the research service answers and builds the capture; nothing is written by it. The
   capture file, a mirror of the store, is written under the session's folder (content-addressed,
   so writing it again is harmless).
3. **Commit** (one transaction): the capture row, the evidence record, the consumed reservation
   and the ``research.query`` audit event, together or not at all.

A failed source instead blocks the session in one transaction (``blocked/research_unavailable``,
the reservation held, the resume state saved in a blocking checkpoint); an invalid request releases
the reservation and counts towards ``invalid_request_limit``, after which the session blocks as
``blocked/invalid_requests``. A reservation whose holder died (a crash between steps 1 and 3) is
released the next time anyone touches the session: the store, never memory, is authoritative.
Only a human resumes a blocked session, and only after ``retry_not_before``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Permission
from armarius.canonical import canonical_json
from armarius.errors import (
    ArmariusError,
    BudgetExhausted,
    Conflict,
    InvalidInput,
    NotAllowed,
    NotFound,
    ResearchUnavailable,
    SessionBlocked,
    SessionClosed,
)
from armarius.research.captures import Capture, verify_capture, write_capture
from armarius.research.service import Answer, ResearchService, validate_query
from armarius.sessions import queries
from armarius.sessions.holders import current_holder, is_gone
from armarius.sessions.model import (
    LEASE_MARGIN,
    Event,
    Reason,
    Reservation,
    SessionLimits,
    Status,
    check_note,
    check_subject,
)
from armarius.store import Database, Row, Tx, iso_utc

#: How many of the latest evidence records a session's summary lists.
RECENT_EVIDENCE = 10
#: The most sessions one listing returns.
LIST_LIMIT = 200
#: Refusals caused by the request itself: they count towards the invalid-request limit.
_INVALID = (InvalidInput, NotFound)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class SessionService:
    database: Database
    research: ResearchService | None
    #: The evidence folder; a session's capture files are mirrored under ``<workspace>/sessions/<id>/``.
    evidence_dir: Path
    limits: SessionLimits = field(default_factory=SessionLimits)
    clock: Callable[[], datetime] = _now

    # Opening and reading --------------------------------------------------------------------------

    def open(self, actor: Actor, subject: Any, budget: int | None = None) -> dict[str, Any]:
        """Open a session owned by the caller, with the default budget or one up to the maximum."""
        actor.require(Permission.RESEARCH_QUERY)
        subject = check_subject(subject)
        granted = self.limits.opening_budget(budget)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            session_id = queries.insert_session(tx, owner_id=actor.principal_id, owner=actor.audit_name,
                                                subject=subject, budget=granted, at=at)
            queries.append_checkpoint(tx, session_id, event=Event.OPENED, status=Status.OPEN, actor=actor.audit_name,
                                      details={"budget": granted}, at=at)
            audit.append(tx, actor=actor.audit_name, action="session.opened", subject=str(session_id),
                         details={"session": session_id, "budget": granted})
            return self._view(tx, self._row(tx, session_id))

    def show(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """Status, budget, an evidence summary and the latest records; releases interrupted reservations."""
        self._sweep(actor, session_id)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = self._readable(tx, actor, session_id)
            return self._view(tx, row)

    def history(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """Everything about a session for review: the summary, every checkpoint and every evidence record."""
        self._sweep(actor, session_id)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = self._readable(tx, actor, session_id)
            view = self._view(tx, row)
            view["checkpoints"] = queries.checkpoints(tx, session_id)
            view["evidence"]["records_list"] = [_record_view(record) for record in queries.records(tx, session_id)]
        return view

    def list_sessions(self, actor: Actor, *, status: str | None = None, everyone: bool = False) -> list[dict[str, Any]]:
        """The caller's sessions, newest first; with ``everyone``, a session manager sees all of the workspace."""
        if not actor.can(Permission.SESSIONS_MANAGE):
            actor.require(Permission.RESEARCH_QUERY)
        if status is not None and status not in set(Status):
            raise InvalidInput(f"status is one of {', '.join(Status)}.", field="status")
        owner = None if everyone and actor.can(Permission.SESSIONS_MANAGE) else actor.principal_id
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = queries.sessions(tx, owner_id=owner, status=status, limit=LIST_LIMIT)
        return [_summary(row) for row in rows]

    # The controller -------------------------------------------------------------------------------

    def query(self, actor: Actor, session_id: int, arguments: Any) -> dict[str, Any]:
        """Run one project query in a session and record its answer as evidence (see the module doc)."""
        actor.require(Permission.RESEARCH_QUERY)
        research = self._research()
        try:
            request = validate_query(arguments)
        except InvalidInput as refusal:
            self._count_invalid(actor, session_id, refusal)
            raise
        reservation = self._reserve(actor, session_id)
        try:
            answer = research.run(request)
        except ResearchUnavailable as failure:
            raise self._block_unavailable(actor, session_id, reservation, request, failure) from None
        except _INVALID as refusal:
            self._count_invalid(actor, session_id, refusal, reservation=reservation)
            raise
        except BaseException:
            self._release(actor, reservation)
            raise
        try:
            write_capture(self.session_folder(actor.workspace, session_id), answer.capture)
        except BaseException:
            self._release(actor, reservation)
            raise
        return self._commit(actor, session_id, reservation, answer)

    def _reserve(self, actor: Actor, session_id: int) -> int:
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            # Losing this commit to a database crash loses only the reservation; the evidence commit that
            # depends on it is synchronous and so makes it durable first.
            tx.defer_flush()
            now = self.clock()
            row = self._queryable(tx, actor, session_id)
            live = self._release_interrupted(tx, actor, session_id, now)
            lease = iso_utc(now + self._lease())
            held = next((reservation["id"] for reservation in live if reservation["state"] == Reservation.HELD), None)
            if held is not None:  # the unit a failed source left held is the retry's
                queries.renew(tx, held, actor=actor.audit_name, holder=current_holder(), lease_until=lease)
                return int(held)
            if row["used"] + len(live) >= row["budget"]:
                raise _exhausted(row, len(live))
            return queries.insert_reservation(tx, session_id, actor=actor.audit_name, holder=current_holder(),
                                              lease_until=lease, at=iso_utc(now))

    def _commit(self, actor: Actor, session_id: int, reservation: int, answer: Answer) -> dict[str, Any]:
        capture = answer.capture
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            row = self._row(tx, session_id, lock=True)
            if not queries.settle(tx, reservation, to=Reservation.CONSUMED, at=at):
                # Given back meanwhile: the session closed, or the query outlived its lease. In the second case
                # the answer still counts if the budget has room for it.
                if row["status"] == Status.CLOSED:
                    raise _closed(session_id)
                live = len(queries.live_reservations(tx, session_id))
                if row["used"] + live >= row["budget"]:
                    raise _exhausted(row, live)
                if not queries.settle(tx, reservation, to=Reservation.CONSUMED, at=at, only_from=Reservation.RELEASED):
                    queries.insert_reservation(tx, session_id, actor=actor.audit_name, holder=current_holder(),
                                               lease_until=at, at=at, state=Reservation.CONSUMED)
            new = queries.insert_capture(tx, capture.id, capture.content.decode("utf-8"), at=at)
            seq, repeat_of = queries.next_record(tx, session_id, capture.id)
            queries.insert_record(tx, session_id, seq=seq, capture_id=capture.id, request=answer.request,
                                  principal_id=actor.principal_id, actor=actor.audit_name, repeat_of=repeat_of, at=at)
            queries.update_session(tx, session_id, at=at, used=row["used"] + 1, invalid_streak=0)
            pin: dict[str, Any] = {key: answer.origin[key] for key in ("commit", "snapshot") if key in answer.origin}
            subject = answer.origin.get("source") or answer.origin.get("database") or "databases"
            audit.append(tx, actor=actor.audit_name, action="research.query", subject=subject, details={
                "session": session_id, "kind": answer.kind, "capture": capture.id, "evidence": seq, **pin,
                "new": new, **({"repeat_of": repeat_of} if repeat_of is not None else {}),
            })
            left = row["budget"] - row["used"] - 1 - len(queries.live_reservations(tx, session_id))
        return {"session": session_id, "evidence": seq, "repeat_of": repeat_of, "budget_left": left, **answer.view()}

    def _count_invalid(self, actor: Actor, session_id: int, refusal: ArmariusError,
                       reservation: int | None = None) -> None:
        """Release the reservation (if any) and count the refusal; at the limit the session blocks.
        The refusal itself is raised by the caller; its details say how many in a row there were."""
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            if reservation is None:
                row = self._queryable(tx, actor, session_id)
            else:  # the query was admitted; the session may have changed while it ran
                row = self._row(tx, session_id, lock=True)
                queries.settle(tx, reservation, to=Reservation.RELEASED, at=at)
                if row["status"] != Status.OPEN:
                    return
            streak = row["invalid_streak"] + 1
            limit = self.limits.invalid_request_limit
            count = {"in_a_row": streak, "limit": limit, "session_blocked": streak >= limit}
            refusal.details.update(session=session_id, invalid_requests=count)
            if streak < limit:
                queries.update_session(tx, session_id, at=at, invalid_streak=streak)
                return
            resume_state = {"status": Status.OPEN.value, "reservation": None}
            self._block(tx, actor, row, Reason.INVALID_REQUESTS, resume_state, at=at, retry_not_before=None,
                        details={"invalid_requests": streak, "last": refusal.code}, invalid_streak=streak)
        refusal.message += (f" That makes {limit} invalid requests in a row: session {session_id} is now blocked "
                            "until a human resumes it.")

    def _block_unavailable(self, actor: Actor, session_id: int, reservation: int, request: dict[str, Any],
                           failure: ResearchUnavailable) -> ArmariusError:
        """Block the session for a failed source, keeping the reservation for the retry after a resume."""
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            now = self.clock()
            at = iso_utc(now)
            row = self._row(tx, session_id, lock=True)
            if row["status"] == Status.CLOSED:  # closed while the query ran: its reservation is released
                return _closed(session_id)
            kept = queries.settle(tx, reservation, to=Reservation.HELD, at=at)
            retry = iso_utc(now + self.limits.retry_after)
            resume_state = {"status": Status.OPEN.value, "reservation": reservation if kept else None,
                            "request": request}
            self._block(tx, actor, row, Reason.RESEARCH_UNAVAILABLE, resume_state, at=at, retry_not_before=retry,
                        details={"request_kind": request["kind"], "cause": failure.to_dict(for_agent=False)})
        return SessionBlocked(
            f"{failure.message} Session {session_id} is now blocked (research_unavailable); its budget for this "
            f"query is kept. A human must resume it, not before {retry}.",
            agent_hint="Tell the user what failed; there is no tool to resume a session.",
            session=session_id, reason=Reason.RESEARCH_UNAVAILABLE.value, retry_not_before=retry,
            cause=failure.to_dict(for_agent=False),
        )

    def _block(self, tx: Tx, actor: Actor, row: Row, reason: Reason, resume_state: dict[str, Any], *, at: str,
               retry_not_before: str | None, details: dict[str, Any], **changes: Any) -> None:
        session_id = row["id"]
        queries.update_session(tx, session_id, at=at, status=Status.BLOCKED.value, reason=reason.value,
                               resume_state=canonical_json(resume_state), retry_not_before=retry_not_before, **changes)
        queries.append_checkpoint(tx, session_id, event=Event.BLOCKED, status=Status.BLOCKED, reason=reason,
                                  resume_state=resume_state, actor=actor.audit_name,
                                  details={**details, "retry_not_before": retry_not_before}, at=at)
        audit.append(tx, actor=actor.audit_name, action="session.blocked", subject=str(session_id),
                     details={"session": session_id, "reason": reason.value, "retry_not_before": retry_not_before})

    def _release(self, actor: Actor, reservation: int) -> None:
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            queries.settle(tx, reservation, to=Reservation.RELEASED, at=iso_utc(self.clock()))

    # Human decisions ------------------------------------------------------------------------------

    def resume(self, actor: Actor, session_id: int, note: str | None = None) -> dict[str, Any]:
        """Move a blocked session into the resume state of its last blocking checkpoint (humans only)."""
        _require_human(actor, Permission.SESSIONS_MANAGE, "resume a session")
        note = check_note(note)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            now = self.clock()
            row = self._row(tx, session_id, lock=True)
            if row["status"] != Status.BLOCKED:
                raise Conflict(f"Session {session_id} is {row['status']}, not blocked: there is nothing to resume.",
                               session=session_id, status=row["status"])
            if row["retry_not_before"] is not None and now < _parse(row["retry_not_before"]):
                wait = max(1, int((_parse(row["retry_not_before"]) - now).total_seconds() + 0.999))
                raise Conflict(f"Session {session_id} may be resumed from {row['retry_not_before']}, in {wait} s.",
                               session=session_id, retry_not_before=row["retry_not_before"], wait_seconds=wait)
            blocking = queries.last_blocking_checkpoint(tx, session_id)
            assert blocking is not None
            assert blocking["resume_state"] is not None
            state = blocking["resume_state"]
            at = iso_utc(now)
            queries.update_session(tx, session_id, at=at, status=state["status"], reason=None, resume_state=None,
                                   retry_not_before=None, invalid_streak=0)
            queries.append_checkpoint(tx, session_id, event=Event.RESUMED, status=state["status"],
                                      actor=actor.audit_name, at=at,
                                      details={"from_checkpoint": blocking["seq"], "reason": row["reason"],
                                               **({"note": note} if note else {})})
            audit.append(tx, actor=actor.audit_name, action="session.resumed", subject=str(session_id),
                         details={"session": session_id, "reason": row["reason"], "checkpoint": blocking["seq"]})
            return self._view(tx, self._row(tx, session_id))

    def take_over(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """An administrator makes another principal's session their own, so that what follows names them."""
        _require_human(actor, Permission.SESSIONS_TAKEOVER, "take over a session")
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            row = self._row(tx, session_id, lock=True)
            if row["status"] == Status.CLOSED:
                raise _closed(session_id)
            if row["owner_id"] != actor.principal_id:
                queries.update_session(tx, session_id, at=at, owner_id=actor.principal_id, owner=actor.audit_name)
                queries.append_checkpoint(tx, session_id, event=Event.TAKEN_OVER, status=row["status"],
                                          reason=row["reason"], actor=actor.audit_name, at=at,
                                          details={"from": row["owner"], "to": actor.audit_name})
                audit.append(tx, actor=actor.audit_name, action="session.taken_over", subject=str(session_id),
                             details={"session": session_id, "from": row["owner"], "to": actor.audit_name})
            return self._view(tx, self._row(tx, session_id))

    def raise_budget(self, actor: Actor, session_id: int, budget: int) -> dict[str, Any]:
        """A human gives a session more actions (up to the ceiling); never fewer."""
        _require_human(actor, Permission.SESSIONS_MANAGE, "raise a session's budget")
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            row = self._row(tx, session_id, lock=True)
            if row["status"] == Status.CLOSED:
                raise _closed(session_id)
            if not row["budget"] < budget <= self.limits.ceiling:
                raise InvalidInput(f"The new budget must be above the current {row['budget']} and at most "
                                   f"{self.limits.ceiling}.", field="budget", budget=row["budget"])
            queries.update_session(tx, session_id, at=at, budget=budget)
            queries.append_checkpoint(tx, session_id, event=Event.BUDGET_RAISED, status=row["status"],
                                      reason=row["reason"], actor=actor.audit_name, at=at,
                                      details={"from": row["budget"], "to": budget})
            audit.append(tx, actor=actor.audit_name, action="session.budget_raised", subject=str(session_id),
                         details={"session": session_id, "from": row["budget"], "to": budget})
            return self._view(tx, self._row(tx, session_id))

    def close(self, actor: Actor, session_id: int, note: str | None = None) -> dict[str, Any]:
        """The owner or a session manager closes a session: it stays readable and refuses queries."""
        note = check_note(note)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            row = self._row(tx, session_id, lock=True)
            if row["owner_id"] != actor.principal_id and not actor.can(Permission.SESSIONS_MANAGE):
                raise _not_found(session_id)
            if row["status"] != Status.CLOSED:
                released = queries.release_all(tx, session_id, at=at)
                queries.update_session(tx, session_id, at=at, status=Status.CLOSED.value, reason=None,
                                       resume_state=None, retry_not_before=None)
                queries.append_checkpoint(tx, session_id, event=Event.CLOSED, status=Status.CLOSED,
                                          actor=actor.audit_name, at=at,
                                          details={"released": released, **({"note": note} if note else {})})
                audit.append(tx, actor=actor.audit_name, action="session.closed", subject=str(session_id),
                             details={"session": session_id, "released": released})
            return self._view(tx, self._row(tx, session_id))

    # Files and verification (no git or database server needed) ------------------------------------

    def session_folder(self, workspace: str, session_id: int) -> Path:
        return self.evidence_dir / workspace / "sessions" / str(session_id) / "captures"

    def verify(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """Check the session's capture files against their hashes and the store, and every evidence record
        against its capture. Reads only the store and the folder."""
        folder = self.session_folder(actor.workspace, session_id)
        problems: list[dict[str, Any]] = []
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = self._readable(tx, actor, session_id)
            records = queries.records(tx, session_id)
            stored = {capture["capture_id"]: capture["content"] for capture in queries.captures_of(tx, session_id)}
            consumed = queries.consumed_count(tx, session_id)
            running = [reservation for reservation in queries.live_reservations(tx, session_id)
                       if reservation["state"] == Reservation.RESERVED]
        for record in records:
            problems += _record_problems(record, stored.get(record["capture_id"]))
        problems += _file_problems(folder, stored)
        if not row["used"] == consumed == len(records):
            problems.append({"problem": "budget_mismatch", "used": row["used"], "consumed_reservations": consumed,
                             "evidence_records": len(records)})
        now = self.clock()
        problems += [{"problem": "interrupted_reservation", "reservation": reservation["id"]}
                     for reservation in running if _interrupted(reservation, now)]
        return {"session": session_id, "folder": str(folder), "evidence_records": len(records),
                "captures": len(stored), "ok": not problems, "problems": problems}

    def rebuild_files(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """Write the session's capture files again from the store: missing and altered ones are restored
        (a human's act, recorded in the audit log). Files the store does not know are reported, not removed."""
        _require_human(actor, Permission.SESSIONS_MANAGE, "rebuild a session's capture files")
        folder = self.session_folder(actor.workspace, session_id)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            self._readable(tx, actor, session_id)
            stored = queries.captures_of(tx, session_id)
        restored, known = [], {capture["capture_id"] for capture in stored}
        for capture in stored:
            if capture["content"] is None:
                continue
            content = capture["content"].encode("utf-8")
            path = folder / f"{capture['capture_id']}.json"
            if not path.is_file() or path.read_bytes() != content:
                write_capture(folder, Capture(capture["capture_id"], content))
                restored.append(capture["capture_id"])
        extra = sorted(path.name for path in folder.glob("*.json") if path.name.removesuffix(".json") not in known)
        if restored:
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                audit.append(tx, actor=actor.audit_name, action="session.files_rebuilt", subject=str(session_id),
                             details={"session": session_id, "restored": restored})
        return {"session": session_id, "folder": str(folder), "captures": len(stored), "restored": restored,
                "extra_files": extra}

    # Helpers --------------------------------------------------------------------------------------

    def _research(self) -> ResearchService:
        if self.research is None:
            raise NotFound("No research sources or databases are configured on this server.", field="session")
        return self.research

    def _lease(self) -> timedelta:
        longest = 0.0 if self.research is None else self.research.longest_timeout
        return timedelta(seconds=longest) + LEASE_MARGIN

    def _row(self, tx: Tx, session_id: int, *, lock: bool = False) -> Row:
        row = queries.session(tx, session_id, lock=lock)
        if row is None:
            raise _not_found(session_id)
        return row

    def _readable(self, tx: Tx, actor: Actor, session_id: int) -> Row:
        """The session, if the caller owns it or manages sessions; otherwise it does not exist for them."""
        row = queries.session_with_reservations(tx, session_id)
        if row is None or (row["owner_id"] != actor.principal_id and not actor.can(Permission.SESSIONS_MANAGE)):
            raise _not_found(session_id)
        return row

    def _queryable(self, tx: Tx, actor: Actor, session_id: int) -> Row:
        """The session locked for a query: the caller's own, and open."""
        row = self._row(tx, session_id, lock=True)
        if row["owner_id"] != actor.principal_id:
            if actor.can(Permission.SESSIONS_TAKEOVER):
                raise NotAllowed(f"Session {session_id} belongs to {row['owner']}: take it over first "
                                 "(armarius sessions takeover), so that what you do is recorded as yours.",
                                 session=session_id, owner=row["owner"])
            raise _not_found(session_id)
        if row["status"] == Status.CLOSED:
            raise _closed(session_id)
        if row["status"] == Status.BLOCKED:
            raise _blocked(row)
        return row

    def _sweep(self, actor: Actor, session_id: int) -> None:
        """Release reservations whose holder is gone, before anything reads the budget."""
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            live = queries.live_reservations(tx, session_id)
        now = self.clock()
        if any(_interrupted(reservation, now) for reservation in live):
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                if queries.session(tx, session_id, lock=True) is not None:
                    self._release_interrupted(tx, actor, session_id, now)

    def _release_interrupted(self, tx: Tx, actor: Actor, session_id: int, now: datetime) -> list[Row]:
        """Release the running reservations whose holder is gone; the live reservations that remain."""
        at, live, released = iso_utc(now), [], []
        for reservation in queries.live_reservations(tx, session_id):
            if (reservation["state"] == Reservation.RESERVED and _interrupted(reservation, now)
                    and queries.settle(tx, reservation["id"], to=Reservation.RELEASED, at=at)):
                released.append(reservation["id"])
            else:
                live.append(reservation)
        if released:
            audit.append(tx, actor=actor.audit_name, action="session.reservations_released", subject=str(session_id),
                         details={"session": session_id, "reservations": released, "why": "interrupted"})
        return live

    def _view(self, tx: Tx, row: Row) -> dict[str, Any]:
        session_id = row["id"]
        if "reserved" not in row:
            refreshed = queries.session_with_reservations(tx, session_id)
            assert refreshed is not None
            row = refreshed
        summary = queries.evidence_summary(tx, session_id)
        view = _summary(row)
        view["evidence"] = {
            "records": sum(item["records"] for item in summary),
            "repeats": sum(item["repeats"] for item in summary),
            "by_kind": {item["request_kind"]: item["records"] for item in summary},
            "latest": [_record_view(record) for record in queries.records(tx, session_id, latest=RECENT_EVIDENCE)],
        }
        view["next_step"] = _next_step(row)
        return view


def _summary(row: Row) -> dict[str, Any]:
    reserved, held = int(row["reserved"]), int(row["held"])
    view: dict[str, Any] = {
        "session": row["id"], "subject": row["subject"], "owner": row["owner"], "status": row["status"],
        "budget": {"total": row["budget"], "used": row["used"], "running": reserved, "held": held,
                   "left": row["budget"] - row["used"] - reserved - held},
        "created_at": row["created_at"], "updated_at": row["updated_at"],
    }
    if row["status"] == Status.BLOCKED:
        view.update(reason=row["reason"], retry_not_before=row["retry_not_before"],
                    resume_state=json.loads(row["resume_state"]))
    return view


def _next_step(row: Row) -> str:
    if row["status"] == Status.OPEN:
        return "Investigate with project_query(session, arguments); each query costs one action of budget."
    if row["status"] == Status.BLOCKED:
        return ("Blocked: a human must resume it (armarius sessions resume "
                f"{row['id']}){' from ' + row['retry_not_before'] if row['retry_not_before'] else ''}.")
    return "Closed: its evidence stays readable; open a new session for new questions."


def _record_view(record: Row) -> dict[str, Any]:
    return {"seq": record["seq"], "kind": record["request_kind"], "capture": record["capture_id"],
            "repeat_of": record["repeat_of"], "actor": record["actor"], "at": record["created_at"]}


def _record_problems(record: Row, content: str | None) -> list[dict[str, Any]]:
    where = {"evidence": record["seq"], "capture": record["capture_id"]}
    if content is None:
        return [{"problem": "record_without_capture", **where}]
    if hashlib.sha256(content.encode("utf-8")).hexdigest() != record["capture_id"]:
        return [{"problem": "capture_altered", **where}]
    captured = json.loads(content)["request"]
    if canonical_json(captured) != record["request"] or captured["kind"] != record["request_kind"]:
        return [{"problem": "request_mismatch", **where}]
    return []


def _file_problems(folder: Path, stored: dict[str, str | None]) -> list[dict[str, Any]]:
    problems: list[dict[str, Any]] = []
    present = {path.name.removesuffix(".json"): path for path in folder.glob("*.json")} if folder.is_dir() else {}
    for capture_id, path in sorted(present.items()):
        if capture_id not in stored:
            problems.append({"problem": "extra_file", "file": path.name})
        elif not verify_capture(path) or (stored[capture_id] or "").encode("utf-8") != path.read_bytes():
            problems.append({"problem": "modified_file", "file": path.name})
    problems += [{"problem": "missing_file", "file": f"{capture_id}.json"}
                 for capture_id in sorted(set(stored) - set(present))]
    return problems


def _interrupted(reservation: Row, now: datetime) -> bool:
    return is_gone(reservation["holder"]) or _parse(reservation["lease_until"]) <= now


def _parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


def _require_human(actor: Actor, permission: Permission, what: str) -> None:
    """Human authority: agents are refused here even if a surface let the call through."""
    if actor.kind is not Kind.HUMAN:
        raise NotAllowed(f"Only a human may {what}.", permission=permission.value)
    actor.require(permission)


def _not_found(session_id: int) -> NotFound:
    return NotFound(f"You have no session {session_id} in this workspace.", agent_hint="sessions lists yours.",
                    session=session_id)


def _closed(session_id: int) -> SessionClosed:
    return SessionClosed(f"Session {session_id} is closed: its evidence stays readable, it takes no more queries.",
                         agent_hint="Open a new session with session_open for a new question.", session=session_id)


def _blocked(row: Row) -> SessionBlocked:
    retry = row["retry_not_before"]
    return SessionBlocked(
        f"Session {row['id']} is blocked ({row['reason']}): a human must resume it"
        f"{', not before ' + retry if retry else ''}.",
        agent_hint="Tell the user; agents cannot resume a session.",
        session=row["id"], reason=row["reason"], retry_not_before=retry,
    )


def _exhausted(row: Row, running: int) -> BudgetExhausted:
    return BudgetExhausted(
        f"Session {row['id']} has used its budget of {row['budget']} actions"
        f"{f' ({running} running)' if running else ''}. Ask a human to raise it, or close the session.",
        agent_hint="Summarize what you found so far for the user.",
        session=row["id"], budget=row["budget"], used=row["used"], running=running,
    )
