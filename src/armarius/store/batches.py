"""PostgreSQL: the statements of one round trip as one query string.

A transaction's queued statements (see :class:`armarius.store.engine.Tx`) go to the server as one text
in the simple query protocol, one statement after the other, instead of one extended-protocol message
each in psycopg's pipeline mode. The client's work per round trip is then one string to build, one send
and one read, where the pipeline flushed each statement on its own and stepped a generator for each: on
this project's 2-core machine a transaction of four small statements took 0.41 ms of client CPU
(0.50 ms from start to end) in pipeline mode and 0.12 ms (0.23 ms) as one string (2026-12-06).

A statement with parameters runs as ``EXECUTE name(literal, ...)`` of a statement prepared once per
connection (``PREPARE name (types) AS ...``, the first time, in a query string of its own sent just before:
one round trip more, once per statement and connection, see :class:`Batch`), so the server plans it as
rarely as psycopg's own prepared statements do: written out with its literals, the server parsed
and planned each one every time, which cost more than the pipeline saved. The literals are psycopg's own
quoting (a client cursor's), and each parameter's declared type is the one psycopg gives a bound
parameter of that Python value (an int the smallest integer type that holds it; a text ``unknown``, so
that the server infers it from where it stands), so a statement means the same as when psycopg binds it.
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import psycopg

#: Statements kept prepared on one connection: preparing one more deallocates the one used least recently
#: (each holds its plans in the server's memory; psycopg keeps 100 of its own).
MAX_PREPARED = 256

_PLACEHOLDER = re.compile(r"%[%s]")
#: The smallest of these that holds an int is its type (PostgreSQL casts an integer type up, never down).
_INTEGERS = ((2**15, "smallint"), (2**31, "integer"), (2**63, "bigint"))
_TYPES = {bool: "boolean", float: "double precision", bytes: "bytea", bytearray: "bytea", memoryview: "bytea"}


def parameter_type(value: Any) -> str:
    """The type psycopg would declare for ``value`` bound as a parameter (text format); ``unknown`` for a
    text or a NULL, whose type the server infers from where it stands."""
    if isinstance(value, int) and not isinstance(value, bool):
        return next((name for bound, name in _INTEGERS if -bound <= value < bound), "numeric")
    return _TYPES.get(type(value), "unknown")


def numbered(sql: str) -> str:
    """``sql`` in psycopg's format (``%s`` a parameter, ``%%`` a percent sign) with ``$1``, ``$2``... instead."""
    numbers = itertools.count(1)
    return _PLACEHOLDER.sub(lambda match: "%" if match.group() == "%%" else f"${next(numbers)}", sql)


class Prepared:
    """The statements prepared on one connection (used by one thread at a time, as the pool hands it out)."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self._literals = psycopg.ClientCursor(connection)
        self._names: OrderedDict[tuple[str, tuple[str, ...]], str] = OrderedDict()  # least recently used first
        self._numbers = itertools.count(1)

    def batch(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> Batch:
        """One query string for ``statements`` (SQL in psycopg's format, parameters), in order, and the
        preparation it needs first."""
        batch, used = Batch(), set()
        try:
            for sql, params in statements:
                if not params:
                    batch.parts.append(sql.replace("%%", "%"))
                    continue
                key = (sql, tuple(parameter_type(value) for value in params))
                name = self._names.get(key)
                if name is None:
                    name = self._names[key] = f"armarius_{next(self._numbers)}"
                    batch.preparing.append(f"PREPARE {name} ({', '.join(key[1])}) AS {numbered(sql)}")
                    batch.new.append(key)
                else:
                    self._names.move_to_end(key)
                used.add(key)
                placeholders = ", ".join("%s" for _ in params)
                batch.parts.append(self._literals.mogrify(f"EXECUTE {name}({placeholders})", params))
        except BaseException:  # a value psycopg cannot quote: nothing is sent, so nothing new is prepared
            self.forget(batch)
            raise
        # The least recently used go, never one this batch runs (over the bound until the next batch, if it
        # runs more than the bound).
        while len(self._names) > MAX_PREPARED and (oldest := next(iter(self._names))) not in used:
            batch.preparing.insert(0, f"DEALLOCATE {self._names.pop(oldest)}")
        return batch

    def forget(self, batch: Batch) -> None:
        """``batch``'s preparation failed: a statement stopped it, and the PREPAREs after that one did not run.
        Its new statements are prepared again, under new names, when next used (one that did run stays on
        the server unused, as does one whose DEALLOCATE did not run: neither is part of the transaction,
        and a rollback undoes neither)."""
        for key in batch.new:
            self._names.pop(key, None)


class Batch:
    """One query string, each statement of which gives one result, and the PREPAREs and DEALLOCATEs to run
    before it, in a query string of their own: the server keeps the whole text a statement was prepared in
    as its source and copies it at every EXECUTE (a PREPARE in a round trip of 5,000 writes made each later
    EXECUTE of that statement 0.25 ms slower, on this project's machine)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        #: PREPAREs and DEALLOCATEs, sent first if there are any (a connection's first use of a statement).
        self.preparing: list[str] = []
        #: The statements this batch prepares.
        self.new: list[tuple[str, tuple[str, ...]]] = []

    @property
    def preparation(self) -> str:
        return ";\n".join(self.preparing)

    @property
    def text(self) -> str:
        return ";\n".join(self.parts)
