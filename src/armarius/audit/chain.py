"""The tamper-evident audit log: one hash chain per workspace, plus the system chain (0).

Each event's hash covers its own fields and the previous event's hash, and its MAC (an HMAC of
the hash under the audit key, which lives outside the database: :mod:`armarius.audit.keys`)
shows that it was written by a holder of the key. A head row per chain holds the last sequence
number and hash; appenders lock it (``FOR UPDATE`` on PostgreSQL; the ``BEGIN IMMEDIATE`` write
lock on SQLite), so the chain stays linear when several processes append at once, and the
primary key ``(workspace_id, seq)`` refuses any fork outright.

Verification walks a chain from its start and reports what it finds by kind: a broken link
(an event edited, removed, reordered or added outside the log), a bad MAC (an event written
without the key), and, in :mod:`armarius.audit.verify`, chains of unknown workspaces and anchors
that are no longer on their chain. Events written before the log was authenticated carry no
MAC; they are accepted as *legacy* events only before the chain's first authenticated event.
``armarius init`` seals each chain that still ends where migration 0008 found it with such an
event (``audit.sealed``).

Secrets never enter an event: callers pass names, ids and codes, never tokens or passwords.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from armarius.audit.keys import Keyring, keyring_of, signing_keyring
from armarius.canonical import canonical_json, canonical_sha256
from armarius.store import Database, Tx, utc_now

SYSTEM_CHAIN = 0
GENESIS_HASH = "0" * 64
_VERIFY_BATCH = 5000
_MIN_SEQ = -(2**63)

#: The kinds of problem verification reports.
BROKEN_LINK = "broken_link"
BAD_MAC = "bad_mac"
UNKNOWN_WORKSPACE = "unknown_workspace"
ANCHOR_NOT_FOUND = "anchor_not_found"


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
    #: The audit key that signed the event and its MAC; None for legacy events.
    key_id: str | None = None
    mac: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "workspace_id": self.workspace_id, "seq": self.seq, "at": self.at, "actor": self.actor,
            "action": self.action, "subject": self.subject, "details": self.details,
            "prev_hash": self.prev_hash, "hash": self.hash, "key_id": self.key_id, "mac": self.mac,
        }


@dataclass(frozen=True)
class ChainBreak:
    """A problem found in one chain, at its first event concerned (0: the chain as a whole)."""

    workspace_id: int
    seq: int
    problem: str
    kind: str = BROKEN_LINK


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
    key = signing_keyring(tx).active
    chain = _chain_of(tx)
    prepared = tx.prepared.pop(_HEAD, None)
    head = _locked_head(tx, chain) if prepared is None else prepared.one()
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
    mac = key.mac(digest)
    insert = ("INSERT INTO audit_events (workspace_id, seq, at, actor, action, subject, details, prev_hash, hash, "
              "key_id, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    event = (chain, seq, at, actor, action, subject, details_text, prev_hash, digest, key.id, mac)
    move_head = "UPDATE audit_heads SET seq = ?, hash = ? WHERE workspace_id = ?"
    if tx.dialect == "postgresql":  # the event and the head's move in one statement, sent with the next one
        tx.execute_later(f"WITH event AS ({insert}) {move_head}", (*event, seq, digest, chain))
    else:
        tx.execute(insert, event)
        tx.execute(move_head, (seq, digest, chain))
    return AuditEvent(chain, seq, at, actor, action, subject, json.loads(details_text), prev_hash, digest, key.id, mac)


_HEAD = "audit.head"


def prepare(tx: Tx) -> None:
    """Lock the chain's head for an :func:`append` later in this transaction, with the next statement sent
    (PostgreSQL: the round trip the append would make to read it). Where the append follows at once, or in
    a transaction that may end without one, there is nothing to gain: the lock is held from here on."""
    tx.prepared[_HEAD] = tx.read_later(_HEAD_SQL + _head_lock(tx), (_chain_of(tx),))


def _chain_of(tx: Tx) -> int:
    return tx.workspace_id if tx.workspace_id is not None else SYSTEM_CHAIN


def _scope(chain: int) -> int | None:
    """The transaction scope that reaches a chain (the system chain is outside every workspace)."""
    return None if chain == SYSTEM_CHAIN else chain


_HEAD_SQL = "SELECT seq, hash FROM audit_heads WHERE workspace_id = ?"


def _head_lock(tx: Tx) -> str:
    return " FOR UPDATE" if tx.dialect == "postgresql" else ""


def _locked_head(tx: Tx, chain: int) -> dict[str, Any] | None:
    return tx.one(_HEAD_SQL + _head_lock(tx), (chain,))


def tail(database: Database, workspace_id: int | None, limit: int = 20) -> list[AuditEvent]:
    """The newest events of one chain, oldest first."""
    with database.transaction(workspace_id=workspace_id) as tx:
        rows = tx.all(
            "SELECT * FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT ?",
            (workspace_id or SYSTEM_CHAIN, limit),
        )
    return [_event(row) for row in reversed(rows)]


def chain_ids(database: Database) -> list[int]:
    """Every chain that has an event or a head, whatever workspace it claims, and the system chain."""
    with database.transaction() as tx:
        if tx.dialect == "postgresql":
            # Row-level security hides other workspaces' rows; a trigger notes each chain's id here.
            rows = tx.all("SELECT chain_id AS id FROM audit_chains")
        else:
            rows = tx.all("SELECT workspace_id AS id FROM audit_events GROUP BY workspace_id "
                          "UNION SELECT workspace_id AS id FROM audit_heads")
    return sorted({int(row["id"]) for row in rows} | {SYSTEM_CHAIN})


def last_events(database: Database) -> list[tuple[int, int, str]]:
    """(chain, seq, hash) of the newest event of every chain that has events."""
    heads = []
    for chain in chain_ids(database):
        with database.transaction(workspace_id=_scope(chain)) as tx:
            row = tx.one("SELECT seq, hash FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT 1",
                         (chain,))
        if row is not None:
            heads.append((chain, int(row["seq"]), str(row["hash"])))
    return heads


def stored_hashes(database: Database, chain: int, seqs: Collection[int]) -> dict[int, str]:
    """The hashes stored for some events of one chain (missing events are left out)."""
    found = {}
    with database.transaction(workspace_id=_scope(chain)) as tx:
        for seq in seqs:
            stored = tx.scalar("SELECT hash FROM audit_events WHERE workspace_id = ? AND seq = ?", (chain, seq))
            if stored is not None:
                found[seq] = str(stored)
    return found


# Walking a chain --------------------------------------------------------------------------------


@dataclass
class ChainWalk:
    """What one walk of a chain found."""

    chain: int
    #: Events whose links hold, counted from the start of the chain.
    checked: int = 0
    #: Events without a MAC before the chain's first authenticated event.
    legacy: int = 0
    #: The last event the walk reached with its links holding.
    last_seq: int = 0
    problems: list[ChainBreak] = field(default_factory=list)
    #: Hashes of the events the caller asked about, as found on the verified part of the chain.
    seen: dict[int, str] = field(default_factory=dict)

    def first_problem(self) -> ChainBreak | None:
        return min(self.problems, key=lambda problem: (problem.seq, problem.kind != BROKEN_LINK), default=None)


class _MacCheck:
    """Checks each event's MAC in chain order, and where unauthenticated events may stand."""

    def __init__(self, chain: int, keyring: Keyring) -> None:
        self.chain, self.keyring = chain, keyring
        self.authenticated = False
        self.legacy = 0
        self.bad = 0
        self.first: tuple[int, str] | None = None

    def check(self, row: Mapping[str, Any]) -> None:
        seq, key_id, mac = int(row["seq"]), row["key_id"], row["mac"]
        if key_id is None and mac is None:
            if self.authenticated:
                self._fail(seq, "carries no MAC although earlier events do: it was written without the audit key")
            else:
                self.legacy += 1
            return
        if not self.authenticated and self.legacy and not _vouches_for(row, self.legacy):
            # Only the seal that `armarius init` signed when the log began to be authenticated makes
            # earlier unsigned events legacy; any other signed event after them (an ordinary write
            # appended to a forged, unsigned chain) vouches for nothing.
            self._fail(1, f"is one of {self.legacy} events without a MAC that no audit.sealed event vouches for: "
                          "they were written without the audit key")
        self.authenticated = True
        key = self.keyring.get(key_id) if isinstance(key_id, str) else None
        if key is None:
            self._fail(seq, f"is signed with key id {str(key_id)[:32]!r}, which is not in the audit keyring "
                            f"({self.keyring.source}): add the retired key back to the keyring, or the event "
                            "was forged")
        elif not isinstance(mac, str) or not key.verifies(str(row["hash"]), mac):
            self._fail(seq, "has a MAC that does not match: it was written or rewritten without the audit key")

    def _fail(self, seq: int, problem: str) -> None:
        self.bad += 1
        if self.first is None:
            self.first = (seq, problem)

    def result(self, *, whole_chain: bool) -> ChainBreak | None:
        if self.first is not None:
            seq, problem = self.first
            more = f" ({self.bad} events of this chain fail the MAC check)" if self.bad > 1 else ""
            return ChainBreak(self.chain, seq, f"event {seq} {problem}{more}", BAD_MAC)
        if whole_chain and self.legacy and not self.authenticated:
            return ChainBreak(self.chain, 1, f"events 1 to {self.legacy} carry no MAC and no authenticated event "
                                             "follows them: they were written without the audit key, or were "
                                             "written before Armarius authenticated its log and `armarius init` "
                                             "has not sealed them yet", BAD_MAC)
        return None


