"""Tampering with the audit log the way an intruder without the audit key would: in the database.

Every helper writes as the table owner (a plain sqlite3 connection to the file; psycopg as the
owner on PostgreSQL), past Armarius and past row-level security. A forger can recompute hashes
(they use no secret) but not MACs: each forged event keeps the ``key_id``/``mac`` it is given.
"""

from __future__ import annotations

import secrets
from typing import Any

from armarius.audit import chain as audit
from armarius.canonical import canonical_json
from tests.helpers import OwnerSQL

COLUMNS = ("workspace_id", "seq", "at", "actor", "action", "subject", "details", "prev_hash", "hash", "key_id", "mac")
Event = dict[str, Any]


def chain_rows(owner: OwnerSQL, chain: int) -> list[Event]:
    rows = owner.rows(f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE workspace_id = ? ORDER BY seq", (chain,))
    return [dict(zip(COLUMNS, row, strict=True)) for row in rows]


def forged_event(action: str = "memory.created", *, key_id: str | None = None, mac: str | None = None) -> Event:
    return {"at": "2026-01-01T00:00:00.000000Z", "actor": "human:mallory", "action": action,
            "subject": "notes/forged", "details": canonical_json({"forged": True}), "key_id": key_id, "mac": mac}


def guessed_mac(key_id: str) -> Event:
    """A forged event that names a real key and carries a MAC guessed at random."""
    return forged_event(key_id=key_id, mac=secrets.token_hex(32))


def set_head(owner: OwnerSQL, chain: int, seq: int, event_hash: str) -> None:
    if owner.execute("UPDATE audit_heads SET seq = ?, hash = ? WHERE workspace_id = ?", (seq, event_hash, chain)) == 0:
        owner.execute("INSERT INTO audit_heads (workspace_id, seq, hash) VALUES (?, ?, ?)", (chain, seq, event_hash))


def rewrite_chain(owner: OwnerSQL, chain: int, events: list[Event], *, from_seq: int = 1) -> None:
    """Replace the chain from ``from_seq`` on with ``events``, numbered, hashed and linked as Armarius
    would, and move the head to the last one: a rewrite that no hash check can tell from the real thing."""
    owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq >= ?", (chain, from_seq))
    previous = owner.rows("SELECT hash FROM audit_events WHERE workspace_id = ? AND seq = ?", (chain, from_seq - 1))
    prev_hash = previous[0][0] if previous else audit.GENESIS_HASH
    seq = from_seq - 1
    for seq, event in enumerate(events, start=from_seq):
        digest = audit.event_hash(chain, seq, event["at"], event["actor"], event["action"], event["subject"],
                                  event["details"], prev_hash)
        owner.execute(f"INSERT INTO audit_events ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                      (chain, seq, event["at"], event["actor"], event["action"], event["subject"], event["details"],
                       prev_hash, digest, event["key_id"], event["mac"]))
        prev_hash = digest
    set_head(owner, chain, seq, prev_hash)


def append_forged(owner: OwnerSQL, chain: int, event: Event) -> None:
    """One event with a valid hash after the chain's last one, and the head moved onto it."""
    rows = chain_rows(owner, chain)
    rewrite_chain(owner, chain, [event], from_seq=len(rows) + 1)
