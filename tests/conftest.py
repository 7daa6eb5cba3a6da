"""Shared fixtures: a real SQLite file and a real PostgreSQL database per test.

PostgreSQL tests skip when the server is unreachable, unless ARMARIUS_REQUIRE_SERVICES=1
(CI), where an unreachable server fails them instead.

Migrating a PostgreSQL database costs far more than copying one, so the ``settings`` fixture
gives each test a copy of a database that the session migrates once (``postgres_copies``). Tests
that need an empty database, or a login role of their own, take ``postgres_database`` instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import anyio._core._subprocesses  # noqa: F401  (imported early: CPython 3.11.7 fails to compile it deep in a stack)
import psycopg
import pytest

from armarius.app import Armarius, initialize, open_app
from armarius.auth import secrets as password_secrets
from armarius.config import Settings
from tests import scale

PG_ADMIN_URL = os.environ.get("ARMARIUS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_SERVICES = os.environ.get("ARMARIUS_REQUIRE_SERVICES") == "1"
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]

#: The scrypt work factor (N) that tests hash passwords with in-process. Production's (2**15) costs
#: about 0.1 s a hash, and a test pays two for every team it builds; a stored hash names its own
#: parameters, so hashes of either factor verify alike. Tests with "scrypt" in their name keep the
#: production factor: they check that stored hashes carry it.
TEST_SCRYPT_N = 2**10


def service_missing(what: str, error: Exception) -> None:
    message = f"{what} is not reachable: {error}"
    if REQUIRE_SERVICES:
        pytest.fail(message)
    pytest.skip(message)


def _pg_url(database: str, user: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)
    return f"postgresql://{user}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{database}"


class PostgresDatabase:
    """A database owned by the admin, and a login role for the server that owns nothing.

    By default both are fresh: an empty database and a role of its own, dropped together. With
    ``app_role`` the database uses that existing role instead (and leaves it be when dropped).
    """

    def __init__(self, app_role: str | None = None) -> None:
        suffix = secrets.token_hex(4)
        self.name = f"armarius_t_{suffix}"
        self.owns_role = app_role is None
        self.app_role = app_role or f"armarius_app_{suffix}"
        self.owner_url = _pg_url(self.name, psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL).get("user", "postgres"))
        self.app_url = _pg_url(self.name, self.app_role)

    def create(self, template: str | None = None) -> None:
        """Create the database (a copy of ``template`` if given) and, if it has its own, the role."""
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            if self.owns_role:
                connection.execute(f'CREATE ROLE "{self.app_role}" LOGIN')
            if template is None:
                connection.execute(f'CREATE DATABASE "{self.name}"')
            else:
                connection.execute(f'CREATE DATABASE "{self.name}" TEMPLATE "{template}"')

    def drop(self) -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            if self.owns_role:
                connection.execute(f'DROP ROLE IF EXISTS "{self.app_role}"')


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def cheap_password_hashing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hash passwords at TEST_SCRYPT_N unless the test is named for scrypt. Only in this process:
    servers and CLIs that tests start as subprocesses hash at the production factor."""
    if "scrypt" not in request.node.name:
        monkeypatch.setattr(password_secrets, "_SCRYPT_N", TEST_SCRYPT_N)


@pytest.fixture
def postgres_database() -> Iterator[PostgresDatabase]:
    """An empty database with a login role of its own: for tests that migrate it themselves, or
    change the role."""
    database = PostgresDatabase()
    try:
        database.create()
    except psycopg.OperationalError as error:
        service_missing("PostgreSQL", error)
    yield database
    database.drop()


#: What makes a role what it is, cluster-wide (its grants and settings in a copy go with the copy).
#: Read as the admin, a superuser: pg_authid tells whether the role has a password.
_ROLE_STATE = """
    SELECT row_to_json(state)::text FROM (
        SELECT role.rolsuper, role.rolinherit, role.rolcreaterole, role.rolcreatedb, role.rolcanlogin,
               role.rolreplication, role.rolbypassrls, role.rolconnlimit, role.rolvaliduntil,
               role.rolpassword IS NOT NULL AS has_password,
               ARRAY(SELECT s.setconfig::text FROM pg_db_role_setting s
                     WHERE s.setrole = role.oid AND s.setdatabase = 0) AS settings,
               ARRAY(SELECT m.roleid::regrole::text FROM pg_auth_members m WHERE m.member = role.oid ORDER BY 1)
                   AS member_of,
               ARRAY(SELECT m.member::regrole::text FROM pg_auth_members m WHERE m.roleid = role.oid ORDER BY 1)
                   AS members
        FROM pg_authid role WHERE role.rolname = %s
    ) state
"""


