"""Repairs' SQL: the repair row, its status history (events) and its pending operations."""

from __future__ import annotations

import json
from typing import Any

from armarius.canonical import canonical_json
from armarius.store import Row, Tx

_REPAIR_COLUMNS = (
    "id, session_id, subject, conflict, alternatives, status, reformulation_requested, comment, chosen_option, "
    "applied_revision, activation_deferred, snapshot, correction, base_fingerprint, result_fingerprint, "
    "proposer_id, proposer, decided_by, created_at, updated_at"
)
#: The columns a listing shows (no alternatives' contents, no correction).
_SUMMARY_COLUMNS = (
    "id, session_id, conflict, status, reformulation_requested, comment, chosen_option, applied_revision, "
    "activation_deferred, proposer, decided_by, created_at, updated_at"
)


def _lock(tx: Tx) -> str:
    return " FOR UPDATE" if tx.dialect == "postgresql" else ""


def insert_repair(tx: Tx, *, session_id: int, subject: str, conflict: str, alternatives: list[dict[str, Any]],
                  snapshot: dict[str, str] | None, proposer_id: int, proposer: str, at: str) -> int:
    row = tx.one(
        "INSERT INTO repairs (workspace_id, session_id, subject, conflict, alternatives, status, snapshot, "
        "proposer_id, proposer, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'proposed', ?, ?, ?, ?, ?) RETURNING id",
        (tx.require_workspace(), session_id, subject, conflict, canonical_json(alternatives),
         None if snapshot is None else canonical_json(snapshot), proposer_id, proposer, at, at),
    )
    assert row is not None
    return int(row["id"])


def repair(tx: Tx, repair_id: int, *, lock: bool = False) -> Row | None:
    """The repair row, decoded (``lock``: held against other writers until the transaction ends)."""
    row = tx.one(f"SELECT {_REPAIR_COLUMNS} FROM repairs WHERE workspace_id = ? AND id = ?"
                 f"{_lock(tx) if lock else ''}", (tx.require_workspace(), repair_id))
    return None if row is None else _decoded(row, "alternatives", "snapshot", "correction")


def repairs_page(tx: Tx, *, proposer_id: int | None, session_id: int | None, status: str | None,
                 after: int | None, newest_first: bool, limit: int, contains: str | None) -> list[Row]:
    """Repairs by id (oldest or newest first) after the cursor id, through repairs_by_status or
    repairs_of_session: of one proposer or all, one session or all, one status or any."""
    sql, params = _filtered(tx, proposer_id=proposer_id, session_id=session_id, status=status)
    if contains:
        sql = f"{sql} AND ({_contains(tx, 'conflict')} OR {_contains(tx, 'proposer')})"
        params += [contains.lower()] * 2
    if after is not None:
        sql, params = f"{sql} AND id {'<' if newest_first else '>'} ?", [*params, after]
    rows = tx.all(f"{sql} ORDER BY id {'DESC' if newest_first else ''} LIMIT ?", (*params, limit))
    return [_flags(row) for row in rows]


def summary(tx: Tx, *, proposer_id: int | None, status: str) -> Row:
    """How many repairs are in a status (count) and when the oldest of them was proposed (oldest_at)."""
    sql, params = _filtered(tx, proposer_id=proposer_id, session_id=None, status=status,
                            columns="count(*) AS count, min(created_at) AS oldest_at")
    row = tx.one(sql, params)
    assert row is not None
    return row


def _filtered(tx: Tx, *, proposer_id: int | None, session_id: int | None, status: str | None,
              columns: str = _SUMMARY_COLUMNS) -> tuple[str, list[Any]]:
    sql = f"SELECT {columns} FROM repairs WHERE workspace_id = ?"
    params: list[Any] = [tx.require_workspace()]
    for column, value in (("proposer_id", proposer_id), ("session_id", session_id), ("status", status)):
        if value is not None:
            sql, params = f"{sql} AND {column} = ?", [*params, value]
    return sql, params


