"""Draft use cases: propose, approve (humans only), collect, create with the approval, promote.

``create_draft`` runs in one transaction: the operation id is looked up, the approval is checked
(exists in this workspace, same fingerprint, not expired at processing time, unused), the draft is
inserted and the token marked used, then everything commits together. Any failure rolls all of it
back: never a used token without a draft, never a draft with a token still usable. A refusal is
then recorded in the audit log in a transaction of its own, with its code and never the token.
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
)
from armarius.memory.service import MemoryService, RememberRequest
from armarius.store import Database, Row, Tx, UniqueViolation, iso_utc
from armarius.textview import short_fingerprint

OPERATION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_DRAFTS_TOPIC = 3001


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class IssuedApproval:
    """An approval just issued: the one moment its token exists in the clear."""

    approval_id: int
    token: str = field(repr=False)
    fingerprint: str
    expires_at: str
    proposal_id: int | None


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
        """A proposal in full, for a reviewer."""
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            return _proposal_view(self._proposal(tx, proposal_id))

    def proposals(self, actor: Actor, status: str | None = "pending") -> list[dict[str, Any]]:
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            return [_proposal_view(row) for row in queries.proposals(tx, status)]

    def proposal_status(self, actor: Actor, proposal_id: int, collection_key: str | None = None) -> dict[str, Any]:
        """The proposer's view; with the collection key, an approved token is handed over once."""
        actor.require(Permission.DRAFTS_CREATE)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            row = queries.proposal(tx, proposal_id, lock=True)
            if row is None or row["proposer_id"] != actor.principal_id:
                raise NotFound(f"You have no proposal {proposal_id} in this workspace.", proposal=proposal_id)
            result: dict[str, Any] = {"proposal": proposal_id, "status": row["status"], "slug": row["slug"]}
            if row["status"] == "rejected":
                result["note"] = row["decision_note"]
                result["instruction"] = "A human rejected this proposal. Do not create the draft; reformulate it."
            approval = queries.approval_of_proposal(tx, proposal_id, lock=True) if row["status"] == "approved" else None
            if approval is None:
                return result
            result.update(approval_outcome=self._outcome(approval), expires_at=approval["expires_at"])
            if approval["sealed_token"] is None or result["approval_outcome"] != "issued":
                result["collected"] = approval["sealed_token"] is None
                return result
            if collection_key is None:
                result["instruction"] = "Approved. Call proposal_status again with your collection_key to collect it."
                return result
            token = handoff.open_sealed(approval["sealed_token"], collection_key, _handoff_context(row))
            queries.collect_sealed_token(tx, approval["id"])
            audit.append(tx, actor=actor.audit_name, action="approval.collected", subject=row["slug"],
                         details={"proposal": proposal_id, "approval": approval["id"]})
        result.update(approval=token, collected=True, instruction=(
            "Approved for exactly this slug, title and text. Call create_draft with them unchanged, this "
            "approval and a new operation id before expires_at. The approval works once."))
        return result

    # Human decisions ---------------------------------------------------------------------------

    def approve(self, actor: Actor, *, proposal_id: int | None = None, payload: Any = None,
                reviewed_fingerprint: str | None = None) -> IssuedApproval:
        """Issue a single-use approval for exactly one payload: a stored proposal's, or one given here.

        ``reviewed_fingerprint`` is the fingerprint of what the human was shown; anything else is refused.
        """
        _require_approver(actor)
        issued, expires = self.clock(), self.clock() + self.approval_ttl
        token = new_token()
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            row = None
            if proposal_id is not None:
                row = self._proposal(tx, proposal_id, lock=True)
                if row["status"] != "pending":
                    raise Conflict(f"Proposal {proposal_id} is {row['status']} already.", proposal=proposal_id,
                                   status=row["status"])
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
            approval_id = queries.insert_approval(
                tx, kind=DRAFT_KIND, token_digest=token_digest(token), fingerprint=content.fingerprint,
                proposal_id=proposal_id, approver_id=actor.principal_id, approved_by=actor.audit_name,
                issued_at=iso_utc(issued), expires_at=iso_utc(expires), sealed_token=sealed,
            )
            if proposal_id is not None:
                queries.decide_proposal(tx, proposal_id, status="approved", by=actor.audit_name, at=iso_utc(issued),
                                        note=None)
            audit.append(tx, actor=actor.audit_name, action="approval.issued", subject=content.slug, details={
                "approval": approval_id, "proposal": proposal_id, "fingerprint": content.fingerprint,
                "expires_at": iso_utc(expires),
            })
        return IssuedApproval(approval_id, token, content.fingerprint, iso_utc(expires), proposal_id)

    def reject(self, actor: Actor, proposal_id: int, note: str | None = None) -> dict[str, Any]:
        _require_approver(actor)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            row = self._proposal(tx, proposal_id, lock=True)
            if row["status"] != "pending":
                raise Conflict(f"Proposal {proposal_id} is {row['status']} already.", proposal=proposal_id,
                               status=row["status"])
            queries.decide_proposal(tx, proposal_id, status="rejected", by=actor.audit_name,
                                    at=iso_utc(self.clock()), note=note)
            audit.append(tx, actor=actor.audit_name, action="proposal.rejected", subject=row["slug"],
                         details={"proposal": proposal_id, "note": note})
        return {"proposal": proposal_id, "status": "rejected"}

    # The write itself --------------------------------------------------------------------------

    def create_draft(self, actor: Actor, proposal: Any, approval: Any, operation: Any) -> dict[str, Any]:
        actor.require(Permission.DRAFTS_CREATE)
        payload = parse_payload(proposal, text_max_bytes=self.text_max_bytes)
        if not isinstance(operation, str) or not OPERATION_PATTERN.fullmatch(operation):
            raise InvalidInput("operation is an id you choose per attempt: 1-128 of [A-Za-z0-9._:-].",
                               field="operation")
        if not isinstance(approval, str) or not approval.strip():
            self._record_refusal(actor, ApprovalMissing(_MISSING), payload, operation, None)
            raise ApprovalMissing(_MISSING)
        digest = token_digest(approval.strip()) if approval.strip().isascii() else ""
        try:
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                tx.serialize(_DRAFTS_TOPIC)
                return self._create(tx, actor, payload, digest, operation)
        except (ApprovalMissing, ApprovalExpired, ApprovalMismatch, ApprovalUsed, OperationConflict,
                DraftExists) as refusal:
            self._record_refusal(actor, refusal, payload, operation, digest)
            raise
        except UniqueViolation:  # another slug's draft committed between our check and insert
            exists = DraftExists(_draft_exists(payload.slug), slug=payload.slug)
            self._record_refusal(actor, exists, payload, operation, digest)
            raise exists from None

    def _create(self, tx: Tx, actor: Actor, payload: DraftPayload, digest: str, operation: str) -> dict[str, Any]:
        earlier = queries.operation(tx, operation)
        if earlier is not None:
            if earlier["kind"] != DRAFT_KIND or not digests_match(earlier["fingerprint"], payload.fingerprint):
                raise OperationConflict(
                    f"Operation {operation!r} was used for other content. Use a new operation id for new content.",
                    operation=operation,
                )
            audit.append(tx, actor=actor.audit_name, action="draft.replayed", subject=payload.slug,
                         details={"operation": operation})
            return {**json.loads(earlier["result"]), "replayed": True}
        row = queries.approval_by_digest(tx, digest) if digest else None
        if row is None or not digests_match(row["token_digest"], digest) or row["kind"] != DRAFT_KIND:
            raise ApprovalMissing(_MISSING)
        if row["outcome"] == "consumed":
            raise ApprovalUsed("This approval was used already. Each approval creates one draft; ask a human for a "
                               "new one.", approval=row["id"])
        if row["outcome"] == "expired" or datetime.fromisoformat(row["expires_at"]) <= self.clock():
            raise ApprovalExpired("This approval expired. Ask a human to approve the proposal again.",
                                  approval=row["id"], expired_at=row["expires_at"])
        if not digests_match(row["fingerprint"], payload.fingerprint):
            raise ApprovalMismatch(
                "This approval was given for other content: the slug, title and text must be exactly what the human "
                "approved, to the character. File a new proposal for changed content.", approval=row["id"])
        if queries.draft_by_slug(tx, payload.slug) is not None:
            raise DraftExists(_draft_exists(payload.slug), slug=payload.slug)
        now = iso_utc(self.clock())
        queries.insert_draft(tx, slug=payload.slug, title=payload.title, text=payload.text,
                             fingerprint=payload.fingerprint, approval_id=row["id"], operation_id=operation,
                             created_by=actor.audit_name, at=now)
        if queries.consume_approval(tx, row["id"], operation_id=operation, at=now) != 1:
            raise ApprovalUsed("This approval was used already.", approval=row["id"])
        result = {"slug": payload.slug, "draft": True}
        queries.insert_operation(tx, operation, kind=DRAFT_KIND, fingerprint=payload.fingerprint, result=result,
                                 at=now)
        audit.append(tx, actor=actor.audit_name, action="approval.consumed", subject=payload.slug,
                     details={"approval": row["id"], "operation": operation})
        audit.append(tx, actor=actor.audit_name, action="draft.created", subject=payload.slug,
                     details={"operation": operation, "fingerprint": payload.fingerprint})
        return {**result, "replayed": False}

    def _record_refusal(self, actor: Actor, refusal: ArmariusError, payload: DraftPayload, operation: str,
                        digest: str | None) -> None:
        """After the rollback: the refusal's code in the audit log; an expired token is marked expired."""
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            if isinstance(refusal, ApprovalExpired) and digest:
                row = queries.approval_by_digest(tx, digest)
                if row is not None and queries.expire_approval(tx, row["id"]):
                    audit.append(tx, actor="system", action="approval.expired", subject=payload.slug,
                                 details={"approval": row["id"]})
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
            raise NotFound(f"There is no draft {slug!r}.", slug=slug)
        return {**_draft_view(row), "text": row["text"]}

    def promote(self, actor: Actor, slug: str) -> dict[str, Any]:
        """A human turns a draft into a memory entry (revision 1 of a new slug); recorded."""
        if actor.kind is not Kind.HUMAN:
            raise NotAllowed("Only a human may promote a draft.")
        draft = self.draft(actor, slug)
        if draft["promoted_revision"] is not None:
            raise Conflict(f"Draft {slug!r} was promoted already.", slug=slug)
        written = self.memory.remember(actor, RememberRequest(
            slug=slug, title=draft["title"], body=draft["text"], expected_revision=0, confirm_distinct=True,
            reason=f"promoted from draft {slug}",
        ))
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            row = queries.draft_by_slug(tx, slug, lock=True)
            assert row is not None
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

    def _outcome(self, approval: Row) -> str:
        if approval["outcome"] == "issued" and datetime.fromisoformat(approval["expires_at"]) <= self.clock():
            return "expired"
        return str(approval["outcome"])


