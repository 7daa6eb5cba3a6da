"""A new administrator's PostgreSQL set-up through the real `armarius` command, each run a process of its own:
database URLs (never printed with their password, a malformed one refused at once), who `init` migrates as,
what `init` makes again, what `doctor` and `serve` refuse, and the data folder `init` is given.

The database URLs here are read by the settings before any connection is tried, so the tests of malformed
URLs need no PostgreSQL; the others use the deployment's roles (tests.store.test_postgres_setup).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from armarius.config import database_url_problem, database_url_secrets, load_settings, masked_database_url
from armarius.errors import ConfigError
from tests.store.test_postgres_setup import Deployed, deploy

ARMARIUS = [sys.executable, "-m", "armarius"]
#: A refused URL is refused as the settings load: well before PostgreSQL's connection pool would give up (10 s).
AT_ONCE_SECONDS = 6


def environment(**variables: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("ARMARIUS_")}
    return env | {"ARMARIUS_MEMORY_EMBEDDINGS": "off"} | variables


def armarius(data_dir: Path, *args: str, env: dict[str, str], timeout: float = 120
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ARMARIUS, "--data-dir", str(data_dir), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False, stdin=subprocess.DEVNULL, start_new_session=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(data_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`armarius serve` that is expected to refuse to start (it is stopped after a while if it does start)."""
    try:
        return armarius(data_dir, "serve", "--port", str(free_port()), env=env, timeout=30)
    except subprocess.TimeoutExpired as expired:  # it started: the test fails on what it printed
        return subprocess.CompletedProcess(expired.cmd, -1, str(expired.stdout or ""), str(expired.stderr or ""))


# Passwords in URLs -------------------------------------------------------------------------------------


#: The password's two halves around a character that must be percent-encoded in a URL (or a stray %).
@pytest.mark.parametrize("between", ["/", "@", " ", "%zz", "#/@"], ids=["slash", "at", "space", "percent", "mixed"])
@pytest.mark.parametrize("setting", ["ARMARIUS_DATABASE_URL", "ARMARIUS_DATABASE_MIGRATE_URL"])
def test_a_malformed_url_is_refused_at_once_naming_its_setting_and_never_echoed(
        tmp_path: Path, between: str, setting: str) -> None:
    left, right = f"Lf{secrets.token_hex(5)}", f"Rt{secrets.token_hex(5)}"
    good = "postgresql://armarius_app_na@127.0.0.1:1/armarius_na"
    bad = f"postgresql://armarius_app_na:{left}{between}{right}@127.0.0.1:1/armarius_na"
    env = environment(ARMARIUS_DATABASE_URL=good, ARMARIUS_DATABASE_MIGRATE_URL=good) | {setting: bad}
    data_dir = tmp_path / "data"
    for command in (["doctor"], ["init"], ["serve"], ["--json", "workspace", "list"]):
        started = time.monotonic()
        result = serve(data_dir, env) if command[0] == "serve" else armarius(data_dir, *command, env=env)
        took = time.monotonic() - started
        shown = result.stdout + result.stderr
        for secret in (left, right, f"{left}{between}{right}"):
            assert secret not in shown, (command, shown)
        assert f"Setting environment variable {setting} is not a PostgreSQL URL that can be used as written" in shown
        assert "psycopg" not in shown
        assert "Traceback" not in shown
        assert took < AT_ONCE_SECONDS, (command, took)
        if command[0] == "doctor":
            assert result.returncode == 1
            assert "PROBLEM  configuration: Setting environment variable" in result.stdout
        else:
            assert result.returncode == 7, (command, shown)
            assert "config_invalid" in result.stderr
    assert not data_dir.exists()  # refused before anything was made


def test_doctor_shows_a_percent_encoded_password_masked_and_the_right_host(tmp_path: Path) -> None:
    """The reported case: a password with a / (here as it must be written, %2F), and a server that does not answer."""
    secret = f"pa/ss{secrets.token_hex(5)}"
    url = f"postgresql://armarius_app_na:{quote(secret, safe='')}@127.0.0.1:1/armarius_na"
    result = armarius(tmp_path / "data", "--json", "doctor", env=environment(ARMARIUS_DATABASE_URL=url))
    assert result.returncode == 1
    assert secret not in result.stdout + result.stderr
    assert quote(secret, safe="") not in result.stdout + result.stderr
    database = {check["name"]: check for check in json.loads(result.stdout)["checks"]}["database"]
    assert database["detail"] == ("PostgreSQL postgresql://armarius_app_na:***@127.0.0.1:1/armarius_na cannot be "
                                  "reached or refused the login")
    assert "`pg_isready -h 127.0.0.1 -p 1`" in database["fix"]


