"""Login sessions of human principals for the web pages, kept in the store.

A person logs in with a name, a password and a workspace (:meth:`WebSessions.start`). The browser
keeps a random 256-bit secret in a cookie; the store keeps only its SHA-256, so a copy of the
database opens no session. Every request resolves the secret afresh (:meth:`WebSessions.resolve`):
the principal's current role in the session's workspace is read each time, so a role granted or
withdrawn applies at the next request, and a withdrawn membership ends the session. Agent
principals never get a session: only a human with a password passes
:meth:`~armarius.auth.directory.Directory.authenticate_password`, and the kind is checked again on
every request.

A session ends at logout (:meth:`WebSessions.end`), ``idle`` after its last request, or
``lifetime`` after the login, whichever comes first. Each session has a CSRF token of its own,
which every form and every cookie-authenticated API write must carry (bound to a workspace:
:func:`armarius.web.auth.check_workspace_token`).

Failed logins are rate-limited before the password is checked, so a refused attempt costs no
scrypt and adds nothing to the audit log but one ``login.throttled`` event per lockout: at most
``LOGIN_ATTEMPT_LIMIT`` failures per name and client address, ``NAME_ATTEMPT_LIMIT`` per name from
any address, and ``ADDRESS_ATTEMPT_LIMIT`` per address whatever the names, in ``LOGIN_WINDOW``.
The attempt is recorded *before* the password is checked (and removed when the login succeeds),
so attempts made in parallel count too. Names are kept only as their SHA-256 (a password typed
into the name field must not be stored), and only for the window. Every attempt that reaches the
password check is audited as before (``login.succeeded`` / ``login.failed``). Every failure that
reaches the password check is told alike, "The principal name or password is wrong." (401): also the
right password of a person who is not a member of the workspace (the CLI says so; a login form open
to the network must not tell that the password was right). The reason is in the audit log only.

Secrets and CSRF tokens are compared with :func:`hmac.compare_digest`, and never logged or audited.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from armarius.audit import chain as audit
from armarius.auth.directory import NAME_PATTERN, Directory
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role, permissions_for
from armarius.auth.secrets import digests_match, token_digest
from armarius.errors import InvalidInput, NotAllowed, TooManyAttempts, Unauthenticated, echo
from armarius.store import Database, Tx, iso_utc

#: Failed logins per name and client address within LOGIN_WINDOW before further attempts are refused.
LOGIN_ATTEMPT_LIMIT = 5
#: Failed logins per name, from any address, within LOGIN_WINDOW (bounds guessing from many addresses).
NAME_ATTEMPT_LIMIT = 50
#: Failed logins per client address, whatever the names, within LOGIN_WINDOW.
ADDRESS_ATTEMPT_LIMIT = 30
LOGIN_WINDOW = timedelta(minutes=15)
#: A session's last_seen_at is written at most this often, not on every request.
TOUCH_GRANULARITY = timedelta(seconds=60)
#: PostgreSQL advisory lock topic: attempts from one address are admitted one at a time.
_ATTEMPT_LOCK_TOPIC = 4242015
#: Flash message kinds (CSS classes of the page's flash area).
FLASH_KINDS = ("info", "success", "error")
_SECRET_MAX_LENGTH = 128
#: What a failed login is told, whatever the reason (the audit log has it).
WRONG_CREDENTIALS = "The principal name or password is wrong."


@dataclass(frozen=True)
class Flash:
    """A message for the next page the person sees (never a secret: it is stored until shown)."""

    kind: str
    text: str


@dataclass(frozen=True)
class WebSession:
    """A live login session, resolved for one request: who acts, where, and with which role now."""

    id: int
    actor: Actor
    csrf_token: str = field(repr=False)
    #: Every workspace the person is a member of (for the switcher), by name.
    workspaces: tuple[str, ...] = ()
    #: Messages waiting to be shown (taken by the next page rendered).
    flashes: tuple[Flash, ...] = ()


@dataclass(frozen=True)
class StartedSession:
    """A session just started: the only moment its cookie secret exists outside the browser."""

    secret: str = field(repr=False)
    session: WebSession


def _now() -> datetime:
    return datetime.now(UTC)


def name_key(name: str) -> str:
    """What the rate limiter keeps of a typed name: its SHA-256; one shared key for impossible names."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        return "invalid-name"
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


