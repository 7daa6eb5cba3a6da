"""The hash-chained audit log: tampering found at the first broken link, and racing appenders.

(tests/audit/test_tamper_classes.py covers each tamper class end to end: MACs, anchors, unknown
workspaces and the application's own login role.)

Tampering is done the way an intruder with database access would do it: directly in the
database as the table owner (a plain sqlite3 connection to the file; psycopg as the owner on
PostgreSQL), past Armarius and past row-level security.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from dataclasses import dataclass

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.canonical import canonical_json
from armarius.config import Settings
from tests.helpers import OwnerSQL

EVENTS_IN_A = 6
EVENTS_IN_B = 3


@dataclass
class Chains:
    app: Armarius
    settings: Settings
    a: int
    b: int

    def owner(self) -> OwnerSQL:
        return OwnerSQL(self.settings)

    def verify_a(self) -> tuple[int, audit.ChainBreak | None]:
        return audit.verify_chain(self.app.database, self.a)

    def breaks(self) -> list[audit.ChainBreak]:
        total, found = audit.verify_all(self.app.database, [self.a, self.b])
        assert total >= 0
        return found


@pytest.fixture
def chains(app: Armarius, settings: Settings) -> Chains:
    """Workspace A with events 1..6, workspace B with 1..3, and the system chain."""
    a = app.directory.create_workspace("alpha", by="operator:test").id
    b = app.directory.create_workspace("beta", by="operator:test").id
    for workspace_id, count in ((a, EVENTS_IN_A), (b, EVENTS_IN_B)):
        for index in range(1, count + 1):
            with app.database.transaction(workspace_id=workspace_id, write=True) as tx:
                audit.append(tx, actor="human:ada", action="test.event", subject=f"s{index}",
                             details={"index": index, "note": "ünïcode ✓"})
    return Chains(app, settings, a, b)


def only_break(chains: Chains) -> audit.ChainBreak:
    found = chains.breaks()
    assert len(found) == 1, found
    return found[0]


def swap_seqs(owner: OwnerSQL, workspace_id: int, first: int, second: int) -> None:
    owner.execute("UPDATE audit_events SET seq = -1 WHERE workspace_id = ? AND seq = ?", (workspace_id, first))
    owner.execute("UPDATE audit_events SET seq = ? WHERE workspace_id = ? AND seq = ?", (first, workspace_id, second))
    owner.execute("UPDATE audit_events SET seq = ? WHERE workspace_id = ? AND seq = -1", (second, workspace_id))


# Intact chains ----------------------------------------------------------------------------------


def test_untouched_chains_verify(chains: Chains) -> None:
    assert chains.verify_a() == (EVENTS_IN_A, None)
    assert audit.verify_chain(chains.app.database, chains.b) == (EVENTS_IN_B, None)
    system_checked, system_break = audit.verify_chain(chains.app.database, None)
    assert system_break is None
    assert system_checked == 2  # the two workspace.created events
    assert audit.verify_all(chains.app.database, [chains.a, chains.b]) == (EVENTS_IN_A + EVENTS_IN_B + 2, [])


def test_events_link_to_their_predecessor(chains: Chains) -> None:
    events = audit.tail(chains.app.database, chains.a, limit=100)
    assert [event.seq for event in events] == list(range(1, EVENTS_IN_A + 1))
    assert events[0].prev_hash == audit.GENESIS_HASH
    for earlier, later in itertools.pairwise(events):
        assert later.prev_hash == earlier.hash
    assert events[2].details == {"index": 3, "note": "ünïcode ✓"}
    assert {event.workspace_id for event in events} == {chains.a}


def test_append_returns_what_was_stored(chains: Chains) -> None:
    with chains.app.database.transaction(workspace_id=chains.b, write=True) as tx:
        event = audit.append(tx, actor="agent:bot", action="memory.written", subject="notes/x", details={"r": 2})
    assert audit.tail(chains.app.database, chains.b, limit=1) == [event]
    assert event.seq == EVENTS_IN_B + 1


def test_empty_chain_verifies(app: Armarius) -> None:
    assert audit.verify_chain(app.database, None) == (0, None)
    assert audit.verify_chain(app.database, 12345) == (0, None)


# Tampering --------------------------------------------------------------------------------------


def test_edited_details_are_found(chains: Chains) -> None:
    with chains.owner() as owner:
        changed = owner.execute("UPDATE audit_events SET details = ? WHERE workspace_id = ? AND seq = 3",
                                (canonical_json({"index": 3, "note": "rewritten"}), chains.a))
        assert changed == 1
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 3)
    assert "edited" in problem.problem
    assert chains.verify_a() == (2, problem)


def test_edited_actor_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("UPDATE audit_events SET actor = 'human:mallory' WHERE workspace_id = ? AND seq = 1",
                      (chains.a,))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 1)


@pytest.mark.parametrize("column", ["at", "action", "subject"])
def test_every_hashed_column_is_covered(chains: Chains, column: str) -> None:
    with chains.owner() as owner:
        owner.execute(f"UPDATE audit_events SET {column} = {column} || 'x' WHERE workspace_id = ? AND seq = 4",
                      (chains.a,))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 4)


def test_edit_with_a_recomputed_hash_breaks_the_next_link(chains: Chains) -> None:
    """An intruder who rehashes the edited event still breaks the link from its successor."""
    with chains.owner() as owner:
        row = owner.rows("SELECT at, actor, action, subject, prev_hash FROM audit_events "
                         "WHERE workspace_id = ? AND seq = 3", (chains.a,))[0]
        forged_details = canonical_json({"index": 3, "note": "forged"})
        forged_hash = audit.event_hash(chains.a, 3, row[0], row[1], row[2], row[3], forged_details, row[4])
        owner.execute("UPDATE audit_events SET details = ?, hash = ? WHERE workspace_id = ? AND seq = 3",
                      (forged_details, forged_hash, chains.a))
    walk = audit.walk_chain(chains.app.database, chains.a)
    assert [(problem.kind, problem.seq) for problem in walk.problems] == [(audit.BROKEN_LINK, 4), (audit.BAD_MAC, 3)]
    assert "prev_hash" in walk.problems[0].problem
    assert "without the audit key" in walk.problems[1].problem
    assert only_break(chains) == walk.problems[1]  # the first problem by position


def test_deleted_middle_event_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        assert owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq = 3", (chains.a,)) == 1
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 3)
    assert "missing" in problem.problem


def test_deleted_first_event_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq = 1", (chains.a,))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 1)


def test_deleted_last_event_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq = ?", (chains.a, EVENTS_IN_A))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, EVENTS_IN_A)
    assert "removed" in problem.problem


def test_every_event_deleted_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ?", (chains.a,))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 1)


@pytest.mark.parametrize(("first", "second"), [(2, 3), (2, 5), (1, EVENTS_IN_A)])
def test_reordered_events_are_found(chains: Chains, first: int, second: int) -> None:
    with chains.owner() as owner:
        swap_seqs(owner, chains.a, first, second)
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, first)


def test_event_moved_to_another_chain_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("UPDATE audit_events SET workspace_id = ?, seq = ? WHERE workspace_id = ? AND seq = ?",
                      (chains.b, EVENTS_IN_B + 1, chains.a, EVENTS_IN_A))
        owner.execute("UPDATE audit_heads SET seq = ?, hash = (SELECT hash FROM audit_events "
                      "WHERE workspace_id = ? AND seq = ?) WHERE workspace_id = ?",
                      (EVENTS_IN_B + 1, chains.b, EVENTS_IN_B + 1, chains.b))
    found = {(problem.workspace_id, problem.seq) for problem in chains.breaks()}
    assert found == {(chains.a, EVENTS_IN_A), (chains.b, EVENTS_IN_B + 1)}


def test_event_appended_behind_the_head_is_found(chains: Chains) -> None:
    """A forged event with a valid hash, added without moving the head, is reported at its own seq."""
    with chains.owner() as owner:
        last_hash = owner.rows("SELECT hash FROM audit_events WHERE workspace_id = ? AND seq = ?",
                               (chains.a, EVENTS_IN_A))[0][0]
        seq, at, details = EVENTS_IN_A + 1, "2020-01-01T00:00:00.000000Z", canonical_json({})
        forged = audit.event_hash(chains.a, seq, at, "human:ada", "forged", "", details, last_hash)
        owner.execute("INSERT INTO audit_events (workspace_id, seq, at, actor, action, subject, details, prev_hash, "
                      "hash) VALUES (?, ?, ?, 'human:ada', 'forged', '', ?, ?, ?)",
                      (chains.a, seq, at, details, last_hash, forged))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, EVENTS_IN_A + 1)
    assert "removed" not in problem.problem
    assert chains.verify_a() == (EVENTS_IN_A, problem)


def test_event_slipped_in_before_the_start_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("INSERT INTO audit_events (workspace_id, seq, at, actor, action, subject, details, prev_hash, "
                      "hash) SELECT workspace_id, 0, at, actor, action, subject, details, prev_hash, hash "
                      "FROM audit_events WHERE workspace_id = ? AND seq = 1", (chains.a,))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 0)


def test_replaced_last_event_is_found(chains: Chains) -> None:
    """The last event, rewritten with a valid hash of its own, no longer matches the head."""
    with chains.owner() as owner:
        row = owner.rows("SELECT at, actor, action, subject, prev_hash FROM audit_events "
                         "WHERE workspace_id = ? AND seq = ?", (chains.a, EVENTS_IN_A))[0]
        details = canonical_json({"index": EVENTS_IN_A, "note": "replaced"})
        forged = audit.event_hash(chains.a, EVENTS_IN_A, row[0], row[1], row[2], row[3], details, row[4])
        owner.execute("UPDATE audit_events SET details = ?, hash = ? WHERE workspace_id = ? AND seq = ?",
                      (details, forged, chains.a, EVENTS_IN_A))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, EVENTS_IN_A)
    assert chains.verify_a() == (EVENTS_IN_A - 1, problem)


def test_missing_head_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("DELETE FROM audit_heads WHERE workspace_id = ?", (chains.a,))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 1)


@pytest.mark.parametrize("deleted", [2, 3, 4, 5])
def test_breaks_across_verify_batches_are_found(
    chains: Chains, monkeypatch: pytest.MonkeyPatch, deleted: int
) -> None:
    """The walk reads the chain in batches; a break on either side of a batch edge is found."""
    monkeypatch.setattr(audit, "_VERIFY_BATCH", 2)
    assert chains.verify_a() == (EVENTS_IN_A, None)
    with chains.owner() as owner:
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq = ?", (chains.a, deleted))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, deleted)
    assert chains.verify_a()[0] == deleted - 1


@pytest.mark.parametrize("batch", [3, 5000])
def test_an_event_added_under_a_number_the_walk_steps_over_is_found(
    chains: Chains, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """A forged copy of event 3 with another actor, where a batch of the walk ends (3) or not: numbered 3.5
    on SQLite (which stores what it is given), numbered 3 again on PostgreSQL once the owner has dropped the
    primary key. The listings would show it as event 3; verify must not call the chain intact."""
    monkeypatch.setattr(audit, "_VERIFY_BATCH", batch)
    with chains.owner() as owner:
        if chains.settings.database_url is None:
            seq = "3.5"
        else:
            owner.execute("ALTER TABLE audit_events DROP CONSTRAINT audit_events_pkey")
            seq = "3"
        owner.execute("INSERT INTO audit_events (workspace_id, seq, at, actor, action, subject, details, prev_hash, "
                      f"hash, key_id, mac) SELECT workspace_id, {seq}, at, 'human:mallory', 'approval.issued', "
                      "subject, details, prev_hash, hash, key_id, mac FROM audit_events WHERE workspace_id = ? "
                      "AND seq = 3", (chains.a,))
    problem = only_break(chains)
    assert problem.workspace_id == chains.a
    assert 3 <= problem.seq <= EVENTS_IN_A


def test_a_chain_verified_while_events_are_appended_is_intact(chains: Chains) -> None:
    """verify reads the events, their count and the head as of one moment: an append committing meanwhile is
    not taken for removed events (PostgreSQL; SQLite's readers always see one moment)."""
    stop = threading.Event()

    def append() -> None:
        while not stop.is_set():
            with chains.app.database.transaction(workspace_id=chains.a, write=True) as tx:
                audit.append(tx, actor="agent:busy", action="test.event", subject="meanwhile")

    writer = threading.Thread(target=append)
    writer.start()
    try:
        verdicts = [chains.verify_a()[1] for _ in range(40)]
    finally:
        stop.set()
        writer.join()
    assert verdicts == [None] * 40


def test_first_of_several_breaks_is_reported(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("UPDATE audit_events SET actor = 'x' WHERE workspace_id = ? AND seq = 5", (chains.a,))
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq = 2", (chains.a,))
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (chains.a, 2)
    assert chains.verify_a()[0] == 1


def test_tampered_system_chain_is_found(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("UPDATE audit_events SET subject = 'gamma' WHERE workspace_id = 0 AND seq = 2")
    problem = only_break(chains)
    assert (problem.workspace_id, problem.seq) == (audit.SYSTEM_CHAIN, 2)


def test_breaks_in_several_chains_are_all_reported(chains: Chains) -> None:
    with chains.owner() as owner:
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq = 4", (chains.a,))
        owner.execute("UPDATE audit_events SET details = '{}' WHERE workspace_id = ? AND seq = 2", (chains.b,))
    found = [(problem.workspace_id, problem.seq) for problem in chains.breaks()]
    assert found == [(chains.a, 4), (chains.b, 2)]


# Concurrency ------------------------------------------------------------------------------------

APPENDER = """
import json, sys
from pathlib import Path
from armarius.app import open_app
from armarius.audit import chain as audit
from armarius.config import Settings

job = json.loads(sys.argv[1])
settings = Settings(data_dir=Path(job["data_dir"]), database_url=job["database_url"])
app = open_app(settings)
try:
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    for index in range(job["events"]):
        with app.database.transaction(workspace_id=job["workspace_id"], write=True) as tx:
            audit.append(tx, actor="agent:w%d" % job["worker"], action="race.append",
                         details={"worker": job["worker"], "index": index})
finally:
    app.close()
print("done", flush=True)
"""

WORKERS = 4
EVENTS_PER_WORKER = 200


def check_race_result(app: Armarius, workspace_id: int, workers: int, events: int) -> None:
    total = workers * events
    assert audit.verify_chain(app.database, workspace_id) == (total, None)
    stored = audit.tail(app.database, workspace_id, limit=total + 10)
    assert [event.seq for event in stored] == list(range(1, total + 1)), "seqs are exactly 1..total, no gaps"
    assert len({event.prev_hash for event in stored}) == total, "no two events share a predecessor (no fork)"
    for earlier, later in itertools.pairwise(stored):
        assert later.prev_hash == earlier.hash
    for worker in range(workers):
        mine = [event.details["index"] for event in stored if event.details["worker"] == worker]
        assert mine == list(range(events)), f"worker {worker} lost or reordered its own events"
    with app.database.transaction(workspace_id=workspace_id) as tx:
        head = tx.one("SELECT seq, hash FROM audit_heads WHERE workspace_id = ?", (workspace_id,))
    assert head == {"seq": total, "hash": stored[-1].hash}


def test_processes_racing_on_one_chain_keep_it_linear(app: Armarius, settings: Settings) -> None:
    workspace_id = app.directory.create_workspace("race", by="operator:test").id
    processes = []
    try:
        for worker in range(WORKERS):
            job = {"data_dir": str(settings.data_dir), "database_url": settings.database_url,
                   "workspace_id": workspace_id, "worker": worker, "events": EVENTS_PER_WORKER}
            processes.append(subprocess.Popen(
                [sys.executable, "-c", APPENDER, json.dumps(job)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        for process in processes:  # release them together: all append at once
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        outcomes = [process.communicate(timeout=240) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    for process, (out, err) in zip(processes, outcomes, strict=True):
        assert process.returncode == 0, err
        assert out.strip() == "done", (out, err)
    check_race_result(app, workspace_id, WORKERS, EVENTS_PER_WORKER)
    assert audit.verify_all(app.database, [workspace_id])[1] == []


def test_threads_racing_on_one_chain_keep_it_linear(app: Armarius) -> None:
    workspace_id = app.directory.create_workspace("threads", by="operator:test").id
    barrier = threading.Barrier(WORKERS)
    failures: list[BaseException] = []

    def append_many(worker: int) -> None:
        try:
            barrier.wait(timeout=30)
            for index in range(EVENTS_PER_WORKER):
                with app.database.transaction(workspace_id=workspace_id, write=True) as tx:
                    audit.append(tx, actor=f"agent:t{worker}", action="race.append",
                                 details={"worker": worker, "index": index})
        except BaseException as error:  # reported below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=append_many, args=(worker,)) for worker in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not failures, failures
    check_race_result(app, workspace_id, WORKERS, EVENTS_PER_WORKER)
