"""The [enrichment] configuration: every key known and well-typed, every entity type, database, source,
table and column it names configured and allowlisted, defaults filled in; each refusal names the key and
the file. At start, the tables and columns are checked against the real schema of each engine."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from armarius.app import open_app
from armarius.config import Settings
from armarius.errors import ConfigError
from armarius.research.config import ResearchConfig, load_research_config
from armarius.research.model import DEFAULT_IGNORED, EnrichmentLimits, EntityLookup, Relationship
from armarius.research.service import ResearchService
from tests.research.repos import Repo, build_repo, source_entry, write_config
from tests.research.world import WorldServer, build_sqlite_world, database_entry, password_environ


@pytest.fixture(scope="module")
def sqlite_world(tmp_path_factory: pytest.TempPathFactory) -> WorldServer:
    return build_sqlite_world(tmp_path_factory.mktemp("world") / "world.sqlite")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return build_repo(tmp_path_factory.mktemp("repo") / "repo")


def enrichment() -> dict[str, Any]:
    """The world fixture's enrichment: docs/research.md's example plus an item text (one database, so no
    ``database`` keys)."""
    return {
        "entities": [
            {"type": "creature", "table": "creature_template", "id_column": "entry",
             "columns": ["name", "subname", "script_name"]},
            {"type": "quest", "table": "quest_template", "id_column": "id", "columns": ["title", "min_level"]},
            {"type": "item", "table": "item_template", "id_column": "entry", "columns": ["name", "quality"]},
            {"type": "smart_script", "table": "smart_scripts", "id_column": "entryorguid",
             "columns": ["source_type", "id", "event_type", "action_type", "comment"]},
        ],
        "texts": [
            {"entity_type": "quest", "column": "details", "role": "quest text", "origin": "shipped quest data"},
            {"entity_type": "item", "column": "description", "role": "item tooltip", "origin": "shipped item data"},
        ],
        "relationships": [
            {"relation": "rewards_item", "from_table": "quest_template", "from_id_column": "id",
             "from_column": "reward_item", "entity_type": "item"},
            {"relation": "scripted_by", "from_table": "creature_template", "from_id_column": "entry",
             "from_column": "script_name", "source": "app"},
            {"relation": "has_smart_scripts", "from_entity": "creature", "from_table": "smart_scripts",
             "from_id_column": "entryorguid", "when_column": "source_type", "when_value": 0,
             "from_column": "entryorguid", "ignore_values": [], "entity_type": "smart_script"},
        ],
    }


Write = Callable[..., Path]


@pytest.fixture
def write(tmp_path: Path, sqlite_world: WorldServer, repo: Repo) -> Write:
    """Writes research.toml with the source ``app``, the sqlite world as ``world`` (plus ``databases``)
    and ``section`` as [enrichment]."""
    def writer(section: Any, *, databases: tuple[dict[str, Any], ...] = (), **world: Any) -> Path:
        return write_config(tmp_path / "research.toml", [source_entry(repo)],
                            databases=[database_entry(sqlite_world, **world), *databases], enrichment=section)
    return writer


def with_entry(part: str, index: int, **changes: Any) -> dict[str, Any]:
    """The enrichment with ``part[index]`` changed (a value of None removes the key)."""
    section = enrichment()
    entry = {**section[part][index], **changes}
    section[part][index] = {key: value for key, value in entry.items() if value is not None}
    return section


def refused(path: Path, key: str) -> ConfigError:
    """The refusal of ``path``: its details name ``key`` and the file, and so does its message (the entry, the
    file, then the key's own name)."""
    with pytest.raises(ConfigError) as caught:
        load_research_config(path)
    error = caught.value
    assert error.code == "config_invalid"
    assert error.details == {"key": key, "file": str(path)}
    entry, _, name = key.rpartition(".")
    if name.endswith("]") or not entry:  # the key is an entry (or the whole section) itself
        entry, name = key, key
    assert error.message.startswith(f"{entry} in {path}: ")
    assert name in error.message
    return error


# --- a good configuration and its defaults ------------------------------------------------------------------


def test_the_world_enrichment_loads_with_its_defaults(write: Write) -> None:
    config = load_research_config(write(enrichment()))
    enriched = config.enrichment
    assert enriched is not None
    assert enriched.limits == EnrichmentLimits(max_queries=50, max_depth=2, max_relationships=100)
    assert list(enriched.entities) == ["creature", "quest", "item", "smart_script"]
    assert enriched.entities["quest"] == EntityLookup("quest", "world", "quest_template", "id", ("title", "min_level"))
    assert [text.column for text in enriched.texts_of("quest")] == ["details"]
    rewards, scripted, smart = enriched.relationships
    # from_entity from the table; the target's table, column and columns from its entity type
    assert rewards == Relationship(
        relation="rewards_item", from_entity="quest", database="world", from_table="quest_template",
        from_id_column="id", from_column="reward_item", ignore_values=DEFAULT_IGNORED, entity_type="item",
        table="item_template", column="entry", columns=("name", "quality"))
    assert (scripted.from_entity, scripted.source, scripted.table, scripted.columns) == ("creature", "app", None, ())
    assert [scripted.ignores(value) for value in (None, "", 0, 0.0, False, "npc_hogger")] == [True] * 4 + [False] * 2
    # an explicit list replaces the defaults, but null is always ignored
    assert (smart.when_column, smart.when_value, smart.ignore_values) == ("source_type", 0, (None,))
    assert [smart.ignores(value) for value in (None, 0, "")] == [True, False, False]
    assert enriched.relationships_of("creature") == (scripted, smart)


def test_limits_explicit_values_and_bounds_load(write: Write) -> None:
    section = {**enrichment(), "max_queries": 10_000, "max_depth": 0, "max_relationships": 1}
    section["relationships"][0] |= {"ignore_values": [0, "none", -1.5, True], "table": "item_template",
                                    "column": "entry", "columns": ["description"]}
    enriched = load_research_config(write(section)).enrichment
    assert enriched is not None
    assert enriched.limits == EnrichmentLimits(max_queries=10_000, max_depth=0, max_relationships=1)
    link = enriched.relationships[0]
    assert link.ignore_values == (None, 0, "none", -1.5, True)
    assert link.columns == ("description",)


def test_with_two_databases_each_entry_names_its_own(write: Write, sqlite_world: WorldServer) -> None:
    second = database_entry(sqlite_world, name="world2")
    section = enrichment()
    for part in ("entities", "relationships"):
        for entry in section[part]:
            entry["database"] = "world"
    section["entities"].append({"type": "npc", "database": "world2", "table": "creature_template",
                                "id_column": "entry", "columns": ["name"]})
    enriched = load_research_config(write(section, databases=(second,))).enrichment
    assert enriched is not None
    assert enriched.entities["npc"].database == "world2"
    # creature_template is in world2 only for "npc", so the default from_entity stays "creature" in world
    assert enriched.relationships[1].from_entity == "creature"


def test_the_documented_example_loads_and_matches_the_world(tmp_path: Path, sqlite_world: WorldServer,
                                                            repo: Repo) -> None:
    docs = (Path(__file__).parents[2] / "docs" / "research.md").read_text(encoding="utf-8")
    example = docs.split("### Enrichment configuration", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    path = write_config(tmp_path / "research.toml", [source_entry(repo)], databases=[database_entry(sqlite_world)])
    path.write_text(path.read_text(encoding="utf-8") + example, encoding="utf-8")
    config = load_research_config(path)
    assert config.enrichment is not None
    assert config.enrichment == load_research_config(write_config(
        tmp_path / "same.toml", [source_entry(repo)], databases=[database_entry(sqlite_world)],
        enrichment=enrichment() | {"texts": enrichment()["texts"][:1]})).enrichment
    service = ResearchService(config)
    try:
        service.check_enrichment()
    finally:
        service.close()


def test_without_enrichment_there_is_none(tmp_path: Path, repo: Repo) -> None:
    assert load_research_config(write_config(tmp_path / "plain.toml", [source_entry(repo)])).enrichment is None


# --- refusals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("part", "index", "key"), [
    (None, 0, "enrichment.entity"), ("entities", 1, "enrichment.entities[1].name"),
    ("texts", 0, "enrichment.texts[0].table"), ("relationships", 2, "enrichment.relationships[2].foo"),
    ("relationships", 0, "enrichment.relationships[0].where")])
