"""A PostgreSQL installation as an administrator sets it up (docs/deployment.md): what the server's role must
have and must not, what the migrations make, who may migrate, and what may never reach a log.

The roles are the deployment's: an owner that is no superuser (it owns the database and migrates), and the
server's role, which owns nothing (tests.store.test_backup_restore.DeployedPostgres). The lists kept in
armarius.store.schema (the grants, the tables kept without row-level security, the objects the server uses)
are checked here against the catalogue of a database the migrations made: a migration that grants, creates
or leaves unscoped something the lists do not name fails these tests.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest

from armarius.app import initialize, open_app
from armarius.config import Settings, database_url_problem, database_url_secrets, masked_database_url
from armarius.errors import ConfigError, StorageUnavailable
from armarius.memory.service import RememberRequest
from armarius.store import engine
from armarius.store.engine import PostgresDatabase
from armarius.store.schema import (
    SERVER_GRANTS,
    TEXT_SEARCH_CONFIGURATION,
    TRIGGERS,
    UNSCOPED_TABLES,
    MissingObject,
    RoleRefused,
    check_migrator,
    latest_version,
    migrate_postgres,
    missing_objects,
    repair_postgres,
    unforced_tables,
)
from tests.conftest import PG_ADMIN_URL
from tests.helpers import make_team
from tests.store.test_backup_restore import DeployedPostgres, admin

pytestmark = pytest.mark.postgres


@dataclass
class Deployed:
    """A migrated database of the deployment's roles, and the settings of its data folder."""

    postgres: DeployedPostgres
    settings: Settings

    @property
    def owner_url(self) -> str:
        return self.postgres.url(self.postgres.owner)

    def as_owner(self, *statements: str) -> list[tuple[Any, ...]]:
        """Statements as the owner (no superuser); the last one's rows."""
        rows: list[tuple[Any, ...]] = []
        with psycopg.connect(self.owner_url, autocommit=True) as connection:
            for statement in statements:
                cursor = connection.execute(statement)
                rows = cursor.fetchall() if cursor.description else []
        return rows

    def in_database(self, *statements: str) -> list[tuple[Any, ...]]:
        """Statements as the cluster's superuser, in this database."""
        return admin(*statements, database=self.postgres.name)


def deploy(tmp_path: Path, *, migrate: bool = True) -> Iterator[Deployed]:
    postgres = DeployedPostgres.created()
    try:
        settings = Settings(data_dir=tmp_path / "data", database_url=postgres.url(postgres.app),
                            database_migrate_url=postgres.url(postgres.owner), memory_embeddings="off")
        if migrate:
            initialize(settings)
        yield Deployed(postgres, settings)
    finally:
        postgres.drop()


@pytest.fixture
def deployed(tmp_path: Path) -> Iterator[Deployed]:
    yield from deploy(tmp_path)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Deployed]:
    """The roles and an empty database the owner owns: not migrated."""
    yield from deploy(tmp_path, migrate=False)


@contextmanager
def opened(settings: Settings) -> Iterator[PostgresDatabase]:
    """The database as the server opens it (its runtime URL), closed afterwards."""
    database = PostgresDatabase(settings.database_url or "")
    try:
        yield database
    finally:
        database.close()


def refusal(settings: Settings) -> RoleRefused:
    with pytest.raises(RoleRefused) as caught:
        open_app(settings).close()
    assert caught.value.code == "config_invalid"
    assert caught.value.details == {"key": "database.url"}
    assert caught.value.message == f"{caught.value.problem} {caught.value.fix}"
    return caught.value


# The lists, against the catalogue -------------------------------------------------------------------


_PRIVILEGES_OF = """
SELECT 'TABLE ' || c.relname, p.privilege
FROM pg_class c CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES',
                                        'TRIGGER']) AS p(privilege)
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND has_table_privilege(%(role)s, c.oid, p.privilege)
UNION ALL
SELECT 'SEQUENCE ' || c.relname, p.privilege
FROM pg_class c CROSS JOIN unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) AS p(privilege)
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S'
  AND has_sequence_privilege(%(role)s, c.oid, p.privilege)
UNION ALL
SELECT 'FUNCTION ' || f.oid::regprocedure::text, 'EXECUTE' FROM pg_proc f
WHERE f.pronamespace = 'public'::regnamespace AND has_function_privilege(%(role)s, f.oid, 'EXECUTE')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = f.oid
                  AND d.deptype = 'e')
UNION ALL
SELECT 'SCHEMA public', p.privilege FROM unnest(ARRAY['USAGE', 'CREATE']) AS p(privilege)
WHERE has_schema_privilege(%(role)s, 'public', p.privilege)
"""


