"""Drafts' SQL: proposals, approvals (token digests only), drafts and operation replay."""

from __future__ import annotations

import json
from typing import Any, Literal

from armarius.auth.permissions import ROLE_PERMISSIONS, Kind, Permission
from armarius.store import Row, Tx


def _content_drafted(alias: str) -> str:
    """Whether a draft of exactly the proposal's content (its slug and fingerprint) exists, whatever approval
    wrote it: a proposal whose content was drafted through another approval (a file's) is drafted too."""
    return (f"EXISTS (SELECT 1 FROM drafts d WHERE d.workspace_id = {alias}.workspace_id AND d.slug = {alias}.slug "
            f"AND d.fingerprint = {alias}.fingerprint)")


#: The roles whose holder may issue approvals: human principals only (an agent never holds approvals.issue).
_APPROVING_ROLES = tuple(sorted(role.value for (kind, role), granted in ROLE_PERMISSIONS.items()
                                if kind is Kind.HUMAN and Permission.APPROVALS_ISSUE in granted))
#: An approval's approver may approve in its workspace now: a member whose current role holds approvals.issue.
_APPROVER_MAY_APPROVE = (
    "EXISTS (SELECT 1 FROM memberships m JOIN principals r ON r.id = m.principal_id "
    "WHERE m.workspace_ref = approvals.workspace_id AND m.principal_id = approvals.approver_id "
    f"AND r.kind = 'human' AND m.role IN ({', '.join('?' for _ in _APPROVING_ROLES)}))"
)

_PROPOSAL_COLUMNS = (
    "id, slug, title, text, fingerprint, proposer_id, proposed_by, collection_public_key, status, decided_by, "
    f"decided_at, decision_note, created_at, {_content_drafted('draft_proposals')} AS content_drafted"
)
_APPROVAL_COLUMNS = (
    "id, kind, token_digest, fingerprint, slug, proposal_id, approver_id, approved_by, issued_at, expires_at, "
    "outcome, used_at, operation_id, sealed_token, collected_at"
)
#: A proposal with the state of its latest approval (NULLs when it has none).
_PROPOSAL_WITH_APPROVAL = (
    "SELECT p.id, p.slug, p.title, p.text, p.fingerprint, p.proposer_id, p.proposed_by, p.collection_public_key, "
    "p.status, p.decided_by, p.decided_at, p.decision_note, p.created_at, a.id AS approval_id, "
    "a.outcome AS approval_outcome, a.expires_at AS approval_expires_at, a.collected_at AS approval_collected_at, "
    f"{_content_drafted('p')} AS content_drafted "
    "FROM draft_proposals p LEFT JOIN approvals a ON a.workspace_id = p.workspace_id AND a.id = "
    "(SELECT max(l.id) FROM approvals l WHERE l.workspace_id = p.workspace_id AND l.proposal_id = p.id) "
    "WHERE p.workspace_id = ?"
)
_DRAFT_COLUMNS = (
    "id, slug, title, text, fingerprint, approval_id, operation_id, created_by, created_at, promoted_by, "
    "promoted_at, promoted_revision"
)


def _lock(tx: Tx) -> str:
    return " FOR UPDATE" if tx.dialect == "postgresql" else ""


def insert_proposal(tx: Tx, *, slug: str, title: str, text: str, fingerprint: str, proposer_id: int,
                    proposed_by: str, public_key: str | None, at: str) -> int:
    row = tx.one(
        "INSERT INTO draft_proposals (workspace_id, slug, title, text, fingerprint, proposer_id, proposed_by, "
        "collection_public_key, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?) RETURNING id",
        (tx.require_workspace(), slug, title, text, fingerprint, proposer_id, proposed_by, public_key, at),
    )
    assert row is not None
    return int(row["id"])


def proposal(tx: Tx, proposal_id: int, *, lock: bool = False) -> Row | None:
    return tx.one(
        f"SELECT {_PROPOSAL_COLUMNS} FROM draft_proposals WHERE workspace_id = ? AND id = ?"
        f"{_lock(tx) if lock else ''}",
        (tx.require_workspace(), proposal_id),
    )


def proposals(tx: Tx, stored_status: str | None) -> list[Row]:
    """Proposals (with a stored status, or all) and their latest approval, oldest first."""
    if stored_status is None:
        return tx.all(f"{_PROPOSAL_WITH_APPROVAL} ORDER BY p.id", (tx.require_workspace(),))
    return tx.all(f"{_PROPOSAL_WITH_APPROVAL} AND p.status = ? ORDER BY p.id",
                  (tx.require_workspace(), stored_status))


