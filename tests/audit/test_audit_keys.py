"""The audit key: created by init, required to serve, kept out of the database; legacy events sealed.

Every refusal is shown with proof that nothing was written (the audit tables as the owner sees
them, and the key file).
"""

from __future__ import annotations

import dataclasses
import secrets
import stat
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from armarius.app import Armarius, initialize, open_app
from armarius.audit import chain as audit
from armarius.audit.keys import AuditKey, Keyring, create_key_file, keyring_of, load_keyring, parse_keys
from armarius.audit.verify import verify_log
from armarius.config import Settings, load_settings
from armarius.errors import ConfigError
from tests.audit.tamper import append_forged, chain_rows, forged_event, rewrite_chain
from tests.helpers import OwnerSQL

AUDIT_TABLES = ("audit_events", "audit_heads")


def audit_rows(settings: Settings) -> dict[str, list[tuple[Any, ...]]]:
    with OwnerSQL(settings) as owner:
        return {table: sorted(owner.rows(f"SELECT * FROM {table}"), key=repr) for table in AUDIT_TABLES}


def fill(app: Armarius) -> tuple[int, int]:
    a = app.directory.create_workspace("alpha", by="operator:test").id
    b = app.directory.create_workspace("beta", by="operator:test").id
    for workspace_id, count in ((a, 4), (b, 2)):
        with app.database.transaction(workspace_id=workspace_id, write=True) as tx:
            for index in range(count):
                audit.append(tx, actor="human:ada", action="test.event", details={"i": index})
    return a, b


def report_of(app: Armarius) -> Any:
    return verify_log(app.database, known_workspaces=[space.id for space in app.directory.workspaces()])


# The key file -----------------------------------------------------------------------------------


def test_init_creates_a_private_key_file_and_events_carry_its_id(app: Armarius, settings: Settings) -> None:
    path = settings.audit_key_path
    assert path == settings.data_dir / "audit.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    keyring = load_keyring(None, path)
    assert keyring is not None
    assert len(keyring.keys) == 1
    text = path.read_text(encoding="utf-8")
    initialize(settings)
    assert path.read_text(encoding="utf-8") == text, "a second init keeps the key"
    fill(app)
    events = audit.tail(app.database, None, limit=100)
    assert events
    assert {event.key_id for event in events} == {keyring.active.id}
    assert all(keyring.active.verifies(event.hash, str(event.mac)) for event in events)


