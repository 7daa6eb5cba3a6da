"""`armarius doctor` through the real CLI, on both engines: each problem named with its fix, and nothing changed."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

from armarius.app import Armarius, initialize, open_app
from armarius.audit.keys import rotate_key_file
from armarius.auth.permissions import Kind, Role
from armarius.cli.context import armarius_command
from armarius.config import Settings, masked_database_url
from armarius.memory.embeddings import WordLlamaEmbedder
from armarius.memory.service import RememberRequest
from armarius.store.schema import latest_version
from tests.audit.tamper import append_forged, forged_event
from tests.cli.test_cli import Cli
from tests.conftest import PG_ADMIN_URL, PostgresDatabase, service_missing
from tests.helpers import OPERATOR, OwnerSQL, Team, make_team
from tests.research.repos import Repo, build_repo, source_entry, write_config
from tests.research.world import (
    PASSWORD_VARIABLE,
    build_sqlite_world,
    database_entry,
    mariadb_world,
    password_environ,
)

RESEARCH = "research.toml"
MISSING_COMMIT = "1234567890abcdef1234567890abcdef12345678"
URL_SECRET = "doctor-url-s3cret"
ADMIN_PASSWORD = "doctor-admin correct horse"
MODEL = WordLlamaEmbedder().model_id
OFF = 'off (memory.embeddings = "off"): recall is by words only; no vectors to check'


def doctor(settings: Settings, **env: str) -> tuple[int, dict[str, Any]]:
    """Run `armarius --json doctor`; its exit code and its report."""
    run = Cli(settings)
    run.env = run.env | env
    result = run("--json", "doctor")
    assert result.stdout, result.stderr
    assert URL_SECRET not in result.stdout + result.stderr
    return result.exit_code, json.loads(result.stdout)


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert report["ok"] == all(check["ok"] for check in report["checks"])
    return {check["name"]: check for check in report["checks"]}


def problems(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: check for name, check in checks(report).items() if not check["ok"]}


def state(settings: Settings) -> dict[str, Any]:
    """What the doctor must leave as it was: the data folder's files, modes and bytes, and the database."""
    folder = settings.data_dir
    files = {str(path.relative_to(folder)): (stat.S_IMODE(path.stat().st_mode),
                                             hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None)
             for path in sorted(folder.rglob("*"))}
    with OwnerSQL(settings) as owner:
        rows = [*owner.rows("SELECT version, name FROM schema_migrations ORDER BY version"),
                *owner.rows("SELECT workspace_id, seq, hash, mac FROM audit_events ORDER BY workspace_id, seq"),
                *owner.rows("SELECT id, name FROM workspaces ORDER BY id"),
                *owner.rows("SELECT id, name FROM vector_models ORDER BY id"),
                *owner.rows("SELECT entry_id, seq, revision, model FROM entry_vectors ORDER BY entry_id"),
                *owner.rows("SELECT unit_id, seq, revision, model FROM unit_vectors ORDER BY unit_id")]
    return {"folder": stat.S_IMODE(folder.stat().st_mode), "files": files, "rows": rows}


@pytest.fixture
def store(settings: Settings) -> Settings:
    """A store with a workspace and a principal in it, so that the audit log has events in two chains."""
    run = Cli(settings)
    assert run("workspace", "add", "alpha").exit_code == 0
    assert run("principal", "add", "bot", "--kind", "agent", "--workspace", "alpha", "--role", "editor").exit_code == 0
    return settings


def with_research(settings: Settings, sources: Sequence[dict[str, Any]] = (),
                  databases: Sequence[dict[str, Any]] = ()) -> Settings:
    write_config(settings.data_dir / RESEARCH, sources, databases=databases)
    return replace(settings, research_config=Path(RESEARCH))


def research_env(**env: str) -> dict[str, str]:
    return {"ARMARIUS_RESEARCH_CONFIG": RESEARCH, **env}


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return build_repo(tmp_path / "repo")


# A healthy installation -------------------------------------------------------------------------------