def _spelled(key: str) -> str:
    """An object as the catalogue spells it (no space after a comma of a function's arguments)."""
    return key.replace(", ", ",")


def test_the_server_grants_are_exactly_what_the_migrations_grant(deployed: Deployed) -> None:
    with psycopg.connect(deployed.owner_url, autocommit=True) as connection:
        rows = connection.execute(_PRIVILEGES_OF, {"role": deployed.postgres.app}).fetchall()
    granted: dict[str, set[str]] = {}
    for key, privilege in rows:
        granted.setdefault(key, set()).add(privilege)
    assert granted == {_spelled(key): set(privileges) for key, privileges in SERVER_GRANTS.items()}


def test_the_tables_kept_without_row_level_security_are_listed(deployed: Deployed) -> None:
    unscoped = deployed.in_database(
        "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') "
        "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'workspace_id') "
        "AND NOT (c.relrowsecurity AND c.relforcerowsecurity) ORDER BY 1")
    assert [name for (name,) in unscoped] == sorted(UNSCOPED_TABLES)


def test_the_objects_checked_are_every_object_the_migrations_make(deployed: Deployed) -> None:
    def names(query: str) -> set[str]:
        return {name for (name,) in deployed.in_database(query)}

    not_an_extensions_own = ("NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = '{catalog}'::regclass "
                         "AND d.objid = {oid} AND d.deptype = 'e')")
    tables = names("SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'")
    functions = names("SELECT f.oid::regprocedure::text FROM pg_proc f WHERE f.pronamespace = 'public'::regnamespace "
                      f"AND {not_an_extensions_own.format(catalog='pg_proc', oid='f.oid')}")
    triggers = {(name, table, function) for name, table, function in deployed.in_database(
        "SELECT t.tgname, t.tgrelid::regclass::text, t.tgfoid::regprocedure::text FROM pg_trigger t "
        "WHERE NOT t.tgisinternal")}
    configurations = names("SELECT cfgname FROM pg_ts_config WHERE cfgnamespace = 'public'::regnamespace")
    assert tables == {key.split(" ", 1)[1] for key in SERVER_GRANTS if key.startswith("TABLE ")} | set(UNSCOPED_TABLES)
    assert functions == ({_spelled(key.split(" ", 1)[1]) for key in SERVER_GRANTS if key.startswith("FUNCTION ")}
                         | {function for _table, function in TRIGGERS.values()})
    assert triggers == {(name, table, function) for name, (table, function) in TRIGGERS.items()}
    assert configurations == {TEXT_SEARCH_CONFIGURATION}


# The server's role -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("revoke", "lacking", "grant"), [
    ("REVOKE INSERT ON entries FROM {app}", "INSERT on table entries", "GRANT INSERT ON TABLE entries TO {app};"),
    ("REVOKE SELECT, UPDATE ON sessions FROM {app}", "SELECT, UPDATE on table sessions",
     "GRANT SELECT, UPDATE ON TABLE sessions TO {app};"),
    ("REVOKE EXECUTE ON FUNCTION armarius_search_entries(tsquery, integer, boolean, text[], integer) FROM {app}",
     "EXECUTE on function armarius_search_entries(tsquery, integer, boolean, text[], integer)",
     "GRANT EXECUTE ON FUNCTION armarius_search_entries(tsquery, integer, boolean, text[], integer) TO {app};"),
    # granted to PUBLIC by default: the statement that restores it grants the role alone
    ("REVOKE EXECUTE ON FUNCTION armarius_entry_vector(text, text, text) FROM PUBLIC",
     "EXECUTE on function armarius_entry_vector(text, text, text)",
     "GRANT EXECUTE ON FUNCTION armarius_entry_vector(text, text, text) TO {app};"),
    ("REVOKE USAGE ON SCHEMA public FROM {app}, PUBLIC", "USAGE on schema public",
     "GRANT USAGE ON SCHEMA public TO {app};"),
])
def test_a_role_that_lost_a_grant_is_refused_with_the_grant_that_restores_it(
        deployed: Deployed, revoke: str, lacking: str, grant: str) -> None:
    app = f'"{deployed.postgres.app}"'
    open_app(deployed.settings).close()
    deployed.as_owner(revoke.format(app=app))
    refused = refusal(deployed.settings)
    assert refused.kind == "lacking"
    assert f"lacks privileges the migrations grant it ({lacking})" in refused.problem
    assert refused.fix.endswith(f"or as the owner: {grant.format(app=app)}")
    deployed.as_owner(grant.format(app=app))  # the fix, as printed
    open_app(deployed.settings).close()


