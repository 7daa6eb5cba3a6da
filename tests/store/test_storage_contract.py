"""The storage contract, run on SQLite and PostgreSQL alike.

Migrations are idempotent and serialized, an outdated (or newer) schema is refused, a
transaction commits on a clean exit and writes nothing when it ends with an exception, unique
constraints surface as :class:`UniqueViolation`, and timestamps have one exact text form.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import psycopg.errors
import pytest

from armarius.app import Armarius, initialize, open_app
from armarius.audit import chain as audit
from armarius.config import Settings
from armarius.errors import InvalidInput, SchemaOutdated, StorageUnavailable
from armarius.store import UniqueViolation, batches, utc_now
from armarius.store.engine import PostgresDatabase, SqliteDatabase, open_database
from armarius.store.schema import latest_version, migrations
from tests.helpers import OwnerSQL

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
UTC_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


@pytest.fixture(params=ENGINES)
def fresh_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings for an empty database that nobody has migrated yet."""
    if request.param == "sqlite":
        return Settings(data_dir=tmp_path / "fresh")
    database = request.getfixturevalue("postgres_database")
    return Settings(data_dir=tmp_path / "fresh", database_url=database.app_url,
                    database_migrate_url=database.owner_url)


def dialect_of(settings: Settings) -> str:
    return "sqlite" if settings.database_url is None else "postgresql"


def all_versions(settings: Settings) -> list[int]:
    return [migration.version for migration in migrations(dialect_of(settings))]


def workspace_count(app: Armarius) -> int:
    with app.database.transaction() as tx:
        return int(tx.scalar("SELECT count(*) AS n FROM workspaces"))


# Migrations -------------------------------------------------------------------------------------


def test_both_engines_have_the_same_migrations() -> None:
    sqlite_side = [(m.version, m.name) for m in migrations("sqlite")]
    postgres_side = [(m.version, m.name) for m in migrations("postgresql")]
    assert sqlite_side == postgres_side
    assert sqlite_side, "there is at least one migration"


def test_fresh_database_gets_every_migration_once(fresh_settings: Settings) -> None:
    assert initialize(fresh_settings) == all_versions(fresh_settings)
    with OwnerSQL(fresh_settings) as owner:
        recorded = owner.rows("SELECT version FROM schema_migrations ORDER BY version")
    assert [row[0] for row in recorded] == all_versions(fresh_settings)


