"""Filter values on SQLite, MariaDB and PostgreSQL: what the request's own values can cause.

A value the column cannot hold matches nothing (``eq``, ``contains``, members of ``in``), everything
that has a value (``ne``), or is refused as ``invalid_input`` naming the field (an order against it);
a value too large for a driver or engine is refused before it reaches one; and a driver error the
values cause anyway is ``invalid_input``, never ``research_unavailable`` (kept for provider failures,
which would block a session). Also: the operator spelled ``operator`` as seed 003 writes it.

After every test, the owner counts every table and reads the canary: nothing was ever written.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from armarius.config import Settings
from armarius.errors import InvalidInput, ResearchUnavailable
from armarius.research.config import load_research_config
from armarius.research.service import ResearchService, query_schema
from tests.cli.test_cli import Cli
from tests.research import world as game
from tests.research.conftest import open_world_service
from tests.research.repos import write_config
from tests.research.session_path import SessionPath
from tests.research.test_database_hostile import assert_world_intact, captures, driver_of, outcome
from tests.research.test_database_identifiers import scratch_database
from tests.research.world import BROADCAST_TEXTS, CREATURES, WorldServer, owner_rows

ROWS = {row["id"]: row for row in BROADCAST_TEXTS}
EMOJI = "\U0001f525"
"""Outside the Basic Multilingual Plane: MariaDB's utf8mb3 cannot hold it."""


@pytest.fixture(autouse=True)
def _world_stays_intact(world_server: WorldServer) -> Iterator[None]:
    yield
    assert_world_intact(world_server)


@pytest.fixture
def texts(world_server: WorldServer, tmp_path: Path) -> Iterator[ResearchService]:
    service = open_world_service(tmp_path, world_server, tables=["broadcast_text", "creature_template"])
    yield service
    service.close()


def query(filters: list[dict[str, Any]], kind: str = "database.rows") -> dict[str, Any]:
    shape: dict[str, Any] = {"kind": kind, "table": "broadcast_text", "filters": filters}
    return shape | ({"columns": ["id"]} if kind == "database.rows" else {})


def answered(service: ResearchService, *filters: dict[str, Any]) -> list[int]:
    """The ids the rows and the count agree on, from complete answers."""
    rows = service.query(query(list(filters)))["result"]
    count = service.query(query(list(filters), "database.count"))["result"]
    found = [row[0] for row in rows["rows"]]
    assert rows["complete_filtered_rows"] is True
    assert count["count"] == len(found)
    assert ("absence" in rows) == (not found)
    return found


def refused(service: ResearchService, request: dict[str, Any]) -> dict[str, Any]:
    code, error = outcome(service, request)
    assert code == "invalid_input", error
    return dict(error["details"])


def holds(server: WorldServer, column: str, value: str) -> bool:
    """Whether the world's column can hold ``value``: only MariaDB's utf8mb3 cannot hold an emoji."""
    return not (server.dialect == "mariadb" and column == "text_mb3" and EMOJI in value)


def stored(column: str, predicate: Any) -> list[int]:
    return sorted(key for key, row in ROWS.items() if row[column] is not None and predicate(row[column]))


def engine_says(server: WorldServer, column: str, comparison: str, value: str) -> list[int]:
    """The ids the database itself gives for ``column <comparison> value`` (the owner, a bound value)."""
    mark = "?" if server.dialect == "sqlite" else "%s"
    rows = owner_rows(server, f"SELECT id FROM broadcast_text WHERE {column} {comparison} {mark} ORDER BY id",
                      [value])
    return [int(row[0]) for row in rows]


# --- 1. a text the column's character set cannot hold (issue 10 item 2) --------------------------------------

TEXT_CASES = [pytest.param(column, value, id=f"{column}-{label}") for column in ("text_mb3", "text_mb4")
              for value, label in ((EMOJI, "emoji"), ("Дракон", "cyrillic"), ("plain", "ascii"))]


