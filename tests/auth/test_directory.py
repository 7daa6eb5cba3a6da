"""The identity directory on both engines: every refusal, and proof that a refusal wrote nothing.

"Nothing was written" is checked against a snapshot of every core table (audit chain included)
taken as the table owner, past Armarius and past row-level security.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth import directory as directory_module
from armarius.auth.directory import TOKEN_RECHECK_SECONDS, Directory
from armarius.auth.model import Actor
from armarius.auth.permissions import AGENT_FORBIDDEN, Kind, Permission, Role, permissions_for, role_allowed
from armarius.auth.secrets import TOKEN_PREFIX, token_digest, verify_password
from armarius.config import Settings
from armarius.errors import AlreadyExists, ArmariusError, InvalidInput, NotAllowed, NotFound, Unauthenticated
from tests.helpers import OwnerSQL

OPERATOR = "operator:test"
ADA_PASSWORD = "ada: correct horse battery staple"
HUGO_PASSWORD = "hugo: tr0ub4dor&3"
IDENTITY_TABLES = ("workspaces", "principals", "memberships", "agent_tokens")
CORE_TABLES = (*IDENTITY_TABLES, "audit_events", "audit_heads")


Snapshot = dict[str, list[tuple[Any, ...]]]
Refusal = TypeVar("Refusal", bound=ArmariusError)


@dataclass
class World:
    app: Armarius
    settings: Settings
    bot_token: str

    @property
    def directory(self) -> Directory:
        return self.app.directory

    def snapshot(self) -> Snapshot:
        """Every row of every core table, in a stable order."""
        with OwnerSQL(self.settings) as owner:
            return {table: sorted(owner.rows(f"SELECT * FROM {table}"), key=repr) for table in CORE_TABLES}

    def unchanged_after(self, refusal: type[Refusal], action: Callable[[], object]) -> Refusal:
        """Run ``action``, which must be refused with ``refusal`` and change nothing at all."""
        before = self.snapshot()
        with pytest.raises(refusal) as caught:
            action()
        assert self.snapshot() == before
        return caught.value

    def refused_with_a_login_event(self, refusal: type[Refusal], action: Callable[[], object], *, chain: str | None,
                                   reason: str, subject: str) -> Refusal:
        """Run ``action``, a refused login: it writes one ``login.failed`` event to ``chain`` and nothing else."""
        chain_id = self.directory.workspace(chain).id if chain else audit.SYSTEM_CHAIN
        before = self.snapshot()
        with pytest.raises(refusal) as caught:
            action()
        after = self.snapshot()
        assert {table: after[table] for table in IDENTITY_TABLES} == {table: before[table] for table in IDENTITY_TABLES}
        assert set(before["audit_events"]) <= set(after["audit_events"])
        assert len(after["audit_events"]) == len(before["audit_events"]) + 1
        assert {row[0] for row in set(after["audit_heads"]) ^ set(before["audit_heads"])} == {chain_id}
        event = audit.tail(self.app.database, chain_id, limit=1)[0]
        assert (event.actor, event.action, event.subject, event.details) == (
            "unauthenticated", "login.failed", subject, {"reason": reason})
        assert audit.verify_all(self.app.database)[1] == []
        return caught.value


@pytest.fixture
def world(app: Armarius, settings: Settings) -> World:
    """alpha: ada (human admin), hugo (human reader), bot (agent editor, with a token); beta: empty."""
    directory = app.directory
    directory.create_workspace("alpha", by=OPERATOR)
    directory.create_workspace("beta", by=OPERATOR)
    directory.add_principal("ada", Kind.HUMAN, workspace="alpha", role=Role.ADMIN, by=OPERATOR, password=ADA_PASSWORD)
    directory.add_principal("hugo", Kind.HUMAN, workspace="alpha", role=Role.READER, by=OPERATOR,
                            password=HUGO_PASSWORD)
    directory.add_principal("bot", Kind.AGENT, workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    token = directory.issue_token("bot", workspace="alpha", label="ci", by=OPERATOR).token
    directory.authenticate_token(token)  # first use records last_used_at; later uses within a minute write nothing
    return World(app, settings, token)


# Roles an agent may never have ------------------------------------------------------------------


def test_agent_cannot_be_created_as_admin(world: World) -> None:
    error = world.unchanged_after(NotAllowed, lambda: world.directory.add_principal(
        "rogue", Kind.AGENT, workspace="alpha", role=Role.ADMIN, by=OPERATOR))
    assert error.details == {"kind": "agent", "role": "admin"}
    assert "rogue" not in [principal.name for principal, _ in world.directory.principals()]


@pytest.mark.parametrize("workspace", ["alpha", "beta"])
def test_agent_cannot_be_made_admin_with_set_role(world: World, workspace: str) -> None:
    world.unchanged_after(NotAllowed, lambda: world.directory.set_role(
        "bot", workspace=workspace, role=Role.ADMIN, by=OPERATOR))
    assert world.directory.authenticate_token(world.bot_token).role is Role.EDITOR


def test_human_may_be_admin_and_agent_may_be_reader_or_editor(world: World) -> None:
    world.directory.add_principal("root", Kind.HUMAN, workspace="beta", role=Role.ADMIN, by=OPERATOR, password="pw")
    world.directory.set_role("bot", workspace="beta", role=Role.READER, by=OPERATOR)
    roles = {principal.name: roles for principal, roles in world.directory.principals()}
    assert roles["root"] == {"beta": "admin"}
    assert roles["bot"] == {"alpha": "editor", "beta": "reader"}


def test_agent_given_a_password_is_refused(world: World) -> None:
    world.unchanged_after(InvalidInput, lambda: world.directory.add_principal(
        "pwbot", Kind.AGENT, workspace="alpha", role=Role.READER, by=OPERATOR, password="secret"))


def test_agent_cannot_get_a_password_later(world: World) -> None:
    world.unchanged_after(InvalidInput, lambda: world.directory.set_password("bot", "secret", by=OPERATOR))


# Names ------------------------------------------------------------------------------------------


def test_duplicate_workspace_name_is_refused(world: World) -> None:
    error = world.unchanged_after(AlreadyExists, lambda: world.directory.create_workspace("alpha", by=OPERATOR))
    assert error.details == {"workspace": "alpha"}
    assert error.code == "already_exists"


@pytest.mark.parametrize(("kind", "workspace"), [(Kind.AGENT, "alpha"), (Kind.HUMAN, "beta")])
def test_duplicate_principal_name_is_refused(world: World, kind: Kind, workspace: str) -> None:
    password = None if kind is Kind.AGENT else "another password"
    error = world.unchanged_after(AlreadyExists, lambda: world.directory.add_principal(
        "bot", kind, workspace=workspace, role=Role.READER, by=OPERATOR, password=password))
    assert error.details == {"principal": "bot"}


INVALID_NAMES = ["", "Alpha", "-alpha", ".alpha", "_alpha", "a" * 65, "al pha", "alpha/beta", "ålpha",
                 "alpha\n", "alpha\x00", "alpha;drop", "\uff41lpha"]


def test_invalid_workspace_names_are_refused(world: World) -> None:
    for name in INVALID_NAMES:
        error = world.unchanged_after(InvalidInput, partial(world.directory.create_workspace, name, by=OPERATOR))
        assert error.details == {"field": "workspace"}, name


@pytest.mark.parametrize("kind", list(Kind))
def test_invalid_principal_names_are_refused(world: World, kind: Kind) -> None:
    password = "a password" if kind is Kind.HUMAN else None
    for name in INVALID_NAMES:
        error = world.unchanged_after(InvalidInput, partial(
            world.directory.add_principal, name, kind, workspace="alpha", role=Role.READER, by=OPERATOR,
            password=password))
        assert error.details == {"field": "principal"}, name


@pytest.mark.parametrize("name", ["a", "a" * 64, "0day", "team.one_two-3"])
def test_valid_names_are_accepted(world: World, name: str) -> None:
    assert world.directory.create_workspace(name, by=OPERATOR).name == name
    assert world.directory.add_principal(name, Kind.AGENT, workspace=name, role=Role.READER, by=OPERATOR).name == name


def test_principal_in_an_unknown_workspace_is_refused(world: World) -> None:
    world.unchanged_after(NotFound, lambda: world.directory.add_principal(
        "newbot", Kind.AGENT, workspace="gamma", role=Role.READER, by=OPERATOR))


def test_role_for_an_unknown_principal_or_workspace_is_refused(world: World) -> None:
    world.unchanged_after(NotFound, lambda: world.directory.set_role(
        "nobody", workspace="alpha", role=Role.READER, by=OPERATOR))
    world.unchanged_after(NotFound, lambda: world.directory.set_role(
        "bot", workspace="gamma", role=Role.READER, by=OPERATOR))


# Tokens -----------------------------------------------------------------------------------------


def test_token_for_a_human_is_refused(world: World) -> None:
    world.unchanged_after(InvalidInput, lambda: world.directory.issue_token("ada", workspace="alpha", by=OPERATOR))


def test_token_for_a_non_member_is_refused(world: World) -> None:
    error = world.unchanged_after(NotAllowed, lambda: world.directory.issue_token(
        "bot", workspace="beta", by=OPERATOR))
    assert error.details == {"principal": "bot", "workspace": "beta"}


def test_token_for_an_unknown_principal_or_workspace_is_refused(world: World) -> None:
    world.unchanged_after(NotFound, lambda: world.directory.issue_token("nobody", workspace="alpha", by=OPERATOR))
    world.unchanged_after(NotFound, lambda: world.directory.issue_token("bot", workspace="gamma", by=OPERATOR))


def test_issued_token_authenticates_as_its_principal(world: World) -> None:
    actor = world.directory.authenticate_token(world.bot_token)
    assert (actor.principal, actor.kind, actor.workspace, actor.role) == ("bot", Kind.AGENT, "alpha", Role.EDITOR)
    assert actor.token_id is not None
    assert world.bot_token.startswith(TOKEN_PREFIX)
    # 256 random bits after the prefix.
    assert len(base64.urlsafe_b64decode(world.bot_token.removeprefix(TOKEN_PREFIX) + "=")) == 32


def test_revoked_token_is_refused(world: World) -> None:
    token_id = world.directory.authenticate_token(world.bot_token).token_id
    assert token_id is not None
    events_before = len(audit.tail(world.app.database, None, limit=1000))
    world.directory.revoke_token(token_id, by=OPERATOR)
    assert len(audit.tail(world.app.database, None, limit=1000)) == events_before + 1
    assert audit.tail(world.app.database, None, limit=1)[0].action == "token.revoked"
    world.unchanged_after(Unauthenticated, lambda: world.directory.authenticate_token(world.bot_token))
    # Revoking again is a no-op that writes nothing; an unknown token id is refused.
    before = world.snapshot()
    world.directory.revoke_token(token_id, by=OPERATOR)
    assert world.snapshot() == before
    world.unchanged_after(NotFound, lambda: world.directory.revoke_token(token_id + 1000, by=OPERATOR))


class Clock:
    """time.monotonic for the directory's checked tokens, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(directory_module, "time", SimpleNamespace(monotonic=clock))
    return clock


