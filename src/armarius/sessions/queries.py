"""Sessions' SQL: the session row, its checkpoints, budget reservations and evidence records."""

from __future__ import annotations

import json
from typing import Any

from armarius.canonical import canonical_json
from armarius.sessions.model import Reservation
from armarius.store import Row, Tx

_SESSION_COLUMNS = (
    "id, owner_id, owner, subject, status, reason, resume_state, retry_not_before, budget, used, invalid_streak, "
    "inputs_revision, enriched_revision, created_at, updated_at"
)
#: A session with its live reservations counted (running queries, and one a failed source left held).
_SESSION_WITH_RESERVATIONS = (
    f"SELECT {', '.join('s.' + column for column in _SESSION_COLUMNS.split(', '))}, "
    "(SELECT count(*) FROM session_reservations r WHERE r.workspace_id = s.workspace_id AND r.session_id = s.id "
    " AND r.state = 'reserved') AS reserved, "
    "(SELECT count(*) FROM session_reservations r WHERE r.workspace_id = s.workspace_id AND r.session_id = s.id "
    " AND r.state = 'held') AS held "
    "FROM sessions s WHERE s.workspace_id = ?"
)


def _lock(tx: Tx) -> str:
    return " FOR UPDATE" if tx.dialect == "postgresql" else ""


def insert_session(tx: Tx, *, owner_id: int, owner: str, subject: str, budget: int, at: str) -> int:
    row = tx.one(
        "INSERT INTO sessions (workspace_id, owner_id, owner, subject, status, budget, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, 'open', ?, ?, ?) RETURNING id",
        (tx.require_workspace(), owner_id, owner, subject, budget, at, at),
    )
    assert row is not None
    return int(row["id"])


def session(tx: Tx, session_id: int, *, lock: bool = False) -> Row | None:
    """The session row (``lock``: held against other writers until the transaction ends)."""
    return tx.one(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE workspace_id = ? AND id = ?"
                  f"{_lock(tx) if lock else ''}", (tx.require_workspace(), session_id))


def session_with_reservations(tx: Tx, session_id: int) -> Row | None:
    return tx.one(f"{_SESSION_WITH_RESERVATIONS} AND s.id = ?", (tx.require_workspace(), session_id))


def sessions(tx: Tx, *, owner_id: int | None, status: str | None, limit: int) -> list[Row]:
    """Sessions, newest first: of one owner or all, in one status or any."""
    sql = _SESSION_WITH_RESERVATIONS
    params: list[Any] = [tx.require_workspace()]
    if owner_id is not None:
        sql, params = f"{sql} AND s.owner_id = ?", [*params, owner_id]
    if status is not None:
        sql, params = f"{sql} AND s.status = ?", [*params, status]
    return tx.all(f"{sql} ORDER BY s.id DESC LIMIT ?", (*params, limit))


def update_session(tx: Tx, session_id: int, *, at: str, **changes: Any) -> None:
    assignments = ", ".join(f"{column} = ?" for column in changes)
    tx.execute(f"UPDATE sessions SET {assignments}, updated_at = ? WHERE workspace_id = ? AND id = ?",
               (*changes.values(), at, tx.require_workspace(), session_id))


# Checkpoints ---------------------------------------------------------------------------------------


def append_checkpoint(tx: Tx, session_id: int, *, event: str, status: str, reason: str | None = None,
                      resume_state: dict[str, Any] | None = None, actor: str, details: dict[str, Any],
                      at: str) -> int:
    workspace = tx.require_workspace()
    seq = int(tx.scalar("SELECT coalesce(max(seq), 0) + 1 AS next FROM session_checkpoints "
                        "WHERE workspace_id = ? AND session_id = ?", (workspace, session_id)))
    tx.execute(
        "INSERT INTO session_checkpoints (workspace_id, session_id, seq, event, status, reason, resume_state, actor, "
        "details, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (workspace, session_id, seq, event, status, reason,
         None if resume_state is None else canonical_json(resume_state), actor, canonical_json(details), at),
    )
    return seq


def checkpoints(tx: Tx, session_id: int) -> list[Row]:
    rows = tx.all("SELECT seq, event, status, reason, resume_state, actor, details, created_at "
                  "FROM session_checkpoints WHERE workspace_id = ? AND session_id = ? ORDER BY seq",
                  (tx.require_workspace(), session_id))
    return [_decoded(row, "resume_state", "details") for row in rows]


def last_blocking_checkpoint(tx: Tx, session_id: int) -> Row | None:
    row = tx.one("SELECT seq, reason, resume_state, created_at FROM session_checkpoints "
                 "WHERE workspace_id = ? AND session_id = ? AND event = 'blocked' ORDER BY seq DESC LIMIT 1",
                 (tx.require_workspace(), session_id))
    return None if row is None else _decoded(row, "resume_state")


