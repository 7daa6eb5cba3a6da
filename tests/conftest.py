"""Shared fixtures: a real SQLite file and a real PostgreSQL database per test.

PostgreSQL tests skip when the server is unreachable, unless ARMARIUS_REQUIRE_SERVICES=1
(CI), where an unreachable server fails them instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio._core._subprocesses  # noqa: F401  (imported early: CPython 3.11.7 fails to compile it deep in a stack)
import psycopg
import pytest

from armarius.app import Armarius, initialize, open_app
from armarius.config import Settings

PG_ADMIN_URL = os.environ.get("ARMARIUS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_SERVICES = os.environ.get("ARMARIUS_REQUIRE_SERVICES") == "1"
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def service_missing(what: str, error: Exception) -> None:
    message = f"{what} is not reachable: {error}"
    if REQUIRE_SERVICES:
        pytest.fail(message)
    pytest.skip(message)


def _pg_url(database: str, user: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)
    return f"postgresql://{user}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{database}"


class PostgresDatabase:
    """A fresh database owned by the admin, and a login role for the server that owns nothing."""

    def __init__(self) -> None:
        suffix = secrets.token_hex(4)
        self.name, self.app_role = f"armarius_t_{suffix}", f"armarius_app_{suffix}"
        self.owner_url = _pg_url(self.name, psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL).get("user", "postgres"))
        self.app_url = _pg_url(self.name, self.app_role)

    def create(self) -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            connection.execute(f'CREATE ROLE "{self.app_role}" LOGIN')
            connection.execute(f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            connection.execute(f'DROP ROLE IF EXISTS "{self.app_role}"')


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def postgres_database() -> Iterator[PostgresDatabase]:
    database = PostgresDatabase()
    try:
        database.create()
    except psycopg.OperationalError as error:
        service_missing("PostgreSQL", error)
    yield database
    database.drop()


@pytest.fixture(params=ENGINES)
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings for a fresh, migrated data folder on each storage engine."""
    data_dir = tmp_path / "data"
    if request.param == "sqlite":
        result = Settings(data_dir=data_dir)
    else:
        database: PostgresDatabase = request.getfixturevalue("postgres_database")
        result = Settings(data_dir=data_dir, database_url=database.app_url, database_migrate_url=database.owner_url)
    initialize(result)
    return result


@pytest.fixture
def app(settings: Settings) -> Iterator[Armarius]:
    application = open_app(settings)
    yield application
    application.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After a full, green run: every registered error code must have been raised by some test."""
    from armarius.errors import ERROR_CODES, raised_codes

    whole_suite = not session.config.option.keyword and not session.config.option.markexpr and all(
        Path(arg).resolve() == Path(__file__).parent for arg in session.config.args
    )
    if exitstatus != 0 or not whole_suite:
        return
    never_raised = sorted(set(ERROR_CODES) - raised_codes)
    if never_raised:
        session.config.get_terminal_writer().line(f"error codes never exercised by a test: {never_raised}", red=True)
        session.exitstatus = 1