def test_a_token_check_answers_again_for_a_second_until_this_directory_changes_a_role(
        world: World, clock: Clock) -> None:
    directory = world.directory
    fresh = directory.issue_token("bot", workspace="alpha", label="fresh", by=OPERATOR).token
    assert directory.recently_checked(fresh) is None  # never checked
    actor = directory.authenticate_token(world.bot_token)
    assert directory.recently_checked(world.bot_token) == actor
    clock.now += TOKEN_RECHECK_SECONDS - 0.01
    assert directory.recently_checked(world.bot_token) == actor
    clock.now += 0.01
    assert directory.recently_checked(world.bot_token) is None  # too old: check it again
    directory.authenticate_token(world.bot_token)
    directory.set_role("bot", workspace="alpha", role=Role.READER, by=OPERATOR)
    assert directory.recently_checked(world.bot_token) is None
    assert directory.authenticate_token(world.bot_token).role is Role.READER
    assert directory.recently_checked(world.bot_token).role is Role.READER  # type: ignore[union-attr]


def test_a_revoked_or_refused_token_is_never_answered_from_a_check(world: World, clock: Clock) -> None:
    directory = world.directory
    token_id = directory.authenticate_token(world.bot_token).token_id
    directory.revoke_token(token_id or 0, by=OPERATOR)
    assert directory.recently_checked(world.bot_token) is None
    with pytest.raises(Unauthenticated):
        directory.authenticate_token(world.bot_token)
    assert directory.recently_checked(world.bot_token) is None
    for forged in ("arm_" + "x" * 43, "n\u00e4me", ""):
        with pytest.raises(Unauthenticated):
            directory.authenticate_token(forged)
        assert directory.recently_checked(forged) is None