def test_initialize_twice_applies_nothing_the_second_time(settings: Settings) -> None:
    with OwnerSQL(settings) as owner:
        before = owner.rows("SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
    assert initialize(settings) == []
    assert initialize(settings) == []
    with OwnerSQL(settings) as owner:
        after = owner.rows("SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
    assert after == before
    assert [row[0] for row in after] == all_versions(settings)


def test_concurrent_initialize_applies_each_migration_exactly_once(fresh_settings: Settings) -> None:
    workers = 4
    barrier = threading.Barrier(workers)
    results: list[list[int]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def migrate() -> None:
        try:
            barrier.wait(timeout=30)
            applied = initialize(fresh_settings)
            with lock:
                results.append(applied)
        except BaseException as error:  # reported below, in the test's thread
            with lock:
                failures.append(error)

    threads = [threading.Thread(target=migrate) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    assert len(results) == workers
    assert sorted(version for applied in results for version in applied) == all_versions(fresh_settings)
    with OwnerSQL(fresh_settings) as owner:
        assert owner.count("schema_migrations") == len(all_versions(fresh_settings))
    application = open_app(fresh_settings)
    application.close()


def test_open_app_refuses_a_database_that_was_never_migrated(fresh_settings: Settings) -> None:
    with pytest.raises(SchemaOutdated) as caught:
        open_app(fresh_settings)
    assert caught.value.code == "schema_outdated"
    latest = latest_version(dialect_of(fresh_settings))
    assert caught.value.details == {"current": 0, "required": latest, "missing": all_versions(fresh_settings)}
    assert "armarius init" in caught.value.message


def test_open_app_refuses_an_outdated_schema(settings: Settings) -> None:
    latest = latest_version(dialect_of(settings))
    open_app(settings).close()  # the migrated schema is accepted
    with OwnerSQL(settings) as owner:
        assert owner.execute("DELETE FROM schema_migrations WHERE version = ?", (latest,)) == 1
    with pytest.raises(SchemaOutdated) as caught:
        open_app(settings)
    assert caught.value.details == {"current": latest - 1, "required": latest, "missing": [latest]}
    assert "armarius init" in caught.value.message


def test_open_app_refuses_a_schema_with_a_gap(settings: Settings) -> None:
    """A migration missing below the newest one (say, a restore that lost it) is not a current schema."""
    latest = latest_version(dialect_of(settings))
    with OwnerSQL(settings) as owner:
        assert owner.execute("DELETE FROM schema_migrations WHERE version = ?", (latest - 1,)) == 1
    with pytest.raises(SchemaOutdated) as caught:
        open_app(settings)
    assert caught.value.details["missing"] == [latest - 1]


def test_open_app_refuses_a_newer_schema(settings: Settings) -> None:
    latest = latest_version(dialect_of(settings))
    with OwnerSQL(settings) as owner:
        owner.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                      (latest + 1, "from_the_future", utc_now()))
    with pytest.raises(SchemaOutdated) as caught:
        open_app(settings)
    assert caught.value.details == {"current": latest + 1, "required": latest}
    assert "Upgrade Armarius" in caught.value.message


# Transactions -----------------------------------------------------------------------------------


def test_clean_exit_commits(app: Armarius, settings: Settings) -> None:
    with app.database.transaction(write=True) as tx:
        tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("kept", utc_now()))
    assert workspace_count(app) == 1
    with OwnerSQL(settings) as owner:
        assert owner.rows("SELECT name FROM workspaces") == [("kept",)]


class Abort(BaseException):
    """Not an Exception: a transaction must roll back on anything that leaves it."""


@pytest.mark.parametrize("failure", [RuntimeError, Abort])
def test_exception_rolls_back_every_write(app: Armarius, settings: Settings, failure: type[BaseException]) -> None:
    with OwnerSQL(settings) as owner:
        before = (owner.count("workspaces"), owner.count("audit_events"), owner.count("audit_heads"))

    def write_then_fail() -> None:
        with app.database.transaction(write=True) as tx:
            tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("doomed", utc_now()))
            audit.append(tx, actor="operator:test", action="workspace.created", subject="doomed")
            assert tx.scalar("SELECT count(*) AS n FROM workspaces WHERE name = ?", ("doomed",)) == 1
            raise failure("stop here")

    with pytest.raises(failure):
        write_then_fail()
    assert workspace_count(app) == 0
    with OwnerSQL(settings) as owner:
        assert (owner.count("workspaces"), owner.count("audit_events"), owner.count("audit_heads")) == before
    # The connection is usable afterwards, and the chain did not keep a phantom head.
    with app.database.transaction(write=True) as tx:
        event = audit.append(tx, actor="operator:test", action="workspace.created", subject="next")
    assert event.seq == 1
    assert audit.verify_chain(app.database, None) == (1, None)


def test_workspace_scoped_rollback(app: Armarius, settings: Settings) -> None:
    space = app.directory.create_workspace("scoped", by="operator:test")

    def append_then_fail() -> None:
        with app.database.transaction(workspace_id=space.id, write=True) as tx:
            for index in range(3):
                audit.append(tx, actor="operator:test", action="test.event", details={"i": index})
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError):
        append_then_fail()
    with OwnerSQL(settings) as owner:
        assert owner.rows("SELECT count(*) FROM audit_events WHERE workspace_id = ?", (space.id,)) == [(0,)]
    assert audit.verify_chain(app.database, space.id) == (0, None)


def test_read_transaction_sees_its_own_data_and_returns_rows_as_dicts(app: Armarius) -> None:
    created = app.directory.create_workspace("rows", by="operator:test")
    with app.database.transaction() as tx:
        row = tx.one("SELECT id, name FROM workspaces WHERE name = ?", ("rows",))
        assert row == {"id": created.id, "name": "rows"}
        assert tx.one("SELECT id FROM workspaces WHERE name = ?", ("missing",)) is None
        assert tx.scalar("SELECT id FROM workspaces WHERE name = ?", ("missing",)) is None
        assert tx.all("SELECT name FROM workspaces WHERE name = ?", ("missing",)) == []


