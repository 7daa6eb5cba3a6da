"""Database queries: structured, allowlisted, read-only, with exact values and stated coverage.

An agent names a configured database, an allowlisted table, columns, filters (``eq ne lt le gt ge
contains in``, spelled ``op`` or ``operator``, joined by AND) and an order; nothing else. Table and
column names are checked against the server's own catalogue (cached for ``schema_cache_seconds``)
and the operator's allowlists, then quoted; the catalogue's own names pass the same IDENTIFIER check
(a column no agent could name is left out, never quoted into a statement); every value is a bound
parameter, converted to the column's kind first. ``contains`` escapes ``%``, ``_`` and the escape
character itself. One ``SELECT`` per call.

The request's values are the caller's business, never a provider failure: a value that would
overflow an engine or driver is refused as ``invalid_input`` before any statement runs, and text
the column's character set cannot hold matches nothing (``eq``, ``contains``, a member of ``in``)
or every row with a value (``ne``) instead of failing on the server.

Answers say what they cover: ``complete_filtered_rows`` is true only for the whole predicate read
from offset 0 with no further page, and only then is an empty answer evidence of absence (within
this snapshot and predicate). Values come back as JSON: DECIMAL as exact strings, dates and times
in ISO 8601, bytes as ``{"base64", "bytes"}``, NULL as null, arrays and JSON documents as canonical JSON
text of such values; a value longer than ``max_value_length`` is cut and marked ``truncated``, SQLite
text that is not UTF-8 is marked ``not_utf8``.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import sys
import threading
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from datetime import time as clock
from decimal import Decimal
from typing import Any

from armarius.canonical import canonical_json
from armarius.errors import InvalidInput, NotFound, ResearchUnavailable, echo
from armarius.research.config import IDENTIFIER, DatabaseSource, shown
from armarius.research.dbdrivers import Column, Driver, NotUtf8Text, Table, open_driver
from armarius.validation import INT64_MAX

_COMPARISONS = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ESCAPE = "!"
_ORDERED_FAMILIES = {"integer", "decimal", "float", "text", "bytes", "temporal", "boolean"}
#: ASCII digits only (as in every pattern here): ``\d`` would take fullwidth and other Unicode digits, which
#: Decimal reads but an engine given the original text (SQLite) does not.
_DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
ABSENCE_NOTE = ("No row matches this predicate in this snapshot (a complete query): evidence of absence within "
                "this snapshot and predicate only.")


def like_pattern(text: str) -> str:
    """A LIKE pattern matching ``text`` literally anywhere (escape character ``!``)."""
    escaped = text.replace(_ESCAPE, _ESCAPE * 2).replace("%", _ESCAPE + "%").replace("_", _ESCAPE + "_")
    return f"%{escaped}%"


class DatabaseResearch:
    """The configured databases, their drivers and cached catalogues."""

    def __init__(self, databases: dict[str, DatabaseSource]) -> None:
        self.databases = databases
        self._drivers = {name: open_driver(source) for name, source in databases.items()}
        self._catalogues: dict[str, tuple[float, dict[str, Table]]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        for driver in self._drivers.values():
            driver.close()

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """The answer to one validated ``database.*`` query, with its ``origin``."""
        kind = request["kind"]
        if not self._drivers:
            raise NotFound("No databases are configured for research.", field="database")
        if kind == "database.tables" and "database" not in request and len(self._drivers) > 1:
            return self._all_tables()
        driver = self._driver(request.get("database"))
        handlers: dict[str, Callable[[Driver, dict[str, Any]], dict[str, Any]]] = {
            "database.tables": lambda driver, _request: {"databases": [self._tables(driver)]},
            "database.schema": self._schema, "database.rows": self._rows, "database.count": self._count,
        }
        try:
            answer = handlers[kind](driver, request)
        except ResearchUnavailable:
            self._forget(driver)  # the schema may have changed under the cache
            raise
        return {"kind": kind, "origin": _origin(driver.source), **answer}

    def _all_tables(self) -> dict[str, Any]:
        """The tables of every configured database; one that fails is marked, the others still listed.
        Only when none answers is it an error (the first failure)."""
        listed: list[dict[str, Any]] = []
        failures: list[ResearchUnavailable] = []
        for driver in self._drivers.values():
            try:
                listed.append(self._tables(driver))
            except ResearchUnavailable as error:
                self._forget(driver)
                failures.append(error)
                source = driver.source
                listed.append({"database": source.name, "dialect": source.dialect, "snapshot": source.snapshot,
                               "unavailable": {"reason": error.details.get("reason"), "message": error.message}})
        if len(failures) == len(self._drivers):
            raise failures[0]
        origins = [_origin(source) for source in self.databases.values()]
        return {"kind": "database.tables", "origin": {"kind": "database", "databases": origins},
                "databases": listed, "unavailable": [entry["database"] for entry in listed if "unavailable" in entry],
                "complete": not failures}

    def _driver(self, name: str | None) -> Driver:
        names = ", ".join(self._drivers)
        if name is None:
            if len(self._drivers) == 1:
                return next(iter(self._drivers.values()))
            raise InvalidInput(f"Name the database: one of {names}.", field="database")
        if name not in self._drivers:
            raise NotFound(f"There is no database {shown(name)}; configured: {names}.", field="database")
        return self._drivers[name]

    # --- catalogue --------------------------------------------------------------------------------

    def _catalogue(self, driver: Driver) -> dict[str, Table]:
        """The allowlisted tables as the server describes them, cut to the allowlisted columns."""
        name = driver.source.name
        with self._lock:
            cached = self._catalogues.get(name)
        if cached is not None and time.monotonic() - cached[0] < driver.source.limits.schema_cache_seconds:
            return cached[1]
        tables = {table.name: _visible(table, driver.source.columns.get(table.name))
                  for table in driver.catalogue().values()}
        with self._lock:
            self._catalogues[name] = (time.monotonic(), tables)
        return tables

    def _forget(self, driver: Driver) -> None:
        with self._lock:
            self._catalogues.pop(driver.source.name, None)

    def _table(self, driver: Driver, name: str) -> Table:
        if not IDENTIFIER.fullmatch(name):
            raise InvalidInput("table is a name of letters, digits, '_' and '$' (database.tables lists them).",
                               field="table")
        table = self._catalogue(driver).get(name) if name in driver.source.tables else None
        if table is None:
            raise NotFound(f"There is no allowlisted table {echo(name)} in database {driver.source.name!r}; "
                           "database.tables lists them.", field="table")
        return table

    # --- kinds ------------------------------------------------------------------------------------

    def _tables(self, driver: Driver) -> dict[str, Any]:
        present = self._catalogue(driver)
        source = driver.source
        return {"database": source.name, "dialect": source.dialect, "snapshot": source.snapshot,
                "tables": [table for table in source.tables if table in present],
                "missing": [table for table in source.tables if table not in present]}

    def _schema(self, driver: Driver, request: dict[str, Any]) -> dict[str, Any]:
        table = self._table(driver, request["table"])
        allowed = self._catalogue(driver)
        return {
            "database": driver.source.name, "table": table.name,
            "columns": [{"name": column.name, "type": column.type, "kind": column.family, "nullable": column.nullable}
                        for column in table.columns.values()],
            "primary_key": list(table.primary_key),
            "foreign_keys": [{"columns": list(key.columns), "table": key.table, "references": list(key.references)}
                             for key in table.foreign_keys
                             if key.table in allowed and set(key.columns) <= set(table.columns)
                             and set(key.references) <= set(allowed[key.table].columns)],
            "indexes": [{"name": index.name, "columns": list(index.columns), "unique": index.unique}
                        for index in table.indexes if set(index.columns) <= set(table.columns)],
        }

    def _rows(self, driver: Driver, request: dict[str, Any]) -> dict[str, Any]:
        source, limits = driver.source, driver.source.limits
        table = self._table(driver, request["table"])
        if not table.columns:
            raise InvalidInput(f"Table {table.name!r} has no column that agents may read (database.schema lists "
                               "none), so it has no rows to show; database.count counts them.", field="table")
        chosen = request.get("columns") or list(table.columns)
        columns = [_column(table, name, f"columns.{index}").name for index, name in enumerate(chosen)]
        where, parameters = _where(driver, table, request.get("filters", []))
        order = _order(table, request.get("order_by", []), source.dialect)
        offset = request.get("offset", 0)
        limit = min(request.get("limit", limits.max_rows), limits.max_rows)
        statement = (f"SELECT {', '.join(driver.quote(name) for name in columns)} FROM {driver.table_ref(table.name)}"
                     f"{where} ORDER BY {', '.join(f'{driver.quote(name)} {way.upper()}' for name, way in order)}"
                     f" LIMIT {driver.placeholder} OFFSET {driver.placeholder}")
        fetched = driver.fetch(statement, [*parameters, limit + 1, offset])
        converters = [driver.converter(table.columns[name]) for name in columns]
        rows, truncated = _json_rows(fetched[:limit], converters, limits.max_value_length)
        rows = _within_bytes(rows, limits.max_bytes)
        more = len(fetched) > limit or len(rows) < min(len(fetched), limit)
        complete = offset == 0 and not more
        answer: dict[str, Any] = {
            "database": source.name, "table": table.name, "columns": columns,
            "filters": request.get("filters", []),
            "order_by": [{"column": name, "direction": way} for name, way in order],
            "offset": offset, "limit": limit, "rows": rows,
            "next_offset": offset + len(rows) if more else None,
            "truncated_values": sum(truncated[: len(rows)]),
            "complete_filtered_rows": complete,
        }
        if complete and not rows:
            answer["absence"] = ABSENCE_NOTE
        return answer

    def _count(self, driver: Driver, request: dict[str, Any]) -> dict[str, Any]:
        table = self._table(driver, request["table"])
        where, parameters = _where(driver, table, request.get("filters", []))
        [(count,)] = driver.fetch(f"SELECT COUNT(*) FROM {driver.table_ref(table.name)}{where}", parameters)
        answer: dict[str, Any] = {"database": driver.source.name, "table": table.name,
                                  "filters": request.get("filters", []), "count": int(count), "complete": True}
        if not count:
            answer["absence"] = ABSENCE_NOTE
        return answer


def _origin(source: DatabaseSource) -> dict[str, Any]:
    """Where an answer came from: the configured name and the operator's snapshot id, never a host."""
    return {"kind": "database", "database": source.name, "dialect": source.dialect, "snapshot": source.snapshot}


