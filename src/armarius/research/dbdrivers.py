"""Read-only connections to the operator's research databases: one small driver per dialect.

Every statement is read-only three ways. The operator gives a SELECT-only account
(docs/research.md shows the grants). Each connection is read-only for its whole session, and each
statement runs as its own read-only transaction with its time limit: MariaDB ``SET STATEMENT
tx_read_only=1, max_statement_time=… FOR …`` (nothing earlier in the session can lift it), MySQL
``START TRANSACTION READ ONLY``, PostgreSQL ``BEGIN READ ONLY`` under ``statement_timeout``; SQLite
opens the file ``mode=ro`` with ``PRAGMA query_only``, an authorizer that denies anything but
reading and a progress handler for the time limit. And :meth:`Driver.fetch` runs only a single
``SELECT`` without ``;`` or comments, as :mod:`armarius.research.database` builds them from checked
identifiers with every value bound. Multiple statements per call are never enabled.

Driver messages can carry hosts, user names and values, so none reaches a caller or a log. Each
driver sorts its errors in one place (:meth:`Driver._classify`), by exception class, SQLSTATE,
MySQL error number or SQLite result code, never by message text: an error caused by the request's
own values (a value the column's type or character set cannot take) becomes ``invalid_input``; a
provider failure (unreachable, timed out, refused) becomes ``research_unavailable`` naming the
database and a reason only.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from armarius.errors import InternalError, InvalidInput, ResearchUnavailable
from armarius.research.config import DatabaseSource

logger = logging.getLogger("armarius.research")

Family = Literal["integer", "decimal", "float", "text", "bytes", "temporal", "boolean", "other"]
#: What a driver error means: the request's values (input), or the provider (timeout, lost, failed).
Failure = Literal["input", "timeout", "lost", "failed"]
_IDLE_CONNECTIONS = 4
#: What the statement builder writes: one SELECT, no statement separator, no comment.
_SINGLE_SELECT = re.compile(r"SELECT (?:(?!--|/\*|#)[^;])*", re.DOTALL)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    family: Family
    nullable: bool
    #: The column's character set where the server keeps one per column (MariaDB), else None.
    charset: str | None = None


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[str, ...]
    table: str
    references: tuple[str, ...]


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    unique: bool


@dataclass(frozen=True)
class Table:
    name: str
    columns: dict[str, Column]
    primary_key: tuple[str, ...]
    foreign_keys: tuple[ForeignKey, ...]
    #: Indexes on plain columns (an index on an expression is left out): what filters and orders are fast.
    indexes: tuple[Index, ...] = ()


class Driver(ABC):
    """Connections to one database, pooled; statements run through :meth:`fetch`."""

    #: The DB-API placeholder the statement builder writes for a bound value.
    placeholder = "%s"

    def __init__(self, source: DatabaseSource) -> None:
        self.source = source
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    @abstractmethod
    def quote(self, name: str) -> str:
        """A checked identifier, quoted for this dialect. The quote character itself is doubled all
        the same: should a name ever pass unchecked, it stays one identifier (defence in depth)."""

    @abstractmethod
    def table_ref(self, table: str) -> str:
        """The quoted, qualified name a statement reads from."""

    def converter(self, column: Column) -> Callable[[Any], Any] | None:  # noqa: ARG002 - dialects override
        """What turns this column's values, as the driver returns them, into their JSON form (None:
        the generic conversion by Python type does)."""
        return None

    def holds(self, column: Column, text: str) -> bool:  # noqa: ARG002 - dialects override
        """False only when the column's character set certainly cannot hold ``text`` (such a value
        equals no stored value); where that is not known, the server decides."""
        return True

    def like_pattern_limit(self) -> int | None:
        """The longest LIKE pattern the engine takes, in UTF-8 bytes (None: no limit of its own)."""
        return None

    @abstractmethod
    def _open(self) -> Any:
        """A new connection, read-only for its session, with the statement time limit set."""

    @abstractmethod
    def _run(self, connection: Any, statement: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
        """One statement in one read-only transaction."""

    @abstractmethod
    def _classify(self, error: BaseException) -> Failure | None:
        """What a driver exception means; None when it is not the driver's. The one place where
        driver errors are sorted, by class and code only."""

    @abstractmethod
    def _catalogue(self, connection: Any, tables: Sequence[str]) -> dict[str, Table]:
        """The real columns and keys of those of ``tables`` that exist and can be read."""

    def fetch(self, statement: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one ``SELECT`` read-only; anything else is refused unrun (the statement-shape layer)."""
        if not _SINGLE_SELECT.fullmatch(statement):
            logger.error("research database %s: a statement that is not a single SELECT was refused unrun",
                         self.source.name)
            raise InternalError()
        return self.fetch_unchecked(statement, parameters)

    def fetch_unchecked(self, statement: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement with only the read-only session and transaction around it (the tests use this
        to show that those layers hold on their own); a connection that died while idle is replaced once."""
        for attempt in (1, 2):
            try:
                with self._connection() as connection:  # a connection that failed is closed, never pooled
                    return self._run(connection, statement, parameters)
            except Exception as error:
                if attempt == 1 and self._classify(error) == "lost":
                    continue
                raise self._translate(error, values=True) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def catalogue(self) -> dict[str, Table]:
        try:
            with self._connection() as connection:
                return self._catalogue(connection, self.source.tables)
        except Exception as error:
            raise self._translate(error, values=False) from None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            _close_quietly(connection)

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        if connection is None:
            try:
                connection = self._open()
            except Exception as error:
                raise self._translate(error, values=False, connecting=True) from None
        healthy = False
        try:
            yield connection
            healthy = True
        finally:
            if healthy:
                with self._lock:
                    if len(self._idle) < _IDLE_CONNECTIONS:
                        self._idle.append(connection)
                        connection = None
            if connection is not None:
                _close_quietly(connection)

    def _translate(self, error: BaseException, *, values: bool, connecting: bool = False) -> BaseException:
        """Our error for a driver's: ``invalid_input`` when the statement's values caused it (``values``:
        they came from the request), else ``research_unavailable``; never the driver's message."""
        kind = self._classify(error)
        if kind is None:
            return error  # not the driver's: a bug of ours, reported as such
        name = self.source.name
        # The driver's message may name hosts, users or values: log and report the class only.
        logger.warning("research database %s: %s (%s)", name, type(error).__name__, kind)
        if kind == "input" and values and not connecting:
            return InvalidInput(
                f"The database {name!r} cannot compare a filter value with its column: the value does not fit "
                "the column's type or character set. Check each value against the column's kind and type "
                "(database.schema lists them) and call again.",
                field="filters", database=name,
            )
        if kind == "timeout":
            return ResearchUnavailable(
                f"The query on database {name!r} ran longer than its limit of "
                f"{self.source.limits.timeout_seconds:g} s. "
                "Narrow the filters (indexed columns first) or ask the operator to raise timeout_seconds.",
                database=name, reason="timeout",
            )
        if connecting:
            return ResearchUnavailable(f"The database {name!r} cannot be reached or refused the login.",
                                       database=name, reason="connect")
        return ResearchUnavailable(f"The database {name!r} refused the query ({type(error).__name__}).",
                                   database=name, reason="refused")


def _close_quietly(connection: Any) -> None:
    with contextlib.suppress(Exception):  # a broken connection is being thrown away anyway
        connection.close()


# --- MariaDB / MySQL (PyMySQL) -------------------------------------------------------------------

_MARIADB_FAMILIES: dict[str, Family] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"), "integer"),
    **dict.fromkeys(("decimal", "numeric"), "decimal"),
    **dict.fromkeys(("float", "double", "real"), "float"),
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"), "text"),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit"), "bytes"),
    **dict.fromkeys(("date", "datetime", "timestamp", "time"), "temporal"),
}
# MariaDB: ER_STATEMENT_TIMEOUT; MySQL: ER_QUERY_TIMEOUT and "interrupted".
_MARIADB_TIMEOUTS = {1969, 3024, 1317}
_MARIADB_LOST = {2006, 2013, 2014, 2055}
#: Errors a statement's values cause: collations that cannot meet (a value the column's character set
#: cannot hold: CANT_AGGREGATE_2/3/NCOLLATIONS, COLLATION_CHARSET_MISMATCH), a string not valid in a
#: character set (TRUNCATED_WRONG_VALUE_FOR_FIELD, TRUNCATED_WRONG_VALUE), values out of range
#: (WARN_DATA_OUT_OF_RANGE, DATA_OUT_OF_RANGE, DATA_TOO_LONG, ILLEGAL_VALUE_FOR_TYPE) and a column type that
#: cannot be compared with such a value (ILLEGAL_PARAMETER_DATA_TYPES2_FOR_OPERATION, say UUID and int).
_MARIADB_INPUT = {1267, 1270, 1271, 1253, 1366, 1292, 1264, 1690, 1406, 1367, 4078}
_BEYOND_BMP = re.compile("[\U00010000-\U0010ffff]")
#: The five bytes Windows-1252 leaves unassigned, which MariaDB's latin1 keeps as the C1 controls they name.
_LATIN1_EXTRA = frozenset("\x81\x8d\x8f\x90\x9d")
#: Per character set whose repertoire is known exactly, whether it holds a text. Any other set is left to
#: the server (utf8mb4 and utf16/32 hold everything), whose refusal is then an ``input`` error.
_MARIADB_REPERTOIRES: dict[str, Callable[[str], bool]] = {
    # utf8mb3 (spelled utf8 before MariaDB 10.6) and ucs2: the Basic Multilingual Plane only.
    **dict.fromkeys(("utf8mb3", "utf8", "ucs2"), lambda text: not _BEYOND_BMP.search(text)),
    "ascii": str.isascii,
    "latin1": lambda text: all(_in_cp1252(character) or character in _LATIN1_EXTRA for character in text),
}


