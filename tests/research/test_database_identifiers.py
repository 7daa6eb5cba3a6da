"""Names from the database's own catalogue, on SQLite, MariaDB and PostgreSQL.

A request's identifiers are checked against the IDENTIFIER rule; the catalogue's are checked the same
way, because they reach statements too (the columns of a page without ``columns``, the tie-breakers
of its order). A column whose name an agent could not send is left out of everything agents see:
the schema, the default columns, the primary key and the order. So a column named like SQL (quotes,
a subquery) never becomes part of a statement. And every driver doubles its quote character inside
a quoted name, so that even a name that did pass unchecked would stay one identifier.

Each test builds its own small database (a SQLite file, or a fresh database on the test servers,
read with the admin login) and drops it afterwards.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from psycopg import sql

from armarius.research.config import load_research_config
from armarius.research.dbdrivers import Driver
from armarius.research.service import ResearchService
from tests.conftest import service_missing
from tests.research import world as game
from tests.research.repos import write_config
from tests.research.session_path import SessionPath
from tests.research.test_database_hostile import captures, outcome

DIALECTS = ["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb),
            pytest.param("postgresql", marks=pytest.mark.postgres)]


# --- a scratch database on each engine ------------------------------------------------------------------

Built = tuple[dict[str, Any], str, Callable[[], None]]
"""A scratch database's entry in research.toml, its password and what drops it."""


def _sqlite_scratch(name: str, folder: Path, statements: Sequence[str]) -> Built:
    path = folder / f"{name}.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        for statement in statements:
            connection.execute(statement)
    return {"path": str(path)}, "", lambda: None


def _mariadb_scratch(name: str, _folder: Path, statements: Sequence[str]) -> Built:
    admin = game._mariadb_admin()
    try:
        root = pymysql.connect(**admin, charset="utf8mb4", autocommit=True)
    except pymysql.err.OperationalError as error:
        service_missing("MariaDB", error)
    with root.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        cursor.execute(f"USE `{name}`")
        for statement in statements:
            cursor.execute(statement)

    def drop() -> None:
        with root.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        root.close()

    entry = {"host": admin["host"], "port": admin["port"], "database": name, "user": admin["user"]}
    return entry, str(admin["password"]), drop


def _postgres_scratch(name: str, _folder: Path, statements: Sequence[str]) -> Built:
    admin = psycopg.conninfo.conninfo_to_dict(game.PG_ADMIN_URL)
    database = sql.Identifier(name)
    try:
        root = psycopg.connect(game.PG_ADMIN_URL, autocommit=True)
    except psycopg.OperationalError as error:
        service_missing("PostgreSQL", error)
    with root:
        root.execute(sql.SQL("CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0").format(database))
    with psycopg.connect(game.PG_ADMIN_URL, dbname=name, autocommit=True) as owner:
        for statement in statements:
            owner.execute(statement.encode("utf-8"))  # bytes: the text goes as written, unformatted

    def drop() -> None:
        with psycopg.connect(game.PG_ADMIN_URL, autocommit=True) as again:
            again.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))

    entry = {"host": admin.get("host") or "127.0.0.1", "port": int(admin.get("port") or 5432), "database": name,
             "user": admin.get("user") or "postgres"}
    return entry, str(admin.get("password") or ""), drop


_BUILDERS: dict[str, Callable[[str, Path, Sequence[str]], Built]] = {
    "sqlite": _sqlite_scratch, "mariadb": _mariadb_scratch, "postgresql": _postgres_scratch}


@contextmanager
def scratch_database(dialect: str, folder: Path, statements: Sequence[str], tables: Sequence[str],
                     **entry: Any) -> Iterator[ResearchService]:
    """A research service over a new database ``scratch`` on ``dialect`` built by ``statements`` (as the
    owner/admin, who also reads it), allowlisting ``tables``; the database is dropped on exit."""
    where, password, drop = _BUILDERS[dialect](f"armarius_scratch_{secrets.token_hex(4)}", folder, statements)
    try:
        config = {"name": "scratch", "dialect": dialect, "snapshot": "scratch-1", "tables": list(tables), **where}
        if dialect != "sqlite":
            config["password_env"] = game.PASSWORD_VARIABLE
        path = write_config(folder / "research.toml", databases=[config | entry])
        research = ResearchService(load_research_config(path, {game.PASSWORD_VARIABLE: password}))
        service: Any = SessionPath(research, folder)
        try:
            yield service
        finally:
            service.close()
    finally:
        drop()


