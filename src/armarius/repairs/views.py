"""How repairs are shown (to a model and to a person) and what their receipt holds."""

from __future__ import annotations

from typing import Any

from armarius.repairs.model import Status, TargetKind
from armarius.store import Row

#: The receipt file's format version.
RECEIPT_FORMAT = 1


def summary(row: Row) -> dict[str, Any]:
    """A repair in a listing (and in session_show): its state, never the alternatives' content."""
    return {
        "repair": row["id"], "session": row["session_id"], "status": row["status"],
        "reformulation_requested": row["reformulation_requested"], "comment": row["comment"],
        "chosen_option": row["chosen_option"], "applied_revision": row["applied_revision"],
        "activation_deferred": row["activation_deferred"], "published": row["status"] == Status.ACTIVE,
        "conflict": row["conflict"], "proposer": row["proposer"], "decided_by": row["decided_by"],
        "created_at": row["created_at"], "updated_at": row["updated_at"],
    }


def chosen(row: Row) -> dict[str, Any] | None:
    """The chosen alternative as stored (target, rationale, current and resulting content), if any."""
    return next((item for item in row["alternatives"] if item["option"] == row["chosen_option"]), None)


def outcome(row: Row) -> str:
    """What the repair's status means for the archive, in words: never a success unless it is active."""
    revision, status = row["applied_revision"], row["status"]
    if status == Status.REJECTED:
        return "All alternatives declined; nothing saved" + (
            ". A reformulation was requested." if row["reformulation_requested"] else ".")
    if status == Status.PENDING_ACTIVATION:
        deferred = " It was left pending on purpose." if row["activation_deferred"] else ""
        return (f"NOT a success: the correction is saved as revision {revision} but not activated, so search does "
                f"not find it yet.{deferred} Retry to activate it.")
    if status == Status.SUPERSEDED:
        return ("Superseded: the target changed after preparation; nothing was written." if revision is None else
                f"Superseded: the target changed after the saved correction (revision {revision}).")
    return {
        Status.PROPOSED: "Waiting for a human choice; nothing saved.",
        Status.APPLYING: "NOT applied yet: the choice is recorded, the evidence file write or its recovery is "
                         "still required (retry).",
        Status.ACTIVE: f"Applied: revision {revision} is the target's current revision.",
    }[Status(status)]


def next_step(row: Row) -> str:
    """The agent's next step."""
    if row["status"] == Status.PROPOSED:
        return "A human decides: choose one option, reject all, or ask for a reformulation. Check with repair_show."
    if row["status"] == Status.REJECTED and row["reformulation_requested"]:
        return ("Read the comment, then prepare a new proposal with repair_prepare (against the targets' current "
                "revisions, from repair_target) that answers it.")
    if row["status"] == Status.REJECTED:
        return "Nothing was changed; the archive stays as it was."
    if row["status"] in (Status.APPLYING, Status.PENDING_ACTIVATION):
        return "A human must retry (or finish) the application; nothing to do for you."
    if row["status"] == Status.SUPERSEDED:
        return "The target changed: read it again (repair_target); prepare a new proposal only if it is still wrong."
    return "Nothing to do: the correction is in the archive."


def event_view(event: Row) -> dict[str, Any]:
    return {"seq": event["seq"], "event": event["event"], "status": event["status"], "actor": event["actor"],
            "details": event["details"], "at": event["created_at"]}


def operation_view(operation: Row) -> dict[str, Any]:
    return {"id": operation["id"], "kind": operation["kind"], "attempts": operation["attempts"],
            "last_error": operation["last_error"], "created_at": operation["created_at"],
            "done_at": operation["done_at"]}


def full(row: Row, events: list[Row], operations: list[Row]) -> dict[str, Any]:
    """Everything about a repair: what repair_show answers."""
    view = summary(row)
    view.update(alternatives=row["alternatives"], outcome=outcome(row),
                history=[event_view(event) for event in events],
                pending_operations=[operation_view(operation) for operation in operations
                                    if operation["done_at"] is None],
                next_step=next_step(row))
    return view


def receipt(row: Row, events: list[Row], *, workspace: str, subject: str) -> dict[str, Any]:
    """The receipt: enough to review the decision without the database and without any transcript."""
    picked = chosen(row)
    result: dict[str, Any] | None = None
    if picked is not None:
        result = dict(picked["result"])
        if picked["target"]["kind"] == TargetKind.ENTRY:
            # A human chose the exact content: the entry's revision was curated with it.
            result["curated"] = row["applied_revision"] is not None
        elif row["result_fingerprint"] is not None:
            result["fingerprint"] = row["result_fingerprint"]
    return {
        "format": RECEIPT_FORMAT, "repair": row["id"], "workspace": workspace,
        "session": {"id": row["session_id"], "subject": subject},
        "conflict": row["conflict"], "proposer": row["proposer"], "proposed_at": row["created_at"],
        "alternatives": row["alternatives"],
        "decision": {
            "status": row["status"], "chosen_option": row["chosen_option"], "acting_principal": row["decided_by"],
            "reformulation_requested": row["reformulation_requested"], "comment": row["comment"],
        },
        "target": None if picked is None else {**picked["target"], "base_fingerprint": row["base_fingerprint"]},
        "applied_revision": row["applied_revision"],
        "result": result,
        "publication": {"status": row["status"], "published": row["status"] == Status.ACTIVE,
                        "activation_deferred": row["activation_deferred"], "outcome": outcome(row)},
        "history": [event_view(event) for event in events],
    }