def test_a_revocation_by_another_process_takes_effect_within_the_recheck_time(world: World, clock: Clock) -> None:
    """Another Directory on the same store stands for another process (the CLI, another server process)."""
    directory, elsewhere = world.directory, Directory(world.app.database)
    actor = directory.authenticate_token(world.bot_token)
    elsewhere.revoke_token(actor.token_id or 0, by=OPERATOR)
    assert directory.recently_checked(world.bot_token) == actor  # this process does not know yet
    clock.now += TOKEN_RECHECK_SECONDS
    assert directory.recently_checked(world.bot_token) is None
    with pytest.raises(Unauthenticated):
        directory.authenticate_token(world.bot_token)


def test_revoking_one_token_leaves_the_others(world: World) -> None:
    second = world.directory.issue_token("bot", workspace="alpha", label="second", by=OPERATOR)
    world.directory.revoke_token(second.id, by=OPERATOR)
    assert world.directory.authenticate_token(world.bot_token).principal == "bot"
    world.unchanged_after(Unauthenticated, lambda: world.directory.authenticate_token(second.token))


def _garbage(token: str) -> list[str]:
    return [
        "",
        "garbage",
        TOKEN_PREFIX,
        TOKEN_PREFIX + "A" * 43,
        token + " ",
        " " + token,
        token[:-1],
        token.upper(),
        token + "\x00",
        token[:-1] + "é",
        "ärm_" + token[4:],
        "🔑" * 10,
        token_digest(token),  # the stored digest is not a credential
    ]