def _in_cp1252(character: str) -> bool:
    try:
        character.encode("cp1252")
    except UnicodeEncodeError:
        return False
    return True


def _iso_text(value: Any) -> Any:
    """MariaDB's DATETIME text ``2024-01-31 12:30:00[.ffffff]`` in ISO 8601 (DATE and TIME are already)."""
    return value.replace(" ", "T", 1) if isinstance(value, str) else value


@cache
def _mariadb_conversions() -> dict[Any, Any]:
    """PyMySQL's conversions, except that DECIMAL and the date and time types stay the server's text:
    exact, and already (nearly) the JSON form, so no Decimal or datetime is built and undone."""
    import pymysql.converters
    from pymysql.constants import FIELD_TYPE

    kept = (FIELD_TYPE.DECIMAL, FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.DATE,
            FIELD_TYPE.TIME)
    return {key: value for key, value in pymysql.converters.conversions.items() if key not in kept}


#: The bytes of a value's length after its first byte, by that byte (under 251: the length itself).
_PREFIX_WIDTHS = {252: 2, 253: 3, 254: 8}


def _decoded_row(data: bytes, converters: Sequence[tuple[str | None, Callable[[Any], Any] | None]]) -> tuple[Any, ...]:
    """One text-protocol row (its packet's bytes) as PyMySQL's ``MySQLResult._read_row_from_packet`` decodes it,
    each column's value length-prefixed (251: NULL), decoded and converted as ``converters`` say, in one loop:
    PyMySQL makes four method calls of each value, most of the driver's time on a page of rows."""
    row: list[Any] = []
    at, end = 0, len(data)
    for encoding, converter in converters:
        if at >= end:  # fewer values than columns: PyMySQL stops there too
            break
        size = data[at]
        if size < 251:
            at += 1
        elif size == 251:  # NULL
            row.append(None)
            at += 1
            continue
        else:
            width = _PREFIX_WIDTHS.get(size, end)  # 255 starts no value
            size = int.from_bytes(data[at + 1:at + 1 + width], "little")
            at += 1 + width
        if at + size > end:
            from pymysql.err import InternalError

            raise InternalError("a row's value runs past its packet")
        value: Any = data[at:at + size]
        at += size
        if encoding is not None:
            value = value.decode(encoding)
        if converter is not None:
            value = converter(value)
        row.append(value)
    return tuple(row)


