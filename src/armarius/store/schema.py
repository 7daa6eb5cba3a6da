"""Schema migrations: numbered SQL files, one per engine, applied in order.

``NNNN_name.sqlite.sql`` and ``NNNN_name.postgres.sql`` describe the same schema in each
dialect. On PostgreSQL the migrations run as the role that owns the tables (the migrate URL)
and grant the server's login role (the runtime URL's user) only what it needs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import psycopg.rows
from psycopg import sql

from armarius.errors import ConfigError, SchemaOutdated, StorageUnavailable
from armarius.store.engine import Database, Row, enable_wal, to_pyformat, utc_now

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
    transaction under a lock. A role that may not migrate is refused before anything is done
    (:func:`check_migrator`); a statement it may not run after all rolls its migration back."""
    applied = []
    with _as_owner(migrate_url, app_role) as connection:
        cursor = connection.cursor()
        # One migrator at a time, across processes and hosts.
        cursor.execute("SELECT pg_advisory_xact_lock(4242001)")
        cursor.execute(_CREATE_VERSIONS)
        connection.commit()
        for migration in _wanted("postgresql", upto):
            cursor.execute("SELECT pg_advisory_xact_lock(4242001)")
            cursor.execute("SELECT 1 FROM schema_migrations WHERE version = %s", (migration.version,))
            if cursor.fetchone() is None:
                cursor.execute(_with_role(migration.script, app_role))
                cursor.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, utc_now()),
                )
                applied.append(migration.version)
            connection.commit()
    return applied


def _with_role(script: str, app_role: str) -> sql.Composed:
    """A migration's script with ``{app_role}`` made the server role's quoted name."""
    template = sql.SQL(script.replace("{", "{{").replace("}", "}}").replace("{{app_role}}", "{app_role}"))
    return template.format(app_role=sql.Identifier(app_role))


_MIGRATE_KEY = "database.migrate_url"
_NEEDS_THE_OWNER = (
    "Migrations need the owner's URL (ARMARIUS_DATABASE_MIGRATE_URL, or database.migrate_url in armarius.toml): "
    "the role that owns the Armarius tables (on a new database: the database's owner), while database.url stays "
    "the server's role, which owns nothing (docs/deployment.md#teams-postgresql)."
)


def check_migrator(migrate_url: str, app_role: str) -> None:
    """Refuse, before anything is done, a migrate URL whose role may not migrate: the server's own role (the
    migrate URL left out, or set to the runtime URL's role), a role that does not own the Armarius tables, or,
    on a new database, one that may not create tables in its schema ``public``."""
    with _as_owner(migrate_url, app_role):
        pass


