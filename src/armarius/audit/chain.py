"""The tamper-evident audit log: one hash chain per workspace, plus the system chain (0).

Each event's hash covers its own fields and the previous event's hash, and its MAC (an HMAC of
the hash under the audit key, which lives outside the database: :mod:`armarius.audit.keys`)
shows that it was written by a holder of the key. A head row per chain holds the last sequence
number and hash; appenders lock it (``FOR UPDATE`` on PostgreSQL; the ``BEGIN IMMEDIATE`` write
lock on SQLite), so the chain stays linear when several processes append at once, and the
primary key ``(workspace_id, seq)`` refuses any fork outright.

Verification walks a chain from its start and reports what it finds by kind: a broken link
(an event edited, removed, reordered or added outside the log), a bad MAC (an event written
without the key), a malformed event (a row Armarius never writes: a value of the wrong type, text
that is not UTF-8, details that are not a JSON object), and, in :mod:`armarius.audit.verify`,
chains of unknown workspaces and anchors that are no longer on their chain or cannot be read.
Every value read from the audit tables is checked for its type before it is used: whoever can
write the tables can store anything there (SQLite keeps what it is given), and a walk that raised
would report nothing. Events written before the log was authenticated carry no MAC; they are
accepted as *legacy* events only before the chain's first authenticated event.
``armarius init`` seals each chain that still ends where migration 0008 found it with such an
event (``audit.sealed``).

Secrets never enter an event: callers pass names, ids and codes, never tokens or passwords.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from armarius.audit.keys import Keyring, keyring_of, signing_keyring
from armarius.canonical import canonical_json, canonical_sha256
from armarius.store import Database, Later, Row, Tx, UniqueViolation, utc_now
from armarius.store.engine import on_violation

SYSTEM_CHAIN = 0
GENESIS_HASH = "0" * 64
_VERIFY_BATCH = 5000
_MIN_SEQ = -(2**63)

#: The kinds of problem verification reports.
BROKEN_LINK = "broken_link"
BAD_MAC = "bad_mac"
UNKNOWN_WORKSPACE = "unknown_workspace"
ANCHOR_NOT_FOUND = "anchor_not_found"
ANCHOR_UNREADABLE = "anchor_unreadable"
MALFORMED_EVENT = "malformed_event"

#: The columns of ``audit_events``.
EVENT_COLUMNS = ("workspace_id", "seq", "at", "actor", "action", "subject", "details", "prev_hash", "hash", "key_id",
                 "mac")
#: The text columns an event's hash covers.
_HASHED_TEXT = ("at", "actor", "action", "subject", "details", "prev_hash", "hash")
_HASH_FORM = re.compile(r"[0-9a-f]{64}")


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
    #: Why the row is not an event as Armarius writes them (None: it is one). A listing shows such a row
    #: with each value it cannot show as stored replaced by what it can (details that are not a JSON
    #: object as ``{}``, a number that is not whole as its whole part or 0).
    malformed: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "workspace_id": self.workspace_id, "seq": self.seq, "at": self.at, "actor": self.actor,
            "action": self.action, "subject": self.subject, "details": self.details,
            "prev_hash": self.prev_hash, "hash": self.hash, "key_id": self.key_id, "mac": self.mac,
            "malformed": self.malformed,
        }


@dataclass(frozen=True)
class ChainBreak:
    """A problem found in one chain, at its first event concerned (0: the chain as a whole).

    ``workspace_id`` is None for a problem that belongs to no chain: rows stored under a workspace id
    that is not a whole number, a line of an anchor file that cannot be read."""

    workspace_id: int | None
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
    seq, prev_hash = _head_of(head, chain)
    if _APPENDED not in tx.prepared:  # where the chain stood, should the event's number be taken (_head_behind)
        tx.prepared[_APPENDED] = Later.of(tx, [{"chain": chain, "seq": seq}])
    seq += 1
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
#: The chain's head as the transaction's first append found it (see :func:`_head_behind`).
_APPENDED = "audit.appended"
#: The primary key of audit_events, (workspace_id, seq): an event's number taken (see UniqueViolation).
EVENTS_KEY = "audit_events_pkey"


class DamagedHead(RuntimeError):
    """A chain's head row holds what no append wrote (a number that is no whole number, a hash that is no
    SHA-256 in hex): nothing is appended after it, so every write that audits itself in that workspace fails
    (an internal error to the caller; this message, with the chain, in the server's log) until an operator
    has looked at the chain with `armarius audit verify`. Appending after a guessed head would break the chain
    where nobody tampered with it, or fail on the seq of an existing event as if it were a write conflict."""


class HeadBehind(DamagedHead):
    """A chain's head of the form every append writes, but behind the chain's events (restored from a backup
    older than the events, or moved back outside Armarius): the number the next event would take is
    an existing event's, so its insert fails on the chain's primary key. Never a race: appenders hold the
    head's lock, and move it with the event. Like any damaged head, an internal error to the caller and this
    message in the log (not a conflict of the feature that writes, which would be answered every time, and tell
    nobody); `armarius audit verify` reports such a head as a broken link."""

    def __init__(self, chain: int, head_seq: int) -> None:
        self.chain, self.head_seq = chain, head_seq
        records = f"event {head_seq} as the chain's last" if head_seq else "no event"
        super().__init__(f"The head of audit chain {chain} is behind its events: it records {records}, "
                         f"but event {head_seq + 1} exists already (the head was restored from an "
                         "older backup, or moved back outside Armarius). Nothing is appended to it, so this "
                         "workspace's audited writes fail; `armarius audit verify` reports the head and the "
                         "chain's last event. Restore the chain, events and head, from one backup.")


def _head_behind(tx: Tx, violation: UniqueViolation) -> Exception | None:
    """A violation of the events' primary key in a transaction that appended to its chain: the event's number
    was taken, so the head it followed is behind the events. Met where the transaction sends the event's insert:
    at once on SQLite, with its next statement or its commit on PostgreSQL (see append), wherever in the
    feature that is. (A transaction that appended nothing, an insert outside the log: the violation as it is.)"""
    del violation
    appended = tx.prepared.get(_APPENDED)
    if appended is None:
        return None
    head = appended.one()
    assert head is not None
    return HeadBehind(head["chain"], head["seq"])


on_violation(EVENTS_KEY, _head_behind)


def _head_of(head: Row, chain: int) -> tuple[int, str]:
    """The head's seq and hash, once both are of the form every append writes; else :class:`DamagedHead`.
    (SQLite's hash comes as bytes: see _head_sql.)"""
    seq, digest = head["seq"], _ascii(head["hash"])
    if (isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 and isinstance(digest, str)
            and _HASH_FORM.fullmatch(digest)):
        return seq, digest
    raise DamagedHead(f"The head of audit chain {chain} is damaged (seq {_cut(seq)}, hash {_cut(digest)}): "
                      "nothing is appended to it, so this workspace's audited writes fail. "
                      "Run `armarius audit verify` and restore the chain from a backup.")


def _cut(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:80] + "…"


def prepare(tx: Tx) -> None:
    """Lock the chain's head for an :func:`append` later in this transaction, with the next statement sent
    (PostgreSQL: the round trip the append would make to read it). Where the append follows at once, or in
    a transaction that may end without one, there is nothing to gain: the lock is held from here on."""
    tx.prepared[_HEAD] = tx.read_later(_head_sql(tx), (_chain_of(tx),))


def _chain_of(tx: Tx) -> int:
    return tx.workspace_id if tx.workspace_id is not None else SYSTEM_CHAIN


def _scope(chain: int) -> int | None:
    """The transaction scope that reaches a chain (the system chain is outside every workspace)."""
    return None if chain == SYSTEM_CHAIN else chain


def _head_sql(tx: Tx) -> str:
    """The chain's head, locked. SQLite stores in a text column whatever it is given, and Python's sqlite3 fails
    on text that is not UTF-8: the hash is read as bytes there (see _head_of)."""
    if tx.dialect == "postgresql":
        return "SELECT seq, hash FROM audit_heads WHERE workspace_id = ? FOR UPDATE"
    return "SELECT seq, CAST(hash AS BLOB) AS hash FROM audit_heads WHERE workspace_id = ?"


def _locked_head(tx: Tx, chain: int) -> dict[str, Any] | None:
    head = tx.one(_head_sql(tx), (chain,))
    return None if head is None else {**head, "hash": _ascii(head["hash"])}


def _ascii(value: Any) -> Any:
    """SQLite's hash read as bytes, as text again when it is ASCII (anything else stays as it is: no hash)."""
    return value.decode("ascii") if isinstance(value, bytes) and value.isascii() else value


def tail(database: Database, workspace_id: int | None, limit: int = 20) -> list[AuditEvent]:
    """The newest events of one chain, oldest first (a malformed row too, marked as such)."""
    chain = workspace_id or SYSTEM_CHAIN
    with database.transaction(workspace_id=workspace_id) as tx:
        rows = read_rows(tx, EVENT_COLUMNS, "FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT ?",
                         (chain, limit))
    return [_event(row, chain) for row in reversed(rows)]


def read_rows(tx: Tx, columns: Sequence[str], rest: str, params: Sequence[Any] = ()) -> list[Row]:
    """``SELECT columns rest``, where what a column holds may be anything a writer of the tables stored.

    On SQLite a text column may hold bytes that are not UTF-8, which Python's sqlite3 refuses to read
    (the whole statement fails); there such a value is read as :class:`NotUtf8` bytes instead. The
    statement is run again that way only when the plain one fails, so that reading stays as fast as
    ever for every table that holds what Armarius writes.
    """
    plain = f"SELECT {', '.join(columns)} {rest}"
    if tx.dialect != "sqlite":
        return tx.all(plain, tuple(params))
    try:
        return tx.all(plain, tuple(params))
    except sqlite3.OperationalError as error:
        if not str(error).startswith("Could not decode"):
            raise
    raw = ", ".join(f"CASE WHEN typeof({column}) = 'text' THEN CAST({column} AS BLOB) ELSE {column} END AS {column}, "
                    f"typeof({column}) = 'text' AS \"{column}:text\"" for column in columns)
    return [{column: _decoded(row[column]) if row[f"{column}:text"] else row[column] for column in columns}
            for row in tx.all(f"SELECT {raw} {rest}", tuple(params))]


class NotUtf8(bytes):
    """The bytes of a text that is not UTF-8 (SQLite stores what it is given)."""


def _decoded(value: Any) -> Any:
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return NotUtf8(value)


def chain_ids(database: Database) -> list[int]:
    """Every chain that has an event or a head, whatever workspace it claims, and the system chain.

    Rows stored under a workspace id that is not a whole number belong to no chain: see :func:`misfiled_events`.
    """
    with database.transaction() as tx:
        if tx.dialect == "postgresql":
            # Row-level security hides other workspaces' rows; a trigger notes each chain's id here.
            rows = tx.all("SELECT chain_id AS id FROM audit_chains")
        else:  # SQLite keeps whatever an event's workspace_id is given (a head's is its rowid: an integer)
            rows = tx.all("SELECT workspace_id AS id FROM audit_events WHERE typeof(workspace_id) = 'integer' "
                          "GROUP BY workspace_id UNION SELECT workspace_id AS id FROM audit_heads")
    return sorted({row["id"] for row in rows if _whole(row["id"]) is not None} | {SYSTEM_CHAIN})


def misfiled_events(database: Database) -> list[ChainBreak]:
    """Events stored under a workspace id that is not a whole number (SQLite stores what it is given; on
    PostgreSQL the column is a bigint): no chain holds them, so no walk would ever read them."""
    if database.dialect != "sqlite":
        return []
    with database.transaction() as tx:
        rows = tx.all("SELECT typeof(workspace_id) AS type, hex(workspace_id) AS raw, count(*) AS events "
                      "FROM audit_events WHERE typeof(workspace_id) != 'integer' GROUP BY workspace_id")
    found = []
    for row in rows:
        raw = bytes.fromhex(str(row["raw"]))  # a real's or a text's as text, a BLOB's bytes
        stored: Any = raw if row["type"] == "blob" else _decoded(raw)
        if row["type"] == "real" and isinstance(stored, str):
            stored = float(stored)
        events = int(row["events"])
        found.append(ChainBreak(None, 0, f"{_count(events, 'event')} stored under the workspace id "
                                         f"{_describe(stored)}, which is not a whole number: no chain holds "
                                         f"{'it' if events == 1 else 'them'}, and Armarius never writes such an id "
                                         f"({'it was' if events == 1 else 'they were'} written outside Armarius)",
                                MALFORMED_EVENT))
    return found


def last_events(database: Database) -> list[tuple[int, int, str]]:
    """(chain, seq, hash) of the newest event of every chain that has events, as an anchor records it.

    Rows Armarius never writes are passed over (a number below 1 or not whole, a hash that is not 64
    lowercase hex digits): their heads could not be anchored, and ``armarius audit verify`` reports them.
    """
    heads = []
    for chain in chain_ids(database):
        with database.transaction(workspace_id=_scope(chain)) as tx:
            well_formed = ("hash ~ '^[0-9a-f]{64}$'" if tx.dialect == "postgresql" else
                           "typeof(seq) = 'integer' AND typeof(hash) = 'text' AND length(hash) = 64 "
                           "AND hash NOT GLOB '*[^0-9a-f]*'")
            rows = read_rows(tx, ("seq", "hash"), f"FROM audit_events WHERE workspace_id = ? AND seq >= 1 AND "
                                                  f"{well_formed} ORDER BY seq DESC LIMIT 1", (chain,))
        for row in rows:
            seq, event_hash = _whole(row["seq"]), row["hash"]
            if seq is not None and seq >= 1 and isinstance(event_hash, str) and _HASH_FORM.fullmatch(event_hash):
                heads.append((chain, seq, event_hash))
    return heads


def stored_hashes(database: Database, chain: int, seqs: Collection[int]) -> dict[int, str]:
    """The hashes stored for some events of one chain (missing events are left out; a hash stored as
    something else than text is read as it is)."""
    found = {}
    with database.transaction(workspace_id=_scope(chain)) as tx:
        for seq in seqs:
            rows = read_rows(tx, ("hash",), "FROM audit_events WHERE workspace_id = ? AND seq = ?", (chain, seq))
            if rows:
                found[seq] = rows[0]["hash"]
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


#: What :func:`mac_check` finds of one event's MAC.
SIGNED = "signed"
UNSIGNED = "unsigned"
UNKNOWN_KEY = "unknown_key"
MAC_MISMATCH = "mac_mismatch"


def mac_check(keyring: Keyring, event_hash: Any, key_id: Any, mac: Any) -> str:
    """Whether one event's MAC shows that a holder of a key of ``keyring`` wrote it: :data:`SIGNED`,
    :data:`UNSIGNED` (no key id and no MAC), :data:`UNKNOWN_KEY` or :data:`MAC_MISMATCH` (also for values
    of the wrong type). Where an unsigned event may stand is the chain's rule (:class:`_MacCheck`)."""
    if key_id is None and mac is None:
        return UNSIGNED
    key = keyring.get(key_id) if isinstance(key_id, str) else None
    if key is None:
        return UNKNOWN_KEY
    if not (isinstance(mac, str) and isinstance(event_hash, str) and event_hash.isascii()
            and key.verifies(event_hash, mac)):
        return MAC_MISMATCH
    return SIGNED


def mac_checks(database: Database, events: Sequence[AuditEvent]) -> list[str]:
    """:func:`mac_check` of consecutive events of one chain (as :func:`tail` lists them), where an unsigned
    event after a signed one, shown or earlier in the chain, is :data:`MAC_MISMATCH`: it was written without
    the key. An unsigned event before every signed one is :data:`UNSIGNED` (a legacy event, if its chain's
    seal vouches for it: ``armarius audit verify`` checks that)."""
    keyring = keyring_of(database)
    checks = [mac_check(keyring, event.hash, event.key_id, event.mac) for event in events]
    signed_before = False
    if events and checks[0] == UNSIGNED:
        chain = events[0].workspace_id
        with database.transaction(workspace_id=_scope(chain)) as tx:
            signed_before = tx.scalar("SELECT 1 AS found FROM audit_events WHERE workspace_id = ? AND seq < ? AND "
                                      "mac IS NOT NULL LIMIT 1", (chain, events[0].seq)) is not None
    for index, check in enumerate(checks):
        if check == UNSIGNED and signed_before:
            checks[index] = MAC_MISMATCH
        signed_before = signed_before or check != UNSIGNED
    return checks


class _MacCheck:
    """Checks each event's MAC in chain order, and where unauthenticated events may stand."""

    def __init__(self, chain: int, keyring: Keyring) -> None:
        self.chain, self.keyring = chain, keyring
        self.authenticated = False
        self.legacy = 0
        self.bad = 0
        self.first: tuple[int, str] | None = None

    def check(self, row: Mapping[str, Any]) -> str:
        """Check one event (whose links hold); returns what :func:`mac_check` found."""
        seq, key_id = int(row["seq"]), row["key_id"]
        status = mac_check(self.keyring, row["hash"], key_id, row["mac"])
        if status == UNSIGNED:
            if self.authenticated:
                self._fail(seq, "carries no MAC although earlier events do: it was written without the audit key")
            else:
                self.legacy += 1
            return status
        if not self.authenticated and self.legacy and not _vouches_for(row, self.legacy):
            # Only the seal that `armarius init` signed when the log began to be authenticated makes
            # earlier unsigned events legacy; any other signed event after them (an ordinary write
            # appended to a forged, unsigned chain) vouches for nothing.
            self._fail(1, f"is one of {self.legacy} events without a MAC that no audit.sealed event vouches for: "
                          "they were written without the audit key")
        self.authenticated = True
        if status == UNKNOWN_KEY:
            self._fail(seq, f"is signed with key id {_describe(key_id)}, which is not in the audit keyring "
                            f"({self.keyring.source}): add the retired key back to the keyring, or the event "
                            "was forged")
        elif status == MAC_MISMATCH:
            self._fail(seq, "has a MAC that does not match: it was written or rewritten without the audit key")
        return status

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
    details = details_object(row["details"])
    return details is not None and _whole(details.get("legacy_events")) == legacy


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON that Armarius writes")


_DETAILS = json.JSONDecoder(parse_constant=_no_constant)
#: A JSON escape of a surrogate, which may stand for a lone one (no text in the tables holds one as it is).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def details_object(details: Any) -> dict[str, Any] | None:
    """An event's stored details as Armarius writes them, a JSON object, or None if they are not one: not
    text, not JSON, JSON that is not an object, or that holds NaN, Infinity or a lone surrogate (which
    neither canonical JSON nor any output can hold)."""
    if not isinstance(details, str):
        return None
    try:
        value = _DETAILS.decode(details)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    if _SURROGATE_ESCAPE.search(details) and _holds_a_surrogate(value):
        return None
    return value


def _holds_a_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(char) <= 0xDFFF for char in value)
    if isinstance(value, dict):
        return any(_holds_a_surrogate(key) or _holds_a_surrogate(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_a_surrogate(item) for item in value)
    return False


def walk_chain(database: Database, chain: int, wanted: Collection[int] = ()) -> ChainWalk:
    """Walk one chain from its start: its links, its head and every event's MAC."""
    walk = ChainWalk(chain)
    macs = _MacCheck(chain, keyring_of(database))
    expected_seq, prev_hash = 1, GENESIS_HASH
    broken = False
    # Events whose links hold but whose details are not a JSON object: the first, and how many.
    odd_details, odd_count = 0, 0
    # The first batch starts below 1, so that an event slipped in before the start is seen too; each next one
    # after the last number read as stored (an odd number between two whole ones is read too).
    after, first = _MIN_SEQ, True
    # One snapshot (PostgreSQL): the events, their count and the head as of one moment, whatever is appended.
    with database.transaction(workspace_id=_scope(chain), snapshot=True) as tx:
        while not broken:
            rows = read_rows(
                tx, EVENT_COLUMNS,
                f"FROM audit_events WHERE workspace_id = ? AND seq {'>=' if first else '>'} ? ORDER BY seq LIMIT ?",
                (chain, after, _VERIFY_BATCH),
            )
            first = False
            for row in rows:
                found = _link(row, expected_seq, prev_hash)
                if found:
                    kind, problem = found
                    seq = _whole(row["seq"])
                    walk.problems.append(ChainBreak(chain, expected_seq if seq is None else min(expected_seq, seq),
                                                    problem, kind))
                    broken = True
                    break
                # Details whose MAC checks were written by a holder of the key, as Armarius writes them (a JSON
                # object): only the others are parsed, so that a walk of a signed chain costs no more than it did.
                if macs.check(row) != SIGNED and details_object(row["details"]) is None:
                    odd_details, odd_count = odd_details or expected_seq, odd_count + 1
                if expected_seq in wanted:
                    walk.seen[expected_seq] = row["hash"]
                expected_seq, prev_hash, walk.checked = expected_seq + 1, row["hash"], walk.checked + 1
            if rows:
                after = rows[-1]["seq"]
            if len(rows) < _VERIFY_BATCH:
                break
        stored = int(tx.scalar("SELECT count(*) FROM audit_events WHERE workspace_id = ?", (chain,)))
        heads = read_rows(tx, ("seq", "hash"), "FROM audit_heads WHERE workspace_id = ?", (chain,))
    walk.last_seq, walk.legacy = expected_seq - 1, macs.legacy
    if odd_count:
        more = f" ({odd_count} events of this chain have such details)" if odd_count > 1 else ""
        walk.problems.append(ChainBreak(chain, odd_details, f"event {odd_details}'s details are not a JSON object, "
                                        f"which Armarius always writes: it was written outside the log{more}",
                                        MALFORMED_EVENT))
    if not broken and stored != walk.checked:  # a second event under one number, which the walk steps over
        walk.problems.append(ChainBreak(chain, max(walk.last_seq, 1), f"{stored - walk.checked} more events are "
                                        "stored than the chain holds: they were added outside the log"))
        broken = True
    if not broken:
        _check_head(walk, heads[0] if heads else None, prev_hash)
    mac_problem = macs.result(whole_chain=not broken)
    if mac_problem is not None:
        walk.problems.append(mac_problem)
    return walk


def _check_head(walk: ChainWalk, head: Mapping[str, Any] | None, last_hash: str) -> None:
    """The head must record the last event; the first broken link is always a seq that exists."""
    stored_seq, head_hash = (head["seq"], head["hash"]) if head else (0, GENESIS_HASH)
    head_seq = _whole(stored_seq)
    chain, last_seq = walk.chain, walk.last_seq
    if head_seq is None or not isinstance(head_hash, str):
        walk.problems.append(ChainBreak(chain, max(last_seq, 1), f"the head records {_describe(stored_seq)} as its "
                                        f"number and {_describe(head_hash)} as its hash, where Armarius writes a "
                                        "whole number and a text: it was written outside the log"))
    elif head_seq > last_seq:
        walk.problems.append(ChainBreak(chain, last_seq + 1, f"events end at {last_seq} but the head records "
                                                             f"{head_seq}: events were removed"))
    elif head_seq < last_seq:
        walk.checked = head_seq
        walk.problems.append(ChainBreak(chain, head_seq + 1, f"the head records {head_seq} but events go on to "
                                                             f"{last_seq}: the head is behind its events (moved "
                                                             "back, or restored from an older backup than the "
                                                             "events), or events were added outside the log; "
                                                             "nothing is appended to the chain until it is "
                                                             "restored"))
    elif head_hash != last_hash:
        walk.checked = max(walk.checked - 1, 0)
        walk.problems.append(ChainBreak(chain, max(last_seq, 1), "the last event does not match the head's hash: "
                                                                 "it was replaced"))


def _whole(seq: Any) -> int | None:
    """An event's number as stored, if it is a whole number (SQLite stores what it is given)."""
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _describe(value: Any) -> str:
    """A stored value as a finding names it (never more than a few dozen characters of it)."""
    if isinstance(value, NotUtf8):
        return f"text that is not UTF-8 ({bytes(value[:20])!r})"
    if isinstance(value, bytes):
        return f"a BLOB ({value[:20]!r})"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "…")
    if value is None:
        return "NULL"
    return repr(value)


def _shown(value: Any) -> str:
    """A stored value as a listing shows it in place of a text."""
    if isinstance(value, str):
        return value
    if isinstance(value, NotUtf8):
        return value.decode("utf-8", "replace")
    if isinstance(value, bytes):
        return f"x'{value[:64].hex()}'"
    return "" if value is None else repr(value)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _link(row: Mapping[str, Any], expected_seq: int, prev_hash: str) -> tuple[str, str] | None:
    """(kind, problem) of the first thing wrong with the event's link to the one before, if any."""
    misplaced = _misplaced(row["seq"], expected_seq)
    if misplaced:
        return BROKEN_LINK, misplaced
    if _whole(row["workspace_id"]) is None or not all(isinstance(row[column], str) for column in _HASHED_TEXT):
        wrong = [f"its {column} is {_describe(row[column])}" for column in _HASHED_TEXT
                 if not isinstance(row[column], str)]
        if _whole(row["workspace_id"]) is None:
            wrong.insert(0, f"its workspace id is {_describe(row['workspace_id'])}")
        return MALFORMED_EVENT, (f"{', '.join(wrong)}, where Armarius writes text (a whole number for the workspace "
                                 "id), so the event's hash cannot be checked: it was written outside the log")
    if row["prev_hash"] != prev_hash:
        return BROKEN_LINK, "prev_hash does not match the previous event: events were removed or reordered"
    recomputed = event_hash(
        row["workspace_id"], expected_seq, row["at"], row["actor"], row["action"], row["subject"], row["details"],
        row["prev_hash"],
    )
    if recomputed != row["hash"]:
        return BROKEN_LINK, "the event's content does not match its hash: it was edited"
    return None


def _misplaced(stored_seq: Any, expected_seq: int) -> str | None:
    seq = _whole(stored_seq)
    if seq is None:
        return (f"an event numbered {_describe(stored_seq)}, not a whole number, follows event {expected_seq - 1}: "
                "it was added outside the log")
    if seq < expected_seq:
        return f"event {seq} lies before the start of the chain: it was added outside the log"
    if seq != expected_seq:
        return f"event {expected_seq} is missing (next is {seq})"
    return None


def link_problem(row: Mapping[str, Any], expected_seq: int, prev_hash: str) -> str | None:
    found = _link(row, expected_seq, prev_hash)
    return None if found is None else found[1]


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
        legacy = {row["chain_id"]: row["through_seq"]
                  for row in read_rows(tx, ("chain_id", "through_seq"), "FROM audit_legacy_events")
                  if _whole(row["chain_id"]) is not None and _whole(row["through_seq"]) is not None}
    sealed = []
    for chain, through_seq in sorted(legacy.items()):
        with database.transaction(workspace_id=_scope(chain), write=True) as tx:
            head = _locked_head(tx, chain)
            rows = read_rows(tx, ("seq", "hash", "mac"),
                             "FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT 1", (chain,))
            last = rows[0] if rows else None
            if head is None or last is None or last["mac"] is not None or _whole(last["seq"]) != through_seq:
                continue
            if (_whole(head["seq"]), head["hash"]) != (through_seq, last["hash"]):
                continue  # the head disagrees with the events: left for `armarius audit verify` to report
            append(tx, actor="system", action="audit.sealed",
                   details={"legacy_events": through_seq, "key_id": keyring_of(database).active.id})
            sealed.append(chain)
    return sealed


def record_key_rotation(database: Database, *, by: str, retired_key_id: str, key_id: str | None = None
                        ) -> AuditEvent:
    """The system chain's record of a rotation, signed with the new key (``key_id``, if given, must be the
    keyring's active key: the one the rotation added)."""
    active = keyring_of(database).active.id
    if key_id is not None and key_id != active:
        raise RuntimeError(f"the rotation added key {key_id}, but key {active} signs: the key file changed meanwhile")
    with database.transaction(write=True) as tx:
        return append(tx, actor=by, action="audit.key_rotated",
                      details={"retired_key_id": retired_key_id, "key_id": active})


def _event(row: Mapping[str, Any], chain: int) -> AuditEvent:
    """A row of ``chain`` as a listing shows it, whatever it holds: a value that is not what Armarius writes is
    shown as best it can be, and :attr:`AuditEvent.malformed` says what is wrong."""
    wrong = []
    seq = _whole(row["seq"])
    if seq is None:
        wrong.append(f"its number is {_describe(row['seq'])}, not a whole number")
        stored = row["seq"]
        seq = int(stored) if isinstance(stored, float) and math.isfinite(stored) else 0
    workspace_id = _whole(row["workspace_id"])
    if workspace_id is None:
        wrong.append(f"its workspace id is {_describe(row['workspace_id'])}")
    shown = {}
    for column in _HASHED_TEXT:
        if not isinstance(row[column], str):
            wrong.append(f"its {column} is {_describe(row[column])}, not text")
        shown[column] = _shown(row[column])
    details = details_object(row["details"])
    if details is None and isinstance(row["details"], str):
        wrong.append(f"its details {_describe(row['details'])} are not a JSON object")
    signature = {}
    for column in ("key_id", "mac"):
        value = row[column]
        if value is not None and not isinstance(value, str):
            wrong.append(f"its {column} is {_describe(value)}, not text")
        signature[column] = None if value is None else _shown(value)
    return AuditEvent(
        chain if workspace_id is None else workspace_id, seq, shown["at"], shown["actor"], shown["action"],
        shown["subject"], {} if details is None else details, shown["prev_hash"], shown["hash"], signature["key_id"],
        signature["mac"], "; ".join(wrong) + ": it was not written by Armarius" if wrong else None,
    )
