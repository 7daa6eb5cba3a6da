"""Sessions' SQL: the session row, its checkpoints, budget reservations and evidence records."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from armarius.canonical import canonical_json
from armarius.sessions.model import Reservation
from armarius.store import Later, Row, Tx

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
    return session_later(tx, session_id, lock=lock).one()


def locked_with_live_reservations(tx: Tx, session_id: int) -> tuple[Row | None, list[Row]]:
    """The session row locked against other writers, and its live reservations as they are once it is
    locked: sent together (one round trip on PostgreSQL)."""
    locked = session_later(tx, session_id, lock=True)
    live = live_reservations(tx, session_id)
    return locked.one(), live


def session_later(tx: Tx, session_id: int, *, lock: bool = False) -> Later:
    """:func:`session`, sent with the next statement."""
    return tx.read_later(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE workspace_id = ? AND id = ?"
                         f"{_lock(tx) if lock else ''}", (tx.require_workspace(), session_id))


def session_with_reservations(tx: Tx, session_id: int) -> Row | None:
    return tx.one(f"{_SESSION_WITH_RESERVATIONS} AND s.id = ?", (tx.require_workspace(), session_id))


#: When a session was last blocked (its latest blocking checkpoint, through the checkpoints' primary key).
_BLOCKED_AT = ("(SELECT max(c.created_at) FROM session_checkpoints c WHERE c.workspace_id = s.workspace_id "
               "AND c.session_id = s.id AND c.event = 'blocked')")


def sessions_page(tx: Tx, *, owner_id: int | None, status: str | None, after: int | None, newest_first: bool,
                  limit: int, contains: str | None) -> list[Row]:
    """Sessions by id (oldest or newest first) after the cursor id, through sessions_by_status or sessions_of_owner:
    of one owner or all, in one status or any."""
    sql, params = _SESSION_WITH_RESERVATIONS, list[Any]([tx.require_workspace()])
    for column, value in (("s.owner_id", owner_id), ("s.status", status)):
        if value is not None:
            sql, params = f"{sql} AND {column} = ?", [*params, value]
    if contains:
        sql = f"{sql} AND ({_contains(tx, 's.subject')} OR {_contains(tx, 's.owner')})"
        params += [contains.lower()] * 2
    if after is not None:
        sql, params = f"{sql} AND s.id {'<' if newest_first else '>'} ?", [*params, after]
    return tx.all(f"{sql} ORDER BY s.id {'DESC' if newest_first else ''} LIMIT ?", (*params, limit))


def blocked_at(tx: Tx, session_ids: list[int]) -> dict[int, str]:
    """When each of these sessions was last blocked (those ever blocked)."""
    if not session_ids:
        return {}
    rows = tx.all("SELECT session_id, max(created_at) AS at FROM session_checkpoints WHERE workspace_id = ? "
                  f"AND session_id IN ({', '.join('?' for _ in session_ids)}) AND event = 'blocked' "
                  "GROUP BY session_id", (tx.require_workspace(), *session_ids))
    return {int(row["session_id"]): row["at"] for row in rows}


def blocked_summary(tx: Tx, *, owner_id: int | None) -> Row:
    """How many sessions are blocked (count) and when the one blocked longest was blocked (oldest_at)."""
    sql = f"SELECT {_BLOCKED_AT} AS blocked_at FROM sessions s WHERE s.workspace_id = ? AND s.status = 'blocked'"
    params: list[Any] = [tx.require_workspace()]
    if owner_id is not None:
        sql, params = f"{sql} AND s.owner_id = ?", [*params, owner_id]
    row = tx.one(f"SELECT count(*) AS count, min(blocked_at) AS oldest_at FROM ({sql}) blocked", params)
    assert row is not None
    return row


def _contains(tx: Tx, column: str) -> str:
    """A condition: the column, lowercased, contains the (lowercased) parameter as it is (no pattern syntax)."""
    return f"instr(lower({column}), ?) > 0" if tx.dialect == "sqlite" else f"strpos(lower({column}), ?) > 0"


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


def taken_over_from(tx: Tx, session_id: int) -> set[str]:
    """Every principal (``kind:name``) a takeover took the session from."""
    rows = tx.all("SELECT details FROM session_checkpoints WHERE workspace_id = ? AND session_id = ? "
                  "AND event = 'taken_over'", (tx.require_workspace(), session_id))
    return {str(json.loads(row["details"]).get("from")) for row in rows}


def last_blocking_checkpoint(tx: Tx, session_id: int) -> Row | None:
    row = tx.one("SELECT seq, reason, resume_state, created_at FROM session_checkpoints "
                 "WHERE workspace_id = ? AND session_id = ? AND event = 'blocked' ORDER BY seq DESC LIMIT 1",
                 (tx.require_workspace(), session_id))
    return None if row is None else _decoded(row, "resume_state")


# Reservations --------------------------------------------------------------------------------------


def insert_reservation(tx: Tx, session_id: int, *, actor: str, holder: str, lease_until: str, at: str,
                       state: Reservation = Reservation.RESERVED) -> Later:
    """A new reservation; its id (``.scalar()``) once sent: with the next statement or the commit."""
    return tx.read_later(
        "INSERT INTO session_reservations (workspace_id, session_id, state, actor, holder, lease_until, created_at, "
        "settled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (tx.require_workspace(), session_id, state.value, actor, holder, lease_until, at,
         None if state is Reservation.RESERVED else at),
    )


#: The session's reservations still counted against its budget (running or held), as ``r`` beside ``s``.
_LIVE_OF_S = ("FROM session_reservations r WHERE r.workspace_id = s.workspace_id AND r.session_id = s.id "
              "AND r.state IN ('reserved', 'held')")


def reserve_if_clear(tx: Tx, session_id: int, *, owner_id: int, actor: str, holder: str, lease_until: str, at: str,
                     enriched_first: bool) -> Later:
    """A new running reservation, taken only where nothing needs a closer look: the session is ``owner_id``'s
    and open, its inputs are enriched (when ``enriched_first``), its budget has room, and every live
    reservation is a running one of this ``holder`` within its lease. Its id (``.scalar()``) once sent, with
    the next statement or the commit; None, nothing written, when anything else holds."""
    workspace = tx.require_workspace()
    if tx.dialect == "postgresql":
        # The lock first, as a statement of its own: the insert's snapshot is then taken once it is held, and
        # sees every reservation committed before (a snapshot taken while waiting for it would not).
        tx.execute_later("SELECT 1 FROM sessions WHERE workspace_id = ? AND id = ? FOR UPDATE", (workspace, session_id))
    return tx.read_later(
        "INSERT INTO session_reservations (workspace_id, session_id, state, actor, holder, lease_until, created_at) "
        "SELECT s.workspace_id, s.id, 'reserved', ?, ?, ?, ? FROM sessions s "
        "WHERE s.workspace_id = ? AND s.id = ? AND s.owner_id = ? AND s.status = 'open' "
        "AND (? = 0 OR s.inputs_revision <= s.enriched_revision) "
        f"AND s.used + (SELECT count(*) {_LIVE_OF_S}) < s.budget "
        f"AND NOT EXISTS (SELECT 1 {_LIVE_OF_S} AND (r.state = 'held' OR r.holder <> ? OR r.lease_until <= ?)) "
        "RETURNING id",
        (actor, holder, lease_until, at, workspace, session_id, owner_id, int(enriched_first), holder, at),
    )


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


_SETTLE = "UPDATE session_reservations SET state = ?, settled_at = ? WHERE workspace_id = ? AND id = ? AND state = ?"


def settle(tx: Tx, reservation_id: int, *, to: Reservation, at: str, only_from: Reservation = Reservation.RESERVED,
           ) -> bool:
    """Move one reservation on from ``only_from``; False when it is no longer there (released meanwhile)."""
    settled_at = None if to is Reservation.HELD else at
    return tx.execute(_SETTLE, (to.value, settled_at, tx.require_workspace(), reservation_id, only_from.value)) == 1


_USE = "UPDATE sessions SET used = used + 1, invalid_streak = 0, updated_at = ? WHERE workspace_id = ? AND id = ?"
#: The budget left after a use: less the live reservations (running or held) other than the one consumed.
_LEFT = ("RETURNING budget - used - (SELECT count(*) FROM session_reservations WHERE workspace_id = ? "
         "AND session_id = ? AND state IN ('reserved', 'held') AND id <> ?) AS budget_left")


def count_use(tx: Tx, session_id: int, *, at: str) -> int:
    """Count one more unit of the budget as used (an answer also ends a run of invalid requests); the budget
    left, less the live reservations."""
    # No reservation has id 0: every live one is counted.
    return int(tx.scalar(f"{_USE} {_LEFT}", _use_params(tx, session_id, 0, at)))


def consume(tx: Tx, session_id: int, reservation_id: int, *, at: str) -> int | None:
    """Consume a running reservation and count its unit as used (see :func:`count_use`); the budget left, or
    None, changing nothing, when the reservation is no longer running (released meanwhile)."""
    if tx.execute(_SETTLE, _settle_params(tx, reservation_id, at)) != 1:
        return None
    return int(tx.scalar(f"{_USE} {_LEFT}", _use_params(tx, session_id, reservation_id, at)))


def _settle_params(tx: Tx, reservation_id: int, at: str) -> tuple[Any, ...]:
    return Reservation.CONSUMED.value, at, tx.require_workspace(), reservation_id, Reservation.RESERVED.value


def _use_params(tx: Tx, session_id: int, consumed: int, at: str) -> tuple[Any, ...]:
    workspace = tx.require_workspace()
    return at, workspace, session_id, workspace, session_id, consumed


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


class Recorded(NamedTuple):
    """What :func:`insert_record` wrote."""

    #: The record's number in its session.
    seq: int
    #: The session's first record of the same capture, which this one repeats (an identical result is a
    #: repeat, not new evidence), or None.
    repeat_of: int | None
    #: Whether the capture was new in the workspace (it is stored once per workspace).
    new_capture: bool
    #: With a reservation to consume: the budget left (see :func:`consume`), or None when it was no longer
    #: running and nothing was consumed.
    budget_left: int | None = None


_INSERT_CAPTURE = ("INSERT INTO captures (workspace_id, capture_id, content, created_at) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT DO NOTHING")
#: The next record: its number after the last one (found through the primary key), the capture's first record
#: as the one it repeats (through evidence_records_capture: the GROUP BY keeps both engines' planners from
#: walking the primary key in seq order instead, through every record of a new capture's session).
_INSERT_RECORD = (
    "INSERT INTO evidence_records (workspace_id, session_id, seq, capture_id, request_kind, request, principal_id, "
    "actor, repeat_of, created_at, enrichment_revision) VALUES (?, ?, "
    "coalesce((SELECT seq FROM evidence_records WHERE workspace_id = ? AND session_id = ? ORDER BY seq DESC LIMIT 1), "
    "0) + 1, ?, ?, ?, ?, ?, "
    "(SELECT min(seq) FROM evidence_records WHERE workspace_id = ? AND session_id = ? AND capture_id = ? "
    " GROUP BY capture_id), ?, ?) RETURNING seq, repeat_of"
)


def insert_record(tx: Tx, session_id: int, *, capture_id: str, content: str, request: dict[str, Any],
                  principal_id: int, actor: str, at: str, enrichment_revision: int | None = None,
                  consuming: int | None = None) -> Recorded:
    """Store the capture (once per workspace) and append the session's next evidence record of it; with
    ``consuming``, consume that reservation too (:func:`consume`)."""
    workspace = tx.require_workspace()
    capture = (workspace, capture_id, content, at)
    record = (workspace, session_id, workspace, session_id, capture_id, request["kind"], canonical_json(request),
              principal_id, actor, workspace, session_id, capture_id, at, enrichment_revision)
    if tx.dialect == "postgresql":  # one statement, one round trip (foreign keys are checked at its end)
        parts = [f"stored AS ({_INSERT_CAPTURE} RETURNING 1)", f"record AS ({_INSERT_RECORD})"]
        params, budget_left = [*capture, *record], "NULL"
        if consuming is not None:  # the statement's snapshot still sees the reservation running: _LEFT leaves it out
            parts += [f"settled AS ({_SETTLE} RETURNING id)",
                      f"used AS ({_USE} AND EXISTS (SELECT 1 FROM settled) {_LEFT})"]
            params += [*_settle_params(tx, consuming, at), *_use_params(tx, session_id, consuming, at)]
            budget_left = "(SELECT budget_left FROM used)"
        row = tx.one(f"WITH {', '.join(parts)} SELECT seq, repeat_of, EXISTS (SELECT 1 FROM stored) AS new_capture, "
                     f"{budget_left} AS budget_left FROM record", params)
    else:
        left = None if consuming is None else consume(tx, session_id, consuming, at=at)
        new_capture = tx.execute(_INSERT_CAPTURE, capture) == 1
        row = tx.one(_INSERT_RECORD, record)
        assert row is not None
        row.update(new_capture=new_capture, budget_left=left)
    assert row is not None
    return Recorded(int(row["seq"]), None if row["repeat_of"] is None else int(row["repeat_of"]),
                    bool(row["new_capture"]), None if row["budget_left"] is None else int(row["budget_left"]))


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