@pytest.mark.parametrize(("grant", "excess", "revoke"), [
    ("GRANT TRUNCATE ON entries TO {app}", "TRUNCATE on entries", "REVOKE TRUNCATE ON TABLE entries FROM {app};"),
    ("GRANT TRIGGER, UPDATE ON audit_events TO {app}", "TRIGGER, UPDATE on audit_events",
     "REVOKE TRIGGER, UPDATE ON TABLE audit_events FROM {app};"),
    ("GRANT DELETE ON entry_revisions TO {app}", "DELETE on entry_revisions",
     "REVOKE DELETE ON TABLE entry_revisions FROM {app};"),
], ids=["truncate", "trigger-and-update", "delete-a-record"])
def test_a_role_that_holds_more_than_the_migrations_grant_is_refused(
        deployed: Deployed, grant: str, excess: str, revoke: str) -> None:
    """TRUNCATE empties a table for every workspace whatever its row-level security; TRIGGER lets the role's own
    function run in the owner's statements. A role granted either served as if nothing were wrong."""
    app = f'"{deployed.postgres.app}"'
    deployed.as_owner(grant.format(app=app))
    refused = refusal(deployed.settings)
    assert refused.kind == "excess"
    assert f"holds privileges the migrations never grant it ({excess})" in refused.problem
    assert refused.fix.startswith(f"As the owner: {revoke.format(app=app)}")
    deployed.as_owner(revoke.format(app=app))  # the fix, as printed
    open_app(deployed.settings).close()


def test_a_member_of_pg_write_all_data_is_refused(deployed: Deployed) -> None:
    app = deployed.postgres.app
    admin(f'GRANT pg_write_all_data TO "{app}"')
    try:
        refused = refusal(deployed.settings)
        assert refused.kind == "excess"
        assert "DELETE, UPDATE on audit_events" in refused.problem
        assert "revoke that role from" in refused.fix
    finally:
        admin(f'REVOKE pg_write_all_data FROM "{app}"')
    open_app(deployed.settings).close()


def test_a_role_that_lost_a_grant_has_it_again_from_init(deployed: Deployed) -> None:
    app = deployed.postgres.app
    deployed.as_owner(f'REVOKE INSERT ON entries FROM "{app}"', f'REVOKE DELETE ON entry_tags FROM "{app}"')
    assert refusal(deployed.settings).kind == "lacking"
    done = repair_postgres(deployed.owner_url, app)
    assert done == [f'granted {app} what it lacked (GRANT INSERT ON TABLE entries TO "{app}"; '
                    f'GRANT DELETE ON TABLE entry_tags TO "{app}";)']
    application = open_app(deployed.settings)
    try:
        team = make_team(application)
        application.memory.remember(team.agent, RememberRequest(slug="ops/deploy", title="Deploy", body="Deploy."))
    finally:
        application.close()
    assert repair_postgres(deployed.owner_url, app) == []  # nothing left to do


def test_init_grants_a_new_server_role_before_it_opens_the_database_as_that_role(deployed: Deployed) -> None:
    """docs/deployment.md: a new role name in database.url is set up by `armarius init`. initialize() opened the
    database as the new role (for the audit key) before anything granted it a thing: permission denied."""
    renamed = f"armarius_app2_{secrets.token_hex(4)}"
    admin(f'CREATE ROLE "{renamed}" LOGIN')
    try:
        settings = replace(deployed.settings, database_url=deployed.postgres.url(renamed))
        repaired: list[str] = []
        assert initialize(settings, repaired=repaired.append) == []
        assert len(repaired) == 1
        assert repaired[0].startswith(f"granted {renamed} what it lacked (GRANT ")
        application = open_app(settings)
        try:
            team = make_team(application)
            application.memory.remember(team.agent, RememberRequest(slug="ops/new", title="New", body="New role."))
        finally:
            application.close()
    finally:
        deployed.in_database(f'DROP OWNED BY "{renamed}"')
        admin(f'DROP ROLE "{renamed}"')


