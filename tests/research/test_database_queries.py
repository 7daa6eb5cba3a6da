"""Database research on the real engines: tables, schema, rows and counts of the game world, with
exact values, literal filters, stable paging, stated coverage and captures with a database origin."""

from __future__ import annotations

import base64
import json
import sqlite3
from dataclasses import replace
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.auth.permissions import Role
from armarius.config import Settings
from armarius.errors import ArmariusError
from armarius.research.captures import verify_capture
from armarius.research.config import load_research_config
from armarius.research.database import ABSENCE_NOTE
from armarius.research.service import ResearchService
from tests.cli.test_cli import Cli
from tests.helpers import OwnerSQL, agent_of, make_team
from tests.research import world as game
from tests.research.conftest import open_world_service
from tests.research.repos import build_repo, open_service, write_config
from tests.research.session_path import SessionPath
from tests.research.world import WorldServer

CREATURES = {row["entry"]: row for row in game.CREATURES}


def as_json(value: Any, dialect: str) -> Any:
    """What Armarius answers for a fixture value on ``dialect`` (SQLite keeps what it stored)."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii"), "bytes": len(value)}
    if isinstance(value, Decimal):
        return float(value) if dialect == "sqlite" else format(value, "f")
    if isinstance(value, datetime | date):
        return str(value) if dialect == "sqlite" else value.isoformat()
    return value


def rows_of(service: ResearchService, table: str, **query: Any) -> dict[str, Any]:
    result: dict[str, Any] = service.query({"kind": "database.rows", "table": table, **query})["result"]
    return result


def entries(service: ResearchService, *filters: dict[str, Any], **query: Any) -> list[int]:
    result = rows_of(service, "creature_template", columns=["entry"], filters=list(filters), **query)
    return [row[0] for row in result["rows"]]


def where(predicate: Any) -> list[int]:
    return sorted(entry for entry, row in CREATURES.items() if predicate(row))


def refusal(service: ResearchService, query: dict[str, Any]) -> ArmariusError:
    with pytest.raises(ArmariusError) as caught:
        service.query(query)
    return caught.value


# --- tables and schema ----------------------------------------------------------------------------------------


def test_tables_lists_the_allowlisted_tables_the_database_has(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, tables=[*game.ALLOWLISTED, "no_such_table"])
    answer = service.query({"kind": "database.tables"})
    assert answer["origin"] == {"kind": "database", "database": "world", "dialect": world_server.dialect,
                                "snapshot": "world-1"}
    assert answer["result"]["databases"] == [{
        "database": "world", "dialect": world_server.dialect, "snapshot": "world-1",
        "tables": list(game.ALLOWLISTED), "missing": ["no_such_table"],
    }]
    service.close()


def test_schema_reports_the_real_columns_and_keys(world: ResearchService, world_server: WorldServer) -> None:
    creature = world.query({"kind": "database.schema", "table": "creature_template"})["result"]
    columns = {column["name"]: column for column in creature["columns"]}
    assert list(columns) == list(game.COLUMNS["creature_template"])
    assert creature["primary_key"] == ["entry"]
    assert {name: column["kind"] for name, column in columns.items()} == {
        "entry": "integer", "name": "text", "subname": "text", "minlevel": "integer", "maxlevel": "integer",
        "faction": "integer", "speed_walk": "float", "gold_multiplier": "decimal", "created_at": "temporal",
        "icon": "bytes", "script_name": "text",
    }
    assert columns["subname"]["nullable"] is True
    assert columns["name"]["nullable"] is False
    assert "31" in columns["gold_multiplier"]["type"]
    scripts = world.query({"kind": "database.schema", "table": "smart_scripts"})["result"]
    assert scripts["primary_key"] == ["entryorguid", "source_type", "id", "link"]
    quests = world.query({"kind": "database.schema", "table": "quest_template"})["result"]
    assert quests["foreign_keys"] == [{"columns": ["reward_item"], "table": "item_template", "references": ["entry"]}]
    indexed = {(tuple(index["columns"]), index["unique"]) for index in creature["indexes"]}
    assert indexed == {(("entry",), True), (("faction",), False), (("minlevel",), False),
                       (("faction", "minlevel"), False)}
    assert [(index["columns"], index["unique"]) for index in scripts["indexes"]] == [
        (["entryorguid", "source_type", "id", "link"], True)]


def test_a_column_allowlist_hides_the_other_columns_everywhere(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, columns={"item_template": ["entry", "name"]})
    schema = service.query({"kind": "database.schema", "table": "item_template"})["result"]
    assert [column["name"] for column in schema["columns"]] == ["entry", "name"]
    creatures = open_world_service(tmp_path / "hidden", world_server, columns={"creature_template": ["entry", "name",
                                                                                                     "faction"]})
    indexes = creatures.query({"kind": "database.schema", "table": "creature_template"})["result"]["indexes"]
    assert sorted(index["columns"] for index in indexes) == [["entry"], ["faction"]]  # none on a hidden column
    creatures.close()
    assert rows_of(service, "item_template", limit=1)["columns"] == ["entry", "name"]
    for query in ({"columns": ["description"]}, {"filters": [{"column": "quality", "op": "eq", "value": 1}]},
                  {"order_by": [{"column": "buy_price"}]}):
        assert refusal(service, {"kind": "database.rows", "table": "item_template", **query}).code == "not_found"
    quests = service.query({"kind": "database.schema", "table": "quest_template"})["result"]
    assert quests["foreign_keys"] == [{"columns": ["reward_item"], "table": "item_template", "references": ["entry"]}]
    service.close()


def test_a_table_outside_the_allowlist_is_not_there(world: ResearchService) -> None:
    for table in ("account", "canary", "nothing_here"):
        for kind in ("database.schema", "database.rows", "database.count"):
            error = refusal(world, {"kind": kind, "table": table})
            assert error.code == "not_found"
            assert "account" not in world.query({"kind": "database.tables"})["result"]["databases"][0]["tables"]


# --- values ---------------------------------------------------------------------------------------------------


def test_rows_come_back_with_exact_values(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, max_value_length=10_000, max_rows=1000)
    result = rows_of(service, "creature_template")
    assert result["columns"] == list(game.COLUMNS["creature_template"])
    expected = [[as_json(row[column], world_server.dialect) for column in result["columns"]]
                for row in game.CREATURES]
    assert result["rows"] == expected
    assert result["complete_filtered_rows"] is True
    assert result["next_offset"] is None
    assert result["truncated_values"] == 0
    for table in ("item_template", "quest_template", "smart_scripts"):
        answer = rows_of(service, table, limit=1000)
        assert answer["rows"] == [[as_json(value, world_server.dialect) for value in row]
                                  for row in game.expected_tuples(table)]
    service.close()


def test_the_big_decimal_comes_back_exactly(world: ResearchService, world_server: WorldServer) -> None:
    found = rows_of(world, "creature_template", columns=["entry", "gold_multiplier"],
                    filters=[{"column": "gold_multiplier", "op": "ge", "value": game.WORLD_DECIMAL_EXACT}])
    if world_server.dialect == "sqlite":
        # SQLite has no DECIMAL: NUMERIC affinity stored the value as a REAL, and that is what it has.
        assert found["rows"] == [[1, float(Decimal(game.WORLD_DECIMAL_EXACT))]]
    else:
        assert found["rows"] == [[1, game.WORLD_DECIMAL_EXACT]]
        assert entries(world, {"column": "gold_multiplier", "op": "gt", "value": "12345678901234567890.11"}) == [1]
        assert entries(world, {"column": "gold_multiplier", "op": "gt", "value": "12345678901234567890.12"}) == []


def test_long_values_are_cut_and_marked(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, max_value_length=100)
    item = rows_of(service, "item_template", columns=["entry", "description"],
                   filters=[{"column": "entry", "op": "eq", "value": 5}])
    assert item["rows"] == [[5, {"text": game.LONG_DESCRIPTION[:100], "chars": 5000, "truncated": True}]]
    assert item["truncated_values"] == 1
    assert item["complete_filtered_rows"] is True  # the rows are all there; a value was cut, and says so
    icon = rows_of(service, "creature_template", columns=["icon"],
                   filters=[{"column": "entry", "op": "eq", "value": 9}])
    assert icon["rows"] == [[{"base64": base64.b64encode(game.ICON_LARGE[:100]).decode(), "bytes": 5000,
                              "truncated": True}]]
    service.close()


# --- filters --------------------------------------------------------------------------------------------------


def test_each_comparison_filters_like_the_data_says(world: ResearchService) -> None:
    def check(column: str, op: str, value: Any, predicate: Any) -> None:
        assert entries(world, {"column": column, "op": op, "value": value}) == where(predicate), (column, op)

    check("faction", "eq", 14, lambda row: row["faction"] == 14)
    check("faction", "ne", 14, lambda row: row["faction"] != 14)
    check("minlevel", "lt", 13, lambda row: row["minlevel"] < 13)
    check("minlevel", "le", 13, lambda row: row["minlevel"] <= 13)
    check("minlevel", "gt", 17, lambda row: row["minlevel"] > 17)
    check("minlevel", "ge", 17, lambda row: row["minlevel"] >= 17)
    check("faction", "in", [7, 16], lambda row: row["faction"] in (7, 16))
    check("name", "eq", "Ragnaros der Feuerfürst 🔥", lambda row: row["entry"] == 2)
    check("name", "eq", "O'Brien \"the\" \\ Bold", lambda row: row["entry"] == 5)
    check("name", "in", ["Дракон", "Line1\nLine2"], lambda row: row["entry"] in (3, 8))
    check("subname", "eq", None, lambda row: row["subname"] is None)
    check("subname", "ne", None, lambda row: row["subname"] is not None)
    # ne is SQL's <>: a NULL is neither equal nor unequal, so it is not returned.
    check("subname", "ne", "Subname 2", lambda row: row["subname"] not in (None, "Subname 2"))
    check("speed_walk", "gt", 1.25, lambda row: row["speed_walk"] > 1.25)
    check("gold_multiplier", "eq", 4.5, lambda row: row["entry"] == 4)
    check("gold_multiplier", "lt", "10.5", lambda row: row["gold_multiplier"] < Decimal("10.5"))
    check("created_at", "ge", "2024-01-20", lambda row: row["created_at"] is not None
          and row["created_at"].date() >= date(2024, 1, 20))
    check("icon", "eq", {"base64": base64.b64encode(game.ICON_ASCII).decode()}, lambda row: row["entry"] == 10)


def test_filters_join_with_and(world: ResearchService) -> None:
    filters = [{"column": "faction", "op": "eq", "value": 14}, {"column": "minlevel", "op": "ge", "value": 15},
               {"column": "subname", "op": "ne", "value": None}]
    assert entries(world, *filters) == where(lambda row: row["faction"] == 14 and row["minlevel"] >= 15
                                             and row["subname"] is not None)


def test_contains_matches_wildcards_and_the_escape_character_literally(world: ResearchService) -> None:
    assert entries(world, {"column": "name", "op": "contains", "value": "%"}) == [4, 6]
    assert entries(world, {"column": "name", "op": "contains", "value": "_"}) == [4, 7]
    assert entries(world, {"column": "name", "op": "contains", "value": "0% P"}) == [4]
    assert entries(world, {"column": "name", "op": "contains", "value": "r_s"}) == [7]
    assert entries(world, {"column": "name", "op": "contains", "value": "!"}) == []
    assert entries(world, {"column": "name", "op": "contains", "value": "\\"}) == [5]
    assert entries(world, {"column": "name", "op": "contains", "value": "reature 5"}) == where(
        lambda row: row["name"].startswith("Creature 5"))
    comments = rows_of(world, "smart_scripts", columns=["entryorguid"],
                       filters=[{"column": "comment", "op": "contains", "value": "(100% chance)"}])
    assert comments["rows"] == [[1]]


def test_quest_dates_and_big_integers(world: ResearchService) -> None:
    found = rows_of(world, "quest_template", columns=["id", "reward_money", "starts_at"],
                    filters=[{"column": "starts_at", "op": "eq", "value": "2024-02-03"}])
    assert found["rows"] == [[2, 2000, "2024-02-03"], [30, 30000, "2024-02-03"]]
    big = rows_of(world, "quest_template", columns=["id", "reward_money"],
                  filters=[{"column": "reward_money", "op": "gt", "value": 2**32}])
    assert big["rows"] == [[1, game.BIG_REWARD]]


# --- paging, order, limits and coverage ---------------------------------------------------------------------


def test_pages_follow_the_order_and_never_overlap(world: ResearchService) -> None:
    seen: list[int] = []
    offset: int | None = 0
    pages = []
    while offset is not None:
        page = rows_of(world, "creature_template", columns=["entry"], filters=[
            {"column": "faction", "op": "eq", "value": 14}], order_by=[{"column": "minlevel", "direction": "desc"}],
            limit=4, offset=offset)
        pages.append(page)
        seen += [row[0] for row in page["rows"]]
        offset = page["next_offset"]
    expected = sorted(where(lambda row: row["faction"] == 14), key=lambda entry: (-CREATURES[entry]["minlevel"], entry))
    assert seen == expected
    assert [page["complete_filtered_rows"] for page in pages] == [False] * len(pages)
    assert pages[0]["order_by"] == [{"column": "minlevel", "direction": "desc"},
                                    {"column": "entry", "direction": "asc"}]
    whole = rows_of(world, "creature_template", columns=["entry"], filters=[
        {"column": "faction", "op": "eq", "value": 14}], order_by=[{"column": "minlevel", "direction": "desc"}])
    assert [row[0] for row in whole["rows"]] == expected
    assert whole["complete_filtered_rows"] is True


def test_the_configured_row_limit_caps_every_page(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, max_rows=5)
    page = rows_of(service, "creature_template", columns=["entry"], limit=50)
    assert page["limit"] == 5
    assert [row[0] for row in page["rows"]] == [1, 2, 3, 4, 5]
    assert page["next_offset"] == 5
    assert page["complete_filtered_rows"] is False
    service.close()


def test_the_byte_limit_cuts_the_page_and_pages_on(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server, max_bytes=1024)
    page = rows_of(service, "item_template", columns=["entry", "description"], limit=100)
    assert 0 < len(page["rows"]) < 40
    assert len(json.dumps(page["rows"], ensure_ascii=False, separators=(",", ":")).encode()) <= 1024 or len(
        page["rows"]) == 1
    assert page["next_offset"] == len(page["rows"])
    assert page["complete_filtered_rows"] is False
    service.close()


def test_only_a_complete_empty_answer_is_evidence_of_absence(world: ResearchService) -> None:
    nothing = [{"column": "name", "op": "eq", "value": "Nobody"}]
    empty = rows_of(world, "creature_template", filters=nothing)
    assert empty["rows"] == []
    assert empty["complete_filtered_rows"] is True
    assert empty["absence"] == ABSENCE_NOTE
    beyond = rows_of(world, "creature_template", offset=100)
    assert beyond["rows"] == []
    assert beyond["complete_filtered_rows"] is False
    assert "absence" not in beyond
    counted = world.query({"kind": "database.count", "table": "creature_template", "filters": nothing})["result"]
    assert counted["count"] == 0
    assert counted["absence"] == ABSENCE_NOTE


def test_count_counts_the_whole_predicate(world: ResearchService) -> None:
    filters = [{"column": "faction", "op": "in", "value": [14, 35]}, {"column": "minlevel", "op": "ge", "value": 15}]
    counted = world.query({"kind": "database.count", "table": "creature_template", "filters": filters})["result"]
    assert counted == {"kind": "database.count", "database": "world", "table": "creature_template",
                       "filters": filters, "count": len(entries(world, *filters)), "complete": True}
    assert world.query({"kind": "database.count", "table": "smart_scripts"})["result"]["count"] == 120


# --- captures, the agent tool and the CLI ---------------------------------------------------------------------


def test_captures_name_the_database_and_snapshot_only(world: ResearchService, world_server: WorldServer) -> None:
    query = {"kind": "database.rows", "table": "creature_template", "columns": ["entry", "name"], "limit": 3}
    first, again = world.query(query), world.query(query)
    assert again["capture"] == first["capture"]
    files = list(world.evidence_dir.iterdir())
    assert [file.name for file in files] == [f"{first['capture']}.json"]
    assert verify_capture(files[0])
    document = json.loads(files[0].read_bytes())
    assert document["origin"] == {"kind": "database", "database": "world", "dialect": world_server.dialect,
                                  "snapshot": "world-1"}
    assert document["request"] == query
    assert document["result"] == first["result"]


@pytest.mark.anyio
async def test_agents_query_databases_through_the_tool(app: Armarius, world_server: WorldServer) -> None:
    write_config(app.settings.data_dir / "research.toml", databases=[game.database_entry(world_server)])
    application = open_app(replace(app.settings, research_config=Path("research.toml"),
                                   environ=game.password_environ(world_server)))
    try:
        team = make_team(application, "alpha", agent_role=Role.READER)
        async with agent_of(application, team.agent) as call:
            session = (await call("session_open", subject="How many items are there?"))["session"]
            answer = await call("project_query", session=session,
                                arguments={"kind": "database.count", "table": "item_template"})
            refused = await call("project_query", session=session,
                                 arguments={"kind": "database.rows", "table": "account"})
        assert answer["result"]["count"] == 40
        assert answer["origin"]["snapshot"] == "world-1"
        assert refused["error"] == "not_found"
        with OwnerSQL(application.settings) as sql:
            assert sql.count("captures") == 1
            [(subject, details)] = sql.rows("SELECT subject, details FROM audit_events "
                                            "WHERE action = 'research.query'")
        assert subject == "world"
        assert json.loads(details) == {"session": session, "kind": "database.count", "capture": answer["capture"],
                                       "evidence": 1, "snapshot": "world-1", "new": True}
    finally:
        application.close()


def test_the_cli_answers_a_database_query(world_server: WorldServer, tmp_path: Path) -> None:
    config = write_config(tmp_path / "conf" / "research.toml", databases=[game.database_entry(world_server)])
    query = tmp_path / "query.json"
    query.write_text(json.dumps({"kind": "database.rows", "table": "creature_template", "columns": ["entry", "name"],
                                 "filters": [{"column": "entry", "op": "eq", "value": 2}]}))
    run = Cli(Settings(data_dir=tmp_path / "data"))
    run.env = game.password_environ(world_server)
    printed = run.json("research", "query", "--config", str(config), "--query", str(query))
    assert printed["result"]["rows"] == [[2, "Ragnaros der Feuerfürst 🔥"]]
    assert verify_capture(tmp_path / "conf" / "evidence" / f"{printed['capture']}.json")
    query.write_text(json.dumps({"kind": "database.rows", "table": "account"}))
    refused = run("--json", "research", "query", "--config", str(config), "--query", str(query))
    assert refused.exit_code == 5
    assert json.loads(refused.stderr)["error"]["code"] == "not_found"


def unreachable_databases(tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    """A MariaDB port with nothing listening and a SQLite file (to be removed once the configuration is read)."""
    vanished = tmp_path / "vanished.sqlite"
    sqlite3.connect(vanished).close()
    return [{"name": "down", "dialect": "mariadb", "host": "127.0.0.1", "port": 1, "database": "world",
             "user": "reader", "password_env": game.PASSWORD_VARIABLE, "snapshot": "down-1",
             "tables": ["creature_template"]},
            {"name": "gone", "dialect": "sqlite", "path": str(vanished), "snapshot": "gone-1",
             "tables": ["creature_template"]}], vanished


def test_tables_of_every_database_lists_the_healthy_ones_and_marks_the_unreachable(world_server: WorldServer,
                                                                                   tmp_path: Path) -> None:
    (down, gone), vanished = unreachable_databases(tmp_path)
    path = write_config(tmp_path / "research.toml", databases=[down, game.database_entry(world_server), gone])
    service = SessionPath(ResearchService(load_research_config(path, game.password_environ(world_server))), tmp_path)
    vanished.unlink()
    try:
        answer = service.query({"kind": "database.tables"})
        result = answer["result"]
        assert [entry["database"] for entry in result["databases"]] == ["down", "world", "gone"]
        assert result["databases"][1]["tables"] == list(game.ALLOWLISTED)
        for entry, dialect in ((result["databases"][0], "mariadb"), (result["databases"][2], "sqlite")):
            assert set(entry) == {"database", "dialect", "snapshot", "unavailable"}  # no tables: nothing is known
            assert entry["dialect"] == dialect
            assert entry["unavailable"]["reason"] == "connect"
            assert entry["database"] in entry["unavailable"]["message"]
        assert (result["unavailable"], result["complete"]) == (["down", "gone"], False)
        assert [origin["database"] for origin in answer["origin"]["databases"]] == ["down", "world", "gone"]
        shown = json.dumps(answer)
        assert "127.0.0.1" not in shown
        assert str(vanished) not in shown
        assert verify_capture(service.evidence_dir / f"{answer['capture']}.json")
        # A query naming the unreachable database is still that database's failure: it blocks the session.
        named = refusal(service, {"kind": "database.tables", "database": "down"})
        assert (named.code, named.details["cause"]["code"]) == ("session_blocked", "research_unavailable")
        assert named.details["cause"]["details"] == {"database": "down", "reason": "connect"}
    finally:
        service.close()


def test_tables_of_every_database_fails_when_none_answers(tmp_path: Path) -> None:
    databases, vanished = unreachable_databases(tmp_path)
    path = write_config(tmp_path / "research.toml", databases=databases)
    service = ResearchService(load_research_config(path, {game.PASSWORD_VARIABLE: "x"}))
    vanished.unlink()
    try:
        error = refusal(service, {"kind": "database.tables"})
        assert (error.code, error.details) == ("research_unavailable", {"database": "down", "reason": "connect"})
    finally:
        service.close()


def test_dates_match_in_either_iso_form_and_offsets_are_never_dropped(world: ResearchService) -> None:
    noon = [entry for entry, row in CREATURES.items() if row["created_at"] == datetime(2024, 1, 3, 12, 30, 45)]
    assert entries(world, {"column": "created_at", "op": "eq", "value": "2024-01-03T12:30:45"}) == noon
    assert entries(world, {"column": "created_at", "op": "eq", "value": "2024-01-03 12:30:45"}) == noon
    assert entries(world, {"column": "created_at", "op": "in", "value": ["2024-01-03T12:30:45"]}) == noon
    assert entries(world, {"column": "created_at", "op": "lt", "value": "2024-01-03T12:30:46"}) == where(
        lambda row: row["created_at"] is not None and row["created_at"] < datetime(2024, 1, 3, 12, 30, 46))
    for value in ("2024-01-03T12:30:45+05:00", "2024-01-03T12:30:45Z", "20240103", "12:30:45", "2024-13-01",
                  "2024-01-03T25:00:00"):
        error = refusal(world, {"kind": "database.rows", "table": "creature_template",
                                "filters": [{"column": "created_at", "op": "eq", "value": value}]})
        assert error.code == "invalid_input", value
        assert error.details["field"] == "filters.0.value"
    dated = rows_of(world, "quest_template", columns=["id"],
                    filters=[{"column": "starts_at", "op": "ge", "value": "2024-02-28"}])
    assert [row[0] for row in dated["rows"]] == sorted(
        row["id"] for row in game.QUESTS if row["starts_at"] is not None and row["starts_at"] >= date(2024, 2, 28))
    assert refusal(world, {"kind": "database.rows", "table": "quest_template", "filters": [
        {"column": "starts_at", "op": "eq", "value": "2024-02-28T00:00:00"}]}).code == "invalid_input"


SERVERS = [pytest.param("mariadb", marks=pytest.mark.mariadb), pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("world_server", SERVERS, indirect=True)
def test_a_pooled_connection_the_server_dropped_is_replaced(world_server: WorldServer, tmp_path: Path) -> None:
    service = open_world_service(tmp_path, world_server)
    first = entries(service, {"column": "entry", "op": "le", "value": 3})
    owner = game.connect(world_server, "owner")
    try:
        cursor = owner.cursor()
        if world_server.dialect == "mariadb":
            cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s",
                           (world_server.reader_user,))
            sessions = [row[0] for row in cursor.fetchall()]
            for session in sessions:
                cursor.execute(f"KILL CONNECTION {int(session)}")
        else:
            owner.autocommit = True
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                           (world_server.reader_user,))
            sessions = cursor.fetchall()
    finally:
        owner.close()
    assert sessions, "the service kept its connection open"
    assert entries(service, {"column": "entry", "op": "le", "value": 3}) == first == [1, 2, 3]
    assert entries(service, {"column": "entry", "op": "eq", "value": 2}) == [2]
    service.close()


def test_each_kind_needs_its_kind_of_configuration(world: ResearchService, tmp_path: Path) -> None:
    no_source = refusal(world, {"kind": "source.files", "substring": "src"})
    assert (no_source.code, no_source.details) == ("not_found", {"field": "source"})
    sources_only = open_service(tmp_path / "sources", build_repo(tmp_path / "repo"))
    no_database = refusal(sources_only, {"kind": "database.tables"})
    assert (no_database.code, no_database.details) == ("not_found", {"field": "database"})
    assert refusal(sources_only, {"kind": "database.rows", "table": "creature_template"}).code == "not_found"


def test_with_two_databases_a_query_names_one(world_server: WorldServer, tmp_path: Path) -> None:
    path = write_config(tmp_path / "research.toml", databases=[
        game.database_entry(world_server),
        game.database_entry(world_server, name="copy", snapshot="copy-7", tables=["item_template"])])
    service = ResearchService(load_research_config(path, game.password_environ(world_server)))
    listed = service.query({"kind": "database.tables"})
    assert [(entry["database"], entry["tables"]) for entry in listed["result"]["databases"]] == [
        ("world", list(game.ALLOWLISTED)), ("copy", ["item_template"])]
    assert [origin["snapshot"] for origin in listed["origin"]["databases"]] == ["world-1", "copy-7"]
    unnamed = refusal(service, {"kind": "database.count", "table": "item_template"})
    assert (unnamed.code, unnamed.details) == ("invalid_input", {"field": "database"})
    counted = service.query({"kind": "database.count", "database": "copy", "table": "item_template"})
    assert (counted["result"]["count"], counted["origin"]["snapshot"]) == (40, "copy-7")
    assert refusal(service, {"kind": "database.count", "database": "copy", "table": "quest_template"}
                   ).code == "not_found"
    service.close()