@contextmanager
def _as_owner(migrate_url: str, app_role: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the migrate URL's role, checked as :func:`check_migrator` says, closed afterwards (rolled
    back if what it runs raises); a statement the role may not run is refused as the same config_invalid."""
    try:
        connection = psycopg.connect(migrate_url, autocommit=False)
    except psycopg.ProgrammingError:  # its message quotes the URL
        raise ConfigError("The PostgreSQL URL of database.migrate_url cannot be used as written.",
                          key=_MIGRATE_KEY) from None
    except psycopg.OperationalError as exc:
        raise StorageUnavailable("PostgreSQL cannot be reached with the migrate URL.") from exc
    with connection:
        # The role it logged in as: the URL may leave the user to PGUSER, a service file or the system's user.
        row = connection.execute("SELECT current_user").fetchone()
        role = str(row[0]) if row else "?"
        if role == app_role:
            raise ConfigError(f"These settings would migrate as {role}, the server's role of database.url. "
                              f"{_NEEDS_THE_OWNER} Nothing was changed.", key=_MIGRATE_KEY)
        try:
            owner = connection.execute(
                "SELECT c.relowner::regrole::text, pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c "
                "WHERE c.relnamespace = 'public'::regnamespace AND c.relname = 'schema_migrations'").fetchone()
            may_create = connection.execute("SELECT has_schema_privilege('public', 'CREATE')").fetchone()
            connection.rollback()
            if owner is not None and not owner[1]:
                raise ConfigError(f"The Armarius tables belong to {owner[0]}, and {role}, the role of the migrate "
                                  f"URL, is not it. {_NEEDS_THE_OWNER} Nothing was changed.", key=_MIGRATE_KEY)
            if owner is None and not (may_create and may_create[0]):
                raise ConfigError(f"{role}, the role of the migrate URL, may not create tables in this database's "
                                  f"schema public. {_NEEDS_THE_OWNER} Nothing was changed.", key=_MIGRATE_KEY)
            yield connection
        except psycopg.errors.InsufficientPrivilege:
            raise ConfigError(f"{role}, the role of the migrate URL, was refused a statement of the migrations "
                              f"(permission denied). {_NEEDS_THE_OWNER} Each migration is applied whole or not at "
                              "all: the refused one was not.", key=_MIGRATE_KEY) from None


def postgres_role(url: str) -> str:
    """The login role a PostgreSQL URL connects as (never its password)."""
    try:
        role = psycopg.conninfo.conninfo_to_dict(url).get("user")
    except psycopg.ProgrammingError:
        raise ConfigError("The PostgreSQL database URL cannot be parsed.", key="database.url") from None
    if not isinstance(role, str) or not role:
        raise ConfigError("The PostgreSQL database URL must name its user.", key="database.url")
    return role


# What the server's role must have, and must not -------------------------------------------------------

#: Every privilege the migrations give the server's role (``GRANT … TO {app_role}``; a function's EXECUTE also
#: by PostgreSQL's default grant to PUBLIC), by object as GRANT names it: the role is checked against it
#: (:func:`check_postgres_role`, as `serve` and `doctor` open the database), `armarius init` grants what the
#: role lacks of it (:func:`repair_postgres`), and tests/store/test_postgres_setup.py checks that a migrated
#: database grants the role exactly this, no more and no less. A migration that grants the role something
#: adds it here.
SERVER_GRANTS: dict[str, tuple[str, ...]] = {
    "SCHEMA public": ("USAGE",),
    "FUNCTION armarius_workspace()": ("EXECUTE",),
    "FUNCTION armarius_entry_vector(text, text, text)": ("EXECUTE",),
    "FUNCTION armarius_search_entries(tsquery, integer, boolean, text[], integer)": ("EXECUTE",),
    "TABLE agent_tokens": ("SELECT", "INSERT", "UPDATE"),
    "TABLE approvals": ("SELECT", "INSERT", "UPDATE"),
    "TABLE audit_chains": ("SELECT",),
    "TABLE audit_events": ("SELECT", "INSERT"),
    "TABLE audit_heads": ("SELECT", "INSERT", "UPDATE"),
    "TABLE audit_legacy_events": ("SELECT",),
    "TABLE captures": ("SELECT", "INSERT"),
    "TABLE draft_proposals": ("SELECT", "INSERT", "UPDATE"),
    "TABLE drafts": ("SELECT", "INSERT", "UPDATE"),
    "TABLE entries": ("SELECT", "INSERT", "UPDATE"),
    "TABLE entry_links": ("SELECT", "INSERT", "DELETE"),
    "TABLE entry_revisions": ("SELECT", "INSERT"),
    "TABLE entry_tags": ("SELECT", "INSERT", "DELETE"),
    "TABLE entry_vectors": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "TABLE entry_word_maps": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "TABLE evidence_records": ("SELECT", "INSERT"),
    "TABLE evidence_revisions": ("SELECT", "INSERT"),
    "TABLE evidence_search": ("SELECT", "INSERT", "UPDATE"),
    "TABLE evidence_units": ("SELECT", "INSERT", "UPDATE"),
    "TABLE login_attempts": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "TABLE memberships": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "TABLE operations": ("SELECT", "INSERT"),
    "TABLE pending_operations": ("SELECT", "INSERT", "UPDATE"),
    "TABLE principals": ("SELECT", "INSERT", "UPDATE"),
    "TABLE repair_events": ("SELECT", "INSERT"),
    "TABLE repairs": ("SELECT", "INSERT", "UPDATE"),
    "TABLE schema_migrations": ("SELECT",),
    "TABLE session_checkpoints": ("SELECT", "INSERT"),
    "TABLE session_facts": ("SELECT", "INSERT"),
    "TABLE session_inputs": ("SELECT", "INSERT"),
    "TABLE session_reservations": ("SELECT", "INSERT", "UPDATE"),
    "TABLE sessions": ("SELECT", "INSERT", "UPDATE"),
    "TABLE unit_vectors": ("SELECT", "INSERT", "UPDATE"),
    "TABLE vector_models": ("SELECT", "INSERT"),
    "TABLE web_sessions": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "TABLE workspaces": ("SELECT", "INSERT", "UPDATE"),
}

#: Workspace tables (with a workspace_id column) kept without row-level security on purpose, and why: the
#: server's role may not touch them at all (checked by :func:`check_postgres_role`), and no check ever
#: suggests forcing row-level security on them. A migration that makes such a table adds it here.
UNSCOPED_TABLES: dict[str, str] = {
    # Migration 0004: PostgreSQL uses no GIN index for a match under row-level security, so the search
    # vectors are read only through armarius_search_entries(), which runs as the owner and admits the
    # transaction's workspace alone, and written only by the trigger function armarius_index_entry().
    "entry_search": "the search vectors of entries, reached only through functions that run as the owner",
}

#: What else the migrations make that the server uses, besides the tables and functions above: functions of
#: triggers (by the trigger, on its table), and the text search configuration of every query and vector.
TRIGGERS: dict[str, tuple[str, str]] = {
    "entries_search": ("entries", "armarius_index_entry()"),
    "audit_events_chain": ("audit_events", "armarius_note_audit_chain()"),
    "audit_heads_chain": ("audit_heads", "armarius_note_audit_chain()"),
}
TEXT_SEARCH_CONFIGURATION = "armarius_words"
#: The migration that makes the text search configuration; `armarius init` makes it again as that one does.
_WORDS_MIGRATION = 21

#: An Armarius table's or function's oid (NULL: it is not there), found by name in the catalogue: that needs no
#: privilege on the schema, which the role may have lost too (to_regclass would fail or find nothing then).
_TABLE_OID = "(SELECT c.oid FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relname = {name})"
_FUNCTION_OID = ("(SELECT f.oid FROM pg_proc f WHERE f.proname = split_part({name}, '(', 1) "
                 "AND f.pronamespace = 'public'::regnamespace "
                 "AND f.proname || '(' || oidvectortypes(f.proargtypes) || ')' = {name})")

_PRIVILEGES = f"""
SELECT wanted.object, wanted.privilege FROM unnest(?::text[], ?::text[], ?::text[]) AS wanted(kind, object, privilege)
WHERE NOT coalesce(CASE wanted.kind
    WHEN 'TABLE' THEN has_table_privilege(coalesce(?, current_user), {_TABLE_OID.format(name="wanted.object")},
                                          wanted.privilege)
    WHEN 'FUNCTION' THEN has_function_privilege(coalesce(?, current_user),
                                                {_FUNCTION_OID.format(name="wanted.object")}, wanted.privilege)
    WHEN 'SCHEMA' THEN has_schema_privilege(coalesce(?, current_user), wanted.object, wanted.privilege)
END, true)
"""


def _privileges_of(role: str | None) -> tuple[Any, ...]:
    """The parameters of :data:`_PRIVILEGES`: every privilege of :data:`SERVER_GRANTS`, and the role (None: the
    current user)."""
    wanted = [(*key.split(" ", 1), privilege) for key, privileges in SERVER_GRANTS.items() for privilege in privileges]
    kinds, objects, privileges = (list(column) for column in zip(*wanted, strict=True))
    return kinds, objects, privileges, role, role, role


def _lacking(rows: list[Row]) -> dict[str, list[str]]:
    """The rows of :data:`_PRIVILEGES` (the privileges the role lacks) by object, as SERVER_GRANTS names it; an
    object that is not there is left to :func:`missing_objects`."""
    lacking: dict[str, list[str]] = {}
    for row in rows:
        key = next(key for key in SERVER_GRANTS if key.split(" ", 1)[1] == row["object"])
        lacking.setdefault(key, []).append(row["privilege"])
    return lacking


def grant_statements(lacking: dict[str, list[str]], role: str) -> list[str]:
    """GRANT statements that give ``role`` what it lacks."""
    return [f"GRANT {', '.join(privileges)} ON {key} TO {_quoted(role)};" for key, privileges in lacking.items()]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_UNFORCED_TABLES = """