@pytest.mark.parametrize(("column", "value"), TEXT_CASES)
def test_eq_ne_in_and_contains_answer_what_the_column_can_hold(world_server: WorldServer, texts: ResearchService,
                                                               column: str, value: str) -> None:
    possible = holds(world_server, column, value)
    assert answered(texts, {"column": column, "op": "eq", "value": value}) == (
        stored(column, lambda held: held == value) if possible else [])
    assert answered(texts, {"column": column, "op": "ne", "value": value}) == stored(
        column, lambda held: held != value)
    assert answered(texts, {"column": column, "op": "contains", "value": value}) == (
        stored(column, lambda held: value in held) if possible else [])
    assert answered(texts, {"column": column, "op": "in", "value": [value, "Drache"]}) == stored(
        column, lambda held: held == "Drache" or (possible and held == value))
    assert answered(texts, {"column": column, "op": "in", "value": [value]}) == (
        stored(column, lambda held: held == value) if possible else [])
    assert captures(texts)  # answers, each captured


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize(("column", "value"), TEXT_CASES)
def test_an_order_against_a_text_the_column_cannot_hold_is_refused_naming_the_field(
        world_server: WorldServer, texts: ResearchService, column: str, value: str, op: str) -> None:
    request = query([{"column": "id", "op": "ge", "value": 0}, {"column": column, "op": op, "value": value}])
    if holds(world_server, column, value):
        comparison = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
        assert answered(texts, *request["filters"]) == engine_says(world_server, column, comparison, value)
        return
    details = refused(texts, request)
    assert details == {"field": "filters.1.value"}
    assert captures(texts) == []


def test_latin1_is_known_and_a_set_armarius_does_not_know_is_left_to_the_server(
        world_server: WorldServer, texts: ResearchService) -> None:
    # latin1 (Windows-1252 on MariaDB) holds é and €, not Cyrillic: no row, from the repertoire alone.
    assert answered(texts, {"column": "text_latin1", "op": "eq", "value": "naïve €"}) == [2]
    assert answered(texts, {"column": "text_latin1", "op": "eq", "value": "Дракон"}) == []
    assert answered(texts, {"column": "text_latin1", "op": "ne", "value": "Дракон"}) == [1, 2, 4]
    # cp1251: the server's own refusal (an illegal mix of collations) is the caller's error, never the provider's.
    for value in (EMOJI, "é"):
        code, answer = outcome(texts, query([{"column": "text_cp1251", "op": "eq", "value": value}]))
        if world_server.dialect == "mariadb":
            assert (code, answer["details"]) == ("invalid_input", {"field": "filters", "database": "world"})
            assert value not in answer["message"]
        else:
            assert (code, answer["result"]["rows"]) == ("ok", [])
    assert answered(texts, {"column": "text_cp1251", "op": "eq", "value": "Змей"}) == [2]


def test_a_sqlite_or_postgresql_column_holds_what_mariadb_utf8mb3_cannot(world_server: WorldServer,
                                                                          texts: ResearchService) -> None:
    """The same request, on every engine: never research_unavailable."""
    for op in ("eq", "ne", "contains"):
        code, answer = outcome(texts, query([{"column": "text_mb3", "op": op, "value": EMOJI}]))
        assert code == "ok", answer
    code, _answer = outcome(texts, query([{"column": "text_mb3", "op": "lt", "value": EMOJI}]))
    assert code == ("invalid_input" if world_server.dialect == "mariadb" else "ok")


# --- 2. values too large for an engine or driver (issue 10 item 3, issue 10 item 1) ---------------------------


def test_the_longest_text_the_schema_takes_is_a_like_pattern_sqlite_can_run() -> None:
    longest = query_schema()["$defs"]["scalar"]["maxLength"]
    assert query_schema()["$defs"]["filter"]["properties"]["value"]["maxLength"] == longest
    with sqlite3.connect(":memory:") as connection:
        limit = connection.getlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH)
    assert 4 * longest + 2 <= limit  # four UTF-8 bytes a character at most, and the two % around it


@pytest.mark.parametrize("character", ["%", "!", "_", EMOJI, "x", "'"])
def test_contains_with_the_longest_value_runs_on_every_engine(texts: ResearchService, character: str) -> None:
    value = character * 10_000
    assert answered(texts, {"column": "text_mb4", "op": "contains", "value": value}) == []


def test_a_longer_value_is_refused_by_the_schema_before_any_engine(texts: ResearchService) -> None:
    for filters, field in (([{"column": "text_mb4", "op": "contains", "value": "%" * 25_000}], "filters.0.value"),
                           ([{"column": "text_mb4", "op": "eq", "value": "x" * 10_001}], "filters.0.value"),
                           ([{"column": "text_mb4", "op": "in", "value": ["x", "y" * 10_001]}], "filters.0.value.1")):
        details = refused(texts, query(filters))
        assert details == {"field": field, "rule": "maxLength"}
    assert captures(texts) == []