def _visible(table: Table, allowlist: tuple[str, ...] | None) -> Table:
    """The table as agents see it: the columns they could name (the catalogue's own names are checked like
    a request's, so no other text ever reaches a statement) and, with an allowlist, only its columns.
    A primary key over a column left out is no key here: rows are then ordered by every orderable
    visible column, as in a table without a primary key."""
    columns = {name: column for name, column in table.columns.items()
               if IDENTIFIER.fullmatch(name) and (allowlist is None or name in allowlist)}
    return Table(table.name, columns, table.primary_key if set(table.primary_key) <= set(columns) else (),
                 table.foreign_keys, table.indexes)


def _column(table: Table, name: str, field: str) -> Column:
    if not IDENTIFIER.fullmatch(name):
        raise InvalidInput(f"{field} is a column name of letters, digits, '_' and '$'.", field=field)
    column = table.columns.get(name)
    if column is None:
        raise NotFound(f"Table {table.name!r} has no column {echo(name)} that agents may read; database.schema "
                       "lists them.", field=field)
    return column


def _where(driver: Driver, table: Table, filters: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    parameters: list[Any] = []
    for index, item in enumerate(filters):
        clause, values = _clause(driver, table, item, f"filters.{index}")
        clauses.append(clause)
        parameters += values
    size = sum(len(each.encode("utf-8")) if isinstance(each, str) else len(each) if isinstance(each, bytes) else 0
               for each in parameters)
    if size > MAX_VALUE_BYTES:
        raise InvalidInput(f"The filter values add up to {size} bytes; one query takes at most {MAX_VALUE_BYTES}. "
                           "Split the query or use shorter values.", field="filters")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), parameters