# Reservations --------------------------------------------------------------------------------------


def insert_reservation(tx: Tx, session_id: int, *, actor: str, holder: str, lease_until: str, at: str,
                       state: Reservation = Reservation.RESERVED) -> int:
    row = tx.one(
        "INSERT INTO session_reservations (workspace_id, session_id, state, actor, holder, lease_until, created_at, "
        "settled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (tx.require_workspace(), session_id, state.value, actor, holder, lease_until, at,
         None if state is Reservation.RESERVED else at),
    )
    assert row is not None
    return int(row["id"])


def live_reservations(tx: Tx, session_id: int) -> list[Row]:
    """The session's reservations still counted against its budget (running or held), oldest first."""
    return tx.all("SELECT id, state, actor, holder, lease_until, created_at FROM session_reservations "
                  "WHERE workspace_id = ? AND session_id = ? AND state IN ('reserved', 'held') ORDER BY id",
                  (tx.require_workspace(), session_id))


def renew(tx: Tx, reservation_id: int, *, actor: str, holder: str, lease_until: str) -> None:
    """Turn a held reservation back into a running one, for the query that retries."""
    tx.execute("UPDATE session_reservations SET state = 'reserved', actor = ?, holder = ?, lease_until = ? "
               "WHERE workspace_id = ? AND id = ?",
               (actor, holder, lease_until, tx.require_workspace(), reservation_id))


def settle(tx: Tx, reservation_id: int, *, to: Reservation, at: str, only_from: Reservation = Reservation.RESERVED,
           ) -> bool:
    """Move one reservation on from ``only_from``; False when it is no longer there (released meanwhile)."""
    settled_at = None if to is Reservation.HELD else at
    return tx.execute(
        "UPDATE session_reservations SET state = ?, settled_at = ? WHERE workspace_id = ? AND id = ? AND state = ?",
        (to.value, settled_at, tx.require_workspace(), reservation_id, only_from.value),
    ) == 1


def release_all(tx: Tx, session_id: int, *, at: str) -> int:
    """Give back every live reservation of a session (when it closes); how many there were."""
    return tx.execute(
        "UPDATE session_reservations SET state = 'released', settled_at = ? "
        "WHERE workspace_id = ? AND session_id = ? AND state IN ('reserved', 'held')",
        (at, tx.require_workspace(), session_id),
    )


def agent_records_count(tx: Tx, session_id: int) -> int:
    """Evidence records of the session's own queries (enrichment's cost no budget)."""
    return int(tx.scalar("SELECT count(*) AS n FROM evidence_records WHERE workspace_id = ? AND session_id = ? "
                         "AND enrichment_revision IS NULL", (tx.require_workspace(), session_id)))


def consumed_count(tx: Tx, session_id: int) -> int:
    return int(tx.scalar("SELECT count(*) AS n FROM session_reservations WHERE workspace_id = ? AND session_id = ? "
                         "AND state = 'consumed'", (tx.require_workspace(), session_id)))


# Evidence ------------------------------------------------------------------------------------------


def insert_capture(tx: Tx, capture_id: str, content: str, *, at: str) -> bool:
    """Store a capture once per workspace; True when it is new here."""
    return tx.execute(
        "INSERT INTO captures (workspace_id, capture_id, content, created_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING", (tx.require_workspace(), capture_id, content, at),
    ) == 1


def insert_record(tx: Tx, session_id: int, *, capture_id: str, request: dict[str, Any], principal_id: int,
                  actor: str, at: str, enrichment_revision: int | None = None) -> tuple[int, int | None]:
    """Append the session's next evidence record; its number, and the session's first record of the same
    capture that it repeats (an identical result is a repeat, not new evidence), or None."""
    workspace = tx.require_workspace()
    row = tx.one(
        "INSERT INTO evidence_records (workspace_id, session_id, seq, capture_id, request_kind, request, principal_id, "
        "actor, repeat_of, created_at, enrichment_revision) "
        "SELECT ?, ?, coalesce(max(seq), 0) + 1, ?, ?, ?, ?, ?, min(CASE WHEN capture_id = ? THEN seq END), ?, ? "
        "FROM evidence_records WHERE workspace_id = ? AND session_id = ? RETURNING seq, repeat_of",
        (workspace, session_id, capture_id, request["kind"], canonical_json(request), principal_id, actor, capture_id,
         at, enrichment_revision, workspace, session_id),
    )
    assert row is not None
    return int(row["seq"]), None if row["repeat_of"] is None else int(row["repeat_of"])


