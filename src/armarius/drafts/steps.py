"""Where a proposal stands, and the one next step every drafts answer and refusal names.

A proposal's state is derived from its stored decision and its latest approval, at the moment of
asking: an approval past its lifetime is ``expired`` whether or not anything has marked it yet.
Every answer of ``proposal_status`` and every ``create_draft`` refusal carries ``next_step``, a
stable word for the step that works from there (the message says the same in words).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from armarius.errors import ApprovalExpired, ApprovalUsed, Conflict, DraftExists, echo
from armarius.store import Row

#: Wait: no human has decided yet; ask proposal_status again later.
WAIT = "wait_for_human"
#: Call proposal_status with the collection key: a live approval is waiting to be handed over.
COLLECT = "collect_approval"
#: Call create_draft with the approval just handed over, the exact content and a new operation id.
CREATE = "create_draft"
#: The approval is dead unused: a human must approve the proposal (or the content) again.
ASK_AGAIN = "ask_human_to_approve_again"
#: File the content as a new proposal (changed content, another slug, after a rejection).
PROPOSE = "propose_draft"
#: Repeat with a new operation id (the one given was used for other content).
NEW_OPERATION = "new_operation_id"
#: Nothing is left to do: the draft was created with this approval.
NOTHING = "none"

NEXT_STEPS = (WAIT, COLLECT, CREATE, ASK_AGAIN, PROPOSE, NEW_OPERATION, NOTHING)


class ProposalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EXPIRED = "expired"
    DRAFTED = "drafted"
    REJECTED = "rejected"


def proposal_state(stored_status: str, approval_outcome: str | None, expires_at: str | None,
                   now: datetime, content_drafted: bool = False) -> ProposalState:
    """rejected as stored; drafted once a draft of exactly its content exists (``content_drafted``: written
    with its own approval or with another, such as a file's); otherwise pending as stored, and an approved
    proposal by its latest approval: live (approved), used (drafted), or dead unused (expired: its lifetime
    passed, or its approver may no longer approve; a human may approve again)."""
    if content_drafted and stored_status != "rejected":
        return ProposalState.DRAFTED
    if stored_status != "approved" or approval_outcome is None:
        return ProposalState(stored_status)
    if approval_outcome == "consumed":
        return ProposalState.DRAFTED
    if approval_outcome == "issued" and expires_at is not None and datetime.fromisoformat(expires_at) > now:
        return ProposalState.APPROVED
    return ProposalState.EXPIRED


# What each refusal and answer says ------------------------------------------------------------

MISSING = ("No usable approval was given. A human must approve exactly this content first: file it with "
           "propose_draft and collect the approval with proposal_status (if you filed it already, call "
           "proposal_status with your collection_key).")


def draft_exists(slug: str, *, same_content: bool = False) -> DraftExists:
    if same_content:
        return DraftExists(
            f"A draft {echo(slug)} with exactly this content exists already (written with another approval): nothing "
            "is left to do for this content. This approval stays unused.", slug=slug, next_step=NOTHING)
    return DraftExists(
        f"A draft {echo(slug)} exists already; drafts are never overwritten. An approval is bound to its slug, so this "
        "one cannot write another slug: file the content under a new slug as a new proposal (propose_draft) and "
        "use the approval a human gives for that.", slug=slug, next_step=PROPOSE)


def check_live(row: Row, now: datetime) -> None:
    """Refuse an approval that is used, superseded, withdrawn, past its lifetime or marked revoked, saying what
    works instead. (Whether its approver may still approve is the caller's to check: it needs the store.)"""
    proposal = row["proposal_id"]
    if row["outcome"] == "consumed":
        raise ApprovalUsed(
            f"This approval was used already: it created the draft {row['slug']!r}. Each approval creates one draft. "
            "If that was your earlier call, the draft is written and nothing is left to do (repeat that call with "
            "its operation id to see its answer); for other content, file a new proposal with propose_draft.",
            approval=row["id"], slug=row["slug"], next_step=NOTHING)
    if row["outcome"] == "superseded":
        raise ApprovalExpired(
            f"A human approved proposal {proposal} again, which replaced this approval: it no longer works. Call "
            f"proposal_status for proposal {proposal} with your collection_key to receive the new approval.",
            approval=row["id"], proposal=proposal, reason="superseded", next_step=COLLECT)
    if row["outcome"] == "withdrawn":
        raise ApprovalExpired(
            f"A human rejected proposal {proposal} after approving it, which withdrew this approval: it no longer "
            "works. Do not create the draft; call proposal_status for the human's note, reformulate the content and "
            "file it as a new proposal with propose_draft.",
            approval=row["id"], proposal=proposal, reason="withdrawn", next_step=PROPOSE)
    if row["outcome"] == "expired" or datetime.fromisoformat(row["expires_at"]) <= now:
        again = ask_again(proposal) if proposal else "Ask the human for a new approval of exactly this content."
        raise ApprovalExpired(f"This approval expired at {row['expires_at']} without being used. {again}",
                              approval=row["id"], proposal=proposal, expired_at=row["expires_at"],
                              reason="expired", next_step=ASK_AGAIN)
    if row["outcome"] == "revoked":
        raise revoked(row)


def revoked(row: Row) -> ApprovalExpired:
    """The refusal of an approval whose approver may no longer approve in this workspace (another role, or no
    longer a member): it stopped working with that, whether or not it was handed over."""
    proposal = row["proposal_id"]
    again = (ask_again(proposal) if proposal else
             "Ask a human who may approve in this workspace for a new approval of exactly this content.")
    return ApprovalExpired(
        f"The human who gave this approval ({row['approved_by']}) may no longer approve in this workspace, so it no "
        f"longer works. {again}", approval=row["id"], proposal=proposal, reason="revoked", next_step=ASK_AGAIN)


def check_approvable(row: Row, previous: Row | None) -> None:
    proposal_id = row["id"]
    if row["status"] == "rejected":
        raise Conflict(f"Proposal {proposal_id} was rejected; it cannot be approved. Changed content comes as a new "
                       "proposal.", proposal=proposal_id, status="rejected")
    if previous is not None and previous["outcome"] == "consumed":
        raise Conflict(f"Proposal {proposal_id}'s approval was used: the draft {row['slug']!r} exists. There is "
                       "nothing left to approve.", proposal=proposal_id, status=ProposalState.DRAFTED.value)
    if row["content_drafted"]:
        raise Conflict(f"The draft {row['slug']!r} exists with exactly the content of proposal {proposal_id} (written "
                       "with another approval). There is nothing left to approve.",
                       proposal=proposal_id, status=ProposalState.DRAFTED.value)


def check_rejectable(row: Row, approval: Row | None) -> None:
    """A proposal may be rejected until a draft is made of it (an approval it has, if live, is withdrawn)."""
    proposal_id = row["id"]
    if row["status"] == "rejected":
        raise Conflict(f"Proposal {proposal_id} is rejected already.", proposal=proposal_id, status="rejected")
    if approval is not None and approval["outcome"] == "consumed":
        raise Conflict(f"Proposal {proposal_id}'s approval was used: the draft {row['slug']!r} exists, and rejecting "
                       "the proposal would not undo it.",
                       proposal=proposal_id, status=ProposalState.DRAFTED.value)
    if row["content_drafted"]:
        raise Conflict(f"The draft {row['slug']!r} exists with exactly the content of proposal {proposal_id} (written "
                       "with another approval), and rejecting the proposal would not undo it.",
                       proposal=proposal_id, status=ProposalState.DRAFTED.value)


def withdrawal_note(rejection: dict[str, Any]) -> str:
    """What a rejection tells the human who made it about the approval it withdrew (CLI and page alike)."""
    withdrawn = rejection["withdrawn_approval"]
    return "" if withdrawn is None else f" Its approval {withdrawn} is withdrawn: the token no longer works."


def status_instruction(state: ProposalState, row: Row, approval_outcome: str | None = None) -> dict[str, Any]:
    proposal_id = row["id"]
    if state is ProposalState.PENDING:
        return {"next_step": WAIT, "instruction": "Waiting for a human to review it. Call proposal_status later."}
    if state is ProposalState.REJECTED:
        return {"note": row["decision_note"], "next_step": PROPOSE, "instruction": (
            "A human rejected this proposal (see note). Do not create the draft; reformulate it and file it as a "
            "new proposal with propose_draft.")}
    if state is ProposalState.DRAFTED:
        how = "The approval was used" if approval_outcome == "consumed" else (
            "Exactly this content was drafted with another approval")
        return {"next_step": NOTHING, "instruction": (
            f"{how}: the draft {row['slug']!r} exists. Nothing is left to do for this proposal.")}
    if approval_outcome == "revoked":
        return {"next_step": ASK_AGAIN, "instruction": (
            "The human who approved it may no longer approve in this workspace, so the approval no longer works. "
            f"Do not call create_draft with it. {ask_again(proposal_id)}")}
    return {"next_step": ASK_AGAIN,
            "instruction": f"The approval expired unused. Do not call create_draft with it. {ask_again(proposal_id)}"}


def ask_again(proposal_id: int) -> str:
    """The one way back from an approval that cannot be used: the human approves the proposal again."""
    return (f"Ask a human to approve proposal {proposal_id} again (armarius approve --proposal {proposal_id}), "
            "then call proposal_status with your collection_key to receive the new approval.")
