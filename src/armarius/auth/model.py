"""Identity data: workspaces, principals, tokens and the acting principal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from armarius.auth.permissions import AGENT_FORBIDDEN, Kind, Permission, Role
from armarius.errors import NotAllowed


@dataclass(frozen=True)
class Workspace:
    id: int
    name: str
    created_at: str


@dataclass(frozen=True)
class Principal:
    id: int
    name: str
    kind: Kind
    created_at: str


@dataclass(frozen=True)
class IssuedToken:
    """A token just issued: the only moment its plaintext exists outside the caller."""

    id: int
    principal: str
    workspace: str
    token: str = field(repr=False)


@dataclass(frozen=True)
class TokenInfo:
    id: int
    principal: str
    workspace: str
    label: str
    created_at: str
    last_used_at: str | None
    revoked_at: str | None


@dataclass(frozen=True)
class Actor:
    """A principal acting in one workspace, with the permissions of its current role."""

    principal_id: int
    principal: str
    kind: Kind
    workspace_id: int
    workspace: str
    role: Role
    permissions: frozenset[Permission]
    token_id: int | None = None

    @property
    def audit_name(self) -> str:
        return f"{self.kind.value}:{self.principal}"

    def can(self, permission: Permission) -> bool:
        # Checked again here, whatever the role table says: agents never hold human authority.
        if self.kind is Kind.AGENT and permission in AGENT_FORBIDDEN:
            return False
        return permission in self.permissions

    def require(self, permission: Permission) -> None:
        if not self.can(permission):
            raise NotAllowed(
                f"{self.principal!r} ({self.kind.value}, role {self.role.value}) may not do this: "
                f"it needs the permission {permission.value}.",
                permission=permission.value,
            )

    def require_human(self, permission: Permission, what: str = "do this") -> None:
        """Human authority: an agent is refused here whatever a surface let through, then the permission."""
        if self.kind is not Kind.HUMAN:
            raise NotAllowed(f"Only a human may {what}.", permission=permission.value)
        self.require(permission)

    def describe(self) -> dict[str, Any]:
        return {
            "principal": self.principal, "kind": self.kind.value, "role": self.role.value,
            "workspace": self.workspace, "permissions": sorted(p.value for p in self.permissions),
        }
