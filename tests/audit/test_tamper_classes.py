"""Every class of tampering is found, on both engines, with the anchor or the key where it needs one.

Each class is applied by someone who can write the database but holds no audit key: the table
owner (past Armarius and row-level security), and on PostgreSQL also the application's own login
role, which may insert audit events and move heads. The heads anchored before the tampering are
what `armarius audit anchor` would have written to a file outside the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest

from armarius.app import Armarius, initialize, open_app
from armarius.audit import chain as audit
from armarius.audit.anchors import Anchor
from armarius.audit.keys import keyring_of
from armarius.audit.verify import AuditReport, verify_log
from armarius.canonical import canonical_json
from armarius.config import Settings
from tests.audit.tamper import (
    COLUMNS,
    append_forged,
    chain_rows,
    forged_event,
    guessed_mac,
    rewrite_chain,
    set_head,
)
from tests.helpers import OwnerSQL

EVENTS_IN_A = 6
UNKNOWN_WORKSPACE_ID = 999


@dataclass
class Log:
    app: Armarius
    settings: Settings
    a: int
    b: int

    def owner(self) -> OwnerSQL:
        return OwnerSQL(self.settings)

    def heads(self) -> list[Anchor]:
        return [Anchor(chain, seq, event_hash, source="test") for chain, seq, event_hash in
                audit.last_events(self.app.database)]

    def report(self, anchors: list[Anchor] | None = None) -> AuditReport:
        known = [space.id for space in self.app.directory.workspaces()]
        return verify_log(self.app.database, known_workspaces=known, anchors=anchors or [])

    @property
    def key_id(self) -> str:
        return keyring_of(self.app.database).active.id


def fill(app: Armarius, settings: Settings) -> Log:
    """alpha with 6 events, beta with 3, and the system chain with their creation."""
    a = app.directory.create_workspace("alpha", by="operator:test").id
    b = app.directory.create_workspace("beta", by="operator:test").id
    for workspace_id, count in ((a, EVENTS_IN_A), (b, 3)):
        for index in range(1, count + 1):
            with app.database.transaction(workspace_id=workspace_id, write=True) as tx:
                audit.append(tx, actor="human:ada", action="test.event", subject=f"s{index}", details={"i": index})
    return Log(app, settings, a, b)


@pytest.fixture
def log(app: Armarius, settings: Settings) -> Log:
    return fill(app, settings)


def kinds(report: AuditReport) -> set[str]:
    return {problem.kind for problem in report.problems}


# The classes ------------------------------------------------------------------------------------


def edit(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_events SET details = ? WHERE workspace_id = ? AND seq = 3",
                  (canonical_json({"i": 3, "note": "edited"}), log.a))


def edit_and_rehash(log: Log, owner: OwnerSQL) -> None:
    events = chain_rows(owner, log.a)
    events[2]["details"] = canonical_json({"i": 3, "note": "edited"})
    rewrite_chain(owner, log.a, events[2:], from_seq=3)


def delete(log: Log, owner: OwnerSQL) -> None:
    owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq = 3", (log.a,))


def delete_and_relink(log: Log, owner: OwnerSQL) -> None:
    events = chain_rows(owner, log.a)
    rewrite_chain(owner, log.a, events[3:], from_seq=3)


def reorder(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_events SET seq = -1 WHERE workspace_id = ? AND seq = 2", (log.a,))
    owner.execute("UPDATE audit_events SET seq = 2 WHERE workspace_id = ? AND seq = 5", (log.a,))
    owner.execute("UPDATE audit_events SET seq = 5 WHERE workspace_id = ? AND seq = -1", (log.a,))


def reorder_and_rehash(log: Log, owner: OwnerSQL) -> None:
    events = chain_rows(owner, log.a)
    events[1], events[4] = events[4], events[1]
    rewrite_chain(owner, log.a, events[1:], from_seq=2)


def truncate(log: Log, owner: OwnerSQL) -> None:
    """The newest events removed and the head moved back: every remaining link holds."""
    owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq > 4", (log.a,))
    set_head(owner, log.a, 4, chain_rows(owner, log.a)[-1]["hash"])


def wipe(log: Log, owner: OwnerSQL) -> None:
    owner.execute("DELETE FROM audit_events")
    owner.execute("DELETE FROM audit_heads")


def wipe_one_chain(log: Log, owner: OwnerSQL) -> None:
    owner.execute("DELETE FROM audit_events WHERE workspace_id = ?", (log.a,))
    owner.execute("DELETE FROM audit_heads WHERE workspace_id = ?", (log.a,))


def insert(log: Log, owner: OwnerSQL) -> None:
    events = chain_rows(owner, log.a)
    rewrite_chain(owner, log.a, [forged_event(), *events[3:]], from_seq=4)


def strip_macs(log: Log, owner: OwnerSQL) -> None:
    """Pretend the whole chain predates the audit key."""
    owner.execute("UPDATE audit_events SET key_id = NULL, mac = NULL WHERE workspace_id = ?", (log.a,))


def forged_append(log: Log, owner: OwnerSQL) -> None:
    append_forged(owner, log.a, forged_event())


def forged_append_with_a_guessed_mac(log: Log, owner: OwnerSQL) -> None:
    append_forged(owner, log.a, guessed_mac(log.key_id))


def forged_append_with_an_unknown_key(log: Log, owner: OwnerSQL) -> None:
    append_forged(owner, log.a, guessed_mac("0123456789abcdef"))


def forged_chain_of_an_unknown_workspace(log: Log, owner: OwnerSQL) -> None:
    rewrite_chain(owner, UNKNOWN_WORKSPACE_ID, [forged_event(), forged_event("memory.curated")])


def forged_chain_of_an_unknown_workspace_with_guessed_macs(log: Log, owner: OwnerSQL) -> None:
    rewrite_chain(owner, UNKNOWN_WORKSPACE_ID, [guessed_mac(log.key_id)])


@dataclass(frozen=True)
class Tamper:
    apply: Callable[[Log, OwnerSQL], None]
    #: The kind of finding that shows it.
    finding: str
    #: What verification needs to see it: nothing, the key (MACs), or an anchor taken before.
    needs: str = "nothing"

    @property
    def name(self) -> str:
        return self.apply.__name__


TAMPERS = [
    Tamper(edit, audit.BROKEN_LINK),
    Tamper(edit_and_rehash, audit.BAD_MAC, "key"),
    Tamper(delete, audit.BROKEN_LINK),
    Tamper(delete_and_relink, audit.BAD_MAC, "key"),
    Tamper(reorder, audit.BROKEN_LINK),
    Tamper(reorder_and_rehash, audit.BAD_MAC, "key"),
    Tamper(truncate, audit.ANCHOR_NOT_FOUND, "anchor"),
    Tamper(wipe, audit.BROKEN_LINK),  # the system chain is empty while workspaces exist
    Tamper(wipe, audit.ANCHOR_NOT_FOUND, "anchor"),
    Tamper(wipe_one_chain, audit.ANCHOR_NOT_FOUND, "anchor"),
    Tamper(insert, audit.BAD_MAC, "key"),
    Tamper(strip_macs, audit.BAD_MAC, "key"),
    Tamper(forged_append, audit.BAD_MAC, "key"),
    Tamper(forged_append_with_a_guessed_mac, audit.BAD_MAC, "key"),
    Tamper(forged_append_with_an_unknown_key, audit.BAD_MAC, "key"),
    Tamper(forged_chain_of_an_unknown_workspace, audit.UNKNOWN_WORKSPACE),
    Tamper(forged_chain_of_an_unknown_workspace_with_guessed_macs, audit.UNKNOWN_WORKSPACE),
]


@pytest.mark.parametrize("tamper", TAMPERS, ids=lambda tamper: f"{tamper.name}-{tamper.finding}")
def test_every_tamper_class_is_found(log: Log, tamper: Tamper) -> None:
    anchors = log.heads()  # taken before the tampering, as `armarius audit anchor` would
    assert log.report(anchors).intact
    with log.owner() as owner:
        tamper.apply(log, owner)
    report = log.report(anchors if tamper.needs == "anchor" else None)
    assert not report.intact
    assert tamper.finding in kinds(report), report.problems
    assert not log.report(anchors).intact
    if tamper.needs == "anchor" and tamper.apply is not wipe:
        # Honest limit: without an anchor these leave a consistent, authenticated chain behind.
        assert log.report().intact


def test_hashes_alone_miss_what_the_key_finds(log: Log) -> None:
    """The classes that need the key leave every link intact: only the MACs show them."""
    for tamper in [tamper for tamper in TAMPERS if tamper.needs == "key"]:
        with log.owner() as owner:
            saved = chain_rows(owner, log.a)
            tamper.apply(log, owner)
        walk = audit.walk_chain(log.app.database, log.a)
        assert {problem.kind for problem in walk.problems} == {audit.BAD_MAC}, (tamper.name, walk.problems)
        with log.owner() as owner:
            rewrite_chain(owner, log.a, saved)
        assert log.report().intact


def test_a_chain_of_an_unknown_workspace_is_named_and_checked(log: Log) -> None:
    with log.owner() as owner:
        forged_chain_of_an_unknown_workspace(log, owner)
    report = log.report()
    unknown = report.of_kind(audit.UNKNOWN_WORKSPACE)
    assert [problem.workspace_id for problem in unknown] == [UNKNOWN_WORKSPACE_ID]
    assert "2 events" in unknown[0].problem
    assert [(problem.workspace_id, problem.seq) for problem in report.of_kind(audit.BAD_MAC)] == [
        (UNKNOWN_WORKSPACE_ID, 1)]
    with log.owner() as owner:
        stored = sum(len(chain_rows(owner, chain)) for chain in (0, log.a, log.b, UNKNOWN_WORKSPACE_ID))
    assert report.events_checked == stored


def test_a_head_without_events_in_an_unknown_workspace_is_found(log: Log) -> None:
    with log.owner() as owner:
        set_head(owner, UNKNOWN_WORKSPACE_ID, 3, "f" * 64)
    report = log.report()
    assert {(problem.kind, problem.workspace_id) for problem in report.problems} == {
        (audit.UNKNOWN_WORKSPACE, UNKNOWN_WORKSPACE_ID), (audit.BROKEN_LINK, UNKNOWN_WORKSPACE_ID)}


def test_anchors_name_the_rewritten_and_the_removed(log: Log) -> None:
    anchors = log.heads()
    with log.owner() as owner:
        edit_and_rehash(log, owner)
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq = 3", (log.b,))
        set_head(owner, log.b, 2, chain_rows(owner, log.b)[-1]["hash"])
    found = {problem.workspace_id: problem.problem for problem in log.report(anchors).of_kind(audit.ANCHOR_NOT_FOUND)}
    assert set(found) == {log.a, log.b}
    assert "rewritten" in found[log.a]
    assert "no longer exists" in found[log.b]


def test_old_anchors_stay_valid_while_the_chain_grows(log: Log) -> None:
    first = log.heads()
    with log.app.database.transaction(workspace_id=log.a, write=True) as tx:
        audit.append(tx, actor="human:ada", action="test.more")
    report = log.report(first + log.heads())
    assert report.intact
    assert report.anchors_checked == len(first) + len(log.heads())


# The application's own login role on PostgreSQL ----------------------------------------------------


@pytest.fixture
def pg_log(postgres_database: Any, tmp_path: Path) -> Iterator[Log]:
    settings = Settings(data_dir=tmp_path / "data", database_url=postgres_database.app_url,
                        database_migrate_url=postgres_database.owner_url)
    initialize(settings)
    application = open_app(settings)
    try:
        yield fill(application, settings)
    finally:
        application.close()


def app_role_appends(log: Log, chain: int, event: dict[str, Any]) -> None:
    """As the server's login role, outside Armarius: a valid hash, the head moved onto it."""
    assert log.settings.database_url is not None
    with psycopg.connect(log.settings.database_url, autocommit=False) as connection:
        connection.execute("SELECT set_config('armarius.workspace_id', %s, true)", (str(chain),))
        head = connection.execute("SELECT seq, hash FROM audit_heads WHERE workspace_id = %s FOR UPDATE",
                                  (chain,)).fetchone()
        seq, prev_hash = (head[0] + 1, head[1]) if head else (1, audit.GENESIS_HASH)
        digest = audit.event_hash(chain, seq, event["at"], event["actor"], event["action"], event["subject"],
                                  event["details"], prev_hash)
        connection.execute(f"INSERT INTO audit_events ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * 11)})",
                           (chain, seq, event["at"], event["actor"], event["action"], event["subject"],
                            event["details"], prev_hash, digest, event["key_id"], event["mac"]))
        if head:
            connection.execute("UPDATE audit_heads SET seq = %s, hash = %s WHERE workspace_id = %s",
                               (seq, digest, chain))
        else:
            connection.execute("INSERT INTO audit_heads (workspace_id, seq, hash) VALUES (%s, %s, %s)",
                               (chain, seq, digest))
        connection.commit()


