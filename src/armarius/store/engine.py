"""The two storage engines behind one small interface.

Feature modules write SQL with ``?`` placeholders and run it through a :class:`Tx`. Where
SQLite and PostgreSQL differ (connections, locking, workspace scoping) the two versions stand
side by side here:

* SQLite: one connection per thread, WAL, foreign keys, a busy timeout; writers take
  ``BEGIN IMMEDIATE`` so check-then-write sequences are serialized. Workspace scoping is the
  query modules' job: every statement on a workspace table filters by ``tx.workspace_id``.
* PostgreSQL: a connection pool of the application role, which owns no tables; each
  transaction sets ``armarius.workspace_id`` with ``set_config(..., true)`` and the
  row-level security policies (with FORCE) do the rest. The connections are in autocommit
  mode and each transaction is begun explicitly, together with that setting, in one round trip.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, NoReturn, cast

import psycopg
import psycopg.errors
from psycopg.rows import dict_row
from psycopg.waiting import Wait
from psycopg_pool import ConnectionPool, PoolTimeout

from armarius.config import MASKED, database_url_problem, database_url_secrets
from armarius.errors import ConfigError, InvalidInput, StorageUnavailable
from armarius.store.batches import Prepared

try:
    import fcntl
except ImportError:  # Windows: writers of other processes meet SQLite's busy handler
    fcntl = None  # type: ignore[assignment]

Dialect = Literal["sqlite", "postgresql"]
Row = dict[str, Any]
Params = Sequence[Any]

logger = logging.getLogger("armarius.store")

SQLITE_BUSY_TIMEOUT_MS = 10_000
#: Blocks of writes without waiting (SqliteDatabase.writes_without_waiting) between two checkpoints of the
#: WAL in a thread of their own: a remember writes some 15-30 pages, so about SQLite's own interval (a commit
#: checkpoints once the WAL holds 1,000 pages).
LOOP_WRITES_PER_CHECKPOINT = 64


class UniqueViolation(Exception):
    """A unique constraint refused a write. A feature turns the violation of the constraint it means (a row of
    its own taken meanwhile) into its own error, and lets any other go up: a violation it did not foresee is
    no conflict of its caller's.

    ``constraint`` names the constraint alike on both engines, as PostgreSQL names it by default (every
    constraint of the migrations has its default name): ``<table>_<column>_..._key`` for a ``UNIQUE``,
    ``<table>_pkey`` for a primary key. PostgreSQL tells it (``diag.constraint_name``); SQLite names the table
    and columns in its message (``UNIQUE constraint failed: table.column, ...``), which give it (an index on
    expressions: the index's name). ``table``: the table, where the engine tells it.
    """

    def __init__(self, constraint: str, table: str | None = None) -> None:
        super().__init__(constraint)
        self.constraint = constraint
        self.table = table

    def raise_unless(self, constraint: str) -> None:
        """Go on up unless this is a violation of ``constraint``, the one the caller handles (in its ``except``)."""
        if self.constraint != constraint:
            raise self

    @classmethod
    def of_sqlite(cls, error: sqlite3.IntegrityError) -> UniqueViolation:
        """SQLite's violation, named as PostgreSQL names the constraint by default."""
        failed = str(error).partition("constraint failed: ")[2]
        index = re.fullmatch(r"index '(.*)'", failed)
        if index:
            return cls(index.group(1))
        table, columns = "", []
        for named in failed.split(", "):
            table, _, column = named.partition(".")
            columns.append(column)
        if not failed or not table:
            return cls(error.sqlite_errorname or "unique")
        primary = error.sqlite_errorname == "SQLITE_CONSTRAINT_PRIMARYKEY"
        return cls(f"{table}_pkey" if primary else f"{table}_{'_'.join(columns)}_key", table)

    @classmethod
    def of_postgres(cls, error: psycopg.errors.UniqueViolation) -> UniqueViolation:
        return cls(error.diag.constraint_name or "unique", error.diag.table_name)


#: What a violation of these constraints means instead of a conflict, by constraint: see :func:`on_violation`.
_MEANINGS: dict[str, Callable[[Tx, UniqueViolation], Exception | None]] = {}


def on_violation(constraint: str, meaning: Callable[[Tx, UniqueViolation], Exception | None]) -> None:
    """Wherever a transaction meets a violation of ``constraint``, raise ``meaning(tx, violation)`` in its place
    (None: the violation itself). For a violation that is no conflict between writers but a sign of damage,
    which no feature's handling of its conflicts may take for one: on PostgreSQL a statement queued for later
    (:meth:`Tx.execute_later`) fails with the statement it is sent with, or with the commit, wherever in the
    feature that is, so only here is it seen by the one who queued it."""
    _MEANINGS[constraint] = meaning


#: PostgreSQL: a query's words for the search vectors of entries and evidence units, parsed and folded as
#: those vectors were made (the text search configuration of migration 0021: accents folded where the
#: server has the unaccent extension).
TSQUERY = "to_tsquery('public.armarius_words', ?)"


def iso_utc(moment: datetime) -> str:
    """Timestamps are stored as ISO 8601 UTC text on both engines (exact round trips for hashing)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def utc_now() -> str:
    return iso_utc(datetime.now(UTC))


def every_page(page: Callable[[Any], list[Row]], *, size: int, key: str = "id") -> list[Row]:
    """Every row of a query paged by key: ``page(after)`` gives up to ``size`` rows after the one whose ``key`` is
    ``after`` (None: from the first), as a listing that must leave none out reads them."""
    rows: list[Row] = []
    after = None
    while True:
        found = page(after)
        rows += found
        if len(found) < size:
            return rows
        after = found[-1][key]


@lru_cache(maxsize=1024)
def to_pyformat(sql: str) -> str:
    """The store's SQL (``?`` for each parameter, which is the only ``?`` it writes) as psycopg takes it."""
    return sql.replace("%", "%%").replace("?", "%s")


class Later:
    """The rows of a statement queued with :meth:`Tx.read_later`, there once it has run."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx
        self._rows: list[Row] | None = None

    @classmethod
    def of(cls, tx: Tx, rows: list[Row]) -> Later:
        """Rows known without a statement (nothing to read)."""
        later = cls(tx)
        later.fill(rows)
        return later

    @property
    def ready(self) -> bool:
        """The statement has run (on SQLite, at once): its rows are here."""
        return self._rows is not None

    def all(self) -> list[Row]:
        if self._rows is None:
            self._tx.flush()
        if self._rows is None:
            raise RuntimeError("the transaction ended before this statement ran")
        return self._rows

    def one(self) -> Row | None:
        rows = self.all()
        return rows[0] if rows else None

    def scalar(self) -> Any:
        row = self.one()
        return None if row is None else next(iter(row.values()))

    def fill(self, rows: list[Row]) -> None:
        """The statement has run: these are its rows."""
        self._rows = rows


@dataclass(frozen=True, slots=True)
class _Queued:
    sql: str
    params: Params = ()
    later: Later | None = None
    #: The transaction's own set-up (BEGIN, a setting, an advisory lock): nothing to send if nothing follows.
    setup: bool = False


class Tx:
    """One open transaction. ``workspace_id`` is the workspace it is scoped to, if any.

    PostgreSQL: statements that need not run at once are queued and go with the next statement sent, in
    one round trip (one query string, see :mod:`armarius.store.batches`), the server running them first,
    in order: the transaction's BEGIN and workspace setting, an advisory lock (:meth:`serialize`), reads
    whose rows are wanted later (:meth:`read_later`), writes nobody reads the count of
    (:meth:`execute_later`). What is still queued when the transaction ends goes with its COMMIT. On
    PostgreSQL an error aborts the whole transaction wherever it is met, so an error of a queued statement
    surfaces at the statement it went with (or at the commit) and nothing of the transaction is kept.
    SQLite, with no round trips, runs each at once.
    """

    def __init__(self, dialect: Dialect, cursor: Any, workspace_id: int | None, *, begin: tuple[str, ...] = ()
                 ) -> None:
        self.dialect: Dialect = dialect
        self.workspace_id = workspace_id
        self._cursor = cursor
        self._queued: list[_Queued] = [_Queued(statement, setup=True) for statement in begin]
        self._sent = False
        #: A round trip failed (PostgreSQL): the transaction is aborted, or never began if nothing was sent.
        self._failed = False
        #: Reads a feature queued for a later step of the same transaction (see audit.prepare), by name.
        self.prepared: dict[str, Later] = {}
        self._meanwhile: list[Callable[[], object]] = []
        self._serialized: set[int] = set()

    def require_workspace(self) -> int:
        if self.workspace_id is None:
            raise RuntimeError("this statement needs a workspace-scoped transaction")
        return self.workspace_id

    def serialize(self, topic: int) -> bool:
        """Hold this transaction against others of the same workspace and topic until it ends.

        SQLite writers already hold the database's write lock (returns False: nothing new to read);
        PostgreSQL takes a transaction-level advisory lock, for check-then-insert sequences that have
        no existing row to lock (returns True: what others committed meanwhile is now visible). The lock
        is taken with the next statement, in the same round trip, just before it runs. Asked again for a
        topic it holds, the transaction has nothing new to take (returns False).
        """
        if self.dialect == "sqlite" or topic in self._serialized:
            return False
        self._serialized.add(topic)
        self._queued.append(_Queued(f"SELECT pg_advisory_xact_lock({int(topic)}, {int(self.require_workspace())})",
                                    setup=True))
        return True

    def commit_lazily(self) -> None:
        """This transaction's commit need not wait for the disk (PostgreSQL's ``synchronous_commit``).

        A crash of the database server may lose it, and then everything committed after it too (the log is
        written in order), so a later commit that waits makes it durable as well. For records that only
        matter while a later transaction is on its way (a budget reservation). SQLite: no change.
        """
        if self.dialect == "postgresql":
            self._queued.append(_Queued("SET LOCAL synchronous_commit = off", setup=True))

    def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; returns the number of rows it changed."""
        self._run(sql, params)
        return int(self._cursor.rowcount)

    def execute_later(self, sql: str, params: Params = ()) -> None:
        """A write whose count nobody reads: on PostgreSQL it goes with the next statement or the commit."""
        if self.dialect == "sqlite":
            self._run(sql, params)
        else:
            self._queued.append(_Queued(*self._prepare(sql, params)))

    def read_later(self, sql: str, params: Params = ()) -> Later:
        """A statement whose rows are wanted, but not before the next statement: on PostgreSQL it is sent
        with that one (or with the commit) and runs first; asking for its rows earlier sends it alone."""
        later = Later(self)
        if self.dialect == "sqlite":
            self._run(sql, params)
            later.fill(self._cursor.fetchall())
        else:
            self._queued.append(_Queued(*self._prepare(sql, params), later=later))
        return later

    def meanwhile(self, work: Callable[[], object]) -> None:
        """Local work (writing a file) to do while the next statements sent travel and run: on PostgreSQL it
        runs once they are on their way, before their answers are read, so that the round trip costs no wait
        of its own. Before a COMMIT, and on SQLite, it runs at once. What it raises is raised once the
        statements' answers are in (an error of theirs comes first)."""
        if self.dialect == "sqlite":
            work()
        else:
            self._meanwhile.append(work)

    def one(self, sql: str, params: Params = ()) -> Row | None:
        self._run(sql, params)
        return cast("Row | None", self._cursor.fetchone())

    def all(self, sql: str, params: Params = ()) -> list[Row]:
        self._run(sql, params)
        return cast("list[Row]", self._cursor.fetchall())

    def scalar(self, sql: str, params: Params = ()) -> Any:
        row = self.one(sql, params)
        return None if row is None else next(iter(row.values()))

    def flush(self) -> None:
        """Send what is queued now, alone."""
        if self._queued:
            with _storage_errors(self):
                self._send(())

    def finish(self) -> None:
        """PostgreSQL, on a clean end: send what is queued with the COMMIT, in one round trip. A transaction
        that never sent anything and has nothing but its set-up queued has nothing to commit."""
        self._check_not_failed()
        work, self._meanwhile = self._meanwhile, []
        for step in work:
            step()
        if not self._sent and all(queued.setup for queued in self._queued):
            self._queued.clear()
        elif self._queued:
            with _storage_errors(self):
                self._send((_Queued("COMMIT"),))

    def discard(self) -> None:
        """Forget what is queued: the transaction is rolled back."""
        self._queued.clear()
        self._meanwhile.clear()

    def _check_not_failed(self) -> None:
        """A caller that went on after a failed round trip would otherwise have its statements run outside any
        transaction (nothing was sent: its BEGIN was lost with the rest), or its commit turned into a rollback
        without a word (the server aborted the transaction)."""
        if self._failed:
            raise RuntimeError("a statement of this transaction failed: it can only be rolled back")

    def _prepare(self, sql: str, params: Params) -> tuple[str, Params]:
        if any(isinstance(value, str) and "\x00" in value for value in params):
            # PostgreSQL's text holds no NUL; refused alike on both engines, also where it is only looked up.
            raise InvalidInput("A text with a NUL character can be neither stored nor looked up.")
        return (to_pyformat(sql) if self.dialect == "postgresql" else sql), params

    def _run(self, sql: str, params: Params) -> None:
        sql, params = self._prepare(sql, params)
        with _storage_errors(self):
            if self.dialect == "postgresql":
                self._send((_Queued(sql, params),))
            else:
                self._cursor.execute(sql, params)
                self._sent = True

    def _send(self, then: tuple[_Queued, ...]) -> None:
        """Send the queued statements and then ``then``, together, in one round trip (see
        :mod:`armarius.store.batches`), doing the work to do meanwhile while they travel and run; the cursor
        then holds the last one's result, as after any other statement, and each queued read its rows."""
        self._check_not_failed()
        queued, self._queued = [*self._queued, *then], []
        work, self._meanwhile = self._meanwhile, []
        cursor = self._cursor
        connection = cursor.connection
        assert isinstance(connection, _Connection)
        try:
            failure = connection.run(cursor, [(statement.sql, statement.params) for statement in queued], work)
        except BaseException:
            self._failed = True
            raise
        self._sent = True
        for index, statement in enumerate(queued):
            if index:
                cursor.nextset()
            if statement.later is not None:
                statement.later.fill(cursor.fetchall())
        if failure is not None:
            raise failure