def _clause(driver: Driver, table: Table, item: dict[str, Any], field: str) -> tuple[str, list[Any]]:
    """One filter as SQL with its parameters."""
    column = _column(table, item["column"], f"{field}.column")
    op, value, name = _operator(item, field), item["value"], driver.quote(column.name)
    # SQLite keeps dates as text in whatever form they were written: compare them normalized.
    sqlite_moment = driver.source.dialect == "sqlite" and column.family == "temporal"
    normal = _moment_kind(column) if sqlite_moment else None  # SQLite's datetime(), date() or time()
    operand, mark = (f"{normal}({name})", f"{normal}({driver.placeholder})") if normal else (name, driver.placeholder)
    if op == "in":
        if not isinstance(value, list):
            raise InvalidInput(f"{field}: 'in' takes a list of values.", field=f"{field}.value")
        if len(value) > driver.source.limits.max_in_values:
            raise InvalidInput(f"{field}: 'in' takes at most {driver.source.limits.max_in_values} values.",
                               field=f"{field}.value")
        bound = [_bound(driver, column, each, f"{field}.value.{number}") for number, each in enumerate(value)]
        members = [each for each in bound if each is not _NOTHING]  # a value the column cannot hold: no match
        return (f"{operand} IN ({', '.join([mark] * len(members))})" if members else _NO_ROW), members
    if isinstance(value, list):
        raise InvalidInput(f"{field}: {op!r} takes one value; a list goes with 'in'.", field=f"{field}.value")
    if value is None:
        if op not in ("eq", "ne"):
            raise InvalidInput(f"{field}: null goes only with eq (IS NULL) or ne (IS NOT NULL).",
                               field=f"{field}.value")
        return f"{name} IS {'' if op == 'eq' else 'NOT '}NULL", []
    if op == "contains":
        return _contains(driver, column, value, field)
    if op not in {"eq", "ne"} and column.family not in _ORDERED_FAMILIES - {"boolean", "bytes"}:
        raise InvalidInput(f"{field}: {op} does not apply to a {column.family} column.", field=f"{field}.op")
    bound_value = _bound(driver, column, value, f"{field}.value")
    if bound_value is _NOTHING:
        return _impossible(op, name, column, f"{field}.value"), []
    return f"{operand} {_COMPARISONS[op]} {mark}", [bound_value]


