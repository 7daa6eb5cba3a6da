"""The enrichment configuration: what turns a session's bare input ids into named facts (SPEC §4.4).

Everything domain-specific lives in the operator's research TOML; these classes only carry it.

    [enrichment]
    max_queries = 50            # distinct lookups per enrichment revision
    max_depth = 2               # relationship hops from an input
    max_relationships = 100     # relationship facts per revision

    [[enrichment.entities]]     # how an entity type is looked up
    type = "creature"
    database = "world"          # optional when one database is configured
    table = "creature_template"
    id_column = "entry"
    columns = ["name", "subname", "script_name"]

    [[enrichment.texts]]        # a text column that becomes a project_description fact
    entity_type = "quest"
    column = "details"
    role = "quest text"         # the role label a reader sees
    origin = "shipped quest data"

    [[enrichment.relationships]]
    relation = "rewards_item"   # the link's name
    from_entity = "quest"       # optional: the entity type whose id from_id_column matches
                                # (default: the entity type whose table is from_table)
    from_table = "quest_template"
    from_id_column = "id"       # matched against that entity's id
    from_column = "reward_item" # the referenced value
    when_column = "source_type" # optional: only origin rows where when_column = when_value
    when_value = 0
    ignore_values = [0, ""]     # values not followed (default: null, "" and 0)
    table = "item_template"     # the follow-up query: table where column = value, fetching columns
    column = "entry"
    columns = ["name"]
    entity_type = "item"        # the referenced entity it adds
    # or, instead of table/column/columns/entity_type, a source symbol:
    # source = "app"            # the value is searched with source.symbol in this source
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Values a relationship does not follow unless its ``ignore_values`` says otherwise.
DEFAULT_IGNORED: tuple[Any, ...] = (None, "", 0)


@dataclass(frozen=True)
class EnrichmentLimits:
    max_queries: int = 50
    max_depth: int = 2
    max_relationships: int = 100


@dataclass(frozen=True)
class EntityLookup:
    type: str
    database: str
    table: str
    id_column: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class TextColumn:
    entity_type: str
    column: str
    role: str
    origin: str


@dataclass(frozen=True)
class Relationship:
    relation: str
    from_entity: str
    database: str
    from_table: str
    from_id_column: str
    from_column: str
    when_column: str | None = None
    when_value: Any = None
    ignore_values: tuple[Any, ...] = DEFAULT_IGNORED
    #: A database target: the referenced entity's type (looked up as that entity), or None for a source symbol.
    entity_type: str | None = None
    table: str | None = None
    column: str | None = None
    columns: tuple[str, ...] = ()
    #: A source-symbol target: the configured source the value is searched in with ``source.symbol``.
    source: str | None = None

    def ignores(self, value: Any) -> bool:
        """Whether a value is not followed: null always; ``0`` and ``0.0`` alike; a boolean only as itself."""
        return value is None or any(_same(value, ignored) for ignored in self.ignore_values)


def _same(value: Any, ignored: Any) -> bool:
    if value is None or ignored is None:
        return value is ignored
    if isinstance(value, bool) or isinstance(ignored, bool):
        return type(value) is type(ignored) and value == ignored
    return bool(value == ignored)


@dataclass(frozen=True)
class EnrichmentConfig:
    entities: dict[str, EntityLookup]
    texts: tuple[TextColumn, ...] = ()
    relationships: tuple[Relationship, ...] = ()
    limits: EnrichmentLimits = EnrichmentLimits()

    def texts_of(self, entity_type: str) -> tuple[TextColumn, ...]:
        return tuple(text for text in self.texts if text.entity_type == entity_type)

    def relationships_of(self, entity_type: str) -> tuple[Relationship, ...]:
        return tuple(link for link in self.relationships if link.from_entity == entity_type)
