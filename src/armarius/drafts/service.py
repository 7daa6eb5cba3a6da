"""Draft use cases: propose, approve (humans only), hand over, create with the approval, promote.

``create_draft`` runs in one transaction: the operation id is looked up (a known operation of the same
principal with the same payload replays its first result, whatever the approval field holds; another
principal's operation is refused), the approval is checked (exists in this workspace, same fingerprint,
live: not expired at processing time, not superseded, withdrawn or revoked, unused, and its approver may
still approve in this workspace), the draft is inserted and the token marked used, then everything commits
together. Any failure rolls all of it back: never a used token without a draft, never a draft with a token
still usable. A refusal is then recorded in the audit log in a transaction of its own, with its code and
never the token.

An approval of a proposal is ``issued`` (live), then ``consumed``, ``expired``, ``superseded`` (a human
approved the same proposal again while it was unused), ``withdrawn`` (a human rejected the proposal
while it was unused) or ``revoked`` (its approver lost the right to approve in the workspace while it was
unused). Until it is consumed a human may approve the proposal again, or reject it; the
agent's hand-over (``proposal_status`` with its collection key) can
be repeated while the approval is live, so an answer lost on the way loses nothing. A proposal whose exact
content was drafted with another approval (a file's) is drafted too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Permission
from armarius.auth.secrets import digests_match, new_token, token_digest
from armarius.drafts import handoff, queries
from armarius.drafts.model import DRAFT_KIND, DraftPayload, parse_payload
from armarius.drafts.steps import (
    ASK_AGAIN,
    COLLECT,
    CREATE,
    MISSING,
    NEW_OPERATION,
    NOTHING,
    PROPOSE,
    ProposalState,
    ask_again,
    check_approvable,
    check_live,
    check_rejectable,
    draft_exists,
    proposal_state,
    revoked,
    status_instruction,
)
from armarius.errors import (
    ApprovalExpired,
    ApprovalMismatch,
    ApprovalMissing,
    ApprovalUsed,
    ArmariusError,
    Conflict,
    DraftExists,
    InvalidInput,
    NotAllowed,
    NotFound,
    OperationConflict,
    echo,
)
from armarius.memory.model import check_reason
from armarius.memory.service import MemoryService, RememberRequest
from armarius.store import Database, Row, Tx, UniqueViolation, iso_utc
from armarius.textview import short_fingerprint
from armarius.validation import check_filter

OPERATION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_DRAFTS_TOPIC = 3001
#: The unique constraint whose violation means the slug's draft exists (see UniqueViolation): any other goes up.
_DRAFT_SLUG = "drafts_workspace_id_slug_key"
#: The most proposals one page lists.
PAGE_MAX = 200


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class IssuedApproval:
    """An approval just issued: the one moment its token exists in the clear (besides its sealed copy)."""

    approval_id: int
    token: str = field(repr=False)
    fingerprint: str
    expires_at: str
    proposal_id: int | None
    #: The proposal's earlier approval this one replaces, and what became of it (superseded or expired).
    replaces: int | None = None
    replaced_outcome: str | None = None


@dataclass
class DraftService:
    database: Database
    memory: MemoryService
    text_max_bytes: int
    approval_ttl: timedelta
    clock: Callable[[], datetime] = _now

    # Proposals ---------------------------------------------------------------------------------

    def parse(self, proposal: Any) -> DraftPayload:
        """Validate a proposal given directly (a file), within this server's limits."""
        return parse_payload(proposal, text_max_bytes=self.text_max_bytes)

    def propose(self, actor: Actor, proposal: Any) -> dict[str, Any]:
        """File a proposal for the review queue. Writes no draft; an agent gets a collection key."""
        actor.require(Permission.DRAFTS_CREATE)
        payload = parse_payload(proposal, text_max_bytes=self.text_max_bytes)
        private_key, public_key = handoff.new_collection_key() if actor.kind is Kind.AGENT else (None, None)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            proposal_id = queries.insert_proposal(
                tx, slug=payload.slug, title=payload.title, text=payload.text, fingerprint=payload.fingerprint,
                proposer_id=actor.principal_id, proposed_by=actor.audit_name, public_key=public_key,
                at=iso_utc(self.clock()),
            )
            audit.append(tx, actor=actor.audit_name, action="draft.proposed", subject=payload.slug,
                         details={"proposal": proposal_id, "fingerprint": payload.fingerprint})
        result: dict[str, Any] = {"proposal": proposal_id, "status": "pending", "fingerprint": payload.fingerprint,
                                  "fingerprint_short": short_fingerprint(payload.fingerprint)}
        if private_key is not None:
            result["collection_key"] = private_key
        return result

    def proposal(self, actor: Actor, proposal_id: int) -> dict[str, Any]:
        """A proposal in full, for a reviewer, with the state of its latest approval."""
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = queries.proposal_with_approval(tx, proposal_id)
        if row is None:
            raise NotFound(f"There is no proposal {proposal_id} in this workspace.", proposal=proposal_id)
        return _proposal_view(row, self.clock())

    def proposals(self, actor: Actor, status: str | None = "pending") -> list[dict[str, Any]]:
        """The review queue: proposals in one state (pending, approved, expired, drafted, rejected) or all."""
        actor.require(Permission.MEMORY_READ)
        # drafted: also a pending or approved proposal whose exact content was drafted with another approval
        stored = None if status in (None, "drafted") else "approved" if status == "expired" else status
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = queries.proposals(tx, stored)
        now = self.clock()
        views = [_proposal_view(row, now) for row in rows]
        return [view for view in views if status is None or view["status"] == status]

    def proposals_page(self, actor: Actor, *, status: str | None = "pending", after: int | None = None,
                       limit: int = 50, newest_first: bool = False, q: str | None = None) -> dict[str, Any]:
        """One page of the review queue: proposals in one state (as ``proposals`` names them) or all, by id
        (oldest first, or ``newest_first``), each as ``proposal`` shows it but without its text. ``q``: only
        proposals whose slug, title or proposer contains it (case-insensitive). ``next``: the ``after`` that gives
        the next page (None: this is the last)."""
        actor.require(Permission.MEMORY_READ)
        if status is not None and status not in set(ProposalState):
            raise InvalidInput(f"status is one of {', '.join(ProposalState)}.", field="status")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= PAGE_MAX:
            raise InvalidInput(f"limit is from 1 to {PAGE_MAX}.", field="limit")
        if after is not None and (not isinstance(after, int) or isinstance(after, bool)):
            raise InvalidInput("after is the last proposal of the previous page (its next).", field="after")
        needle = check_filter(q)
        now = self.clock()
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = queries.proposals_page(tx, state=status, now=iso_utc(now), after=after, newest_first=newest_first,
                                          limit=limit + 1, contains=needle)
        items = [_proposal_item(row, now) for row in rows[:limit]]
        return {"items": items, "next": items[-1]["proposal"] if len(rows) > limit else None}

    def pending_summary(self, actor: Actor) -> dict[str, Any]:
        """How many proposals wait for a human and when the oldest was filed (None: none waits), counted in SQL."""
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = queries.pending_summary(tx)
        return {"count": int(row["count"]), "oldest_at": row["oldest_at"]}

    def proposal_status(self, actor: Actor, proposal_id: int, collection_key: str | None = None) -> dict[str, Any]:
        """The proposer's view. While the approval is live, the collection key opens its sealed copy:
        as often as asked, so that an answer lost on the way can be fetched again."""
        actor.require(Permission.DRAFTS_CREATE)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            now = self.clock()
            ended = queries.end_dead_approvals(tx, iso_utc(now))
            row = queries.proposal(tx, proposal_id, lock=True)
            if row is None or row["proposer_id"] != actor.principal_id:
                raise NotFound(f"You have no proposal {proposal_id} in this workspace.", proposal=proposal_id)
            approval = queries.approval_of_proposal(tx, proposal_id, lock=True)
            answer = self._status(tx, actor, row, approval, now, collection_key)
            _audit_ended(tx, ended)
        return answer

    def _status(self, tx: Tx, actor: Actor, row: Row, approval: Row | None, now: datetime,
                collection_key: str | None) -> dict[str, Any]:
        proposal_id = row["id"]
        outcome = None if approval is None else approval["outcome"]
        state = proposal_state(row["status"], outcome, None if approval is None else approval["expires_at"], now,
                               bool(row["content_drafted"]))
        result: dict[str, Any] = {"proposal": proposal_id, "status": state.value, "slug": row["slug"]}
        if approval is not None:
            result.update(approval_outcome=outcome, expires_at=approval["expires_at"],
                          collected=approval["collected_at"] is not None)
        if state is not ProposalState.APPROVED or approval is None:
            return {**result, **status_instruction(state, row, outcome)}
        if approval["sealed_token"] is None:
            return {**result, "next_step": ASK_AGAIN, "instruction": (
                "This approval cannot be handed over (it has no sealed copy for you). If you hold it, call "
                f"create_draft with it before expires_at; otherwise: {ask_again(proposal_id)}")}
        if collection_key is None:
            return {**result, "next_step": COLLECT, "instruction": (
                "Approved. Call proposal_status again with your collection_key to receive the approval.")}
        token = handoff.open_sealed(approval["sealed_token"], collection_key, _handoff_context(row))
        first = queries.mark_collected(tx, approval["id"], at=iso_utc(now)) == 1
        audit.append(tx, actor=actor.audit_name, action="approval.collected", subject=row["slug"],
                     details={"proposal": proposal_id, "approval": approval["id"], "repeat": not first})
        return {**result, "approval": token, "collected": True, "next_step": CREATE, "instruction": (
            "Approved for exactly this slug, title and text. Call create_draft with them unchanged, this approval "
            "and a new operation id before expires_at. The approval works once; until it is used or expires, "
            "proposal_status with your collection_key hands you the same approval again.")}

    # Human decisions ---------------------------------------------------------------------------

    def approve(self, actor: Actor, *, proposal_id: int | None = None, payload: Any = None,
                reviewed_fingerprint: str | None = None) -> IssuedApproval:
        """Issue a single-use approval for exactly one payload: a stored proposal's, or one given here.

        A proposal whose approval was never used (expired, or live and perhaps collected) may be
        approved again: the new approval replaces the old one, whose token is dead from then on.
        ``reviewed_fingerprint`` is the fingerprint of what the human was shown; anything else is refused.
        """
        actor.require_human(Permission.APPROVALS_ISSUE, "approve or reject a proposal")
        token = new_token()
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            issued = self.clock()
            expires = issued + self.approval_ttl
            ended = queries.end_dead_approvals(tx, iso_utc(issued))
            row = previous = None
            if proposal_id is not None:
                row = self._proposal(tx, proposal_id, lock=True)
                previous = queries.approval_of_proposal(tx, proposal_id, lock=True)
                check_approvable(row, previous)
                if row["proposer_id"] == actor.principal_id:
                    raise NotAllowed("You proposed this draft; another human must approve it (separation of duties).",
                                     proposal=proposal_id)
                content = DraftPayload(row["slug"], row["title"], row["text"])
            else:
                content = parse_payload(payload, text_max_bytes=self.text_max_bytes)
            if reviewed_fingerprint is not None and not digests_match(content.fingerprint, reviewed_fingerprint):
                raise Conflict("The content differs from what was shown for review; review it again.",
                               proposal=proposal_id)
            sealed = (handoff.seal(token, row["collection_public_key"], _handoff_context(row))
                      if row is not None and row["collection_public_key"] else None)
            replaced_outcome = None
            if previous is not None:
                replaced_outcome = previous["outcome"]
                if previous["outcome"] == "issued":
                    queries.end_approval(tx, previous["id"], "superseded")
                    replaced_outcome = "superseded"
                    audit.append(tx, actor=actor.audit_name, action="approval.superseded", subject=content.slug,
                                 details={"approval": previous["id"], "proposal": proposal_id})
            approval_id = queries.insert_approval(
                tx, kind=DRAFT_KIND, token_digest=token_digest(token), fingerprint=content.fingerprint,
                slug=content.slug, proposal_id=proposal_id, approver_id=actor.principal_id,
                approved_by=actor.audit_name, issued_at=iso_utc(issued), expires_at=iso_utc(expires),
                sealed_token=sealed,
            )
            if proposal_id is not None:
                queries.decide_proposal(tx, proposal_id, status="approved", by=actor.audit_name, at=iso_utc(issued),
                                        note=None)
            details: dict[str, Any] = {"approval": approval_id, "proposal": proposal_id,
                                       "fingerprint": content.fingerprint, "expires_at": iso_utc(expires)}
            if previous is not None:
                details.update(replaces=previous["id"], replaced_outcome=replaced_outcome)
            audit.append(tx, actor=actor.audit_name, action="approval.reissued" if previous else "approval.issued",
                         subject=content.slug, details=details)
            _audit_ended(tx, ended)
        return IssuedApproval(approval_id, token, content.fingerprint, iso_utc(expires), proposal_id,
                              replaces=None if previous is None else previous["id"], replaced_outcome=replaced_outcome)

    def reject(self, actor: Actor, proposal_id: int, note: str | None = None) -> dict[str, Any]:
        """Reject a proposal whose approval, if it has one, was not used: a pending one, or one a human approved
        (by mistake, or before seeing more). Its live approval is withdrawn with it: the token is dead from the
        commit on, and ``create_draft`` with it is refused."""
        actor.require_human(Permission.APPROVALS_ISSUE, "approve or reject a proposal")
        note = check_reason(note, "note")
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            at = iso_utc(self.clock())
            ended = queries.end_dead_approvals(tx, at)
            row = self._proposal(tx, proposal_id, lock=True)
            approval = queries.approval_of_proposal(tx, proposal_id, lock=True)
            check_rejectable(row, approval)
            withdrawn = None
            if approval is not None and queries.end_approval(tx, approval["id"], "withdrawn"):
                withdrawn = approval["id"]
                audit.append(tx, actor=actor.audit_name, action="approval.withdrawn", subject=row["slug"],
                             details={"approval": withdrawn, "proposal": proposal_id})
            queries.decide_proposal(tx, proposal_id, status="rejected", by=actor.audit_name, at=at, note=note)
            audit.append(tx, actor=actor.audit_name, action="proposal.rejected", subject=row["slug"],
                         details={"proposal": proposal_id, "note": note, "withdrawn_approval": withdrawn})
            _audit_ended(tx, ended)
        return {"proposal": proposal_id, "status": "rejected", "withdrawn_approval": withdrawn}

    # The write itself --------------------------------------------------------------------------

    def create_draft(self, actor: Actor, proposal: Any, approval: Any, operation: Any) -> dict[str, Any]:
        actor.require(Permission.DRAFTS_CREATE)
        payload = parse_payload(proposal, text_max_bytes=self.text_max_bytes)
        if not isinstance(operation, str) or not OPERATION_PATTERN.fullmatch(operation):
            raise InvalidInput("operation is an id you choose per attempt: 1-128 of [A-Za-z0-9._:-].",
                               field="operation")
        given = approval.strip() if isinstance(approval, str) else ""
        digest = token_digest(given) if given and given.isascii() else ""
        try:
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                tx.serialize(_DRAFTS_TOPIC)
                return self._create(tx, actor, payload, digest, operation)
        except (ApprovalMissing, ApprovalExpired, ApprovalMismatch, ApprovalUsed, OperationConflict,
                DraftExists) as refusal:
            self._record_refusal(actor, refusal, payload, operation)
            raise
        except UniqueViolation as violation:  # another slug's draft committed between our check and insert
            violation.raise_unless(_DRAFT_SLUG)
            exists = draft_exists(payload.slug)
            self._record_refusal(actor, exists, payload, operation)
            raise exists from None

    def _create(self, tx: Tx, actor: Actor, payload: DraftPayload, digest: str, operation: str) -> dict[str, Any]:
        # A known operation answers first: a retry replays whatever its approval field holds. An operation is its
        # maker's: anyone else is refused before its content is compared (which would tell what it wrote).
        earlier = queries.operation(tx, operation)
        if earlier is not None:
            if earlier["principal_id"] is None or int(earlier["principal_id"]) != actor.principal_id:
                raise OperationConflict(
                    f"Operation {echo(operation)} is taken: another principal's call used it. Use a new operation id.",
                    operation=operation, next_step=NEW_OPERATION,
                )
            if earlier["kind"] != DRAFT_KIND or not digests_match(earlier["fingerprint"], payload.fingerprint):
                raise OperationConflict(
                    f"Operation {echo(operation)} was used for other content. Use a new operation id for new content.",
                    operation=operation, next_step=NEW_OPERATION,
                )
            audit.append(tx, actor=actor.audit_name, action="draft.replayed", subject=payload.slug,
                         details={"operation": operation})
            return {**json.loads(earlier["result"]), "replayed": True}
        row = queries.approval_by_digest(tx, digest) if digest else None
        if row is None or not digests_match(row["token_digest"], digest) or row["kind"] != DRAFT_KIND:
            raise ApprovalMissing(MISSING, next_step=PROPOSE)
        check_live(row, self.clock())
        if not row["approver_may_approve"]:  # the approver's current role and membership, not those it had
            raise revoked(row)
        if not digests_match(row["fingerprint"], payload.fingerprint):
            raise ApprovalMismatch(
                "This approval was given for other content: the slug, title and text must be exactly what the human "
                "approved, to the character. To write other content (or under another slug), file it as a new "
                "proposal with propose_draft.", approval=row["id"], next_step=PROPOSE)
        existing = queries.draft_by_slug(tx, payload.slug)
        if existing is not None:
            raise draft_exists(payload.slug, same_content=digests_match(existing["fingerprint"], payload.fingerprint))
        now = iso_utc(self.clock())
        queries.insert_draft(tx, slug=payload.slug, title=payload.title, text=payload.text,
                             fingerprint=payload.fingerprint, approval_id=row["id"], operation_id=operation,
                             created_by=actor.audit_name, at=now)
        if queries.consume_approval(tx, row["id"], operation_id=operation, at=now) != 1:
            raise ApprovalUsed("This approval was used already.", approval=row["id"], next_step=NOTHING)
        result = {"slug": payload.slug, "draft": True}
        queries.insert_operation(tx, operation, kind=DRAFT_KIND, fingerprint=payload.fingerprint, result=result,
                                 principal_id=actor.principal_id, at=now)
        audit.append(tx, actor=actor.audit_name, action="approval.consumed", subject=payload.slug,
                     details={"approval": row["id"], "operation": operation})
        audit.append(tx, actor=actor.audit_name, action="draft.created", subject=payload.slug,
                     details={"operation": operation, "fingerprint": payload.fingerprint})
        return {**result, "replayed": False}

    def _record_refusal(self, actor: Actor, refusal: ArmariusError, payload: DraftPayload, operation: str) -> None:
        """After the rollback: the refusal's code in the audit log; an expired or revoked token is marked so."""
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            if isinstance(refusal, ApprovalExpired):
                _audit_ended(tx, queries.end_dead_approvals(tx, iso_utc(self.clock())))
            audit.append(tx, actor=actor.audit_name, action="draft.refused", subject=payload.slug,
                         details={"code": refusal.code, "operation": operation, **_public(refusal.details)})

    # Drafts for humans -------------------------------------------------------------------------

    def drafts(self, actor: Actor) -> list[dict[str, Any]]:
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            return [_draft_view(row) for row in queries.drafts(tx)]

    def draft(self, actor: Actor, slug: str) -> dict[str, Any]:
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = queries.draft_by_slug(tx, slug)
        if row is None:
            raise NotFound(f"There is no draft {echo(slug)}.", slug=slug)
        return {**_draft_view(row), "text": row["text"]}

    def promote(self, actor: Actor, slug: str) -> dict[str, Any]:
        """A human turns a draft into a memory entry (revision 1 of a new slug); recorded.

        The entry, the draft's promoted mark and the audit event commit in one transaction: a failure
        anywhere leaves neither, and the promotion can simply be repeated.
        """
        if actor.kind is not Kind.HUMAN:
            raise NotAllowed("Only a human may promote a draft.")
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            row = queries.draft_by_slug(tx, slug, lock=True)
            if row is None:
                raise NotFound(f"There is no draft {echo(slug)}.", slug=slug)
            if row["promoted_revision"] is not None:
                raise Conflict(f"Draft {echo(slug)} was promoted already (entry revision {row['promoted_revision']}).",
                               slug=slug, revision=row["promoted_revision"])
            if row["title"] != row["title"].strip():  # a draft written before such titles were refused
                raise InvalidInput(f"Draft {echo(slug)}'s title has white space at its start or end, which an entry's "
                                   "title cannot keep: it is not promoted as other than approved.", field="title")
            written = self.memory.remember(actor, RememberRequest(
                slug=slug, title=row["title"], body=row["text"], expected_revision=0, confirm_distinct=True,
                reason=f"promoted from draft {slug}",
            ), within=tx)
            assert written["status"] == "written", written  # a new slug with confirm_distinct is always written
            queries.mark_promoted(tx, row["id"], by=actor.audit_name, at=iso_utc(self.clock()),
                                  revision=written["revision"])
            audit.append(tx, actor=actor.audit_name, action="draft.promoted", subject=slug,
                         details={"revision": written["revision"]})
        return {"slug": slug, "promoted": True, "revision": written["revision"]}

    # Helpers -----------------------------------------------------------------------------------

    def _proposal(self, tx: Tx, proposal_id: int, *, lock: bool = False) -> Row:
        row = queries.proposal(tx, proposal_id, lock=lock)
        if row is None:
            raise NotFound(f"There is no proposal {proposal_id} in this workspace.", proposal=proposal_id)
        return row


