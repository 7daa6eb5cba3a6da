"""Permissions, the roles that bundle them, and what an agent may never hold (SPEC §1)."""

from __future__ import annotations

from enum import StrEnum


class Permission(StrEnum):
    MEMORY_READ = "memory.read"
    MEMORY_WRITE = "memory.write"
    MEMORY_CURATE = "memory.curate"
    MEMORY_MANAGE = "memory.manage"
    EVIDENCE_MANAGE = "evidence.manage"
    DRAFTS_CREATE = "drafts.create"
    REPAIRS_PROPOSE = "repairs.propose"
    RESEARCH_QUERY = "research.query"
    SESSIONS_MANAGE = "sessions.manage"
    SESSIONS_TAKEOVER = "sessions.takeover"
    APPROVALS_ISSUE = "approvals.issue"
    PRINCIPALS_MANAGE = "principals.manage"


class Role(StrEnum):
    READER = "reader"
    EDITOR = "editor"
    ADMIN = "admin"


class Kind(StrEnum):
    HUMAN = "human"
    AGENT = "agent"


_READER = frozenset({Permission.MEMORY_READ, Permission.RESEARCH_QUERY})
_EDITOR = _READER | {Permission.MEMORY_WRITE, Permission.DRAFTS_CREATE, Permission.REPAIRS_PROPOSE}
_HUMAN_EDITOR = _EDITOR | {Permission.MEMORY_CURATE, Permission.APPROVALS_ISSUE, Permission.SESSIONS_MANAGE}

ROLE_PERMISSIONS: dict[tuple[Kind, Role], frozenset[Permission]] = {
    (Kind.AGENT, Role.READER): _READER,
    (Kind.AGENT, Role.EDITOR): _EDITOR,
    (Kind.HUMAN, Role.READER): _READER,
    (Kind.HUMAN, Role.EDITOR): _HUMAN_EDITOR,
    (Kind.HUMAN, Role.ADMIN): frozenset(Permission),
}

#: Human authority: never held by an agent principal, whatever its role.
AGENT_FORBIDDEN = frozenset({
    Permission.MEMORY_CURATE,
    Permission.APPROVALS_ISSUE,
    Permission.MEMORY_MANAGE,
    Permission.EVIDENCE_MANAGE,
    Permission.PRINCIPALS_MANAGE,
    Permission.SESSIONS_MANAGE,
    Permission.SESSIONS_TAKEOVER,
})


def role_allowed(kind: Kind, role: Role) -> bool:
    return (kind, role) in ROLE_PERMISSIONS


def permissions_for(kind: Kind, role: Role) -> frozenset[Permission]:
    """The permissions of a role, evaluated afresh on every request."""
    granted = ROLE_PERMISSIONS.get((kind, role), frozenset())
    return granted - AGENT_FORBIDDEN if kind is Kind.AGENT else granted
