"""A small "game-world" database on SQLite, MariaDB and PostgreSQL for the database research tests.

The same logical content is loaded on all three engines (DDL differs by dialect, see :func:`ddl`):
four allowlisted tables (``creature_template``, ``item_template``, ``quest_template``,
``smart_scripts``), two hidden ones (``account`` holds "secrets", ``canary`` one row that must
stay untouched) and ``broadcast_text``, which tests allowlist when they need it: text columns in
several MariaDB character sets (utf8mb3, utf8mb4, latin1, cp1251; plain text elsewhere), a UUID
column (no declared type on SQLite), and a DECIMAL and a float column that hold 0. The expected
rows are module-level constants with Python values (``Decimal``, ``datetime``, ``date``,
``bytes``, ``None``) so tests compare against them rather than copying answers.

Awkward values on purpose: Unicode and emoji names, names with ``%``, ``_``, quotes, a backslash
and a newline, a DECIMAL(31,2) that no float holds, non-UTF-8 and empty blobs, a 5,000-byte blob, a
5,000-character TEXT, a BIGINT beyond 32 bits, negative keys and NULLs in most nullable columns.

On SQLite, DECIMAL columns have NUMERIC affinity, so decimals come back as lossy floats: compare
:data:`WORLD_DECIMAL_EXACT` only on MariaDB and PostgreSQL. SQLite stores datetimes and dates as
ISO text (``"2024-01-02 12:30:45"``, ``"2024-02-03"``).

Server worlds get a fresh database and two logins with random names and passwords: a reader with
SELECT on every table and nothing else, and a deliberately over-privileged writer. Everything is
dropped on exit. Run this file to check the whole thing by hand.
"""

from __future__ import annotations

import os
import re
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit
from uuid import UUID

import psycopg
from psycopg import sql

