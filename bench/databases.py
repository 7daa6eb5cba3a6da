"""Temporary databases for the benchmarks: a SQLite data folder, or a fresh PostgreSQL database
owned by the admin with a non-owner login role for the server (as in production), dropped after.

The PostgreSQL admin URL comes from ARMARIUS_BENCH_PG_URL (default postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from armarius.app import initialize
from armarius.config import Settings

PG_ADMIN_URL = os.environ.get("ARMARIUS_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _admin(*statements: str) -> None:
    """Statements run in turn as the PostgreSQL admin, outside a transaction (databases and roles)."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        for statement in statements:
            connection.execute(statement)


def _pg_url(database: str, user: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)
    return f"postgresql://{user}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{database}"


@contextmanager
def postgres_settings(data_dir: Path) -> Iterator[Settings]:
    suffix = secrets.token_hex(4)
    name, role = f"armarius_bench_{suffix}", f"armarius_bench_app_{suffix}"
    admin_user = str(psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL).get("user", "postgres"))
    _admin(f'CREATE ROLE "{role}" LOGIN', f'CREATE DATABASE "{name}"')
    try:
        settings = Settings(data_dir=data_dir, database_url=_pg_url(name, role),
                            database_migrate_url=_pg_url(name, admin_user))
        initialize(settings)
        yield settings
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'DROP ROLE IF EXISTS "{role}"')


@contextmanager
def sqlite_settings(data_dir: Path) -> Iterator[Settings]:
    settings = Settings(data_dir=data_dir)
    initialize(settings)
    yield settings


@contextmanager
def engine_settings(engine: str, data_dir: Path) -> Iterator[Settings]:
    with (sqlite_settings if engine == "sqlite" else postgres_settings)(data_dir) as settings:
        yield settings


@contextmanager
def snapshot(settings: Settings) -> Iterator[Callable[[], None]]:
    """A copy of the store as it is now (its data folder, and on PostgreSQL its database, copied as a
    template), and a call that puts the store back as it was, so that runs which write start from the same
    store; the copy is removed afterwards. Nothing may use the store while the copy is taken or put back."""
    copy = settings.data_dir.with_name(settings.data_dir.name + "-snapshot")
    shutil.copytree(settings.data_dir, copy, symlinks=True)
    database = None if settings.database_url is None else urlsplit(settings.database_url).path.lstrip("/")
    if database is not None:
        _admin(f'CREATE DATABASE "{database}_snapshot" TEMPLATE "{database}"')

    def restore() -> None:
        shutil.rmtree(settings.data_dir)
        shutil.copytree(copy, settings.data_dir, symlinks=True)
        if database is not None:
            _admin(f'DROP DATABASE "{database}" WITH (FORCE)',
                   f'CREATE DATABASE "{database}" TEMPLATE "{database}_snapshot"')

    try:
        yield restore
    finally:
        shutil.rmtree(copy, ignore_errors=True)
        if database is not None:
            _admin(f'DROP DATABASE IF EXISTS "{database}_snapshot" WITH (FORCE)')


def postgres_available() -> bool:
    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The value below which ``fraction`` of the samples fall (inclusive method)."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[round(fraction * 100) - 1]


def environment(app_settings: Settings | None = None) -> dict[str, str]:
    """ARMARIUS_* variables for a subprocess (armarius mcp) on the same database, and PYTHONPATH where it is set:
    the server runs the code the benchmark imports (a second checkout's, to compare two versions)."""
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    if app_settings is None or app_settings.database_url is None:
        return env
    return {**env, "ARMARIUS_DATABASE_URL": app_settings.database_url,
            "ARMARIUS_DATABASE_MIGRATE_URL": app_settings.database_migrate_url or ""}