class _Connection(psycopg.Connection[Row]):
    """A pooled PostgreSQL connection that runs a transaction's statements in batches (store.batches), with
    the statements prepared on it, doing local work while a batch runs."""

    _statements: Prepared | None = None
    _work: tuple[list[Callable[[], object]], list[BaseException]] | None = None

    def run(self, cursor: psycopg.Cursor[Row], statements: list[tuple[str, Params]],
            work: list[Callable[[], object]]) -> BaseException | None:
        """Run ``statements`` on ``cursor`` as one batch, one result each, doing ``work`` once the batch is
        sent and before its answer is read; what the work raised (the work stops there), for the caller to
        raise once it has the answers."""
        if self._statements is None:
            self._statements = Prepared(self)
        batch = self._statements.batch(statements)
        if batch.preparing:
            try:
                cursor.execute(batch.preparation)  # built by store.batches, as is the text below
            except BaseException:
                self._statements.forget(batch)
                raise
        failures: list[BaseException] = []
        self._work = (work, failures) if work else None
        try:
            cursor.execute(batch.text)  # its literals quoted by psycopg
        finally:
            self._work = None
        return failures[0] if failures else None

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        """psycopg's wait for a generator of network steps; while a batch of :meth:`run` runs, its work is done
        at the first wait for the answer."""
        if self._work is not None:
            gen = _meanwhile(gen, *self._work)
            self._work = None
        return super().wait(gen, *args, **kwargs)


