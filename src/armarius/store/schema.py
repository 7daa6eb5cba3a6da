"""Schema migrations: numbered SQL files, one per engine, applied in order.

``NNNN_name.sqlite.sql`` and ``NNNN_name.postgres.sql`` describe the same schema in each
dialect. On PostgreSQL the migrations run as the role that owns the tables (the migrate URL)
and grant the server's login role (the runtime URL's user) only what it needs.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import psycopg
from psycopg import sql

from armarius.errors import ConfigError, SchemaOutdated, StorageUnavailable
from armarius.store.engine import Database, enable_wal, utc_now

_MIGRATIONS_PACKAGE = "armarius.store.migrations"
_MIGRATION_BUSY_SECONDS = 60.0
_SUFFIX = {"sqlite": ".sqlite.sql", "postgresql": ".postgres.sql"}
_CREATE_VERSIONS = (
    "CREATE TABLE IF NOT EXISTS schema_migrations "
    "(version integer PRIMARY KEY, name text NOT NULL, applied_at text NOT NULL)"
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    script: str


def migrations(dialect: str) -> list[Migration]:
    suffix = _SUFFIX[dialect]
    found = []
    for entry in resources.files(_MIGRATIONS_PACKAGE).iterdir():
        if entry.name.endswith(suffix):
            number, _, name = entry.name.removesuffix(suffix).partition("_")
            found.append(Migration(int(number), name, entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda migration: migration.version)


def latest_version(dialect: str) -> int:
    return migrations(dialect)[-1].version


def applied_versions(database: Database) -> set[int]:
    with database.transaction() as tx:
        if tx.dialect == "sqlite":
            exists = tx.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
        else:
            exists = tx.scalar("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
        if not exists:
            return set()
        return {int(row["version"]) for row in tx.all("SELECT version FROM schema_migrations")}


def current_version(database: Database) -> int:
    return max(applied_versions(database), default=0)


def check_schema(database: Database) -> None:
    """Refuse to serve on a schema that is older (or newer) than this code, or has a gap."""
    applied = applied_versions(database)
    have, want = max(applied, default=0), latest_version(database.dialect)
    missing = sorted({migration.version for migration in migrations(database.dialect)} - applied)
    if have > want:
        raise SchemaOutdated(
            f"The database schema is at version {have}, newer than this Armarius ({want}). "
            "Upgrade Armarius before serving this database.",
            current=have, required=want,
        )
    if missing:
        raise SchemaOutdated(
            f"The database schema lacks migration {', '.join(map(str, missing))}; this Armarius needs all up to "
            f"{want}. Run `armarius init` (with the same data folder and database settings) to migrate it.",
            current=have, required=want, missing=missing,
        )


def _wanted(dialect: str, upto: int | None) -> list[Migration]:
    """Every migration of the dialect, or only those up to version ``upto`` (a database as an older
    release left it: for upgrade tests)."""
    return [migration for migration in migrations(dialect) if upto is None or migration.version <= upto]


def migrate_sqlite(path: Path, *, upto: int | None = None) -> list[int]:
    """Apply pending migrations (up to version ``upto``, if given) to the SQLite file; returns the versions
    applied."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # private: it holds credentials
    # Several processes may migrate at once (each waits its turn): a generous busy timeout.
    connection = sqlite3.connect(path, isolation_level=None, timeout=_MIGRATION_BUSY_SECONDS)
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(_MIGRATION_BUSY_SECONDS * 1000)}")
        enable_wal(connection, _MIGRATION_BUSY_SECONDS)
        connection.execute(_CREATE_VERSIONS)
        applied = []
        for migration in _wanted("sqlite", upto):
            connection.execute("BEGIN IMMEDIATE")
            try:
                done = connection.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = ?", (migration.version,)
                ).fetchone()
                if done is None:
                    for statement in _sqlite_statements(migration.script):
                        connection.execute(statement)
                    connection.execute(
                        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                        (migration.version, migration.name, utc_now()),
                    )
                    applied.append(migration.version)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        return applied
    finally:
        connection.close()