SELECT c.relname AS name FROM pg_class c
WHERE c.relkind IN ('r', 'p') AND pg_table_is_visible(c.oid)
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'workspace_id'
              AND a.attnum > 0 AND NOT a.attisdropped)
  AND has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE')
  AND NOT (c.relrowsecurity AND c.relforcerowsecurity)
  AND c.relname <> ALL (?::text[])
ORDER BY c.relname
"""


def unforced_tables(database: Database) -> list[str]:
    """Workspace tables (those with a workspace_id column) the server role may touch whose row-level
    security is not enabled and forced. A table the role cannot touch at all needs none, and the tables kept
    without it on purpose (:data:`UNSCOPED_TABLES`) are never listed: the role must not touch them at all
    (:func:`check_postgres_role` says so)."""
    with database.transaction() as tx:
        return [row["name"] for row in tx.all(_UNFORCED_TABLES, (list(UNSCOPED_TABLES),))]


class RoleRefused(ConfigError):
    """The server's PostgreSQL role may not serve: ``problem`` says why, ``fix`` what to run (the message
    says both)."""

    def __init__(self, kind: str, problem: str, fix: str) -> None:
        super().__init__(f"{problem} {fix}", key="database.url")
        #: bypasses, owns, member, ungranted, lacking, excess or unscoped.
        self.kind, self.problem, self.fix = kind, problem, fix


_ROLE = f"""
WITH owner AS (
    SELECT c.relowner AS oid FROM pg_class c JOIN unnest(?::text[]) AS name ON c.oid = {_TABLE_OID.format(name="name")}
    UNION
    SELECT f.proowner FROM pg_proc f JOIN unnest(?::text[]) AS name ON f.oid = {_FUNCTION_OID.format(name="name")}
)
SELECT r.rolname AS name, r.rolname = current_user AS itself, r.rolsuper AS super, r.rolbypassrls AS bypass,
       r.oid IN (SELECT oid FROM owner) AS owner
