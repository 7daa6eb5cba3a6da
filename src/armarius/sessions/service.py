"""Session use cases: open, query (the controller), block, resume, take over, raise the budget, close.

The controller (:meth:`SessionService.query`) runs one project query inside a session in three steps:

1. **Reserve** (one transaction): the session is the caller's, open, and has budget left; one unit
   is reserved for this query (or the unit a failed source left held is taken up again); one
   statement where nothing needs a closer look. Its commit does not wait for the disk: the query's
   own commit, which does, makes it durable too (a database crash before then loses both).
2. **Run**: the research service answers and builds the capture; nothing is written by it.
3. **Commit** (one transaction): the capture row, the evidence record, the consumed reservation
   and the ``research.query`` audit event, together or not at all. The capture file, a mirror of
   the store, is written under the session's folder inside it, before its COMMIT (content-addressed,
   so writing it again is harmless).

A failed source instead blocks the session in one transaction (``blocked/research_unavailable``,
the reservation held, the resume state saved in a blocking checkpoint); an invalid request releases
the reservation and counts towards ``invalid_request_limit``, after which the session blocks as
``blocked/invalid_requests``. A reservation whose holder died (a crash between steps 1 and 3) is
released the next time anyone touches the session: the store, never memory, is authoritative.
Only a human resumes a blocked session, and only after ``retry_not_before``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from armarius import files
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.canonical import canonical_json
from armarius.errors import (
    ArmariusError,
    Conflict,
    InvalidInput,
    NotAllowed,
    NotFound,
    ResearchUnavailable,
    SessionBlocked,
)
from armarius.research.captures import Capture, SpareFiles, capture_digest, write_capture
from armarius.research.model import EnrichmentConfig
from armarius.research.service import Answer, ResearchService, validate_query
from armarius.sessions import queries, refusals, views
from armarius.sessions.enrichment import Looked, Walk, check_inputs, compact
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
from armarius.store import Database, Row, Tx, every_page, iso_utc
from armarius.validation import check_filter

#: How many of the latest evidence records a session's summary lists.
RECENT_EVIDENCE = 10
#: The most sessions one page holds (a listing reads them a page at a time).
LIST_LIMIT = 200
#: Sessions a page of :meth:`SessionService.sessions_page` unless the caller asks for another number.
PAGE_SIZE = 50
#: A capture's id: the SHA-256 of its content.
CAPTURE_ID = re.compile("[0-9a-f]{64}")
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
    #: Empty files made ahead for the capture files (``<evidence>/.spare``: no workspace is named so).
    _spares: SpareFiles = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._spares = SpareFiles(self.evidence_dir / ".spare", root=self.evidence_dir)

    def shutdown(self) -> None:
        """Stop making spare files (on the application's close)."""
        self._spares.close()

    # Opening and reading --------------------------------------------------------------------------

    def open(self, actor: Actor, subject: Any, budget: int | None = None, inputs: Any = None) -> dict[str, Any]:
        """Open a session owned by the caller, with the default budget or one up to the maximum. With
        ``inputs`` (entity ids), enrichment resolves them into facts before the session is handed over."""
        actor.require(Permission.RESEARCH_QUERY)
        subject = check_subject(subject)
        granted = self.limits.opening_budget(budget)
        checked = None if inputs is None else check_inputs(inputs, self._enrichment_config())
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            session_id = queries.insert_session(tx, owner_id=actor.principal_id, owner=actor.audit_name,
                                                subject=subject, budget=granted, at=at)
            _transition(tx, actor, session_id, Event.OPENED, status=Status.OPEN, details={"budget": granted}, at=at)
            if checked is not None:
                self._new_inputs(tx, actor, session_id, 1, checked, at)
        if checked is not None:
            self._enrich_pending(actor, session_id)
        return self.show(actor, session_id)

    def enrich(self, actor: Actor, session_id: int, inputs: Any) -> dict[str, Any]:
        """A human gives a session a new revision of its inputs, which enrichment then resolves; earlier
        revisions and their facts stay as they were."""
        actor.require_human(Permission.SESSIONS_MANAGE, "give a session new inputs")
        checked = check_inputs(inputs, self._enrichment_config())
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            row = self._not_closed(tx, session_id)
            self._new_inputs(tx, actor, session_id, row["inputs_revision"] + 1, checked, iso_utc(self.clock()))
        self._enrich_pending(actor, session_id)
        return self.show(actor, session_id)

    def show(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """Status, budget, an evidence summary and the latest records; releases interrupted reservations."""
        self._sweep(actor, session_id)  # only for a caller who may read the session
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
            view["evidence"]["records_list"] = [views.record_view(record) for record in queries.records(tx, session_id)]
            view["fact_revisions"] = {revision: queries.facts(tx, session_id, revision)
                                      for revision in range(1, row["enriched_revision"] + 1)}
        return view

    def list_sessions(self, actor: Actor, *, status: str | None = None, everyone: bool = False) -> list[dict[str, Any]]:
        """The caller's sessions, newest first, every one; with ``everyone``, a session manager sees all of the
        workspace (agents page through theirs: :meth:`sessions_page`)."""
        owner = _listing_owner(actor, status, everyone)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = every_page(lambda after: queries.sessions_page(
                tx, owner_id=owner, status=status, after=after, newest_first=True, limit=LIST_LIMIT, contains=None),
                size=LIST_LIMIT)
        return [views.summary(row) for row in rows]

    def sessions_page(self, actor: Actor, *, status: str | None = None, everyone: bool = False,
                      after: int | None = None, limit: int = PAGE_SIZE, newest_first: bool = False,
                      q: str | None = None
                      ) -> dict[str, Any]:
        """One page of what ``list_sessions`` lists (the same sessions for the same caller, each as it shows them,
        a blocked one with ``blocked_at`` too), by id: oldest first, or ``newest_first``. ``q``: only sessions
        whose subject or owner contains it (case-insensitive). ``next``: the ``after`` that gives the next page
        (None: this is the last)."""
        owner = _listing_owner(actor, status, everyone)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= LIST_LIMIT:
            raise InvalidInput(f"limit is from 1 to {LIST_LIMIT}.", field="limit")
        if after is not None and (not isinstance(after, int) or isinstance(after, bool)):
            raise InvalidInput("after is the last session of the previous page (its next).", field="after")
        needle = check_filter(q)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = queries.sessions_page(tx, owner_id=owner, status=status, after=after, newest_first=newest_first,
                                         limit=limit + 1, contains=needle)
            blocked = queries.blocked_at(tx, [row["id"] for row in rows[:limit] if row["status"] == Status.BLOCKED])
        items = [views.summary(row) for row in rows[:limit]]
        for item in items:
            if item["status"] == Status.BLOCKED:
                item["blocked_at"] = blocked.get(item["session"])
        return {"items": items, "next": items[-1]["session"] if len(rows) > limit else None}

    def blocked_summary(self, actor: Actor, *, everyone: bool = False) -> dict[str, Any]:
        """How many of the sessions ``list_sessions`` lists are blocked and when the one blocked longest was
        blocked (None: none is), counted in SQL."""
        owner = _listing_owner(actor, Status.BLOCKED, everyone)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = queries.blocked_summary(tx, owner_id=owner)
        return {"count": int(row["count"]), "oldest_at": row["oldest_at"]}

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
        try:
            reservation = self._reserve(actor, session_id)
        except _EnrichmentPending:  # the session is enriched before the agent's first query is answered
            self._enrich_pending(actor, session_id)
            reservation = self._reserve(actor, session_id, enrich_first=False)
        try:
            try:
                answer = research.run(request)
            except ResearchUnavailable as failure:
                raise self._block_unavailable(actor, session_id, reservation, request, failure) from None
            except _INVALID as refusal:
                self._count_invalid(actor, session_id, refusal, reservation=reservation)
                raise
            return self._commit(actor, session_id, reservation, answer)
        except BaseException:
            # Whatever failed (the run, the file, the commit itself), a reservation still running is given
            # back now rather than when its lease ends; one already consumed, held or released stays so.
            with contextlib.suppress(Exception):
                self._release(actor, reservation)
            raise

    def _reserve(self, actor: Actor, session_id: int, *, enrich_first: bool = True) -> int:
        """Reserve one unit of the session's budget for a query: in one statement where nothing needs a look
        (one round trip on PostgreSQL), otherwise after a look at the session and its live reservations."""
        now = self.clock()
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            # A reservation matters only until the query's commit, which waits for the disk and so makes it
            # durable too; a database crash before then loses both, and the budget with them.
            tx.commit_lazily()
            reserved = queries.reserve_if_clear(
                tx, session_id, owner_id=actor.principal_id, actor=actor.audit_name, holder=current_holder(),
                lease_until=iso_utc(now + self._lease()), at=iso_utc(now),
                enriched_first=enrich_first and self._enrichment_configured)
        if (reservation := reserved.scalar()) is not None:
            return int(reservation)
        return self._reserve_after_a_look(actor, session_id, enrich_first=enrich_first)

    def _reserve_after_a_look(self, actor: Actor, session_id: int, *, enrich_first: bool) -> int:
        """The reservation :meth:`_reserve` could not take at once: a refusal (not found, another's, closed,
        blocked, exhausted), inputs to enrich first, a held unit to renew, or interrupted ones to release."""
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            tx.commit_lazily()  # as in _reserve
            now = self.clock()
            row, live = queries.locked_with_live_reservations(tx, session_id)
            row = self._check_queryable(tx, actor, session_id, row)
            if enrich_first and row["inputs_revision"] > row["enriched_revision"] and self._enrichment_configured:
                raise _EnrichmentPending
            live = self._release_interrupted(tx, actor, session_id, now, live)
            lease = iso_utc(now + self._lease())
            held = next((reservation["id"] for reservation in live if reservation["state"] == Reservation.HELD), None)
            if held is not None:  # the unit a failed source left held is the retry's
                queries.renew(tx, held, actor=actor.audit_name, holder=current_holder(), lease_until=lease)
                return int(held)
            if row["used"] + len(live) >= row["budget"]:
                raise refusals.exhausted(row, len(live))
            reserved = queries.insert_reservation(tx, session_id, actor=actor.audit_name, holder=current_holder(),
                                                  lease_until=lease, at=iso_utc(now))
        return int(reserved.scalar())  # sent with the commit

    def _commit(self, actor: Actor, session_id: int, reservation: int, answer: Answer) -> dict[str, Any]:
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            # The session's lock and the audit chain's head go with the record (one round trip), the audit
            # event with the commit.
            locked = queries.session_later(tx, session_id, lock=True)
            audit.prepare(tx)
            seq, repeat_of, left = self._record_answer(tx, actor, session_id, answer, at, consuming=reservation)
            row = locked.one()
            if row is None:
                raise refusals.not_found(session_id)
            if left is None:
                # Given back meanwhile: the session closed, or the query outlived its lease (a refusal rolls back
                # the record too). In the second case the answer still counts if the budget has room for it.
                if row["status"] == Status.CLOSED:
                    raise refusals.closed(session_id)
                if row["status"] == Status.BLOCKED:  # blocked meanwhile: a unit given back is not taken again
                    raise refusals.blocked(row)
                live = len(queries.live_reservations(tx, session_id))
                if row["used"] + live >= row["budget"]:
                    raise refusals.exhausted(row, live)
                if not queries.settle(tx, reservation, to=Reservation.CONSUMED, at=at, only_from=Reservation.RELEASED):
                    queries.insert_reservation(tx, session_id, actor=actor.audit_name, holder=current_holder(),
                                               lease_until=at, at=at, state=Reservation.CONSUMED).scalar()
                left = queries.count_use(tx, session_id, at=at)
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

    def _block_unavailable(self, actor: Actor, session_id: int, reservation: int | None, request: dict[str, Any],
                           failure: ResearchUnavailable, resume: dict[str, Any] | None = None) -> ArmariusError:
        """Block the session for a failed source, keeping the reservation (if the query had one) for the retry
        after a resume; ``resume`` adds what the resume is to complete (an enrichment revision)."""
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            now = self.clock()
            at = iso_utc(now)
            row = self._row(tx, session_id, lock=True)
            if row["status"] == Status.CLOSED:  # closed while the query ran: its reservation is released
                return refusals.closed(session_id)
            kept = reservation is not None and queries.settle(tx, reservation, to=Reservation.HELD, at=at)
            if row["status"] == Status.BLOCKED:  # blocked while it ran: the first block's resume state stands
                return refusals.blocked(row)
            retry = iso_utc(now + self.limits.retry_after)
            resume_state = {"status": Status.OPEN.value, "reservation": reservation if kept else None,
                            "request": request, **(resume or {})}
            self._block(tx, actor, row, Reason.RESEARCH_UNAVAILABLE, resume_state, at=at, retry_not_before=retry,
                        details={"request_kind": request["kind"], "cause": failure.to_dict(for_agent=False)})
        kept_note = " its budget for this query is kept." if kept else ""
        return SessionBlocked(
            f"{failure.message} Session {session_id} is now blocked (research_unavailable);{kept_note} A human must "
            f"resume it, not before {retry}.",
            agent_hint="Tell the user what failed; there is no tool to resume a session.",
            session=session_id, reason=Reason.RESEARCH_UNAVAILABLE.value, retry_not_before=retry,
            cause=failure.to_dict(for_agent=False),
        )

    def _block(self, tx: Tx, actor: Actor, row: Row, reason: Reason, resume_state: dict[str, Any], *, at: str,
               retry_not_before: str | None, details: dict[str, Any], **changes: Any) -> None:
        session_id = row["id"]
        queries.update_session(tx, session_id, at=at, status=Status.BLOCKED.value, reason=reason.value,
                               resume_state=canonical_json(resume_state), retry_not_before=retry_not_before, **changes)
        _transition(tx, actor, session_id, Event.BLOCKED, status=Status.BLOCKED, reason=reason, at=at,
                    resume_state=resume_state, details={**details, "retry_not_before": retry_not_before})

    def _release(self, actor: Actor, reservation: int) -> None:
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            queries.settle(tx, reservation, to=Reservation.RELEASED, at=iso_utc(self.clock()))

    # Human decisions ------------------------------------------------------------------------------

    def resume(self, actor: Actor, session_id: int, note: str | None = None) -> dict[str, Any]:
        """Move a blocked session into the resume state of its last blocking checkpoint (humans only)."""
        actor.require_human(Permission.SESSIONS_MANAGE, "resume a session")
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
            _transition(tx, actor, session_id, Event.RESUMED, status=state["status"], at=at,
                        details={"from_checkpoint": blocking["seq"], "reason": row["reason"],
                                 **({"note": note} if note else {})})
        if "enrichment" in state and self._enrichment_configured:
            self._enrich_pending(actor, session_id)  # without repeating a query already recorded
        return self.show(actor, session_id)

    def take_over(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """An administrator makes another principal's session their own, so that what follows names them."""
        actor.require_human(Permission.SESSIONS_TAKEOVER, "take over a session")
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            self.take_over_within(tx, actor, session_id, at=iso_utc(self.clock()))
            return self._view(tx, self._row(tx, session_id))

    def take_over_within(self, tx: Tx, actor: Actor, session_id: int, *, at: str) -> None:
        """:meth:`take_over` in the caller's write transaction, which records it with its own decision or not at
        all (an archive repair's apply: a refused apply takes nothing over)."""
        actor.require_human(Permission.SESSIONS_TAKEOVER, "take over a session")
        row = self._not_closed(tx, session_id)
        if row["owner_id"] != actor.principal_id:
            queries.update_session(tx, session_id, at=at, owner_id=actor.principal_id, owner=actor.audit_name)
            _transition(tx, actor, session_id, Event.TAKEN_OVER, status=row["status"], reason=row["reason"], at=at,
                        details={"from": row["owner"], "to": actor.audit_name})

    def raise_budget(self, actor: Actor, session_id: int, budget: int) -> dict[str, Any]:
        """A human gives a session more actions (up to the ceiling); never fewer."""
        actor.require_human(Permission.SESSIONS_MANAGE, "raise a session's budget")
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            row = self._not_closed(tx, session_id)
            if not row["budget"] < budget <= self.limits.ceiling:
                raise InvalidInput(f"The new budget must be above the current {row['budget']} and at most "
                                   f"{self.limits.ceiling}.", field="budget", budget=row["budget"])
            queries.update_session(tx, session_id, at=at, budget=budget)
            _transition(tx, actor, session_id, Event.BUDGET_RAISED, status=row["status"], reason=row["reason"], at=at,
                        details={"from": row["budget"], "to": budget})
            return self._view(tx, self._row(tx, session_id))

    def close(self, actor: Actor, session_id: int, note: str | None = None) -> dict[str, Any]:
        """The owner or a session manager closes a session: it stays readable and refuses queries."""
        note = check_note(note)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            row = self._row(tx, session_id, lock=True)
            if row["owner_id"] != actor.principal_id and not actor.can(Permission.SESSIONS_MANAGE):
                raise refusals.not_found(session_id)
            if row["status"] != Status.CLOSED:
                released = queries.release_all(tx, session_id, at=at)
                queries.update_session(tx, session_id, at=at, status=Status.CLOSED.value, reason=None,
                                       resume_state=None, retry_not_before=None)
                _transition(tx, actor, session_id, Event.CLOSED, status=Status.CLOSED, at=at,
                            details={"released": released, **({"note": note} if note else {})})
            return self._view(tx, self._row(tx, session_id))

    # Files and verification (no git or database server needed) ------------------------------------

    def session_folder(self, workspace: str, session_id: int) -> Path:
        """The folder of a session's capture files, below :attr:`evidence_dir`: every file there is reached from
        it without following links (a link or anything but a folder on the way is no folder to a reader; a
        writer refuses it), and is taken only if it is a regular file."""
        return self.evidence_dir / workspace / "sessions" / str(session_id) / "captures"

    def capture_files(self, actor: Actor, session_id: int, capture_ids: Iterable[str], *,
                      inline_max: int | None = None) -> dict[str, dict[str, Any]]:
        """Captures of a session as their mirror files hold them, by id: ``state`` ok, missing (a link or
        anything but a regular file included) or altered (the bytes do not hash to the id), ``size`` in bytes
        and, when ok (and at most ``inline_max`` bytes), the ``document``. Only captures the session's evidence
        records name (not_found otherwise)."""
        wanted = list(dict.fromkeys(capture_ids))
        if not all(isinstance(capture, str) and CAPTURE_ID.fullmatch(capture) for capture in wanted):
            raise InvalidInput("A capture is named by its id: 64 lowercase hex digits.", field="capture")
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            self._readable(tx, actor, session_id)
            recorded = {capture["capture_id"]: capture["content"] for capture in queries.captures_of(tx, session_id)}
        unknown = [capture for capture in wanted if capture not in recorded]
        if unknown:
            raise NotFound(f"Session {session_id} has no capture {unknown[0]}.", session=session_id,
                           capture=unknown[0], captures=unknown)
        with files.open_folder(self.evidence_dir, self.session_folder(actor.workspace, session_id)) as folder:
            return {capture: _capture_file(folder, session_id, capture, recorded[capture], inline_max)
                    for capture in wanted}

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
            charged = queries.agent_records_count(tx, session_id)
            running = [reservation for reservation in queries.live_reservations(tx, session_id)
                       if reservation["state"] == Reservation.RESERVED]
        for record in records:
            problems += views.record_problems(record, stored.get(record["capture_id"]))
        problems += views.file_problems(self.evidence_dir, folder, stored)
        if not row["used"] == consumed == charged:
            problems.append({"problem": "budget_mismatch", "used": row["used"], "consumed_reservations": consumed,
                             "evidence_records": charged})
        now = self.clock()
        problems += [{"problem": "interrupted_reservation", "reservation": reservation["id"]}
                     for reservation in running if _interrupted(reservation, now)]
        return {"session": session_id, "folder": str(folder), "evidence_records": len(records),
                "captures": len(stored), "ok": not problems, "problems": problems}

    def rebuild_files(self, actor: Actor, session_id: int) -> dict[str, Any]:
        """Write the session's capture files again from the store: missing and altered ones are restored
        (a human's act, recorded in the audit log). Files the store does not know are reported, not removed.
        A link or anything but a regular file where a capture file belongs (or anything but a folder on the
        way to the folder) refuses (conflict, naming it below the evidence folder) before anything is written."""
        actor.require_human(Permission.SESSIONS_MANAGE, "rebuild a session's capture files")
        folder = self.session_folder(actor.workspace, session_id)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            self._readable(tx, actor, session_id)
            stored = queries.captures_of(tx, session_id)
        known = {capture["capture_id"] for capture in stored}
        wrong: list[Capture] = []
        with files.open_folder(self.evidence_dir, folder) as descriptor:
            for row in stored:
                if row["content"] is None:
                    continue
                content = row["content"].encode("utf-8")
                path = folder / f"{row['capture_id']}.json"
                found = None if descriptor is None else files.read_regular(descriptor, path.name,
                                                                           limit=len(content) + 1)
                if found is None and descriptor is not None:
                    files.refuse_other_than_file(self.evidence_dir, path, descriptor)
                if found is None or found.content != content:
                    wrong.append(Capture(row["capture_id"], content))
            extra = [] if descriptor is None else sorted(
                name for name in os.listdir(descriptor)
                if _capture_file_name(name) and name.removesuffix(".json") not in known)
        restored: list[str] = []
        try:
            for missing in wrong:  # each refused if a link or anything else was put on its way meanwhile
                write_capture(folder, missing, root=self.evidence_dir)
                restored.append(missing.id)
        finally:
            if restored:
                with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                    audit.append(tx, actor=actor.audit_name, action="session.files_rebuilt", subject=str(session_id),
                                 details={"session": session_id, "restored": restored})
        return {"session": session_id, "folder": str(folder), "captures": len(stored), "restored": restored,
                "extra_files": extra}

    # Enrichment -----------------------------------------------------------------------------------

    @property
    def _enrichment_configured(self) -> bool:
        return self.research is not None and self.research.config.enrichment is not None

    def _enrichment_config(self) -> EnrichmentConfig:
        config = None if self.research is None else self.research.config.enrichment
        if config is None:
            raise InvalidInput("This server has no enrichment configured: open the session without inputs.",
                               field="inputs")
        return config

    def _new_inputs(self, tx: Tx, actor: Actor, session_id: int, revision: int, inputs: list[dict[str, Any]],
                    at: str) -> None:
        queries.insert_inputs(tx, session_id, revision=revision, inputs=inputs, actor=actor.audit_name, at=at)
        queries.update_session(tx, session_id, at=at, inputs_revision=revision)

    def _enrich_pending(self, actor: Actor, session_id: int) -> None:
        """Run enrichment for the session's newest inputs unless it completed them already. A failing
        source blocks the session, resumable into the same enrichment; queries recorded before are reused."""
        research = self._research()
        config = self._enrichment_config()
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = self._row(tx, session_id)
            if row["inputs_revision"] <= row["enriched_revision"] or row["status"] != Status.OPEN:
                return
            revision = row["inputs_revision"]
            inputs = queries.inputs_of(tx, session_id, revision)
            recorded = queries.recorded_answers(tx, session_id)

        def lookup(request: dict[str, Any]) -> Looked:
            known = recorded.get(canonical_json(request))
            if known is not None:
                return Looked(known[0], json.loads(known[1]))
            try:
                answer = research.run(validate_query(request))
            except ResearchUnavailable as failure:
                raise self._block_unavailable(actor, session_id, None, request, failure,
                                              resume={"enrichment": revision}) from None
            return self._commit_enrichment_answer(actor, session_id, revision, answer)

        walk = Walk(config, lookup)
        try:
            found = walk.run([(item["entity_type"], item["id"]) for item in inputs])
        except SessionBlocked:
            return
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            row = self._row(tx, session_id, lock=True)
            if row["enriched_revision"] >= revision:  # completed meanwhile: a revision is never rewritten
                return
            queries.insert_facts(tx, session_id, revision, [fact.to_dict() for fact in found], at=at)
            queries.update_session(tx, session_id, at=at, enriched_revision=revision)
            details = {"revision": revision, "facts": len(found), "queries": len(walk.answers)}
            _transition(tx, actor, session_id, Event.ENRICHED, status=row["status"], reason=row["reason"],
                        details=details, at=at)

    def _commit_enrichment_answer(self, actor: Actor, session_id: int, revision: int, answer: Answer) -> Looked:
        """An enrichment lookup's answer, recorded like an agent's (capture, evidence record, audit event) but
        costing no budget: it counts against the enrichment limits. A request the session has recorded
        meanwhile is not recorded twice: its recorded answer is the one used."""
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            self._not_closed(tx, session_id)
            known = queries.recorded_capture(tx, session_id, answer.request)
            if known is not None:  # a concurrent run of the same enrichment recorded it first
                return Looked(known[0], json.loads(known[1]))
            self._record_answer(tx, actor, session_id, answer, iso_utc(self.clock()), enrichment=revision)
        return Looked(answer.capture.id, json.loads(answer.capture.content))

    def _record_answer(self, tx: Tx, actor: Actor, session_id: int, answer: Answer, at: str, *,
                       enrichment: int | None = None, consuming: int | None = None
                       ) -> tuple[int, int | None, int | None]:
        """Write an answer's capture file, store the capture (once per workspace), append its evidence record
        and the research.query audit event, consuming the reservation ``consuming`` (if any); the record's
        number, the earlier record it repeats, and the budget left (None when the reservation was no longer
        running: nothing consumed). The file, a mirror, is written before the commit, while the record's
        statements are on their way (PostgreSQL)."""
        capture = answer.capture
        tx.meanwhile(partial(write_capture, self.session_folder(actor.workspace, session_id), capture, self._spares,
                             root=self.evidence_dir))
        seq, repeat_of, new, left = queries.insert_record(
            tx, session_id, capture_id=capture.id, content=capture.content.decode("utf-8"), request=answer.request,
            principal_id=actor.principal_id, actor=actor.audit_name, at=at, enrichment_revision=enrichment,
            consuming=consuming)
        details: dict[str, Any] = {"session": session_id, "kind": answer.kind, "capture": capture.id, "evidence": seq,
                                   **_pin(answer), "new": new}
        if repeat_of is not None:
            details["repeat_of"] = repeat_of
        if enrichment is not None:
            details["enrichment"] = enrichment
        audit.append(tx, actor=actor.audit_name, action="research.query", subject=_answer_subject(answer),
                     details=details)
        return seq, repeat_of, left

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
            raise refusals.not_found(session_id)
        return row

    def _not_closed(self, tx: Tx, session_id: int) -> Row:
        """The session row locked for a change, refusing a closed session."""
        row = self._row(tx, session_id, lock=True)
        if row["status"] == Status.CLOSED:
            raise refusals.closed(session_id)
        return row

    def _readable(self, tx: Tx, actor: Actor, session_id: int) -> Row:
        """The session, if the caller owns it or manages sessions; otherwise it does not exist for them."""
        row = queries.session_with_reservations(tx, session_id)
        if row is None or (row["owner_id"] != actor.principal_id and not actor.can(Permission.SESSIONS_MANAGE)):
            raise self._not_theirs(tx, actor, session_id, row)
        return row

    def _queryable(self, tx: Tx, actor: Actor, session_id: int) -> Row:
        """The session locked for a query: the caller's own, and open."""
        return self._check_queryable(tx, actor, session_id, queries.session(tx, session_id, lock=True))

    def _check_queryable(self, tx: Tx, actor: Actor, session_id: int, row: Row | None) -> Row:
        if row is None:
            raise refusals.not_found(session_id)
        if row["owner_id"] != actor.principal_id:
            if actor.can(Permission.SESSIONS_TAKEOVER):
                raise NotAllowed(f"Session {session_id} belongs to {row['owner']}: take it over first "
                                 "(armarius sessions takeover), so that what you do is recorded as yours.",
                                 session=session_id, owner=row["owner"])
            raise self._not_theirs(tx, actor, session_id, row)
        if row["status"] == Status.CLOSED:
            raise refusals.closed(session_id)
        if row["status"] == Status.BLOCKED:
            raise refusals.blocked(row)
        return row

    @staticmethod
    def _not_theirs(tx: Tx, actor: Actor, session_id: int, row: Row | None) -> NotFound:
        """The refusal of a session the caller may not see: it does not exist for them, unless it was theirs
        until a human took it over (they opened it; they are told who has it now)."""
        if row is not None and actor.audit_name in queries.taken_over_from(tx, session_id):
            return refusals.taken_from(session_id, row["owner"])
        return refusals.not_found(session_id)

    def _sweep(self, actor: Actor, session_id: int) -> None:
        """Release reservations whose holder is gone, before anything reads the budget. A caller who may not
        read the session is refused first: a refusal changes nothing."""
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            self._readable(tx, actor, session_id)
            live = queries.live_reservations(tx, session_id)
        now = self.clock()
        if any(_interrupted(reservation, now) for reservation in live):
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                row, live = queries.locked_with_live_reservations(tx, session_id)
                if row is not None:
                    self._release_interrupted(tx, actor, session_id, now, live)

    def _release_interrupted(self, tx: Tx, actor: Actor, session_id: int, now: datetime, live_before: list[Row]
                             ) -> list[Row]:
        """Release the running reservations (of ``live_before``, read with the session locked) whose holder
        is gone; the live reservations that remain."""
        at, live, released = iso_utc(now), [], []
        for reservation in live_before:
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
        view = views.summary(row)
        view["evidence"] = {
            "records": sum(item["records"] for item in summary),
            "repeats": sum(item["repeats"] for item in summary),
            "by_kind": {item["request_kind"]: item["records"] for item in summary},
            "latest": [views.record_view(record) for record in queries.records(tx, session_id, latest=RECENT_EVIDENCE)],
        }
        if row["enriched_revision"]:
            view["facts"] = {"revision": row["enriched_revision"],
                             **compact(queries.facts(tx, session_id, row["enriched_revision"]))}
        if row["inputs_revision"] > row["enriched_revision"]:  # newer inputs wait for their enrichment
            view.setdefault("facts", {"revision": None})["pending"] = row["inputs_revision"]
        view["next_step"] = views.next_step(row)
        return view

    # For other features' checks inside their own transaction (a repair's proposal and decision) ------------

    def check_open(self, actor: Actor, session_id: int, *, within: Tx) -> dict[str, Any]:
        """The caller's own open session, locked in the caller's transaction ``within`` (of the actor's
        workspace) until it ends; refused as a query in it would be (not_found, session_closed, session_blocked)."""
        return _owner_state(self._queryable(within, actor, session_id))

    def state(self, actor: Actor, session_id: int, *, within: Tx) -> dict[str, Any]:
        """A session's id, subject, owner and status, locked in the caller's transaction ``within`` (of the
        actor's workspace) until it ends; not_found for a caller who may not read the session."""
        row = self._row(within, session_id, lock=True)
        if row["owner_id"] != actor.principal_id and not actor.can(Permission.SESSIONS_MANAGE):
            raise refusals.not_found(session_id)
        return _owner_state(row)


def _owner_state(row: Row) -> dict[str, Any]:
    return {"session": row["id"], "subject": row["subject"], "owner_id": row["owner_id"], "owner": row["owner"],
            "status": row["status"]}


class _EnrichmentPending(Exception):
    """The session's newest inputs are not enriched yet (raised before a reservation is taken)."""


def _transition(tx: Tx, actor: Actor, session_id: int, event: Event, *, status: str, details: dict[str, Any],
                at: str, reason: str | None = None, resume_state: dict[str, Any] | None = None) -> None:
    """A session's move: its checkpoint, and the audit event ``session.<event>`` with the same details."""
    queries.append_checkpoint(tx, session_id, event=event, status=status, reason=reason, resume_state=resume_state,
                              actor=actor.audit_name, details=details, at=at)
    audit.append(tx, actor=actor.audit_name, action=f"session.{event.value}", subject=str(session_id),
                 details={"session": session_id, **({"reason": reason} if reason else {}), **details})


def _pin(answer: Answer) -> dict[str, Any]:
    """What an answer was read at: the pinned commit or the database snapshot."""
    return {key: answer.origin[key] for key in ("commit", "snapshot") if key in answer.origin}


def _answer_subject(answer: Answer) -> str:
    return str(answer.origin.get("source") or answer.origin.get("database") or "databases")


def _interrupted(reservation: Row, now: datetime) -> bool:
    return is_gone(reservation["holder"]) or _parse(reservation["lease_until"]) <= now


def _parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


def _listing_owner(actor: Actor, status: str | None, everyone: bool) -> int | None:
    """Whose sessions a listing shows: the caller's own (who needs research.query or sessions.manage), or with
    ``everyone`` all of the workspace's to a session manager (None)."""
    if not actor.can(Permission.SESSIONS_MANAGE):
        actor.require(Permission.RESEARCH_QUERY)
    if status is not None and status not in set(Status):
        raise InvalidInput(f"status is one of {', '.join(Status)}.", field="status")
    return None if everyone and actor.can(Permission.SESSIONS_MANAGE) else actor.principal_id


def _capture_file_name(name: str) -> bool:
    """Whether a name in a captures folder is a capture file's (``*.json``, not hidden)."""
    return name.endswith(".json") and not name.startswith(".")


def _capture_file(folder: int | None, session_id: int, capture_id: str, stored: str | None,
                  inline_max: int | None) -> dict[str, Any]:
    """A capture as its file in ``folder`` (a descriptor; None: no folder) holds it. A file is read up to one
    byte past the stored capture's length; without a stored copy it is hashed first, and read only if whole."""
    name = f"{capture_id}.json"
    found: dict[str, Any] = {"session": session_id, "capture": capture_id, "file": name}
    if folder is None:
        return {**found, "state": "missing", "size": None}
    if stored is None:
        digest = capture_digest(folder, name)
        if digest is None:
            return {**found, "state": "missing", "size": None}
        if digest[0] != capture_id:
            return {**found, "state": "altered", "size": digest[1]}
        length = digest[1]
    else:
        length = len(stored.encode("utf-8"))
    read = files.read_regular(folder, name, limit=length + 1)
    if read is None:
        return {**found, "state": "missing", "size": None}
    content = read.content
    if hashlib.sha256(content).hexdigest() != capture_id:
        return {**found, "state": "altered", "size": read.size}
    found.update(state="ok", size=len(content))
    if inline_max is None or len(content) <= inline_max:
        found["document"] = json.loads(content)
    return found