def test_unknown_or_garbage_tokens_are_refused(world: World) -> None:
    for presented in _garbage(world.bot_token):
        assert presented != world.bot_token
        error = world.unchanged_after(Unauthenticated, partial(world.directory.authenticate_token, presented))
        # One message for every failure: nothing tells a guesser what was close.
        assert error.message == "The agent token is missing, unknown or revoked.", presented


def test_token_of_a_principal_removed_from_the_workspace_is_refused(world: World) -> None:
    with OwnerSQL(world.settings) as owner:
        removed = owner.execute(
            "DELETE FROM memberships WHERE principal_id = (SELECT id FROM principals WHERE name = 'bot')")
        assert removed == 1
    world.unchanged_after(Unauthenticated, lambda: world.directory.authenticate_token(world.bot_token))


def test_authentication_records_last_use_but_refusals_do_not(world: World) -> None:
    infos = world.directory.tokens("alpha")
    assert len(infos) == 1
    assert infos[0].last_used_at is not None
    assert infos[0].revoked_at is None
    with OwnerSQL(world.settings) as owner:
        owner.execute("UPDATE agent_tokens SET last_used_at = NULL")
    world.directory.authenticate_token(world.bot_token)
    assert world.directory.tokens("alpha")[0].last_used_at is not None
    assert world.directory.tokens("beta") == []


# Passwords --------------------------------------------------------------------------------------


def test_correct_password_authenticates_and_the_login_is_audited(world: World) -> None:
    before = world.snapshot()
    actor = world.directory.authenticate_password("ada", ADA_PASSWORD, workspace="alpha")
    assert (actor.principal, actor.kind, actor.role, actor.token_id) == ("ada", Kind.HUMAN, Role.ADMIN, None)
    after = world.snapshot()
    assert {table: after[table] for table in IDENTITY_TABLES} == {table: before[table] for table in IDENTITY_TABLES}
    assert len(after["audit_events"]) == len(before["audit_events"]) + 1
    event = audit.tail(world.app.database, actor.workspace_id, limit=1)[0]
    assert (event.workspace_id, event.actor, event.action, event.subject, event.details) == (
        actor.workspace_id, "human:ada", "login.succeeded", "ada", {"role": "admin"})
    assert ADA_PASSWORD not in repr(event.to_dict())