FROM pg_roles r
WHERE pg_has_role(current_user, r.oid, 'MEMBER')
ORDER BY r.rolname = current_user DESC, r.rolname
"""

_VERSION = f"""
SELECT CASE WHEN NOT has_schema_privilege('public', 'USAGE') THEN -2
            WHEN {_TABLE_OID.format(name="'schema_migrations'")} IS NULL THEN NULL
            WHEN NOT has_table_privilege({_TABLE_OID.format(name="'schema_migrations'")}, 'SELECT') THEN -1
            ELSE 0 END AS version
"""

#: The privileges the role holds on the Armarius tables beyond :data:`SERVER_GRANTS` (the tables' names, and what
#: the migrations grant on each, comma-separated).
_EXCESS = f"""
SELECT granted.object, p.privilege
FROM unnest(?::text[], ?::text[]) AS granted(object, privileges)
CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p(privilege)
WHERE p.privilege <> ALL (string_to_array(granted.privileges, ','))
  AND coalesce(has_table_privilege({_TABLE_OID.format(name="granted.object")}, p.privilege), false)
ORDER BY 1, 2
"""


def _granted_tables() -> tuple[list[str], list[str]]:
    """The parameters of :data:`_EXCESS`."""
    tables = {key.split(" ", 1)[1]: privileges for key, privileges in SERVER_GRANTS.items() if key.startswith("TABLE ")}
    return list(tables), [",".join(privileges) for privileges in tables.values()]


_TOUCHED = f"""
SELECT name FROM unnest(?::text[]) AS name
WHERE has_table_privilege({_TABLE_OID.format(name="name")},
                          'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
ORDER BY name
"""


def _armarius_objects() -> tuple[list[str], list[str]]:
    """The names of the tables and the functions (with their arguments' types) the server uses."""
    tables = [key.split(" ", 1)[1] for key in SERVER_GRANTS if key.startswith("TABLE ")] + list(UNSCOPED_TABLES)
    functions = [key.split(" ", 1)[1] for key in SERVER_GRANTS if key.startswith("FUNCTION ")]
    return tables, functions + sorted({function for _table, function in TRIGGERS.values()})


def check_postgres_role(database: Database) -> None:
    """Refuse a runtime role that may lift row-level security, or lacks what the migrations grant it.

    Refused: a superuser or BYPASSRLS role; the owner of the Armarius tables or functions (it may ALTER
    TABLE … NO FORCE ROW LEVEL SECURITY); a member of any of those (SET ROLE makes it one); a role the
    migrations never granted, or that lost a grant since (a statement that needs it would fail as
    ``internal``); a role that holds more than they grant on the Armarius tables (TRUNCATE ignores row-level
    security, TRIGGER runs the role's code in the owner's statements); a role that may touch a table kept
    without row-level security (:data:`UNSCOPED_TABLES`).
    The grants are checked on a schema at the latest version only (an older one is refused by check_schema,
    and `armarius init` grants what its migrations add)."""
    # One statement a round trip: statements prepared together would each keep the text of all (store.batches).
    with database.transaction() as tx:
        roles = tx.all(_ROLE, _armarius_objects())
        version = tx.scalar(_VERSION)
        if version == 0:
            version = tx.scalar("SELECT coalesce(max(version), 0) AS version FROM public.schema_migrations")
        current = version in (-2, latest_version("postgresql"))
        lacking = _lacking(tx.all(_PRIVILEGES, _privileges_of(None))) if current else {}
        excess: dict[str, list[str]] = {}
        for row in tx.all(_EXCESS, _granted_tables()) if current else []:
            excess.setdefault(row["object"], []).append(row["privilege"])
        touched = [row["name"] for row in tx.all(_TOUCHED, (list(UNSCOPED_TABLES),))]
    itself = roles[0] if roles and roles[0]["itself"] else None
    role = itself["name"] if itself else "?"
    if itself is None or itself["super"] or itself["bypass"]:
        raise RoleRefused(
            "bypasses",
            "The server's PostgreSQL role bypasses row-level security (superuser or BYPASSRLS), so workspaces "
            "would not be isolated.",
            f"Connect database.url as a role without those attributes (as a superuser: ALTER ROLE {_quoted(role)} "
            "NOSUPERUSER NOBYPASSRLS;) and keep the owner for database.migrate_url (docs/deployment.md).")
    if itself["owner"]:
        raise RoleRefused(
            "owns",
            "The server's PostgreSQL role owns the Armarius tables, so it may lift their row-level security (ALTER "
            "TABLE … NO FORCE ROW LEVEL SECURITY) and workspaces would not be isolated.",
            "Give the server a login role of its own that owns nothing (as a superuser: CREATE ROLE armarius_app "
            "LOGIN PASSWORD '…';), set database.url to it, keep this role for database.migrate_url, and run "
            "`armarius init`, which grants the new role what it needs (docs/deployment.md).")
    powers = [row for row in roles[1:] if row["super"] or row["bypass"] or row["owner"]]
    if powers:
        what = "; ".join(f"{row['name']} {_power(row)}" for row in powers)
        raise RoleRefused(
            "member",
            f"The server's PostgreSQL role is a member of a role that may lift row-level security ({what}): with "
            "SET ROLE it may act as that role, so workspaces would not be isolated.",
            "As a superuser: " + " ".join(f"REVOKE {_quoted(row['name'])} FROM {_quoted(role)};" for row in powers))
    if version == -1:
        raise RoleRefused(
            "ungranted",
            "The server's PostgreSQL role has no grants on the Armarius tables.",
            "Run `armarius init` with database.url set to this role and database.migrate_url to the owner's: it "
            "grants the role of database.url what it needs.")
    if lacking:
        raise RoleRefused(
            "lacking",
            "The server's PostgreSQL role lacks privileges the migrations grant it ("
            + "; ".join(f"{', '.join(privileges)} on {key.lower().split(' ', 1)[0]} {key.split(' ', 1)[1]}"
                        for key, privileges in lacking.items())
            + "): the first statement that needs one would fail.",
            "`armarius init` (migrate URL: the owner's) grants them again; or as the owner: "
            + " ".join(grant_statements(lacking, role)))
    if excess:
        raise RoleRefused(
            "excess",
            "The server's PostgreSQL role holds privileges the migrations never grant it ("
            + "; ".join(f"{', '.join(privileges)} on {name}" for name, privileges in excess.items())
            + "): TRUNCATE empties a table for every workspace (row-level security does not hold it back), TRIGGER "
            "would run the role's own code in the owner's statements, and UPDATE or DELETE on a record rewrites it.",
            "As the owner: " + " ".join(f"REVOKE {', '.join(privileges)} ON TABLE {name} FROM {_quoted(role)};"
                                        for name, privileges in excess.items())
            + " (A privilege that comes with another role, such as pg_write_all_data: revoke that role from "
            f"{_quoted(role)}.)")
    if touched:
        raise RoleRefused(
            "unscoped",
            f"The server's PostgreSQL role may read or change {', '.join(touched)}, kept without row-level "
            "security on purpose and never to be touched by the server (reached only through functions that "
            "run as the owner and admit one workspace): it could read every workspace's search words.",
            "As the owner: " + " ".join(f"REVOKE ALL ON TABLE {name} FROM PUBLIC, {_quoted(role)};" for name in touched)
            + " (A privilege that comes with another role, such as pg_read_all_data: revoke that role from "
            f"{_quoted(role)}.)")


def _power(row: Row) -> str:
    if row["super"]:
        return "is a superuser"
    if row["bypass"]:
        return "bypasses row-level security"
    return "owns the Armarius tables"


# What the migrations make, there or not ------------------------------------------------------------


@dataclass(frozen=True)
class MissingObject:
    """An object the migrations made that is gone; ``repairable``: `armarius init` makes it again."""

    name: str
    repairable: bool = False


_MISSING = f"""
SELECT 'table ' || name AS name FROM unnest(?::text[]) AS name WHERE {_TABLE_OID.format(name="name")} IS NULL
UNION ALL
SELECT 'function ' || name FROM unnest(?::text[]) AS name WHERE {_FUNCTION_OID.format(name="name")} IS NULL
UNION ALL
SELECT 'trigger ' || trigger.name || ' on ' || trigger.on_table
FROM unnest(?::text[], ?::text[]) AS trigger(name, on_table)
WHERE NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgname = trigger.name
                  AND t.tgrelid = {_TABLE_OID.format(name="trigger.on_table")} AND NOT t.tgisinternal)
UNION ALL
SELECT 'text search configuration ' || ? WHERE NOT EXISTS (
    SELECT 1 FROM pg_ts_config WHERE cfgname = ? AND cfgnamespace = 'public'::regnamespace)
"""


def missing_objects(database: Database) -> list[MissingObject]:
    """The tables, functions, triggers and text search configuration the server uses (those of
    :data:`SERVER_GRANTS`, :data:`UNSCOPED_TABLES`, :data:`TRIGGERS` and :data:`TEXT_SEARCH_CONFIGURATION`) that
    are not there, on a PostgreSQL database whose migrations all ran: `DROP EXTENSION unaccent CASCADE`, say,
    drops the text search configuration, and every recall and remember fails without it."""
    tables, functions = _armarius_objects()
    with database.transaction() as tx:
        rows = tx.all(_MISSING, (tables, functions, list(TRIGGERS), [table for table, _ in TRIGGERS.values()],
                                 TEXT_SEARCH_CONFIGURATION, TEXT_SEARCH_CONFIGURATION))
    configuration = f"text search configuration {TEXT_SEARCH_CONFIGURATION}"
    return [MissingObject(row["name"], repairable=row["name"] == configuration) for row in rows]


def repair_postgres(migrate_url: str, app_role: str) -> list[str]:
    """What `armarius init` makes again as the owner, after the migrations, and returns in words: the text search
    configuration when it is gone (as migration 0021 makes it, from that migration's own text, and the search
    vectors again with it), and the privileges of :data:`SERVER_GRANTS` the server's role lacks."""
    done = []
    with _as_owner(migrate_url, app_role) as connection:
        cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
        cursor.execute("SELECT pg_advisory_xact_lock(4242001)")
        cursor.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = %s AND cfgnamespace = 'public'::regnamespace",
                       (TEXT_SEARCH_CONFIGURATION,))
        gone = cursor.fetchone() is None
        cursor.execute("SELECT 1 FROM schema_migrations WHERE version = %s", (_WORDS_MIGRATION,))
        if gone and cursor.fetchone() is not None:
            cursor.execute(_with_role(words_repair(), app_role))
            done.append(f"made the text search configuration {TEXT_SEARCH_CONFIGURATION} again as migration "
                        f"{_WORDS_MIGRATION} makes it, and the search vectors with it")

        cursor.execute(to_pyformat(_PRIVILEGES), _privileges_of(app_role))
        lacking = _lacking(cursor.fetchall())
        for statement in grant_statements(lacking, app_role):
            cursor.execute(statement)
        if lacking:
            done.append(f"granted {app_role} what it lacked ({' '.join(grant_statements(lacking, app_role))})")
        connection.commit()
    return done


def words_repair() -> str:
    """Migration 0021 but its function: the text search configuration (and the unaccent extension where it may be
    created), then every stored search vector made again with it. Migrations are never edited, so the parts
    stay what they are; armarius_entry_vector() is left as the latest migration made it."""
    script = next(migration.script for migration in migrations("postgresql") if migration.version == _WORDS_MIGRATION)
    configuration, function_marker, rest = script.partition("-- Punctuation that PostgreSQL's parser")
    _function, vectors_marker, vectors = rest.partition("-- The vectors stored already")
    if not (function_marker and vectors_marker):
        raise RuntimeError("migration 0021 no longer holds the comments words_repair() cuts it at")
    return f"{configuration}\n{vectors_marker}{vectors}"