def test_a_healthy_store_passes_every_check(store: Settings, repo: Repo, tmp_path: Path) -> None:
    world = build_sqlite_world(tmp_path / "world.sqlite")
    settings = with_research(store, [source_entry(repo)], [database_entry(world)])
    before, repo_before = state(settings), repo.state()
    env = research_env()
    if settings.database_url:  # a password in the URL, which the trusting test server does not ask for
        env["ARMARIUS_DATABASE_URL"] = settings.database_url.replace("@", f":{URL_SECRET}@", 1)
    code, report = doctor(settings, **env)
    assert code == 0, report
    assert report["ok"] is True
    found = checks(report)
    expected = ["configuration", "data folder", "audit key file", "database",
                *(["database role", "row-level security", "database objects"] if settings.database_url else []),
                "research source app", "research database world", "audit log", "recall by meaning"]
    assert list(found) == expected
    assert all("fix" not in check for check in found.values())
    assert f"schema at version {latest_version('postgresql' if settings.database_url else 'sqlite')}" in (
        found["database"]["detail"])
    assert repo.pin[:12] in found["research source app"]["detail"]
    assert found["audit log"]["detail"].endswith(" events in 2 chains verify")
    assert found["recall by meaning"]["detail"] == (f"every entry and active evidence unit of 1 workspace has a "
                                                    f"vector of {MODEL}")
    if settings.database_url:
        assert found["database"]["detail"].startswith("PostgreSQL postgresql://")
        assert ":***@127.0.0.1" in found["database"]["detail"]
        assert URL_SECRET not in json.dumps(report)
    assert state(settings) == before
    assert repo.state() == repo_before


def test_the_text_report_has_one_line_per_check(store: Settings) -> None:
    run = Cli(store)
    result = run("doctor")
    assert result.exit_code == 0
    *lines, summary = result.stdout.splitlines()
    assert all(line.startswith("ok ") for line in lines)
    assert summary == f"All {len(lines)} checks passed."


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://app:pw@db.internal:5432/armarius", "postgresql://app:***@db.internal:5432/armarius"),
    ("postgresql://app:p%40ss%2Fw@db/armarius?sslmode=require", "postgresql://app:***@db/armarius?sslmode=require"),
    ("postgresql://app:p?ss#w:@db/armarius", "postgresql://app:***@db/armarius"),
    ("postgres://app@db/armarius?password=pw&sslmode=verify-full",
     "postgres://app@db/armarius?password=***&sslmode=verify-full"),
    ("postgresql://app@db/armarius?sslpassword=key-pass", "postgresql://app@db/armarius?sslpassword=***"),
    ("postgresql://db/armarius", "postgresql://db/armarius"),
    # libpq reads the rest of an unencoded password as the host, the port or the database: never shown
    ("postgresql://app:p%40ss@w@db/armarius?sslmode=require", "(a PostgreSQL URL that cannot be used as written)"),
    ("postgresql://app:pa/ssWORD@127.0.0.1/armarius", "(a PostgreSQL URL that cannot be used as written)"),
])
def test_masked_urls_keep_everything_but_the_password(url: str, shown: str) -> None:
    assert masked_database_url(url) == shown


# Problems ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "path", "mode", "wanted"), [
    ("data folder", "", 0o755, "chmod 700"),
    ("audit key file", "audit.key", 0o644, "chmod 600"),
])
def test_a_data_folder_or_key_others_can_read(store: Settings, name: str, path: str, mode: int, wanted: str) -> None:
    target = store.data_dir / path
    target.chmod(mode)
    before = state(store)
    code, report = doctor(store)
    assert code == 1
    assert list(problems(report)) == [name]
    assert problems(report)[name]["detail"] == f"{target}: its mode is {mode:o}: group and others have access"
    assert problems(report)[name]["fix"] == f"{wanted} {target}"
    assert state(store) == before
    assert stat.S_IMODE(target.stat().st_mode) == mode


@pytest.mark.parametrize("ahead", [False, True], ids=["behind", "ahead"])
def test_a_schema_behind_or_ahead_of_this_code(store: Settings, ahead: bool) -> None:
    latest = latest_version("postgresql" if store.database_url else "sqlite")
    with OwnerSQL(store) as owner:
        if ahead:
            owner.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 'now')",
                          (latest + 1,))
        else:
            owner.execute("DELETE FROM schema_migrations WHERE version = ?", (latest,))
    before = state(store)
    code, report = doctor(store)
    assert code == 1
    found = problems(report)
    assert list(found) == ["database", *(["database objects"] if store.database_url else []), "audit log",
                           "recall by meaning"]
    assert found["audit log"]["detail"] == "not checked: the database check failed"
    assert found["recall by meaning"]["detail"] == "not checked: the database check failed"
    if store.database_url:  # a schema of another version has other objects
        assert found["database objects"]["detail"] == "not checked: the database check failed"
    if ahead:
        assert f"at version {latest + 1}, newer than this Armarius ({latest})" in found["database"]["detail"]
        assert found["database"]["fix"].startswith("Upgrade Armarius")
    else:
        assert f"lacks migration {latest}" in found["database"]["detail"]
        assert found["database"]["fix"].endswith(f" --data-dir {store.data_dir} init` (with the same database "
                                                 "settings) migrates it.")
    assert state(store) == before


