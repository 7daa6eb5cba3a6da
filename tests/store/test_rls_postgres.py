"""Row-level security on PostgreSQL, proven with hand-written SQL as the application role.

The server connects as a role that owns nothing; every table with a ``workspace_id`` column
has row-level security with FORCE, and the workspace is set per transaction with
``set_config('armarius.workspace_id', ..., true)``. These tests bypass Armarius entirely: they
show what *any* query of the application role can and cannot reach.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest

from armarius.app import Armarius, initialize, open_app
from armarius.audit import chain as audit
from armarius.config import Settings
from armarius.errors import ConfigError

pytestmark = pytest.mark.postgres

INSUFFICIENT_PRIVILEGE = "42501"
COLUMNS = "workspace_id, seq, at, actor, action, subject, details, prev_hash, hash"


@dataclass
class World:
    """Two workspaces with events in each chain, and the URLs to reach the database."""

    app: Armarius
    app_url: str
    owner_url: str
    app_role: str
    a: int
    b: int


@pytest.fixture
def world(postgres_database: Any, tmp_path: Path) -> Iterator[World]:
    settings = Settings(data_dir=tmp_path / "data", database_url=postgres_database.app_url,
                        database_migrate_url=postgres_database.owner_url)
    initialize(settings)
    application = open_app(settings)
    try:
        a = application.directory.create_workspace("alpha", by="operator:test").id
        b = application.directory.create_workspace("beta", by="operator:test").id
        for workspace_id, count in ((a, 3), (b, 2)):
            with application.database.transaction(workspace_id=workspace_id, write=True) as tx:
                for index in range(count):
                    audit.append(tx, actor="operator:test", action="test.event", details={"i": index})
        yield World(application, postgres_database.app_url, postgres_database.owner_url,
                    postgres_database.app_role, a, b)
    finally:
        application.close()


def owner_rows(world: World, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(world.owner_url, autocommit=True) as connection:
        return connection.execute(sql, params).fetchall()


def snapshot(world: World) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    return (
        owner_rows(world, "SELECT workspace_id, seq, actor, details, hash FROM audit_events ORDER BY 1, 2"),
        owner_rows(world, "SELECT workspace_id, seq, hash FROM audit_heads ORDER BY 1"),
    )


@pytest.fixture
def as_app(world: World) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A plain connection of the application role, outside Armarius; the test manages transactions."""
    connection = psycopg.connect(world.app_url, autocommit=False)
    try:
        yield connection
    finally:
        connection.rollback()
        connection.close()


def enter_workspace(connection: psycopg.Connection[tuple[Any, ...]], workspace_id: int) -> None:
    connection.execute("SELECT set_config('armarius.workspace_id', %s, true)", (str(workspace_id),))


