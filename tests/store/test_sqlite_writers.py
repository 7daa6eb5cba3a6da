"""SQLite writers of several processes take turns on a file beside the database (store/engine.py's
_Writers), not in SQLite's busy handler: a write waits while another process holds the turn, and is
refused ``storage_unavailable`` only after the timeout, with nothing written. ``writes_without_waiting``
takes the turn only when nobody has it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from armarius.errors import StorageUnavailable
from armarius.store import engine
from armarius.store.engine import SqliteDatabase
from tests.helpers import writing_elsewhere

#: Holds the writers' turn of the database named by argv[1] (the file lock only: no SQLite transaction)
#: until a line arrives on stdin.
HOLD_TURN = """
import fcntl, os, sys
turn = os.open(sys.argv[1] + "-writers", os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(turn, fcntl.LOCK_EX)
print("holding", flush=True)
sys.stdin.readline()
"""

#: A write through the store in a process that then forks: the child has no turn of its parent's.
FORKED = """
import os, sys
from armarius.store import engine
database = engine.SqliteDatabase(engine.Path(sys.argv[1]))
with database.transaction(write=True) as tx:
    tx.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
pid = os.fork()
if pid == 0:
    print(len(engine._WRITERS), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print(len(engine._WRITERS), flush=True)
"""


@contextmanager
def turn_held_elsewhere(path: Path) -> Iterator[None]:
    """Another process holds the writers' turn of the database at ``path`` for the block."""
    with subprocess.Popen([sys.executable, "-c", HOLD_TURN, str(path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        try:
            assert holder.stdout.readline() == "holding\n"
            yield
            holder.stdin.write("done\n")
            holder.stdin.flush()
            assert holder.wait(timeout=30) == 0
        finally:
            if holder.poll() is None:
                holder.kill()


def another_process_can_take_the_turn(path: Path) -> bool:
    probe = subprocess.run([sys.executable, "-c", "import fcntl, os, sys; fcntl.flock(os.open(sys.argv[1] + "
                            "'-writers', os.O_RDWR | os.O_CREAT), fcntl.LOCK_EX | fcntl.LOCK_NB)", str(path)],
                           timeout=30, check=False, capture_output=True)
    return probe.returncode == 0


def new_table(path: Path) -> SqliteDatabase:
    database = SqliteDatabase(path)
    with database.transaction(write=True) as tx:
        tx.execute("CREATE TABLE t (x INTEGER)")
    return database


def rows(database: SqliteDatabase) -> list[int]:
    with database.transaction() as tx:
        return [int(row["x"]) for row in tx.all("SELECT x FROM t ORDER BY x")]


def test_a_write_waits_for_another_process_holding_the_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store.sqlite3"
    database = new_table(path)
    with turn_held_elsewhere(path):
        monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 200)
        # SQLite's own lock is free: only the turn holds this write back.
        with pytest.raises(StorageUnavailable), database.transaction(write=True) as tx:
            tx.execute("INSERT INTO t VALUES (1)")
        assert rows(database) == []
    with database.transaction(write=True) as tx:
        tx.execute("INSERT INTO t VALUES (2)")
    assert rows(database) == [2]
    database.close()


def test_a_refused_or_failed_write_gives_the_turn_back(tmp_path: Path) -> None:
    """A write that fails inside its transaction (rolled back) releases the turn: the next goes through, and
    a process that holds nothing can take the turn at once."""
    path = tmp_path / "store.sqlite3"
    database = new_table(path)

    def failing_write() -> None:
        with database.transaction(write=True) as tx:
            tx.execute("INSERT INTO t VALUES (1)")
            raise RuntimeError("the write fails")

    with pytest.raises(RuntimeError):
        failing_write()
    assert another_process_can_take_the_turn(path)
    with database.transaction(write=True) as tx:
        tx.execute("INSERT INTO t VALUES (2)")
    assert rows(database) == [2]
    database.close()


def test_a_forked_process_takes_turns_of_its_own(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", FORKED, str(tmp_path / "store.sqlite3")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1"]


def test_writes_without_waiting_hold_the_free_turn_for_the_whole_block(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The block's write transactions use the turn it holds (no second wait for it, no deadlock); while it
    lasts, a writer of another thread waits (here refused after the timeout, nothing written) and another
    process cannot take the turn; at its end the turn is free again."""
    path = tmp_path / "store.sqlite3"
    database = new_table(path)
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 200)
    refused: list[BaseException] = []

    def other_thread_writes() -> None:
        try:
            with database.transaction(write=True) as tx:
                tx.execute("INSERT INTO t VALUES (99)")
        except StorageUnavailable as refusal:
            refused.append(refusal)

    with database.writes_without_waiting() as held:
        assert held
        for value in (1, 2):
            with database.transaction(write=True) as tx:
                tx.execute("INSERT INTO t VALUES (?)", (value,))
        with database.writes_without_waiting() as inner:  # an inner block uses the outer one's turn
            assert inner
        other = threading.Thread(target=other_thread_writes)
        other.start()
        other.join(timeout=30)
        assert len(refused) == 1
        assert not another_process_can_take_the_turn(path)
    assert another_process_can_take_the_turn(path)
    assert rows(database) == [1, 2]
    database.close()


def test_writes_without_waiting_hold_nothing_while_another_writer_has_the_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process's turn, SQLite's write lock held by a program that is not Armarius (it takes no turn),
    or another thread's write transaction: the block holds nothing (False) and does not wait (the busy
    timeout is an hour here: a wait would never end within the test's bound); its writes queue as usual
    afterwards."""
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 3_600_000)
    path = tmp_path / "store.sqlite3"
    database = new_table(path)
    with turn_held_elsewhere(path), database.writes_without_waiting() as held:
        assert not held
    foreign = sqlite3.connect(path, isolation_level=None, timeout=0)
    foreign.execute("BEGIN IMMEDIATE")
    answers: list[bool] = []

    def try_to_hold() -> None:
        with database.writes_without_waiting() as held:
            answers.append(held)

    try:
        trying = threading.Thread(target=try_to_hold, daemon=True)
        trying.start()
        trying.join(timeout=30)
        assert answers == [False]
        assert another_process_can_take_the_turn(path)
    finally:
        foreign.execute("ROLLBACK")
        foreign.close()
    with writing_elsewhere(database, "INSERT INTO t VALUES (1)"), database.writes_without_waiting() as held:
        assert not held
    with database.writes_without_waiting() as held:
        assert held
        with database.transaction(write=True) as tx:
            tx.execute("INSERT INTO t VALUES (2)")
    assert rows(database) == [1, 2]
    database.close()


def foreign_can_write(path: Path) -> bool:
    """Whether a program that is not Armarius (it takes no turn) gets SQLite's write lock at once."""
    foreign = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        foreign.execute("BEGIN IMMEDIATE")
        foreign.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        foreign.close()


def test_writes_without_waiting_take_sqlites_write_lock_for_the_block(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The block takes SQLite's write lock as it starts (its first write transaction goes on with it) and gives
    it back at its end, written or not. A later write transaction of the block, after a program that is not
    Armarius took the lock in between, waits for it as any writer does (refused after the busy timeout,
    nothing written), and the next block again tries the lock without waiting."""
    path = tmp_path / "store.sqlite3"
    database = new_table(path)
    with database.writes_without_waiting() as held:
        assert held
        assert not foreign_can_write(path)
    assert foreign_can_write(path)  # a block that wrote nothing gives the lock back
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 300)
    foreign = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
    try:
        with database.writes_without_waiting() as held:
            assert held
            with database.transaction(write=True) as tx:
                tx.execute("INSERT INTO t VALUES (1)")
            foreign.execute("BEGIN IMMEDIATE")
            with pytest.raises(StorageUnavailable), database.transaction(write=True) as tx:
                tx.execute("INSERT INTO t VALUES (2)")
            foreign.execute("ROLLBACK")
            monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 60_000)
            released = threading.Timer(0.1, foreign.execute, ("ROLLBACK",))
            foreign.execute("BEGIN IMMEDIATE")
            released.start()
            with database.transaction(write=True) as tx:  # waits for the foreign program's lock
                tx.execute("INSERT INTO t VALUES (3)")
            released.join()
        foreign.execute("BEGIN IMMEDIATE")
        monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 3_600_000)  # a wait would not end within the test
        with database.writes_without_waiting() as held:
            assert not held
        foreign.execute("ROLLBACK")
    finally:
        foreign.close()
    assert rows(database) == [1, 3]
    assert another_process_can_take_the_turn(path)
    database.close()


def test_writes_without_waiting_give_the_turn_back_when_taking_it_fails(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while the block is being set up (here: this thread's connection cannot be opened) leaves the
    turn free, in this process and for the others."""
    path = tmp_path / "store.sqlite3"
    database = new_table(path)

    def cannot_connect() -> sqlite3.Connection:
        raise OSError("too many open files")

    with monkeypatch.context() as patch:
        patch.setattr(database, "connect", cannot_connect)
        with pytest.raises(OSError, match="too many open files"), database.writes_without_waiting():
            pass
    assert another_process_can_take_the_turn(path)
    with database.writes_without_waiting() as held:
        assert held
        with database.transaction(write=True) as tx:
            tx.execute("INSERT INTO t VALUES (1)")
    assert rows(database) == [1]
    database.close()


def test_writes_without_waiting_never_with_synchronous_full(tmp_path: Path) -> None:
    """With ``synchronous = full`` every commit waits for the disk: such writes are not for the event loop."""
    path = tmp_path / "store.sqlite3"
    new_table(path).close()
    database = SqliteDatabase(path, synchronous="full")
    with database.writes_without_waiting() as held:
        assert not held
    assert another_process_can_take_the_turn(path)
    database.close()


def test_the_wal_is_checkpointed_in_a_thread_of_its_own_after_writes_without_waiting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a block SQLite's automatic checkpoint (which waits for the disk) is off; after every
    LOOP_WRITES_PER_CHECKPOINT blocks a passive checkpoint runs in another thread, on a connection of its own."""
    monkeypatch.setattr(engine, "LOOP_WRITES_PER_CHECKPOINT", 3)
    path = tmp_path / "store.sqlite3"
    database = new_table(path)
    opened: list[tuple[int, list[str]]] = []
    connect = database.connect

    def traced_connect() -> sqlite3.Connection:
        connection = connect()
        statements: list[str] = []
        connection.set_trace_callback(statements.append)
        opened.append((threading.get_ident(), statements))
        return connection

    monkeypatch.setattr(database, "connect", traced_connect)
    automatic: list[int] = []
    for value in range(3):
        with database.writes_without_waiting() as held:
            assert held
            with database.transaction(write=True) as tx:
                tx.execute("INSERT INTO t VALUES (?)", (value,))
                automatic.append(int(tx.scalar("PRAGMA wal_autocheckpoint")))
    assert database._checkpointer is not None
    database._checkpointer.join(timeout=30)
    with database.transaction() as tx:
        assert int(tx.scalar("PRAGMA wal_autocheckpoint")) == 1000  # on again after the blocks
    assert automatic == [0, 0, 0]
    checkpoints = [thread for thread, statements in opened if "PRAGMA wal_checkpoint(PASSIVE)" in statements]
    assert len(checkpoints) == 1
    assert checkpoints[0] != threading.get_ident()
    assert rows(database) == [0, 1, 2]
    database.close()


#: Another process's writer as Armarius's writers take the turn (argv[1]: the database): the place next in line,
#: then the turn, then the place given up; with the turn, one row (2) written; then the turn given up.
WAITS_IN_LINE = """
import fcntl, os, sqlite3, sys
path = sys.argv[1]
next_in_line = os.open(path + "-writers-next", os.O_RDWR | os.O_CREAT, 0o600)
turn = os.open(path + "-writers", os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(next_in_line, fcntl.LOCK_EX)
print("next in line", flush=True)
fcntl.flock(turn, fcntl.LOCK_EX)
fcntl.flock(next_in_line, fcntl.LOCK_UN)
connection = sqlite3.connect(path, isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
connection.execute("INSERT INTO t VALUES (2)")
connection.execute("COMMIT")
fcntl.flock(turn, fcntl.LOCK_UN)
"""


def test_a_process_that_gives_the_turn_up_cannot_take_it_back_before_a_process_waiting_in_line(
        tmp_path: Path) -> None:
    """This process writes (1) while another waits next in line for the turn; this process's next write (3),
    begun as soon as the first has ended, comes after the other's (2). Taking the turn back at once, the
    process that had it kept writing while the other waited (section 6 of bench/compare.py, two workers on
    SQLite: p99 of 247-271 ms, 148-182 with the place next in line)."""
    path = tmp_path / "store.sqlite3"
    database = new_table(path)
    other = None
    try:
        with database.transaction(write=True) as tx:
            tx.execute("INSERT INTO t VALUES (1)")
            other = subprocess.Popen([sys.executable, "-c", WAITS_IN_LINE, str(path)], stdout=subprocess.PIPE,
                                     text=True)
            assert other.stdout is not None
            assert other.stdout.readline() == "next in line\n"
        with database.transaction(write=True) as tx:
            tx.execute("INSERT INTO t VALUES (3)")
        assert other.wait(timeout=30) == 0
    finally:
        if other is not None:
            if other.poll() is None:
                other.kill()
                other.wait()
            if other.stdout is not None:
                other.stdout.close()
    with database.transaction() as tx:
        assert [int(row["x"]) for row in tx.all("SELECT x FROM t ORDER BY rowid")] == [1, 2, 3]
    database.close()