def _contains(driver: Driver, column: Column, value: Any, field: str) -> tuple[str, list[Any]]:
    if column.family != "text" or not isinstance(value, str):
        raise InvalidInput(f"{field}: contains takes a text value and a text column.", field=f"{field}.value")
    text = _bound(driver, column, value, f"{field}.value")
    if text is _NOTHING:  # no stored text contains a character its column cannot hold
        return _NO_ROW, []
    pattern = like_pattern(text)
    longest = driver.like_pattern_limit()
    if longest is not None and len(pattern.encode("utf-8")) > longest:
        raise InvalidInput(f"{field}: contains takes at most {longest} bytes of UTF-8 here (%, _ and ! count "
                           "twice); search for a shorter part of the text.", field=f"{field}.value")
    return f"{driver.quote(column.name)} LIKE {driver.placeholder} ESCAPE '{_ESCAPE}'", [pattern]


def _operator(item: dict[str, Any], field: str) -> str:
    """The filter's operator, spelled ``op`` or (as the seed writes it) ``operator``: exactly one."""
    spellings = [item[key] for key in ("op", "operator") if key in item]
    if len(spellings) != 1:
        raise InvalidInput(f"{field}: give the operator once, as op (or operator), not "
                           f"{'both' if spellings else 'neither'}.", field=f"{field}.op")
    op: str = spellings[0]
    return op


def _impossible(op: str, name: str, column: Column, field: str) -> str:
    """The clause for comparing with a value the column cannot hold: equal to no row, unequal to every
    row that has a value; it has no place in the column's order."""
    if op == "eq":
        return _NO_ROW
    if op == "ne":
        return f"{name} IS NOT NULL"
    raise InvalidInput(f"{field}: column {column.name!r} ({column.type}) cannot hold this value, so it has no "
                       f"place in the column's order for {op}; use eq, ne, in or contains, or another value.",
                       field=field)