def records(tx: Tx, session_id: int, *, latest: int | None = None) -> list[Row]:
    """The session's evidence records in order (``latest``: only the last few)."""
    sql = ("SELECT seq, capture_id, request_kind, request, actor, repeat_of, enrichment_revision, created_at "
           "FROM evidence_records WHERE workspace_id = ? AND session_id = ?")
    if latest is None:
        return tx.all(f"{sql} ORDER BY seq", (tx.require_workspace(), session_id))
    rows = tx.all(f"{sql} ORDER BY seq DESC LIMIT ?", (tx.require_workspace(), session_id, latest))
    return rows[::-1]


def evidence_summary(tx: Tx, session_id: int) -> list[Row]:
    """(request kind, records, repeats) of a session."""
    return tx.all("SELECT request_kind, count(*) AS records, count(repeat_of) AS repeats FROM evidence_records "
                  "WHERE workspace_id = ? AND session_id = ? GROUP BY request_kind ORDER BY request_kind",
                  (tx.require_workspace(), session_id))


def captures_of(tx: Tx, session_id: int) -> list[Row]:
    """Every capture the session's evidence records name, with the stored content (NULL when it is missing)."""
    return tx.all(
        "SELECT DISTINCT e.capture_id, c.content FROM evidence_records e LEFT JOIN captures c "
        "ON c.workspace_id = e.workspace_id AND c.capture_id = e.capture_id "
        "WHERE e.workspace_id = ? AND e.session_id = ? ORDER BY e.capture_id",
        (tx.require_workspace(), session_id),
    )


# Enrichment ----------------------------------------------------------------------------------------


def insert_inputs(tx: Tx, session_id: int, *, revision: int, inputs: list[dict[str, Any]], actor: str,
                  at: str) -> None:
    tx.execute("INSERT INTO session_inputs (workspace_id, session_id, revision, inputs, actor, created_at) "
               "VALUES (?, ?, ?, ?, ?, ?)",
               (tx.require_workspace(), session_id, revision, canonical_json(inputs), actor, at))


def inputs_of(tx: Tx, session_id: int, revision: int) -> list[dict[str, Any]]:
    text = tx.scalar("SELECT inputs FROM session_inputs WHERE workspace_id = ? AND session_id = ? AND revision = ?",
                     (tx.require_workspace(), session_id, revision))
    assert text is not None
    inputs: list[dict[str, Any]] = json.loads(text)
    return inputs


def recorded_answers(tx: Tx, session_id: int) -> dict[str, tuple[str, str]]:
    """Every request the session has an answer to (canonical JSON -> capture id and content)."""
    rows = tx.all("SELECT e.request, e.capture_id, c.content FROM evidence_records e JOIN captures c "
                  "ON c.workspace_id = e.workspace_id AND c.capture_id = e.capture_id "
                  "WHERE e.workspace_id = ? AND e.session_id = ? ORDER BY e.seq",
                  (tx.require_workspace(), session_id))
    return {row["request"]: (row["capture_id"], row["content"]) for row in rows}


def recorded_capture(tx: Tx, session_id: int, request: dict[str, Any]) -> tuple[str, str] | None:
    """The capture (id, content) of the session's first record of exactly this request, if any."""
    row = tx.one("SELECT e.capture_id, c.content FROM evidence_records e JOIN captures c "
                 "ON c.workspace_id = e.workspace_id AND c.capture_id = e.capture_id "
                 "WHERE e.workspace_id = ? AND e.session_id = ? AND e.request = ? ORDER BY e.seq LIMIT 1",
                 (tx.require_workspace(), session_id, canonical_json(request)))
    return None if row is None else (row["capture_id"], row["content"])


def insert_facts(tx: Tx, session_id: int, revision: int, facts: list[dict[str, Any]], *, at: str) -> None:
    workspace = tx.require_workspace()
    for seq, fact in enumerate(facts, start=1):
        tx.execute(
            "INSERT INTO session_facts (workspace_id, session_id, revision, seq, kind, subject, predicate, object, "
            "capture_id, pointer, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (workspace, session_id, revision, seq, fact["kind"], fact["subject"], fact["predicate"],
             canonical_json(fact["object"]), fact["capture"], fact["pointer"], at),
        )


def facts(tx: Tx, session_id: int, revision: int) -> list[Row]:
    rows = tx.all("SELECT seq, kind, subject, predicate, object, capture_id AS capture, pointer FROM session_facts "
                  "WHERE workspace_id = ? AND session_id = ? AND revision = ? ORDER BY seq",
                  (tx.require_workspace(), session_id, revision))
    return [_decoded(row, "object") for row in rows]


def _decoded(row: Row, *columns: str) -> Row:
    for column in columns:
        if row.get(column) is not None:
            row[column] = json.loads(row[column])
    return row
