"""Reading the research TOML's ``[enrichment]`` table (format: :mod:`armarius.research.model`).

Everything is checked when the file is loaded, and every refusal is a :class:`ConfigError` whose
message starts with the key's place and the file ("enrichment.relationships[2] in /etc/research.toml:
unknown key 'foo'") and whose details name the full key (``enrichment.relationships[2].foo``) and
the file. Checked here: the keys, their types, names, that the entity types, databases and sources
named exist, and that every table and column is in its database's allowlist. Whether those tables
and columns exist on the server is :func:`check_against_schema`'s job (at start, once the databases
are open).

Defaults worth knowing:

* ``database`` may be left out only when exactly one database is configured.
* ``from_entity`` defaults to the one entity type whose table is ``from_table`` in the
  relationship's database; with none or several it must be named.
* A database target's ``table``, ``column`` and ``columns`` default to its entity type's table,
  id column and columns; that entity type must live in the relationship's database (both queries
  of a relationship run in one database).
* ``ignore_values`` replaces the default ``[null, "", 0]`` for the other values, but null is always
  ignored: a NULL cannot be looked up (and TOML cannot spell it anyway).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from armarius.errors import ConfigError, NotFound, ResearchUnavailable
from armarius.research.config import IDENTIFIER, DatabaseSource, GitSource
from armarius.research.model import (
    DEFAULT_IGNORED,
    EnrichmentConfig,
    EnrichmentLimits,
    EntityLookup,
    Relationship,
    TextColumn,
)

logger = logging.getLogger("armarius.research")

#: An entity type or relation name.
NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_LIMIT_RANGES: dict[str, tuple[int, int]] = {
    "max_queries": (1, 10_000), "max_depth": (0, 20), "max_relationships": (1, 100_000)}
#: Predicates of entity facts that are not columns (what an entity is; the table it was not found in).
RESERVED_PREDICATES = frozenset({"is", "not_found_in"})
_ENTITY_KEYS = {"type", "database", "table", "id_column", "columns"}
_TEXT_KEYS = {"entity_type", "column", "role", "origin"}
_DATABASE_TARGET = ("entity_type", "table", "column", "columns")
_RELATIONSHIP_KEYS = {"relation", "database", "from_entity", "from_table", "from_id_column", "from_column",
                      "when_column", "when_value", "ignore_values", "source", *_DATABASE_TARGET}
_LABEL_LENGTH = 200


class _Place:
    """Where in the file a value sits, and how a refusal there is worded."""

    def __init__(self, key: str, path: Path) -> None:
        self.key, self.path = key, path

    def fail(self, message: str, key: str | None = None) -> ConfigError:
        full = f"{self.key}.{key}" if key else self.key
        return ConfigError(f"{self.key} in {self.path}: {message}", key=full, file=str(self.path))

    def table(self, value: Any, keys: set[str], what: str) -> dict[str, Any]:
        """``value`` as a table holding only ``keys``."""
        if not isinstance(value, dict):
            raise self.fail(f"{what} is a table")
        for key in value:
            if key not in keys:
                raise self.fail(f"unknown key {key!r}", key)
        return value

    def name(self, entry: dict[str, Any], key: str) -> str:
        value = entry.get(key)
        if not isinstance(value, str) or not NAME.fullmatch(value):
            raise self.fail(f"{key} is required: 1-64 of [a-z0-9_], starting with a letter", key)
        return value

    def identifier(self, entry: dict[str, Any], key: str) -> str:
        """A required table or column name."""
        value = entry.get(key)
        if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
            raise self.fail(f"{key} is required: a table or column name (1-64 of letters, digits, '_' and '$', "
                            "not starting with a digit)", key)
        return value

    def optional_identifier(self, entry: dict[str, Any], key: str) -> str | None:
        return self.identifier(entry, key) if key in entry else None

    def columns(self, entry: dict[str, Any], key: str) -> tuple[str, ...]:
        value = entry.get(key)
        if not isinstance(value, list) or not value:
            raise self.fail(f"{key} is a non-empty list of column names", key)
        for item in value:
            if not isinstance(item, str) or not IDENTIFIER.fullmatch(item):
                raise self.fail(f"{key}: each name is 1-64 of letters, digits, '_' and '$', not starting with a "
                                "digit", key)
        if len(set(value)) != len(value):
            raise self.fail(f"{key} names a column twice", key)
        if reserved := sorted(RESERVED_PREDICATES & set(value)):
            raise self.fail(f"{key}: {reserved[0]!r} is the name of an entity fact of its own, not a column "
                            "enrichment can state", key)
        return tuple(value)

    def label(self, entry: dict[str, Any], key: str) -> str:
        value = entry.get(key)
        if (not isinstance(value, str) or not value.strip() or len(value) > _LABEL_LENGTH
                or any(ord(char) < 32 for char in value)):
            raise self.fail(f"{key} is required: a non-empty line of at most {_LABEL_LENGTH} characters", key)
        return value

    def scalar(self, value: Any, key: str) -> Any:
        """A value compared with a database value: a string, an integer, a finite number or a boolean."""
        if not isinstance(value, str | int | float) or (isinstance(value, float) and not math.isfinite(value)):
            raise self.fail(f"{key} takes strings, numbers and booleans (no tables, lists or dates)", key)
        return value


def parse_enrichment(section: Any, path: Path, sources: Mapping[str, GitSource],
                     databases: Mapping[str, DatabaseSource]) -> EnrichmentConfig:
    """The checked ``[enrichment]`` table of the research configuration at ``path``."""
    place = _Place("enrichment", path)
    section = place.table(section, {"entities", "texts", "relationships", *_LIMIT_RANGES}, "[enrichment]")
    entities: dict[str, EntityLookup] = {}
    for index, entry in enumerate(_array(place, section, "entities", required=True)):
        entity = _entity(_Place(f"enrichment.entities[{index}]", path), entry, databases)
        if entity.type in entities:
            raise _Place(f"enrichment.entities[{index}]", path).fail(
                f"type {entity.type!r} is defined twice (one lookup per entity type)", "type")
        entities[entity.type] = entity
    texts: list[TextColumn] = []
    for index, entry in enumerate(_array(place, section, "texts")):
        text = _text(_Place(f"enrichment.texts[{index}]", path), entry, entities)
        if any((text.entity_type, text.column) == (other.entity_type, other.column) for other in texts):
            raise _Place(f"enrichment.texts[{index}]", path).fail(
                f"column {text.column!r} of {text.entity_type!r} is configured as a text twice", "column")
        texts.append(text)
    relationships = tuple(
        _relationship(_Place(f"enrichment.relationships[{index}]", path), entry, entities, sources, databases)
        for index, entry in enumerate(_array(place, section, "relationships")))
    config = EnrichmentConfig(entities=entities, texts=tuple(texts), relationships=relationships,
                              limits=EnrichmentLimits(**_limits(place, section)))
    for reference in references(config):
        _check_allowlisted(reference, databases[reference.database], path)
    return config


def _array(place: _Place, section: dict[str, Any], key: str, *, required: bool = False) -> list[Any]:
    value = section.get(key, [])
    if not isinstance(value, list) or (required and not value):
        raise place.fail(f"{key} is a list of tables: write one [[enrichment.{key}]] per item"
                         + (" (at least one)" if required else ""), key)
    return value


def _limits(place: _Place, section: dict[str, Any]) -> dict[str, int]:
    values: dict[str, int] = {}
    for key, (low, high) in _LIMIT_RANGES.items():
        if key in section:
            value = section[key]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise place.fail(f"{key} must be a whole number from {low} to {high}", key)
            values[key] = value
    return values


def _database(place: _Place, entry: dict[str, Any], databases: Mapping[str, DatabaseSource]) -> str:
    """The database ``entry`` names, or the only one configured."""
    name = entry.get("database")
    if name is None:
        if len(databases) == 1:
            return next(iter(databases))
        raise place.fail("database is required: " + ("name one of " + ", ".join(databases) if databases
                                                     else "no [[databases]] are configured"), "database")
    if not isinstance(name, str) or name not in databases:
        configured = ", ".join(databases) or "none"
        raise place.fail(f"database must name a configured database (configured: {configured})", "database")
    return name


def _entity(place: _Place, entry: Any, databases: Mapping[str, DatabaseSource]) -> EntityLookup:
    entry = place.table(entry, _ENTITY_KEYS, "each entity")
    type_ = place.name(entry, "type")
    database = _database(place, entry, databases)
    return EntityLookup(type=type_, database=database, table=place.identifier(entry, "table"),
                        id_column=place.identifier(entry, "id_column"),
                        columns=place.columns(entry, "columns"))


def _entity_type(place: _Place, entry: dict[str, Any], key: str, entities: Mapping[str, EntityLookup]) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or value not in entities:
        named = f" {value!r} is not" if isinstance(value, str) and NAME.fullmatch(value) else " must name"
        raise place.fail(f"{key}{named} an entity type of [[enrichment.entities]] (configured: "
                         f"{', '.join(entities)})", key)
    return value


def _text(place: _Place, entry: Any, entities: Mapping[str, EntityLookup]) -> TextColumn:
    entry = place.table(entry, _TEXT_KEYS, "each text")
    entity_type = _entity_type(place, entry, "entity_type", entities)
    return TextColumn(entity_type=entity_type, column=place.identifier(entry, "column"),
                      role=place.label(entry, "role"), origin=place.label(entry, "origin"))


def _relationship(place: _Place, entry: Any, entities: Mapping[str, EntityLookup], sources: Mapping[str, GitSource],
                  databases: Mapping[str, DatabaseSource]) -> Relationship:
    entry = place.table(entry, _RELATIONSHIP_KEYS, "each relationship")
    relation = place.name(entry, "relation")
    database = _database(place, entry, databases)
    from_table, from_id_column, from_column = (place.identifier(entry, key)
                                               for key in ("from_table", "from_id_column", "from_column"))
    if ("when_column" in entry) != ("when_value" in entry):
        raise place.fail("when_column and when_value come together",
                         "when_value" if "when_column" in entry else "when_column")
    when_column = place.optional_identifier(entry, "when_column")
    when_value = place.scalar(entry["when_value"], "when_value") if "when_value" in entry else None
    return Relationship(
        relation=relation, from_entity=_from_entity(place, entry, entities, database, from_table), database=database,
        from_table=from_table, from_id_column=from_id_column, from_column=from_column, when_column=when_column,
        when_value=when_value, ignore_values=_ignored(place, entry), **_target(place, entry, entities, sources,
                                                                               database))


def _from_entity(place: _Place, entry: dict[str, Any], entities: Mapping[str, EntityLookup], database: str,
                 from_table: str) -> str:
    """The named ``from_entity``, or the one entity type whose table is ``from_table`` in ``database``."""
    if "from_entity" in entry:
        return _entity_type(place, entry, "from_entity", entities)
    candidates = [entity.type for entity in entities.values()
                  if (entity.database, entity.table) == (database, from_table)]
    if len(candidates) != 1:
        found = (f"several entity types ({', '.join(candidates)}) have" if candidates
                 else "no entity type has")
        raise place.fail(f"from_entity is required: {found} the table {from_table!r} in database {database!r}",
                         "from_entity")
    return candidates[0]


def _ignored(place: _Place, entry: dict[str, Any]) -> tuple[Any, ...]:
    """The values not followed: the explicit list plus null (which no lookup can match), or the defaults."""
    if "ignore_values" not in entry:
        return DEFAULT_IGNORED
    values = entry["ignore_values"]
    if not isinstance(values, list):
        raise place.fail("ignore_values is a list of strings, numbers and booleans", "ignore_values")
    return (None, *(place.scalar(value, "ignore_values") for value in values))


def _target(place: _Place, entry: dict[str, Any], entities: Mapping[str, EntityLookup],
            sources: Mapping[str, GitSource], database: str) -> dict[str, Any]:
    """The relationship's target fields: a database lookup of an entity type, or a source symbol."""
    database_keys = [key for key in _DATABASE_TARGET if key in entry]
    if database_keys and "source" in entry:
        raise place.fail(f"a relationship has a database target ({', '.join(_DATABASE_TARGET)}) or a source target "
                         f"(source), not both; {database_keys[0]} and source are given", "source")
    if "source" in entry:
        name = entry["source"]
        if not isinstance(name, str) or name not in sources:
            raise place.fail(f"source must name a configured source (configured: {', '.join(sources) or 'none'})",
                             "source")
        return {"source": name}
    if not database_keys:
        raise place.fail("a relationship needs a target: entity_type (a database lookup) or source (a source "
                         "symbol)", "entity_type")
    entity_type = _entity_type(place, entry, "entity_type", entities)
    target = entities[entity_type]
    if target.database != database:
        raise place.fail(f"entity_type {entity_type!r} is looked up in database {target.database!r}, not in this "
                         f"relationship's database {database!r} (a relationship's queries run in one database)",
                         "entity_type")
    return {"entity_type": entity_type,
            "table": place.optional_identifier(entry, "table") or target.table,
            "column": place.optional_identifier(entry, "column") or target.id_column,
            "columns": place.columns(entry, "columns") if "columns" in entry else target.columns}