def _vouches_for(row: Mapping[str, Any], legacy: int) -> bool:
    """Whether ``row`` is the seal of exactly the ``legacy`` unsigned events before it."""
    if row["action"] != "audit.sealed":
        return False
    details = json.loads(row["details"])
    return isinstance(details, dict) and details.get("legacy_events") == legacy


def walk_chain(database: Database, chain: int, wanted: Collection[int] = ()) -> ChainWalk:
    """Walk one chain from its start: its links, its head and every event's MAC."""
    walk = ChainWalk(chain)
    macs = _MacCheck(chain, keyring_of(database))
    expected_seq, prev_hash = 1, GENESIS_HASH
    broken = False
    # The first batch starts below 1, so that an event slipped in before the start is seen too; each next one
    # after the last number read as stored (an odd number between two whole ones is read too).
    after, first = _MIN_SEQ, True
    # One snapshot (PostgreSQL): the events, their count and the head as of one moment, whatever is appended.
    with database.transaction(workspace_id=_scope(chain), snapshot=True) as tx:
        while not broken:
            rows = tx.all(
                f"SELECT * FROM audit_events WHERE workspace_id = ? AND seq {'>=' if first else '>'} ? ORDER BY seq "
                "LIMIT ?", (chain, after, _VERIFY_BATCH),
            )
            first = False
            for row in rows:
                problem = link_problem(row, expected_seq, prev_hash)
                if problem:
                    seq = _whole(row["seq"])
                    walk.problems.append(ChainBreak(chain, expected_seq if seq is None else min(expected_seq, seq),
                                                    problem))
                    broken = True
                    break
                macs.check(row)
                if expected_seq in wanted:
                    walk.seen[expected_seq] = row["hash"]
                expected_seq, prev_hash, walk.checked = expected_seq + 1, row["hash"], walk.checked + 1
            if rows:
                after = rows[-1]["seq"]
            if len(rows) < _VERIFY_BATCH:
                break
        stored = int(tx.scalar("SELECT count(*) FROM audit_events WHERE workspace_id = ?", (chain,)))
        head = tx.one("SELECT seq, hash FROM audit_heads WHERE workspace_id = ?", (chain,))
    walk.last_seq, walk.legacy = expected_seq - 1, macs.legacy
    if not broken and stored != walk.checked:  # a second event under one number, which the walk steps over
        walk.problems.append(ChainBreak(chain, max(walk.last_seq, 1), f"{stored - walk.checked} more events are "
                                        "stored than the chain holds: they were added outside the log"))
        broken = True
    if not broken:
        _check_head(walk, head, prev_hash)
    mac_problem = macs.result(whole_chain=not broken)
    if mac_problem is not None:
        walk.problems.append(mac_problem)
    return walk


