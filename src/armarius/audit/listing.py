"""One workspace's audit log as a person reads it: its events newest first, a page at a time, and whether
its chain verifies.

Like :func:`armarius.audit.chain.tail`, these take the database and a workspace id: the audit log is
core and knows no principals. Who may read it is the caller's rule: the CLI's ``armarius audit`` is an
operator command, and a network surface asks the same of a person as for identity administration, a
human with ``principals.manage`` in the workspace (SPEC §8).
"""

from __future__ import annotations

from typing import Any

from armarius.audit.chain import EVENT_COLUMNS, SYSTEM_CHAIN, _event, read_rows
from armarius.audit.verify import verify_workspace
from armarius.errors import InvalidInput
from armarius.store import Database

#: The most events one page lists.
PAGE_MAX = 200
#: The longest filter value (an action prefix, an actor's audit name, a subject).
FILTER_MAX = 300


def events_page(database: Database, workspace_id: int, *, before: int | None = None, limit: int = 50,
                action: str | None = None, actor: str | None = None, subject: str | None = None) -> dict[str, Any]:
    """A page of the workspace's events, newest first (by seq, through the primary key), each as
    :meth:`AuditEvent.to_dict` shows it: those before seq ``before`` (None: from the newest), whose action starts
    with ``action``, by exactly ``actor`` (an audit name such as ``human:ada``) and about exactly ``subject``.
    ``next``: the ``before`` that gives the next page (None: this is the last). An event Armarius did not write
    is listed too, with :attr:`AuditEvent.malformed` saying what is wrong with it (details that are not a JSON
    object, a value that is not text), never refused."""
    if not isinstance(workspace_id, int) or isinstance(workspace_id, bool) or workspace_id == SYSTEM_CHAIN:
        raise ValueError("events_page lists a workspace's chain")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= PAGE_MAX:
        raise InvalidInput(f"limit is from 1 to {PAGE_MAX}.", field="limit")
    if before is not None and (not isinstance(before, int) or isinstance(before, bool)):
        raise InvalidInput("before is the seq of the previous page's last event (its next).", field="before")
    sql = "FROM audit_events WHERE workspace_id = ?"
    if database.dialect == "sqlite":
        # A number that is not whole (SQLite stores what it is given) has no place among the pages, whose
        # ``before`` is a whole number; the chain's status reports such an event, as `armarius audit verify` does.
        sql += " AND typeof(seq) = 'integer'"
    params: list[Any] = [workspace_id]
    if before is not None:
        sql, params = f"{sql} AND seq < ?", [*params, before]
    prefix = _filter(action, "action")
    if prefix is not None:
        sql, params = f"{sql} AND substr(action, 1, ?) = ?", [*params, len(prefix), prefix]
    for column, value in (("actor", _filter(actor, "actor")), ("subject", _filter(subject, "subject"))):
        if value is not None:
            sql, params = f"{sql} AND {column} = ?", [*params, value]
    with database.transaction(workspace_id=workspace_id) as tx:
        rows = read_rows(tx, EVENT_COLUMNS, f"{sql} ORDER BY seq DESC LIMIT ?", (*params, limit + 1))
    items = [_event(row, workspace_id).to_dict() for row in rows[:limit]]
    return {"items": items, "next": items[-1]["seq"] if len(rows) > limit else None}


def chain_status(database: Database, workspace_id: int) -> dict[str, Any]:
    """Whether the workspace's chain verifies (its links, head and every event's MAC, as ``armarius audit verify``
    checks them): ``intact``, ``events_checked``, ``legacy_events`` and each problem (seq, kind, problem)."""
    report = verify_workspace(database, workspace_id)
    return {"intact": report.intact, "events_checked": report.events_checked, "legacy_events": report.legacy_events,
            "problems": [{"seq": problem.seq, "kind": problem.kind, "problem": problem.problem}
                         for problem in report.problems]}


def _filter(value: Any, field: str) -> str | None:
    """A filter's value as given (None or empty: no filter)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > FILTER_MAX or any(
            ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise InvalidInput(f"{field} is a text of up to {FILTER_MAX} characters.", field=field)
    return value
