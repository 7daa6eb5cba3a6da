"""The identity directory: workspaces, principals, memberships and agent tokens.

Every change is written together with its audit event in one transaction. Operator commands
(the CLI with direct access to the data folder or the database owner) act as ``operator:<name>``.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import armarius
from armarius.audit import chain as audit
from armarius.auth.model import Actor, IssuedToken, Principal, TokenInfo, Workspace
from armarius.auth.permissions import AGENT_FORBIDDEN, Kind, Role, permissions_for, role_allowed
from armarius.auth.secrets import digests_match, hash_password, new_token, token_digest, verify_password
from armarius.errors import AlreadyExists, InvalidInput, NotAllowed, NotFound, Unauthenticated, echo
from armarius.store import Database, Row, Tx, UniqueViolation, utc_now

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
#: Compared against when a name has no password, so that a miss costs a full scrypt too.
_UNUSABLE_HASH = hash_password(secrets.token_urlsafe(16))
#: A token's last-used time is written at most this often (seconds), not on every request.
_LAST_USED_GRANULARITY = 60
#: How long (seconds) a token's check may answer for it again (:meth:`Directory.recently_checked`), and
#: how many checked tokens are kept (all are forgotten when that many are).
TOKEN_RECHECK_SECONDS = 1.0
_CHECKED_TOKENS = 4096
#: The unique constraints whose violation means a name is taken (see UniqueViolation): any other goes up.
_WORKSPACE_NAME = "workspaces_name_key"
_PRINCIPAL_NAME = "principals_name_key"


@dataclass(frozen=True)
class _Checked:
    actor: Actor
    changes: int
    until: float


def check_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidInput(
            f"A {what} name must be 1-64 characters of lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit.",
            field=what,
        )
    return name


@dataclass
class Directory:
    database: Database
    #: What this object changed of what tokens stand for (a role given, a token revoked), counted.
    changes: int = field(default=0, init=False)
    #: Tokens checked lately, by digest (never the token itself): see :meth:`recently_checked`.
    _checked: dict[str, _Checked] = field(default_factory=dict, init=False, repr=False)

    # Workspaces -------------------------------------------------------------------------------

    def create_workspace(self, name: str, *, by: str) -> Workspace:
        check_name("workspace", name)
        with self.database.transaction(write=True) as tx:
            try:
                row = tx.one(
                    "INSERT INTO workspaces (name, created_at) VALUES (?, ?) RETURNING id, name, created_at",
                    (name, utc_now()),
                )
            except UniqueViolation as violation:
                violation.raise_unless(_WORKSPACE_NAME)
                raise AlreadyExists(f"A workspace named {echo(name)} exists already.", workspace=name) from None
            assert row is not None
            audit.append(tx, actor=by, action="workspace.created", subject=name)
        return Workspace(**row)

    def workspaces(self) -> list[Workspace]:
        with self.database.transaction() as tx:
            return [Workspace(**row) for row in tx.all("SELECT id, name, created_at FROM workspaces ORDER BY name")]

    def workspace(self, name: str) -> Workspace:
        with self.database.transaction() as tx:
            return self._workspace(tx, name)

    def workspace_info(self, actor: Actor) -> dict[str, Any]:
        """What a member may know of its own workspace."""
        with self.database.transaction() as tx:
            space = tx.one("SELECT name, created_at FROM workspaces WHERE id = ?", (actor.workspace_id,))
            roles = tx.all(
                "SELECT role, count(*) AS members FROM memberships WHERE workspace_ref = ? GROUP BY role",
                (actor.workspace_id,),
            )
        if space is None:
            raise NotFound("Your workspace no longer exists.")
        return {
            "workspace": space["name"], "created_at": space["created_at"],
            "members": {row["role"]: int(row["members"]) for row in roles},
            "armarius_version": armarius.__version__,
        }

    # Principals and roles ---------------------------------------------------------------------

    def add_principal(
        self, name: str, kind: Kind, *, workspace: str, role: Role, by: str, password: str | None = None
    ) -> Principal:
        """Create a principal and make it a member of ``workspace`` with ``role``."""
        check_name("principal", name)
        _check_role(kind, role)
        if kind is Kind.AGENT and password is not None:
            raise InvalidInput("Agent principals authenticate with tokens, not passwords.", field="password")
        password_hash = hash_password(password) if password is not None else None
        with self.database.transaction(write=True) as tx:
            space = self._workspace(tx, workspace)
            try:
                row = tx.one(
                    "INSERT INTO principals (name, kind, password_hash, created_at) VALUES (?, ?, ?, ?) "
                    "RETURNING id, name, kind, created_at",
                    (name, kind.value, password_hash, utc_now()),
                )
            except UniqueViolation as violation:
                violation.raise_unless(_PRINCIPAL_NAME)
                raise AlreadyExists(f"A principal named {echo(name)} exists already.", principal=name) from None
            assert row is not None
            principal = _principal(row)
            audit.append(tx, actor=by, action="principal.created", subject=name, details={"kind": kind.value})
            self._set_membership(tx, space, principal, role, by=by)
        return principal

    def set_role(self, name: str, *, workspace: str, role: Role, by: str) -> None:
        """Give an existing principal ``role`` in ``workspace`` (adding the membership if needed)."""
        with self.database.transaction(write=True) as tx:
            principal = self._principal(tx, name)
            _check_role(principal.kind, role)
            self._set_membership(tx, self._workspace(tx, workspace), principal, role, by=by)
        self.changes += 1  # once committed: a check made from now on sees the new role

    def set_password(self, name: str, password: str, *, by: str) -> None:
        with self.database.transaction(write=True) as tx:
            principal = self._principal(tx, name)
            if principal.kind is not Kind.HUMAN:
                raise InvalidInput("Only human principals have passwords.", principal=name)
            tx.execute("UPDATE principals SET password_hash = ? WHERE id = ?", (hash_password(password), principal.id))
            # Whoever logged in with the old password (perhaps the reason for the change) is logged out.
            ended = tx.execute("UPDATE web_sessions SET ended_at = ? WHERE principal_id = ? AND ended_at IS NULL",
                               (utc_now(), principal.id))
            audit.append(tx, actor=by, action="principal.password_changed", subject=name,
                         details={"web_sessions_ended": ended} if ended else {})

    def principals(self, workspace: str | None = None) -> list[tuple[Principal, dict[str, str]]]:
        """Principals with their role in each workspace (only ``workspace`` if given)."""
        with self.database.transaction() as tx:
            rows = tx.all(
                "SELECT p.id, p.name, p.kind, p.created_at, w.name AS workspace, m.role FROM principals p "
                "LEFT JOIN memberships m ON m.principal_id = p.id "
                "LEFT JOIN workspaces w ON w.id = m.workspace_ref ORDER BY p.name, w.name"
            )
        listing: dict[int, tuple[Principal, dict[str, str]]] = {}
        for row in rows:
            entry = listing.setdefault(row["id"], (_principal(row), {}))
            if row["workspace"] is not None:
                entry[1][row["workspace"]] = row["role"]
        return [entry for entry in listing.values() if workspace is None or workspace in entry[1]]

    def _set_membership(self, tx: Tx, space: Workspace, principal: Principal, role: Role, *, by: str) -> None:
        tx.execute(
            "INSERT INTO memberships (workspace_ref, principal_id, role, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (workspace_ref, principal_id) DO UPDATE SET role = excluded.role",
            (space.id, principal.id, role.value, utc_now()),
        )
        audit.append(
            tx, actor=by, action="principal.role_set", subject=principal.name,
            details={"workspace": space.name, "role": role.value},
        )

    # Agent tokens -----------------------------------------------------------------------------

    def issue_token(self, principal_name: str, *, workspace: str, label: str = "", by: str) -> IssuedToken:
        """A new agent token; the plaintext is returned once and stored only as its SHA-256."""
        token = new_token()
        with self.database.transaction(write=True) as tx:
            principal = self._principal(tx, principal_name)
            if principal.kind is not Kind.AGENT:
                raise InvalidInput("Tokens are issued to agent principals; humans log in with a password.",
                                   principal=principal_name)
            space = self._workspace(tx, workspace)
            if self._role(tx, space.id, principal.id) is None:
                raise NotAllowed(f"{echo(principal_name)} is not a member of workspace {echo(workspace)}; "
                                 "give it a role there first.", principal=principal_name, workspace=workspace)
            row = tx.one(
                "INSERT INTO agent_tokens (principal_id, workspace_ref, label, digest, created_at) "
                "VALUES (?, ?, ?, ?, ?) RETURNING id",
                (principal.id, space.id, label, token_digest(token), utc_now()),
            )
            assert row is not None
            audit.append(tx, actor=by, action="token.issued", subject=principal_name,
                         details={"token_id": row["id"], "workspace": workspace, "label": label})
        return IssuedToken(id=row["id"], principal=principal_name, workspace=workspace, token=token)

    def revoke_token(self, token_id: int, *, by: str) -> None:
        with self.database.transaction(write=True) as tx:
            row = tx.one(
                "SELECT t.id, t.revoked_at, p.name FROM agent_tokens t JOIN principals p ON p.id = t.principal_id "
                "WHERE t.id = ?", (token_id,),
            )
            if row is None:
                raise NotFound(f"There is no token with id {token_id}.", token_id=token_id)
            if row["revoked_at"] is None:
                tx.execute("UPDATE agent_tokens SET revoked_at = ? WHERE id = ?", (utc_now(), token_id))
                audit.append(tx, actor=by, action="token.revoked", subject=row["name"],
                             details={"token_id": token_id})
        self.changes += 1

    def tokens(self, workspace: str | None = None) -> list[TokenInfo]:
        with self.database.transaction() as tx:
            rows = tx.all(
                "SELECT t.id, p.name AS principal, w.name AS workspace, t.label, t.created_at, t.last_used_at, "
                "t.revoked_at FROM agent_tokens t JOIN principals p ON p.id = t.principal_id "
                "JOIN workspaces w ON w.id = t.workspace_ref ORDER BY t.id"
            )
        return [TokenInfo(**row) for row in rows if workspace is None or row["workspace"] == workspace]

    # Authentication ---------------------------------------------------------------------------

    def authenticate_token(self, token: str) -> Actor:
        """The actor an agent token speaks for, with its current role; refuses anything else alike."""
        refusal = Unauthenticated("The agent token is missing, unknown or revoked.")
        if not token or not token.isascii():
            raise refusal
        digest, changes = token_digest(token), self.changes
        with self.database.transaction() as tx:
            row = tx.one(
                "SELECT t.id AS token_id, t.digest, t.last_used_at, t.revoked_at, p.id AS principal_id, "
                "p.name AS principal, p.kind, w.id AS workspace_id, w.name AS workspace, m.role "
                "FROM agent_tokens t JOIN principals p ON p.id = t.principal_id "
                "JOIN workspaces w ON w.id = t.workspace_ref "
                "LEFT JOIN memberships m ON m.workspace_ref = t.workspace_ref AND m.principal_id = p.id "
                "WHERE t.digest = ?",
                (digest,),
            )
        if row is None or not digests_match(row["digest"], digest) or row["revoked_at"] or row["role"] is None:
            self._checked.pop(digest, None)
            raise refusal
        self._touch(row)
        actor = _actor(row, token_id=row["token_id"])
        if len(self._checked) >= _CHECKED_TOKENS:
            self._checked.clear()
        self._checked[digest] = _Checked(actor, changes, time.monotonic() + TOKEN_RECHECK_SECONDS)
        return actor

    def recently_checked(self, token: str) -> Actor | None:
        """The actor of a token :meth:`authenticate_token` accepted less than TOKEN_RECHECK_SECONDS ago, when
        this object changed no role and revoked no token since; None when the token must be checked.

        For a caller that may answer without the database (the HTTP surface, on its event loop): a token
        revoked or a role changed through this object takes effect at once, and through another process
        (the CLI, another server process) within TOKEN_RECHECK_SECONDS. A refused token is never kept."""
        checked = self._checked.get(token_digest(token)) if token.isascii() else None
        if checked is None or checked.changes != self.changes or time.monotonic() >= checked.until:
            return None
        return checked.actor

    def _touch(self, row: Row) -> None:
        now = utc_now()
        last = row["last_used_at"]
        if last is None or _seconds_between(last, now) >= _LAST_USED_GRANULARITY:
            with self.database.transaction(write=True) as tx:
                tx.execute("UPDATE agent_tokens SET last_used_at = ? WHERE id = ?", (now, row["token_id"]))

    def authenticate_password(self, name: str, password: str, *, workspace: str) -> Actor:
        """A human principal acting in ``workspace`` after presenting its password.

        Every attempt is audited, never with the password: logins and failed logins in the
        workspace's chain, a failed login naming a workspace that does not exist in the system
        chain. Events name only principals that exist (a password typed into the name field must
        not land in the log); the caller is told no more than before.
        """
        with self.database.transaction() as tx:
            row = tx.one(
                "SELECT p.id AS principal_id, p.name AS principal, p.kind, p.password_hash, "
                "w.id AS workspace_id, w.name AS workspace, m.role FROM (SELECT 1 AS probe) AS probe "
                "LEFT JOIN principals p ON p.name = ? LEFT JOIN workspaces w ON w.name = ? "
                "LEFT JOIN memberships m ON m.workspace_ref = w.id AND m.principal_id = p.id",
                (name, workspace),
            )
        assert row is not None  # the probe always yields one row
        usable = row["kind"] == Kind.HUMAN.value and bool(row["password_hash"])
        # Hash even when there is nothing to compare with, so timing does not tell which names exist.
        matches = verify_password(password, row["password_hash"] if usable else _UNUSABLE_HASH)
        failure = _login_failure(row, matches=matches)
        self._audit_login(row, failure)
        if failure is None:
            return _actor(row, token_id=None)
        if failure == "not_a_member":
            raise NotAllowed(f"{echo(name)} is not a member of workspace {echo(workspace)}.", workspace=workspace)
        raise Unauthenticated("The principal name or password is wrong.")

    def _audit_login(self, row: Row, failure: str | None) -> None:
        principal = row["principal"] or ""
        with self.database.transaction(workspace_id=row["workspace_id"], write=True) as tx:
            if failure is None:
                audit.append(tx, actor=f"{Kind.HUMAN.value}:{principal}", action="login.succeeded",
                             subject=principal, details={"role": row["role"]})
            else:
                audit.append(tx, actor="unauthenticated", action="login.failed", subject=principal,
                             details={"reason": failure})

    # Lookups ----------------------------------------------------------------------------------

    def _workspace(self, tx: Tx, name: str) -> Workspace:
        row = tx.one("SELECT id, name, created_at FROM workspaces WHERE name = ?", (name,))
        if row is None:
            raise NotFound(f"There is no workspace named {echo(name)}.", workspace=name)
        return Workspace(**row)

    def _principal(self, tx: Tx, name: str) -> Principal:
        row = tx.one("SELECT id, name, kind, created_at FROM principals WHERE name = ?", (name,))
        if row is None:
            raise NotFound(f"There is no principal named {echo(name)}.", principal=name)
        return _principal(row)

    def _role(self, tx: Tx, workspace_id: int, principal_id: int) -> Role | None:
        role = tx.scalar(
            "SELECT role FROM memberships WHERE workspace_ref = ? AND principal_id = ?", (workspace_id, principal_id)
        )
        return None if role is None else Role(role)


def _check_role(kind: Kind, role: Role) -> None:
    if not role_allowed(kind, role):
        forbidden = ", ".join(sorted(AGENT_FORBIDDEN))
        raise NotAllowed(
            f"An {kind.value} principal cannot have the role {role.value!r}: agents never hold {forbidden}.",
            kind=kind.value, role=role.value,
        )


def _login_failure(row: Row, *, matches: bool) -> str | None:
    """Why a password login fails (recorded in the audit log, never told to the caller), or None."""
    conditions = (
        ("unknown_workspace", row["workspace_id"] is not None),
        ("unknown_principal", row["principal_id"] is not None),
        ("not_a_human", row["kind"] == Kind.HUMAN.value),
        ("no_password", bool(row["password_hash"])),
        ("wrong_password", matches),
        ("not_a_member", row["role"] is not None),
    )
    return next((reason for reason, holds in conditions if not holds), None)


def _principal(row: Row) -> Principal:
    return Principal(id=row["id"], name=row["name"], kind=Kind(row["kind"]), created_at=row["created_at"])


def _actor(row: Row, *, token_id: int | None) -> Actor:
    kind, role = Kind(row["kind"]), Role(row["role"])
    return Actor(
        principal_id=row["principal_id"], principal=row["principal"], kind=kind,
        workspace_id=row["workspace_id"], workspace=row["workspace"], role=role,
        permissions=permissions_for(kind, role), token_id=token_id,
    )


def _seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()