def test_below_the_schema_a_like_pattern_beyond_the_engine_is_refused(world_server: WorldServer,
                                                                       texts: ResearchService) -> None:
    """The statement builder checks the engine's own LIKE limit too (SQLite: 50,000 bytes)."""
    request = query([{"column": "text_mb4", "op": "contains", "value": EMOJI * 20_000}], "database.count")
    if world_server.dialect == "sqlite":
        with pytest.raises(InvalidInput) as caught:
            texts._databases.run(request)
        assert caught.value.details == {"field": "filters.0.value"}
    else:
        assert texts._databases.run(request)["count"] == 0


def test_the_filter_values_of_one_query_are_bounded_together(texts: ResearchService) -> None:
    """100 values of 10,000 quotes (twice that once MariaDB's driver escapes them) are answered on every
    engine; one byte more is refused as a whole."""
    many = {"column": "text_mb4", "op": "in", "value": ["'" * 10_000] * 100}
    assert answered(texts, many) == []
    before = captures(texts)
    details = refused(texts, query([many, {"column": "text_mb3", "op": "ne", "value": "x"}]))
    assert details == {"field": "filters"}
    assert captures(texts) == before


INTEGER_BEYOND_COLUMN = [2**40, 2**63 - 1, -(2**63), 70_000, -70_000]
"""Within 64 bits, beyond a SMALLINT."""


@pytest.mark.parametrize("value", INTEGER_BEYOND_COLUMN)
def test_an_integer_beyond_the_columns_range_compares_correctly(texts: ResearchService, value: int) -> None:
    def creatures(op: str, operand: Any) -> list[int]:
        answer = texts.query({"kind": "database.rows", "table": "creature_template", "columns": ["entry"],
                              "filters": [{"column": "minlevel", "op": op, "value": operand}], "limit": 100})
        return [row[0] for row in answer["result"]["rows"]]

    levels = {row["entry"]: row["minlevel"] for row in CREATURES}
    assert creatures("eq", value) == []
    assert creatures("ne", value) == sorted(levels)
    assert creatures("lt", value) == sorted(entry for entry, level in levels.items() if level < value)
    assert creatures("ge", value) == sorted(entry for entry, level in levels.items() if level >= value)
    assert creatures("in", [value, 11]) == sorted(entry for entry, level in levels.items() if level == 11)


@pytest.mark.parametrize("value", [2**63, 2**64, -(2**63) - 1, 10**30])
def test_an_integer_beyond_the_schemas_bound_is_refused_naming_the_field(texts: ResearchService, value: int) -> None:
    for filters, field in (([{"column": "id", "op": "eq", "value": value}], "filters.0.value"),
                           ([{"column": "id", "op": "in", "value": [1, value]}], "filters.0.value.1"),
                           ([{"column": "chance", "op": "lt", "value": value}], "filters.0.value")):
        assert refused(texts, query(filters))["field"] == field
    assert captures(texts) == []


def test_below_the_schema_an_unsigned_64_bit_integer_is_compared_where_the_engine_can(
        world_server: WorldServer, texts: ResearchService) -> None:
    """The schema stops at 2^63-1; the statement builder on its own takes what each engine binds."""
    def ids(op: str, value: int) -> list[int]:
        answer = texts._databases.run(query([{"column": "id", "op": op, "value": value}]))
        return [row[0] for row in answer["rows"]]

    value = 2**64 - 1
    if world_server.dialect == "sqlite":  # SQLite binds signed 64-bit integers only
        with pytest.raises(InvalidInput) as caught:
            ids("lt", value)
        assert caught.value.details == {"field": "filters.0.value"}
        assert str(2**63 - 1) in caught.value.message
        return
    assert ids("eq", value) == []
    assert ids("lt", value) == [1, 2, 3, 4]