def _meanwhile(gen: Any, work: list[Callable[[], object]], failures: list[BaseException]) -> Any:
    """``gen`` (psycopg's steps of a query: send it, read its answer), doing ``work`` when it first waits to
    read: the query is on its way then."""

    def do_work() -> None:
        try:
            for step in work:
                step()
        except BaseException as exc:  # raised once the answers are in
            failures.append(exc)
        work.clear()

    ready = None
    try:
        while True:
            try:
                waiting_for = gen.send(ready)
            except StopIteration as stop:
                do_work()  # the answer was there without a wait
                return stop.value
            if work and waiting_for == Wait.R:
                do_work()
            ready = yield waiting_for
    finally:
        gen.close()


_CONNECTION_FAILED = "The database connection failed; try again in a moment."
_BUSY = "The database is busy; try again in a moment."
#: PostgreSQL's errors that say the database cannot take the request now, whatever the request: the answer
#: is storage_unavailable (with this message), and trying again later can work. By SQLSTATE, or the start
#: of one (its class).
_UNAVAILABLE_SQLSTATES = {
    "08": _CONNECTION_FAILED,  # connection exception
    "57P": _CONNECTION_FAILED,  # the server shutting down, crashed, starting, the database dropped, idle timeout
    "57014": _BUSY,  # query cancelled (statement_timeout)
    "40": _BUSY,  # transaction rollback: serialization failure, deadlock
    "55P03": _BUSY,  # lock not available (lock_timeout)
    "53": "The database is out of resources (disk, memory or connections); try again later.",
}