def test_unknown_keys_are_refused_at_every_level(write: Write, part: str | None, index: int, key: str) -> None:
    name = key.rpartition(".")[2]
    section = {**enrichment(), name: 1} if part is None else with_entry(part, index, **{name: 1})
    assert f"unknown key {name!r}" in refused(write(section), key).message


def test_unknown_top_level_keys_are_still_refused(tmp_path: Path, repo: Repo) -> None:
    path = write_config(tmp_path / "typo.toml", [source_entry(repo)], enrichments={"entities": []})
    with pytest.raises(ConfigError) as caught:
        load_research_config(path)
    assert "Unknown key 'enrichments'" in caught.value.message


@pytest.mark.parametrize(("section", "key"), [
    (5, "enrichment"), ([], "enrichment"), ({}, "enrichment.entities"), ({"entities": []}, "enrichment.entities"),
    ({"entities": {"type": "creature"}}, "enrichment.entities"), ({"entities": ["creature"]}, "enrichment.entities[0]"),
    ({**enrichment(), "texts": {}}, "enrichment.texts"), ({**enrichment(), "relationships": 1},
                                                         "enrichment.relationships"),
    ({**enrichment(), "texts": [1]}, "enrichment.texts[0]"),
    ({**enrichment(), "relationships": ["x"]}, "enrichment.relationships[0]")])