@cache
def _mariadb_connection() -> type[Any]:
    """PyMySQL's connection, decoding the rows of a buffered result with :func:`_decoded_row` (the same values:
    tests/research/test_database_row_decoding.py compares them with PyMySQL's own on every column type). It replaces
    two private methods of PyMySQL 1.x, whose version the project's dependencies pin."""
    from pymysql import connections

    # Their private methods are not in the type stubs: both are taken as Any.
    base_result: Any = connections.MySQLResult
    base_connection: Any = connections.Connection

    class Result(base_result):  # type: ignore[misc]
        connection: Any

        def _read_rowdata_packet(self) -> None:
            rows, read_packet, converters = [], self.connection._read_packet, self.converters
            while True:
                packet = read_packet()  # checks the sequence, joins packets over 16 MiB, raises an error packet's
                if self._check_packet_is_eof(packet):
                    self.connection = None  # as PyMySQL's: no cycle left
                    break
                rows.append(_decoded_row(packet.get_all_data(), converters))
            self.affected_rows = len(rows)
            self.rows = tuple(rows)

    class FastRows(base_connection):  # type: ignore[misc]
        def _read_query_result(self, unbuffered: bool = False) -> int:
            if unbuffered:
                return super()._read_query_result(unbuffered)  # type: ignore[no-any-return]
            self._result = None
            result = Result(self)
            result.read()
            self._result = result
            if result.server_status is not None:
                self.server_status = result.server_status
            return int(result.affected_rows)

    return FastRows