_REASONS = {
    "it has an @ or a / that libpq would not read as meant: write @ as %40 and / as %2F in the user name and the "
    "password (an @ in the host or the database name as %40 too)",
    "it has a space, which libpq refuses: write a space as %20 (in a password too)",
    "it has a % that does not start a percent-encoded character (write % itself as %25; %00 is not allowed)",
    "its query (after ?) has a parameter that libpq does not know or that is not written key=value",
    "its host part is malformed",
    "libpq cannot read it",
    "its port must be a number from 1 to 65535",
    "it has a NUL character",
    "it is not UTF-8 text once its percent-encoded characters are decoded",
}


@settings(max_examples=400, deadline=None)
@given(password=st.text(max_size=24), encoded=st.booleans())
@example(password="pa/ssWORD", encoded=False)
@example(password="pa@ssWORD", encoded=False)
@example(password="app Secret", encoded=False)
@example(password="pa%zzWORD", encoded=False)
@example(password="p?w#x:y[z]&password=q", encoded=False)
@example(password="%41%C3%A9", encoded=False)
@example(password="", encoded=True)
def test_any_password_is_masked_or_its_url_refused(password: str, encoded: bool) -> None:
    """Whatever the password's characters, written as they are or percent-encoded: either libpq reads the URL with
    the password in the password alone, and the URL is shown with *** for it; or the URL is refused, with a reason
    that repeats nothing of it, and shown not at all."""
    written = quote(password, safe="") if encoded else password
    url = f"postgresql://app:{written}@db.internal:5432/armarius?sslmode=require"
    problem = database_url_problem(url)
    environ = {"ARMARIUS_DATABASE_URL": url}
    if problem is None:
        info = psycopg.conninfo.conninfo_to_dict(url)
        assert (info["user"], info["host"], info["port"], info["dbname"]) == ("app", "db.internal", "5432", "armarius")
        if encoded:
            assert info.get("password", "") == password
        assert masked_database_url(url) == "postgresql://app:***@db.internal:5432/armarius?sslmode=require"
        assert {written, str(info.get("password", ""))} - {""} <= database_url_secrets(url)
        assert load_settings(Path("unused"), environ).database_url == url
    else:
        assert problem in _REASONS
        assert not encoded or "\x00" in password  # percent-encoded, only a NUL is refused
        assert masked_database_url(url) == "(a PostgreSQL URL that cannot be used as written)"
        with pytest.raises(ConfigError) as caught:
            load_settings(Path("unused"), environ)
        assert caught.value.message == (
            "Setting environment variable ARMARIUS_DATABASE_URL is not a PostgreSQL URL that can be used as "
            f"written: {problem}. The value is not repeated here, as it may hold a password "
            "(docs/configuration.md says how to write one).")
        assert caught.value.details == {"key": "database.url"}


# init: who migrates -------------------------------------------------------------------------------------


@pytest.fixture
def deployed(tmp_path: Path) -> Iterator[Deployed]:
    yield from deploy(tmp_path)


def urls(deployed: Deployed, *, app: str | None = None, migrate: str | None = None) -> dict[str, str]:
    postgres = deployed.postgres
    variables = {"ARMARIUS_DATABASE_URL": postgres.url(app or postgres.app)}
    if migrate is not None:
        variables["ARMARIUS_DATABASE_MIGRATE_URL"] = postgres.url(migrate)
    return environment(**variables)


def database_state(deployed: Deployed) -> list[Any]:
    return deployed.in_database(
        "SELECT 'version', version::text FROM schema_migrations UNION ALL "
        "SELECT 'acl', relname || coalesce(relacl::text, '') FROM pg_class WHERE relnamespace = 'public'::regnamespace "
        "ORDER BY 1, 2")


@pytest.mark.postgres
@pytest.mark.parametrize("migrate", [None, "app"], ids=["no-migrate-url", "migrate-url-of-the-app-role"])
def test_init_without_the_owners_url_is_refused_before_anything_is_done(
        deployed: Deployed, tmp_path: Path, migrate: str | None) -> None:
    data_dir, before = tmp_path / "new", database_state(deployed)
    result = armarius(data_dir, "init", env=urls(deployed, migrate=None if migrate is None else deployed.postgres.app))
    assert result.returncode == 7, result.stderr
    assert result.stderr.startswith(f"error [config_invalid]: These settings would migrate as {deployed.postgres.app}, "
                                    "the server's role of database.url. Migrations need the owner's URL "
                                    "(ARMARIUS_DATABASE_MIGRATE_URL")
    assert "Traceback" not in result.stderr
    assert "internal" not in result.stderr
    assert not data_dir.exists()
    assert database_state(deployed) == before


@pytest.mark.postgres
def test_init_with_a_migrate_url_of_a_role_that_owns_nothing_is_refused(deployed: Deployed, tmp_path: Path) -> None:
    backup = deployed.postgres.backup  # a role that reads everything and owns nothing
    before = database_state(deployed)
    result = armarius(tmp_path / "new", "--json", "init", env=urls(deployed, migrate=backup))
    assert result.returncode == 7, result.stderr
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "config_invalid"
    assert error["details"] == {"key": "database.migrate_url"}
    assert error["message"].startswith(f"The Armarius tables belong to {deployed.postgres.owner}, and {backup}, the "
                                       "role of the migrate URL, is not it.")
    assert not (tmp_path / "new").exists()
    assert database_state(deployed) == before