#: What a listing of proposals shows: a proposal without its text, and the state of its latest approval.
_PROPOSAL_LISTING = (
    "SELECT p.id, p.slug, p.title, p.fingerprint, p.proposed_by, p.status, p.decided_by, p.decided_at, "
    "p.decision_note, p.created_at, a.id AS approval_id, a.outcome AS approval_outcome, "
    "a.expires_at AS approval_expires_at, a.collected_at AS approval_collected_at, "
    f"{_content_drafted('p')} AS content_drafted "
    "FROM draft_proposals p LEFT JOIN approvals a ON a.workspace_id = p.workspace_id AND a.id = "
    "(SELECT max(l.id) FROM approvals l WHERE l.workspace_id = p.workspace_id AND l.proposal_id = p.id) "
    "WHERE p.workspace_id = ?"
)
#: A proposal's state (steps.proposal_state) as a condition on its stored status and latest approval, at a time.
_LIVE = "(a.outcome = 'issued' AND a.expires_at > ?)"
_DRAFTED = _content_drafted("p")
_STATE_CONDITIONS = {
    "pending": (f"p.status = 'pending' AND NOT {_DRAFTED}", 0),
    "rejected": ("p.status = 'rejected'", 0),
    "approved": (f"p.status = 'approved' AND (a.outcome IS NULL OR {_LIVE}) AND NOT {_DRAFTED}", 1),
    "drafted": (f"((p.status = 'approved' AND a.outcome = 'consumed') OR (p.status <> 'rejected' AND {_DRAFTED}))", 0),
    "expired": (f"p.status = 'approved' AND a.outcome <> 'consumed' AND NOT {_LIVE} AND NOT {_DRAFTED}", 1),
}


def proposals_page(tx: Tx, *, state: str | None, now: str, after: int | None, newest_first: bool, limit: int,
                   contains: str | None) -> list[Row]:
    """Proposals in one state at ``now`` (or all), by id (oldest or newest first), after the cursor id; without
    their text."""
    sql, params = _PROPOSAL_LISTING, list[Any]([tx.require_workspace()])
    if state is not None:
        condition, times = _STATE_CONDITIONS[state]
        sql, params = f"{sql} AND {condition}", [*params, *[now] * times]
    if contains:
        sql = (f"{sql} AND ({_contains(tx, 'p.slug')} OR {_contains(tx, 'p.title')} "
               f"OR {_contains(tx, 'p.proposed_by')})")
        params += [contains.lower()] * 3
    if after is not None:
        sql, params = f"{sql} AND p.id {'<' if newest_first else '>'} ?", [*params, after]
    return tx.all(f"{sql} ORDER BY p.id {'DESC' if newest_first else ''} LIMIT ?", (*params, limit))


def pending_summary(tx: Tx) -> Row:
    """How many proposals are pending (count) and when the oldest was filed (oldest_at), through
    draft_proposals_status; one whose exact content was drafted through another approval waits no more."""
    row = tx.one("SELECT count(*) AS count, min(p.created_at) AS oldest_at FROM draft_proposals p "
                 f"WHERE p.workspace_id = ? AND p.status = 'pending' AND NOT {_DRAFTED}", (tx.require_workspace(),))
    assert row is not None
    return row


def _contains(tx: Tx, column: str) -> str:
    """A condition: the column, lowercased, contains the (lowercased) parameter as it is (no pattern syntax)."""
    return f"instr(lower({column}), ?) > 0" if tx.dialect == "sqlite" else f"strpos(lower({column}), ?) > 0"


def proposal_with_approval(tx: Tx, proposal_id: int) -> Row | None:
    return tx.one(f"{_PROPOSAL_WITH_APPROVAL} AND p.id = ?", (tx.require_workspace(), proposal_id))


def decide_proposal(tx: Tx, proposal_id: int, *, status: str, by: str, at: str, note: str | None) -> None:
    tx.execute(
        "UPDATE draft_proposals SET status = ?, decided_by = ?, decided_at = ?, decision_note = ? "
        "WHERE workspace_id = ? AND id = ?",
        (status, by, at, note, tx.require_workspace(), proposal_id),
    )


def insert_approval(tx: Tx, *, kind: str, token_digest: str, fingerprint: str, slug: str, proposal_id: int | None,
                    approver_id: int, approved_by: str, issued_at: str, expires_at: str,
                    sealed_token: str | None) -> int:
    row = tx.one(
        "INSERT INTO approvals (workspace_id, kind, token_digest, fingerprint, slug, proposal_id, approver_id, "
        "approved_by, issued_at, expires_at, outcome, sealed_token) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'issued', ?) RETURNING id",
        (tx.require_workspace(), kind, token_digest, fingerprint, slug, proposal_id, approver_id, approved_by,
         issued_at, expires_at, sealed_token),
    )
    assert row is not None
    return int(row["id"])


def approval_by_digest(tx: Tx, token_digest: str) -> Row | None:
    """The approval a token digest names in this workspace, locked for the check-then-consume, with whether its
    approver may approve here now (``approver_may_approve``: the current role and membership, not the old ones)."""
    return tx.one(
        f"SELECT {_APPROVAL_COLUMNS}, {_APPROVER_MAY_APPROVE} AS approver_may_approve FROM approvals "
        f"WHERE workspace_id = ? AND token_digest = ?{_lock(tx)}",
        (*_APPROVING_ROLES, tx.require_workspace(), token_digest),
    )