class MariadbDriver(Driver):
    def converter(self, column: Column) -> Callable[[Any], Any] | None:
        return _iso_text if column.family == "temporal" else None

    def holds(self, column: Column, text: str) -> bool:
        repertoire = _MARIADB_REPERTOIRES.get((column.charset or "").lower())
        return True if repertoire is None else repertoire(text)

    def quote(self, name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def table_ref(self, table: str) -> str:
        return self.quote(table)

    def _open(self) -> Any:
        from pymysql.constants import CLIENT

        limits = self.source.limits
        connection = _mariadb_connection()(
            conv=_mariadb_conversions(),
            host=self.source.host, port=self.source.port or 3306, user=self.source.user,
            password=self.source.password or "",
            database=self.source.database, charset="utf8mb4", autocommit=True, local_infile=False,
            connect_timeout=min(10, max(1, math.ceil(limits.timeout_seconds))),
            read_timeout=math.ceil(limits.timeout_seconds) + 10, write_timeout=math.ceil(limits.timeout_seconds) + 10,
        )
        try:
            if connection.client_flag & CLIENT.MULTI_STATEMENTS:  # never: one statement per call
                raise RuntimeError("multi-statements must be off")
            with connection.cursor() as cursor:
                cursor.execute("SET SESSION TRANSACTION READ ONLY")
                if "mariadb" not in str(connection.get_server_info()).lower():
                    cursor.execute("SET SESSION max_execution_time = %s", (int(limits.timeout_seconds * 1000),))
                    return _MysqlConnection(connection, None)
                cursor.execute("SET SESSION max_statement_time = %s", (limits.timeout_seconds,))  # the catalogue's
                cursor.execute("SHOW SESSION VARIABLES LIKE 'transaction_read_only'")
                flag = "transaction_read_only" if cursor.fetchall() else "tx_read_only"  # before MariaDB 11.1
        except BaseException:
            connection.close()
            raise
        # Read-only and the time limit for each statement itself: no earlier session change can undo them.
        limit = f"max_statement_time={limits.timeout_seconds:.3f}"
        return _MysqlConnection(connection, f"SET STATEMENT {flag}=1, {limit} FOR ")

    def _run(self, connection: Any, statement: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = connection.run(statement, parameters)
        return rows

    def _classify(self, error: BaseException) -> Failure | None:
        import pymysql

        if not isinstance(error, pymysql.err.Error):
            return None
        code = error.args[0] if error.args and isinstance(error.args[0], int) else None
        if code in _MARIADB_INPUT:
            return "input"
        if code in _MARIADB_TIMEOUTS:
            return "timeout"
        if code in _MARIADB_LOST or isinstance(error, pymysql.err.InterfaceError):
            return "lost"
        return "failed"

    def _catalogue(self, connection: Any, tables: Sequence[str]) -> dict[str, Table]:
        marks = ", ".join(["%s"] * len(tables))
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, IS_NULLABLE, CHARACTER_SET_NAME "
                f"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({marks}) "
                "ORDER BY TABLE_NAME, ORDINAL_POSITION",
                tuple(tables),
            )
            columns = [(table, Column(name, str(column_type), _MARIADB_FAMILIES.get(str(data).lower(), "other"),
                                      nullable == "YES", charset))
                       for table, name, column_type, data, nullable, charset in cursor.fetchall()]
            cursor.execute(
                "SELECT TABLE_NAME, CONSTRAINT_NAME, COLUMN_NAME, REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME "
                f"FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({marks}) "
                "ORDER BY TABLE_NAME, CONSTRAINT_NAME, ORDINAL_POSITION",
                tuple(tables),
            )
            keys = [(table, constraint, column, referenced, referenced_column)
                    for table, constraint, column, referenced, referenced_column in cursor.fetchall()]
            cursor.execute(
                "SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME, NON_UNIQUE = 0 FROM information_schema.STATISTICS "
                f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({marks}) "
                "ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
                tuple(tables),
            )
            indexes = [(table, index, column, bool(unique)) for table, index, column, unique in cursor.fetchall()]
        primary = [(table, column) for table, constraint, column, _, _ in keys if constraint == "PRIMARY"]
        foreign = [(table, constraint, column, referenced, referenced_column)
                   for table, constraint, column, referenced, referenced_column in keys if referenced is not None]
        return _assemble(tables, columns, primary, foreign, indexes)


class _MysqlConnection:
    """A PyMySQL connection and how its statements are made read-only and time-limited.

    MariaDB: ``SET STATEMENT tx_read_only=1, max_statement_time=… FOR SELECT …``, in autocommit,
    is one read-only transaction with its limit, in one round trip. MySQL has no ``SET
    STATEMENT``: ``START TRANSACTION READ ONLY`` … ``ROLLBACK`` under the session's
    ``max_execution_time``.
    """

    def __init__(self, connection: Any, prefix: str | None) -> None:
        self._connection, self._prefix = connection, prefix

    def cursor(self) -> Any:
        return self._connection.cursor()

    def run(self, statement: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
        arguments = tuple(parameters) or None  # None: no %-formatting of a statement without parameters
        with self._connection.cursor() as cursor:
            if self._prefix is not None:
                cursor.execute(self._prefix + statement, arguments)
                return list(cursor.fetchall())
            cursor.execute("START TRANSACTION READ ONLY")
            try:
                cursor.execute(statement, arguments)
                return list(cursor.fetchall())
            finally:
                cursor.execute("ROLLBACK")

    def close(self) -> None:
        self._connection.close()


# --- PostgreSQL (psycopg 3) ----------------------------------------------------------------------

_POSTGRES_FAMILIES: dict[str, Family] = {
    **dict.fromkeys(("int2", "int4", "int8", "oid"), "integer"), "numeric": "decimal",
    **dict.fromkeys(("float4", "float8"), "float"), "bool": "boolean", "bytea": "bytes",
}
_POSTGRES_CATEGORIES: dict[str, Family] = {"S": "text", "D": "temporal", "E": "text"}

_POSTGRES_COLUMNS = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), t.typname, t.typcategory, NOT a.attnotnull
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
  AND has_table_privilege(c.oid, 'SELECT')
ORDER BY c.relname, a.attnum
"""
_POSTGRES_KEYS = """
SELECT c.relname, k.contype, k.conname, a.attname, f.relname, fa.attname
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL unnest(k.conkey) WITH ORDINALITY AS key(number, position)
JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = key.number
LEFT JOIN pg_catalog.pg_class f ON f.oid = k.confrelid
LEFT JOIN pg_catalog.pg_attribute fa ON fa.attrelid = k.confrelid AND fa.attnum = k.confkey[key.position]
WHERE n.nspname = %s AND c.relname = ANY(%s) AND k.contype IN ('p', 'f')
ORDER BY c.relname, k.conname, key.position
"""
_POSTGRES_INDEXES = """
SELECT c.relname, i.relname, a.attname, x.indisunique
FROM pg_catalog.pg_index x
JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS key(number, position)
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = key.number AND key.number > 0
WHERE n.nspname = %s AND c.relname = ANY(%s) AND key.position <= x.indnkeyatts
ORDER BY c.relname, i.relname, key.position
"""


class PostgresDriver(Driver):
    def quote(self, name: str) -> str:
        return _double_quoted(name)

    def table_ref(self, table: str) -> str:
        return f"{self.quote(self.source.schema)}.{self.quote(table)}"

    def _open(self) -> Any:
        import psycopg

        limits = self.source.limits
        connection = psycopg.connect(
            host=self.source.host, port=self.source.port, dbname=self.source.database, user=self.source.user,
            password=self.source.password or "", connect_timeout=min(10, max(2, math.ceil(limits.timeout_seconds))),
            options=(f"-c default_transaction_read_only=on -c statement_timeout={int(limits.timeout_seconds * 1000)} "
                     "-c idle_in_transaction_session_timeout=60000"),
            autocommit=False, application_name="armarius-research",
            # Text goes to the server as UTF-8 whatever the database's encoding: a character the database
            # cannot hold is then the server's refusal (SQLSTATE 22P05, a value error), not an encoding
            # error in the client.
            client_encoding="UTF8",
        )
        connection.read_only = True  # every transaction starts with BEGIN READ ONLY
        return connection

    def _run(self, connection: Any, statement: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement, tuple(parameters))
                rows: list[tuple[Any, ...]] = cursor.fetchall()
        finally:
            connection.rollback()
        return rows

    def _classify(self, error: BaseException) -> Failure | None:
        import psycopg

        if not isinstance(error, psycopg.Error):
            return None
        state = error.sqlstate or ""
        # Class 22 (data exception: a value the type or encoding cannot take, out of range, malformed) and
        # 42883 (no such operator: the column's type cannot be compared with such a value).
        if state.startswith("22") or state == "42883":
            return "input"
        if isinstance(error, psycopg.errors.QueryCanceled):
            return "timeout"
        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            return "lost"
        return "failed"

    def _catalogue(self, connection: Any, tables: Sequence[str]) -> dict[str, Table]:
        try:
            with connection.cursor() as cursor:
                cursor.execute(_POSTGRES_COLUMNS, (self.source.schema, list(tables)))
                columns = [(table, Column(name, column_type, _postgres_family(type_name, category), nullable))
                           for table, name, column_type, type_name, category, nullable in cursor.fetchall()]
                cursor.execute(_POSTGRES_KEYS, (self.source.schema, list(tables)))
                keys = cursor.fetchall()
                cursor.execute(_POSTGRES_INDEXES, (self.source.schema, list(tables)))
                indexes = cursor.fetchall()
        finally:
            connection.rollback()
        primary = [(table, column) for table, kind, _, column, _, _ in keys if kind == "p"]
        foreign = [(table, name, column, referenced, referenced_column)
                   for table, kind, name, column, referenced, referenced_column in keys if kind == "f"]
        return _assemble(tables, columns, primary, foreign, indexes)


def _postgres_family(type_name: str, category: str) -> Family:
    return _POSTGRES_FAMILIES.get(type_name) or _POSTGRES_CATEGORIES.get(category, "other")


# --- SQLite --------------------------------------------------------------------------------------

_SQLITE_READING = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_TRANSACTION}
_SQLITE_PRAGMAS = {"table_info", "foreign_key_list", "index_list", "index_info"}
_PROGRESS_STEPS = 10_000
#: Result codes a statement's values cause: a text or blob longer than the engine takes, a value of a
#: type it cannot use there.
_SQLITE_INPUT = {sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH}


@cache
def _sqlite_like_limit() -> int:
    """The longest LIKE pattern this SQLite library takes (SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 50,000 bytes
    unless built otherwise); a longer one fails with a generic error that names no class."""
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        return connection.getlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH)


def _sqlite_authorizer(action: int, first: str | None, _second: str | None, _database: str | None,
                       _trigger: str | None) -> int:
    """Reading only: no writes, no ATTACH, no schema changes, only the catalogue pragmas."""
    if action in _SQLITE_READING or (action == sqlite3.SQLITE_PRAGMA and first in _SQLITE_PRAGMAS):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_UPDATE and first == "sqlite_master":
        # Preparing a pragma table function re-reads the schema, which SQLite reports as an
        # UPDATE of sqlite_master; mode=ro and query_only refuse any real write.
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class SqliteDriver(Driver):
    placeholder = "?"

    def like_pattern_limit(self) -> int | None:
        return _sqlite_like_limit()

    def quote(self, name: str) -> str:
        return _double_quoted(name)

    def table_ref(self, table: str) -> str:
        return self.quote(table)

    def _open(self) -> Any:
        path: Path | None = self.source.path
        assert path is not None
        connection = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, isolation_level=None,
                                     check_same_thread=False)
        try:
            connection.text_factory = _sqlite_text
            connection.execute("PRAGMA query_only = ON")
            connection.set_authorizer(_sqlite_authorizer)
            deadline = [math.inf]
            connection.set_progress_handler(lambda: int(time.monotonic() > deadline[0]), _PROGRESS_STEPS)
        except BaseException:
            connection.close()
            raise
        return _SqliteConnection(connection, deadline)

    def _run(self, connection: Any, statement: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = connection.run(statement, parameters, self.source.limits.timeout_seconds)
        return rows

    def _classify(self, error: BaseException) -> Failure | None:
        if not isinstance(error, sqlite3.Error):
            return None
        code = getattr(error, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None  # an extended code carries its primary code
        if primary in _SQLITE_INPUT:
            return "input"
        if primary == sqlite3.SQLITE_INTERRUPT:  # the progress handler stopped it at its deadline
            return "timeout"
        return "failed"

    def _catalogue(self, connection: Any, tables: Sequence[str]) -> dict[str, Table]:
        marks = ", ".join("?" * len(tables))
        present = [row[0] for row in connection.run(
            f"SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name IN ({marks})", tables, None)]
        columns: list[tuple[str, Column]] = []
        primary: list[tuple[int, str, str]] = []
        foreign: list[tuple[str, str, str, str, str]] = []
        indexes: list[tuple[str, str, str | None, bool]] = []
        for table in present:
            for name, declared, not_null, key in connection.run(
                    'SELECT name, type, "notnull", pk FROM pragma_table_info(?) ORDER BY cid', (table,), None):
                columns.append((table, Column(name, declared, _sqlite_family(declared), not not_null)))
                if key:
                    primary.append((key, table, name))
            for number, source_column, referenced, referenced_column in connection.run(
                    'SELECT id, "from", "table", "to" FROM pragma_foreign_key_list(?) ORDER BY id, seq', (table,),
                    None):
                foreign.append((table, str(number), source_column, referenced, referenced_column))
            for index, unique in connection.run('SELECT name, "unique" FROM pragma_index_list(?)', (table,), None):
                indexes += [(table, index, name, bool(unique)) for (name,) in connection.run(
                    "SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,), None)]
        return _assemble(tables, columns, [(table, name) for _, table, name in sorted(primary)], foreign, indexes)


class NotUtf8Text(str):
    """Text SQLite kept that is not valid UTF-8 (SQLite never checks), each bad byte shown as U+FFFD.
    The answer marks it ``not_utf8`` instead of the whole page failing, which would block the session
    on one stored value."""

    __slots__ = ()


def _sqlite_text(data: bytes) -> str:
    """SQLite's text as ``str``; text that is not valid UTF-8 as :class:`NotUtf8Text`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return NotUtf8Text(data.decode("utf-8", "replace"))


class _SqliteConnection:
    """A read-only SQLite connection whose statements stop at their deadline."""

    def __init__(self, connection: sqlite3.Connection, deadline: list[float]) -> None:
        self._connection, self._deadline = connection, deadline

    def run(self, statement: str, parameters: Sequence[Any], timeout: float | None) -> list[tuple[Any, ...]]:
        self._deadline[0] = math.inf if timeout is None else time.monotonic() + timeout
        try:
            rows: list[tuple[Any, ...]] = self._connection.execute(statement, tuple(parameters)).fetchall()
            return rows
        finally:
            self._deadline[0] = math.inf

    def close(self) -> None:
        self._connection.close()


_SQLITE_AFFINITIES: tuple[tuple[tuple[str, ...], Family], ...] = (
    (("INT",), "integer"), (("CHAR", "CLOB", "TEXT"), "text"), (("BLOB",), "bytes"),
    (("REAL", "FLOA", "DOUB"), "float"), (("BOOL",), "boolean"), (("DATE", "TIME"), "temporal"),
    (("NUMERIC", "DECIMAL", "NUMBER", "MONEY"), "decimal"),
)


def _sqlite_family(declared: str) -> Family:
    """SQLite's own affinity rules (in their order), refined by the declared name. No type, or a type no
    rule names (``UUID``, ``JSON``: NUMERIC affinity, yet mostly text): anything, for the server to
    compare, not a decimal that would refuse the text such a column holds."""
    upper = declared.upper()
    for words, family in _SQLITE_AFFINITIES:
        if any(word in upper for word in words):
            return family
    return "other"


# --- shared --------------------------------------------------------------------------------------

def _double_quoted(name: str) -> str:
    """An identifier in standard SQL quotes (PostgreSQL, SQLite), an embedded quote doubled."""
    return '"' + name.replace('"', '""') + '"'


def _assemble(tables: Sequence[str], columns: list[tuple[str, Column]], primary: list[tuple[str, str]],
              foreign: list[tuple[str, str, str, str, str]], indexes: list[tuple[str, str, str | None, bool]]
              ) -> dict[str, Table]:
    """Tables from catalogue rows; a table the server reports under another spelling is not ours."""
    wanted = set(tables)
    found: dict[str, dict[str, Column]] = {}
    for table, column in columns:
        if table in wanted:
            found.setdefault(table, {})[column.name] = column
    keys: dict[str, list[str]] = {}
    for table, name in primary:
        keys.setdefault(table, []).append(name)
    links: dict[tuple[str, str], tuple[list[str], str, list[str]]] = {}
    for table, constraint, name, referenced, referenced_column in foreign:
        entry = links.setdefault((table, constraint), ([], referenced, []))
        entry[0].append(name)
        entry[2].append(referenced_column)
    indexed: dict[tuple[str, str], tuple[list[str | None], bool]] = {}
    for table, index, indexed_column, unique in indexes:
        indexed.setdefault((table, index), ([], unique))[0].append(indexed_column)
    return {
        table: Table(
            name=table, columns=found[table], primary_key=tuple(keys.get(table, ())),
            foreign_keys=tuple(ForeignKey(tuple(cols), referenced, tuple(refs))
                               for (owner, _), (cols, referenced, refs) in sorted(links.items()) if owner == table),
            indexes=tuple(Index(index, tuple(filter(None, names)), unique)
                          for (owner, index), (names, unique) in sorted(indexed.items())
                          if owner == table and None not in names),
        )
        for table in tables if table in found
    }


def open_driver(source: DatabaseSource) -> Driver:
    drivers: dict[str, type[Driver]] = {"mariadb": MariadbDriver, "postgresql": PostgresDriver, "sqlite": SqliteDriver}
    return drivers[source.dialect](source)
