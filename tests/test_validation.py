"""Refusals of the request schemas name the field and say what to do, without echoing values."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from armarius.errors import InvalidInput
from armarius.mcp.server import ALL_TOOLS
from armarius.research.service import _KINDS as QUERY_KINDS
from armarius.research.service import query_schema, validate_query
from armarius.validation import LIST_SLACK, Schema, _shape, check, inline_refs
from tests.security.fuzz_values import Mutator, SchemaFuzz


def _refusal(tool: str, arguments: dict[str, Any]) -> InvalidInput:
    with pytest.raises(InvalidInput) as refused:
        next(t for t in ALL_TOOLS if t.name == tool).validate(arguments)
    return refused.value


@pytest.mark.parametrize("tool", [tool.name for tool in ALL_TOOLS])
def test_an_unknown_field_is_named_with_the_fields_there_are(tool: str) -> None:
    refusal = _refusal(tool, {"limt": 3})
    assert "'limt' is not a field" in refusal.message
    assert refusal.details["unknown"] == "'limt'"
    for name in next(t for t in ALL_TOOLS if t.name == tool).properties or {}:
        assert name in refusal.message


def test_an_unknown_field_inside_a_query_names_where_it_is() -> None:
    with pytest.raises(InvalidInput) as refused:
        validate_query({"kind": "database.rows", "table": "t",
                        "filters": [{"column": "a", "op": "eq", "value": 1, "operand": 2}]})
    assert refused.value.details["field"] == "filters.0"
    assert "'operand' is not a field in 'filters.0'" in refused.value.message


def test_an_unknown_field_name_is_cut_and_escaped() -> None:
    refusal = _refusal("recall", {"query": "x", "\u202e" + "y" * 500 + "\x00": 1})
    assert len(refusal.message) < 400
    assert all(ch.isprintable() for ch in refusal.message)


@pytest.mark.parametrize("spelling", [{}, {"op": "eq", "operator": "eq"}])
def test_a_filter_takes_exactly_one_of_op_and_operator(spelling: dict[str, str]) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate_query({"kind": "database.count", "table": "t", "filters": [{"column": "a", "value": 1, **spelling}]})
    assert "exactly one of: op, operator" in refused.value.message


# The compiled check -------------------------------------------------------------------------------

def _query_schemas() -> list[tuple[str, dict[str, Any]]]:
    definitions = query_schema()["$defs"]
    return [(f"project query {kind}", inline_refs(definitions[name], definitions))
            for kind, name in QUERY_KINDS.items()]


SCHEMAS = [(tool.name, tool.input_schema) for tool in ALL_TOOLS] + _query_schemas()


def _outcome(schema: Schema, value: dict[str, Any]) -> Any:
    try:
        return "accepted", check(schema, value, what="the request")
    except InvalidInput as refusal:
        return "refused", refusal.message, refusal.details


@pytest.mark.parametrize(("name", "schema"), SCHEMAS, ids=[name for name, _ in SCHEMAS])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_compiled_check_answers_as_the_json_schema_validator(name: str, schema: dict[str, Any],
                                                                  data: st.DataObject) -> None:
    """Valid, hostile-but-valid, schema-shaped and mutated requests: accepted or refused alike, with the
    same refusal; and a plain valid request is accepted by the compiled validator itself (the fast path)."""
    fuzz = SchemaFuzz({}, ("x",))
    value = data.draw(fuzz.valid(schema) | fuzz.valid(schema, taint=True) | fuzz.shaped(schema))
    mutant = Mutator(("x",)).mutate(dict(value), data.draw(st.randoms(use_true_random=False)))
    both, strict = Schema(schema), Schema(schema, compiled=False)
    for request in (value, mutant):
        seen = _outcome(both, request)
        assert seen == _outcome(strict, request), (name, request)
        if seen[0] == "accepted" and _shape(request) == ((None, None), True):
            assert both.surely_valid(request), (name, request)


class _Unwalkable(list[Any]):
    """A list no validator may walk item by item (it costs some 20 µs an item: a request of millions)."""

    def __iter__(self) -> Any:
        raise AssertionError("a validator walked the list")


BOUNDED = [(name, schema) for name, schema in SCHEMAS if Schema(schema).longest_list is not None]


def test_the_longest_list_is_the_schemas_largest_max_items() -> None:
    longest = {name: Schema(schema).longest_list for name, schema in SCHEMAS}
    assert (longest["recall"], longest["remember"], longest["repair_prepare"]) == (20, 20, 20)
    assert (longest["project query database.rows"], longest["whoami"]) == (1000, 0)
    assert longest["project_query"] is None  # its arguments are any object here, checked by the query's schema
    assert {"recall", "project query database.rows", "session_open"} <= {name for name, _ in BOUNDED}


@pytest.mark.parametrize(("name", "schema"), BOUNDED, ids=[name for name, _ in BOUNDED])
def test_a_list_longer_than_any_the_schema_takes_is_refused_unwalked(name: str, schema: dict[str, Any]) -> None:
    """A list longer than every maxItems of the schema (and than LIST_SLACK) is refused before any validator
    reads its items, in every field (and the JSON Schema validator would refuse it too)."""
    compiled = Schema(schema)
    assert compiled.longest_list is not None
    too_long = [0] * (max(compiled.longest_list, LIST_SLACK) + 1)
    for field in [*schema.get("properties", {}), "unknown"]:
        with pytest.raises(InvalidInput) as refused:
            check(compiled, {field: _Unwalkable(too_long)}, what="the request")
        assert (refused.value.details["field"], refused.value.details["rule"]) == (field, "maxItems")
        assert list(Schema(schema, compiled=False).strict.iter_errors({field: too_long})), (name, field)


def test_every_request_schema_has_the_compiled_check() -> None:
    """The schemas use only keywords both validators read alike: each gets the fast path."""
    assert [name for name, schema in SCHEMAS if not Schema(schema).compiled] == []


@pytest.mark.parametrize(("pattern", "read"), [
    ("^[a-z]+$", "^[a-z]+\\Z"),
    ("^(?:a|b$)$", "^(?:a|b\\Z)\\Z"),
    ("^[$]+$", "^[$]+\\Z"),  # in a class, a dollar sign
    ("^[^\\]$]$", "^[^\\]$]\\Z"),  # an escaped ] does not end the class
    ("^a\\$$", "^a\\$\\Z"),  # an escaped dollar sign
])
def test_a_pattern_s_dollar_is_the_end_of_the_text_only(pattern: str, read: str) -> None:
    from armarius.validation import ecmascript_ends

    assert ecmascript_ends(pattern) == read