def _audit_ended(tx: Tx, ended: list[Row]) -> None:
    """One approval.expired or approval.revoked event per approval the sweep marked.

    The sweep (``queries.end_dead_approvals``) runs first in its transaction and these events are
    appended last: every drafts transaction locks approvals and proposals before the workspace's audit
    head, so that two of them never wait for each other (PostgreSQL).
    """
    for row in sorted(ended, key=lambda row: int(row["id"])):
        if row["outcome"] == "revoked":
            audit.append(tx, actor="system", action="approval.revoked", subject=row["slug"] or "",
                         details={"approval": row["id"], "proposal": row["proposal_id"],
                                  "approved_by": row["approved_by"]})
        else:
            audit.append(tx, actor="system", action="approval.expired", subject=row["slug"] or "",
                         details={"approval": row["id"], "proposal": row["proposal_id"],
                                  "expired_at": row["expires_at"]})


def _handoff_context(row: Row) -> str:
    return f"proposal:{row['id']}:{row['fingerprint']}"


def _public(details: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in details.items()
            if key in {"approval", "slug", "expired_at", "proposal", "reason"}}


def _proposal_view(row: Row, now: datetime) -> dict[str, Any]:
    return {**_proposal_item(row, now), "text": row["text"]}


def _proposal_item(row: Row, now: datetime) -> dict[str, Any]:
    """A proposal as a listing shows it: everything but its text."""
    state = proposal_state(row["status"], row["approval_outcome"], row["approval_expires_at"], now,
                           bool(row["content_drafted"]))
    approval = None if row["approval_id"] is None else {
        "approval": row["approval_id"], "outcome": row["approval_outcome"], "expires_at": row["approval_expires_at"],
        "collected": row["approval_collected_at"] is not None,
    }
    return {
        "proposal": row["id"], "slug": row["slug"], "title": row["title"],
        "fingerprint": row["fingerprint"], "fingerprint_short": short_fingerprint(row["fingerprint"]),
        "status": state.value, "proposed_by": row["proposed_by"], "created_at": row["created_at"],
        "decided_by": row["decided_by"], "decided_at": row["decided_at"], "note": row["decision_note"],
        "approval": approval,
    }



def _draft_view(row: Row) -> dict[str, Any]:
    return {
        "slug": row["slug"], "title": row["title"], "fingerprint": row["fingerprint"],
        "created_by": row["created_by"], "created_at": row["created_at"], "operation": row["operation_id"],
        "promoted_revision": row["promoted_revision"], "promoted_by": row["promoted_by"],
    }