def _check_head(walk: ChainWalk, head: Mapping[str, Any] | None, last_hash: str) -> None:
    """The head must record the last event; the first broken link is always a seq that exists."""
    head_seq, head_hash = (int(head["seq"]), head["hash"]) if head else (0, GENESIS_HASH)
    chain, last_seq = walk.chain, walk.last_seq
    if head_seq > last_seq:
        walk.problems.append(ChainBreak(chain, last_seq + 1, f"events end at {last_seq} but the head records "
                                                             f"{head_seq}: events were removed"))
    elif head_seq < last_seq:
        walk.checked = head_seq
        walk.problems.append(ChainBreak(chain, head_seq + 1, f"the head records {head_seq} but events go on to "
                                                             f"{last_seq}: events were added outside the log"))
    elif head_hash != last_hash:
        walk.checked = max(walk.checked - 1, 0)
        walk.problems.append(ChainBreak(chain, max(last_seq, 1), "the last event does not match the head's hash: "
                                                                 "it was replaced"))


def _whole(seq: Any) -> int | None:
    """An event's number as stored, if it is a whole number (SQLite stores what it is given)."""
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def link_problem(row: Mapping[str, Any], expected_seq: int, prev_hash: str) -> str | None:
    seq = _whole(row["seq"])
    if seq is None:
        return (f"an event numbered {str(row['seq'])[:40]!r}, not a whole number, follows event {expected_seq - 1}: "
                "it was added outside the log")
    if seq < expected_seq:
        return f"event {seq} lies before the start of the chain: it was added outside the log"
    if seq != expected_seq:
        return f"event {expected_seq} is missing (next is {seq})"
    if row["prev_hash"] != prev_hash:
        return "prev_hash does not match the previous event: events were removed or reordered"
    recomputed = event_hash(
        int(row["workspace_id"]), int(row["seq"]), row["at"], row["actor"], row["action"], row["subject"],
        row["details"], row["prev_hash"],
    )
    if recomputed != row["hash"]:
        return "the event's content does not match its hash: it was edited"
    return None