# --- the tables and columns enrichment names ------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """One table (``column`` None) or column the enrichment configuration names, and the key naming it."""

    key: str
    database: str
    table: str
    column: str | None = None


def references(config: EnrichmentConfig) -> list[Reference]:
    """Every table and column ``config`` reads, in file order; each table before its columns."""
    found: list[Reference] = []

    def table(key: str, database: str, name: str, **columns: str | tuple[str, ...] | None) -> None:
        """The table ``name`` (named by ``key``) and its columns, each under its own key below ``key``'s entry."""
        found.append(Reference(key, database, name))
        entry = key.rpartition(".")[0]
        for field, value in columns.items():
            for column in (value,) if isinstance(value, str) else value or ():
                found.append(Reference(f"{entry}.{field}", database, name, column))

    for index, entity in enumerate(config.entities.values()):
        table(f"enrichment.entities[{index}].table", entity.database, entity.table,
              id_column=entity.id_column, columns=entity.columns)
    for index, text in enumerate(config.texts):
        entity = config.entities[text.entity_type]
        found.append(Reference(f"enrichment.texts[{index}].column", entity.database, entity.table, text.column))
    for index, link in enumerate(config.relationships):
        key = f"enrichment.relationships[{index}]"
        table(f"{key}.from_table", link.database, link.from_table, from_id_column=link.from_id_column,
              from_column=link.from_column, when_column=link.when_column)
        if link.table is not None:  # a database target (its table defaults to the entity's)
            table(f"{key}.table", link.database, link.table, column=link.column, columns=link.columns)
    return found