_MISSING = ("No usable approval was given. A human must approve exactly this content first: file it with "
            "propose_draft and collect the approval with proposal_status.")


def _draft_exists(slug: str) -> str:
    return f"A draft {slug!r} exists already; drafts are never overwritten. Choose another slug."


def _require_approver(actor: Actor) -> None:
    if actor.kind is not Kind.HUMAN:
        raise NotAllowed("Only a human may approve or reject a proposal.", permission=Permission.APPROVALS_ISSUE.value)
    actor.require(Permission.APPROVALS_ISSUE)


def _handoff_context(row: Row) -> str:
    return f"proposal:{row['id']}:{row['fingerprint']}"


def _public(details: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in details.items() if key in {"approval", "slug", "expired_at"}}


def _proposal_view(row: Row) -> dict[str, Any]:
    return {
        "proposal": row["id"], "slug": row["slug"], "title": row["title"], "text": row["text"],
        "fingerprint": row["fingerprint"], "fingerprint_short": short_fingerprint(row["fingerprint"]),
        "status": row["status"], "proposed_by": row["proposed_by"], "created_at": row["created_at"],
        "decided_by": row["decided_by"], "decided_at": row["decided_at"], "note": row["decision_note"],
    }


def _draft_view(row: Row) -> dict[str, Any]:
    return {
        "slug": row["slug"], "title": row["title"], "fingerprint": row["fingerprint"],
        "created_by": row["created_by"], "created_at": row["created_at"], "operation": row["operation_id"],
        "promoted_revision": row["promoted_revision"], "promoted_by": row["promoted_by"],
    }