@dataclass
class WebSessions:
    database: Database
    directory: Directory
    idle: timedelta
    lifetime: timedelta
    clock: Callable[[], datetime] = _now

    # Logging in and out -------------------------------------------------------------------------

    def start(self, name: str, password: str, *, workspace: str, client: str) -> StartedSession:
        """Log a human in: rate limit, password check (audited), then a new session in ``workspace``. A name
        or workspace with a NUL, which the store could not even look up, is refused before anything is
        checked or counted."""
        for what, given in (("workspace", workspace), ("name", name)):
            if "\x00" in given:
                raise InvalidInput(f"The {what} cannot contain a NUL character.", field=what)
        key = name_key(name)
        self._admit(key, client, name=name, workspace=workspace)
        try:
            actor = self.directory.authenticate_password(name, password, workspace=workspace)
        except NotAllowed:  # the right password, not a member (audited as not_a_member): told as a wrong one
            raise Unauthenticated(WRONG_CREDENTIALS) from None
        now = self.clock()
        secret, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        with self.database.transaction(write=True) as tx:
            tx.execute("DELETE FROM login_attempts WHERE name_key = ? AND client = ?", (key, client))
            tx.execute("DELETE FROM web_sessions WHERE expires_at < ?", (iso_utc(now),))
            row = tx.one(
                "INSERT INTO web_sessions (secret_digest, principal_id, workspace_ref, csrf_secret, created_at, "
                "last_seen_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (token_digest(secret), actor.principal_id, actor.workspace_id, csrf, iso_utc(now), iso_utc(now),
                 iso_utc(now + self.lifetime)),
            )
            assert row is not None
            workspaces = _workspaces_of(tx, actor.principal_id)
        return StartedSession(secret, WebSession(id=row["id"], actor=actor, csrf_token=csrf, workspaces=workspaces))

    def end(self, session: WebSession) -> None:
        """Log out: the session is ended in the store, whatever cookie copies exist."""
        with self.database.transaction(workspace_id=session.actor.workspace_id, write=True) as tx:
            ended = tx.execute("UPDATE web_sessions SET ended_at = ? WHERE id = ? AND ended_at IS NULL",
                               (iso_utc(self.clock()), session.id))
            if ended:
                audit.append(tx, actor=session.actor.audit_name, action="login.logged_out",
                             subject=session.actor.principal)

    def switch_workspace(self, session: WebSession, workspace: str) -> None:
        """Make ``workspace`` the session's current one; the person must be a member there."""
        with self.database.transaction() as tx:
            target = tx.one(
                "SELECT w.id, m.role FROM workspaces w LEFT JOIN memberships m "
                "ON m.workspace_ref = w.id AND m.principal_id = ? WHERE w.name = ?",
                (session.actor.principal_id, workspace),
            )
        if target is None or target["role"] is None:
            raise NotAllowed(f"You are not a member of a workspace named {echo(workspace)}.", workspace=workspace)
        if target["id"] == session.actor.workspace_id:
            return
        with self.database.transaction(workspace_id=target["id"], write=True) as tx:
            moved = tx.execute("UPDATE web_sessions SET workspace_ref = ? WHERE id = ? AND ended_at IS NULL",
                               (target["id"], session.id))
            if not moved:
                raise Unauthenticated("Your login session ended; log in again.")
            audit.append(tx, actor=session.actor.audit_name, action="login.workspace_switched",
                         subject=session.actor.principal,
                         details={"from": session.actor.workspace, "role": target["role"]})

    # Every request ------------------------------------------------------------------------------

    def resolve(self, secret: str) -> WebSession:
        """The live session a cookie secret names, with the principal's current role; refuses anything else."""
        refusal = Unauthenticated("You are not logged in, or your login session ended; log in again.")
        if not secret or len(secret) > _SECRET_MAX_LENGTH or not secret.isascii():
            raise refusal
        digest = token_digest(secret)
        with self.database.transaction() as tx:
            row = tx.one(
                "SELECT s.id, s.secret_digest, s.csrf_secret, s.flash, s.last_seen_at, s.expires_at, s.ended_at, "
                "p.id AS principal_id, p.name AS principal, p.kind, w.id AS workspace_id, w.name AS workspace, "
                "m.role FROM web_sessions s JOIN principals p ON p.id = s.principal_id "
                "JOIN workspaces w ON w.id = s.workspace_ref "
                "LEFT JOIN memberships m ON m.workspace_ref = s.workspace_ref AND m.principal_id = s.principal_id "
                "WHERE s.secret_digest = ?",
                (digest,),
            )
            workspaces = _workspaces_of(tx, row["principal_id"]) if row is not None else ()
        if row is None or not digests_match(row["secret_digest"], digest) or row["kind"] != Kind.HUMAN.value:
            raise refusal
        now = self.clock()
        last_seen = datetime.fromisoformat(row["last_seen_at"])
        if row["ended_at"] or now >= datetime.fromisoformat(row["expires_at"]) or now - last_seen >= self.idle:
            raise refusal
        if row["role"] is None:
            self._close(row["id"], now)
            raise Unauthenticated(f"You are no longer a member of workspace {echo(row['workspace'])}; log in again.")
        if now - last_seen >= TOUCH_GRANULARITY:
            with self.database.transaction(write=True) as tx:
                tx.execute("UPDATE web_sessions SET last_seen_at = ? WHERE id = ?", (iso_utc(now), row["id"]))
        role = Role(row["role"])
        actor = Actor(principal_id=row["principal_id"], principal=row["principal"], kind=Kind.HUMAN,
                      workspace_id=row["workspace_id"], workspace=row["workspace"], role=role,
                      permissions=permissions_for(Kind.HUMAN, role))
        return WebSession(id=row["id"], actor=actor, csrf_token=row["csrf_secret"], workspaces=workspaces,
                          flashes=_flashes(row["flash"]))

    # Flash messages -----------------------------------------------------------------------------

    def flash(self, session: WebSession, text: str, kind: str = "info") -> None:
        """Keep a message for the next page this session renders (never a secret)."""
        if kind not in FLASH_KINDS:
            raise ValueError(f"flash kind is one of {FLASH_KINDS}, not {kind!r}")
        with self.database.transaction(write=True) as tx:
            waiting = _flashes(tx.scalar("SELECT flash FROM web_sessions WHERE id = ?", (session.id,)))
            messages = [{"kind": item.kind, "text": item.text} for item in waiting] + [{"kind": kind, "text": text}]
            tx.execute("UPDATE web_sessions SET flash = ? WHERE id = ?", (json.dumps(messages), session.id))

    def take_flashes(self, session: WebSession) -> tuple[Flash, ...]:
        """The messages the resolved session carried, removed from the store so they show once."""
        if session.flashes:
            with self.database.transaction(write=True) as tx:
                tx.execute("UPDATE web_sessions SET flash = NULL WHERE id = ?", (session.id,))
        return session.flashes

    # Rate limiting ------------------------------------------------------------------------------

    def _admit(self, key: str, client: str, *, name: str, workspace: str) -> None:
        """Record this attempt as a failure-to-be, or refuse it (TooManyAttempts) without checking the password."""
        with self.database.transaction() as tx:
            workspace_id = tx.scalar("SELECT id FROM workspaces WHERE name = ?", (workspace,))
            known = tx.scalar("SELECT name FROM principals WHERE name = ?", (name,))
        now = self.clock()
        with self.database.transaction(workspace_id=workspace_id, write=True) as tx:
            if tx.dialect == "postgresql":  # SQLite writers hold the database's write lock already
                # Always the name's lock before the address's: no two admissions wait for each other in a cycle.
                tx.execute("SELECT pg_advisory_xact_lock(?::integer, hashtext(?))", (_ATTEMPT_LOCK_TOPIC, key))
                tx.execute("SELECT pg_advisory_xact_lock(?::integer, hashtext(?))", (_ATTEMPT_LOCK_TOPIC, client))
            tx.execute("DELETE FROM login_attempts WHERE at < ?", (iso_utc(now - LOGIN_WINDOW),))
            of_name = tx.all("SELECT client, at, refused FROM login_attempts WHERE name_key = ? ORDER BY at", (key,))
            of_client = tx.all("SELECT at, refused FROM login_attempts WHERE client = ? ORDER BY at", (client,))
            of_both = [row for row in of_name if row["client"] == client]
            limits = (("name_and_address", of_both, LOGIN_ATTEMPT_LIMIT), ("name", of_name, NAME_ATTEMPT_LIMIT),
                      ("address", of_client, ADDRESS_ATTEMPT_LIMIT))
            reached = [(label, rows, wait) for label, rows, limit in limits
                       if (wait := _wait([row["at"] for row in rows if not row["refused"]], limit, now)) is not None]
            wait = max((each[2] for each in reached), default=None)
            if not reached:
                tx.execute("INSERT INTO login_attempts (name_key, client, at, refused) VALUES (?, ?, ?, ?)",
                           (key, client, iso_utc(now), False))
            elif not any(row["refused"] for row in reached[0][1]):
                # One event per lockout: the attempts refused after it never reach the log.
                tx.execute("INSERT INTO login_attempts (name_key, client, at, refused) VALUES (?, ?, ?, ?)",
                           (key, client, iso_utc(now), True))
                audit.append(tx, actor="unauthenticated", action="login.throttled", subject=known or "",
                             details={"retry_after_seconds": wait, "limit": reached[0][0]})
        if wait is not None:
            raise TooManyAttempts(
                f"Too many failed logins; try again in {_minutes(wait)}.", retry_after_seconds=wait)

    def _close(self, session_id: int, now: datetime) -> None:
        with self.database.transaction(write=True) as tx:
            tx.execute("UPDATE web_sessions SET ended_at = ? WHERE id = ? AND ended_at IS NULL",
                       (iso_utc(now), session_id))


def _wait(failures: list[str], limit: int, now: datetime) -> int | None:
    """Seconds until fewer than ``limit`` of these failures are in the window; None if they are already."""
    if len(failures) < limit:
        return None
    leaves = datetime.fromisoformat(failures[-limit]) + LOGIN_WINDOW
    return max(1, math.ceil((leaves - now).total_seconds()))


def _minutes(seconds: int) -> str:
    minutes = math.ceil(seconds / 60)
    return "a minute" if minutes <= 1 else f"{minutes} minutes"


def _workspaces_of(tx: Tx, principal_id: int) -> tuple[str, ...]:
    rows = tx.all("SELECT w.name FROM memberships m JOIN workspaces w ON w.id = m.workspace_ref "
                  "WHERE m.principal_id = ? ORDER BY w.name", (principal_id,))
    return tuple(row["name"] for row in rows)


def _flashes(stored: str | None) -> tuple[Flash, ...]:
    if not stored:
        return ()
    return tuple(Flash(kind=item["kind"], text=item["text"]) for item in json.loads(stored))