def test_a_folder_without_a_database_is_left_as_it_was(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    settings.data_dir.mkdir(mode=0o700)
    code, report = doctor(settings)
    assert code == 1
    assert list(problems(report)) == ["audit key file", "database", "audit log", "recall by meaning"]
    assert problems(report)["database"]["detail"] == f"there is no SQLite file {settings.sqlite_path}"
    assert list(settings.data_dir.iterdir()) == []
    code, report = doctor(settings, ARMARIUS_MEMORY_EMBEDDINGS="off")  # nothing to check: no database needed
    assert list(problems(report)) == ["audit key file", "database", "audit log"]
    assert checks(report)["recall by meaning"]["detail"] == OFF
    settings.sqlite_path.touch()  # a fresh, empty SQLite file: at version 0
    code, report = doctor(settings)
    assert code == 1
    assert "lacks migration 1, " in problems(report)["database"]["detail"]
    assert sorted(path.name for path in settings.data_dir.iterdir()) == ["armarius.sqlite3"]
    assert settings.sqlite_path.stat().st_size == 0


def test_a_pinned_commit_or_repository_that_does_not_exist(store: Settings, repo: Repo, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    world = build_sqlite_world(tmp_path / "world.sqlite")
    settings = with_research(store, [source_entry(repo), {**source_entry(repo, "moved"), "commit": MISSING_COMMIT},
                                     {**source_entry(repo, "gone"), "repository": str(gone)}], [database_entry(world)])
    before, repo_before = state(settings), repo.state()
    code, report = doctor(settings, **research_env())
    assert code == 1
    found = checks(report)
    assert found["research source app"]["ok"] is True
    # Sources that are not there are outages, not a bad file: it loads, so its databases are checked too.
    assert list(problems(report)) == ["research source moved", "research source gone"]
    moved = found["research source moved"]
    assert moved["detail"] == f"the pinned commit {MISSING_COMMIT} is not in {repo.path}"
    assert moved["fix"].startswith(f"git -C {repo.path} fetch origin {MISSING_COMMIT} ")
    assert f"git -C {repo.path} rev-parse HEAD" in moved["fix"]
    assert found["research source gone"]["fix"].startswith(f"git clone https://git.example.invalid/gone.git {gone}")
    assert found["research database world"]["ok"] is True
    assert state(settings) == before
    assert repo.state() == repo_before
    assert not gone.exists()


def test_a_pin_naming_a_tree_is_a_mistake_of_the_file_not_a_fetch(store: Settings, repo: Repo, tmp_path: Path
                                                                    ) -> None:
    tree = repo.git("rev-parse", f"{repo.pin}^{{tree}}").decode().strip()
    world = build_sqlite_world(tmp_path / "world.sqlite")
    settings = with_research(store, [{**source_entry(repo), "commit": tree}], [database_entry(world)])
    code, report = doctor(settings, **research_env())
    assert code == 1
    assert list(problems(report)) == ["research source app", "research databases"]
    found = checks(report)["research source app"]
    assert found["detail"] == f"the pin {tree} names a tree in {repo.path}, not a commit"
    assert found["fix"] == (f"Pin a commit in {settings.data_dir / RESEARCH}: `git -C {repo.path} rev-parse HEAD` "
                            "prints the one checked out.")
    assert checks(report)["research databases"]["detail"] == "not checked: the research source check failed"


def test_an_unreachable_research_database(store: Settings, tmp_path: Path) -> None:
    password = "doctor-research-s3cret"
    down = {"name": "down", "dialect": "mariadb", "host": "127.0.0.1", "port": 1, "database": "world",
            "user": "reader", "password_env": PASSWORD_VARIABLE, "snapshot": "down-1", "tables": ["creature_template"]}
    world = build_sqlite_world(tmp_path / "world.sqlite")
    settings = with_research(store, databases=[down, database_entry(world)])
    before = state(settings)
    run = Cli(settings)
    run.env = run.env | research_env(**{PASSWORD_VARIABLE: password})
    result = run("--json", "doctor")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert checks(report)["research database world"]["ok"] is True
    assert list(problems(report)) == ["research database down"]
    problem = problems(report)["research database down"]
    assert problem["detail"] == ("mariadb reader@127.0.0.1:1/world: The database 'down' cannot be reached or refused "
                                 "the login.")
    assert problem["fix"].endswith("`mariadb -h 127.0.0.1 -P 1 -u reader -p world -e 'SELECT 1'`.")
    assert password not in result.stdout + result.stderr
    assert state(settings) == before


@pytest.mark.mariadb
def test_a_research_database_answers_with_its_read_only_account_only(store: Settings) -> None:
    try:
        world = mariadb_world()
        server = world.__enter__()
    except pymysql.err.OperationalError as error:
        service_missing("MariaDB", error)
    try:
        settings = with_research(store, databases=[database_entry(server)])
        code, report = doctor(settings, **research_env(**password_environ(server)))
        assert code == 0, report
        assert checks(report)["research database world"]["detail"] == (
            f"mariadb {server.reader_user}@{server.host}:{server.port}/{server.database} answers")
        wrong = "wrong-" + secrets.token_hex(8)
        run = Cli(settings)
        run.env = run.env | research_env(**{PASSWORD_VARIABLE: wrong})
        result = run("doctor")
        assert result.exit_code == 1
        assert f"PROBLEM  research database world: mariadb {server.reader_user}@" in result.stdout
        for secret in (wrong, server.reader_password or "?"):
            assert secret not in result.stdout + result.stderr
    finally:
        world.__exit__(None, None, None)


def test_a_tampered_audit_event(store: Settings) -> None:
    with OwnerSQL(store) as owner:
        append_forged(owner, 0, forged_event())
    before = state(store)
    code, report = doctor(store)
    assert code == 1
    assert list(problems(report)) == ["audit log"]
    problem = problems(report)["audit log"]
    assert problem["detail"].startswith("1 finding; the first, in chain 0 at event ")
    assert f"--data-dir {store.data_dir} audit verify` lists every finding" in problem["fix"]
    assert state(store) == before


def test_events_signed_by_a_key_the_key_file_lacks_name_the_key_file_first(store: Settings) -> None:
    """The key file put back from a copy older than a rotation: the database is not the culprit, and the fix said
    only to restore the database from a backup."""
    older = store.audit_key_path.read_bytes()
    rotate_key_file(store.audit_key_path)
    application = open_app(store)
    try:
        make_team(application, workspace="rotated")  # events signed by the new key
    finally:
        application.close()
    store.audit_key_path.write_bytes(older)
    code, report = doctor(store)
    assert code == 1
    problem = problems(report)["audit log"]
    assert "which is not in the audit keyring" in problem["detail"]
    assert f"If {store.audit_key_path} (or ARMARIUS_AUDIT_KEY) was replaced by an older or another copy, put the " \
           "current one back first" in problem["fix"]


def test_a_broken_settings_file_is_named_not_a_traceback(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    settings.data_dir.mkdir(mode=0o700)
    settings.config_file.write_text("[server\nport = 1\n", encoding="utf-8")
    run = Cli(settings)
    result = run("doctor")
    assert result.exit_code == 1
    assert result.stdout.startswith(f"PROBLEM  configuration: The settings file {settings.config_file} is not valid "
                                    "TOML")
    assert f"fix: Correct {settings.config_file} (docs/configuration.md" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    code, report = doctor(settings)
    assert (code, list(problems(report)), len(report["checks"])) == (1, ["configuration"], 1)


# Recall by meaning ------------------------------------------------------------------------------------


@contextmanager
def embeddings_off(settings: Settings) -> Iterator[Armarius]:
    """The application as a server with memory.embeddings = "off" runs it: what it writes gets no vector."""
    application = open_app(replace(settings, memory_embeddings="off"))
    try:
        yield application
    finally:
        application.close()


def activate_unit(app: Armarius, team: Team) -> None:
    """An active evidence unit in the team's workspace (a human edits and reviews it, an admin activates it)."""
    admin = f"{team.workspace}-admin"
    app.directory.add_principal(admin, Kind.HUMAN, workspace=team.workspace, role=Role.ADMIN, by=OPERATOR,
                                password=ADMIN_PASSWORD)
    app.evidence.create(team.human, "infra/database-host", "Where the database lives",
                        "The PostgreSQL primary runs on db-7.internal and replicates every minute.\n")
    app.evidence.review(team.human, "infra/database-host", 1)
    app.evidence.activate(app.directory.authenticate_password(admin, ADMIN_PASSWORD, workspace=team.workspace),
                          "infra/database-host", 1)


def run_fix(settings: Settings, check: dict[str, Any]) -> None:
    """Run the command a check's fix names, as printed (between its first two backticks), in a shell's way."""
    command = shlex.split(check["fix"].split("`")[1])
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, **Cli(settings).env})
    assert done.returncode == 0, done.stderr


def test_a_fresh_store_has_nothing_to_embed(settings: Settings) -> None:
    code, report = doctor(settings)
    assert code == 0, report
    assert checks(report)["recall by meaning"] == {
        "name": "recall by meaning", "ok": True,
        "detail": f"there are no workspaces yet: nothing to embed (model {MODEL})"}


def test_entries_written_with_embeddings_off_are_named_until_reindexed(store: Settings) -> None:
    """A store with memory.embeddings off for a while: a new revision of an entry embedded before, new entries
    and an activated unit get no vector of the model, and the doctor names them with the reindex that embeds
    them; after the reindex it is content. With embeddings off there is nothing to check."""
    on = open_app(store)
    try:
        beta = make_team(on, "beta")
        on.memory.remember(beta.agent, RememberRequest("ops/db-host", "Database host",
                                                       "The PostgreSQL primary runs on db-7.internal."))
    finally:
        on.close()
    with embeddings_off(store) as off:
        off.memory.remember(beta.agent, RememberRequest("ops/db-host", "Database host",
                                                        "The PostgreSQL primary moved to db-9.internal.",
                                                        expected_revision=1))  # its vector is of revision 1
        off.memory.remember(beta.agent, RememberRequest("ops/mail-host", "Mail host",
                                                        "Outgoing mail leaves through smtp-2.internal."))
        off.memory.remember(beta.agent, RememberRequest("team/lunch", "Lunch order",
                                                        "The team orders pizza from Luigi on Fridays, at noon."))
        activate_unit(off, beta)
    before = state(store)
    code, report = doctor(store)
    assert code == 1
    assert list(problems(report)) == ["recall by meaning"]
    problem = problems(report)["recall by meaning"]
    assert problem["detail"] == (f"3 entries and 1 active evidence unit lack a vector of {MODEL} (written while "
                                 "memory.embeddings was off, or by another model): recall by meaning misses them "
                                 "(3 entries and 1 active evidence unit in beta)")
    reindex = f"{armarius_command()} --data-dir {store.data_dir} memory reindex"
    assert problem["fix"] == (f"`{reindex} --workspace beta` embeds them (resumable; the server answers "
                              "meanwhile). Give every server process of this store the same memory.embeddings, or "
                              "what one with it off writes lacks a vector again (docs/memory.md).")
    result = Cli(store)("doctor")  # the text report: the check's line and its fix
    assert result.exit_code == 1
    assert f"PROBLEM  recall by meaning: {problem['detail']}\n{'':8} fix: {problem['fix']}\n" in result.stdout
    assert result.stdout.endswith(f"1 of {len(report['checks'])} checks found a problem.\n")
    code, report = doctor(store, ARMARIUS_MEMORY_EMBEDDINGS="off")
    assert (code, checks(report)["recall by meaning"]) == (0, {"name": "recall by meaning", "ok": True,
                                                               "detail": OFF})
    assert state(store) == before

    with embeddings_off(store) as off:  # another workspace: the fix reindexes every one
        gamma = make_team(off, "gamma")
        off.memory.remember(gamma.agent, RememberRequest("ops/backup", "Backups", "Nightly backups go to tape."))
    code, report = doctor(store)
    assert code == 1
    problem = problems(report)["recall by meaning"]
    assert problem["detail"].startswith(f"4 entries and 1 active evidence unit lack a vector of {MODEL} ")
    assert problem["detail"].endswith("misses them (3 entries and 1 active evidence unit in beta, 1 entry in gamma)")
    assert problem["fix"].startswith(f"`{reindex}` embeds them (resumable;")

    run_fix(store, problem)
    code, report = doctor(store)
    assert code == 0, report
    assert checks(report)["recall by meaning"] == {
        "name": "recall by meaning", "ok": True,
        "detail": f"every entry and active evidence unit of 3 workspaces has a vector of {MODEL}"}


def test_one_text_lacking_and_many_workspaces(store: Settings) -> None:
    """The detail's grammar for one text, and the workspaces beyond the first five counted, not named."""
    with embeddings_off(store) as off:
        teams = [make_team(off, f"team-{number}") for number in range(7)]
        off.memory.remember(teams[0].agent, RememberRequest("ops/backup", "Backups", "Nightly backups go to tape."))
    problem = problems(doctor(store)[1])["recall by meaning"]
    assert problem["detail"] == (f"1 entry lacks a vector of {MODEL} (written while memory.embeddings was off, or "
                                 "by another model): recall by meaning misses it (1 entry in team-0)")
    assert problem["fix"].startswith(f"`{armarius_command()} --data-dir {store.data_dir} memory reindex --workspace "
                                     "team-0` embeds it (resumable;")
    with embeddings_off(store) as off:
        for team in teams[1:]:
            off.memory.remember(team.agent, RememberRequest("ops/backup", "Backups", "Nightly backups go to tape."))
    problem = problems(doctor(store)[1])["recall by meaning"]
    assert problem["detail"].startswith(f"7 entries lack a vector of {MODEL} ")
    assert problem["detail"].endswith("misses them (1 entry in team-0, 1 entry in team-1, 1 entry in team-2, 1 entry "
                                      "in team-3, 1 entry in team-4, the rest in 2 more workspaces)")


CHILD = """
import sys
from armarius.cli.main import cli
try:
    cli(["--data-dir", sys.argv[1], "doctor"])
except SystemExit as exit:
    print(exit.code, "wordllama" in sys.modules, file=sys.stderr)
"""


def test_the_check_does_not_load_the_model(store: Settings) -> None:
    """The model's identity is its package's metadata: the doctor imports no model (its own process)."""
    on = open_app(store)
    try:
        team = make_team(on, "beta")
        on.memory.remember(team.agent, RememberRequest("ops/backup", "Backups", "Nightly backups go to tape."))
    finally:
        on.close()
    done = subprocess.run([sys.executable, "-c", CHILD, str(store.data_dir)], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, **Cli(store).env})
    assert f"ok       recall by meaning: every entry and active evidence unit of 2 workspaces has a vector of " \
           f"{MODEL}\n" in done.stdout
    assert done.stderr.splitlines()[-1] == "0 False", done.stderr