@pytest.mark.parametrize("factory", [sqlite3.Row, None], ids=["sqlite3.Row", "tuples"])
def test_rows_are_dicts_whatever_row_factory_a_connection_came_with(tmp_path: Path, factory: object) -> None:
    """The rows a transaction hands on are the connection's own: a database whose connect() sets another
    row factory (the doctor's read-only look at the file does) or none still reads dicts, each its own."""

    class Looking(SqliteDatabase):
        def connect(self) -> sqlite3.Connection:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            connection.row_factory = factory  # type: ignore[assignment]
            return connection

    settings = Settings(data_dir=tmp_path / "data")
    initialize(settings)
    database = Looking(settings.sqlite_path)
    try:
        with database.transaction() as tx:
            later = tx.read_later("SELECT name, 1 AS one FROM workspaces UNION ALL SELECT 'x', 2 ORDER BY one")
            rows = tx.all("SELECT 'a' AS letter UNION ALL SELECT 'b'")
            assert tx.one("SELECT 7 AS seven, 'x' AS x") == {"seven": 7, "x": "x"}
        assert later.all() == [{"name": "x", "one": 2}]
        assert rows == [{"letter": "a"}, {"letter": "b"}]
        rows[0]["letter"] = "changed"
        assert rows[1] == {"letter": "b"}
    finally:
        database.close()


def test_execute_returns_the_number_of_rows_changed(app: Armarius) -> None:
    for name in ("one", "two", "three"):
        app.directory.create_workspace(name, by="operator:test")
    with app.database.transaction(write=True) as tx:
        assert tx.execute("UPDATE workspaces SET created_at = ? WHERE name <> ?", (utc_now(), "one")) == 2
        assert tx.execute("UPDATE workspaces SET created_at = ? WHERE name = ?", (utc_now(), "none")) == 0


def test_percent_signs_in_sql_are_literal_on_both_engines(app: Armarius) -> None:
    for name in ("pct-a", "pct-b", "other"):
        app.directory.create_workspace(name, by="operator:test")
    with app.database.transaction() as tx:
        assert tx.scalar("SELECT count(*) AS n FROM workspaces WHERE name LIKE 'pct%'") == 2
        assert tx.scalar("SELECT count(*) AS n FROM workspaces WHERE name LIKE ?", ("pct%",)) == 2
        assert tx.scalar("SELECT ? || '%' AS v", ("50",)) == "50%"


@pytest.mark.parametrize("value", [
    "it's a \\ back%slash\n and ü, 日本", "", b"\x00\x01'\\\xff", b"", 0, 32767, 32768, -32769, 2**31, -(2**63),
    2**63 - 1, True, False, None, 1.5, -0.0,
], ids=repr)
def test_a_parameter_of_every_kind_comes_back_as_it_went(app: Armarius, value: object) -> None:
    """PostgreSQL sends parameters as literals of prepared statements (store.batches): whatever the value,
    the statement means what it means with bound parameters, alone or with others in one round trip."""
    with app.database.transaction() as tx:
        assert tx.scalar("SELECT ? AS v", (value,)) == value
        later = tx.read_later("SELECT ? AS v, ? AS w", (value, "%s"))
        assert tx.scalar("SELECT ? AS v", (value,)) == value
        assert later.one() == {"v": value, "w": "%s"}


def test_a_statement_runs_again_after_transactions_that_rolled_back(app: Armarius, settings: Settings) -> None:
    count = "SELECT count(*) AS n FROM workspaces WHERE name <> ?"
    insert = "INSERT INTO workspaces (name, created_at) VALUES (?, ?)"

    def insert_twice(attempt: int) -> None:
        with app.database.transaction(write=True) as tx:
            assert tx.scalar(count, ("none",)) == attempt
            tx.execute(insert, (f"kept-{attempt}", utc_now()))
            tx.execute(insert, (f"kept-{attempt}", utc_now()))

    for attempt in range(3):
        with pytest.raises(UniqueViolation):
            insert_twice(attempt)
        app.directory.create_workspace(f"kept-{attempt}", by="operator:test")
    with app.database.transaction() as tx:
        assert tx.scalar(count, ("none",)) == 3