PG_ADMIN_URL = os.environ.get("ARMARIUS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
MARIADB_ADMIN_URL = os.environ.get("ARMARIUS_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/test")

ALLOWLISTED = ("creature_template", "quest_template", "item_template", "smart_scripts")
HIDDEN = ("account", "canary")
TABLES = ("creature_template", "item_template", "quest_template", "smart_scripts", "account", "canary",
          "broadcast_text")
"""All seven tables in creation order (items before quests: the foreign key)."""

WORLD_DECIMAL_EXACT = "12345678901234567890.12"

Login = Literal["owner", "reader", "writer"]


@dataclass(frozen=True)
class WorldServer:
    """Where a world lives and how to log in to it (owner/admin credentials are module constants)."""

    dialect: str
    host: str | None
    port: int | None
    database: str | None
    path: Path | None
    reader_user: str | None
    reader_password: str | None
    writer_user: str | None
    writer_password: str | None


# --- data -------------------------------------------------------------------------------------

FACTIONS = (14, 35, 7, 16)
SPEEDS = (1.25, 1.0, 1.5, 2.0)  # exact in binary, so FLOAT/REAL round-trips them unchanged

ICON_BINARY = b"\x00\xff\xfePNG\r\n\x1a\n\x80\x81"
"""Not UTF-8 (creature 1)."""
ICON_PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
"""Not UTF-8 either (creature 2)."""
ICON_EMPTY = b""
"""An empty blob, not NULL (creature 3)."""
ICON_LARGE = bytes((i * 7 + 3) % 256 for i in range(5000))
"""5,000 bytes, not UTF-8 (creature 9)."""
ICON_ASCII = b"plain ascii icon"
"""Valid UTF-8 bytes in a blob (creature 10)."""
ICONS: dict[int, bytes] = {1: ICON_BINARY, 2: ICON_PNG, 3: ICON_EMPTY, 9: ICON_LARGE, 10: ICON_ASCII}

SPECIAL_NAMES: dict[int, str] = {
    1: "Hogger",
    2: "Ragnaros der Feuerfürst 🔥",
    3: "Дракон",
    4: "100% Pure_Gold",
    5: "O'Brien \"the\" \\ Bold",
    6: "Percent%Only",
    7: "Under_score",
    8: "Line1\nLine2",
}
SCRIPT_NAMES: dict[int, str] = {1: "npc_hogger", 2: "boss_ragnaros"}


def _creature(entry: int) -> dict[str, Any]:
    minlevel = 10 + entry % 10
    return {
        "entry": entry,
        "name": SPECIAL_NAMES.get(entry, f"Creature {entry}"),
        "subname": None if entry % 3 == 0 else ("Riverpaw Chieftain" if entry == 1 else f"Subname {entry}"),
        "minlevel": minlevel,
        "maxlevel": minlevel + 2,
        "faction": FACTIONS[(entry - 1) % len(FACTIONS)],
        "speed_walk": SPEEDS[(entry - 1) % len(SPEEDS)],
        "gold_multiplier": Decimal(WORLD_DECIMAL_EXACT) if entry == 1 else Decimal(f"{entry}.50"),
        "created_at": None if entry % 10 == 0 else datetime(2024, 1, entry % 28 + 1, 12, 30, 45),
        "icon": ICONS.get(entry),
        "script_name": SCRIPT_NAMES.get(entry, ""),
    }


CREATURES: list[dict[str, Any]] = [_creature(entry) for entry in range(1, 61)]

LONG_DESCRIPTION = "long_marker " + "x" * 4988
"""5,000 characters (item 5's description)."""
ITEM_DATA: dict[int, bytes] = {1: b"\x00\x01\x02\xff", 2: b"\xde\xad\xbe\xef", 3: b"item-data-3"}
ITEM_NAMES: dict[int, str] = {1: "Hearthstone", 2: "Épée de l'Aube", 3: "50% Off_Coupon"}
BUY_PRICES: dict[int, Decimal] = {1: Decimal("0.0001"), 2: Decimal("12.5000"), 3: Decimal("99999999.9999")}


def _item(entry: int) -> dict[str, Any]:
    if entry == 5:
        description: str | None = LONG_DESCRIPTION
    elif entry == 6:
        description = "Zerbrechlich — ☃ fragile"
    elif entry % 4 == 0:
        description = None
    else:
        description = f"Description of item {entry}"
    return {
        "entry": entry,
        "name": ITEM_NAMES.get(entry, f"Item {entry}"),
        "quality": entry % 7,
        "buy_price": BUY_PRICES.get(entry, Decimal(f"{entry}.{entry:04d}")),
        "description": description,
        "data": ITEM_DATA.get(entry),
    }


ITEMS: list[dict[str, Any]] = [_item(entry) for entry in range(1, 41)]

QUEST_UNICODE_DETAILS = "Töte den Drachen 🐉 — Дракон «sofort»"
"""Quest 2's details."""
BIG_REWARD = 9_000_000_000_000
"""Quest 1's reward_money: beyond 32 bits."""


def _quest(quest_id: int) -> dict[str, Any]:
    return {
        "id": quest_id,
        "title": "The Hogger Hunt" if quest_id == 1 else f"Quest {quest_id}",
        "details": QUEST_UNICODE_DETAILS if quest_id == 2 else f"Details for quest {quest_id}.",
        "min_level": quest_id,
        "reward_money": BIG_REWARD if quest_id == 1 else quest_id * 1000,
        "reward_item": None if quest_id % 5 == 0 else quest_id,
        "starts_at": date(2024, 2, quest_id % 28 + 1) if quest_id % 2 == 0 else None,
    }


QUESTS: list[dict[str, Any]] = [_quest(quest_id) for quest_id in range(1, 31)]

SMART_ENTRIES = (*range(1, 26), -1001, -1002, -1003, -1004, -1005)
"""30 entryorguid values: creature entries 1..25 and five negative (per-spawn) guids."""
HOGGER_COMMENT = "Hogger - On Aggro - Say Line 0 (100% chance)"


def _smart_scripts() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for entryorguid in SMART_ENTRIES:
        source_type = 0 if entryorguid > 0 else 9
        for script_id in range(4):
            comment = f"Script {entryorguid} - event {script_id}"
            if entryorguid == 1 and script_id == 0:
                comment = HOGGER_COMMENT
            rows.append({
                "entryorguid": entryorguid,
                "source_type": source_type,
                "id": script_id,
                "link": script_id + 1 if script_id < 3 else 0,
                "event_type": script_id * 3 % 10,
                "action_type": (abs(entryorguid) + script_id) % 50,
                "comment": comment,
            })
    return rows


SMART_SCRIPTS: list[dict[str, Any]] = _smart_scripts()

ACCOUNTS: list[dict[str, Any]] = [
    {"id": 1, "username": "secret_admin", "sha_pass_hash": "SECRETHASH" + "A1" * 27, "email": "admin@secret.invalid"},
    {"id": 2, "username": "secret_gm", "sha_pass_hash": "SECRETHASH" + "B2" * 27, "email": "gm@secret.invalid"},
    {"id": 3, "username": "secret_player", "sha_pass_hash": "SECRETHASH" + "C3" * 27, "email": "player@secret.invalid"},
]
SECRET_MARKERS = ("secret_admin", "secret_gm", "secret_player", "SECRETHASH", "@secret.invalid")
"""Strings from ``account`` that must never appear in research output."""

CANARY: list[dict[str, Any]] = [{"id": 1, "note": "untouched"}]

SOUND_IDS = ("123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174001",
             "123e4567-e89b-12d3-a456-426614174004")
BROADCAST_TEXTS: list[dict[str, Any]] = [
    {"id": 1, "text_mb3": "Drache", "text_mb4": "Drache 🔥", "text_latin1": "café", "text_cp1251": "Дракон",
     "sound_id": SOUND_IDS[0], "chance": Decimal("0.0000"), "ratio": 0.0},
    {"id": 2, "text_mb3": "Дракон", "text_mb4": "Дракон", "text_latin1": "naïve €", "text_cp1251": "Змей",
     "sound_id": SOUND_IDS[1], "chance": Decimal("12.5000"), "ratio": 1.5},
    {"id": 3, "text_mb3": None, "text_mb4": None, "text_latin1": None, "text_cp1251": None, "sound_id": None,
     "chance": Decimal("1.0000"), "ratio": None},
    {"id": 4, "text_mb3": "plain", "text_mb4": "🔥", "text_latin1": "plain", "text_cp1251": "plain",
     "sound_id": SOUND_IDS[2], "chance": Decimal("99.9900"), "ratio": 2.0},
]
"""Texts for the character-set tests: on MariaDB, text_mb3 cannot hold 🔥, text_latin1 no Cyrillic,
text_cp1251 no 🔥 and no é (a set Armarius leaves to the server); elsewhere every column holds all.
Only one emoji, so that MariaDB's utf8mb4_unicode_ci (all emoji compare equal) changes no answer."""

ROWS: dict[str, list[dict[str, Any]]] = {
    "creature_template": CREATURES,
    "item_template": ITEMS,
    "quest_template": QUESTS,
    "smart_scripts": SMART_SCRIPTS,
    "account": ACCOUNTS,
    "canary": CANARY,
    "broadcast_text": BROADCAST_TEXTS,
}
COLUMNS: dict[str, tuple[str, ...]] = {table: tuple(rows[0]) for table, rows in ROWS.items()}
"""Each table's columns in declaration order."""
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "creature_template": ("entry",), "item_template": ("entry",), "quest_template": ("id",),
    "smart_scripts": ("entryorguid", "source_type", "id", "link"), "account": ("id",), "canary": ("id",),
    "broadcast_text": ("id",),
}