def test_a_larger_integer_goes_through_the_schema_as_a_string_of_digits(
        world_server: WorldServer, texts: ResearchService) -> None:
    """What docs/research.md promises for the upper half of BIGINT UNSIGNED."""
    def ids(op: str, value: Any) -> list[int]:
        answer = texts.query(query([{"column": "id", "op": op, "value": value}]))
        return [row[0] for row in answer["result"]["rows"]]

    assert refused(texts, query([{"column": "id", "op": "lt", "value": "3"}])) == {"field": "filters.0.value"}
    if world_server.dialect == "sqlite":
        assert refused(texts, query([{"column": "id", "op": "lt", "value": str(2**64 - 1)}])) == {
            "field": "filters.0.value"}
        return
    assert ids("eq", str(2**64 - 1)) == []
    assert ids("lt", str(2**64 - 1)) == [1, 2, 3, 4]


@pytest.mark.parametrize(("column", "op", "value", "truth"), [
    pytest.param("chance", "eq", "1e-999", [], id="decimal-eq-tiny"),
    pytest.param("chance", "lt", "1e-999", [1], id="decimal-lt-tiny"),
    pytest.param("chance", "le", "-1e-999", [], id="decimal-le-negative-tiny"),
    pytest.param("chance", "lt", "1" + "0" * 70, [1, 2, 3, 4], id="decimal-71-digits"),
    pytest.param("ratio", "eq", "1e-999", [], id="float-eq-tiny"),
    pytest.param("ratio", "gt", "-1e-999", [1, 2, 4], id="float-gt-negative-tiny"),
    pytest.param("ratio", "lt", "1e999", [1, 2, 4], id="float-lt-huge"),
    pytest.param("ratio", "eq", "-1e999", [], id="float-eq-minus-huge"),
])
def test_a_number_beyond_what_the_engine_compares_is_answered_truly_or_refused(
        texts: ResearchService, column: str, op: str, value: str, truth: list[int]) -> None:
    """Never a rounded comparison: 1e-999 is not 0 (row 1 holds 0)."""
    code, answer = outcome(texts, query([{"column": column, "op": op, "value": value}]))
    if code == "ok":
        assert [row[0] for row in answer["result"]["rows"]] == truth
    else:
        assert (code, answer["details"]) == ("invalid_input", {"field": "filters.0.value"})


# --- 3. driver errors: the request's values versus the provider (issue 10 item 3) ---------------------------

INPUT_ERRORS = {  # statements whose bound value the engine refuses, two per engine
    "sqlite": [("SELECT id FROM canary LIMIT ?", ["x"]),  # SQLITE_MISMATCH
               ("SELECT id FROM canary WHERE note = zeroblob(?)", [2 * 10**9])],  # SQLITE_TOOBIG
    "postgresql": [("SELECT id FROM canary WHERE id = %s", ["x"]),  # 22P02
                   ("SELECT id FROM canary WHERE note = %s", [5])],  # 42883
    "mariadb": [("SELECT id FROM canary WHERE CONVERT(note USING utf8mb3) = %s", [EMOJI]),  # 1267
                ("SELECT id FROM canary WHERE id < CAST(%s AS UNSIGNED) - 2", [1])],  # 1690
}


def test_a_driver_error_caused_by_a_value_is_invalid_input(world_server: WorldServer,
                                                           texts: ResearchService) -> None:
    driver = driver_of(texts)
    for statement, parameters in INPUT_ERRORS[world_server.dialect]:
        with pytest.raises(InvalidInput) as caught:
            driver.fetch(statement, parameters)
        assert caught.value.details == {"field": "filters", "database": "world"}
        assert caught.value.message.startswith("The database 'world' cannot compare a filter value")  # not the driver's
        assert driver.fetch("SELECT id, note FROM canary") == [(1, "untouched")]  # the pool is fine


def test_a_provider_failure_stays_research_unavailable(world_server: WorldServer, texts: ResearchService) -> None:
    """The other classes (connect, timeout: see test_database_hostile) keep their reasons."""
    with pytest.raises(ResearchUnavailable) as caught:
        driver_of(texts).fetch("SELECT id FROM no_such_table")
    assert caught.value.details == {"database": "world", "reason": "refused"}


@pytest.mark.parametrize("value", ["not-a-uuid", 5, 2**63 - 1, -(2**63)])
def test_a_column_of_another_type_takes_its_values_or_refuses_them_as_input(
        world_server: WorldServer, texts: ResearchService, value: Any) -> None:
    """UUID on MariaDB and PostgreSQL, no declared type on SQLite: the server compares, and what it refuses
    is the caller's error."""
    code, answer = outcome(texts, query([{"column": "sound_id", "op": "eq", "value": value}]))
    assert code in ("ok", "invalid_input"), answer
    if code == "ok":
        assert answer["result"]["rows"] == []
    expected = {"sqlite": False, "mariadb": isinstance(value, int), "postgresql": True}[world_server.dialect]
    assert (code == "invalid_input") == expected
    assert answered(texts, {"column": "sound_id", "op": "eq", "value": game.SOUND_IDS[1]}) == [2]