def _refusal(reference: Reference, path: Path, what: str) -> ConfigError:
    """"<entry> in <file>: <key><what>" for the entry and key of ``reference``."""
    entry, _, key = reference.key.rpartition(".")
    return _Place(entry, path).fail(f"{key}{what}", key)


def _check_allowlisted(reference: Reference, database: DatabaseSource, path: Path) -> None:
    """Refuse a table outside the database's ``tables``, or a column outside its table's ``columns`` list."""
    if reference.table not in database.tables:
        raise _refusal(reference, path, f" {reference.table!r} is not in the tables of database {database.name!r} "
                                        "(its allowlist)")
    allowed = database.columns.get(reference.table)
    if reference.column is not None and allowed is not None and reference.column not in allowed:
        raise _refusal(reference, path, f": the column {reference.column!r} is not in the columns allowlist of "
                                        f"{reference.table!r} in database {database.name!r}")


def check_against_schema(config: EnrichmentConfig, path: Path,
                         describe: Callable[[str, str], dict[str, Any]]) -> None:
    """Refuse a table or column that the real schema lacks. ``describe(database, table)`` is the
    ``database.schema`` answer; a database that cannot be reached is skipped with a warning (a
    research database being down must not stop the server: sessions block on it instead)."""
    unreachable: set[str] = set()
    columns: dict[tuple[str, str], set[str]] = {}
    for reference in references(config):
        place = (reference.database, reference.table)
        if reference.database in unreachable:
            continue
        if place not in columns:
            try:
                answer = describe(*place)
            except NotFound:
                raise _refusal(reference, path, f" {reference.table!r} does not exist in database "
                                                f"{reference.database!r}") from None
            except ResearchUnavailable as error:
                logger.warning("enrichment: database %s not checked against its schema (%s); sessions needing it "
                               "will block until it answers", reference.database, error.details.get("reason"))
                unreachable.add(reference.database)
                continue
            columns[place] = {column["name"] for column in answer["columns"]}
        if reference.column is not None and reference.column not in columns[place]:
            raise _refusal(reference, path, f": the table {reference.table!r} in database {reference.database!r} "
                                            f"has no column {reference.column!r}")