def refused(connection: psycopg.Connection[tuple[Any, ...]], sql: str, params: tuple[Any, ...] = ()) -> str:
    """Run one statement that must be refused for lack of privilege; returns the server's message."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
        connection.execute(sql, params)
    connection.rollback()
    assert caught.value.sqlstate == INSUFFICIENT_PRIVILEGE
    return str(caught.value)


# Reading ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("table", ["audit_events", "audit_heads"])
def test_rows_of_another_workspace_are_invisible(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]], table: str
) -> None:
    expected_a = owner_rows(world, f"SELECT count(*) FROM {table} WHERE workspace_id = %s", (world.a,))[0][0]
    assert expected_a > 0
    assert owner_rows(world, f"SELECT count(*) FROM {table} WHERE workspace_id = %s", (world.b,))[0][0] > 0
    enter_workspace(as_app, world.a)
    visible = as_app.execute(f"SELECT DISTINCT workspace_id FROM {table}").fetchall()
    assert visible == [(world.a,)]
    assert as_app.execute(f"SELECT count(*) FROM {table}").fetchone() == (expected_a,)
    assert as_app.execute(f"SELECT count(*) FROM {table} WHERE workspace_id = %s", (world.b,)).fetchone() == (0,)
    as_app.commit()


def test_without_a_workspace_only_the_system_chain_is_visible(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]]
) -> None:
    assert as_app.execute("SELECT DISTINCT workspace_id FROM audit_events").fetchall() == [(audit.SYSTEM_CHAIN,)]
    assert as_app.execute("SELECT DISTINCT workspace_id FROM audit_heads").fetchall() == [(audit.SYSTEM_CHAIN,)]


def test_workspace_setting_ends_with_its_transaction(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """A pooled connection carries no workspace from one transaction into the next."""
    enter_workspace(as_app, world.b)
    assert as_app.execute("SELECT count(*) FROM audit_events").fetchone() == (2,)
    as_app.commit()
    assert as_app.execute("SELECT current_setting('armarius.workspace_id', true)").fetchone() in {("",), (None,)}
    assert as_app.execute("SELECT count(*) FROM audit_events WHERE workspace_id = %s", (world.b,)).fetchone() == (0,)
    as_app.rollback()
    enter_workspace(as_app, world.b)
    as_app.rollback()
    assert as_app.execute("SELECT count(*) FROM audit_events WHERE workspace_id = %s", (world.b,)).fetchone() == (0,)


def test_armarius_transactions_are_scoped_the_same_way(world: World) -> None:
    with world.app.database.transaction(workspace_id=world.a) as tx:
        assert tx.scalar("SELECT count(*) AS n FROM audit_events WHERE workspace_id = ?", (world.b,)) == 0
        assert tx.scalar("SELECT count(*) AS n FROM audit_heads WHERE workspace_id = ?", (world.b,)) == 0
        assert tx.scalar("SELECT count(*) AS n FROM audit_events") == 3
    with world.app.database.transaction() as tx:
        assert tx.scalar("SELECT count(*) AS n FROM audit_events WHERE workspace_id <> 0") == 0
    assert [event.workspace_id for event in audit.tail(world.app.database, world.b)] == [world.b, world.b]


# Writing ----------------------------------------------------------------------------------------


def test_insert_into_another_workspace_is_refused_by_policy(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]]
) -> None:
    before = snapshot(world)
    enter_workspace(as_app, world.a)
    message = refused(
        as_app,
        f"INSERT INTO audit_events ({COLUMNS}) VALUES (%s, 99, 'now', 'x', 'forged', '', '{{}}', %s, %s)",
        (world.b, "0" * 64, "f" * 64),
    )
    assert "row-level security" in message
    enter_workspace(as_app, world.a)
    refused(as_app, "INSERT INTO audit_heads (workspace_id, seq, hash) VALUES (%s, 0, %s)", (world.b + 100, "0" * 64))
    assert snapshot(world) == before


def test_insert_without_a_workspace_cannot_reach_a_workspace_chain(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]]
) -> None:
    before = snapshot(world)
    refused(
        as_app,
        f"INSERT INTO audit_events ({COLUMNS}) VALUES (%s, 99, 'now', 'x', 'forged', '', '{{}}', %s, %s)",
        (world.a, "0" * 64, "f" * 64),
    )
    assert snapshot(world) == before


def test_update_of_another_workspace_changes_nothing(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]]
) -> None:
    before = snapshot(world)
    enter_workspace(as_app, world.a)
    changed = as_app.execute("UPDATE audit_heads SET seq = 999 WHERE workspace_id = %s", (world.b,)).rowcount
    assert changed == 0
    as_app.commit()
    # Moving a visible row into another workspace is refused by the policy's WITH CHECK.
    enter_workspace(as_app, world.a)
    refused(as_app, "UPDATE audit_heads SET workspace_id = %s WHERE workspace_id = %s", (world.b + 100, world.a))
    assert snapshot(world) == before


def test_app_role_cannot_update_or_delete_audit_events_at_all(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]]
) -> None:
    before = snapshot(world)
    for workspace_id in (world.a, world.b):
        enter_workspace(as_app, world.a)
        message = refused(as_app, "UPDATE audit_events SET actor = 'forged' WHERE workspace_id = %s", (workspace_id,))
        assert "permission denied" in message
        enter_workspace(as_app, world.a)
        assert "permission denied" in refused(as_app, "DELETE FROM audit_events WHERE workspace_id = %s",
                                              (workspace_id,))
    enter_workspace(as_app, world.a)
    refused(as_app, "TRUNCATE audit_events")
    enter_workspace(as_app, world.a)
    refused(as_app, "DELETE FROM audit_heads WHERE workspace_id = %s", (world.a,))
    enter_workspace(as_app, world.b)
    refused(as_app, "DELETE FROM audit_heads WHERE workspace_id = %s", (world.b,))
    assert snapshot(world) == before


def test_app_role_cannot_change_the_schema_record(world: World, as_app: psycopg.Connection[tuple[Any, ...]]) -> None:
    before = owner_rows(world, "SELECT version, name FROM schema_migrations ORDER BY version")
    refused(as_app, "DELETE FROM schema_migrations")
    refused(as_app, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'x', 'now')")
    refused(as_app, "UPDATE schema_migrations SET name = 'x'")
    assert owner_rows(world, "SELECT version, name FROM schema_migrations ORDER BY version") == before


def test_app_role_cannot_create_tables_or_switch_off_row_security(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]]
) -> None:
    refused(as_app, "CREATE TABLE public.escape (workspace_id bigint)")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        as_app.execute("ALTER TABLE audit_events DISABLE ROW LEVEL SECURITY")
    as_app.rollback()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        as_app.execute("DROP POLICY workspace_isolation ON audit_events")
    as_app.rollback()
    # row_security = off makes any query that RLS would filter fail instead of bypassing it.
    as_app.execute("SET row_security = off")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        as_app.execute("SELECT count(*) FROM audit_events")
    as_app.rollback()


# Catalogue checks -------------------------------------------------------------------------------


def test_app_role_owns_nothing_and_has_no_bypass(world: World) -> None:
    role = world.app_role
    assert owner_rows(world, "SELECT rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles "
                             "WHERE rolname = %s", (role,)) == [(False, False, False, False)]
    owned_tables = owner_rows(
        world, "SELECT c.relname FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE r.rolname = %s", (role,)
    )
    assert owned_tables == []
    owned_functions = owner_rows(
        world, "SELECT p.proname FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner WHERE r.rolname = %s", (role,)
    )
    assert owned_functions == []
    owned_schemas = owner_rows(
        world, "SELECT n.nspname FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE r.rolname = %s",
        (role,),
    )
    assert owned_schemas == []
    assert owner_rows(world, "SELECT has_schema_privilege(%s, 'public', 'CREATE')", (role,)) == [(False,)]
    # The tables exist and have an owner: that owner is not the application role.
    owners = owner_rows(
        world, "SELECT DISTINCT r.rolname FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner "
               "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'",
    )
    assert owners
    assert (role,) not in owners


def test_every_workspace_table_has_forced_row_security(world: World) -> None:
    """Discovers the tables from the catalogue, so a table added later is covered without edits."""
    tables = owner_rows(
        world,
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
        "       (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) AS policies "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND c.relkind IN ('r', 'p') "
        "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'workspace_id' "
        "            AND a.attnum > 0 AND NOT a.attisdropped) "
        "ORDER BY c.relname",
    )
    names = {row[0] for row in tables}
    assert {"audit_events", "audit_heads", "entries"} <= names, "the catalogue query finds the workspace tables"
    # A table the server role cannot touch at all (the search vectors, read only through a function that
    # admits the transaction's workspace) needs no policy of its own.
    owner_only = {row[0] for row in owner_rows(
        world,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind = 'r' "
        "AND NOT has_table_privilege(%s, c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')",
        (world.app_role,),
    )}
    assert owner_only == {"entry_search"}
    unprotected = [name for name, enabled, forced, policies in tables
                   if not (enabled and forced and policies) and name not in owner_only]
    assert unprotected == [], f"tables with workspace_id but without forced row-level security: {unprotected}"


def test_workspace_policies_check_new_rows_too(world: World) -> None:
    """Every policy on a workspace table has a WITH CHECK (or applies to reading only)."""
    rows = owner_rows(
        world,
        "SELECT c.relname, p.polname, p.polcmd, p.polqual IS NOT NULL, "
        "       (p.polwithcheck IS NOT NULL OR p.polcmd IN ('r', 'd')) "
        "FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid "
        "WHERE EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'workspace_id' "
        "              AND a.attnum > 0 AND NOT a.attisdropped)",
    )
    assert rows
    assert all(using and checked for _, _, _, using, checked in rows), rows


# open_app ---------------------------------------------------------------------------------------


def test_open_app_refuses_a_superuser_url(world: World, tmp_path: Path) -> None:
    assert owner_rows(world, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") == [(True,)]
    settings = Settings(data_dir=tmp_path / "super", database_url=world.owner_url,
                        database_migrate_url=world.owner_url)
    with pytest.raises(ConfigError) as caught:
        open_app(settings)
    assert caught.value.code == "config_invalid"
    assert caught.value.details == {"key": "database.url"}
    assert "row-level security" in caught.value.message


def test_open_app_refuses_a_bypassrls_role(world: World) -> None:
    settings = world.app.settings  # its data folder holds the audit key
    assert settings.database_url == world.app_url
    open_app(settings).close()  # the plain application role is accepted
    with psycopg.connect(world.owner_url, autocommit=True) as connection:
        connection.execute(f'ALTER ROLE "{world.app_role}" BYPASSRLS')
    with pytest.raises(ConfigError) as caught:
        open_app(settings)
    assert caught.value.details == {"key": "database.url"}


def test_search_vectors_are_reachable_only_through_the_workspace_function(
    world: World, as_app: psycopg.Connection[tuple[Any, ...]]
) -> None:
    from armarius.memory import queries

    for workspace_id, word in ((world.a, "alphaword"), (world.b, "alphaword")):
        with world.app.database.transaction(workspace_id=workspace_id, write=True) as tx:
            queries.insert_entry(tx, slug=f"ws-{workspace_id}", slug_key="k", title="t", body=word, tags="[]",
                                 by="test", at="2026-01-01T00:00:00.000000Z")
    assert "entry_search" in refused(as_app, "SELECT * FROM entry_search")
    search = "SELECT entry_id FROM armarius_search_entries(to_tsquery('simple', 'alphaword'), 10, false, '{}')"
    enter_workspace(as_app, world.a)
    found_in_a = as_app.execute(search).fetchall()
    as_app.rollback()
    found_without_workspace = as_app.execute(search).fetchall()
    as_app.rollback()
    ids_of_a = owner_rows(world, "SELECT id FROM entries WHERE workspace_id = %s", (world.a,))
    assert found_in_a == ids_of_a
    assert found_without_workspace == []