def test_below_the_schema_an_integer_no_driver_binds_is_refused_not_internal(texts: ResearchService) -> None:
    """SQLite's driver cannot bind 2^63 (OverflowError, not a database error): refused before it; the servers
    refuse comparing a UUID with a number as the caller's error."""
    with pytest.raises(InvalidInput) as caught:
        texts._databases.run(query([{"column": "sound_id", "op": "eq", "value": 2**63}]))
    assert caught.value.details["field"] in ("filters.0.value", "filters")


@pytest.fixture
def latin1_postgres(tmp_path: Path) -> Iterator[ResearchService]:
    """A PostgreSQL database in LATIN1, read by the test server's admin login."""
    admin = psycopg.conninfo.conninfo_to_dict(game.PG_ADMIN_URL)
    name = f"armarius_latin1_{secrets.token_hex(4)}"
    try:
        root = psycopg.connect(game.PG_ADMIN_URL, autocommit=True)
    except psycopg.OperationalError as error:
        from tests.conftest import service_missing

        service_missing("PostgreSQL", error)
    database = sql.Identifier(name)
    with root:
        root.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(database))
        root.execute(sql.SQL("CREATE DATABASE {} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
                             ).format(database))
    try:
        with psycopg.connect(**{**admin, "dbname": name}, autocommit=True) as owner:
            owner.execute("CREATE TABLE broadcast_text (id int PRIMARY KEY, text_mb4 text)")
            owner.execute("INSERT INTO broadcast_text VALUES (1, 'café'), (2, NULL)")
        entry = {"name": "latin", "dialect": "postgresql", "host": admin.get("host", "127.0.0.1"),
                 "port": int(admin.get("port", 5432)), "database": name, "user": admin.get("user", "postgres"),
                 "password_env": game.PASSWORD_VARIABLE, "snapshot": "latin-1", "tables": ["broadcast_text"]}
        path = write_config(tmp_path / "research.toml", databases=[entry])
        service = SessionPath(ResearchService(load_research_config(path, {game.PASSWORD_VARIABLE: admin.get(
            "password", "")})), tmp_path)
        yield service
        service.close()
    finally:
        with psycopg.connect(game.PG_ADMIN_URL, autocommit=True) as root_again:
            root_again.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))


@pytest.mark.postgres
@pytest.mark.parametrize("world_server", ["sqlite"], indirect=True)  # the world itself is not used here
def test_postgresql_in_latin1_refuses_what_it_cannot_hold_as_input(latin1_postgres: ResearchService) -> None:
    assert answered(latin1_postgres, {"column": "text_mb4", "op": "eq", "value": "café"}) == [1]
    for value in ("Дракон", EMOJI):
        code, error = outcome(latin1_postgres, query([{"column": "text_mb4", "op": "eq", "value": value}]))
        assert (code, error["details"]) == ("invalid_input", {"field": "filters", "database": "latin"})
    assert captures(latin1_postgres) != []


UNICODE_DIGITS = [
    pytest.param("chance", "eq", "\uff11\uff12.\uff15", id="decimal-fullwidth"),  # Decimal reads it as 12.5
    pytest.param("chance", "lt", "1\u0662.5", id="decimal-arabic-indic"),
    pytest.param("chance", "eq", "12.5e\uff10", id="decimal-fullwidth-exponent"),
    pytest.param("ratio", "eq", "\uff11.5", id="float-fullwidth"),
    pytest.param("created_at", "eq", "\uff12\uff10\uff12\uff14-01-02", id="datetime-fullwidth"),
    pytest.param("created_at", "lt", "2024-01-02T12:30:4\u0665", id="datetime-arabic-indic"),
]