class TemplateCopies:
    """Copies of a template database, made ahead and dropped behind by one background thread.

    Copying and dropping a database are mostly the server's disk work (a drop forces a checkpoint),
    so they overlap the tests instead of adding to them. A copy is taken by one test only, and made
    before that test asks for it; every drop is awaited, and its error raised, by ``close``.

    All copies share the template's login role; ``check_role`` fails a test that changed it.
    """

    def __init__(self, template: PostgresDatabase) -> None:
        self._template = template
        self._role_state = self._role_now()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="postgres-copies")
        self._drops: list[Future[None]] = []
        self._next = self._worker.submit(self._copy)

    def _copy(self) -> PostgresDatabase:
        database = PostgresDatabase(app_role=self._template.app_role)
        database.create(template=self._template.name)
        return database

    def take(self) -> PostgresDatabase:
        """A fresh copy, and the next one started."""
        ready, self._next = self._next, self._worker.submit(self._copy)
        return ready.result()

    def drop(self, database: PostgresDatabase) -> None:
        self._drops.append(self._worker.submit(database.drop))

    def check_role(self) -> None:
        """Fail the test if it changed the role that every copy shares: the change would leak into later
        tests. Only that test fails (later ones are compared with the changed role)."""
        before, self._role_state = self._role_state, self._role_now()
        if self._role_state != before:
            pytest.fail(f"This test changed the login role that the `settings` databases share "
                        f"({self._template.app_role}): {before} became {self._role_state}. A test that changes "
                        "the role takes `postgres_database`, which has a role of its own.")

    def _role_now(self) -> str | None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            row = connection.execute(_ROLE_STATE, (self._template.app_role,)).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        """Drop the spare copy, then wait for every drop."""
        try:
            self.drop(self._next.result())
        finally:
            self._worker.shutdown(wait=True)
        for drop in self._drops:
            drop.result()


@pytest.fixture(scope="session")
def postgres_copies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemplateCopies]:
    """Copies of a database that `armarius init` migrated once per session, for ``settings``.

    A copy keeps the template's grants, which name the template's role: every copy therefore shares
    this one login role (role names are cluster-wide; the suffix keeps concurrent sessions apart). The
    role is as plain as a fresh one and owns nothing; a test that changes it takes ``postgres_database``
    (``settings`` checks that its test did not). The role and template are dropped after every copy.
    """
    template = PostgresDatabase()
    try:
        template.create()
    except psycopg.OperationalError as error:
        service_missing("PostgreSQL", error)
    try:
        # The migrations and the audit setup, exactly as for any database; the key file made here
        # is not used: each test's `initialize` makes its own (the template holds no signed events).
        initialize(Settings(data_dir=tmp_path_factory.mktemp("postgres-template") / "data",
                            database_url=template.app_url, database_migrate_url=template.owner_url))
        # Copying needs a template nobody is connected to: from here on nobody can be.
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            connection.execute(f'ALTER DATABASE "{template.name}" ALLOW_CONNECTIONS false')
        copies = TemplateCopies(template)
        try:
            yield copies
        finally:
            copies.close()
    finally:
        template.drop()


@pytest.fixture(params=ENGINES)
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings for a fresh, migrated data folder on each storage engine.

    On PostgreSQL the database is a copy of the session's migrated template, so ``initialize``
    here finds every migration applied (it would apply one added since); it still prepares the data
    folder's audit key.
    """
    data_dir = tmp_path / "data"
    if request.param == "sqlite":
        result = Settings(data_dir=data_dir)
        initialize(result)
        yield result
        return
    copies: TemplateCopies = request.getfixturevalue("postgres_copies")
    try:
        database = copies.take()
    except psycopg.OperationalError as error:
        service_missing("PostgreSQL", error)
    try:
        result = Settings(data_dir=data_dir, database_url=database.app_url, database_migrate_url=database.owner_url)
        initialize(result)
        yield result
    finally:
        copies.drop(database)
    copies.check_role()


@pytest.fixture
def app(settings: Settings) -> Iterator[Armarius]:
    application = open_app(settings)
    yield application
    application.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--reliability-scale", choices=("ci", "local"), default="ci",
                     help="How hard the reliability and security suites push: ci (small, the default) or local.")


def pytest_configure(config: pytest.Config) -> None:
    scale.SCALE["name"] = config.getoption("--reliability-scale")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The counts of the reliability and security suites (cases, kills, clients, rounds)."""
    if scale.COUNTS:
        terminalreporter.section(f"reliability and security, scale {scale.SCALE['name']}")
        for what, count in sorted(scale.COUNTS.items()):
            terminalreporter.line(f"{count:>10,}  {what}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After a full, green run: every registered error code must have been raised by some test.

    With several workers (pytest-xdist, as scripts/test runs the suite) each worker hands the codes it
    saw raised and its counts to the controller, which checks and prints them for the whole run."""
    from armarius.errors import ERROR_CODES, raised_codes

    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["raised_codes"] = sorted(raised_codes)
        worker_output["counts"] = dict(scale.COUNTS)
        return
    whole_suite = not session.config.option.keyword and not session.config.option.markexpr and all(
        Path(arg).resolve() == Path(__file__).parent for arg in session.config.args
    )
    if exitstatus != 0 or not whole_suite:
        return
    never_raised = sorted(set(ERROR_CODES) - raised_codes)
    if never_raised:
        session.config.get_terminal_writer().line(f"error codes never exercised by a test: {never_raised}", red=True)
        session.exitstatus = 1


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """A pytest-xdist worker finished: what it saw counts for the whole run (see pytest_sessionfinish)."""
    from armarius.errors import raised_codes

    output = getattr(node, "workeroutput", {})
    raised_codes.update(output.get("raised_codes", ()))
    scale.COUNTS.update(output.get("counts", {}))