def expected_tuples(table: str) -> list[tuple[Any, ...]]:
    """The table's rows as tuples in column order, sorted by primary key (as ``SELECT * ... ORDER BY`` it)."""
    key = PRIMARY_KEYS[table]
    rows = sorted(ROWS[table], key=lambda row: tuple(row[name] for name in key))
    return [tuple(row[name] for name in COLUMNS[table]) for row in rows]

# --- schema -----------------------------------------------------------------------------------

_TYPES: dict[str, tuple[str, str, str]] = {  # logical type: (mariadb, postgresql, sqlite)
    "int": ("INT", "INTEGER", "INT"),
    "tinyint": ("TINYINT", "SMALLINT", "TINYINT"),
    "smallint": ("SMALLINT", "SMALLINT", "SMALLINT"),
    "bigint": ("BIGINT", "BIGINT", "BIGINT"),
    "float": ("FLOAT", "REAL", "REAL"),
    "datetime": ("DATETIME", "TIMESTAMP WITHOUT TIME ZONE", "DATETIME"),
    "date": ("DATE", "DATE", "DATE"),
    "blob": ("BLOB", "BYTEA", "BLOB"),
    "text": ("TEXT", "TEXT", "TEXT"),
    "text_mb3": ("VARCHAR(100) CHARACTER SET utf8mb3 COLLATE utf8mb3_general_ci", "TEXT", "TEXT"),
    "text_latin1": ("VARCHAR(100) CHARACTER SET latin1", "TEXT", "TEXT"),
    "text_cp1251": ("VARCHAR(100) CHARACTER SET cp1251", "TEXT", "TEXT"),
    "uuid": ("UUID", "UUID", ""),
}
_DIALECTS: tuple[str, ...] = ("mariadb", "postgresql", "sqlite")