def test_the_key_never_reaches_the_database(app: Armarius, settings: Settings) -> None:
    fill(app)
    secret = keyring_of(app.database).active.secret.hex()
    with OwnerSQL(settings) as owner:
        tables = [row[0] for row in owner.rows(
            "SELECT name FROM sqlite_master WHERE type = 'table'" if settings.database_url is None else
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'")]
        dump = repr([owner.rows(f"SELECT * FROM {table}") for table in tables])
    assert "audit_events" in tables
    assert secret not in dump
    assert secret[:16] not in dump
    assert secret not in repr(keyring_of(app.database))


def test_concurrent_creation_agrees_on_one_key(tmp_path: Path) -> None:
    path = tmp_path / "folder" / "audit.key"
    barrier = threading.Barrier(8)
    created: list[bool] = []

    def create() -> None:
        barrier.wait(timeout=30)
        created.append(create_key_file(path))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(created) == [False] * 7 + [True]
    keyring = load_keyring(None, path)
    assert keyring is not None
    assert len(keyring.keys) == 1
    assert [entry.name for entry in path.parent.iterdir()] == ["audit.key"], "no temporary file left behind"


def test_key_lists_allow_comments_commas_and_retired_keys() -> None:
    first, second = secrets.token_hex(32), secrets.token_hex(32)
    keys = parse_keys(f"# retired\n{first}  # old one\n\n{second}\n", source="file", setting="audit.key_file")
    assert [key.secret.hex() for key in keys] == [first, second]
    assert parse_keys(f"{first}, {second}", source="env", setting="ARMARIUS_AUDIT_KEY") == keys
    assert Keyring(keys, "file").active.secret.hex() == second
    assert Keyring(keys, "file").get(keys[0].id) == keys[0]
    assert AuditKey.from_secret(bytes.fromhex(first)).id == keys[0].id
    assert keys[0].id not in first


@pytest.mark.parametrize("text", ["", "# only a comment\n", "abcd", "zz" * 32, "00" * 31, "00" * 33,
                                  f"{'00' * 32}, nothex"])
def test_malformed_keys_are_refused_without_echoing_them(text: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_keys(text, source="ARMARIUS_AUDIT_KEY", setting="ARMARIUS_AUDIT_KEY")
    assert refused.value.details == {"key": "ARMARIUS_AUDIT_KEY"}
    for part in text.replace(",", " ").split():
        if len(part) >= 4:
            assert part not in refused.value.message
    assert "token_hex(32)" in refused.value.message


def test_settings_take_the_key_from_the_environment_only(tmp_path: Path) -> None:
    key = secrets.token_hex(32)
    settings = load_settings(tmp_path, environ={"ARMARIUS_AUDIT_KEY": key, "ARMARIUS_AUDIT_KEY_FILE": "/etc/k"})
    assert settings.audit_key == key
    assert settings.audit_key_path == Path("/etc/k")
    assert key not in repr(settings)
    (tmp_path / "armarius.toml").write_text(f'[audit]\nkey = "{key}"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_settings(tmp_path, environ={})
    assert key not in refused.value.message
    (tmp_path / "armarius.toml").write_text('[audit]\nkey_file = "keys/audit.key"\n', encoding="utf-8")
    assert load_settings(tmp_path, environ={}).audit_key_path == tmp_path.resolve() / "keys" / "audit.key"


def test_a_key_from_the_environment_signs_and_no_key_file_is_made(settings: Settings) -> None:
    key = secrets.token_hex(32)
    with_env = dataclasses.replace(settings, data_dir=settings.data_dir.parent / "env-folder", audit_key=key)
    initialize(with_env)
    assert not with_env.audit_key_path.exists()
    application = open_app(with_env)
    try:
        fill(application)
        assert {event.key_id for event in audit.tail(application.database, None)} == {
            AuditKey.from_secret(bytes.fromhex(key)).id}
        assert report_of(application).intact
    finally:
        application.close()


def test_serving_without_a_key_is_refused_and_writes_nothing(app: Armarius, settings: Settings) -> None:
    fill(app)
    before = audit_rows(settings)
    settings.audit_key_path.unlink()
    with pytest.raises(ConfigError) as refused:
        open_app(settings)
    assert refused.value.details == {"key": "audit.key_file"}
    assert "armarius init" in refused.value.message
    assert audit_rows(settings) == before
    assert not settings.audit_key_path.exists()


def test_init_never_makes_a_new_key_for_a_signed_log(app: Armarius, settings: Settings) -> None:
    """A second server without the key file must not start signing with a key of its own."""
    fill(app)
    before = audit_rows(settings)
    settings.audit_key_path.unlink()
    with pytest.raises(ConfigError) as refused:
        initialize(settings)
    assert "Copy audit.key" in refused.value.message
    assert not settings.audit_key_path.exists()
    assert audit_rows(settings) == before


def test_events_signed_with_another_key_are_found(app: Armarius, settings: Settings) -> None:
    fill(app)
    other = dataclasses.replace(settings, audit_key=secrets.token_hex(32))
    application = open_app(other)
    try:
        report = report_of(application)
    finally:
        application.close()
    bad = report.of_kind(audit.BAD_MAC)
    assert len(bad) == 3  # the system chain, alpha and beta
    assert all("not in the audit keyring (ARMARIUS_AUDIT_KEY)" in problem.problem for problem in bad)


def test_a_rotated_keyring_verifies_old_and_new_events(app: Armarius, settings: Settings) -> None:
    a, _ = fill(app)
    old = keyring_of(app.database).active.secret.hex()
    new = secrets.token_hex(32)
    rotated = dataclasses.replace(settings, audit_key=f"{old},{new}")
    application = open_app(rotated)
    try:
        with application.database.transaction(workspace_id=a, write=True) as tx:
            event = audit.append(tx, actor="human:ada", action="test.after_rotation")
        assert event.key_id == AuditKey.from_secret(bytes.fromhex(new)).id
        assert report_of(application).intact
    finally:
        application.close()
    without_the_old_key = open_app(dataclasses.replace(settings, audit_key=new))
    try:
        assert {problem.kind for problem in report_of(without_the_old_key).problems} == {audit.BAD_MAC}
    finally:
        without_the_old_key.close()


# Legacy events ----------------------------------------------------------------------------------


def downgrade_to_an_unauthenticated_log(settings: Settings) -> None:
    """Undo migration 0008 as the owner, keeping every event: the log as the release before left it."""
    with OwnerSQL(settings) as owner:
        owner.execute("DROP TABLE audit_legacy_events")
        if settings.database_url is None:
            owner.execute("ALTER TABLE audit_events DROP COLUMN key_id")
            owner.execute("ALTER TABLE audit_events DROP COLUMN mac")
        else:
            owner.execute("DROP TABLE audit_chains")
            owner.execute("DROP FUNCTION armarius_note_audit_chain() CASCADE")
            owner.execute("ALTER TABLE audit_events DROP COLUMN key_id, DROP COLUMN mac")
        owner.execute("DELETE FROM schema_migrations WHERE version = 8")
    settings.audit_key_path.unlink()


def test_events_from_before_the_key_are_legacy_and_sealed_by_init(app: Armarius, settings: Settings) -> None:
    a, b = fill(app)
    with OwnerSQL(settings) as owner:
        counts = {chain: len(chain_rows(owner, chain)) for chain in (audit.SYSTEM_CHAIN, a, b)}
    downgrade_to_an_unauthenticated_log(settings)
    initialize(settings)
    application = open_app(settings)
    try:
        report = report_of(application)
        assert report.intact, report.problems
        assert report.legacy_events == sum(counts.values())
        for chain, count in counts.items():
            seal = audit.tail(application.database, chain, limit=1)[0]
            assert (seal.seq, seal.action, seal.actor) == (count + 1, "audit.sealed", "system")
            assert seal.details == {"legacy_events": count, "key_id": keyring_of(application.database).active.id}
        initialize(settings)
        assert [event.seq for event in audit.tail(application.database, a, limit=1)] == [counts[a] + 1], \
            "sealed once"
        # After the seal, an event without a MAC is a forgery, not a legacy event.
        with OwnerSQL(settings) as owner:
            append_forged(owner, a, forged_event())
        assert [(p.kind, p.workspace_id, p.seq) for p in report_of(application).problems] == [
            (audit.BAD_MAC, a, counts[a] + 2)]
    finally:
        application.close()


def test_init_never_seals_events_forged_after_the_migration(app: Armarius, settings: Settings) -> None:
    """A chain that ends in unauthenticated events appended since the migration stays a finding."""
    a, _ = fill(app)
    downgrade_to_an_unauthenticated_log(settings)
    initialize(settings)  # migrates, makes a key and seals alpha, beta and the system chain
    with OwnerSQL(settings) as owner:
        append_forged(owner, a, forged_event())  # after the seal: not legacy
        gamma = owner.rows("INSERT INTO workspaces (name, created_at) VALUES ('gamma', 'x') RETURNING id")[0][0]
        append_forged(owner, gamma, forged_event())  # a chain that did not exist at the migration
    before = audit_rows(settings)
    initialize(settings)
    assert audit_rows(settings) == before, "nothing sealed"
    application = open_app(settings)
    try:
        found = {(p.kind, p.workspace_id) for p in report_of(application).problems}
    finally:
        application.close()
    assert found == {(audit.BAD_MAC, a), (audit.BAD_MAC, gamma)}


def test_a_later_init_never_seals_a_chain_the_legacy_table_was_edited_for(app: Armarius, settings: Settings) -> None:
    """Someone who can write the database but lacks the key rewrites a chain unsigned and points the
    legacy table at it: the next routine `armarius init` must not sign it."""
    a, _ = fill(app)
    with OwnerSQL(settings) as owner:
        rewrite_chain(owner, a, [forged_event(), forged_event()])
        owner.execute("UPDATE audit_legacy_events SET through_seq = 2 WHERE chain_id = ?", (a,))
        if not owner.rows("SELECT 1 FROM audit_legacy_events WHERE chain_id = ?", (a,)):
            owner.execute("INSERT INTO audit_legacy_events (chain_id, through_seq) VALUES (?, 2)", (a,))
    before = audit_rows(settings)
    initialize(settings)
    assert audit_rows(settings) == before, "nothing sealed"
    assert {(p.kind, p.workspace_id) for p in report_of(app).problems} == {(audit.BAD_MAC, a)}


def test_a_signed_write_after_forged_unsigned_events_does_not_make_them_legacy(app: Armarius) -> None:
    """Only the seal vouches for unsigned events before it; an ordinary signed event does not."""
    a, _ = fill(app)
    with OwnerSQL(app.settings) as owner:
        rewrite_chain(owner, a, [forged_event(), forged_event()])
    with app.database.transaction(workspace_id=a, write=True) as tx:
        audit.append(tx, actor="human:ada", action="test.after_the_forgery")
    problems = report_of(app).problems
    assert [(p.kind, p.workspace_id, p.seq) for p in problems] == [(audit.BAD_MAC, a, 1)]


def _as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return f"postgresql://{user}@{parts.hostname}:{parts.port}{parts.path}"


@pytest.mark.postgres
def test_migration_lists_every_chain_for_an_owner_under_forced_row_security(
    postgres_database: Any, tmp_path: Path
) -> None:
    """Row-level security is forced on the table owner too: the backfill must still see every chain."""
    owner_role = f"{postgres_database.app_role}_owner"
    admin_url = postgres_database.owner_url  # a superuser, connected to the test's database
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{owner_role}" LOGIN')
        admin.execute(f'ALTER DATABASE "{postgres_database.name}" OWNER TO "{owner_role}"')
        admin.execute(f'ALTER SCHEMA public OWNER TO "{owner_role}"')
    try:
        settings = Settings(data_dir=tmp_path / "data", database_url=postgres_database.app_url,
                            database_migrate_url=_as_user(admin_url, owner_role))
        initialize(settings)
        application = open_app(settings)
        try:
            a, b = fill(application)
        finally:
            application.close()
        downgrade_to_an_unauthenticated_log(settings)
        initialize(settings)
        with psycopg.connect(_as_user(admin_url, owner_role), autocommit=True) as owner:
            assert owner.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
                                 ).fetchone() == (False, False)
            assert owner.execute("SELECT relforcerowsecurity FROM pg_class WHERE relname = 'audit_events'"
                                 ).fetchone() == (True,)
            listed = owner.execute("SELECT chain_id FROM audit_chains ORDER BY 1").fetchall()
            legacy = owner.execute("SELECT chain_id, through_seq FROM audit_legacy_events ORDER BY 1").fetchall()
        assert [row[0] for row in listed] == [0, a, b]
        assert legacy == [(0, 2), (a, 4), (b, 2)]
        application = open_app(settings)
        try:
            report = report_of(application)
        finally:
            application.close()
        assert report.intact, report.problems
        assert report.legacy_events == 8
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'REASSIGN OWNED BY "{owner_role}" TO CURRENT_USER')
            admin.execute(f'DROP OWNED BY "{owner_role}"')
            admin.execute(f'DROP ROLE "{owner_role}"')