@pytest.mark.parametrize(("column", "op", "value"), UNICODE_DIGITS)
def test_digits_other_than_ascii_are_refused_on_every_engine(texts: ResearchService, column: str, op: str,
                                                             value: str) -> None:
    """Decimal reads fullwidth digits, SQLite would be given the text as written: refused everywhere alike,
    never a false absence on one engine and an answer on another."""
    table = "creature_template" if column == "created_at" else "broadcast_text"
    request = {"kind": "database.count", "table": table, "filters": [{"column": column, "op": op, "value": value}]}
    assert refused(texts, request) == {"field": "filters.0.value"}
    assert captures(texts) == []


# --- 4. the operator as seed 003 spells it (issue 9 item 13) -------------------------------------------------

SEED_QUERY = ('{"kind":"database.rows","table":"creature_template","columns":["entry","name"],"filters":[{"column":'
              '"name","operator":"contains","value":"Wolpertinger"}],"offset":0,"limit":10}')
"""Seed 003's example, character for character."""


def test_the_seeds_example_query_runs(texts: ResearchService) -> None:
    answer = texts.query(json.loads(SEED_QUERY))["result"]
    assert (answer["rows"], answer["complete_filtered_rows"]) == ([], True)
    assert answer["filters"] == [{"column": "name", "operator": "contains", "value": "Wolpertinger"}]


def test_operator_and_op_mean_the_same(texts: ResearchService) -> None:
    for spelling in ("op", "operator"):
        request = {"kind": "database.count", "table": "creature_template",
                   "filters": [{"column": "name", spelling: "contains", "value": "Hog"},
                               {"column": "entry", spelling: "in", "value": [1, 2]}]}
        assert texts.query(request)["result"]["count"] == 1


@pytest.mark.parametrize("spellings", [{"op": "eq", "operator": "eq"}, {"op": "eq", "operator": "ne"}, {}],
                         ids=["both-same", "both-different", "neither"])
def test_both_spellings_or_neither_is_invalid_input_naming_the_filter(texts: ResearchService,
                                                                      spellings: dict[str, str]) -> None:
    request = {"kind": "database.rows", "table": "creature_template",
               "filters": [{"column": "entry", "op": "ge", "value": 1}, {"column": "entry", "value": 1, **spellings}]}
    assert refused(texts, request) == {"field": "filters.1", "rule": "oneOf"}
    with pytest.raises(InvalidInput) as caught:  # and below the schema, the statement builder says the same
        texts._databases.run(request)
    assert caught.value.details == {"field": "filters.1.op"}
    assert captures(texts) == []


def test_the_cli_runs_the_seeds_example(world_server: WorldServer, tmp_path: Path) -> None:
    config = write_config(tmp_path / "conf" / "research.toml", databases=[game.database_entry(world_server)])
    path = tmp_path / "query.json"
    path.write_text(SEED_QUERY, encoding="utf-8")
    run = Cli(Settings(data_dir=tmp_path / "data"))
    run.env = game.password_environ(world_server)
    printed = run.json("research", "query", "--config", str(config), "--query", str(path))
    assert printed["result"]["rows"] == []
    assert printed["result"]["complete_filtered_rows"] is True


# --- 5. values whose type the answer does not know on its own ------------------------------------------------

POSTGRES_ARRAYS = [
    "CREATE TABLE arrays (id int PRIMARY KEY, nums numeric[], days date[], moments timestamptz[], floats float8[], "
    "blobs bytea[], grid numeric[][], doc json, tree jsonb)",
    "SET TIME ZONE 'UTC'",
    "INSERT INTO arrays VALUES (1, '{12345678901234567890.12,NULL,-0.5}', '{2024-01-31,1999-12-31}', "
    "'{2024-01-31 12:30:00+00}', '{NaN,Infinity,-Infinity,1.5}', '{\\\\x00ff}', '{{1.10,2},{3,4}}', "
    "'{\"big\": 1e400, \"list\": [1, 2.5]}', '{\"d\": 1.50, \"n\": null}')",
]