def _contains(tx: Tx, column: str) -> str:
    """A condition: the column, lowercased, contains the (lowercased) parameter as it is (no pattern syntax)."""
    return f"instr(lower({column}), ?) > 0" if tx.dialect == "sqlite" else f"strpos(lower({column}), ?) > 0"


def update_repair(tx: Tx, repair_id: int, *, at: str, **changes: Any) -> None:
    values = [canonical_json(value) if isinstance(value, dict) else value for value in changes.values()]
    assignments = ", ".join(f"{column} = ?" for column in changes)
    tx.execute(f"UPDATE repairs SET {assignments}, updated_at = ? WHERE workspace_id = ? AND id = ?",
               (*values, at, tx.require_workspace(), repair_id))


# The status history --------------------------------------------------------------------------------


def append_event(tx: Tx, repair_id: int, *, event: str, status: str, actor: str, details: dict[str, Any],
                 at: str) -> int:
    workspace = tx.require_workspace()
    row = tx.one(
        "INSERT INTO repair_events (workspace_id, repair_id, seq, event, status, actor, details, created_at) "
        "SELECT ?, ?, coalesce(max(seq), 0) + 1, ?, ?, ?, ?, ? FROM repair_events "
        "WHERE workspace_id = ? AND repair_id = ? RETURNING seq",
        (workspace, repair_id, event, status, actor, canonical_json(details), at, workspace, repair_id),
    )
    assert row is not None
    return int(row["seq"])


def events(tx: Tx, repair_id: int) -> list[Row]:
    rows = tx.all("SELECT seq, event, status, actor, details, created_at FROM repair_events "
                  "WHERE workspace_id = ? AND repair_id = ? ORDER BY seq", (tx.require_workspace(), repair_id))
    return [_decoded(row, "details") for row in rows]


# Pending operations --------------------------------------------------------------------------------


def insert_operation(tx: Tx, repair_id: int, *, kind: str, payload: dict[str, Any], at: str) -> int:
    row = tx.one("INSERT INTO pending_operations (workspace_id, kind, repair_id, payload, created_at) "
                 "VALUES (?, ?, ?, ?, ?) RETURNING id",
                 (tx.require_workspace(), kind, repair_id, canonical_json(payload), at))
    assert row is not None
    return int(row["id"])


def operations(tx: Tx, repair_id: int, *, open_only: bool = False) -> list[Row]:
    """The repair's operations, oldest first (``open_only``: those not done yet)."""
    sql = ("SELECT id, kind, payload, attempts, last_error, created_at, done_at FROM pending_operations "
           "WHERE workspace_id = ? AND repair_id = ?")
    rows = tx.all(f"{sql}{' AND done_at IS NULL' if open_only else ''} ORDER BY id",
                  (tx.require_workspace(), repair_id))
    return [_decoded(row, "payload") for row in rows]


def finish_operations(tx: Tx, operation_ids: list[int], *, at: str) -> int:
    """Mark operations done (those still open); how many were."""
    if not operation_ids:
        return 0
    return tx.execute(
        f"UPDATE pending_operations SET done_at = ?, attempts = attempts + 1 WHERE workspace_id = ? "
        f"AND done_at IS NULL AND id IN ({', '.join('?' for _ in operation_ids)})",
        (at, tx.require_workspace(), *operation_ids),
    )


def fail_operations(tx: Tx, operation_ids: list[int], *, error: str) -> None:
    """Count a failed attempt of each operation (still open) and say what failed."""
    if operation_ids:
        tx.execute(
            f"UPDATE pending_operations SET attempts = attempts + 1, last_error = ? WHERE workspace_id = ? "
            f"AND done_at IS NULL AND id IN ({', '.join('?' for _ in operation_ids)})",
            (error, tx.require_workspace(), *operation_ids),
        )


def _flags(row: Row) -> Row:
    for column in ("reformulation_requested", "activation_deferred"):
        if column in row:
            row[column] = bool(row[column])
    return row


def _decoded(row: Row, *columns: str) -> Row:
    for column in columns:
        if row.get(column) is not None:
            row[column] = json.loads(row[column])
    return _flags(row)
