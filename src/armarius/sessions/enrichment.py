"""Enrichment: a session's input ids resolved into facts, breadth-first, by configured lookups only.

The walk is deterministic: inputs in the order given, each entity's relationships in configuration
order, rows in the order the database answers them (by primary key). Every value a fact states is
read from a capture, and the fact names that capture and the JSON pointer (RFC 6901) of the value
inside it. Nothing here knows a domain: entity types, tables, columns and relations all come from
the configuration.

Limits bound the walk: ``max_queries`` distinct lookups, ``max_depth`` relationship hops from an
input, ``max_relationships`` relationship facts. What they (or ``ignore_values``) leave out becomes a
``project_context_coverage`` fact naming what was skipped and why, instead of pretending
completeness. A referenced row is recorded as referenced, never as something observed at run
time or as a cause; an entity not found is a finding only within the table that was asked.

Only an id is followed: a value read from an answer is one when it is an integer (not a boolean) or
text (see :func:`followable`). A cell the answer cut (``truncated``: only its start came back) is
not the value, and a float, a boolean or an object (bytes, text that is not UTF-8) is nothing a
lookup by id takes: each is left out with a coverage fact (``value_cut``, ``not_an_id``) pointing at
it, before it counts against ``max_relationships``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from armarius.canonical import canonical_json
from armarius.errors import ArmariusError, InvalidInput, NotFound
from armarius.research.model import EnrichmentConfig, EntityLookup, Relationship
from armarius.validation import INT64_MAX

ENTITY, RELATIONSHIP = "entity", "relationship"
DESCRIPTION, COVERAGE = "project_description", "project_context_coverage"
#: Rows an entity lookup asks for: one is expected; a second says the id is not unique.
ENTITY_ROWS = 2
#: How many origin rows a relationship reads for one entity.
ORIGIN_ROWS = 100
#: The most inputs one revision may name, and the longest text id.
INPUTS_MAX = 100
TEXT_ID_MAX = 200


def check_inputs(inputs: Any, config: EnrichmentConfig) -> list[dict[str, Any]]:
    """A session's inputs: 1 to INPUTS_MAX distinct ``{entity_type, id}`` of configured entity types, each
    id an integer or a short string."""
    form = (f"inputs is a list of 1 to {INPUTS_MAX} {{entity_type, id}} objects; entity types: "
            f"{', '.join(sorted(config.entities))}.")
    if not isinstance(inputs, list) or not 1 <= len(inputs) <= INPUTS_MAX:
        raise InvalidInput(form, field="inputs")
    checked, seen = [], set()
    for number, item in enumerate(inputs):
        if (not isinstance(item, dict) or set(item) != {"entity_type", "id"} or not isinstance(item["entity_type"], str)
                or item["entity_type"] not in config.entities):
            raise InvalidInput(form, field=f"inputs[{number}]")
        value = item["id"]
        if isinstance(value, bool) or not (
                (isinstance(value, int) and abs(value) <= INT64_MAX)
                or (isinstance(value, str) and 0 < len(value) <= TEXT_ID_MAX and value.isprintable())):
            raise InvalidInput(f"An input id is an integer or a printable string of up to {TEXT_ID_MAX} characters.",
                               field=f"inputs[{number}].id")
        key = (item["entity_type"], canonical_json(value))
        if key in seen:
            raise InvalidInput("inputs names the same entity twice.", field=f"inputs[{number}]")
        seen.add(key)
        checked.append({"entity_type": item["entity_type"], "id": value})
    return checked


@dataclass(frozen=True)
class Fact:
    kind: str
    subject: str
    predicate: str
    object: Any
    capture: str | None = None
    pointer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "predicate": self.predicate, "object": self.object,
                "capture": self.capture, "pointer": self.pointer}


@dataclass(frozen=True)
class Looked:
    """One lookup's answer: the capture id and the capture document (request, origin, result)."""

    capture: str
    document: dict[str, Any]

    @property
    def rows(self) -> list[list[Any]]:
        return list(self.document["result"].get("rows", []))

    @property
    def columns(self) -> list[str]:
        return list(self.document["result"].get("columns", []))


#: Runs one query (a project-query-v1 request) and returns its capture; raises for a refusal.
Lookup = Callable[[dict[str, Any]], Looked]