def test_statements_behind_one_that_failed_in_the_same_round_trip_run_later(app: Armarius) -> None:
    """An error stops the rest of a round trip's statements: each runs the next time it is asked for."""
    app.directory.create_workspace("taken", by="operator:test")
    behind = "SELECT name FROM workspaces WHERE name = ? AND id > ?"

    def stopped() -> None:
        with app.database.transaction(write=True) as tx:
            tx.execute_later("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("taken", utc_now()))
            tx.all(behind, ("taken", 0))

    with pytest.raises(UniqueViolation):
        stopped()
    with app.database.transaction() as tx:
        assert tx.all(behind, ("taken", 0)) == [{"name": "taken"}]


def test_statements_whose_first_run_an_error_stopped_run_later(app: Armarius) -> None:
    """A statement that cannot be prepared stops the statements after it in its round trip before any runs
    (on PostgreSQL, their PREPAREs): each runs the next time it is asked for, and nothing was written."""
    after = "SELECT name FROM workspaces WHERE name = ? AND id < ?"

    def stopped() -> None:
        with app.database.transaction(write=True) as tx:
            tx.execute_later("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("written", utc_now()))
            tx.read_later("SELECT no_such_column FROM workspaces WHERE id = ?", (1,))
            tx.all(after, ("written", 10**9))

    with pytest.raises((sqlite3.OperationalError, psycopg.errors.UndefinedColumn)):
        stopped()
    app.directory.create_workspace("later", by="operator:test")
    with app.database.transaction() as tx:
        assert tx.all(after, ("later", 10**9)) == [{"name": "later"}]
        assert tx.all(after, ("written", 10**9)) == []


@pytest.mark.parametrize("settings", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_a_prepared_statement_keeps_its_own_text_not_its_round_trips(app: Armarius) -> None:
    """The server keeps the text a statement was prepared in and copies it at every EXECUTE: a statement
    first sent among 2,000 writes must not keep those 2,000 as its text."""
    with app.database.transaction(write=True) as tx:
        for index in range(2_000):
            tx.execute_later("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", (f"w{index}", utc_now()))
        longest = tx.scalar("SELECT max(length(statement)) FROM pg_prepared_statements WHERE name <> ?", ("",))
    assert 0 < longest < 1_000


def test_statements_beyond_the_prepared_bound_take_turns_being_prepared(app: Armarius,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL preparing one statement more than the bound deallocates the one used least recently,
    also within one round trip."""
    monkeypatch.setattr(batches, "MAX_PREPARED", 1)
    with app.database.transaction(write=True) as tx:
        tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("it's", utc_now()))
    for _ in range(2):
        with app.database.transaction() as tx:
            later = tx.read_later("SELECT name FROM workspaces WHERE name = ? AND name LIKE '%''s'", ("it's",))
            again = tx.read_later("SELECT ? || '%' AS v", ("50",))
            assert tx.scalar("SELECT ? || '%' AS v", ("50",)) == "50%"
            assert later.all() == [{"name": "it's"}]
            assert again.scalar() == "50%"


def test_require_workspace(app: Armarius) -> None:
    with app.database.transaction() as tx, pytest.raises(RuntimeError):
        tx.require_workspace()
    with app.database.transaction(workspace_id=7) as tx:
        assert tx.require_workspace() == 7


# Statements sent later ---------------------------------------------------------------------------
# On PostgreSQL they go with the next statement or the commit, in one round trip; SQLite runs them at once.
# Either way a caller sees the same thing.


def names(settings: Settings) -> list[str]:
    with OwnerSQL(settings) as owner:
        return [name for (name,) in owner.rows("SELECT name FROM workspaces ORDER BY name")]


def test_a_read_sent_later_has_its_rows_after_the_next_statement_or_the_commit(app: Armarius,
                                                                               settings: Settings) -> None:
    app.directory.create_workspace("first", by="operator:test")
    with app.database.transaction(write=True) as tx:
        counted = tx.read_later("SELECT count(*) AS n FROM workspaces")
        tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("second", utc_now()))
        assert counted.scalar() == 1  # it ran before the insert it went with
        alone = tx.read_later("SELECT name FROM workspaces ORDER BY name")
        assert [row["name"] for row in alone.all()] == ["first", "second"]  # asked first: sent alone
        inserted = tx.read_later("INSERT INTO workspaces (name, created_at) VALUES (?, ?) RETURNING name",
                                 ("third", utc_now()))
    assert inserted.one() == {"name": "third"}  # went with the commit
    assert names(settings) == ["first", "second", "third"]


def test_a_write_sent_later_is_committed_and_rolled_back_with_its_transaction(app: Armarius,
                                                                              settings: Settings) -> None:
    with app.database.transaction(write=True) as tx:
        tx.execute_later("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("kept", utc_now()))
    queued = []

    def queue_then_fail() -> None:
        with app.database.transaction(write=True) as tx:
            tx.execute_later("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("dropped", utc_now()))
            queued.append(tx.read_later("SELECT count(*) AS n FROM workspaces"))
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        queue_then_fail()
    assert names(settings) == ["kept"]
    counted, = queued
    if settings.database_url is not None:  # never sent: there are no rows to give
        with pytest.raises(RuntimeError, match="ended before"):
            counted.all()


@pytest.mark.parametrize("met_at", ["the next statement", "the commit"])
def test_an_error_of_a_write_sent_later_undoes_the_whole_transaction(app: Armarius, settings: Settings,
                                                                     met_at: str) -> None:
    app.directory.create_workspace("taken", by="operator:test")

    def write_twice() -> None:
        with app.database.transaction(write=True) as tx:
            tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("written-first", utc_now()))
            tx.execute_later("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("taken", utc_now()))
            if met_at == "the next statement":
                tx.scalar("SELECT count(*) AS n FROM workspaces")

    with pytest.raises(UniqueViolation):
        write_twice()
    assert names(settings) == ["taken"]
    with app.database.transaction() as tx:  # the connection is usable afterwards
        assert tx.scalar("SELECT count(*) AS n FROM workspaces") == 1


def test_a_lazy_commit_still_commits_and_the_setting_ends_with_its_transaction(app: Armarius,
                                                                               settings: Settings) -> None:
    with app.database.transaction(write=True) as tx:
        tx.commit_lazily()
        tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("lazy", utc_now()))
        if settings.database_url is not None:
            assert tx.scalar("SHOW synchronous_commit") == "off"
    assert names(settings) == ["lazy"]
    if settings.database_url is not None:
        with app.database.transaction() as tx:
            assert tx.scalar("SHOW synchronous_commit") == "on"


# Local work done meanwhile: on PostgreSQL while the next statements sent travel and run, before their
# answers are read; before the COMMIT when nothing else is sent; at once on SQLite.


def test_work_done_meanwhile_runs_while_the_statements_it_went_with_run(app: Armarius, settings: Settings) -> None:
    seen: list[str] = []
    with OwnerSQL(settings) as owner, app.database.transaction(write=True) as tx:
        if settings.database_url is None:
            tx.meanwhile(lambda: seen.append("at once"))
            assert seen == ["at once"]
            return
        owner.rows("SELECT pg_advisory_lock(4242)")  # the statement below waits for this lock
        tx.execute_later("SET LOCAL lock_timeout = '10s'")  # work run only after the statement would fail, not hang

        def release_once_waited_for() -> None:
            try:
                for _ in range(1000):  # the statement is on its way; the server is running it
                    if owner.rows("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 "
                                  "AND NOT granted")[0][0] == 1:
                        seen.append("the statement waits for the lock")
                        return
                    time.sleep(0.005)
            finally:
                owner.rows("SELECT pg_advisory_unlock(4242)")

        tx.meanwhile(release_once_waited_for)
        assert seen == []
        tx.scalar("SELECT pg_advisory_xact_lock(4242)")
        assert seen == ["the statement waits for the lock"]


def test_work_done_meanwhile_runs_before_the_commit_when_nothing_else_is_sent(app: Armarius,
                                                                                settings: Settings) -> None:
    seen: list[list[str]] = []
    with app.database.transaction(write=True) as tx:
        tx.execute_later("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("queued", utc_now()))
        tx.meanwhile(lambda: seen.append(names(settings)))
    assert seen == [[]]  # not committed yet when it ran
    assert names(settings) == ["queued"]


def test_an_error_of_work_done_meanwhile_undoes_the_whole_transaction(app: Armarius, settings: Settings) -> None:
    def fail() -> None:
        raise OSError("disk full")

    def write_then_fail() -> None:
        with app.database.transaction(write=True) as tx:
            tx.meanwhile(fail)
            tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("dropped", utc_now()))

    with pytest.raises(OSError, match="disk full"):
        write_then_fail()
    assert names(settings) == []
    app.directory.create_workspace("taken", by="operator:test")  # the connection is usable afterwards

    def both_fail() -> None:
        with app.database.transaction(write=True) as tx:
            tx.meanwhile(fail)
            tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("taken", utc_now()))

    # The statement's error comes first (on SQLite the work ran at once, before the statement).
    with pytest.raises(OSError if settings.database_url is None else UniqueViolation):
        both_fail()
    assert names(settings) == ["taken"]


def test_work_done_meanwhile_is_dropped_with_a_transaction_rolled_back_before_it_ran(app: Armarius,
                                                                                      settings: Settings) -> None:
    seen: list[str] = []

    def queue_then_fail() -> None:
        with app.database.transaction(write=True) as tx:
            tx.meanwhile(lambda: seen.append("ran"))
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        queue_then_fail()
    assert seen == (["ran"] if settings.database_url is None else [])  # SQLite ran it at once


# Constraint errors ------------------------------------------------------------------------------


def test_unique_name_becomes_unique_violation_and_rolls_back(app: Armarius, settings: Settings) -> None:
    app.directory.create_workspace("taken", by="operator:test")
    with OwnerSQL(settings) as owner:
        before = owner.count("workspaces")

    def insert_both() -> None:
        with app.database.transaction(write=True) as tx:
            tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("written-first", utc_now()))
            tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("taken", utc_now()))

    with pytest.raises(UniqueViolation) as caught:
        insert_both()
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError | psycopg.errors.UniqueViolation)
    with OwnerSQL(settings) as owner:
        assert owner.count("workspaces") == before
        assert owner.rows("SELECT count(*) FROM workspaces WHERE name = ?", ("written-first",)) == [(0,)]


def test_primary_key_becomes_unique_violation(app: Armarius, settings: Settings) -> None:
    space = app.directory.create_workspace("keys", by="operator:test")
    with app.database.transaction(workspace_id=space.id, write=True) as tx:
        audit.append(tx, actor="operator:test", action="test.event")
    with OwnerSQL(settings) as owner:
        before = owner.rows("SELECT workspace_id, seq, hash FROM audit_events ORDER BY workspace_id, seq")
    columns = "workspace_id, seq, at, actor, action, subject, details, prev_hash, hash"
    with pytest.raises(UniqueViolation), app.database.transaction(workspace_id=space.id, write=True) as tx:
        tx.execute(f"INSERT INTO audit_events ({columns}) VALUES (?, 1, ?, 'x', 'x', '', '{{}}', ?, ?)",
                   (space.id, utc_now(), "0" * 64, "f" * 64))
    with pytest.raises(UniqueViolation), app.database.transaction(workspace_id=space.id, write=True) as tx:
        tx.execute("INSERT INTO audit_heads (workspace_id, seq, hash) VALUES (?, 0, ?)", (space.id, "0" * 64))
    with OwnerSQL(settings) as owner:
        after = owner.rows("SELECT workspace_id, seq, hash FROM audit_events ORDER BY workspace_id, seq")
    assert after == before
    assert audit.verify_chain(app.database, space.id) == (1, None)


def test_check_constraint_is_not_reported_as_unique_violation(app: Armarius, settings: Settings) -> None:
    with OwnerSQL(settings) as owner:
        before = owner.count("principals")
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.CheckViolation)) as caught, \
            app.database.transaction(write=True) as tx:
        tx.execute("INSERT INTO principals (name, kind, created_at) VALUES (?, ?, ?)", ("robot", "robot", utc_now()))
    assert not isinstance(caught.value, UniqueViolation)
    with OwnerSQL(settings) as owner:
        assert owner.count("principals") == before


# Timestamps -------------------------------------------------------------------------------------


def test_utc_now_format() -> None:
    before = datetime.now(UTC)
    stamp = utc_now()
    after = datetime.now(UTC)
    assert UTC_TEXT.fullmatch(stamp), stamp
    parsed = datetime.fromisoformat(stamp)
    assert parsed.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= parsed <= after + timedelta(seconds=1)


def test_utc_now_text_sorts_in_time_order() -> None:
    stamps = [utc_now() for _ in range(200)]
    assert stamps == sorted(stamps)
    assert all(UTC_TEXT.fullmatch(stamp) for stamp in stamps)


def test_utc_now_round_trips_exactly_through_the_database(app: Armarius) -> None:
    stamp = utc_now()
    with app.database.transaction(write=True) as tx:
        tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("stamped", stamp))
    with app.database.transaction() as tx:
        stored = tx.scalar("SELECT created_at FROM workspaces WHERE name = ?", ("stamped",))
    assert stored == stamp
    assert isinstance(stored, str)


def test_stamps_written_by_the_directory_have_the_format(app: Armarius) -> None:
    space = app.directory.create_workspace("formatted", by="operator:test")
    assert UTC_TEXT.fullmatch(space.created_at)
    events = audit.tail(app.database, None)
    assert events
    assert all(UTC_TEXT.fullmatch(event.at) for event in events)


# A value the driver cannot send ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a\x00b", "a\ud800b"])
def test_a_text_no_engine_can_hold_is_refused_before_anything_is_sent(app: Armarius, settings: Settings,
                                                                       value: str) -> None:
    def look_up() -> None:
        with app.database.transaction(write=True) as tx:
            tx.execute("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("kept", utc_now()))
            tx.scalar("SELECT count(*) FROM workspaces WHERE name = ?", (value,))

    with pytest.raises(InvalidInput, match="can be neither stored nor looked up"):
        look_up()
    assert names(settings) == []


def test_a_value_the_driver_cannot_quote_leaves_the_connection_s_statements_as_they_were(settings: Settings) -> None:
    """psycopg cannot quote a set: the statement it was for is not sent, and on PostgreSQL not taken for
    prepared either (the next use of the same statement on the same connection runs it); a transaction that
    goes on after the failure is refused rather than run outside any transaction."""
    database = open_database(settings.database_url, settings.data_dir / "armarius.sqlite")
    if settings.database_url is not None:
        database.close()
        database = PostgresDatabase(settings.database_url, max_connections=1)  # the same connection every time
    statement = "SELECT CAST(? AS text) AS value"

    def unquotable() -> None:
        with database.transaction() as tx:
            tx.scalar(statement, ({"unquotable"},))

    def going_on_after_it() -> None:
        with database.transaction() as tx:
            with contextlib.suppress(psycopg.ProgrammingError):
                tx.scalar(statement, ({"unquotable"},))
            tx.scalar(statement, ("after it",))

    try:
        with pytest.raises((psycopg.ProgrammingError, sqlite3.ProgrammingError)):
            unquotable()
        with database.transaction() as tx:
            assert tx.scalar(statement, ("quoted",)) == "quoted"
        if settings.database_url is not None:
            with pytest.raises(RuntimeError, match="can only be rolled back"):
                going_on_after_it()
            with database.transaction() as tx:
                assert tx.scalar(statement, ("again",)) == "again"
    finally:
        database.close()


@pytest.mark.parametrize("settings", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_postgresql_s_errors_are_told_apart_by_their_class(settings: Settings) -> None:
    """Only a database that cannot take the request now is ``storage_unavailable``, which trying again can
    cure: its connection lost (class 08, 57P), a statement cancelled (57014), a serialization failure or a
    deadlock (40), a lock timeout (55P03), its resources exhausted (53). A program limit (class 54: a tsvector
    over 1 MiB, a value too long) fails every time: ``invalid_input``. Any other operational error is neither,
    and goes up as it is (an internal error, logged)."""
    assert settings.database_url is not None
    database = PostgresDatabase(settings.database_url)

    def run(*statements: str) -> None:
        with database.transaction() as tx:
            for statement in statements:
                tx.execute(statement)

    try:
        with pytest.raises(InvalidInput, match="PostgreSQL limit") as limit:
            run("SELECT repeat('x', 1073741824)")  # "requested length too large"
        assert isinstance(limit.value.__cause__, psycopg.errors.ProgramLimitExceeded)
        with pytest.raises(InvalidInput):
            run("SELECT to_tsvector('simple', string_agg(md5(n::text), ' ')) FROM generate_series(1, 40000) n")
        with pytest.raises(StorageUnavailable, match="busy"):
            run("SET LOCAL statement_timeout = 1", "SELECT pg_sleep(10)")
        with pytest.raises(StorageUnavailable, match="connection failed"):
            run("SELECT pg_terminate_backend(pg_backend_pid())")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            run("CREATE TEMPORARY SEQUENCE numbers", "SELECT currval('numbers')")
        with database.transaction() as tx:  # the pool goes on with connections that work
            assert tx.scalar("SELECT 1 AS one") == 1
    finally:
        database.close()