_SCHEMA: dict[str, tuple[tuple[str, str, str], ...]] = {  # table: (column, logical type, constraint)
    "creature_template": (
        ("entry", "int", "PRIMARY KEY"),
        ("name", "VARCHAR(100)", "NOT NULL"),
        ("subname", "VARCHAR(100)", "NULL"),
        ("minlevel", "smallint", "NOT NULL"),
        ("maxlevel", "smallint", "NOT NULL"),
        ("faction", "int", "NOT NULL"),
        ("speed_walk", "float", "NULL"),
        ("gold_multiplier", "DECIMAL(31,2)", "NOT NULL"),
        ("created_at", "datetime", "NULL"),
        ("icon", "blob", "NULL"),
        ("script_name", "VARCHAR(64)", "NOT NULL DEFAULT ''"),
    ),
    "item_template": (
        ("entry", "int", "PRIMARY KEY"),
        ("name", "VARCHAR(255)", "NOT NULL"),
        ("quality", "tinyint", "NOT NULL"),
        ("buy_price", "DECIMAL(12,4)", "NOT NULL"),
        ("description", "text", "NULL"),
        ("data", "blob", "NULL"),
    ),
    "quest_template": (
        ("id", "int", "PRIMARY KEY"),
        ("title", "VARCHAR(255)", "NOT NULL"),
        ("details", "text", "NOT NULL"),
        ("min_level", "smallint", "NOT NULL"),
        ("reward_money", "bigint", "NOT NULL"),
        ("reward_item", "int", "NULL"),
        ("starts_at", "date", "NULL"),
    ),
    "smart_scripts": (
        ("entryorguid", "int", "NOT NULL"),
        ("source_type", "tinyint", "NOT NULL"),
        ("id", "smallint", "NOT NULL"),
        ("link", "smallint", "NOT NULL"),
        ("event_type", "smallint", "NOT NULL"),
        ("action_type", "smallint", "NOT NULL"),
        ("comment", "text", "NULL"),
    ),
    "account": (
        ("id", "int", "PRIMARY KEY"),
        ("username", "VARCHAR(32)", "NOT NULL"),
        ("sha_pass_hash", "VARCHAR(64)", "NOT NULL"),
        ("email", "VARCHAR(255)", "NULL"),
    ),
    "canary": (
        ("id", "int", "PRIMARY KEY"),
        ("note", "VARCHAR(64)", "NOT NULL"),
    ),
    "broadcast_text": (
        ("id", "int", "PRIMARY KEY"),
        ("text_mb3", "text_mb3", "NULL"),
        ("text_mb4", "VARCHAR(100)", "NULL"),
        ("text_latin1", "text_latin1", "NULL"),
        ("text_cp1251", "text_cp1251", "NULL"),
        ("sound_id", "uuid", "NULL"),
        ("chance", "DECIMAL(12,4)", "NOT NULL"),
        ("ratio", "float", "NULL"),
    ),
}
_TABLE_EXTRAS: dict[str, tuple[str, ...]] = {
    "quest_template": ("CONSTRAINT fk_quest_reward_item FOREIGN KEY (reward_item) REFERENCES item_template (entry)",),
    "smart_scripts": ("PRIMARY KEY (entryorguid, source_type, id, link)",),
}
INDEXES: dict[str, tuple[str, str]] = {
    "idx_creature_faction": ("creature_template", "faction"),
    "idx_creature_minlevel": ("creature_template", "minlevel"),
    "idx_creature_faction_minlevel": ("creature_template", "faction, minlevel"),
}


def ddl(dialect: str) -> list[str]:
    """CREATE TABLE and CREATE INDEX statements for one dialect, in order."""
    column = _DIALECTS.index(dialect)
    suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci" if dialect == "mariadb" else ""
    statements = []
    for table in TABLES:
        parts = [
            f"{name} {_TYPES[kind][column] if kind in _TYPES else kind} {constraint}"
            for name, kind, constraint in _SCHEMA[table]
        ]
        parts.extend(_TABLE_EXTRAS.get(table, ()))
        statements.append(f"CREATE TABLE {table} (\n    " + ",\n    ".join(parts) + f"\n){suffix}")
    statements.extend(f"CREATE INDEX {name} ON {table} ({columns})" for name, (table, columns) in INDEXES.items())
    return statements