def _unavailable(exc: psycopg.OperationalError) -> str | None:
    """What storage_unavailable says of ``exc``, or None if it is not the database's state but the request's
    or a fault (see _storage_errors)."""
    state = exc.sqlstate
    if state is None:  # the client's own: the server went away, or never answered
        return _CONNECTION_FAILED
    return next((_UNAVAILABLE_SQLSTATES[start] for start in (state, state[:3], state[:2])
                 if start in _UNAVAILABLE_SQLSTATES), None)


@contextmanager
def _storage_errors(tx: Tx) -> Iterator[None]:
    """The engines' errors as the features see them (those of ``tx``'s statements).

    A unique violation is :class:`UniqueViolation`, naming its constraint, unless the constraint has a meaning
    of its own (:func:`on_violation`).

    PostgreSQL's operational errors are told apart by their SQLSTATE: the connection lost or refused, the
    server shutting down or cancelling, its resources exhausted, a serialization failure, a deadlock or a
    lock timeout are ``storage_unavailable`` (_UNAVAILABLE_SQLSTATES): the request may succeed later. A
    program limit (class 54: a tsvector of more than 1 MiB, an index row too large) is the request's, and
    would fail every time: ``invalid_input``. Any other operational error (a server misconfiguration, a
    file the server cannot read) is neither, and goes up as it is, to be logged as an internal error."""
    try:
        yield
    except UnicodeEncodeError as exc:
        if exc.reason != "surrogates not allowed":
            raise
        # A str Python holds that is not Unicode text: neither driver sends it (checked here, where it costs
        # nothing, rather than in every text of every statement).
        raise InvalidInput("A text with an unpaired surrogate can be neither stored nor looked up.") from None
    except sqlite3.IntegrityError as exc:
        if exc.sqlite_errorname in ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"):
            _raise_violation(tx, UniqueViolation.of_sqlite(exc), exc)
        raise
    except psycopg.errors.UniqueViolation as exc:
        _raise_violation(tx, UniqueViolation.of_postgres(exc), exc)
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorname in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            raise StorageUnavailable(_BUSY) from exc
        raise
    except psycopg.OperationalError as exc:
        if (exc.sqlstate or "").startswith("54"):  # program limit exceeded
            raise InvalidInput("This is more than the database can store or index in one piece (a PostgreSQL "
                               "limit, which trying again does not lift): make it smaller, or split it.") from exc
        message = _unavailable(exc)
        if message is None:
            raise
        raise StorageUnavailable(message) from exc
    except psycopg.errors.DataError as exc:
        raise InvalidInput("A value does not fit the column it is stored in.") from exc


