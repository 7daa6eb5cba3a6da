"""The tamper-evident audit log: one hash chain per workspace, plus the system chain (0).

Each event's hash covers its own fields and the previous event's hash. A head row per chain
holds the last sequence number and hash; appenders lock it (``FOR UPDATE`` on PostgreSQL; the
``BEGIN IMMEDIATE`` write lock on SQLite), so the chain stays linear when several processes
append at once, and the primary key ``(workspace_id, seq)`` refuses any fork outright.

Secrets never enter an event: callers pass names, ids and codes, never tokens or passwords.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from armarius.canonical import canonical_json, canonical_sha256
from armarius.store import Database, Tx, utc_now

SYSTEM_CHAIN = 0
GENESIS_HASH = "0" * 64
_VERIFY_BATCH = 5000
_MIN_SEQ = -(2**63)


@dataclass(frozen=True)
class AuditEvent:
    workspace_id: int
    seq: int
    at: str
    actor: str
    action: str
    subject: str
    details: dict[str, Any]
    prev_hash: str
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "workspace_id": self.workspace_id, "seq": self.seq, "at": self.at, "actor": self.actor,
            "action": self.action, "subject": self.subject, "details": self.details,
            "prev_hash": self.prev_hash, "hash": self.hash,
        }


@dataclass(frozen=True)
class ChainBreak:
    """The first link of a chain that does not hold."""

    workspace_id: int
    seq: int
    problem: str


def event_hash(
    workspace_id: int, seq: int, at: str, actor: str, action: str, subject: str, details: str, prev_hash: str
) -> str:
    return canonical_sha256({
        "workspace_id": workspace_id, "seq": seq, "at": at, "actor": actor, "action": action,
        "subject": subject, "details": details, "prev_hash": prev_hash,
    })


def append(
    tx: Tx, *, actor: str, action: str, subject: str = "", details: Mapping[str, Any] | None = None
) -> AuditEvent:
    """Append an event to the chain of the transaction's workspace (or the system chain)."""
    chain = tx.workspace_id if tx.workspace_id is not None else SYSTEM_CHAIN
    head = _locked_head(tx, chain)
    if head is None:
        tx.execute(
            "INSERT INTO audit_heads (workspace_id, seq, hash) VALUES (?, 0, ?) ON CONFLICT DO NOTHING",
            (chain, GENESIS_HASH),
        )
        head = _locked_head(tx, chain)
        assert head is not None
    seq, prev_hash = int(head["seq"]) + 1, str(head["hash"])
    at, details_text = utc_now(), canonical_json(dict(details or {}))
    digest = event_hash(chain, seq, at, actor, action, subject, details_text, prev_hash)
    tx.execute(
        "INSERT INTO audit_events (workspace_id, seq, at, actor, action, subject, details, prev_hash, hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (chain, seq, at, actor, action, subject, details_text, prev_hash, digest),
    )
    tx.execute("UPDATE audit_heads SET seq = ?, hash = ? WHERE workspace_id = ?", (seq, digest, chain))
    return AuditEvent(chain, seq, at, actor, action, subject, json.loads(details_text), prev_hash, digest)


def _locked_head(tx: Tx, chain: int) -> dict[str, Any] | None:
    lock = " FOR UPDATE" if tx.dialect == "postgresql" else ""
    return tx.one(f"SELECT seq, hash FROM audit_heads WHERE workspace_id = ?{lock}", (chain,))


def tail(database: Database, workspace_id: int | None, limit: int = 20) -> list[AuditEvent]:
    """The newest events of one chain, oldest first."""
    with database.transaction(workspace_id=workspace_id) as tx:
        rows = tx.all(
            "SELECT * FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT ?",
            (workspace_id or SYSTEM_CHAIN, limit),
        )
    return [_event(row) for row in reversed(rows)]


def verify_chain(database: Database, workspace_id: int | None) -> tuple[int, ChainBreak | None]:
    """Walk one chain from its start; returns the events checked and the first break, if any."""
    chain = workspace_id or SYSTEM_CHAIN
    expected_seq, prev_hash, checked = 1, GENESIS_HASH, 0
    # The first batch starts below 1, so that an event slipped in before the start is seen too.
    lowest = _MIN_SEQ
    with database.transaction(workspace_id=workspace_id) as tx:
        while True:
            rows = tx.all(
                "SELECT * FROM audit_events WHERE workspace_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (chain, lowest, _VERIFY_BATCH),
            )
            for row in rows:
                problem = _link_problem(row, expected_seq, prev_hash)
                if problem:
                    return checked, ChainBreak(chain, min(expected_seq, int(row["seq"])), problem)
                expected_seq, prev_hash, checked = expected_seq + 1, row["hash"], checked + 1
            lowest = expected_seq
            if len(rows) < _VERIFY_BATCH:
                break
        head = tx.one("SELECT seq, hash FROM audit_heads WHERE workspace_id = ?", (chain,))
    head_seq, head_hash = (int(head["seq"]), head["hash"]) if head else (0, GENESIS_HASH)
    last_seq = expected_seq - 1
    # The first broken link is always a seq that exists (or the first one missing).
    if head_seq > last_seq:
        return checked, ChainBreak(chain, expected_seq, f"events end at {last_seq} but the head "
                                                          f"records {head_seq}: events were removed")
    if head_seq < last_seq:
        return head_seq, ChainBreak(chain, head_seq + 1, f"the head records {head_seq} but events go on to "
                                                          f"{last_seq}: events were added outside the log")
    if head_hash != prev_hash:
        return max(checked - 1, 0), ChainBreak(chain, max(last_seq, 1), "the last event does not match "
                                                                       "the head's hash: it was replaced")
    return checked, None


def _link_problem(row: Mapping[str, Any], expected_seq: int, prev_hash: str) -> str | None:
    if int(row["seq"]) < expected_seq:
        return f"event {row['seq']} lies before the start of the chain: it was added outside the log"
    if int(row["seq"]) != expected_seq:
        return f"event {expected_seq} is missing (next is {row['seq']})"
    if row["prev_hash"] != prev_hash:
        return "prev_hash does not match the previous event: events were removed or reordered"
    recomputed = event_hash(
        int(row["workspace_id"]), int(row["seq"]), row["at"], row["actor"], row["action"], row["subject"],
        row["details"], row["prev_hash"],
    )
    if recomputed != row["hash"]:
        return "the event's content does not match its hash: it was edited"
    return None


def verify_all(database: Database, workspace_ids: Iterable[int]) -> tuple[int, list[ChainBreak]]:
    """Verify the system chain and each workspace chain."""
    total, breaks = 0, []
    for workspace_id in [None, *workspace_ids]:
        checked, problem = verify_chain(database, workspace_id)
        total += checked
        if problem:
            breaks.append(problem)
    return total, breaks


def _event(row: Mapping[str, Any]) -> AuditEvent:
    return AuditEvent(
        int(row["workspace_id"]), int(row["seq"]), row["at"], row["actor"], row["action"], row["subject"],
        json.loads(row["details"]), row["prev_hash"], row["hash"],
    )