# doctor, serve and init on a damaged installation ---------------------------------------------------------


def doctor(deployed: Deployed) -> tuple[int, dict[str, dict[str, Any]]]:
    result = armarius(deployed.settings.data_dir, "--json", "doctor",
                      env=urls(deployed, migrate=deployed.postgres.owner))
    return result.returncode, {check["name"]: check for check in json.loads(result.stdout)["checks"]}


def init(deployed: Deployed) -> dict[str, Any]:
    result = armarius(deployed.settings.data_dir, "--json", "init", env=urls(deployed, migrate=deployed.postgres.owner))
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.mark.postgres
def test_a_role_that_lost_a_grant_is_refused_by_doctor_and_serve_and_granted_again_by_init(deployed: Deployed) -> None:
    app = deployed.postgres.app
    deployed.as_owner(f'REVOKE INSERT ON entries FROM "{app}"')
    code, checks = doctor(deployed)
    assert code == 1
    assert [name for name, check in checks.items() if not check["ok"]] == ["database role"]
    statement = f'GRANT INSERT ON TABLE entries TO "{app}";'
    assert checks["database role"]["detail"] == (f"{app}: The server's PostgreSQL role lacks privileges the migrations "
                                                 "grant it (INSERT on table entries): the first statement that needs "
                                                 "one would fail.")
    assert checks["database role"]["fix"].endswith(f"or as the owner: {statement}")
    refused = serve(deployed.settings.data_dir, urls(deployed))
    assert refused.returncode == 7, refused.stderr
    assert statement in refused.stderr
    assert "Serving on" not in refused.stderr
    assert init(deployed)["repaired"] == [f"granted {app} what it lacked ({statement})"]
    assert all(check["ok"] for check in doctor(deployed)[1].values())


@pytest.mark.postgres
def test_a_member_of_the_owner_is_refused_and_entry_search_is_never_said_to_need_row_level_security(
        deployed: Deployed) -> None:
    owner, app = deployed.postgres.owner, deployed.postgres.app
    deployed.in_database(f'GRANT "{owner}" TO "{app}"')
    code, checks = doctor(deployed)
    assert code == 1
    assert [name for name, check in checks.items() if not check["ok"]] == ["database role"]
    assert checks["database role"]["fix"] == f'As a superuser: REVOKE "{owner}" FROM "{app}";'
    assert "entry_search" not in checks["row-level security"].get("fix", "")
    refused = serve(deployed.settings.data_dir, urls(deployed))
    assert refused.returncode == 7, refused.stderr
    assert f'REVOKE "{owner}" FROM "{app}";' in refused.stderr
    # The owner's own URL as the server's: refused too.
    as_owner = serve(deployed.settings.data_dir, urls(deployed, app=owner))
    assert as_owner.returncode == 7, as_owner.stderr
    assert "owns the Armarius tables, so it may lift their row-level security" in as_owner.stderr


@pytest.mark.postgres
def test_a_dropped_text_search_configuration_is_found_by_doctor_and_made_again_by_init(deployed: Deployed) -> None:
    deployed.as_owner("DROP EXTENSION unaccent CASCADE")
    code, checks = doctor(deployed)
    assert code == 1
    assert [name for name, check in checks.items() if not check["ok"]] == ["database objects"]
    assert checks["database objects"]["detail"] == ("missing: the text search configuration armarius_words; recall "
                                                    "and writes that need them fail")
    assert "init` (with database.migrate_url: the owner's) makes the text search configuration armarius_words " \
           "again" in checks["database objects"]["fix"]
    assert init(deployed)["repaired"] == [
        "made the text search configuration armarius_words again as migration 21 makes it, and the search vectors "
        "with it"]
    code, checks = doctor(deployed)
    assert code == 0, checks
    assert init(deployed)["repaired"] == []


# The data folder --------------------------------------------------------------------------------------------


def test_init_makes_a_data_folder_it_was_given_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "srv" / "armarius"
    data_dir.mkdir(parents=True, mode=0o755)
    data_dir.chmod(0o755)  # as `install -d` or a plain mkdir under umask 022 makes it
    result = armarius(data_dir, "init", env=environment())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Data folder {data_dir}: mode 755 tightened to 700 (group and others had access; "
                                    "it holds the settings and the audit key).\n")
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    again = armarius(data_dir, "--json", "init", env=environment())
    assert json.loads(again.stdout)["data_dir_mode_was"] is None
    report = armarius(data_dir, "--json", "doctor", env=environment())
    assert report.returncode == 0, report.stdout