def test_malformed_sections_are_refused(write: Write, section: Any, key: str) -> None:
    refused(write(section), key)


@pytest.mark.parametrize(("key", "value"), [
    ("max_queries", 0), ("max_queries", 10_001), ("max_queries", "5"), ("max_queries", True), ("max_queries", 2.5),
    ("max_depth", -1), ("max_depth", 21), ("max_relationships", 0), ("max_relationships", 100_001)])
def test_limits_out_of_range_are_refused(write: Write, key: str, value: Any) -> None:
    assert "whole number" in refused(write({**enrichment(), key: value}), f"enrichment.{key}").message


@pytest.mark.parametrize(("part", "index", "changes", "key"), [
    ("entities", 0, {"type": "Creature"}, "type"), ("entities", 0, {"type": "1creature"}, "type"),
    ("entities", 0, {"type": "a" * 65}, "type"), ("entities", 0, {"type": 5}, "type"),
    ("entities", 0, {"type": None}, "type"), ("entities", 0, {"table": "creature template"}, "table"),
    ("entities", 0, {"table": None}, "table"), ("entities", 1, {"id_column": 3}, "id_column"),
    ("entities", 1, {"id_column": "1d"}, "id_column"), ("entities", 0, {"columns": "name"}, "columns"),
    ("entities", 0, {"columns": []}, "columns"), ("entities", 0, {"columns": ["name", "name"]}, "columns"),
    ("entities", 0, {"columns": ["name", 5]}, "columns"), ("entities", 0, {"columns": None}, "columns"),
    ("entities", 0, {"columns": ["name", "is"]}, "columns"), ("entities", 0, {"columns": ["not_found_in"]}, "columns"),
    ("relationships", 0, {"columns": ["is"]}, "columns"),
    ("entities", 0, {"database": 1}, "database"),
    ("texts", 0, {"column": None}, "column"), ("texts", 0, {"role": ""}, "role"), ("texts", 0, {"role": " "}, "role"),
    ("texts", 0, {"origin": 5}, "origin"), ("texts", 0, {"origin": "a\nb"}, "origin"),
    ("texts", 0, {"role": "r" * 201}, "role"), ("texts", 0, {"role": None}, "role"),
    ("relationships", 0, {"relation": "Rewards"}, "relation"), ("relationships", 0, {"relation": None}, "relation"),
    ("relationships", 0, {"from_table": None}, "from_table"),
    ("relationships", 0, {"from_id_column": "id;"}, "from_id_column"),
    ("relationships", 0, {"from_column": ["reward_item"]}, "from_column"),
    ("relationships", 2, {"when_column": 0}, "when_column"),
    ("relationships", 2, {"when_value": [0]}, "when_value"), ("relationships", 2, {"when_value": {}}, "when_value"),
    ("relationships", 0, {"ignore_values": 0}, "ignore_values"),
    ("relationships", 0, {"ignore_values": [[0]]}, "ignore_values"),
    ("relationships", 0, {"ignore_values": [{"a": 1}]}, "ignore_values"),
    ("relationships", 0, {"table": 5}, "table"), ("relationships", 0, {"column": ""}, "column"),
    ("relationships", 0, {"columns": []}, "columns"), ("relationships", 1, {"source": 5}, "source")])