def _bound(driver: Driver, column: Column, value: Any, field: str) -> Any:
    """The value as a parameter of the column's kind; a value that does not fit is refused, not guessed.
    ``_NOTHING`` for text the column's character set cannot hold (it equals no stored value)."""
    convert = _BINDINGS.get(column.family, _BINDINGS["other"])
    dialect = driver.source.dialect
    bound = convert(value, column, dialect) if value is not None else None
    if bound is None:
        raise InvalidInput(f"{field}: column {column.name!r} ({column.type}) takes {_accepts(column, dialect)}.",
                           field=field)
    if isinstance(bound, str) and column.family in ("text", "other") and not driver.holds(column, bound):
        return _NOTHING
    return bound


#: Stands for a value of the right kind that the column cannot hold.
_NOTHING: Any = object()
_NO_ROW = "1 = 0"
#: What the filter values of one query may add up to (UTF-8 text and bytes): far below what any server
#: takes in one statement (MariaDB's max_allowed_packet is 16 MiB by default, and escaping may double it).
MAX_VALUE_BYTES = 1_000_000
#: What any server can compare an integer parameter with (BIGINT and BIGINT UNSIGNED); the schema's bounds.
_INTEGER_RANGE = {"sqlite": (-(2**63), 2**63 - 1), "mariadb": (-(2**63), 2**64 - 1),
                  "postgresql": (-(2**63), 2**64 - 1)}
_WHOLE_NUMBER_TEXT = re.compile(r"[0-9]{19,20}")
#: Decimal exponents beyond this are nothing a DECIMAL/NUMERIC column holds.
_DECIMAL_EXPONENT = 1000
#: MariaDB reads a longer decimal literal as a DOUBLE, which may round it (even to 0).
_MARIADB_DECIMAL_DIGITS = 65


def _accepts(column: Column, dialect: str) -> str:
    """What a column of this kind takes, as a message says it."""
    if column.family == "temporal":
        return _MOMENTS[_moment_kind(column)][0]
    if column.family == "integer":
        low, high = _INTEGER_RANGE[dialect]
        return f"a whole number from {low} to {high}"
    if column.family == "float" or (column.family == "decimal" and dialect == "sqlite"):
        return ("a finite number a 64-bit float holds (up to about 1.8e308, and not so small that it becomes 0); "
                "it may be given as a string")
    if column.family == "decimal" and dialect == "mariadb":
        return f"a number of at most {_MARIADB_DECIMAL_DIGITS} digits (a decimal as a string stays exact)"
    return _ACCEPTS.get(column.family, _ACCEPTS["other"])


def _integer(value: Any, _column: Column, dialect: str) -> Any:
    """A whole number the column's server compares: a JSON integer, or, beyond the schema's 64-bit bound
    (the upper half of BIGINT UNSIGNED), one written as a string of digits. Within the bound a string
    stays refused: types are strict."""
    if isinstance(value, str) and _WHOLE_NUMBER_TEXT.fullmatch(value) and int(value) > INT64_MAX:
        value = int(value)
    low, high = _INTEGER_RANGE[dialect]
    return value if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high else None


def _number(value: Any, column: Column, dialect: str) -> Any:
    if isinstance(value, int):  # true and false included: _integer refuses them
        return _integer(value, column, dialect)
    text = repr(value) if isinstance(value, float) else value
    number = Decimal(text) if isinstance(text, str) and _DECIMAL_TEXT.fullmatch(text) else None
    if number is None or abs(number.adjusted()) > _DECIMAL_EXPONENT:
        return None
    if column.family == "float" or dialect == "sqlite":  # SQLite compares every number as a 64-bit float
        approximate = float(number)
        if not math.isfinite(approximate) or (approximate == 0 and number != 0):
            return None  # beyond a double, or so small that it would compare equal to 0
        return approximate if column.family == "float" else text
    if dialect == "mariadb":
        number = number.normalize()
        if len(format(number, "f").lstrip("-").replace(".", "")) > _MARIADB_DECIMAL_DIGITS:
            return None
    return number


def _text(value: Any, _column: Column, _dialect: str) -> Any:
    # NUL ends a string for SQLite's LIKE and PostgreSQL text cannot hold it: never a value here.
    return value if isinstance(value, str) and "\x00" not in value else None


def _bytes(value: Any, _column: Column, _dialect: str) -> Any:
    if not (isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str)):
        return None
    try:
        return base64.b64decode(value["base64"], validate=True)
    except (binascii.Error, ValueError):
        return None


