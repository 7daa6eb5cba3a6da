"""Settings: defaults, the TOML file, environment overrides and every refusal naming its source; the
process settings the entry point makes (one BLAS thread)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from armarius.config import (
    CONFIG_FILE_NAME,
    DEFAULT_DATA_DIR,
    Settings,
    load_settings,
    write_settings_file,
)
from armarius.errors import ConfigError

PG_URL = "postgresql://armarius@db.example:5432/armarius"
PG_OWNER_URL = "postgresql://owner@db.example:5432/armarius"


def write_config(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CONFIG_FILE_NAME
    path.write_text(text, encoding="utf-8")
    return path


def refusal(folder: Path, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_settings(folder, environ={} if environ is None else environ)
    assert caught.value.code == "config_invalid"
    return caught.value


# Defaults and sources ---------------------------------------------------------------------------


def test_defaults_without_a_file(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, environ={})
    assert settings == Settings(data_dir=tmp_path.resolve())
    assert settings.database_url is None
    assert settings.database_migrate_url is None
    assert (settings.host, settings.port) == ("127.0.0.1", 8765)
    assert settings.sqlite_path == tmp_path.resolve() / "armarius.sqlite3"
    assert settings.config_file == tmp_path.resolve() / CONFIG_FILE_NAME


def test_default_data_dir_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_settings(environ={}).data_dir == (tmp_path / DEFAULT_DATA_DIR).resolve()


def test_data_dir_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "elsewhere"
    write_config(folder, "[server]\nport = 9001\n")
    settings = load_settings(environ={"ARMARIUS_DATA_DIR": str(folder)})
    assert settings.data_dir == folder.resolve()
    assert settings.port == 9001


def test_explicit_data_dir_wins_over_the_environment(tmp_path: Path) -> None:
    chosen, ignored = tmp_path / "chosen", tmp_path / "ignored"
    assert load_settings(chosen, environ={"ARMARIUS_DATA_DIR": str(ignored)}).data_dir == chosen.resolve()


def test_values_from_the_file(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        f'[server]\nhost = "10.1.2.3"\nport = 9000\n\n[database]\nurl = "{PG_URL}"\nmigrate_url = "{PG_OWNER_URL}"\n',
    )
    settings = load_settings(tmp_path, environ={})
    assert (settings.host, settings.port) == ("10.1.2.3", 9000)
    assert (settings.database_url, settings.database_migrate_url) == (PG_URL, PG_OWNER_URL)


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    write_config(tmp_path, '[server]\nhost = "file.example"\nport = 9000\n')
    environ = {
        "ARMARIUS_HOST": "env.example",
        "ARMARIUS_PORT": "9100",
        "ARMARIUS_DATABASE_URL": PG_URL,
        "ARMARIUS_DATABASE_MIGRATE_URL": PG_OWNER_URL,
    }
    settings = load_settings(tmp_path, environ=environ)
    assert (settings.host, settings.port) == ("env.example", 9100)
    assert (settings.database_url, settings.database_migrate_url) == (PG_URL, PG_OWNER_URL)


def test_environment_is_read_from_os_environ_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARMARIUS_PORT", "9200")
    assert load_settings(tmp_path).port == 9200


def test_unrelated_environment_variables_are_ignored(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, environ={"ARMARIUS_UNKNOWN": "x", "PORT": "abc"})
    assert settings == Settings(data_dir=tmp_path.resolve())


def test_written_settings_file_loads_back(tmp_path: Path) -> None:
    original = Settings(data_dir=tmp_path / "data", host="10.0.0.7", port=8123)
    write_settings_file(original)
    text = original.config_file.read_text(encoding="utf-8")
    assert "password" not in text.lower().replace("credentials", "")
    loaded = load_settings(tmp_path / "data", environ={})
    assert loaded == Settings(data_dir=(tmp_path / "data").resolve(), host="10.0.0.7", port=8123)


def test_postgres_scheme_alias_is_accepted(tmp_path: Path) -> None:
    url = "postgres://armarius@db.example/armarius"
    assert load_settings(tmp_path, environ={"ARMARIUS_DATABASE_URL": url}).database_url == url


# Refusals ---------------------------------------------------------------------------------------


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[server\nport = 1\n")
    error = refusal(tmp_path)
    assert str(path) in error.message
    assert error.details["file"] == str(path)


def test_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / CONFIG_FILE_NAME
    path.write_bytes(b'[server]\nhost = "\xff\xfe"\n')
    error = refusal(tmp_path)
    assert str(path) in error.message


def test_unknown_section_names_the_section_and_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[servr]\nport = 1\n")
    error = refusal(tmp_path)
    assert "servr" in error.message
    assert str(path) in error.message
    assert error.details["key"] == "servr"


def test_known_section_that_is_not_a_table_is_refused(tmp_path: Path) -> None:
    path = write_config(tmp_path, "server = 5\n")
    error = refusal(tmp_path)
    assert "server" in error.message
    assert str(path) in error.message
    assert "Unknown" not in error.message, "server is a known section; the message must not call it unknown"


def test_unknown_key_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[server]\nprot = 8000\n")
    error = refusal(tmp_path)
    assert "server.prot" in error.message
    assert str(path) in error.message
    assert error.details["key"] == "server.prot"


@pytest.mark.parametrize(
    ("section", "line", "key"),
    [
        ("server", 'port = "abc"', "server.port"),
        ("server", "port = 0", "server.port"),
        ("server", "port = 65536", "server.port"),
        ("server", "port = -1", "server.port"),
        ("server", "port = 80.5", "server.port"),
        ("server", "port = true", "server.port"),
        ("server", "host = 42", "server.host"),
        ("server", 'host = "  "', "server.host"),
        ("database", 'url = "mysql://user@host/db"', "database.url"),
        ("database", 'url = "sqlite:///data.db"', "database.url"),
        ("database", "url = 5", "database.url"),
        ("database", 'migrate_url = "http://example.org"', "database.migrate_url"),
    ],
)
def test_wrong_value_in_the_file_names_the_key_and_the_file(
    tmp_path: Path, section: str, line: str, key: str
) -> None:
    path = write_config(tmp_path, f"[{section}]\n{line}\n")
    error = refusal(tmp_path)
    assert key in error.message
    assert str(path) in error.message
    assert error.details["key"] == key


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("ARMARIUS_PORT", "abc", "server.port"),
        ("ARMARIUS_PORT", "0", "server.port"),
        ("ARMARIUS_PORT", "70000", "server.port"),
        ("ARMARIUS_PORT", "-5", "server.port"),
        ("ARMARIUS_PORT", "", "server.port"),
        ("ARMARIUS_HOST", "", "server.host"),
        ("ARMARIUS_DATABASE_URL", "mysql://user@host/db", "database.url"),
        ("ARMARIUS_DATABASE_URL", "/var/lib/armarius.sqlite3", "database.url"),
        ("ARMARIUS_DATABASE_MIGRATE_URL", "sqlite:///x", "database.migrate_url"),
    ],
)
def test_wrong_value_in_the_environment_names_the_variable(
    tmp_path: Path, variable: str, value: str, key: str
) -> None:
    error = refusal(tmp_path, {variable: value})
    assert variable in error.message
    assert error.details["key"] == key


def test_environment_does_not_rescue_a_broken_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[server]\nport = 0\n")
    error = refusal(tmp_path, {"ARMARIUS_PORT": "9000"})
    assert str(path) in error.message


def test_error_message_never_echoes_the_url(tmp_path: Path) -> None:
    """A rejected URL may carry a password: the message names the key, not the value."""
    error = refusal(tmp_path, {"ARMARIUS_DATABASE_URL": "mysql://user:s3cret-pw@host/db"})
    assert "s3cret-pw" not in error.message
    assert "s3cret-pw" not in repr(error.details)


def test_research_config_is_a_path_from_the_file_or_the_environment(tmp_path: Path) -> None:
    (tmp_path / "armarius.toml").write_text('[research]\nconfig = "project.toml"\n', encoding="utf-8")
    assert load_settings(tmp_path, environ={}).research_config == Path("project.toml")
    overridden = load_settings(tmp_path, environ={"ARMARIUS_RESEARCH_CONFIG": "other.toml"})
    assert overridden.research_config == Path("other.toml")
    (tmp_path / "armarius.toml").write_text("[research]\nconfig = 7\n", encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_settings(tmp_path, environ={})
    assert "research.config" in refused.value.message


def test_a_new_data_folder_is_private(tmp_path: Path) -> None:
    from armarius.app import initialize

    settings = Settings(data_dir=tmp_path / "fresh")
    write_settings_file(settings)
    initialize(settings)
    assert (settings.data_dir.stat().st_mode & 0o777) == 0o700


def test_written_settings_file_lists_every_setting_at_its_default(tmp_path: Path) -> None:
    from armarius.config import _KEYS

    settings = Settings(data_dir=tmp_path / "data")
    write_settings_file(settings)
    text = settings.config_file.read_text(encoding="utf-8")
    for key in _KEYS:
        assert f"({key.env})" in text, key.name
    # Uncommenting every default line changes nothing: the comments hold the real defaults.
    uncommented = "\n".join(
        line.removeprefix("# ") if " = " in line and not line.startswith("# Armarius") else line
        for line in text.splitlines()
    )
    settings.config_file.write_text(uncommented, encoding="utf-8")
    assert load_settings(settings.data_dir, environ={}) == Settings(data_dir=settings.data_dir.resolve())


@pytest.mark.parametrize(("name", "value", "field", "expected"), [
    ("ARMARIUS_KEEP_ALIVE_SECONDS", "120", "keep_alive_seconds", 120),
    ("ARMARIUS_REQUEST_THREADS", "4", "request_threads", 4),
    ("ARMARIUS_SQLITE_SYNCHRONOUS", "FULL", "sqlite_synchronous", "full"),
])
def test_durability_and_connection_settings(tmp_path: Path, name: str, value: str, field: str,
                                            expected: object) -> None:
    assert getattr(load_settings(tmp_path, environ={name: value}), field) == expected


@pytest.mark.parametrize(("name", "value"), [
    ("ARMARIUS_KEEP_ALIVE_SECONDS", "0"), ("ARMARIUS_KEEP_ALIVE_SECONDS", "3601"),
    ("ARMARIUS_REQUEST_THREADS", "0"), ("ARMARIUS_REQUEST_THREADS", "1025"),
    ("ARMARIUS_SQLITE_SYNCHRONOUS", "off"), ("ARMARIUS_SQLITE_SYNCHRONOUS", "extra"),
])
def test_durability_and_connection_settings_refuse_bad_values(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(tmp_path, environ={name: value})
    assert name in refused.value.message


def _in_fresh_python(code: str, **env: str) -> str:
    clean = {name: value for name, value in os.environ.items() if name != "OPENBLAS_NUM_THREADS"}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                          check=True, timeout=120).stdout.strip()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc (Linux)")
def test_the_entry_point_runs_numpy_on_one_blas_thread() -> None:
    """The CLI sets the BLAS library to one thread before numpy loads, so a server's process has no pool of
    spinning BLAS threads; an operator's own setting is kept."""
    count = "import os, numpy; print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))"
    main = ("import armarius.cli.main as m; m.cli = lambda **_: exec(" + repr(count) + "); m.main()")
    assert _in_fresh_python(main) == "1 1"
    assert _in_fresh_python(main, OPENBLAS_NUM_THREADS="2").split()[0] == "2"
    assert _in_fresh_python(count, OPENBLAS_NUM_THREADS="1") == "1 1"