def test_wrong_types_and_names_are_refused(write: Write, part: str, index: int, changes: dict[str, Any],
                                           key: str) -> None:
    refused(write(with_entry(part, index, **changes)), f"enrichment.{part}[{index}].{key}")


@pytest.mark.parametrize(("part", "index", "changes", "key"), [
    ("texts", 1, {"entity_type": "npc"}, "entity_type"), ("texts", 0, {"entity_type": None}, "entity_type"),
    ("relationships", 0, {"entity_type": "npc"}, "entity_type"),
    ("relationships", 2, {"from_entity": "npc"}, "from_entity")])
def test_an_unknown_entity_type_is_refused(write: Write, part: str, index: int, changes: dict[str, Any],
                                           key: str) -> None:
    error = refused(write(with_entry(part, index, **changes)), f"enrichment.{part}[{index}].{key}")
    assert "an entity type of [[enrichment.entities]]" in error.message
    assert "creature, quest, item, smart_script" in error.message


def test_an_entity_type_defined_twice_is_refused(write: Write) -> None:
    section = enrichment()
    section["entities"].append({**section["entities"][2], "table": "quest_template", "id_column": "id"})
    assert "'item' is defined twice" in refused(write(section), "enrichment.entities[4].type").message


def test_a_text_named_twice_is_refused(write: Write) -> None:
    section = enrichment()
    section["texts"].append({**section["texts"][0], "role": "again"})
    refused(write(section), "enrichment.texts[2].column")


@pytest.mark.parametrize(("part", "index"), [("entities", 0), ("relationships", 1)])
def test_an_unknown_database_is_refused(write: Write, part: str, index: int) -> None:
    error = refused(write(with_entry(part, index, database="elsewhere")), f"enrichment.{part}[{index}].database")
    assert "configured: world" in error.message


@pytest.mark.parametrize(("part", "index"), [("entities", 3), ("relationships", 2)])
def test_with_two_databases_the_database_is_required(write: Write, sqlite_world: WorldServer, part: str,
                                                     index: int) -> None:
    section = enrichment()
    for kind in ("entities", "relationships"):
        for entry in section[kind]:
            entry["database"] = "world"
    del section[part][index]["database"]
    path = write(section, databases=(database_entry(sqlite_world, name="world2"),))
    assert "name one of world, world2" in refused(path, f"enrichment.{part}[{index}].database").message


def test_without_databases_enrichment_has_nothing_to_look_up(tmp_path: Path, repo: Repo) -> None:
    path = write_config(tmp_path / "research.toml", [source_entry(repo)], enrichment=enrichment())
    assert "no [[databases]] are configured" in refused(path, "enrichment.entities[0].database").message


@pytest.mark.parametrize(("changes", "key", "words"), [
    ({"source": "app"}, "source", "not both; entity_type and source"),
    ({"entity_type": None, "table": "item_template", "source": "app"}, "source", "not both; table and source"),
    ({"entity_type": None}, "entity_type", "needs a target"),
    ({"entity_type": None, "table": "item_template", "column": "entry"}, "entity_type", "must name an entity type"),
    ({"entity_type": None, "source": "other"}, "source", "source must name a configured source (configured: app)")])
def test_a_relationship_has_exactly_one_known_target(write: Write, changes: dict[str, Any], key: str,
                                                     words: str) -> None:
    path = write(with_entry("relationships", 0, **changes))
    assert words in refused(path, f"enrichment.relationships[0].{key}").message