def _boolean(value: Any, _column: Column, _dialect: str) -> Any:
    return value if isinstance(value, bool) else None


def _other(value: Any, column: Column, dialect: str) -> Any:
    """Text or a number for a column of a type without its own rules (the server compares)."""
    if isinstance(value, str):
        return _text(value, column, dialect)
    if isinstance(value, int):
        return _integer(value, column, dialect)  # SQLite binds no integer beyond 64 bits
    return value if isinstance(value, float) and math.isfinite(value) else None


_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_CLOCK = r"[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
_ZONE = r"(Z|[+-][0-9]{2}:[0-9]{2})"
#: Per kind of date/time column: what it takes, the forms accepted (without, with an offset), the parser.
_MOMENTS: dict[str, tuple[str, re.Pattern[str], re.Pattern[str], Callable[[str], Any]]] = {
    "datetime": ("a date or date and time in ISO 8601 (2024-01-31, 2024-01-31T12:30:00)",
                 re.compile(f"{_DATE}([T ]{_CLOCK})?"), re.compile(f"{_DATE}[T ]{_CLOCK}{_ZONE}"),
                 datetime.fromisoformat),
    "date": ("a date in ISO 8601 (2024-01-31)", re.compile(_DATE), re.compile("(?!)"), date.fromisoformat),
    "time": ("a time of day in ISO 8601 (12:30:00)", re.compile(_CLOCK), re.compile(_CLOCK + _ZONE),
             clock.fromisoformat),
}


def _moment_kind(column: Column) -> str:
    declared = column.type.lower()
    if "stamp" in declared or "datetime" in declared:
        return "datetime"
    return "date" if "date" in declared else "time"


def _moment(value: Any, column: Column, dialect: str) -> Any:
    """A date or time that fits the column; an offset only where the column keeps one (PostgreSQL
    ``with time zone``), never silently dropped."""
    if not isinstance(value, str):
        return None
    _accepts, plain, zoned, parse = _MOMENTS[_moment_kind(column)]
    with_zone = dialect == "postgresql" and "with time zone" in column.type.lower()
    if not (plain.fullmatch(value) or (with_zone and zoned.fullmatch(value))):
        return None
    try:
        parsed = parse(value)
    except ValueError:
        return None
    return value if dialect == "sqlite" else parsed


#: Per kind of column: what turns a JSON value into its parameter (None: the value does not fit).
_BINDINGS: dict[str, Callable[[Any, Column, str], Any]] = {
    "integer": _integer, "decimal": _number, "float": _number, "text": _text, "bytes": _bytes,
    "temporal": _moment, "boolean": _boolean, "other": _other,
}
_ACCEPTS = {
    "decimal": "a number (a decimal as a string stays exact)",
    "text": "text without NUL",
    "bytes": 'bytes, written {"base64": "..."} in standard base64',
    "boolean": "true or false",
    "other": "text or a number",
}


def _order(table: Table, requested: list[dict[str, Any]], dialect: str) -> list[tuple[str, str]]:
    """The requested order, then the primary key (or every orderable column) so that pages never overlap.
    Every name is one of the table's visible columns, checked as an identifier (see :func:`_visible`)."""
    order: list[tuple[str, str]] = []
    for index, item in enumerate(requested):
        field = f"order_by.{index}.column"
        column = _column(table, item["column"], field)
        if not _orderable(column, dialect):
            raise InvalidInput(f"Rows cannot be ordered by the {column.type} column {column.name!r}.", field=field)
        if column.name not in (name for name, _ in order):
            order.append((column.name, item.get("direction", "asc")))
    tie_breakers = table.primary_key or tuple(name for name, column in table.columns.items()
                                              if _orderable(column, dialect))
    order += [(name, "asc") for name in tie_breakers if name not in (chosen for chosen, _ in order)]
    if not order:  # no statement could page them without overlaps or gaps
        raise InvalidInput(f"The rows of table {table.name!r} cannot be paged: it has no primary key and no column "
                           "agents may read that orders them; database.count counts them.", field="table")
    return order