def verify_chain(database: Database, workspace_id: int | None) -> tuple[int, ChainBreak | None]:
    """Walk one chain; returns the events whose links hold and its first problem, if any."""
    walk = walk_chain(database, workspace_id or SYSTEM_CHAIN)
    return walk.checked, walk.first_problem()


def verify_all(database: Database, workspace_ids: Iterable[int] = ()) -> tuple[int, list[ChainBreak]]:
    """Verify every chain in the tables (and ``workspace_ids``, even if empty): the first problem of each.

    :func:`armarius.audit.verify.verify_log` also knows which workspaces exist and checks anchors.
    """
    total, breaks = 0, []
    for chain in sorted(set(chain_ids(database)) | set(workspace_ids)):
        walk = walk_chain(database, chain)
        total += walk.checked
        problem = walk.first_problem()
        if problem:
            breaks.append(problem)
    return total, breaks


# Keys in the log --------------------------------------------------------------------------------


def signed_events_exist(database: Database) -> bool:
    """Whether the log holds authenticated events (every workspace's creation is in the system chain)."""
    with database.transaction() as tx:
        return tx.scalar("SELECT 1 AS found FROM audit_events WHERE workspace_id = ? AND mac IS NOT NULL LIMIT 1",
                         (SYSTEM_CHAIN,)) is not None


def seal_legacy_chains(database: Database) -> list[int]:
    """Append ``audit.sealed`` to each chain that still ends with its legacy events.

    Migration 0008 recorded how far each chain's events went when the log began to be
    authenticated (``audit_legacy_events``, which the server role cannot change). A chain is sealed
    only while its last event is that last legacy event, so unauthenticated events appended later
    (by a forger) are never sealed and stay findings. Returns the chains sealed.
    """
    with database.transaction() as tx:
        legacy = {int(row["chain_id"]): int(row["through_seq"])
                  for row in tx.all("SELECT chain_id, through_seq FROM audit_legacy_events")}
    sealed = []
    for chain, through_seq in sorted(legacy.items()):
        with database.transaction(workspace_id=_scope(chain), write=True) as tx:
            head = _locked_head(tx, chain)
            last = tx.one("SELECT seq, hash, mac FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT 1",
                          (chain,))
            if head is None or last is None or last["mac"] is not None or int(last["seq"]) != through_seq:
                continue
            if (int(head["seq"]), head["hash"]) != (through_seq, last["hash"]):
                continue  # the head disagrees with the events: left for `armarius audit verify` to report
            append(tx, actor="system", action="audit.sealed",
                   details={"legacy_events": through_seq, "key_id": keyring_of(database).active.id})
            sealed.append(chain)
    return sealed


def record_key_rotation(database: Database, *, by: str, retired_key_id: str) -> AuditEvent:
    """The system chain's record of a rotation, signed with the new key."""
    with database.transaction(write=True) as tx:
        return append(tx, actor=by, action="audit.key_rotated",
                      details={"retired_key_id": retired_key_id, "key_id": keyring_of(database).active.id})


def _event(row: Mapping[str, Any]) -> AuditEvent:
    return AuditEvent(
        int(row["workspace_id"]), int(row["seq"]), row["at"], row["actor"], row["action"], row["subject"],
        json.loads(row["details"]), row["prev_hash"], row["hash"], row["key_id"], row["mac"],
    )