def _sqlite_statements(script: str) -> list[str]:
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in pending.splitlines()
    ):
        raise ValueError("migration script ends inside a statement")
    return statements


def migrate_postgres(migrate_url: str, app_role: str, *, upto: int | None = None) -> list[int]:
    """Apply pending migrations (up to version ``upto``, if given) as the owner role; each runs in one
    transaction under a lock."""
    try:
        connection = psycopg.connect(migrate_url, autocommit=False)
    except psycopg.OperationalError as exc:
        raise StorageUnavailable("PostgreSQL cannot be reached with the migrate URL.") from exc
    applied = []
    with connection:
        cursor = connection.cursor()
        # One migrator at a time, across processes and hosts.
        cursor.execute("SELECT pg_advisory_xact_lock(4242001)")
        cursor.execute(_CREATE_VERSIONS)
        connection.commit()
        for migration in _wanted("postgresql", upto):
            cursor.execute("SELECT pg_advisory_xact_lock(4242001)")
            cursor.execute("SELECT 1 FROM schema_migrations WHERE version = %s", (migration.version,))
            if cursor.fetchone() is None:
                script = sql.SQL(migration.script.replace("{", "{{").replace("}", "}}")
                                 .replace("{{app_role}}", "{app_role}"))
                cursor.execute(script.format(app_role=sql.Identifier(app_role)))
                cursor.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, utc_now()),
                )
                applied.append(migration.version)
            connection.commit()
    return applied


def postgres_role(url: str) -> str:
    """The login role a PostgreSQL URL connects as (never its password)."""
    try:
        role = psycopg.conninfo.conninfo_to_dict(url).get("user")
    except psycopg.ProgrammingError:
        raise ConfigError("The PostgreSQL database URL cannot be parsed.", key="database.url") from None
    if not isinstance(role, str) or not role:
        raise ConfigError("The PostgreSQL database URL must name its user.", key="database.url")
    return role


_UNFORCED_TABLES = """
SELECT c.relname AS name FROM pg_class c
WHERE c.relkind IN ('r', 'p') AND pg_table_is_visible(c.oid)
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'workspace_id'
              AND a.attnum > 0 AND NOT a.attisdropped)
  AND has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE')
  AND NOT (c.relrowsecurity AND c.relforcerowsecurity)
ORDER BY c.relname
"""


def unforced_tables(database: Database) -> list[str]:
    """Workspace tables (those with a workspace_id column) the server role may touch whose row-level
    security is not enabled and forced. A table the role cannot touch at all, such as the search
    vectors, needs none."""
    with database.transaction() as tx:
        return [row["name"] for row in tx.all(_UNFORCED_TABLES)]


def check_postgres_role(database: Database) -> None:
    """Refuse a runtime role that bypasses row-level security, or that the migrations never granted."""
    with database.transaction() as tx:
        row = tx.one("SELECT rolsuper, rolbypassrls, rolname FROM pg_roles WHERE rolname = current_user")
        ungranted = tx.scalar(
            "SELECT to_regclass('schema_migrations') IS NOT NULL "
            "AND NOT has_table_privilege('schema_migrations', 'SELECT') AS ungranted"
        )
    if ungranted:
        raise ConfigError(
            "The server's PostgreSQL role has no grants on the Armarius tables. Run `armarius init` with "
            "database.url set to this role (and migrate_url to the owner): the migrations grant the role "
            "of database.url what it needs.",
            key="database.url",
        )
    if row is None or row["rolsuper"] or row["rolbypassrls"]:
        raise ConfigError(
            "The server's PostgreSQL role bypasses row-level security (superuser or BYPASSRLS), so "
            "workspaces would not be isolated. Connect database.url as a role without those "
            "attributes and keep the owner for database.migrate_url (docs/deployment.md).",
            key="database.url",
        )
