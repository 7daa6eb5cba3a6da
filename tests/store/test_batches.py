"""How PostgreSQL statements become one query string (store.batches): placeholders and parameter types."""

from __future__ import annotations

import pytest

from armarius.store.batches import numbered, parameter_type


def test_placeholders_become_numbered_and_doubled_percent_signs_single() -> None:
    assert numbered("SELECT %s, '100%%', %s || '%%s' FROM t WHERE a = %s") == (
        "SELECT $1, '100%', $2 || '%s' FROM t WHERE a = $3")


@pytest.mark.parametrize(("value", "declared"), [
    (0, "smallint"), (-(2**15), "smallint"), (2**15 - 1, "smallint"), (2**15, "integer"), (-(2**15) - 1, "integer"),
    (2**31 - 1, "integer"), (2**31, "bigint"), (-(2**63), "bigint"), (2**63, "numeric"), (True, "boolean"),
    (1.5, "double precision"), (b"x", "bytea"), (bytearray(b"x"), "bytea"), ("text", "unknown"), (None, "unknown"),
])
def test_a_parameter_is_declared_with_the_type_psycopg_binds_it_as(value: object, declared: str) -> None:
    assert parameter_type(value) == declared
