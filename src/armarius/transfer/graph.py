"""The reference MCP memory server's knowledge graph: a JSONL file, one record a line::

    {"type": "entity", "name": "John_Smith", "entityType": "person", "observations": ["Speaks Spanish"]}
    {"type": "relation", "from": "John_Smith", "to": "Anthropic", "relationType": "works_at"}

Each entity becomes an entry: its name the title, its type a tag and the first line of the body,
its observations a list, and its outgoing relations a list of ``relation_type [[target]]`` lines,
so that the relation's type stays in the text and its target is a link.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from armarius.errors import ArmariusError, InvalidInput
from armarius.files import open_named_regular
from armarius.transfer.model import (
    Note,
    Plan,
    Problems,
    SlugBook,
    clean_tags,
    clean_title,
    digest_of,
    shown_name,
    slugify,
)
from armarius.validation import check_storable


@dataclass
class _Entity:
    name: str
    kind: str
    where: str
    observations: list[str] = field(default_factory=list)
    relations: list[tuple[str, str]] = field(default_factory=list)


def read_graph(path: Path, *, prefix: str = "") -> Plan:
    data, name = _file_bytes(path), shown_name(path.name)
    plan, problems = Plan(kind="graph", source=name, digest=digest_of(data)), Problems()
    entities, relations = _parse(data, name, plan, problems)
    problems.raise_if_any(name)
    book = SlugBook(prefix)
    slugs = {name: book.assign(slugify(name)) for name in entities}
    for where, relation in relations:
        source = entities.get(relation["from"])
        if source is None:
            plan.notices.append(f"{where}: relation from {relation['from']!r} left out: no entity has that name")
            continue
        if relation["to"] not in slugs:
            plan.notices.append(f"{where}: relation to {relation['to']!r} kept as text: no entity has that name")
        link = (relation["relationType"], relation["to"])
        if link not in source.relations:
            source.relations.append(link)
    for name, entity in entities.items():
        slug = slugs[name]
        if slug != name:
            plan.renamed.append({"origin": entity.where, "name": name, "slug": slug})
        lines = [f"Type: {entity.kind}", "", *(f"- {item}" for item in entity.observations)]
        if entity.relations:
            lines += ["", "## Relations", ""]
            lines += [f"- {kind} [[{slugs[target]}]]" if target in slugs else f"- {kind} {target}"
                      for kind, target in entity.relations]
        plan.notes.append(Note(slug=slug, title=clean_title(name, slug), body="\n".join(lines) + "\n",
                               tags=clean_tags([entity.kind], entity.where, plan), origin=entity.where))
    return plan


def _file_bytes(path: Path) -> bytes:
    """The source file's bytes. A path that is no regular file is refused before anything is read: opening a
    FIFO would wait for a writer, a device such as /dev/zero read for ever."""
    with open_named_regular(path) as handle:
        if handle is None:
            raise InvalidInput(f"{shown_name(path.name)} is not a regular file (a FIFO, a device or a socket): "
                               "give the graph's JSONL file; nothing was imported.", field="source")
        return handle.read()


def _parse(data: bytes, name: str, plan: Plan, problems: Problems
           ) -> tuple[dict[str, _Entity], list[tuple[str, dict[str, str]]]]:
    """The entities (by name, a repeated name merged) and relations of the file, in file order."""
    entities: dict[str, _Entity] = {}
    relations: list[tuple[str, dict[str, str]]] = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        where = f"{name} line {number}"
        record = _record(raw, where, problems) if raw.strip() else None
        if record is None:
            continue
        if record.get("type") == "relation":
            fields = _fields(record, where, problems, **{"from": str, "to": str, "relationType": str})
            if fields is not None:
                relations.append((where, fields))
            continue
        if record.get("type") != "entity":
            problems.add(where, f"unknown record type {record.get('type')!r}: the memory server writes 'entity' "
                                "and 'relation'")
            continue
        fields = _fields(record, where, problems, name=str, entityType=str, observations=list)
        if fields is None:
            continue
        entity = entities.get(fields["name"])
        if entity is None:
            entity = entities[fields["name"]] = _Entity(fields["name"], fields["entityType"], where)
        else:
            plan.notices.append(f"{where}: a second entity named {fields['name']!r}; its observations were added "
                                f"to the one on {entity.where}")
        entity.observations += [item for item in fields["observations"] if item not in entity.observations]
    return entities, relations


def _record(raw: bytes, where: str, problems: Problems) -> dict[str, Any] | None:
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        problems.add(where, f"not UTF-8 text (byte {error.start + 1} of the line)")
        return None
    except json.JSONDecodeError as error:
        problems.add(where, f"not a complete JSON object ({error.msg} at column {error.colno})")
        return None
    except RecursionError:  # Python's parser gives up on lists or objects nested a thousand deep
        problems.add(where, "JSON nested too deeply to read (a record of the graph nests two levels)")
        return None
    if not isinstance(record, dict):
        problems.add(where, "not a JSON object")
        return None
    return record


def _fields(record: dict[str, Any], where: str, problems: Problems, **expected: type) -> dict[str, Any] | None:
    """The record's fields of the expected types, texts checked storable; None after naming a problem."""
    found: dict[str, Any] = {}
    for key, kind in expected.items():
        value = record.get(key)
        texts: list[Any] = value if isinstance(value, list) else [value]
        if not isinstance(value, kind) or not all(isinstance(text, str) for text in texts) or (
                isinstance(value, str) and not value.strip()):
            problems.add(where, f"{record['type']} without {'a text' if kind is str else 'a list of texts'} {key!r}")
            return None
        try:
            for text in texts:
                check_storable(text, key)
        except ArmariusError as error:
            problems.add(where, error.message)
            return None
        found[key] = value
    return found