def _sqlite_value(value: Any) -> Any:
    """Bind decimals and datetimes as text: sqlite3's own datetime adapters are deprecated."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    return value


def _load(cursor: Any, dialect: str) -> None:
    """Create the tables and insert every row with executemany and bound parameters."""
    for statement in ddl(dialect):
        cursor.execute(statement)
    mark = "?" if dialect == "sqlite" else "%s"
    for table in TABLES:
        columns = COLUMNS[table]
        insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"
        convert = _sqlite_value if dialect == "sqlite" else (lambda value: value)
        cursor.executemany(insert, [tuple(convert(row[name]) for name in columns) for row in ROWS[table]])


# --- connections ------------------------------------------------------------------------------

def _mariadb_admin() -> dict[str, Any]:
    parts = urlsplit(MARIADB_ADMIN_URL)
    return {
        "host": parts.hostname or "127.0.0.1", "port": parts.port or 3306,
        "user": unquote(parts.username or "root"), "password": unquote(parts.password or ""),
    }


def _pg_admin() -> dict[str, Any]:
    return psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)


def _credentials(server: WorldServer, login: Login) -> tuple[str | None, str | None]:
    if login == "reader":
        return server.reader_user, server.reader_password
    if login == "writer":
        return server.writer_user, server.writer_password
    admin = _mariadb_admin() if server.dialect == "mariadb" else _pg_admin()
    return admin.get("user"), admin.get("password")


def connect(server: WorldServer, login: Login = "owner") -> Any:
    """A DB-API connection to the world as the owner/admin, the reader or the writer.

    SQLite has no logins: every ``login`` gives a plain read-write connection. MariaDB connections
    use utf8mb4 and autocommit off; PostgreSQL connections autocommit off.
    """
    if server.dialect == "sqlite":
        assert server.path is not None
        return sqlite3.connect(server.path)
    user, password = _credentials(server, login)
    if server.dialect == "mariadb":
        import pymysql

        return pymysql.connect(  # the local test server has no TLS: no context (and CA bundle) per connection
            host=server.host, port=server.port, user=user, password=password or "",
            database=server.database, charset="utf8mb4", autocommit=False, ssl_disabled=True,
        )
    return psycopg.connect(
        host=server.host, port=server.port, user=user, password=password, dbname=server.database,
    )


def owner_rows(server: WorldServer, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run a SELECT as the owner/admin and return all rows (placeholders: ``?`` on SQLite, else ``%s``)."""
    connection = connect(server, "owner")
    try:
        cursor = connection.cursor()
        cursor.execute(query, tuple(params))
        rows = [tuple(row) for row in cursor.fetchall()]
        connection.rollback()
        return rows
    finally:
        connection.close()


def owner_count(server: WorldServer, table: str) -> int:
    """How many rows ``table`` holds, counted by the owner/admin."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", table):
        raise ValueError(f"not a plain table name: {table!r}")
    return int(owner_rows(server, f"SELECT COUNT(*) FROM {table}")[0][0])


# --- builders ---------------------------------------------------------------------------------

def build_sqlite_world(path: Path) -> WorldServer:
    """Create the world in a new SQLite file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    try:
        _load(connection.cursor(), "sqlite")
        connection.commit()
    finally:
        connection.close()
    return WorldServer(
        dialect="sqlite", host=None, port=None, database=None, path=path,
        reader_user=None, reader_password=None, writer_user=None, writer_password=None,
    )


def _new_server(dialect: str, host: str, port: int, suffix: str) -> WorldServer:
    return WorldServer(
        dialect=dialect, host=host, port=port, database=f"armarius_world_{suffix}", path=None,
        reader_user=f"aw_reader_{suffix}", reader_password=secrets.token_hex(16),
        writer_user=f"aw_writer_{suffix}", writer_password=secrets.token_hex(16),
    )