# PostgreSQL: the server role --------------------------------------------------------------------------


@pytest.fixture
def own_role(postgres_database: PostgresDatabase, tmp_path: Path) -> Settings:
    """A migrated database whose login role is its own, so that a test may change the role."""
    settings = Settings(data_dir=tmp_path / "data", database_url=postgres_database.app_url,
                        database_migrate_url=postgres_database.owner_url)
    initialize(settings)
    return settings


def role_attributes(role: str) -> tuple[Any, ...]:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        row = connection.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.postgres
def test_a_runtime_role_with_bypassrls(own_role: Settings, postgres_database: PostgresDatabase) -> None:
    role = postgres_database.app_role
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        connection.execute(f'ALTER ROLE "{role}" BYPASSRLS')
    before = state(own_role)
    code, report = doctor(own_role)
    assert code == 1
    assert list(problems(report)) == ["database role"]
    problem = problems(report)["database role"]
    assert problem["detail"].startswith(f"{role}: The server's PostgreSQL role bypasses row-level security")
    assert f"ALTER ROLE \"{role}\" NOSUPERUSER NOBYPASSRLS;" in problem["fix"]
    assert role_attributes(role) == (False, True)
    assert state(own_role) == before


@pytest.mark.postgres
def test_a_workspace_table_without_forced_row_level_security(own_role: Settings) -> None:
    with OwnerSQL(own_role) as owner:
        owner.execute("ALTER TABLE entries NO FORCE ROW LEVEL SECURITY")
    code, report = doctor(own_role)
    assert code == 1
    assert list(problems(report)) == ["row-level security"]
    problem = problems(report)["row-level security"]
    assert problem["detail"].startswith("not forced on entries:")
    assert problem["fix"].endswith("ALTER TABLE entries ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;")
    with OwnerSQL(own_role) as owner:
        assert owner.rows("SELECT relforcerowsecurity FROM pg_class WHERE relname = 'entries'") == [(False,)]