@pytest.mark.postgres
@pytest.mark.parametrize("world_server", ["sqlite"], indirect=True)  # the world itself is not used here
def test_postgresql_arrays_come_back_element_by_element_as_scalars_do(tmp_path: Path) -> None:
    """Each element as the same value alone would be: exact decimals, ISO dates, NaN and infinities as text,
    bytes as base64; the whole array (or document) as canonical JSON text."""
    with scratch_database("postgresql", tmp_path, POSTGRES_ARRAYS, ["arrays"]) as service:
        answer = service.query({"kind": "database.rows", "table": "arrays"})["result"]
    assert [json.loads(cell) for cell in answer["rows"][0][1:]] == [
        ["12345678901234567890.12", None, "-0.5"], ["2024-01-31", "1999-12-31"], ["2024-01-31T12:30:00+00:00"],
        ["nan", "inf", "-inf", 1.5], [{"base64": "AP8=", "bytes": 2}], [["1.10", "2"], ["3", "4"]],
        {"big": "inf", "list": [1, 2.5]}, {"d": 1.5, "n": None}]
    assert answer["complete_filtered_rows"] is True


@pytest.fixture
def sqlite_scratch(tmp_path: Path) -> Iterator[ResearchService]:
    """Text SQLite kept that is not UTF-8, and columns of types no affinity rule of SQLite names."""
    statements = [
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
        "INSERT INTO notes VALUES (1, 'fine'), (2, CAST(X'C3' AS TEXT)), (3, CAST(X'41C328' AS TEXT)), "
        "(4, CAST(X'" + "41" * 30 + "FF' AS TEXT))",
        "CREATE TABLE typed (id INTEGER PRIMARY KEY, ref UUID, meta JSON, price NUMERIC, exact DECIMAL(10,2))",
        "INSERT INTO typed VALUES (1, '0b6d1c1e-7f0e-4a43-9f5a-8ad0e1e0a001', '{\"k\":\"v\"}', 1.5, 2.25), "
        "(2, '0b6d1c1e-7f0e-4a43-9f5a-8ad0e1e0a002', '[1]', 7, 8)",
    ]
    with scratch_database("sqlite", tmp_path, statements, ["notes", "typed"], max_value_length=16) as service:
        yield service


@pytest.mark.parametrize("world_server", ["sqlite"], indirect=True)  # the world itself is not used here
def test_sqlite_text_that_is_not_utf8_is_shown_and_marked_not_a_failure(sqlite_scratch: ResearchService) -> None:
    """One stored value must not fail every page that holds it (research_unavailable blocks the session)."""
    answer = sqlite_scratch.query({"kind": "database.rows", "table": "notes"})["result"]
    assert answer["rows"] == [
        [1, "fine"], [2, {"text": "\ufffd", "not_utf8": True}], [3, {"text": "A\ufffd(", "not_utf8": True}],
        [4, {"text": "A" * 16, "chars": 31, "truncated": True, "not_utf8": True}]]
    assert (answer["truncated_values"], answer["complete_filtered_rows"]) == (1, True)
    only = sqlite_scratch.query({"kind": "database.rows", "table": "notes", "columns": ["body"],
                                 "filters": [{"column": "id", "op": "eq", "value": 2}]})["result"]
    assert only["rows"] == [[{"text": "\ufffd", "not_utf8": True}]]


@pytest.mark.parametrize("world_server", ["sqlite"], indirect=True)  # the world itself is not used here
def test_a_sqlite_type_no_affinity_rule_names_is_of_no_kind_not_a_decimal(sqlite_scratch: ResearchService) -> None:
    schema = sqlite_scratch.query({"kind": "database.schema", "table": "typed"})["result"]
    assert {column["name"]: column["kind"] for column in schema["columns"]} == {
        "id": "integer", "ref": "other", "meta": "other", "price": "decimal", "exact": "decimal"}

    def ids(*filters: dict[str, Any]) -> list[int]:
        answer = sqlite_scratch.query({"kind": "database.rows", "table": "typed", "columns": ["id"],
                                       "filters": list(filters)})["result"]
        return [row[0] for row in answer["rows"]]

    assert ids({"column": "ref", "op": "eq", "value": "0b6d1c1e-7f0e-4a43-9f5a-8ad0e1e0a002"}) == [2]
    assert ids({"column": "meta", "op": "in", "value": ["[1]", "x"]}) == [2]
    assert ids({"column": "price", "op": "lt", "value": "2"}) == [1]  # NUMERIC and DECIMAL stay decimal
    assert ids({"column": "exact", "op": "ge", "value": 8}) == [2]
    ordered = sqlite_scratch.query({"kind": "database.rows", "table": "typed", "columns": ["id"],
                                    "order_by": [{"column": "ref", "direction": "desc"}]})["result"]
    assert [row[0] for row in ordered["rows"]] == [2, 1]  # SQLite orders values of any type