# (name, password, workspace) -> the chain its login.failed event goes to, the reason, the subject
WRONG_CREDENTIALS = [
    (("ada", "wrong password", "alpha"), ("alpha", "wrong_password", "ada")),
    (("ada", "", "alpha"), ("alpha", "wrong_password", "ada")),
    (("ada", ADA_PASSWORD.upper(), "alpha"), ("alpha", "wrong_password", "ada")),
    (("ada", ADA_PASSWORD + " ", "alpha"), ("alpha", "wrong_password", "ada")),
    (("ada", HUGO_PASSWORD, "alpha"), ("alpha", "wrong_password", "ada")),
    # A name that does not exist is not recorded: it may be a password typed into the wrong field.
    (("nobody", ADA_PASSWORD, "alpha"), ("alpha", "unknown_principal", "")),
    ((ADA_PASSWORD, ADA_PASSWORD, "alpha"), ("alpha", "unknown_principal", "")),
    # A workspace that does not exist has no chain: the failure goes to the system chain.
    (("ada", ADA_PASSWORD, "gamma"), (None, "unknown_workspace", "ada")),
    (("nobody", "x", HUGO_PASSWORD), (None, "unknown_workspace", "")),
    (("bot", "", "alpha"), ("alpha", "not_a_human", "bot")),
    (("bot", ADA_PASSWORD, "alpha"), ("alpha", "not_a_human", "bot")),
]


@pytest.mark.parametrize(("attempt", "recorded"), WRONG_CREDENTIALS)
def test_wrong_credentials_are_refused_alike_and_audited(
    world: World, attempt: tuple[str, str, str], recorded: tuple[str | None, str, str]
) -> None:
    name, password, workspace = attempt
    chain, reason, subject = recorded
    error = world.refused_with_a_login_event(
        Unauthenticated, lambda: world.directory.authenticate_password(name, password, workspace=workspace),
        chain=chain, reason=reason, subject=subject)
    assert error.message == "The principal name or password is wrong."
    assert error.details == {}
    dumped = repr([event.to_dict() for event in audit.tail(world.app.database, None, limit=1000)]
                  + [event.to_dict() for event in audit.tail(world.app.database, world.directory.workspace("alpha").id,
                                                             limit=1000)])
    for secret in {password, ADA_PASSWORD, HUGO_PASSWORD} - {""}:
        assert secret not in dumped