def _raise_violation(tx: Tx, violation: UniqueViolation, cause: Exception) -> NoReturn:
    meaning = _MEANINGS.get(violation.constraint)
    instead = None if meaning is None else meaning(tx, violation)
    if instead is None:
        raise violation from cause
    raise instead from violation


class Database(ABC):
    """A storage engine that opens transactions.

    ``transaction(workspace_id=..., write=...)`` scopes the transaction to a workspace and, for
    writers, takes the engine's write lock where it has one (SQLite). ``snapshot``: every statement of a
    reader sees the same moment of the database (SQLite readers always do; PostgreSQL's default reads
    each statement's own moment).
    """

    dialect: Dialect

    @abstractmethod
    def transaction(self, *, workspace_id: int | None = None, write: bool = False, snapshot: bool = False
                    ) -> AbstractContextManager[Tx]:
        """Open a transaction; commit on a clean exit, roll back on an exception."""

    @abstractmethod
    def writes_without_waiting(self) -> AbstractContextManager[bool]:
        """True: this thread holds the engine's writers' turn, taken without a wait, until the block ends, and
        its write transactions use it without queuing again. False: holding it would mean waiting (another
        writer has it, or the engine has no such turn: PostgreSQL); nothing is held."""

    @abstractmethod
    def close(self) -> None:
        """Close every connection."""


def enable_wal(connection: sqlite3.Connection, patience_seconds: float) -> None:
    """Put the file in WAL mode, waiting for other connections that are doing the same.

    Switching the journal mode takes an exclusive lock without calling the busy handler, so
    connections that open a fresh file together would otherwise fail at once with "locked".
    """
    deadline = time.monotonic() + patience_seconds
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


#: The column names of the statement whose rows were made last (its cursor's description, and the names in it).
_last_columns: tuple[Any, tuple[str, ...]] = (None, ())


def _sqlite_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    """A row as a dict of its columns: the row factory of every SQLite connection a :class:`Tx` reads through
    (it hands the rows on as they come; each a fresh dict, the caller's to keep). A statement's rows share its
    cursor's description, so its names are taken out once, not per row (the rows of a 100,000-row read made in
    141 ms instead of 232)."""
    global _last_columns  # noqa: PLW0603 - a pair replaced whole: threads at worst take the names out again
    description, names = _last_columns
    if cursor.description is not description:
        description = cursor.description
        names = tuple(column[0] for column in description)
        _last_columns = (description, names)
    return dict(zip(names, row, strict=True))


