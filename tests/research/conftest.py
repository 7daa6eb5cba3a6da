"""Fixtures shared by the research tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

from armarius.app import Armarius, open_app
from armarius.research.config import load_research_config
from armarius.research.service import ResearchService
from tests.conftest import service_missing
from tests.research.repos import Repo, build_repo, source_entry, write_config
from tests.research.session_path import SessionPath
from tests.research.world import (
    Login,
    WorldServer,
    build_sqlite_world,
    database_entry,
    mariadb_world,
    password_environ,
    postgres_world,
)


@pytest.fixture
def research_app(app: Armarius, tmp_path: Path) -> Iterator[tuple[Armarius, Repo]]:
    repo = build_repo(tmp_path / "repo")
    write_config(app.settings.data_dir / "research.toml", [source_entry(repo)])
    application = open_app(replace(app.settings, research_config=Path("research.toml")))
    yield application, repo
    application.close()


WORLD_DIALECTS = ["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb),
                  pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session", params=WORLD_DIALECTS)
def world_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorldServer]:
    """The game-world database on one engine, shared by a session's tests (which only read it)."""
    if request.param == "sqlite":
        yield build_sqlite_world(tmp_path_factory.mktemp("world") / "world.sqlite")
        return
    builder, what = (mariadb_world, "MariaDB") if request.param == "mariadb" else (postgres_world, "PostgreSQL")
    try:
        context = builder()
        server = context.__enter__()
    except (pymysql.err.OperationalError, psycopg.OperationalError) as error:
        service_missing(what, error)
    try:
        yield server
    finally:
        context.__exit__(None, None, None)


def open_world_service(folder: Path, server: WorldServer, *, login: Login = "reader",
                       environ: dict[str, str] | None = None, **entry: Any) -> ResearchService:
    """A research service over ``server`` alone, as ``login``, its password in ``environ`` (default: the
    right one), reached through a session."""
    path = write_config(folder / "research.toml", databases=[database_entry(server, login=login, **entry)])
    research = ResearchService(load_research_config(path, password_environ(server, login) if environ is None
                                                    else environ))
    return SessionPath(research, folder)  # type: ignore[return-value]


@pytest.fixture
def world(world_server: WorldServer, tmp_path: Path) -> Iterator[ResearchService]:
    service = open_world_service(tmp_path, world_server)
    yield service
    service.close()
