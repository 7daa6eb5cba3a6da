"""Hostile database queries, on SQLite, MariaDB and PostgreSQL.

Every identifier an agent sends (table, columns, filter and order columns) is refused unless it
names an allowlisted table or a visible column, and a refusal never echoes a hostile spelling.
Every value is bound: SQL in a value is text that matches literally (usually nothing), and ``%``,
``_`` and ``!`` in ``contains`` are plain characters. Values of the wrong type are the caller's
error (``invalid_input``). Below the statement builder, the session and transaction layers keep
even a deliberately over-privileged login from writing, and a slow statement stops at its limit.
No answer, capture, error or log line carries a password, a login name, a host or a hidden row.

After every test, the owner counts every table and reads the canary: nothing was ever written.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import secrets
import shutil
import sqlite3
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from armarius.errors import ArmariusError, InternalError, ResearchUnavailable, SessionBlocked
from armarius.research.dbdrivers import Driver
from armarius.research.service import ResearchService
from tests.research.conftest import open_world_service
from tests.research.world import (
    CREATURES,
    ICON_BINARY,
    PASSWORD_VARIABLE,
    SECRET_MARKERS,
    SMART_SCRIPTS,
    TABLES,
    WorldServer,
    owner_count,
    owner_rows,
)

ORIGINAL_COUNTS = {"creature_template": 60, "item_template": 40, "quest_template": 30, "smart_scripts": 120,
                   "account": 3, "canary": 1, "broadcast_text": 4}
OUTFILE = f"{tempfile.gettempdir()}/armarius-outfile-{secrets.token_hex(6)}"
"""A path that INTO OUTFILE / COPY TO attempts name; it must never come to exist."""


# --- helpers ---------------------------------------------------------------------------------------------


def table_names(server: WorldServer) -> set[str]:
    """The tables in the world's database (schema ``public`` on PostgreSQL), as the owner sees them."""
    if server.dialect == "sqlite":
        rows = owner_rows(server, "SELECT name FROM sqlite_master WHERE type = 'table'")
    elif server.dialect == "mariadb":
        rows = owner_rows(server, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")
    else:
        rows = owner_rows(server, "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = 'public'")
    return {str(name) for (name,) in rows}


def assert_world_intact(server: WorldServer) -> None:
    assert {table: owner_count(server, table) for table in TABLES} == ORIGINAL_COUNTS
    assert owner_rows(server, "SELECT id, note FROM canary") == [(1, "untouched")]
    assert table_names(server) == set(TABLES)  # no "evil", nothing dropped or renamed
    assert not Path(OUTFILE).exists()


@pytest.fixture(autouse=True)
def _world_stays_intact(world_server: WorldServer) -> Iterator[None]:
    yield
    assert_world_intact(world_server)


def outcome(service: ResearchService, query: Any) -> tuple[str, dict[str, Any]]:
    """("ok", answer) or (error code, error as a dict)."""
    try:
        return "ok", service.query(query)
    except ArmariusError as error:
        return error.code, error.to_dict()


def rows_query(filters: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"kind": "database.rows", "table": "creature_template", "columns": ["entry"], "filters": filters,
            "limit": 100, **extra}


def entries(answer: dict[str, Any]) -> list[int]:
    return [row[0] for row in answer["result"]["rows"]]


def captures(service: ResearchService) -> list[Path]:
    folder = service.evidence_dir
    return sorted(folder.rglob("*")) if folder.exists() else []


def driver_of(service: ResearchService) -> Driver:
    return service._databases._drivers["world"]


def refused(driver: Driver, statement: str) -> ResearchUnavailable:
    """What the read-only session and transaction make of ``statement``, with no shape check above them."""
    with pytest.raises(ResearchUnavailable) as caught:
        driver.fetch_unchecked(statement)
    return caught.value


@pytest.fixture
def writer(world_server: WorldServer, tmp_path: Path) -> Iterator[ResearchService]:
    """A service over the world with the ALL-privileges login (SQLite: the same read-only file)."""
    service = open_world_service(tmp_path, world_server, login="writer")
    yield service
    service.close()


# --- 1. hostile identifiers ------------------------------------------------------------------------------

MALFORMED_NAMES = [
    pytest.param('creature_template"; DROP TABLE canary; --', id="double-quote-drop"),
    pytest.param("creature_template`; DROP TABLE canary; --", id="backtick-drop"),
    pytest.param("creature_template'; DROP TABLE canary; --", id="single-quote-drop"),
    pytest.param("creature_template; DROP TABLE canary", id="semicolon-drop"),
    pytest.param('x" UNION SELECT username FROM account --', id="union-account"),
    pytest.param("creature_template/**/", id="block-comment"),
    pytest.param("creature_template/*", id="open-comment"),
    pytest.param("creature_template--", id="line-comment"),
    pytest.param("creature_template -- x", id="line-comment-spaced"),
    pytest.param("creature_template#", id="hash-comment"),
    pytest.param("/*!50000 DROP TABLE canary */", id="version-comment"),
    pytest.param("`creature_template`", id="backticked"),
    pytest.param('"creature_template"', id="double-quoted"),
    pytest.param("[creature_template]", id="bracketed"),
    pytest.param("creature_template\\", id="backslash"),
    pytest.param("\uff43\uff52\uff45\uff41\uff54\uff55\uff52\uff45_template", id="fullwidth"),
    pytest.param("\u0441reature_template", id="cyrillic-es"),
    pytest.param("creature\u200btemplate", id="zero-width-space"),
    pytest.param("creature_templat\u0435", id="cyrillic-ie"),
    pytest.param("creature_template\x00", id="nul-suffix"),
    pytest.param("\x00", id="nul"),
    pytest.param(" creature_template", id="leading-space"),
    pytest.param("creature_template ", id="trailing-space"),
    pytest.param("creature_template\n", id="newline"),
    pytest.param("creature\ttemplate", id="tab"),
    pytest.param("\udce9", id="lone-surrogate"),
    pytest.param("creature_template.name", id="table-dot-column"),
    pytest.param("public.account", id="public-account"),
    pytest.param("mysql.user", id="mysql-user"),
    pytest.param("information_schema.tables", id="information-schema"),
    pytest.param("main.sqlite_master", id="main-sqlite-master"),
    pytest.param("pg_catalog.pg_authid", id="pg-authid"),
    pytest.param("*", id="star"),
    pytest.param("1", id="digit"),
    pytest.param("1=1", id="tautology"),
    pytest.param("(SELECT 1)", id="subquery"),
    pytest.param("entry)", id="paren"),
    pytest.param("$", id="dollar"),
    pytest.param("%s", id="pyformat"),
    pytest.param("?", id="qmark"),
    pytest.param("$1", id="numbered"),
    pytest.param("", id="empty"),
    pytest.param("a" * 65, id="too-long"),
]
"""Spellings that are not a plain name: refused as invalid_input wherever they stand."""

ABSENT_NAMES = [
    pytest.param(name, id=name) for name in (
        "account", "canary", "sqlite_master", "sqlite_schema", "information_schema", "pg_authid", "mysql", "user",
        "ACCOUNT", "CREATURE_TEMPLATE", "Creature_Template", "creature_template_", "creature_template$",
        "nonexistent", "_", "rowid", "oid", "ctid", "xmin", "_rowid_", "sha_pass_hash", "username", "password",
        "note",
    )
] + [pytest.param("a" * 64, id="a-times-64")]
"""Plain names of nothing an agent may read: refused as not_found (the name may be echoed: it is plain)."""


def identifier_queries(name: str) -> list[tuple[str, dict[str, Any]]]:
    """(position, query): ``name`` in each identifier position of an otherwise good query."""
    return [
        ("table", {"kind": "database.rows", "table": name}),
        ("table", {"kind": "database.count", "table": name}),
        ("table", {"kind": "database.schema", "table": name}),
        ("columns", {"kind": "database.rows", "table": "creature_template", "columns": [name]}),
        ("columns", {"kind": "database.rows", "table": "creature_template", "columns": ["entry", name]}),
        ("filters", rows_query([{"column": name, "op": "eq", "value": 1}])),
        ("filters", rows_query([{"column": name, "op": "eq", "value": None}])),
        ("filters", {"kind": "database.count", "table": "creature_template",
                     "filters": [{"column": name, "op": "contains", "value": "x"}]}),
        ("order_by", rows_query([], order_by=[{"column": name}])),
        ("order_by", rows_query([], order_by=[{"column": "entry"}, {"column": name, "direction": "desc"}])),
    ]


def check_refusal(service: ResearchService, name: str, expected: str) -> None:
    for position, query in identifier_queries(name):
        code, error = outcome(service, query)
        assert code == expected, (position, query, error)
        message, details = error["message"], error["details"]
        assert "DROP" not in message
        assert "DROP" not in str(details)
        assert not any(marker in message for marker in SECRET_MARKERS)
        assert str(details.get("field", "")).startswith(position), (position, details)
        if expected == "invalid_input" and len(name) >= 4:
            assert name not in message
            assert name not in str(details)
    assert captures(service) == []  # a refusal writes no capture


@pytest.mark.parametrize("name", MALFORMED_NAMES)
def test_malformed_identifiers_are_refused_as_invalid_input(world: ResearchService, name: str) -> None:
    check_refusal(world, name, "invalid_input")


@pytest.mark.parametrize("name", ABSENT_NAMES)
def test_plain_names_of_hidden_or_missing_things_are_not_found(world: ResearchService, name: str) -> None:
    check_refusal(world, name, "not_found")


def test_hidden_tables_are_not_listed_and_hidden_columns_are_not_usable(world_server: WorldServer,
                                                                       tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, columns={"creature_template": ["entry", "name"]})
    try:
        listed = service.query({"kind": "database.tables"})["result"]["databases"][0]
        assert set(listed["tables"]).isdisjoint({"account", "canary"})
        answer = service.query({"kind": "database.rows", "table": "creature_template", "limit": 1})["result"]
        assert answer["columns"] == ["entry", "name"]
        for hidden in ("icon", "subname", "gold_multiplier"):
            # a filter on a hidden column would be an oracle for its values: refused like a missing column
            for position, query in identifier_queries(hidden)[3:]:
                code, error = outcome(service, query)
                assert code == "not_found", (position, error)
    finally:
        service.close()


HOSTILE_DATABASE_NAMES = ["world'; DROP TABLE canary; --", 'world"; DROP TABLE canary; --', "world`; DROP --"]


@pytest.mark.parametrize("name", HOSTILE_DATABASE_NAMES)
def test_a_hostile_database_name_is_not_found(world: ResearchService, name: str) -> None:
    code, _error = outcome(world, {"kind": "database.rows", "database": name, "table": "creature_template"})
    assert code == "not_found"


@pytest.mark.parametrize("name", HOSTILE_DATABASE_NAMES)
def test_a_hostile_database_name_is_not_echoed(world: ResearchService, name: str) -> None:
    _code, error = outcome(world, {"kind": "database.rows", "database": name, "table": "creature_template"})
    assert "DROP" not in error["message"]


# --- 2. hostile values -----------------------------------------------------------------------------------

HOSTILE_VALUES = [
    pytest.param("1; DROP TABLE canary", id="stacked-drop"),
    pytest.param("x'; DELETE FROM canary; --", id="quote-stacked-delete"),
    pytest.param("'; DROP TABLE canary; --", id="quote-drop"),
    pytest.param('"; DROP TABLE canary; --', id="double-quote-drop"),
    pytest.param("`; DROP TABLE canary; --", id="backtick-drop"),
    pytest.param("' OR '1'='1", id="or-tautology"),
    pytest.param("' OR 1=1 --", id="or-tautology-comment"),
    pytest.param('" OR ""="', id="double-quote-tautology"),
    pytest.param("') OR ('1'='1", id="paren-tautology"),
    pytest.param("1 OR 1=1", id="bare-tautology"),
    pytest.param("' UNION SELECT username, sha_pass_hash FROM account --", id="union-account"),
    pytest.param("/* comment */", id="block-comment"),
    pytest.param("*/", id="comment-close"),
    pytest.param("/*", id="comment-open"),
    pytest.param("-- comment", id="line-comment"),
    pytest.param("# comment", id="hash-comment"),
    pytest.param(f"' INTO OUTFILE '{OUTFILE}' --", id="into-outfile-quoted"),
    pytest.param(f"INTO OUTFILE '{OUTFILE}'", id="into-outfile"),
    pytest.param("/*!50000 DROP TABLE canary */", id="version-comment"),
    pytest.param("/*! DROP TABLE canary */", id="executable-comment"),
    pytest.param("\\'", id="backslash-quote"),
    pytest.param("\\", id="backslash"),
    pytest.param("\\\\", id="two-backslashes"),
    pytest.param("\\ Bold", id="backslash-bold"),
    pytest.param("''", id="two-quotes"),
    pytest.param("'", id="quote"),
    pytest.param('"', id="double-quote"),
    pytest.param("`", id="backtick"),
    pytest.param("%", id="percent"),
    pytest.param("_", id="underscore"),
    pytest.param("%%", id="two-percents"),
    pytest.param("_%", id="underscore-percent"),
    pytest.param("%_", id="percent-underscore"),
    pytest.param("0%", id="zero-percent"),
    pytest.param("t%O", id="percent-between"),
    pytest.param("e_G", id="underscore-between"),
    pytest.param("!", id="escape-char"),
    pytest.param("!%", id="escape-percent"),
    pytest.param("!_", id="escape-underscore"),
    pytest.param("!!", id="escape-escape"),
    pytest.param("\\%", id="backslash-percent"),
    pytest.param("\\_", id="backslash-underscore"),
    pytest.param("[a-z]%", id="bracket-class"),
    pytest.param("%s", id="pyformat"),
    pytest.param("%(name)s", id="pyformat-named"),
    pytest.param("?", id="qmark"),
    pytest.param("$1", id="numbered"),
    pytest.param(":name", id="named"),
    pytest.param("Percent%Only", id="exact-percent-name"),
    pytest.param("100% Pure_Gold", id="exact-percent-underscore-name"),
    pytest.param("O'Brien \"the\" \\ Bold", id="exact-quotes-backslash-name"),
    pytest.param("Line1\nLine2", id="exact-newline-name"),
    pytest.param("\n", id="newline"),
    pytest.param("\r\n", id="crlf"),
    pytest.param("\x1a", id="ctrl-z"),
    pytest.param("\u202e", id="rtl-override"),
    pytest.param("\U0001f525", id="emoji"),
    pytest.param("SLEEP(5)", id="sleep"),
    pytest.param("'||pg_sleep(5)||'", id="pg-sleep-concat"),
    pytest.param("x" * 10_000, id="long"),
]


def literal(op: str, value: str) -> list[int]:
    """The creature entries whose name equals or contains ``value``, character for character."""
    if op == "eq":
        return [creature["entry"] for creature in CREATURES if creature["name"] == value]
    return [creature["entry"] for creature in CREATURES if value in creature["name"]]


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_hostile_values_match_literally(world: ResearchService, value: str) -> None:
    for op in ("eq", "contains"):
        expected = literal(op, value)
        answer = world.query(rows_query([{"column": "name", "op": op, "value": value}]))
        assert entries(answer) == expected, op
        assert answer["result"]["complete_filtered_rows"] is True
        count = world.query({"kind": "database.count", "table": "creature_template",
                             "filters": [{"column": "name", "op": op, "value": value}]})
        assert count["result"]["count"] == len(expected), op
    answer = world.query(rows_query([{"column": "name", "op": "in", "value": [value, "Hogger"]}]))
    assert entries(answer) == sorted({1, *literal("eq", value)})
    count = world.query({"kind": "database.count", "table": "creature_template",
                         "filters": [{"column": "name", "op": "ne", "value": value}]})
    assert count["result"]["count"] == 60 - len(literal("eq", value))
    comments = world.query({"kind": "database.count", "table": "smart_scripts",
                            "filters": [{"column": "comment", "op": "contains", "value": value}]})
    assert comments["result"]["count"] == sum(value in script["comment"] for script in SMART_SCRIPTS)
    assert not Path(OUTFILE).exists()


def test_the_like_wildcards_and_escape_character_are_plain(world: ResearchService) -> None:
    def contains(value: str) -> list[int]:
        return entries(world.query(rows_query([{"column": "name", "op": "contains", "value": value}])))

    assert contains("%") == [4, 6]
    assert contains("_") == [4, 7]
    assert contains("!") == []
    assert contains("% Pure_") == [4]
    assert contains("\\") == [5]
    assert contains("'") == [5]
    hogger = world.query({"kind": "database.rows", "table": "smart_scripts", "columns": ["comment"],
                          "filters": [{"column": "comment", "op": "contains", "value": "(100%"}]})
    assert [row[0] for row in hogger["result"]["rows"]] == ["Hogger - On Aggro - Say Line 0 (100% chance)"]


def test_a_quoted_tautology_matches_nothing(world: ResearchService) -> None:
    answer = world.query(rows_query([{"column": "name", "op": "eq", "value": "' OR '1'='1"}]))
    assert answer["result"]["rows"] == []
    assert answer["result"]["complete_filtered_rows"] is True
    assert "absence" in answer["result"]


@pytest.mark.parametrize("payload", [b"'; DROP TABLE canary; --", b"\x00' OR '1'='1", b"\\", ICON_BINARY])
def test_hostile_bytes_match_literally(world: ResearchService, payload: bytes) -> None:
    value = {"base64": base64.b64encode(payload).decode("ascii")}
    answer = world.query(rows_query([{"column": "icon", "op": "eq", "value": value}]))
    assert entries(answer) == ([1] if payload == ICON_BINARY else [])


@pytest.mark.parametrize("op", ["eq", "contains"])
def test_a_nul_in_a_value_is_literal_or_refused(world_server: WorldServer, world: ResearchService, op: str,
                                                request: pytest.FixtureRequest) -> None:
    code, answer = outcome(world, rows_query([{"column": "name", "op": op, "value": "\x00"}]))
    assert code in ("ok", "invalid_input"), answer
    if code == "ok":
        assert entries(answer) == []


# --- 3. wrong types --------------------------------------------------------------------------------------


def filtered(column: str, op: Any, value: Any) -> dict[str, Any]:
    return rows_query([{"column": column, "op": op, "value": value}])


WRONG_TYPES = [
    pytest.param(filtered("entry", "eq", "1"), id="string-for-int"),
    pytest.param(filtered("entry", "eq", "1; DROP TABLE canary"), id="sql-string-for-int"),
    pytest.param(filtered("entry", "eq", 1.5), id="float-for-int"),
    pytest.param(filtered("entry", "eq", 1.0), id="whole-float-for-int"),
    pytest.param(filtered("entry", "eq", True), id="true-for-int"),
    pytest.param(filtered("entry", "eq", False), id="false-for-int"),
    pytest.param(filtered("entry", "eq", {"base64": "AQ=="}), id="bytes-for-int"),
    pytest.param(filtered("name", "eq", {"base64": "AQ=="}), id="bytes-for-text"),
    pytest.param(filtered("name", "eq", {"$ne": 1}), id="object-for-text"),
    pytest.param(filtered("name", "eq", {}), id="empty-object"),
    pytest.param(filtered("name", "eq", 1), id="int-for-text"),
    pytest.param(filtered("name", "eq", True), id="bool-for-text"),
    pytest.param(filtered("entry", "eq", [1, 2]), id="list-with-eq"),
    pytest.param(filtered("entry", "ne", [1]), id="list-with-ne"),
    pytest.param(filtered("entry", "lt", [1]), id="list-with-lt"),
    pytest.param(filtered("name", "contains", ["x"]), id="list-with-contains"),
    pytest.param(filtered("entry", "in", 1), id="scalar-with-in"),
    pytest.param(filtered("entry", "in", "1,2"), id="string-with-in"),
    pytest.param(filtered("entry", "in", None), id="null-with-in"),
    pytest.param(filtered("entry", "lt", None), id="null-with-lt"),
    pytest.param(filtered("entry", "ge", None), id="null-with-ge"),
    pytest.param(filtered("name", "contains", None), id="null-with-contains"),
    pytest.param(filtered("entry", "in", list(range(101))), id="in-above-max-in-values"),
    pytest.param(filtered("entry", "in", list(range(1001))), id="in-above-schema-max"),
    pytest.param(filtered("entry", "in", []), id="in-empty"),
    pytest.param(filtered("entry", "in", [1, "2"]), id="in-mixed-types"),
    pytest.param(filtered("entry", "in", [1, None]), id="in-with-null"),
    pytest.param(filtered("entry", "in", [[1]]), id="in-nested"),
    pytest.param(filtered("entry", "like", "1"), id="op-like"),
    pytest.param(filtered("entry", "LIKE", "1"), id="op-like-upper"),
    pytest.param(filtered("entry", "regexp", "1"), id="op-regexp"),
    pytest.param(filtered("entry", "=", 1), id="op-equals-sign"),
    pytest.param(filtered("entry", "EQ", 1), id="op-eq-upper"),
    pytest.param(filtered("entry", "between", [1, 2]), id="op-between"),
    pytest.param(filtered("entry", "eq; DROP TABLE canary", 1), id="op-sql"),
    pytest.param(filtered("entry", "", 1), id="op-empty"),
    pytest.param(filtered("entry", None, 1), id="op-null"),
    pytest.param(rows_query([{"column": "entry", "op": "eq"}]), id="filter-without-value"),
    pytest.param(rows_query([{"column": "entry", "op": "eq", "value": 1, "escape": "\\"}]), id="filter-extra-key"),
    pytest.param(rows_query([{"column": "entry", "op": "eq", "value": 1, "raw": "1=1"}]), id="filter-raw-key"),
    pytest.param(rows_query([], sql="SELECT * FROM account"), id="extra-sql"),
    pytest.param(rows_query([], where="1=1"), id="extra-where"),
    pytest.param(rows_query([], join="account"), id="extra-join"),
    pytest.param(rows_query([], order_by=[{"column": "entry", "nulls": "first"}]), id="order-extra-key"),
    pytest.param(rows_query([], order_by=[{"column": "entry", "direction": "desc; DROP TABLE canary"}]),
                 id="order-direction-sql"),
    pytest.param(rows_query([], order_by=[{"column": "entry", "direction": "DESC"}]), id="order-direction-upper"),
    pytest.param(rows_query([], order_by="entry"), id="order-string"),
    pytest.param(rows_query([], limit="10"), id="limit-string"),
    pytest.param(rows_query([], limit=0), id="limit-zero"),
    pytest.param(rows_query([], limit=-1), id="limit-negative"),
    pytest.param(rows_query([], limit=10.0), id="limit-float"),
    pytest.param(rows_query([], limit="1; DROP TABLE canary"), id="limit-sql"),
    pytest.param(rows_query([], offset=-1), id="offset-negative"),
    pytest.param(rows_query([], offset="0 OR 1=1"), id="offset-sql"),
    pytest.param(rows_query([], columns="entry"), id="columns-string"),
    pytest.param(rows_query([], columns=[]), id="columns-empty"),
    pytest.param(rows_query([], columns=["entry", "entry"]), id="columns-twice"),
    pytest.param(rows_query([], columns=[1]), id="columns-int"),
    pytest.param(rows_query([{"column": "entry", "op": "ge", "value": 0}] * 17), id="too-many-filters"),
    pytest.param({"kind": "database.rows", "table": "creature_template", "database": 1}, id="database-int"),
    pytest.param({"kind": "database.rows", "table": ["creature_template"]}, id="table-list"),
    pytest.param({"kind": "database.query", "table": "creature_template"}, id="kind-query"),
    pytest.param({"kind": "database.sql", "sql": "SELECT 1"}, id="kind-sql"),
    pytest.param({"kind": "database.rows "}, id="kind-trailing-space"),
    pytest.param(filtered("created_at", "eq", "yesterday"), id="datetime-word"),
    pytest.param(filtered("created_at", "eq", "2024-13-01"), id="datetime-month-13"),
    pytest.param(filtered("created_at", "eq", "01/02/2024"), id="datetime-us"),
    pytest.param(filtered("created_at", "eq", "2024-01-02 12:30:45; DROP TABLE canary"), id="datetime-sql"),
    pytest.param(filtered("created_at", "eq", "2024-01-02'--"), id="datetime-quote"),
    pytest.param(filtered("created_at", "eq", "now()"), id="datetime-function"),
    pytest.param(filtered("created_at", "eq", ""), id="datetime-empty"),
    pytest.param(filtered("created_at", "eq", 20240102), id="datetime-int"),
    pytest.param(filtered("created_at", "eq", 1.5), id="datetime-float"),
    pytest.param(filtered("created_at", "contains", "2024"), id="datetime-contains"),
    pytest.param(rows_query([{"column": "starts_at", "op": "eq", "value": "2024-02-30"}], table="quest_template",
                            columns=["id"]), id="date-february-30"),
    pytest.param(filtered("icon", "eq", {"base64": "not base64!"}), id="base64-garbage"),
    pytest.param(filtered("icon", "eq", {"base64": "AQ"}), id="base64-no-padding"),
    pytest.param(filtered("icon", "eq", {"base64": "AQ==\n"}), id="base64-newline"),
    pytest.param(filtered("icon", "eq", {"base64": "AQ==", "bytes": 1}), id="base64-extra-key"),
    pytest.param(filtered("icon", "eq", {"base64": 1}), id="base64-int"),
    pytest.param(filtered("icon", "eq", "AQ=="), id="string-for-bytes"),
    pytest.param(filtered("icon", "lt", {"base64": "AQ=="}), id="lt-on-bytes"),
    pytest.param(filtered("icon", "contains", "PNG"), id="contains-on-bytes"),
    pytest.param(filtered("faction", "contains", "1"), id="contains-on-int"),
    pytest.param(filtered("entry", "contains", "%"), id="contains-percent-on-int"),
    pytest.param(filtered("gold_multiplier", "contains", "1"), id="contains-on-decimal"),
    pytest.param(filtered("name", "contains", 1), id="contains-int-value"),
    pytest.param(filtered("gold_multiplier", "eq", "NaN"), id="decimal-nan"),
    pytest.param(filtered("gold_multiplier", "eq", "1,5"), id="decimal-comma"),
    pytest.param(filtered("gold_multiplier", "eq", "0x10"), id="decimal-hex"),
    pytest.param(filtered("gold_multiplier", "eq", "1; DROP TABLE canary"), id="decimal-sql"),
    pytest.param(filtered("gold_multiplier", "eq", True), id="decimal-bool"),
    pytest.param(filtered("speed_walk", "eq", "fast"), id="float-word"),
    pytest.param(filtered("speed_walk", "eq", float("nan")), id="float-nan"),
    pytest.param(filtered("speed_walk", "eq", float("inf")), id="float-inf"),
]


@pytest.mark.parametrize("query", WRONG_TYPES)
def test_wrong_types_are_invalid_input(world: ResearchService, query: dict[str, Any]) -> None:
    code, error = outcome(world, query)
    assert code == "invalid_input", error
    assert "DROP" not in error["message"]
    assert captures(world) == []


def test_count_refuses_wrong_types_too(world: ResearchService) -> None:
    for filters in ([{"column": "entry", "op": "eq", "value": "1"}], [{"column": "faction", "op": "contains",
                                                                      "value": "1"}],
                    [{"column": "entry", "op": "in", "value": list(range(101))}]):
        code, _error = outcome(world, {"kind": "database.count", "table": "creature_template", "filters": filters})
        assert code == "invalid_input"


def test_max_in_values_is_the_configured_limit(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, max_in_values=3)
    try:
        assert entries(service.query(filtered("entry", "in", [1, 2, 3]))) == [1, 2, 3]
        code, error = outcome(service, filtered("entry", "in", [1, 2, 3, 4]))
        assert code == "invalid_input"
        assert error["details"]["field"] == "filters.0.value"
    finally:
        service.close()


@pytest.mark.parametrize("value", [10**30, -(10**30), 2**63])
def test_an_integer_beyond_64_bits_is_no_match_or_refused(world_server: WorldServer, world: ResearchService,
                                                          value: int, request: pytest.FixtureRequest) -> None:
    for query in (filtered("entry", "eq", value), filtered("entry", "in", [1, value])):
        code, answer = outcome(world, query)
        assert code in ("ok", "invalid_input"), answer
        if code == "ok":
            assert entries(answer) in ([], [1])


@pytest.mark.parametrize("query", [
    pytest.param(filtered("gold_multiplier", "eq", "1e999999"), id="decimal-out-of-range"),
    pytest.param(filtered("created_at", "eq", "12:30:45"), id="time-of-day-for-datetime"),
    pytest.param(filtered("created_at", "eq", "20240102"), id="compact-date-read-as-time"),
])
def test_a_value_the_column_cannot_hold_is_the_callers_error(world_server: WorldServer, world: ResearchService,
                                                             query: dict[str, Any],
                                                             request: pytest.FixtureRequest) -> None:
    code, answer = outcome(world, query)
    assert code in ("ok", "invalid_input"), answer
    if code == "ok":
        assert entries(answer) == []


# --- 5. an over-privileged login still cannot write --------------------------------------------------------

WRITES = [
    pytest.param("INSERT INTO canary (id, note) VALUES (2, 'x')", id="insert"),
    pytest.param("UPDATE canary SET note = 'changed'", id="update"),
    pytest.param("DELETE FROM canary", id="delete"),
    pytest.param("CREATE TABLE evil (a int)", id="create"),
    pytest.param("SELECT 1; DELETE FROM canary", id="stacked"),
    pytest.param("DROP TABLE canary", id="drop"),
    pytest.param("ALTER TABLE canary ADD COLUMN evil int", id="alter"),
    pytest.param("CREATE TEMPORARY TABLE evil_temp (a int)", id="create-temporary"),
]


def test_the_writer_login_reads_normally(world_server: WorldServer, writer: ResearchService) -> None:
    answer = writer.query({"kind": "database.rows", "table": "creature_template", "columns": ["entry", "name"],
                           "filters": [{"column": "entry", "op": "le", "value": 2}]})
    assert answer["result"]["rows"] == [[1, "Hogger"], [2, "Ragnaros der Feuerfürst 🔥"]]
    if world_server.dialect != "sqlite":
        assert driver_of(writer).source.user == world_server.writer_user


@pytest.mark.parametrize("statement", WRITES)
def test_the_writer_login_cannot_write_through_the_driver(writer: ResearchService, statement: str) -> None:
    driver = driver_of(writer)
    error = refused(driver, statement)
    assert error.details["reason"] == "refused"
    assert driver.fetch("SELECT id, note FROM canary") == [(1, "untouched")]


def test_the_writer_login_cannot_write_files(world_server: WorldServer, writer: ResearchService) -> None:
    statement = {"mariadb": f"SELECT id, note FROM canary INTO OUTFILE '{OUTFILE}'",
                 "postgresql": f"COPY canary TO '{OUTFILE}'",
                 "sqlite": f"ATTACH DATABASE '{OUTFILE}' AS evil"}[world_server.dialect]
    refused(driver_of(writer), statement)
    assert not Path(OUTFILE).exists()


def test_a_fresh_writer_session_is_read_only(world_server: WorldServer, writer: ResearchService) -> None:
    driver = driver_of(writer)
    driver.close()  # no pooled connection: the next statement opens a fresh session
    if world_server.dialect == "mariadb":
        assert mariadb_read_only(driver)
    elif world_server.dialect == "postgresql":
        assert driver.fetch_unchecked("SHOW default_transaction_read_only") == [("on",)]
        assert driver.fetch_unchecked("SHOW transaction_read_only") == [("on",)]
    else:
        # The authorizer refuses this pragma; below it, the session is query_only on a mode=ro file.
        refused(driver, "PRAGMA query_only")
        with driver._connection() as connection:
            raw = connection._connection
            raw.set_authorizer(None)
            try:
                assert raw.execute("PRAGMA query_only").fetchone() == (1,)
                raw.execute("PRAGMA query_only = OFF")
                with pytest.raises(sqlite3.OperationalError, match="readonly"):
                    raw.execute("DELETE FROM canary")
            finally:
                raw.close()  # never back to the pool without its authorizer
        driver.close()
    assert driver.fetch("SELECT note FROM canary") == [("untouched",)]


def mariadb_read_only(driver: Driver) -> bool:
    """The session's read-only flag (tx_read_only before MariaDB 11.1, transaction_read_only after).

    One statement that cannot fail: a failed one would close the pooled connection being looked at.
    """
    rows = driver.fetch_unchecked(
        "SHOW SESSION VARIABLES WHERE Variable_name IN ('tx_read_only', 'transaction_read_only')")
    flags = {str(name): str(value) for name, value in rows}
    assert flags
    return set(flags.values()) == {"ON"}


def lift_read_only(dialect: str) -> str:
    return {"mariadb": "SET SESSION TRANSACTION READ WRITE",
            "postgresql": "SELECT set_config('default_transaction_read_only', 'off', false)",
            "sqlite": "PRAGMA query_only = OFF"}[dialect]


def test_a_statement_cannot_lift_read_only_for_later_statements(world_server: WorldServer,
                                                                writer: ResearchService) -> None:
    """Below the shape check: even after a statement that would make the session writable, each
    later statement is still read-only (MariaDB: per statement; PostgreSQL: the change is rolled back
    with its read-only transaction; SQLite: the authorizer refuses the pragma)."""
    driver = driver_of(writer)
    driver.close()
    with contextlib.suppress(ResearchUnavailable):  # refused outright: also fine
        driver.fetch_unchecked(lift_read_only(world_server.dialect))
    for statement in ("INSERT INTO canary (id, note) VALUES (2, 'x')", "CREATE TABLE evil (a int)",
                      "DROP TABLE canary"):
        assert refused(driver, statement).details["reason"] == "refused"


def test_the_shape_check_runs_nothing_but_a_single_select(writer: ResearchService) -> None:
    driver = driver_of(writer)
    for statement in ("DELETE FROM canary", "SELECT 1; DELETE FROM canary", "SELECT note FROM canary -- x",
                      "SELECT /*!50000 1 */ FROM canary", "SET SESSION TRANSACTION READ WRITE",
                      " SELECT 1", "select note from canary"):
        with pytest.raises(InternalError):
            driver.fetch(statement)
    assert driver.fetch("SELECT note FROM canary") == [("untouched",)]


SERVERS = [pytest.param("mariadb", marks=pytest.mark.mariadb), pytest.param("postgresql", marks=pytest.mark.postgres)]


# SQLite's limit is a progress handler in Armarius, not a session setting: servers only.
@pytest.mark.parametrize("world_server", SERVERS, indirect=True)
def test_a_statement_cannot_lift_the_time_limit_for_later_statements(world_server: WorldServer,
                                                                     tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, login="writer", timeout_seconds=0.5)
    try:
        driver = driver_of(service)
        lift, slow = {"mariadb": ("SET SESSION max_statement_time = 0", "SELECT SLEEP(2)"),
                      "postgresql": ("SELECT set_config('statement_timeout', '0', false)", "SELECT pg_sleep(2)")
                      }[world_server.dialect]
        driver.fetch_unchecked(lift)
        try:
            driver.fetch_unchecked(slow)
        except ResearchUnavailable as error:
            reason = error.details["reason"]
        else:
            reason = "ran to its end"
        assert reason == "timeout"
    finally:
        service.close()


# --- 6. timeouts -----------------------------------------------------------------------------------------

SLOW = {
    "mariadb": "SELECT SLEEP(3)",
    "postgresql": "SELECT pg_sleep(3)",
    # 120**5 rows: minutes of work. (A recursive CTE is refused outright by the SQLite authorizer.)
    "sqlite": "SELECT COUNT(*) FROM smart_scripts a, smart_scripts b, smart_scripts c, smart_scripts d, "
              "smart_scripts e",
}


def test_a_slow_statement_stops_at_the_time_limit(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, timeout_seconds=0.5)
    try:
        error = refused(driver_of(service), SLOW[world_server.dialect])
        assert error.details == {"database": "world", "reason": "timeout"}
        assert "0.5 s" in error.message
        assert "SLEEP" not in error.message.upper()
        assert "smart_scripts" not in error.message
        # the pool recovers: the next query is answered
        answer = service.query(filtered("entry", "eq", 1))
        assert entries(answer) == [1]
    finally:
        service.close()


@pytest.mark.parametrize("world_server", ["sqlite"], indirect=True)
def test_a_recursive_query_on_sqlite_is_refused_or_stopped(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, timeout_seconds=0.5)
    try:
        error = refused(driver_of(service), "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                                            "WHERE x < 1000000000) SELECT COUNT(*) FROM c")
        assert error.details["reason"] in ("refused", "timeout")
    finally:
        service.close()


# --- 7. credentials never leak ---------------------------------------------------------------------------


def forbidden_strings(server: WorldServer, *extra: str) -> list[str]:
    """What must never appear in an answer, error or log line: credentials, where the server is, hidden rows."""
    found = [*extra, *SECRET_MARKERS]
    if server.dialect == "sqlite":
        assert server.path is not None
        found += [str(server.path), server.path.name]
    else:
        found += [str(server.reader_password), str(server.reader_user), str(server.writer_password),
                  str(server.writer_user), str(server.host), f"{server.host}:{server.port}", str(server.database)]
    return found


def assert_failure_is_clean(service: ResearchService, forbidden: list[str], caplog: pytest.LogCaptureFixture,
                            reason: str) -> None:
    caplog.clear()
    with pytest.raises(SessionBlocked) as caught:  # a provider failure blocks the session it happened in
        service.query(filtered("entry", "eq", 1))
    error = caught.value
    assert (error.details["reason"], error.details["cause"]["code"]) == ("research_unavailable", "research_unavailable")
    assert error.details["cause"]["details"] == {"database": "world", "reason": reason}
    history = service.sessions.history(service._agent, service.session)  # what the session keeps of it
    assert (history["status"], history["reason"]) == ("blocked", "research_unavailable")
    assert (history["evidence"]["records"], history["budget"]["used"], history["budget"]["held"]) == (0, 0, 1)
    shown = [error.message, str(error.details), "".join(traceback.format_exception(error)), caplog.text,
             *(record.getMessage() for record in caplog.records), repr(history)]
    for text in shown:
        for secret in forbidden:
            assert secret not in text, secret
    assert caplog.records, "the failure is logged (by class only)"
    assert captures(service) == []


# SQLite has no logins (see the missing-file test); the PostgreSQL test server trusts local logins, so a
# wrong password is never checked there: MariaDB shows it.
@pytest.mark.parametrize("world_server", [pytest.param("mariadb", marks=pytest.mark.mariadb)], indirect=True)
def test_a_refused_login_names_no_credentials(world_server: WorldServer, tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="armarius.research")
    wrong = "wrong-" + secrets.token_hex(12)
    service = open_world_service(tmp_path, world_server, environ={PASSWORD_VARIABLE: wrong})
    try:
        assert_failure_is_clean(service, forbidden_strings(world_server, wrong), caplog, "connect")
    finally:
        service.close()


def test_an_unreachable_server_names_no_credentials(world_server: WorldServer, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="armarius.research")
    if world_server.dialect == "sqlite":
        # The analogue: the file vanished after the configuration was read; its path is not shown.
        assert world_server.path is not None
        copy = tmp_path / "copy" / "world-copy.sqlite"
        copy.parent.mkdir()
        shutil.copyfile(world_server.path, copy)
        service = open_world_service(tmp_path, world_server, environ={}, path=str(copy))
        copy.unlink()
        forbidden = [*forbidden_strings(world_server), str(copy), copy.name, str(copy.parent)]
    else:
        service = open_world_service(tmp_path, world_server, port=1)
        forbidden = [*forbidden_strings(world_server), f"{world_server.host}:1"]
    try:
        assert_failure_is_clean(service, forbidden, caplog, "connect")
    finally:
        service.close()


def test_answers_and_captures_hold_no_credentials_or_secrets(world_server: WorldServer, world: ResearchService,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="armarius.research")
    answers = [world.query({"kind": "database.tables"})]
    for table in ("creature_template", "item_template", "quest_template", "smart_scripts"):
        answers.append(world.query({"kind": "database.schema", "table": table}))
        answers.append(world.query({"kind": "database.rows", "table": table, "limit": 200}))
        answers.append(world.query({"kind": "database.count", "table": table}))
    answers.append(world.query(filtered("name", "contains", "secret")))
    for attempt in ("account", "canary"):
        assert outcome(world, {"kind": "database.rows", "table": attempt})[0] == "not_found"
    files = [path for path in captures(world) if path.is_file()]
    assert len(files) == len(answers)
    texts = [repr(answer) for answer in answers] + [path.read_text(encoding="utf-8") for path in files]
    texts.append(caplog.text)
    forbidden = forbidden_strings(world_server)
    for text in texts:
        for secret in forbidden:
            assert secret not in text, secret
    assert {answer["origin"]["database"] for answer in answers} == {"world"}