class _Writers:
    """The writers' turn on one SQLite file: writers queue for it instead of spinning in SQLite's busy
    handler, which sleeps and retries (1, 2, 5, … 100 ms), so that under contention a writer may wait far
    longer than the writers before it need.

    In this process the writers queue on a lock, in order of arrival. Across processes (the workers of
    `armarius serve --workers N`, the CLI beside a server) the turn is an advisory lock on a file beside the
    database (``<file>-writers``), taken by the one waiting writer of each process. The processes take it in
    turns: a writer first takes the place next in line, a lock on a second file (``<file>-writers-next``),
    and gives it up once it has the turn. So while a writer of another process waits next in line, this
    process's next writer cannot take the turn back as soon as it is given up: it waits for the place next
    in line, which the other gives up only with the turn in hand. (Taking the turn back at once, the process
    that wrote kept the turn while the other's writers waited: bench/compare.py's section 6 load on two
    workers had a p99 of 247-271 ms, 148-182 ms in turns.) Both locks are tried again at short intervals
    (at most :data:`_WRITERS_PAUSE_MAX` seconds apart). Programs that are not Armarius meet SQLite's busy
    handler, as before.
    """

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._paths = (path.with_name(path.name + "-writers-next"), path.with_name(path.name + "-writers"))
        #: The lock files (next in line, the turn), opened by this process (a descriptor inherited through a
        #: fork would share the parent's lock: the child opens its own).
        self._files: tuple[int, int] | None = None
        self._opened_by = 0
        #: The thread that holds the turn for a block of writes (SqliteDatabase.writes_without_waiting).
        self.holder: int | None = None

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return self._lock.acquire(timeout=timeout) and self._files_locked(deadline)

    def acquire_now(self) -> bool:
        """The turn if nobody in any process has it or waits for it, without a wait; False, nothing held,
        otherwise."""
        return self._lock.acquire(blocking=False) and self._files_locked(None)

    def _files_locked(self, deadline: float | None) -> bool:
        """With this process's lock held: the place next in line, then the turn, then the place given up, each
        tried until ``deadline`` (None: once). False (or an exception): nothing held, this process's lock given
        back too."""
        try:
            if self._turn_taken(deadline):
                return True
        except BaseException:
            self._lock.release()
            raise
        self._lock.release()
        return False

    def _turn_taken(self, deadline: float | None) -> bool:
        if fcntl is None:
            return True
        if self._files is None or self._opened_by != os.getpid():
            opened = os.open(self._paths[0], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                self._files = (opened, os.open(self._paths[1], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
            except BaseException:
                os.close(opened)
                raise
            self._opened_by = os.getpid()
        next_in_line, turn = self._files
        if not _locked(next_in_line, deadline):
            return False
        try:
            return _locked(turn, deadline)
        finally:
            fcntl.flock(next_in_line, fcntl.LOCK_UN)

    def release(self) -> None:
        if self._files is not None:
            fcntl.flock(self._files[1], fcntl.LOCK_UN)
        self._lock.release()

    def close(self) -> None:
        """Closes the lock files (between two writes of this process; the next write opens them again)."""
        if self._lock.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000):
            try:
                if self._files is not None and self._opened_by == os.getpid():
                    for descriptor in self._files:
                        os.close(descriptor)
                self._files = None
            finally:
                self._lock.release()


def _locked(descriptor: int, deadline: float | None) -> bool:
    """An exclusive lock on the file ``descriptor``, tried again after pauses of growing length until
    ``deadline`` (None: tried once)."""
    pause = _WRITERS_PAUSE_MIN
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if deadline is None or time.monotonic() + pause > deadline:
                return False
        time.sleep(pause)
        pause = min(2 * pause, _WRITERS_PAUSE_MAX)


_WRITERS_PAUSE_MIN, _WRITERS_PAUSE_MAX = 0.0001, 0.0005
#: The writers' turn of each SQLite file this process writes.
_WRITERS: dict[Path, _Writers] = {}
_WRITERS_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked process (a server's worker) starts with turns of its own
    os.register_at_fork(after_in_child=_WRITERS.clear)


def _writers(path: Path) -> _Writers:
    key = path.resolve()
    with _WRITERS_LOCK:
        return _WRITERS.setdefault(key, _Writers(key))


class SqliteDatabase(Database):
    dialect: Dialect = "sqlite"

    def __init__(self, path: Path, *, synchronous: str = "normal") -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be normal or full, not {synchronous!r}")
        self.path, self.synchronous = path, synchronous
        self._writer = _writers(path)
        self._local = threading.local()
        #: Every open connection, by the thread that uses it. A connection is closed with the database,
        #: or once its thread has ended: the server's worker threads come and go (anyio ends one idle for
        #: 10 s), and each kept connection would hold two files and a page cache for good.
        self._all: dict[tuple[threading.Thread, str], sqlite3.Connection] = {}
        #: Whether the block of writes without waiting that holds the turn has begun its first write transaction
        #: and not used it yet (see writes_without_waiting).
        self._block_begun = False
        self._lock = threading.Lock()
        #: Blocks of writes without waiting so far, and the checkpoint that follows some of them.
        self._loop_writes = 0
        self._checkpointing = threading.Lock()
        self._checkpointer: threading.Thread | None = None

    def connect(self) -> sqlite3.Connection:
        """A new connection with the house settings (autocommit mode: transactions are explicit); its rows are
        tuples until :meth:`_connection` gives it the store's row factory, as it does every connection a
        transaction uses."""
        connection = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000
        )
        connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        enable_wal(connection, SQLITE_BUSY_TIMEOUT_MS / 1000)
        connection.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        connection.execute("PRAGMA foreign_keys = ON")
        return connection

    def _connection(self, kind: str = "connection", *settings: str) -> sqlite3.Connection:
        """This thread's connection of ``kind`` (opened with ``settings`` run on it): "connection" for its
        transactions, "block" for the write transactions of its blocks of writes without waiting."""
        connection: sqlite3.Connection | None = getattr(self._local, kind, None)
        if connection is None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            connection = self.connect()
            connection.row_factory = _sqlite_row  # a Tx hands its rows on as they come (whatever connect() set)
            try:
                for statement in settings:
                    connection.execute(statement)
            except BaseException:
                connection.close()
                raise
            setattr(self._local, kind, connection)
            with self._lock:
                for ended in [key for key in self._all if not key[0].is_alive()]:
                    self._all.pop(ended).close()
                self._all[threading.current_thread(), kind] = connection
        return connection

    def _block_connection(self) -> sqlite3.Connection:
        """This thread's connection for its blocks of writes without waiting, set for them once: SQLite's write
        lock is tried without a wait, and no commit checkpoints the WAL (see :meth:`_checkpoint_soon`)."""
        return self._connection("block", "PRAGMA busy_timeout = 0", "PRAGMA wal_autocheckpoint = 0")

    @contextmanager
    def transaction(self, *, workspace_id: int | None = None, write: bool = False, snapshot: bool = False
                    ) -> Iterator[Tx]:
        del snapshot  # a reader's transaction reads one snapshot of the WAL
        in_block = write and self._writer.holder == threading.get_ident()  # see writes_without_waiting
        queue = write and not in_block
        if queue and not self._writer.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000):
            raise StorageUnavailable("The database is busy; try again in a moment.")
        try:
            connection = self._block_transaction() if in_block else self._connection()
            cursor = connection.cursor()
            try:
                if not in_block:
                    try:
                        cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                    except sqlite3.OperationalError as exc:
                        raise StorageUnavailable("The database is busy; try again in a moment.") from exc
                try:
                    yield Tx("sqlite", cursor, workspace_id)
                except BaseException:
                    connection.rollback()
                    raise
                else:
                    connection.commit()
            finally:
                cursor.close()
        finally:
            if queue:
                self._writer.release()

    def _block_transaction(self) -> sqlite3.Connection:
        """The block's connection in a write transaction: its first is the one the block began; a later one
        takes SQLite's write lock again, waiting for it if a program that is not Armarius (which takes no turn)
        took it in between."""
        connection = self._block_connection()
        if self._block_begun:
            self._block_begun = False
            return connection
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StorageUnavailable("The database is busy; try again in a moment.") from exc
            finally:
                connection.execute("PRAGMA busy_timeout = 0")
        return connection

    @contextmanager
    def writes_without_waiting(self) -> Iterator[bool]:
        """Meant for a thread where waiting is costly (the server's event loop), so besides the turn: never
        with ``synchronous = full`` (every commit waits for the disk); never while SQLite's own write lock is
        taken (a program that is not Armarius takes no turn); and the block's commits leave the WAL's
        checkpoint, which waits for the disk, to a thread of its own (:meth:`_checkpoint_soon`).

        The block begins a write transaction at once on a connection of its own (:meth:`_block_connection`):
        that takes SQLite's write lock without a wait, or tells that another program holds it, and the block's
        first write transaction goes on with it. A block that writes nothing rolls it back at its end. (Setting
        and resetting the busy wait and the checkpoint per block, with a trial BEGIN IMMEDIATE and its ROLLBACK,
        was six statements more a block: 39-42 against 23-25 µs of CPU for a block with one write, in a loop.)"""
        writer, thread = self._writer, threading.get_ident()
        if writer.holder == thread:  # an outer block holds it
            yield True
            return
        if self.synchronous != "normal" or not writer.acquire_now():
            yield False
            return
        try:
            connection = self._block_connection()
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            writer.release()
            yield False
            return
        except BaseException:
            writer.release()
            raise
        writer.holder, self._block_begun = thread, True
        try:
            yield True
        finally:
            writer.holder = None
            try:
                if self._block_begun:
                    self._block_begun = False
                    connection.execute("ROLLBACK")
            finally:
                writer.release()
                self._checkpoint_soon()

    def _checkpoint_soon(self) -> None:
        """After every :data:`LOOP_WRITES_PER_CHECKPOINT` blocks of writes without waiting, a passive
        checkpoint of the WAL in a thread of its own (one at a time; it takes no lock that writers wait
        for), as SQLite's automatic checkpoint would have run in the block's last commit."""
        self._loop_writes += 1
        if self._loop_writes % LOOP_WRITES_PER_CHECKPOINT or not self._checkpointing.acquire(blocking=False):
            return

        def checkpoint() -> None:
            try:
                connection = self.connect()
                try:
                    connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
                finally:
                    connection.close()
            except sqlite3.Error:
                logger.warning("a checkpoint of %s failed; the next one will try again", self.path.name)
            finally:
                self._checkpointing.release()

        self._checkpointer = threading.Thread(target=checkpoint, name="armarius-checkpoint", daemon=True)
        self._checkpointer.start()

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.join()
        with self._lock:
            for connection in self._all.values():
                connection.close()
            self._all.clear()
        self._local = threading.local()
        self._writer.close()


#: The shortest password the pool's log lines are scrubbed of (:class:`_ScrubbedPoolLog`).
_SCRUBBED_MIN_CHARS = 4


class _ScrubbedPoolLog(logging.Filter):
    """psycopg.pool's log lines (a failed connection is logged with libpq's message, which may quote what it
    was given) with every password of this process's pools in them shown as ***."""

    def __init__(self) -> None:
        super().__init__()
        #: Longest first (a secret inside another goes with it); replaced whole, never changed in place.
        self.secrets: tuple[str, ...] = ()
        self._adding = threading.Lock()

    def add(self, secrets: set[str]) -> None:
        # A password of a few characters would mask every such run of any line ("127.0.0.1" with "1"); libpq
        # never quotes a URL that settings accept, so this is a second guard, for passwords worth the name.
        kept = {secret for secret in secrets if len(secret) >= _SCRUBBED_MIN_CHARS}
        with self._adding:
            self.secrets = tuple(sorted(kept.union(self.secrets), key=len, reverse=True))

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self.secrets
        if secrets:
            message = shown = record.getMessage()
            for secret in secrets:
                shown = shown.replace(secret, MASKED)
            if shown != message:
                record.msg, record.args = shown, None
        return True


_POOL_LOG = _ScrubbedPoolLog()
logging.getLogger("psycopg.pool").addFilter(_POOL_LOG)


class PostgresDatabase(Database):
    dialect: Dialect = "postgresql"

    def __init__(self, url: str, *, max_connections: int = 10, connect_timeout: float = 10) -> None:
        # A URL libpq would refuse or misread is refused before the pool tries it (and logs libpq's message,
        # which quotes it); settings are checked as they load, this is for any other caller.
        problem = database_url_problem(url)
        if problem is not None:
            raise ConfigError(f"The PostgreSQL URL cannot be used as written: {problem}.", key="database.url")
        _POOL_LOG.add(database_url_secrets(url))
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            # Transactions are begun explicitly (see transaction()); commit() and rollback() still end them.
            connection_class=_Connection,
            # psycopg prepares no statement of its own: the store's are prepared by name (see store.batches),
            # and psycopg's rollback would deallocate all of them with its own.
            kwargs={"row_factory": dict_row, "autocommit": True, "prepare_threshold": None},
            open=False,
            timeout=connect_timeout,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise StorageUnavailable("PostgreSQL cannot be reached with the configured URL.") from exc

    @contextmanager
    def transaction(self, *, workspace_id: int | None = None, write: bool = False, snapshot: bool = False
                    ) -> Iterator[Tx]:
        # The pool's connection context commits on a clean exit and rolls back on an exception.
        with ExitStack() as stack:
            try:
                connection = stack.enter_context(self._pool.connection())
            except (PoolTimeout, psycopg.OperationalError) as exc:
                raise StorageUnavailable("PostgreSQL cannot be reached; try again in a moment.") from exc
            del write  # no global write lock: check-then-write sequences lock the rows they check
            tx = Tx("postgresql", stack.enter_context(connection.cursor()), workspace_id,
                    begin=_begin(workspace_id, snapshot=snapshot))
            try:
                yield tx
            except BaseException:
                tx.discard()  # rolled back by the pool
                raise
            tx.finish()  # what is still queued goes with the COMMIT; the pool's commit then has nothing to do

    @contextmanager
    def writes_without_waiting(self) -> Iterator[bool]:
        yield False  # writers wait for each other's row locks, not for a turn

    def close(self) -> None:
        self._pool.close()


def _begin(workspace_id: int | None, *, snapshot: bool = False) -> tuple[str, ...]:
    """The statements that begin a transaction scoped to a workspace (queued: sent with the transaction's
    first statement). The id is an int, written into the statement."""
    begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if snapshot else "BEGIN"
    if workspace_id is None:
        return (begin,)
    return begin, f"SELECT set_config('armarius.workspace_id', '{int(workspace_id)}', true)"


def open_database(database_url: str | None, sqlite_path: Path, *, sqlite_synchronous: str = "normal") -> Database:
    if database_url is None:
        return SqliteDatabase(sqlite_path, synchronous=sqlite_synchronous)
    return PostgresDatabase(database_url)