def test_a_database_target_lives_in_the_relationships_database(write: Write, sqlite_world: WorldServer) -> None:
    section = enrichment()
    section["entities"].append({"type": "npc", "database": "world2", "table": "creature_template",
                                "id_column": "entry", "columns": ["name"]})
    for kind in ("entities", "relationships"):
        for entry in section[kind]:
            entry.setdefault("database", "world")
    section["relationships"][0]["entity_type"] = "npc"
    path = write(section, databases=(database_entry(sqlite_world, name="world2"),))
    assert "looked up in database 'world2'" in refused(path, "enrichment.relationships[0].entity_type").message


@pytest.mark.parametrize(("changes", "key"), [
    ({"when_column": None}, "when_column"), ({"when_value": None}, "when_value")])
def test_when_column_and_when_value_come_together(write: Write, changes: dict[str, Any], key: str) -> None:
    error = refused(write(with_entry("relationships", 2, **changes)), f"enrichment.relationships[2].{key}")
    assert "when_column and when_value come together" in error.message


def test_from_entity_is_required_when_no_or_several_entity_types_have_the_table(write: Write) -> None:
    section = with_entry("relationships", 0, from_table="smart_scripts", from_id_column="entryorguid",
                         from_column="comment")
    section["entities"].append({"type": "script_row", "table": "smart_scripts", "id_column": "entryorguid",
                                "columns": ["comment"]})
    error = refused(write(section), "enrichment.relationships[0].from_entity")
    assert "several entity types (smart_script, script_row) have the table 'smart_scripts' in database 'world'" \
        in error.message
    section = with_entry("relationships", 0, from_table="broadcast_text", from_id_column="id", from_column="id")
    error = refused(write(section, tables=["creature_template", "quest_template", "item_template", "smart_scripts",
                                           "broadcast_text"]), "enrichment.relationships[0].from_entity")
    assert "no entity type has the table 'broadcast_text' in database 'world'" in error.message


@pytest.mark.parametrize(("part", "index", "changes", "key"), [
    ("entities", 2, {"table": "account"}, "table"),
    ("relationships", 0, {"from_table": "canary", "from_entity": "quest"}, "from_table"),
    ("relationships", 0, {"table": "account"}, "table")])
def test_a_table_outside_the_allowlist_is_refused(write: Write, part: str, index: int, changes: dict[str, Any],
                                                  key: str) -> None:
    error = refused(write(with_entry(part, index, **changes)), f"enrichment.{part}[{index}].{key}")
    assert f"{key} '{changes[key]}' is not in the tables of database 'world' (its allowlist)" in error.message


#: Column allowlists that hold exactly what enrichment() names.
ALLOWLISTS = {"creature_template": ["entry", "name", "subname", "script_name"],
              "quest_template": ["id", "title", "details", "min_level", "reward_item"],
              "item_template": ["entry", "name", "quality", "description"],
              "smart_scripts": ["entryorguid", "source_type", "id", "event_type", "action_type", "comment"]}


def test_column_allowlists_holding_every_named_column_pass(write: Write) -> None:
    assert load_research_config(write(enrichment(), columns=ALLOWLISTS)).enrichment is not None


@pytest.mark.parametrize(("part", "index", "changes", "key"), [
    ("entities", 0, {"columns": ["name", "faction"]}, "columns"),
    ("entities", 1, {"id_column": "reward_money"}, "id_column"), ("texts", 0, {"column": "starts_at"}, "column"),
    ("relationships", 0, {"from_column": "reward_money"}, "from_column"),
    ("relationships", 0, {"column": "data"}, "column"), ("relationships", 0, {"columns": ["name", "data"]}, "columns"),
    ("relationships", 2, {"when_column": "link"}, "when_column")])
def test_a_column_outside_its_tables_allowlist_is_refused(write: Write, part: str, index: int,
                                                          changes: dict[str, Any], key: str) -> None:
    error = refused(write(with_entry(part, index, **changes), columns=ALLOWLISTS), f"enrichment.{part}[{index}].{key}")
    assert f"{key}: the column" in error.message
    assert "is not in the columns allowlist of" in error.message


# --- against the real schema ------------------------------------------------------------------------------------


def world_config(folder: Path, server: WorldServer, section: dict[str, Any], repo: Repo,
                 **entry: Any) -> ResearchConfig:
    path = write_config(folder / "research.toml", [source_entry(repo)],
                        databases=[database_entry(server, **entry)], enrichment=section)
    return load_research_config(path, password_environ(server))