@pytest.mark.postgres
@pytest.mark.parametrize("forgery", ["no_mac", "guessed_mac", "unknown_key"])
def test_forged_append_by_the_application_role_is_found(pg_log: Log, forgery: str) -> None:
    event = {"no_mac": forged_event(), "guessed_mac": guessed_mac(pg_log.key_id),
             "unknown_key": guessed_mac("0123456789abcdef")}[forgery]
    app_role_appends(pg_log, pg_log.a, event)
    with OwnerSQL(pg_log.settings) as owner:
        assert chain_rows(owner, pg_log.a)[-1]["action"] == "memory.created"  # the role could write it
    assert audit.walk_chain(pg_log.app.database, pg_log.a).problems[0].kind == audit.BAD_MAC
    report = pg_log.report()
    assert [(problem.kind, problem.workspace_id, problem.seq) for problem in report.problems] == [
        (audit.BAD_MAC, pg_log.a, EVENTS_IN_A + 1)]


@pytest.mark.postgres
def test_forged_chain_of_an_unknown_workspace_by_the_application_role_is_found(pg_log: Log) -> None:
    """Row-level security hides the forged chain from the role verify runs as; the chain list does not."""
    app_role_appends(pg_log, UNKNOWN_WORKSPACE_ID, forged_event())
    app_role_appends(pg_log, UNKNOWN_WORKSPACE_ID, forged_event("memory.curated"))
    report = pg_log.report()
    assert {(problem.kind, problem.workspace_id) for problem in report.problems} == {
        (audit.UNKNOWN_WORKSPACE, UNKNOWN_WORKSPACE_ID), (audit.BAD_MAC, UNKNOWN_WORKSPACE_ID)}


@pytest.mark.postgres
def test_the_application_role_cannot_hide_a_chain(pg_log: Log) -> None:
    assert pg_log.settings.database_url is not None
    with psycopg.connect(pg_log.settings.database_url, autocommit=True) as connection:
        for statement in ("DELETE FROM audit_chains", "UPDATE audit_chains SET chain_id = chain_id + 1000",
                          "TRUNCATE audit_chains", "INSERT INTO audit_chains (chain_id) VALUES (5)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute(statement)
        listed = connection.execute("SELECT chain_id FROM audit_chains ORDER BY 1").fetchall()
    assert [row[0] for row in listed] == [0, pg_log.a, pg_log.b]