@contextmanager
def mariadb_world() -> Iterator[WorldServer]:
    """A fresh MariaDB database with the world, a SELECT-only reader and an ALL-privileges writer.

    Both logins exist for host ``'%'`` and ``'localhost'``. The reader has table-level SELECT on
    every table; the writer has ALL PRIVILEGES on the database. All is dropped on exit.
    """
    import pymysql

    admin = _mariadb_admin()
    server = _new_server("mariadb", admin["host"], admin["port"], secrets.token_hex(4))
    root = pymysql.connect(**admin, charset="utf8mb4", autocommit=True)
    try:
        with root.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{server.database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
            for host in ("%", "localhost"):
                for user, password in ((server.reader_user, server.reader_password),
                                       (server.writer_user, server.writer_password)):
                    cursor.execute("CREATE USER %s@%s IDENTIFIED BY %s", (user, host, password))
            cursor.execute(f"USE `{server.database}`")
            root.begin()
            _load(cursor, "mariadb")
            root.commit()
            for host in ("%", "localhost"):
                for table in TABLES:
                    cursor.execute(f"GRANT SELECT ON `{server.database}`.`{table}` TO %s@%s",
                                   (server.reader_user, host))
                cursor.execute(f"GRANT ALL PRIVILEGES ON `{server.database}`.* TO %s@%s",
                               (server.writer_user, host))
        yield server
    finally:
        try:
            _drop_mariadb(root, server)
        finally:
            root.close()


def _drop_mariadb(root: Any, server: WorldServer) -> None:
    """Kill the world's sessions, then drop its database and users."""
    with root.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.processlist"
            " WHERE (user IN (%s, %s) OR db = %s) AND id <> CONNECTION_ID()",
            (server.reader_user, server.writer_user, server.database),
        )
        for (session,) in cursor.fetchall():
            with suppress(Exception):  # the session may have ended on its own
                cursor.execute(f"KILL {int(session)}")
        cursor.execute(f"DROP DATABASE IF EXISTS `{server.database}`")
        for host in ("%", "localhost"):
            for user in (server.reader_user, server.writer_user):
                cursor.execute("DROP USER IF EXISTS %s@%s", (user, host))