def scratch_driver(service: ResearchService) -> Driver:
    return service._databases._drivers["scratch"]


def quoted(dialect: str, name: str) -> str:
    """``name`` quoted for the test's own DDL (the quote character doubled)."""
    mark = "`" if dialect == "mariadb" else '"'
    return mark + name.replace(mark, mark * 2) + mark


def hostile_name(dialect: str) -> str:
    """A column name that, pasted between the dialect's quotes, ends the name and runs a subquery: a division
    by zero unless a hidden table or role says otherwise (a boolean oracle) had it reached a statement."""
    mark = "`" if dialect == "mariadb" else '"'
    probe = {"sqlite": "(SELECT 1/0 WHERE (SELECT pw FROM secret) LIKE 'h%')",
             "mariadb": "(SELECT 1/count(*) FROM secret WHERE pw LIKE 'x%')",
             "postgresql": "(SELECT 1/count(*) FROM pg_roles WHERE rolname='x')"}[dialect]
    return f"id{mark},{probe},{mark}id"


def catalogue_statements(dialect: str) -> list[str]:
    """``loose`` (no primary key; a hostile and a spaced column), ``keyed`` (its primary key is a column no
    agent could name, so no key is visible), ``opaque`` (no column an agent could name) and ``secret``."""
    hostile, spaced, key = quoted(dialect, hostile_name(dialect)), quoted(dialect, "two words"), quoted(dialect, "k-ey")
    return [
        "CREATE TABLE secret (pw VARCHAR(20))",
        "INSERT INTO secret VALUES ('hunter2')",
        f"CREATE TABLE loose (id INT, label VARCHAR(20), {hostile} INT, {spaced} VARCHAR(20))",
        "INSERT INTO loose VALUES (3, 'c', 1, 'x'), (1, 'a', 1, 'y'), (2, 'b', 1, 'z'), (1, 'z', 1, 'w')",
        f"CREATE TABLE keyed ({key} INT PRIMARY KEY, n INT, {hostile} INT)",
        f"CREATE INDEX keyed_both ON keyed ({key}, n)",
        "CREATE INDEX keyed_n ON keyed (n)",
        "INSERT INTO keyed VALUES (10, 2, 0), (20, 1, 0), (30, 2, 0)",
        f"CREATE TABLE opaque ({spaced} INT, {hostile} INT)",
        "INSERT INTO opaque VALUES (1, 1), (2, 2)",
    ]


@pytest.fixture(params=DIALECTS)
def catalogue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, ResearchService]]:
    dialect = request.param
    with scratch_database(dialect, tmp_path, catalogue_statements(dialect), ["loose", "keyed", "opaque"]) as service:
        yield dialect, service