def is_cut(value: Any) -> bool:
    """Whether a captured cell is a value the answer cut: ``{"text", "chars", "truncated": true}`` (or
    ``{"base64", "bytes", "truncated": true}``), only the start of what the database holds."""
    return isinstance(value, dict) and value.get("truncated") is True


def followable(value: Any) -> str | None:
    """None when a captured value is an id a relationship can follow (an integer that is not a boolean,
    or text); otherwise why not: ``value_cut`` for a cut cell, ``not_an_id`` for anything else (a float,
    even a whole one, a boolean, an object or a list). The lookup of a followed value asks for exactly
    that value; a cut cell is only the start of one, and the others are no integer or text key."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return None
    return "value_cut" if is_cut(value) else "not_an_id"


def entity_name(entity_type: str, value: Any) -> str:
    """How an entity is named in facts: ``creature:1001`` (strings as they are, numbers canonical)."""
    return f"{entity_type}:{value if isinstance(value, str) else canonical_json(value)}"


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) from its reference tokens."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


@dataclass
class Walk:
    config: EnrichmentConfig
    lookup: Lookup
    facts: list[Fact] = field(default_factory=list)
    #: Distinct requests this walk needed, in the order first asked (canonical JSON -> answer).
    answers: dict[str, Looked | ArmariusError] = field(default_factory=dict)
    relationships: int = 0
    #: Follow-up rows already stated (entity name, request), so a row reached twice is stated once.
    stated: set[tuple[str, str]] = field(default_factory=set)
    stated_symbols: set[str] = field(default_factory=set)

    def run(self, inputs: Sequence[tuple[str, Any]]) -> list[Fact]:
        limits = self.config.limits
        queue: deque[tuple[str, Any, int, str]] = deque((kind, value, 0, "input") for kind, value in inputs)
        seen = {(kind, canonical_json(value)) for kind, value in inputs}
        while queue:
            entity_type, value, depth, standing = queue.popleft()
            subject = entity_name(entity_type, value)
            entity = self.config.entities[entity_type]
            looked = self._ask(self._entity_request(entity, value), subject)
            if looked is None:
                continue
            row = self._entity_facts(entity, subject, standing, looked)
            if row is None:
                continue
            for link in self.config.relationships_of(entity_type):
                if depth >= limits.max_depth:
                    self._skip(subject, link.relation, {"reason": "max_depth", "depth": depth})
                    continue
                for target in self._follow(link, entity, value, looked, row, subject):
                    assert link.entity_type is not None
                    key = (link.entity_type, canonical_json(target))
                    if key not in seen:  # a cycle ends here: an entity is looked up once
                        seen.add(key)
                        queue.append((link.entity_type, target, depth + 1, f"referenced by {subject}"))
        return self.facts

    # Lookups -----------------------------------------------------------------------------------

    def _ask(self, request: dict[str, Any], subject: str) -> Looked | None:
        """The answer to a request (asked once per walk); None, with a coverage fact, when it was not
        asked (the query limit) or was refused."""
        key = canonical_json(request)
        if key not in self.answers:
            if len(self.answers) >= self.config.limits.max_queries:
                self._skip(subject, request["kind"], {"reason": "max_queries", "request": request})
                return None
            try:
                self.answers[key] = self.lookup(request)
            except (InvalidInput, NotFound) as refusal:  # the request's own fault; anything else stops the walk
                self.answers[key] = refusal
        answer = self.answers[key]
        if isinstance(answer, ArmariusError):
            self._skip(subject, request["kind"], {"reason": "refused", "code": answer.code, "request": request})
            return None
        return answer

    def _entity_request(self, entity: EntityLookup, value: Any) -> dict[str, Any]:
        wanted = [entity.id_column, *entity.columns, *(text.column for text in self.config.texts_of(entity.type))]
        for link in self.config.relationships_of(entity.type):
            if _on_entity_row(link, entity):
                wanted += [link.from_column, *([link.when_column] if link.when_column else [])]
        return _rows(entity.database, entity.table, wanted, entity.id_column, value, ENTITY_ROWS)

    # Facts -------------------------------------------------------------------------------------

    def _entity_facts(self, entity: EntityLookup, subject: str, standing: str, looked: Looked) -> list[Any] | None:
        rows, columns = looked.rows, looked.columns
        if not rows:
            self._add(ENTITY, subject, "not_found_in", f"{entity.database}.{entity.table}.{entity.id_column}",
                      looked, pointer("result", "rows"))
            return None
        row = rows[0]
        index = columns.index(entity.id_column)
        self._add(ENTITY, subject, "is", {"type": entity.type, "standing": standing}, looked,
                  pointer("result", "rows", 0, index))
        texts = {text.column: text for text in self.config.texts_of(entity.type)}
        described = {}
        for column, text in texts.items():
            at = columns.index(column)
            if row[at] is None:
                continue
            described[column] = len(self.facts) + 1
            self._add(DESCRIPTION, subject, text.role, {"column": column, "origin": text.origin, "text": row[at]},
                      looked, pointer("result", "rows", 0, at))
        for column in entity.columns:
            if column == entity.id_column:
                continue
            at = columns.index(column)
            stated = {"see_fact": described[column]} if column in described else row[at]
            self._add(ENTITY, subject, column, stated, looked, pointer("result", "rows", 0, at))
        if len(rows) > 1:
            self._skip(subject, "is", {"reason": "id_not_unique", "table": f"{entity.database}.{entity.table}"},
                       looked, pointer("result", "rows", 1, index))
        return list(row)

    def _follow(self, link: Relationship, entity: EntityLookup, value: Any, looked: Looked, row: list[Any],
                subject: str) -> list[Any]:
        """One relationship's facts for one entity; the referenced entities' ids to look up next."""
        targets = []
        for target, captured, where in self._origins(link, entity, value, looked, row, subject):
            if target is None or link.ignores(target):
                self._skip(subject, link.relation, {"reason": "ignored_value", "value": target}, captured, where)
                continue
            unusable = followable(target)
            if unusable is not None:  # never a lookup, a symbol search or a relationship fact naming it
                self._skip(subject, link.relation, {"reason": unusable, "value": target}, captured, where)
                continue
            if self.relationships >= self.config.limits.max_relationships:
                self._skip(subject, link.relation, {"reason": "max_relationships", "value": target}, captured, where)
                continue
            self.relationships += 1
            if link.source is not None:
                self._symbol(link, subject, target, captured, where)
                continue
            assert link.entity_type is not None
            self._add(RELATIONSHIP, subject, link.relation, entity_name(link.entity_type, target), captured, where)
            target_entity = self.config.entities[link.entity_type]
            if (link.table, link.column) == (target_entity.table, target_entity.id_column):
                targets.append(target)
            else:
                self._state(link, target, subject)
        return targets

    def _origins(self, link: Relationship, entity: EntityLookup, value: Any, looked: Looked, row: list[Any],
                 subject: str) -> list[tuple[Any, Looked, str]]:
        """The values a relationship starts from, each with its capture and pointer."""
        if _on_entity_row(link, entity):
            columns = looked.columns
            if link.when_column is not None:
                when = columns.index(link.when_column)
                if _may_be(row[when], link.when_value):  # cut: its start matches, the rest is not known
                    why = {"reason": "value_cut", "when_column": link.when_column, "value": row[when]}
                    self._skip(subject, link.relation, why, looked, pointer("result", "rows", 0, when))
                    return []
                if row[when] != link.when_value:
                    return []
            at = columns.index(link.from_column)
            return [(row[at], looked, pointer("result", "rows", 0, at))]
        wanted = [link.from_id_column, link.from_column]
        filters = [(link.when_column, link.when_value)] if link.when_column else []
        origin = self._ask(_rows(link.database, link.from_table, wanted, link.from_id_column, value, ORIGIN_ROWS,
                                 filters), subject)
        if origin is None:
            return []
        if origin.document["result"].get("next_offset") is not None:
            self._skip(subject, link.relation, {"reason": "origin_rows_limit", "rows": ORIGIN_ROWS}, origin,
                       pointer("result", "next_offset"))
        at = origin.columns.index(link.from_column)
        return [(found[at], origin, pointer("result", "rows", number, at)) for number, found in enumerate(origin.rows)]

    def _state(self, link: Relationship, target: Any, subject: str) -> None:
        """A follow-up that is not the target entity's own lookup: its row is stated, not walked further."""
        entity_type, table, column = link.entity_type, link.table, link.column
        assert entity_type is not None
        assert table is not None
        assert column is not None
        name = entity_name(entity_type, target)
        request = _rows(link.database, table, [column, *link.columns], column, target, ENTITY_ROWS)
        if (name, canonical_json(request)) in self.stated:  # reached again: stated once
            return
        self.stated.add((name, canonical_json(request)))
        follow = self._ask(request, subject)
        if follow is None:
            return
        if not follow.rows:  # as for an entity lookup: a finding within the table asked, not left unsaid
            self._add(ENTITY, name, "not_found_in", f"{link.database}.{table}.{column}", follow,
                      pointer("result", "rows"))
            return
        for stated in link.columns:
            index = follow.columns.index(stated)
            self._add(ENTITY, name, stated, follow.rows[0][index], follow, pointer("result", "rows", 0, index))
        if len(follow.rows) > 1:  # only the first row is stated: say that it was not the only one
            self._skip(name, link.relation, {"reason": "id_not_unique", "table": f"{link.database}.{table}"},
                       follow, pointer("result", "rows", 1, follow.columns.index(column)))

    def _symbol(self, link: Relationship, subject: str, symbol: Any, captured: Looked, at: str) -> None:
        """A value naming a source symbol is searched as that symbol, never as a number over the history."""
        if not isinstance(symbol, str):
            self._skip(subject, link.relation, {"reason": "not_a_symbol", "value": symbol}, captured, at)
            return
        self._add(RELATIONSHIP, subject, link.relation, f"symbol:{symbol}", captured, at)
        if f"symbol:{symbol}" in self.stated_symbols:
            return
        self.stated_symbols.add(f"symbol:{symbol}")
        found = self._ask({"kind": "source.symbol", "source": link.source, "symbol": symbol}, subject)
        if found is not None:
            self._add(ENTITY, f"symbol:{symbol}", "source_hits", found.document["result"].get("total_hits"), found,
                      pointer("result", "total_hits"))

    def _add(self, kind: str, subject: str, predicate: str, stated: Any, looked: Looked | None = None,
             at: str | None = None) -> None:
        self.facts.append(Fact(kind, subject, predicate, stated, None if looked is None else looked.capture,
                               None if looked is None else at))

    def _skip(self, subject: str, what: str, why: dict[str, Any], looked: Looked | None = None,
              at: str | None = None) -> None:
        self._add(COVERAGE, subject, "not_followed", {"what": what, **why}, looked, at)