@contextmanager
def postgres_world() -> Iterator[WorldServer]:
    """A fresh PostgreSQL database with the world, a SELECT-only reader and an over-privileged writer.

    ``PUBLIC`` loses its default database privileges (CONNECT, TEMP). The reader gets CONNECT, USAGE
    on schema public and SELECT on every table; the writer CONNECT, TEMP, USAGE and CREATE on
    schema public and ALL on the tables. All is dropped on exit (sessions terminated first).
    """
    admin = _pg_admin()
    server = _new_server("postgresql", admin.get("host", "127.0.0.1"), int(admin.get("port", 5432)),
                         secrets.token_hex(4))
    database, reader, writer = (sql.Identifier(str(name)) for name in
                                (server.database, server.reader_user, server.writer_user))
    admin_connection = psycopg.connect(PG_ADMIN_URL, autocommit=True)  # unreachable: raise with nothing to undo
    try:
        with admin_connection as connection:
            for role, password in ((reader, server.reader_password), (writer, server.writer_password)):
                connection.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(password)))
            connection.execute(sql.SQL("CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0").format(database))
            connection.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(database))
            connection.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(database, reader))
            connection.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(database, writer))
        with connect(server, "owner") as connection:
            with connection.cursor() as cursor:
                _load(cursor, "postgresql")
            connection.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(reader))
            connection.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA public TO {}").format(writer))
            connection.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(reader))
            connection.execute(sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA public TO {}").format(writer))
        yield server
    finally:
        _drop_postgres(server)


def _drop_postgres(server: WorldServer) -> None:
    """Terminate the world's sessions, then drop its database and roles."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE (datname = %s OR usename IN (%s, %s)) AND pid <> pg_backend_pid()",
            (server.database, server.reader_user, server.writer_user),
        )
        database = sql.Identifier(str(server.database))
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))
        for role in (server.reader_user, server.writer_user):
            connection.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(str(role))))


# --- manual self-check ------------------------------------------------------------------------

def _check_logins(server: WorldServer) -> None:
    """Reader reads but cannot write; writer can write (rolled back); exact decimal through the reader."""
    privilege_errors: tuple[type[Exception], ...]
    if server.dialect == "mariadb":
        import pymysql

        privilege_errors = (pymysql.err.OperationalError, pymysql.err.ProgrammingError)
    else:
        privilege_errors = (psycopg.errors.InsufficientPrivilege,)
    insert = "INSERT INTO canary (id, note) VALUES (2, 'written')"

    reader = connect(server, "reader")
    try:
        cursor = reader.cursor()
        cursor.execute("SELECT name FROM creature_template WHERE entry = 2")
        assert cursor.fetchone() == (SPECIAL_NAMES[2],)
        cursor.execute("SELECT gold_multiplier FROM creature_template WHERE entry = 1")
        (gold,) = cursor.fetchone()
        assert isinstance(gold, Decimal), gold
        assert gold == Decimal(WORLD_DECIMAL_EXACT), gold
        cursor.execute("SELECT icon FROM creature_template WHERE entry = 9")
        assert bytes(cursor.fetchone()[0]) == ICON_LARGE
        reader.rollback()
        try:
            cursor.execute(insert)
        except privilege_errors as error:
            print(f"  {server.dialect} reader INSERT refused: {error}")
        else:
            raise AssertionError("the reader could insert")
        reader.rollback()
    finally:
        reader.close()

    writer = connect(server, "writer")
    try:
        cursor = writer.cursor()
        cursor.execute(insert)
        cursor.execute("SELECT COUNT(*) FROM canary")
        assert cursor.fetchone()[0] == 2
        writer.rollback()
        print(f"  {server.dialect} writer INSERT accepted, rolled back")
    finally:
        writer.close()
    assert owner_rows(server, "SELECT id, note FROM canary") == [(1, "untouched")]


def _report(server: WorldServer) -> None:
    counts = {table: owner_count(server, table) for table in TABLES}
    print(f"{server.dialect}: {server.database or server.path} {counts}")
    assert counts == {table: len(rows) for table, rows in ROWS.items()}


def _check_contents(server: WorldServer) -> None:
    """Every table read back by the owner equals the constants (servers only: SQLite loses types)."""
    for table in TABLES:
        order = ", ".join(PRIMARY_KEYS[table])
        actual = owner_rows(server, f"SELECT * FROM {table} ORDER BY {order}")
        actual = [tuple(bytes(v) if isinstance(v, memoryview) else str(v) if isinstance(v, UUID) else v for v in row)
                  for row in actual]
        assert actual == expected_tuples(table), table


def _check_mariadb_accounts(server: WorldServer) -> None:
    """Which account TCP logins from 127.0.0.1 match, and that a wrong password is refused."""
    import pymysql

    connection = connect(server, "reader")
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT CURRENT_USER(), USER()")
        print(f"  mariadb reader logged in as {cursor.fetchone()}")
        cursor.execute("SHOW GRANTS")
        for (grant,) in cursor.fetchall():
            print(f"    {grant}")
    finally:
        connection.close()
    try:
        pymysql.connect(host=server.host, port=server.port, user=server.reader_user, password="wrong")
    except pymysql.err.OperationalError as error:
        print(f"  mariadb wrong password refused: {error}")
    else:
        raise AssertionError("a wrong password was accepted")


def _main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        server = build_sqlite_world(Path(folder) / "world.sqlite3")
        _report(server)
        query = "SELECT gold_multiplier, typeof(gold_multiplier) FROM creature_template WHERE entry = ?"
        gold = owner_rows(server, query, [1])
        print(f"  sqlite gold_multiplier of entry 1 (lossy, as expected): {gold}")
    for world in (mariadb_world, postgres_world):
        with world() as server:
            _report(server)
            _check_contents(server)
            _check_logins(server)
            if server.dialect == "mariadb":
                _check_mariadb_accounts(server)
        print(f"  {server.dialect} dropped {server.database}, {server.reader_user}, {server.writer_user}")


# --- research configuration ---------------------------------------------------------------

PASSWORD_VARIABLE = "ARMARIUS_TEST_WORLD_PASSWORD"


def database_entry(server: WorldServer, *, name: str = "world", login: Login = "reader", snapshot: str = "world-1",
                   tables: Sequence[str] = ALLOWLISTED, **extra: Any) -> dict[str, Any]:
    """One ``[[databases]]`` entry for ``server`` (its password comes from :data:`PASSWORD_VARIABLE`)."""
    entry: dict[str, Any] = {"name": name, "dialect": server.dialect, "snapshot": snapshot, "tables": list(tables)}
    if server.dialect == "sqlite":
        entry["path"] = str(server.path)
    else:
        user, _ = _credentials(server, login)
        entry |= {"host": server.host, "port": server.port, "database": server.database, "user": user,
                  "password_env": PASSWORD_VARIABLE}
    return entry | extra


def password_environ(server: WorldServer, login: Login = "reader") -> dict[str, str]:
    """The environment that holds the password ``database_entry`` names."""
    return {PASSWORD_VARIABLE: _credentials(server, login)[1] or ""}


if __name__ == "__main__":
    _main()