def test_a_migrate_url_that_leaves_its_user_to_libpq_migrates_as_the_role_it_logs_in_as(
        deployed: Deployed, monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL without a user (libpq takes PGUSER, a service file or the system's user) was refused as naming none."""
    monkeypatch.setenv("PGUSER", deployed.postgres.owner)
    without_user = deployed.owner_url.replace(f"{deployed.postgres.owner}@", "")
    assert "@" not in without_user.partition("?")[0]
    check_migrator(without_user, deployed.postgres.app)
    assert repair_postgres(without_user, deployed.postgres.app) == []
    monkeypatch.setenv("PGUSER", deployed.postgres.app)
    with pytest.raises(ConfigError) as caught:
        check_migrator(without_user, deployed.postgres.app)
    assert f"would migrate as {deployed.postgres.app}, the server's role of database.url" in caught.value.message


def test_a_member_of_the_owner_role_is_refused(deployed: Deployed) -> None:
    owner, app = deployed.postgres.owner, deployed.postgres.app
    deployed.in_database(f'GRANT "{owner}" TO "{app}"')
    # What the membership allows: the server's role lifts row-level security (rolled back here).
    with psycopg.connect(deployed.postgres.url(app)) as connection:
        connection.execute(f'SET ROLE "{owner}"')
        connection.execute("ALTER TABLE entries NO FORCE ROW LEVEL SECURITY")
        connection.rollback()
    refused = refusal(deployed.settings)
    assert refused.kind == "member"
    assert f"is a member of a role that may lift row-level security ({owner} owns the Armarius tables)" in (
        refused.problem)
    assert refused.fix == f'As a superuser: REVOKE "{owner}" FROM "{app}";'
    # The search vectors are kept without row-level security on purpose: never suggested to force it on.
    with opened(deployed.settings) as database:
        assert unforced_tables(database) == []
    deployed.in_database(f'REVOKE "{owner}" FROM "{app}"')  # the fix, as printed
    open_app(deployed.settings).close()


@pytest.mark.parametrize("power", ["SUPERUSER", "BYPASSRLS"])
def test_a_member_of_a_role_that_bypasses_row_level_security_is_refused(deployed: Deployed, power: str) -> None:
    app, other = deployed.postgres.app, f"armarius_power_{secrets.token_hex(4)}"
    admin(f'CREATE ROLE "{other}" NOLOGIN {power}', f'GRANT "{other}" TO "{app}"')
    try:
        refused = refusal(deployed.settings)
        assert refused.kind == "member"
        assert f"({other} {'is a superuser' if power == 'SUPERUSER' else 'bypasses row-level security'})" in (
            refused.problem)
    finally:
        admin(f'DROP ROLE "{other}"')


def test_the_owners_url_as_the_runtime_url_is_refused(deployed: Deployed) -> None:
    settings = Settings(data_dir=deployed.settings.data_dir, database_url=deployed.owner_url,
                        database_migrate_url=deployed.owner_url, memory_embeddings="off")
    refused = refusal(settings)
    assert refused.kind == "owns"
    assert "owns the Armarius tables, so it may lift their row-level security" in refused.problem


def test_a_role_that_may_read_the_search_vectors_is_refused(deployed: Deployed) -> None:
    app = deployed.postgres.app
    deployed.as_owner(f'GRANT SELECT ON entry_search TO "{app}"')
    refused = refusal(deployed.settings)
    assert refused.kind == "unscoped"
    assert refused.fix.startswith(f'As the owner: REVOKE ALL ON TABLE entry_search FROM PUBLIC, "{app}";')
    deployed.as_owner(f'REVOKE ALL ON TABLE entry_search FROM PUBLIC, "{app}"')
    open_app(deployed.settings).close()


# What the migrations make ----------------------------------------------------------------------------


def _vectors(deployed: Deployed) -> list[tuple[Any, ...]]:
    return deployed.in_database("SELECT entry_id, tsv::text FROM entry_search ORDER BY entry_id")


def test_a_dropped_text_search_configuration_is_found_and_made_again(deployed: Deployed) -> None:
    application = open_app(deployed.settings)
    try:
        team = make_team(application)
        for slug, body in (("people/mueller", "Frau Müller leads the Zürich team."), ("ops/deploy", "Deploy.")):
            application.memory.remember(team.agent, RememberRequest(slug=slug, title=slug, body=body))
    finally:
        application.close()
    configuration = "SELECT maptokentype, mapseqno, mapdict::regdictionary::text FROM pg_ts_config_map " \
                    "WHERE mapcfg = 'public.armarius_words'::regconfig ORDER BY 1, 2"
    mapped, vectors = deployed.in_database(configuration), _vectors(deployed)
    assert "'muller'" in vectors[0][1]

    deployed.as_owner("DROP EXTENSION unaccent CASCADE")  # the owner may: it created the extension
    with opened(deployed.settings) as database:
        assert missing_objects(database) == [
            MissingObject("text search configuration armarius_words", repairable=True)]
    application = open_app(deployed.settings)
    try:
        with pytest.raises(psycopg.errors.UndefinedObject):  # what every recall met: `internal`
            application.memory.recall(make_team(application, "beta").agent, "muller", mode="lexical")
    finally:
        application.close()

    assert repair_postgres(deployed.owner_url, deployed.postgres.app) == [
        "made the text search configuration armarius_words again as migration 21 makes it, and the search "
        "vectors with it"]
    with opened(deployed.settings) as database:
        assert missing_objects(database) == []
    assert deployed.in_database(configuration) == mapped
    assert _vectors(deployed) == vectors
    application = open_app(deployed.settings)
    try:
        team = make_team(application, "gamma")
        application.memory.remember(team.agent, RememberRequest(slug="people/mueller", title="M", body="Müller."))
        found = application.memory.recall(team.agent, "muller", mode="lexical")
        assert [hit["slug"] for hit in found["results"]] == ["people/mueller"]
    finally:
        application.close()
    assert repair_postgres(deployed.owner_url, deployed.postgres.app) == []


def test_a_dropped_function_is_found_but_not_made_again(deployed: Deployed) -> None:
    deployed.as_owner("DROP TRIGGER entries_search ON entries", "DROP FUNCTION armarius_index_entry()")
    with opened(deployed.settings) as database:
        assert missing_objects(database) == [MissingObject("function armarius_index_entry()"),
                                             MissingObject("trigger entries_search on entries")]


# Who may migrate --------------------------------------------------------------------------------------


def _tables(deployed: Deployed) -> list[tuple[Any, ...]]:
    return deployed.in_database("SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
                                "AND relkind = 'r' ORDER BY 1")


@pytest.mark.parametrize("migrating", ["app", "third"])
def test_only_the_owner_may_migrate_a_migrated_database(deployed: Deployed, migrating: str) -> None:
    app, third = deployed.postgres.app, f"armarius_third_{secrets.token_hex(4)}"
    admin(f'CREATE ROLE "{third}" LOGIN')
    try:
        before = deployed.in_database("SELECT version FROM schema_migrations ORDER BY 1")
        url = deployed.postgres.url(app if migrating == "app" else third)
        for attempt in (lambda: check_migrator(url, app), lambda: migrate_postgres(url, app),
                        lambda: repair_postgres(url, app)):
            with pytest.raises(ConfigError) as caught:
                attempt()
            assert caught.value.details == {"key": "database.migrate_url"}
            assert "Migrations need the owner's URL (ARMARIUS_DATABASE_MIGRATE_URL" in caught.value.message
            if migrating == "app":
                assert f"would migrate as {app}, the server's role of database.url" in caught.value.message
            else:
                assert (f"The Armarius tables belong to {deployed.postgres.owner}, and {third}, the role of the "
                        "migrate URL, is not it.") in caught.value.message
        assert deployed.in_database("SELECT version FROM schema_migrations ORDER BY 1") == before
    finally:
        admin(f'DROP ROLE "{third}"')


def test_a_role_that_may_not_create_tables_may_not_migrate_a_new_database(fresh: Deployed) -> None:
    third = f"armarius_third_{secrets.token_hex(4)}"
    admin(f'CREATE ROLE "{third}" LOGIN')
    try:
        with pytest.raises(ConfigError) as caught:
            migrate_postgres(fresh.postgres.url(third), fresh.postgres.app)
        assert f"{third}, the role of the migrate URL, may not create tables in this database's schema public" in (
            caught.value.message)
        assert _tables(fresh) == []
    finally:
        admin(f'DROP ROLE "{third}"')
    assert migrate_postgres(fresh.owner_url, fresh.postgres.app)[-1] == latest_version("postgresql")


def test_a_statement_the_migrator_may_not_run_rolls_its_migration_back(fresh: Deployed) -> None:
    """A role that may create tables but does not own what an earlier migration made (the owner migrated up to
    20): refused at the first statement it may not run, that migration not kept."""
    helper = f"armarius_helper_{secrets.token_hex(4)}"
    admin(f'CREATE ROLE "{helper}" LOGIN')
    try:
        migrate_postgres(fresh.owner_url, fresh.postgres.app, upto=20)
        fresh.in_database(f'GRANT CREATE ON SCHEMA public TO "{helper}"',
                          f'GRANT SELECT, INSERT ON schema_migrations TO "{helper}"')
        fresh.in_database(f'ALTER TABLE schema_migrations OWNER TO "{helper}"')
        with pytest.raises(ConfigError) as caught:
            migrate_postgres(fresh.postgres.url(helper), fresh.postgres.app)
        assert "was refused a statement of the migrations (permission denied)" in caught.value.message
        assert "the refused one was not" in caught.value.message
        assert fresh.in_database("SELECT max(version) FROM schema_migrations") == [(20,)]
    finally:
        fresh.in_database(f'REASSIGN OWNED BY "{helper}" TO "{fresh.postgres.owner}"', f'DROP OWNED BY "{helper}"')
        admin(f'DROP ROLE "{helper}"')


# URLs and logs ------------------------------------------------------------------------------------------


def test_a_url_libpq_would_misread_is_refused_before_any_pool(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for url in ("postgresql://app:Secret Word@127.0.0.1/db", "postgresql://app:Secret/Word@127.0.0.1/db",
                "postgresql://app:Secret@Word@127.0.0.1/db", "postgresql://app:Secret%zzWord@127.0.0.1/db"):
        with pytest.raises(ConfigError) as caught:
            PostgresDatabase(url)
        assert caught.value.details == {"key": "database.url"}
        for part in ("Secret", "Word"):
            assert part not in caught.value.message
    for part in ("Secret", "Word"):
        assert part not in caplog.text
    assert not [record for record in caplog.records if record.name.startswith("psycopg")]


def test_an_at_in_the_query_is_a_parameters_own_and_a_question_mark_belongs_to_the_password() -> None:
    """libpq ends the user part at the first @ unless a / comes first; an @ in the query (Azure's user@server
    names) was refused, and the masking took everything up to it for the user part."""
    assert database_url_problem("postgresql://127.0.0.1/db?user=me@corp&password=Secret") is None
    assert (masked_database_url("postgresql://127.0.0.1/db?user=me@corp&password=Secret")
            == "postgresql://127.0.0.1/db?user=me@corp&password=***")
    assert masked_database_url("postgresql://app:pa?ss@127.0.0.1/db") == "postgresql://app:***@127.0.0.1/db"
    assert database_url_secrets("postgresql://app:pa?ss@127.0.0.1/db?application_name=a@b") == {"pa?ss"}
    for misread in ("postgresql://app:p@x@127.0.0.1/db", "postgresql://app:pa/ss@127.0.0.1/db?sslmode=disable",
                    "postgresql://127.0.0.1/db@x"):
        assert database_url_problem(misread) is not None, misread


def test_the_pools_log_lines_never_hold_a_password(caplog: pytest.LogCaptureFixture) -> None:
    """libpq's message for a failed connection quotes what it was given; here a database named as the password
    (the server trusts the login), which the pool logs at each try."""
    secret = f"pw{secrets.token_hex(6)}"
    host = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)
    url = f"postgresql://postgres:{secret}@{host.get('host', '127.0.0.1')}:{host.get('port', 5432)}/{secret}"
    caplog.set_level(logging.INFO, logger="psycopg.pool")
    with pytest.raises(StorageUnavailable):
        PostgresDatabase(url, connect_timeout=1)
    lines = [record.getMessage() for record in caplog.records if record.name == "psycopg.pool"]
    assert any('database "***" does not exist' in line for line in lines), lines
    assert secret not in caplog.text


def test_a_password_of_a_few_characters_leaves_the_pools_log_lines_readable() -> None:
    """A password of 1 masked every 1 of a line ("***27.0.0.***"); libpq never quotes a URL the settings accept."""
    scrubbed = engine._ScrubbedPoolLog()
    scrubbed.add({"1", "pw9"})
    scrubbed.add({"longer-secret"})
    record = logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1,
                               'connection to server at "127.0.0.1" failed for %s', ("longer-secret",), None)
    assert scrubbed.filter(record)
    assert record.getMessage() == 'connection to server at "127.0.0.1" failed for ***'