def _orderable(column: Column, dialect: str) -> bool:
    """Whether rows can be ordered by the column: its kind has an order, or SQLite, which orders any
    values (by storage class, then value), keeps it (a type of no kind of its own, ``UUID``, ``JSON``)."""
    return column.family in _ORDERED_FAMILIES or (dialect == "sqlite" and column.family == "other")


def _json_rows(rows: list[tuple[Any, ...]], converters: list[Callable[[Any], Any] | None], limit: int
               ) -> tuple[list[list[Any]], list[int]]:
    """Rows as JSON values, with the number of cut values per row (integers, NULLs and short text,
    most of any page, are taken as they are)."""
    special = [(index, convert) for index, convert in enumerate(converters) if convert is not None]
    converted, truncated = [], []
    for row in rows:
        cells, cut = list(row), 0
        for index, convert in special:
            cells[index] = convert(cells[index])
        for index, value in enumerate(cells):
            kind = type(value)
            if kind in _AS_IS or (kind is str and len(value) <= limit):
                continue
            cells[index], was_cut = json_value(value, limit)
            cut += was_cut
        converted.append(cells)
        truncated.append(cut)
    return converted, truncated


_AS_IS = frozenset({int, bool, type(None)})


def json_value(value: Any, limit: int) -> tuple[Any, bool]:
    """One database value as JSON, and whether it was cut to ``limit`` characters (or bytes)."""
    if value is None or isinstance(value, bool | int):
        return value, False
    if isinstance(value, str):
        return _text_cell(value, limit)
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        cell: dict[str, Any] = {"base64": base64.b64encode(data[:limit]).decode("ascii"), "bytes": len(data)}
        if len(data) > limit:
            cell["truncated"] = True
        return cell, len(data) > limit
    if isinstance(value, float):
        return (value if math.isfinite(value) else str(value)), False
    return json_value(_scalar(value), limit)


def _text_cell(value: str, limit: int) -> tuple[Any, bool]:
    """Text as JSON: itself, or an object that says it was cut (``truncated``) or is SQLite text that was
    not UTF-8, shown with U+FFFD (``not_utf8``)."""
    cut = len(value) > limit
    if not cut and not isinstance(value, NotUtf8Text):
        return value, False
    cell: dict[str, Any] = {"text": str(value[:limit])}
    if cut:
        cell |= {"chars": len(value), "truncated": True}
    if isinstance(value, NotUtf8Text):
        cell["not_utf8"] = True
    return cell, cut


def _scalar(value: Any) -> Any:
    """A value of another type as a JSON string (or list/number) that json_value then sizes."""
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, datetime | date | clock):
        return value.isoformat()
    if isinstance(value, timedelta):  # MariaDB TIME: a duration that may pass 24 hours or be negative
        return _duration(value)
    if isinstance(value, list | tuple | dict):  # an array or a JSON document: written as canonical JSON text
        return canonical_json(_json_tree(value))
    return str(value)


def _json_tree(value: Any) -> Any:
    """An array's elements (or a JSON document's values), at any depth, as JSON the way a single value of their
    type becomes JSON, whole (exact decimals, ISO dates, NaN and infinities as text, bytes as base64), so that
    PostgreSQL's ``numeric[]``, ``date[]`` or ``float8[]`` holding NaN have an answer."""
    if isinstance(value, list | tuple):
        return [_json_tree(each) for each in value]
    if isinstance(value, dict):
        return {str(key): _json_tree(each) for key, each in value.items()}
    return json_value(value, sys.maxsize)[0]


def _duration(value: timedelta) -> str:
    sign = "-" if value < timedelta(0) else ""
    micro = abs(value) // timedelta(microseconds=1)
    seconds, micro = divmod(micro, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}" + (f".{micro:06d}" if micro else "")


def _within_bytes(rows: list[list[Any]], budget: int) -> list[list[Any]]:
    """The longest prefix of ``rows`` whose JSON fits ``budget`` bytes (at least one row, so paging moves on)."""
    if len(canonical_json(rows).encode("utf-8")) <= budget:
        return rows
    size = 0
    for index, row in enumerate(rows):
        size += len(canonical_json(row).encode("utf-8")) + 1
        if size > budget and index > 0:
            return rows[:index]
    return rows