def approval_of_proposal(tx: Tx, proposal_id: int, *, lock: bool = False) -> Row | None:
    return tx.one(
        f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE workspace_id = ? AND proposal_id = ? "
        f"ORDER BY id DESC LIMIT 1{_lock(tx) if lock else ''}",
        (tx.require_workspace(), proposal_id),
    )


def consume_approval(tx: Tx, approval_id: int, *, operation_id: str, at: str) -> int:
    """Mark the token used; returns 1 only if it was still unused."""
    return tx.execute(
        "UPDATE approvals SET outcome = 'consumed', used_at = ?, operation_id = ?, sealed_token = NULL "
        "WHERE workspace_id = ? AND id = ? AND outcome = 'issued'",
        (at, operation_id, tx.require_workspace(), approval_id),
    )


def end_dead_approvals(tx: Tx, now: str) -> list[Row]:
    """Mark every live approval of the workspace that can no longer work as such, its sealed copy gone: expired
    (its lifetime has passed), else revoked (its approver may no longer approve here: another role, or no
    membership). The rows marked, with their new outcome."""
    return tx.all(
        "UPDATE approvals SET outcome = CASE WHEN expires_at <= ? THEN 'expired' ELSE 'revoked' END, "
        "sealed_token = NULL "
        f"WHERE workspace_id = ? AND outcome = 'issued' AND (expires_at <= ? OR NOT {_APPROVER_MAY_APPROVE}) "
        "RETURNING id, slug, proposal_id, expires_at, approved_by, outcome",
        (now, tx.require_workspace(), now, *_APPROVING_ROLES),
    )


def end_approval(tx: Tx, approval_id: int, outcome: Literal["superseded", "withdrawn"]) -> int:
    """A human approved the same proposal again (``superseded``) or rejected it (``withdrawn``): the live token
    is dead and its sealed copy goes."""
    return tx.execute(
        "UPDATE approvals SET outcome = ?, sealed_token = NULL "
        "WHERE workspace_id = ? AND id = ? AND outcome = 'issued'",
        (outcome, tx.require_workspace(), approval_id),
    )


def mark_collected(tx: Tx, approval_id: int, *, at: str) -> int:
    """Record the first hand-over (1) or nothing (0: handed over before). The sealed copy stays."""
    return tx.execute(
        "UPDATE approvals SET collected_at = ? WHERE workspace_id = ? AND id = ? AND collected_at IS NULL",
        (at, tx.require_workspace(), approval_id),
    )


def operation(tx: Tx, operation_id: str) -> Row | None:
    """An operation of the workspace with the principal that made it (NULL: made before operations had one,
    and no draft names its maker)."""
    return tx.one(
        "SELECT kind, fingerprint, result, principal_id FROM operations WHERE workspace_id = ? AND operation_id = ?",
        (tx.require_workspace(), operation_id),
    )


def insert_operation(tx: Tx, operation_id: str, *, kind: str, fingerprint: str, result: dict[str, Any],
                     principal_id: int, at: str) -> None:
    tx.execute(
        "INSERT INTO operations (workspace_id, operation_id, kind, fingerprint, result, principal_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (tx.require_workspace(), operation_id, kind, fingerprint, json.dumps(result, sort_keys=True), principal_id,
         at),
    )


def draft_by_slug(tx: Tx, slug: str, *, lock: bool = False) -> Row | None:
    return tx.one(
        f"SELECT {_DRAFT_COLUMNS} FROM drafts WHERE workspace_id = ? AND slug = ?{_lock(tx) if lock else ''}",
        (tx.require_workspace(), slug),
    )


def insert_draft(tx: Tx, *, slug: str, title: str, text: str, fingerprint: str, approval_id: int,
                 operation_id: str, created_by: str, at: str) -> None:
    tx.execute(
        "INSERT INTO drafts (workspace_id, slug, title, text, fingerprint, approval_id, operation_id, created_by, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (tx.require_workspace(), slug, title, text, fingerprint, approval_id, operation_id, created_by, at),
    )


def drafts(tx: Tx) -> list[Row]:
    return tx.all(f"SELECT {_DRAFT_COLUMNS} FROM drafts WHERE workspace_id = ? ORDER BY slug",
                  (tx.require_workspace(),))


def mark_promoted(tx: Tx, draft_id: int, *, by: str, at: str, revision: int) -> int:
    return tx.execute(
        "UPDATE drafts SET promoted_by = ?, promoted_at = ?, promoted_revision = ? "
        "WHERE workspace_id = ? AND id = ? AND promoted_at IS NULL",
        (by, at, revision, tx.require_workspace(), draft_id),
    )