def test_human_without_a_password_cannot_log_in(world: World) -> None:
    world.directory.add_principal("nopw", Kind.HUMAN, workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    world.refused_with_a_login_event(Unauthenticated, lambda: world.directory.authenticate_password(
        "nopw", "", workspace="alpha"), chain="alpha", reason="no_password", subject="nopw")


def test_right_password_in_a_foreign_workspace_is_not_allowed(world: World) -> None:
    world.refused_with_a_login_event(NotAllowed, lambda: world.directory.authenticate_password(
        "ada", ADA_PASSWORD, workspace="beta"), chain="beta", reason="not_a_member", subject="ada")


def test_every_attempt_is_audited_in_order(world: World) -> None:
    """A burst of failures is never coalesced or dropped: each attempt is one event, in order."""
    alpha = world.directory.workspace("alpha").id
    before = len(audit.tail(world.app.database, alpha, limit=10_000))
    for _ in range(5):
        with pytest.raises(Unauthenticated):
            world.directory.authenticate_password("ada", "guess", workspace="alpha")
    world.directory.authenticate_password("ada", ADA_PASSWORD, workspace="alpha")
    events = audit.tail(world.app.database, alpha, limit=10_000)[before:]
    assert [(event.action, event.details.get("reason")) for event in events] == (
        [("login.failed", "wrong_password")] * 5 + [("login.succeeded", None)])
    assert audit.verify_all(world.app.database)[1] == []


def test_password_is_stored_as_a_salted_scrypt_hash_only(world: World) -> None:
    world.directory.add_principal("twin", Kind.HUMAN, workspace="beta", role=Role.READER, by=OPERATOR,
                                  password=ADA_PASSWORD)
    with OwnerSQL(world.settings) as owner:
        stored = dict(owner.rows("SELECT name, password_hash FROM principals"))
    assert stored["bot"] is None
    for name in ("ada", "hugo", "twin"):
        scheme, n, r, p, salt, derived = stored[name].split("$")
        assert (scheme, n, r, p) == ("scrypt", str(2**15), "8", "1")
        assert len(base64.b64decode(salt)) == 16
        assert len(base64.b64decode(derived)) == 32
    assert stored["ada"] != stored["twin"], "same password, different salt, different hash"
    assert verify_password(ADA_PASSWORD, stored["ada"])
    assert verify_password(ADA_PASSWORD, stored["twin"])
    assert not verify_password(HUGO_PASSWORD, stored["ada"])
    for secret in (ADA_PASSWORD, HUGO_PASSWORD):
        assert all(secret not in str(value) for value in stored.values())
        assert hashlib.sha256(secret.encode()).hexdigest() not in str(stored.values())


def test_password_change_replaces_the_hash(world: World) -> None:
    world.directory.set_password("hugo", "a new passphrase", by=OPERATOR)
    world.refused_with_a_login_event(Unauthenticated, lambda: world.directory.authenticate_password(
        "hugo", HUGO_PASSWORD, workspace="alpha"), chain="alpha", reason="wrong_password", subject="hugo")
    assert world.directory.authenticate_password("hugo", "a new passphrase", workspace="alpha").principal == "hugo"
    event = audit.tail(world.app.database, None, limit=1)[0]
    assert (event.action, event.subject, event.details) == ("principal.password_changed", "hugo", {})


# Permissions ------------------------------------------------------------------------------------

SPEC_PERMISSIONS = {
    (Kind.AGENT, Role.READER): {"memory.read", "research.query"},
    (Kind.AGENT, Role.EDITOR): {"memory.read", "research.query", "memory.write", "drafts.create", "repairs.propose"},
    (Kind.HUMAN, Role.READER): {"memory.read", "research.query"},
    (Kind.HUMAN, Role.EDITOR): {"memory.read", "research.query", "memory.write", "drafts.create", "repairs.propose",
                                "memory.curate", "approvals.issue", "sessions.manage"},
    (Kind.HUMAN, Role.ADMIN): {permission.value for permission in Permission},
}


@pytest.mark.parametrize(("kind", "role"), [(kind, role) for kind in Kind for role in Role])
def test_role_table_matches_the_spec(kind: Kind, role: Role) -> None:
    expected = SPEC_PERMISSIONS.get((kind, role))
    assert role_allowed(kind, role) == (expected is not None)
    assert {permission.value for permission in permissions_for(kind, role)} == (expected or set())
    if kind is Kind.AGENT:
        assert not permissions_for(kind, role) & AGENT_FORBIDDEN


def test_spec_lists_what_agents_may_never_hold() -> None:
    assert {permission.value for permission in AGENT_FORBIDDEN} == {
        "memory.curate", "approvals.issue", "memory.manage", "evidence.manage", "principals.manage",
        "sessions.manage", "sessions.takeover"}


def test_role_change_takes_effect_on_the_next_token_authentication(world: World) -> None:
    before = world.directory.authenticate_token(world.bot_token)
    assert before.can(Permission.MEMORY_WRITE)
    world.directory.set_role("bot", workspace="alpha", role=Role.READER, by=OPERATOR)
    after = world.directory.authenticate_token(world.bot_token)
    assert after.role is Role.READER
    assert not after.can(Permission.MEMORY_WRITE)
    with pytest.raises(NotAllowed):
        after.require(Permission.DRAFTS_CREATE)
    after.require(Permission.MEMORY_READ)
    world.directory.set_role("bot", workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    assert world.directory.authenticate_token(world.bot_token).can(Permission.MEMORY_WRITE)


def test_role_change_takes_effect_on_the_next_password_authentication(world: World) -> None:
    reader = world.directory.authenticate_password("hugo", HUGO_PASSWORD, workspace="alpha")
    assert not reader.can(Permission.APPROVALS_ISSUE)
    world.directory.set_role("hugo", workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    editor = world.directory.authenticate_password("hugo", HUGO_PASSWORD, workspace="alpha")
    assert editor.role is Role.EDITOR
    editor.require(Permission.APPROVALS_ISSUE)
    editor.require(Permission.MEMORY_CURATE)
    with pytest.raises(NotAllowed):
        editor.require(Permission.PRINCIPALS_MANAGE)
    role_events = [event for event in audit.tail(world.app.database, None, limit=100)
                   if event.action == "principal.role_set" and event.subject == "hugo"]
    assert [event.details for event in role_events] == [
        {"workspace": "alpha", "role": "reader"}, {"workspace": "alpha", "role": "editor"}]


@pytest.mark.parametrize("permission", sorted(AGENT_FORBIDDEN))
def test_agent_actor_is_refused_forbidden_permissions(world: World, permission: Permission) -> None:
    actor = world.directory.authenticate_token(world.bot_token)
    with pytest.raises(NotAllowed) as caught:
        actor.require(permission)
    assert caught.value.details == {"permission": permission.value}
    # Checked again when used, even if an actor were built with every permission.
    inflated = Actor(principal_id=actor.principal_id, principal="bot", kind=Kind.AGENT, workspace_id=actor.workspace_id,
                     workspace="alpha", role=Role.EDITOR, permissions=frozenset(Permission))
    assert not inflated.can(permission)
    with pytest.raises(NotAllowed):
        inflated.require(permission)
    inflated.require(Permission.MEMORY_WRITE)


def test_human_admin_holds_every_permission(world: World) -> None:
    admin = world.directory.authenticate_password("ada", ADA_PASSWORD, workspace="alpha")
    for permission in Permission:
        admin.require(permission)
    assert admin.describe()["permissions"] == sorted(permission.value for permission in Permission)


# Secrets at rest --------------------------------------------------------------------------------


def database_text(world: World) -> bytes:
    """Everything the database holds, as bytes: the SQLite files, or a dump of every PostgreSQL table."""
    if world.settings.database_url is None:
        path = world.settings.sqlite_path
        files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-journal")]
        return b"".join(file.read_bytes() for file in files if file.exists())
    with OwnerSQL(world.settings) as owner:
        tables = [row[0] for row in owner.rows(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'")]
        assert set(CORE_TABLES) <= set(tables)
        dump = [str(row[0]) for table in tables for row in owner.rows(f"SELECT t::text FROM {table} t")]
    return "\n".join(dump).encode("utf-8")


def test_plaintext_token_is_never_stored(world: World) -> None:
    second = world.directory.issue_token("bot", workspace="alpha", label="second", by=OPERATOR)
    world.directory.authenticate_token(second.token)
    world.unchanged_after(Unauthenticated, lambda: world.directory.authenticate_token(second.token + "x"))
    world.directory.revoke_token(second.id, by=OPERATOR)
    stored = database_text(world)
    # The dump does hold the directory's data (the check below could find a token if it were there).
    assert b"ada" in stored
    assert token_digest(second.token).encode() in stored
    assert token_digest(world.bot_token).encode() in stored
    for token in (world.bot_token, second.token):
        assert token.encode() not in stored
        assert token.removeprefix(TOKEN_PREFIX).encode() not in stored
    for password in (ADA_PASSWORD, HUGO_PASSWORD):
        assert password.encode() not in stored


def test_audit_events_carry_no_secret(world: World) -> None:
    world.directory.set_password("ada", "fresh secret words", by=OPERATOR)
    events = audit.tail(world.app.database, None, limit=1000)
    assert {"token.issued", "principal.created", "principal.password_changed"} <= {e.action for e in events}
    text = repr([event.to_dict() for event in events])
    for secret in (world.bot_token, world.bot_token.removeprefix(TOKEN_PREFIX), ADA_PASSWORD, HUGO_PASSWORD,
                   "fresh secret words", token_digest(world.bot_token)):
        assert secret not in text
    issued = next(event for event in events if event.action == "token.issued")
    assert issued.details == {"token_id": 1, "workspace": "alpha", "label": "ci"}
    assert audit.verify_all(world.app.database, [])[1] == []