def schema_refusal(config: ResearchConfig, key: str) -> ConfigError:
    service = ResearchService(config)
    try:
        with pytest.raises(ConfigError) as caught:
            service.check_enrichment()
    finally:
        service.close()
    assert caught.value.details == {"key": key, "file": str(config.path)}
    entry, _, name = key.rpartition(".")
    assert caught.value.message.startswith(f"{entry} in {config.path}: {name}")
    return caught.value


def test_the_world_enrichment_matches_the_real_schema(world_server: WorldServer, tmp_path: Path, repo: Repo) -> None:
    service = ResearchService(world_config(tmp_path, world_server, enrichment(), repo))
    try:
        service.check_enrichment()
    finally:
        service.close()


@pytest.mark.parametrize(("part", "index", "changes", "key", "column"), [
    ("entities", 0, {"columns": ["name", "title"]}, "enrichment.entities[0].columns", "title"),
    ("texts", 1, {"column": "details"}, "enrichment.texts[1].column", "details"),
    ("relationships", 0, {"from_column": "reward_itm"}, "enrichment.relationships[0].from_column", "reward_itm"),
    ("relationships", 2, {"when_column": "sourcetype"}, "enrichment.relationships[2].when_column", "sourcetype"),
    ("relationships", 0, {"columns": ["name", "quality", "colour"]}, "enrichment.relationships[0].columns", "colour")])
def test_a_column_the_real_table_lacks_is_refused(world_server: WorldServer, tmp_path: Path, repo: Repo, part: str,
                                                  index: int, changes: dict[str, Any], key: str, column: str) -> None:
    config = world_config(tmp_path, world_server, with_entry(part, index, **changes), repo)
    error = schema_refusal(config, key)
    assert f"in database 'world' has no column {column!r}" in error.message


def test_an_allowlisted_table_the_database_lacks_is_refused(world_server: WorldServer, tmp_path: Path,
                                                            repo: Repo) -> None:
    section = enrichment()
    section["entities"].append({"type": "spell", "table": "spell_template", "id_column": "id", "columns": ["name"]})
    config = world_config(tmp_path, world_server, section, repo,
                          tables=["creature_template", "quest_template", "item_template", "smart_scripts",
                                  "spell_template"])
    error = schema_refusal(config, "enrichment.entities[4].table")
    assert "table 'spell_template' does not exist in database 'world'" in error.message


def test_open_app_refuses_an_enrichment_the_schema_does_not_hold(settings: Settings, sqlite_world: WorldServer,
                                                                 repo: Repo) -> None:
    def write_app_config(section: dict[str, Any]) -> None:
        write_config(settings.data_dir / "research.toml", [source_entry(repo)],
                     databases=[database_entry(sqlite_world)], enrichment=section)

    write_app_config(with_entry("entities", 2, columns=["name", "colour"]))
    with pytest.raises(ConfigError) as caught:
        open_app(replace(settings, research_config=Path("research.toml")))
    assert caught.value.details["key"] == "enrichment.entities[2].columns"
    assert "columns: the table 'item_template' in database 'world' has no column 'colour'" in caught.value.message
    write_app_config(enrichment())
    application = open_app(replace(settings, research_config=Path("research.toml")))
    try:
        assert application.research is not None
        assert application.research.config.enrichment is not None
    finally:
        application.close()


def test_a_database_that_cannot_be_reached_is_skipped_with_a_warning(tmp_path: Path, repo: Repo,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    unreachable = {"name": "world", "dialect": "mariadb", "host": "127.0.0.1", "port": 1, "database": "world",
                   "user": "reader", "password_env": "WORLD_PASSWORD", "snapshot": "world-1",
                   "tables": ["creature_template", "quest_template", "item_template", "smart_scripts"]}
    path = write_config(tmp_path / "research.toml", [source_entry(repo)], databases=[unreachable],
                        enrichment=enrichment())
    service = ResearchService(load_research_config(path, {"WORLD_PASSWORD": "x"}))
    try:
        with caplog.at_level(logging.WARNING, logger="armarius.research"):
            service.check_enrichment()
    finally:
        service.close()
    assert any("enrichment: database world not checked" in record.getMessage() for record in caplog.records)