def statements_of(service: ResearchService, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the scratch driver runs from now on."""
    driver, seen = scratch_driver(service), []
    run = driver.fetch_unchecked

    def spy(statement: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        seen.append(statement)
        return run(statement, parameters)

    monkeypatch.setattr(driver, "fetch_unchecked", spy)
    return seen


def result(service: ResearchService, query: dict[str, Any]) -> dict[str, Any]:
    code, answer = outcome(service, query)
    assert code == "ok", answer
    return dict(answer["result"])


# --- 1. catalogue names that are not identifiers -------------------------------------------------------


def test_a_catalogue_name_no_agent_could_send_is_left_out_of_the_schema(
        catalogue: tuple[str, ResearchService]) -> None:
    _dialect, service = catalogue
    loose = result(service, {"kind": "database.schema", "table": "loose"})
    assert [column["name"] for column in loose["columns"]] == ["id", "label"]
    keyed = result(service, {"kind": "database.schema", "table": "keyed"})
    assert [column["name"] for column in keyed["columns"]] == ["n"]
    assert keyed["primary_key"] == []  # its key is a column no agent can name: no key for paging
    assert [index["columns"] for index in keyed["indexes"]] == [["n"]]
    assert result(service, {"kind": "database.schema", "table": "opaque"})["columns"] == []


def test_rows_never_show_or_order_by_a_left_out_column(catalogue: tuple[str, ResearchService],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _dialect, service = catalogue
    seen = statements_of(service, monkeypatch)
    answer = result(service, {"kind": "database.rows", "table": "loose"})
    assert answer["columns"] == ["id", "label"]
    assert answer["order_by"] == [{"column": "id", "direction": "asc"}, {"column": "label", "direction": "asc"}]
    assert answer["rows"] == [[1, "a"], [1, "z"], [2, "b"], [3, "c"]]
    assert answer["complete_filtered_rows"] is True
    chosen = result(service, {"kind": "database.rows", "table": "loose", "columns": ["label"]})
    assert chosen["rows"] == [["a"], ["z"], ["b"], ["c"]]  # still ordered by id, label: the visible tie-breakers
    keyed = result(service, {"kind": "database.rows", "table": "keyed", "order_by": [{"column": "n"}]})
    assert keyed["order_by"] == [{"column": "n", "direction": "asc"}]
    assert keyed["rows"] == [[1], [2], [2]]
    assert seen
    assert not [statement for statement in seen for hidden in ("secret", "pg_roles", "two words", "k-ey")
                if hidden in statement]
    assert captures(service)


def test_pages_of_a_table_whose_key_is_left_out_stay_deterministic(catalogue: tuple[str, ResearchService]) -> None:
    _dialect, service = catalogue
    pages, offset = [], 0
    while offset is not None:
        page = result(service, {"kind": "database.rows", "table": "loose", "limit": 1, "offset": offset})
        pages += page["rows"]
        offset = page["next_offset"]
    assert pages == [[1, "a"], [1, "z"], [2, "b"], [3, "c"]]


@pytest.mark.parametrize("where", ["columns", "filter", "order"])
def test_a_left_out_column_cannot_be_named(catalogue: tuple[str, ResearchService], where: str) -> None:
    dialect, service = catalogue
    for name in (hostile_name(dialect), "two words"):
        query: dict[str, Any] = {"kind": "database.rows", "table": "loose"}
        field = {"columns": "columns.0", "filter": "filters.0.column", "order": "order_by.0.column"}[where]
        if where == "columns":
            query["columns"] = [name]
        elif where == "filter":
            query["filters"] = [{"column": name, "op": "eq", "value": 1}]
        else:
            query["order_by"] = [{"column": name}]
        code, error = outcome(service, query)
        assert (code, error["details"]) == ("invalid_input", {"field": field})
        assert name not in error["message"]


def test_a_table_without_a_column_agents_may_read_is_refused_clearly(catalogue: tuple[str, ResearchService]) -> None:
    _dialect, service = catalogue
    code, error = outcome(service, {"kind": "database.rows", "table": "opaque"})
    assert (code, error["details"]) == ("invalid_input", {"field": "table"})
    assert result(service, {"kind": "database.count", "table": "opaque"})["count"] == 2


UNORDERED = {"sqlite": "ref UUID", "mariadb": "spot POINT", "postgresql": "doc json"}
"""A column whose kind has no order on the engine, except SQLite, which orders any value."""
UNORDERED_ROWS = {"sqlite": "('b'), ('a')", "mariadb": "(POINT(1, 2)), (POINT(0, 0))",
                  "postgresql": "('{\"b\": 1}'), ('{\"a\": 1}')"}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_table_with_nothing_to_order_by_is_refused_not_a_provider_failure(dialect: str, tmp_path: Path) -> None:
    statements = [f"CREATE TABLE bag ({UNORDERED[dialect]})", f"INSERT INTO bag VALUES {UNORDERED_ROWS[dialect]}"]
    with scratch_database(dialect, tmp_path, statements, ["bag"]) as service:
        code, answer = outcome(service, {"kind": "database.rows", "table": "bag"})
        if dialect == "sqlite":
            assert (code, answer["result"]["rows"]) == ("ok", [["a"], ["b"]])
            return
        assert (code, answer["details"]) == ("invalid_input", {"field": "table"})
        assert result(service, {"kind": "database.count", "table": "bag"})["count"] == 2


# --- 2. quoting -------------------------------------------------------------------------------------------

QUOTE_NAMES = {"sqlite": 'we"ird', "mariadb": "we`ird", "postgresql": 'we"ird'}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_driver_doubles_its_quote_character(dialect: str, tmp_path: Path) -> None:
    name = QUOTE_NAMES[dialect]
    statements = [f"CREATE TABLE plain (id INT, {quoted(dialect, name)} INT)", "INSERT INTO plain VALUES (1, 42)"]
    with scratch_database(dialect, tmp_path, statements, ["plain"]) as service:
        driver = scratch_driver(service)
        assert driver.quote(name) == quoted(dialect, name)
        assert driver.fetch(f"SELECT {driver.quote(name)} FROM {driver.table_ref('plain')}") == [(42,)]
