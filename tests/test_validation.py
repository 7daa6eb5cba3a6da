"""Refusals of the request schemas name the field and say what to do, without echoing values."""

from __future__ import annotations

from typing import Any

import pytest

from armarius.errors import InvalidInput
from armarius.mcp.server import ALL_TOOLS
from armarius.research.service import validate_query


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
