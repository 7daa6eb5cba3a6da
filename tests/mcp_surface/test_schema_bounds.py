"""Every integer a request can carry is bounded by what storage and drivers hold, and every value
a refusal repeats is cut and escaped.

The tests walk the schemas themselves, so a new tool or query field is covered without a new test.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.errors import InvalidInput
from armarius.mcp.server import ALL_TOOLS
from armarius.research.service import query_schema, validate_query
from armarius.validation import INT64_MAX, inline_refs
from tests.helpers import Agent, agent_of, make_team
from tests.research.conftest import research_app  # noqa: F401  (a fixture used here)
from tests.research.repos import Repo

pytestmark = pytest.mark.anyio


def integer_fields(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Mapping[str, Any]]]:
    """(path, schema) of every node that admits an integer."""
    if isinstance(node, list):
        for item in node:
            yield from integer_fields(item, path)
        return
    if not isinstance(node, Mapping):
        return
    kinds = node.get("type")
    if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
        yield path, node
    for key, value in node.items():
        if key == "properties":
            for name, child in value.items():
                yield from integer_fields(child, (*path, name))
        elif key in ("items", "anyOf", "oneOf", "allOf"):
            yield from integer_fields(value, path)


def _query_kinds() -> dict[str, dict[str, Any]]:
    definitions = query_schema()["$defs"]
    return {
        definition["properties"]["kind"]["const"]: inline_refs(definition, definitions)
        for definition in definitions.values()
        if isinstance(definition.get("properties"), dict) and "const" in definition["properties"].get("kind", {})
    }


SCHEMAS = {**{f"tool {tool.name}": tool.input_schema for tool in ALL_TOOLS},
           **{f"query {kind}": schema for kind, schema in _query_kinds().items()}}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_integer_has_a_maximum_that_storage_holds(name: str) -> None:
    for path, node in integer_fields(SCHEMAS[name]):
        assert "maximum" in node, f"{name}: {'.'.join(path)} has no maximum"
        assert node["maximum"] <= INT64_MAX, f"{name}: {'.'.join(path)}"


#: A valid call of each tool that has integer fields, before one integer is pushed to its bound.
TOOL_CALLS: dict[str, dict[str, Any]] = {
    "remember": {"slug": "bounds/entry", "title": "Bounds", "body": "An entry for the bound tests."},
    "recall": {"query": "bounds"},
    "read": {"slug": "bounds/entry"},
    "list": {},
    "proposal_status": {"proposal": 1},
    "session_open": {"subject": "bounds", "budget": 1, "inputs": [{"entity_type": "quest", "id": 1}]},
    "session_show": {"session": 1},
    "sessions": {},
    "session_close": {"session": 1},
    "project_query": {"session": 1, "arguments": {"kind": "source.files", "substring": "x"}},
    "repair_target": {"session": 1, "kind": "entry", "name": "bounds/entry"},
    "repair_prepare": {"session": 1, "conflict": "bounds", "alternatives": [{
        "target": {"kind": "entry", "name": "bounds/entry", "revision": 1}, "title": "Bounds", "body": "Fixed.",
        "rationale": "bounds"}]},
    "repair_show": {"repair": 1},
}

TOOL_INTEGERS = [(tool.name, path) for tool in ALL_TOOLS for path, _ in integer_fields(tool.input_schema)]


def test_every_tool_with_integers_has_a_call_to_push() -> None:
    assert {name for name, _ in TOOL_INTEGERS} <= set(TOOL_CALLS)


def _with(arguments: Mapping[str, Any], path: tuple[str, ...], value: int) -> dict[str, Any]:
    """The call with the integer at ``path`` set: a field, of an object, or of the first object of a list."""
    field, *rest = path
    if not rest:
        return {**arguments, field: value}
    inner = arguments[field]
    if isinstance(inner, list):
        return {**arguments, field: [_with(inner[0], tuple(rest), value), *inner[1:]]}
    return {**arguments, field: _with(inner, tuple(rest), value)}


@pytest.mark.parametrize(("tool", "path"), TOOL_INTEGERS, ids=[f"{t}.{'.'.join(p)}" for t, p in TOOL_INTEGERS])
async def test_a_tool_integer_one_past_its_bound_is_invalid_input_and_the_bound_is_not_a_crash(
        research_app: tuple[Armarius, Repo], tool: str, path: tuple[str, ...]) -> None:  # noqa: F811
    app, _repo = research_app  # every tool is offered: the research tools need a configured source
    team = make_team(app)
    bound = dict(integer_fields(next(t for t in ALL_TOOLS if t.name == tool).input_schema))[path]["maximum"]
    async with agent_of(app, team.agent) as agent:
        created = await agent("remember", **TOOL_CALLS["remember"])
        assert "error" not in created
        past = await agent(tool, **_with(TOOL_CALLS[tool], path, bound + 1))
        assert past["error"] == "invalid_input"
        named = past["details"]["field"].split(".")  # a nested field is named with its position: inputs.0.id
        assert (named[0], named[-1]) == (path[0], path[-1])
        at = await agent(tool, **_with(TOOL_CALLS[tool], path, bound))
        assert at.get("error") != "internal", at
        huge = await agent(tool, **_with(TOOL_CALLS[tool], path, 2**64 + 1))
        assert huge["error"] == "invalid_input"


QUERY_CALLS: dict[str, dict[str, Any]] = {
    "source.files": {"substring": "x"}, "source.search": {"text": "x"}, "source.symbol": {"symbol": "x"},
    "source.registration": {"symbol": "x"}, "source.schema": {"text": "x"},
    "source.read": {"path": "a.txt", "start_line": 1, "end_line": 1},
    "database.tables": {}, "database.schema": {"table": "t"}, "database.rows": {"table": "t"},
    "database.count": {"table": "t"},
}


def test_every_query_kind_has_a_call_to_push() -> None:
    assert set(_query_kinds()) == set(QUERY_CALLS)


QUERY_INTEGERS = [(kind, path) for kind, schema in _query_kinds().items()
                  for path, node in integer_fields(schema) if node.get("type") == "integer"]


@pytest.mark.parametrize(("kind", "path"), QUERY_INTEGERS, ids=[f"{k}.{'.'.join(p)}" for k, p in QUERY_INTEGERS])
def test_a_query_integer_one_past_its_bound_is_invalid_input(kind: str, path: tuple[str, ...]) -> None:
    bound = dict(integer_fields(_query_kinds()[kind]))[path]["maximum"]
    query = {"kind": kind, **QUERY_CALLS[kind], path[-1]: bound + 1}
    with pytest.raises(InvalidInput) as refused:
        validate_query(query)
    assert refused.value.details["field"] == ".".join(path)
    validate_query({**query, path[-1]: bound})


HOSTILE = ["x" * 5000, "a\x00b" * 1000, "\u202eevil\u202c\n\r\t" * 500, "\x1b[31mred\x1b[0m" * 400]


def _printable(value: Any) -> bool:
    if isinstance(value, str):
        return all(ch.isprintable() for ch in value)
    if isinstance(value, Mapping):
        return all(_printable(v) for v in value.values())
    if isinstance(value, list):
        return all(_printable(v) for v in value)
    return True


async def _assert_echo_is_bounded(agent: Agent, tool: str, arguments: dict[str, Any]) -> None:
    answer = await agent(tool, **arguments)
    if "error" not in answer:
        return
    assert len(answer["message"]) <= 1000, (tool, len(answer["message"]))
    assert _printable(answer["message"]), (tool, answer["message"][:200])
    for value in answer["details"].values():
        assert not isinstance(value, str) or len(value) <= 200, (tool, value[:200])


@pytest.mark.parametrize("hostile", range(len(HOSTILE)))
async def test_what_a_refusal_repeats_is_cut_and_escaped(app: Armarius, hostile: int) -> None:
    """Unknown tools, unknown fields and every string field of every tool, filled with long text,
    NUL, bidirectional controls, line breaks and terminal escapes."""
    team = make_team(app)
    text = HOSTILE[hostile]
    async with agent_of(app, team.agent) as agent:
        await _assert_echo_is_bounded(agent, text, {})
        for tool in ALL_TOOLS:
            await _assert_echo_is_bounded(agent, tool.name, {text: 1})
            strings = [name for name, node in (tool.properties or {}).items() if node.get("type") == "string"]
            for name in strings:
                await _assert_echo_is_bounded(agent, tool.name, {**TOOL_CALLS.get(tool.name, {}), name: text})