def _may_be(cell: Any, wanted: Any) -> bool:
    """Whether a cut text cell may hold ``wanted``: it is as long as the cell says and starts with the cell's
    text. (Cut bytes, text that is not UTF-8, or a wanted value of another length is known to differ.)"""
    return (is_cut(cell) and "text" in cell and not cell.get("not_utf8") and isinstance(wanted, str)
            and len(wanted) == cell.get("chars") and wanted.startswith(cell["text"]))


def _on_entity_row(link: Relationship, entity: EntityLookup) -> bool:
    """Whether the relationship's value sits on the entity's own row (no origin query needed)."""
    return (link.database, link.from_table, link.from_id_column) == (entity.database, entity.table, entity.id_column)


def _rows(database: str, table: str, columns: Sequence[str], id_column: str, value: Any, limit: int,
          filters: Sequence[tuple[str | None, Any]] = ()) -> dict[str, Any]:
    unique = list(dict.fromkeys(columns))
    conditions = [{"column": id_column, "op": "eq", "value": value}]
    conditions += [{"column": column, "op": "eq", "value": wanted} for column, wanted in filters if column]
    return {"kind": "database.rows", "database": database, "table": table, "columns": unique,
            "filters": conditions, "limit": limit}


def compact(facts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Facts for a model to read: each entity once — its type, standing and values (ids next to names) —
    each text once (entity values point at it), relationships as triples, and what was not followed."""
    entities: dict[str, dict[str, Any]] = {}
    relationships, descriptions, coverage = [], [], []
    for fact in facts:
        kind, subject, predicate, stated = fact["kind"], fact["subject"], fact["predicate"], fact["object"]
        if kind == ENTITY:  # what the entity is, and its values apart (a column may be named "type")
            entity = entities.setdefault(subject, {})
            if predicate == "is":
                entity.update(stated)
            elif predicate == "not_found_in":
                entity[predicate] = stated
            else:
                entity.setdefault("values", {})[predicate] = stated
        elif kind == RELATIONSHIP:
            relationships.append([subject, predicate, stated])
        elif kind == DESCRIPTION:
            descriptions.append({"fact": fact["seq"], "subject": subject, "role": predicate, **stated})
        else:
            coverage.append({"subject": subject, **stated})
    return {"entities": entities, "relationships": relationships, "descriptions": descriptions,
            "not_followed": coverage}
