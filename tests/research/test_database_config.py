"""The [[databases]] configuration: credentials only from the environment or a private file, each
dialect with its own keys, allowlists of valid names, limits in range; every refusal names the key
and never shows a password."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from armarius.errors import ConfigError
from armarius.research.config import DatabaseLimits, load_research_config
from tests.research.repos import write_config

PASSWORD = "pw-Very$ecret-7781"
ENVIRON = {"WORLD_DB_PASSWORD": PASSWORD}


def server_entry(**changes: Any) -> dict[str, Any]:
    entry = {"name": "world", "dialect": "mariadb", "host": "db.internal", "port": 3306, "database": "world",
             "user": "reader", "password_env": "WORLD_DB_PASSWORD", "snapshot": "import-1",
             "tables": ["creature_template", "item_template"]}
    return {key: value for key, value in {**entry, **changes}.items() if value is not None}


def write(tmp_path: Path, *entries: dict[str, Any]) -> Path:
    return write_config(tmp_path / "research.toml", databases=entries)


def refused(path: Path, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_research_config(path, ENVIRON if environ is None else environ)
    assert caught.value.code == "config_invalid"
    assert PASSWORD not in caught.value.message
    assert PASSWORD not in str(caught.value.details)
    return caught.value


def test_a_server_database_loads_with_its_password_from_the_environment(tmp_path: Path) -> None:
    config = load_research_config(write(tmp_path, server_entry()), ENVIRON)
    database = config.databases["world"]
    assert (database.dialect, database.host, database.port, database.database, database.user) == (
        "mariadb", "db.internal", 3306, "world", "reader")
    assert database.password == PASSWORD
    assert PASSWORD not in repr(database)
    assert PASSWORD not in repr(config)
    assert database.limits == DatabaseLimits()
    assert config.sources == {}


def test_mysql_is_the_mariadb_driver_and_postgresql_has_a_schema(tmp_path: Path) -> None:
    mysql = load_research_config(write(tmp_path, server_entry(dialect="mysql")), ENVIRON)
    assert mysql.databases["world"].dialect == "mariadb"
    postgres = load_research_config(write(tmp_path, server_entry(dialect="postgresql", port=None, schema="game")),
                                    ENVIRON)
    assert (postgres.databases["world"].port, postgres.databases["world"].schema) == (5432, "game")


def test_a_password_file_must_be_private(tmp_path: Path) -> None:
    secret = tmp_path / "world.password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o644)
    path = write(tmp_path, server_entry(password_env=None, password_file="world.password"))
    error = refused(path)
    assert error.details == {"key": "password_file"}
    assert "chmod 600" in error.message
    secret.chmod(0o600)
    assert load_research_config(path).databases["world"].password == PASSWORD
    os.unlink(secret)
    assert refused(path).details == {"key": "password_file"}


@pytest.mark.parametrize(("changes", "key"), [
    ({"password": PASSWORD}, "password"),
    ({"password_file": "x"}, "password_env"),  # both
    ({"password_env": None}, "password_env"),  # neither
    ({"password_env": "NOT_SET_ANYWHERE"}, "password_env"),
    ({"password_env": "BAD NAME"}, "password_env"),
    ({"dialect": "oracle"}, "dialect"),
    ({"snapshot": None}, "snapshot"),
    ({"snapshot": " "}, "snapshot"),
    ({"host": None}, "host"),
    ({"user": ""}, "user"),
    ({"port": 0}, "port"),
    ({"port": "3306"}, "port"),
    ({"tables": []}, "tables"),
    ({"tables": "creature_template"}, "tables"),
    ({"tables": ["creature_template", "creature_template"]}, "tables"),
    ({"tables": ["creature`template"]}, "tables"),
    ({"tables": ["x; DROP TABLE y"]}, "tables"),
    ({"tables": ["public.account"]}, "tables"),
    ({"columns": {"account": ["id"]}}, "columns"),
    ({"columns": {"item_template": ["na me"]}}, "columns.item_template"),
    ({"columns": {"item_template": []}}, "columns.item_template"),
    ({"schema": "public"}, "schema"),  # postgresql only
    ({"path": "world.sqlite"}, "path"),  # sqlite only
    ({"max_rows": 0}, "max_rows"),
    ({"max_in_values": 5000}, "max_in_values"),
    ({"timeout_seconds": True}, "timeout_seconds"),
    ({"url": "mysql://reader:pw@host/world"}, "url"),
])
def test_malformed_entries_are_refused_naming_the_key(tmp_path: Path, changes: dict[str, Any], key: str) -> None:
    assert refused(write(tmp_path, server_entry(**changes))).details == {"key": key}


def test_a_sqlite_database_is_a_file_that_exists(tmp_path: Path) -> None:
    (tmp_path / "world.sqlite").write_bytes(b"")
    entry = {"name": "local", "dialect": "sqlite", "path": "world.sqlite", "snapshot": "s", "tables": ["t"]}
    config = load_research_config(write(tmp_path, entry))
    assert config.databases["local"].path == (tmp_path / "world.sqlite").resolve()
    assert refused(write(tmp_path, {**entry, "path": "missing.sqlite"})).details == {"key": "path"}
    assert refused(write(tmp_path, {**entry, "host": "x"})).details == {"key": "host"}
    assert refused(write(tmp_path, {**entry, "password_env": "WORLD_DB_PASSWORD"})).details == {
        "key": "password_env"}


def test_two_databases_need_two_names(tmp_path: Path) -> None:
    assert "Two databases are named 'world'" in refused(write(tmp_path, server_entry(), server_entry())).message
    both = load_research_config(write(tmp_path, server_entry(), server_entry(name="other")), ENVIRON)
    assert sorted(both.databases) == ["other", "world"]
