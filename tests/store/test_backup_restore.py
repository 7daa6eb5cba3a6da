"""Backups and restores as docs/deployment.md tells an operator to make them, on SQLite and PostgreSQL.

Each test installs Armarius with the real `armarius init`, writes through the services (entries with
revisions, a curation, a draft proposal, and the audit events that go with them), anchors the audit
heads with the real `armarius audit anchor`, backs up with the engine's own tool (SQLite: the
`sqlite3` shell's online `.backup`, while the application is open; PostgreSQL: `pg_dump` in custom
format) together with the settings file and, kept apart, `audit.key`, wipes the installation, restores
it, and checks with the real `armarius audit verify --anchors`. Every command is run as a process of
its own, as the docs print it.

PostgreSQL is set up with the roles docs/deployment.md names: an owner that is no superuser (it
migrates and restores), the server's role, and a backup role that reads everything and writes nothing
(``pg_read_all_data`` and ``BYPASSRLS``: row-level security is forced on the owner too, so the owner
itself cannot dump the tables, which a test here shows).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest

from armarius.app import Armarius, open_app
from armarius.audit import chain as audit
from armarius.config import Settings
from armarius.memory.service import RememberRequest
from tests.conftest import ENGINES, PG_ADMIN_URL, service_missing
from tests.helpers import Team, make_team

DEPLOY_1 = "Deploy with `make release`; the servers stand in Zürich.\n"
DEPLOY_2 = DEPLOY_1 + "Roll back with `make rollback` — never by hand. ✓\n"
STAGING = "Staging mirrors production; read [[ops/deploy]] before touching it.\n"
LATER = "Written after the older backup: only the newer backup holds it.\n"


def run(*command: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def succeed(*command: str | Path, env: dict[str, str] | None = None) -> str:
    result = run(*command, env=env)
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result.stdout


# PostgreSQL as docs/deployment.md sets it up ------------------------------------------------------


_ADMIN = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)


def _url(database: str, user: str) -> str:
    return f"postgresql://{user}@{_ADMIN.get('host', '127.0.0.1')}:{_ADMIN.get('port', 5432)}/{database}"


def admin(*statements: str, database: str | None = None) -> list[tuple[Any, ...]]:
    """Statements as the cluster's superuser (in ``database``, else the admin URL's); the last one's rows."""
    url = PG_ADMIN_URL if database is None else _url(database, str(_ADMIN.get("user", "postgres")))
    rows: list[tuple[Any, ...]] = []
    with psycopg.connect(url, autocommit=True) as connection:
        for statement in statements:
            cursor = connection.execute(statement)
            rows = cursor.fetchall() if cursor.description else []
    return rows


class DeployedPostgres:
    """A database owned by an owner role that is no superuser, the server's role, and a backup role."""

    def __init__(self) -> None:
        suffix = secrets.token_hex(4)
        self.name = f"armarius_bk_{suffix}"
        self.owner, self.app, self.backup = (f"armarius_{role}_{suffix}" for role in ("owner", "app", "backup"))

    def url(self, role: str) -> str:
        return _url(self.name, role)

    @classmethod
    def created(cls) -> DeployedPostgres:
        """A new one, its roles and database made (the test is skipped, or fails in CI, without PostgreSQL)."""
        postgres = cls()
        try:
            postgres.create()
        except psycopg.OperationalError as error:
            service_missing("PostgreSQL", error)
        return postgres

    def create(self) -> None:
        admin(f'CREATE ROLE "{self.owner}" LOGIN', f'CREATE ROLE "{self.app}" LOGIN',
              # docs/deployment.md: a role that reads everything and changes nothing.
              f'CREATE ROLE "{self.backup}" LOGIN BYPASSRLS', f'GRANT pg_read_all_data TO "{self.backup}"')
        self.create_database()

    def create_database(self) -> None:
        admin(f'CREATE DATABASE "{self.name}" OWNER "{self.owner}"')

    def drop_database(self) -> None:
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def drop(self) -> None:
        self.drop_database()
        admin(*(f'DROP ROLE IF EXISTS "{role}"' for role in (self.backup, self.app, self.owner)))

    def security_state(self) -> dict[str, list[tuple[Any, ...]]]:
        """What makes the database safe for the server's role: ownership, grants, row-level security
        (enabled, forced, policies), the owner's functions and the triggers that run as the owner."""
        # Privileges as they take effect: a dump leaves out an ACL that equals the default, so the
        # restored catalogue may say NULL where the original spelled the same privileges out.
        def granted(acl: str, kind: str, owner: str) -> str:
            return (f"array(SELECT format('%s %s %s', grantee::regrole, privilege_type, is_grantable) "
                    f"FROM aclexplode(coalesce({acl}, acldefault('{kind}', {owner}))) ORDER BY 1)::text")

        queries = {
            "relations": "SELECT relname, relkind, relrowsecurity, relforcerowsecurity, relowner::regrole::text, "
                         f"{granted('relacl', 'r', 'relowner')} FROM pg_class "
                         "WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'v') ORDER BY relname",
            "sequences": f"SELECT relname, relowner::regrole::text, {granted('relacl', 's', 'relowner')} "
                         "FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'S' ORDER BY 1",
            "policies": "SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check "
                        "FROM pg_policies WHERE schemaname = 'public' ORDER BY tablename, policyname",
            "functions": "SELECT proname, prosecdef, proowner::regrole::text, coalesce(proconfig::text, ''), "
                         f"{granted('proacl', 'f', 'proowner')} FROM pg_proc "
                         "WHERE pronamespace = 'public'::regnamespace ORDER BY proname",
            "triggers": "SELECT tgrelid::regclass::text, tgname, tgenabled FROM pg_trigger WHERE NOT tgisinternal "
                        "ORDER BY 1, 2",
            "schema": f"SELECT {granted('nspacl', 'n', 'nspowner')} FROM pg_namespace WHERE nspname = 'public'",
        }
        return {name: admin(query, database=self.name) for name, query in queries.items()}


def pg_tool(name: str) -> str:
    """The machine's pg_dump or pg_restore; it must be at least as new as the server."""
    path = shutil.which(name)
    if path is None:
        service_missing(name, FileNotFoundError(f"{name} is not on the PATH"))
    assert path is not None
    found = re.search(r"\(PostgreSQL\) (\d+)", succeed(path, "--version"))
    server = int(admin("SHOW server_version_num")[0][0]) // 10000
    if found is None or int(found.group(1)) < server:
        service_missing(name, RuntimeError(f"{name} is older than the PostgreSQL server ({server})"))
    return path


def sqlite3_shell() -> str:
    path = shutil.which("sqlite3")
    if path is None:
        service_missing("the sqlite3 shell", FileNotFoundError("not on the PATH (Debian: apt install sqlite3)"))
    assert path is not None
    return path


# One installation, its backups and its restores ----------------------------------------------------


@dataclass
class Installation:
    """An operator's view of one installation: its data folder, and for PostgreSQL the URLs in the
    environment of every command."""

    data_dir: Path
    postgres: DeployedPostgres | None

    @property
    def settings(self) -> Settings:
        if self.postgres is None:
            return Settings(data_dir=self.data_dir)
        return Settings(data_dir=self.data_dir, database_url=self.postgres.url(self.postgres.app),
                        database_migrate_url=self.postgres.url(self.postgres.owner))

    def armarius(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        env = {name: value for name, value in os.environ.items() if not name.startswith("ARMARIUS_")}
        if self.postgres is not None:
            env |= {"ARMARIUS_DATABASE_URL": self.postgres.url(self.postgres.app),
                    "ARMARIUS_DATABASE_MIGRATE_URL": self.postgres.url(self.postgres.owner)}
        return run(sys.executable, "-m", "armarius", "--data-dir", self.data_dir, *args, env=env)

    def verify(self, *args: str | Path) -> tuple[int, dict[str, Any]]:
        result = self.armarius("--json", "audit", "verify", *args)
        return result.returncode, json.loads(result.stdout)

    def back_up(self, folder: Path, keys: Path) -> None:
        """The database (online), the settings file, and the audit key into a folder of its own."""
        folder.mkdir(parents=True)
        if self.postgres is None:
            succeed(sqlite3_shell(), self.settings.sqlite_path, f".backup {folder / 'armarius.sqlite3'}")
        else:
            succeed(pg_tool("pg_dump"), "--format=custom", f"--file={folder / 'armarius.dump'}",
                    f"--dbname={self.postgres.url(self.postgres.backup)}")
        succeed("cp", self.data_dir / "armarius.toml", folder)
        keys.mkdir(mode=0o700, parents=True, exist_ok=True)
        succeed("install", "-m", "600", self.data_dir / "audit.key", keys / "audit.key")

    def wipe(self) -> None:
        shutil.rmtree(self.data_dir)
        if self.postgres is not None:
            self.postgres.drop_database()

    def restore(self, folder: Path, keys: Path) -> None:
        """Into an empty data folder and, for PostgreSQL, a new empty database owned by the owner."""
        assert not self.data_dir.exists()
        succeed("install", "-d", "-m", "700", self.data_dir)
        if self.postgres is None:
            succeed("cp", folder / "armarius.sqlite3", self.data_dir / "armarius.sqlite3")
        else:
            self.postgres.create_database()
            succeed(pg_tool("pg_restore"), "--exit-on-error", "--single-transaction",
                    f"--dbname={self.postgres.url(self.postgres.owner)}", folder / "armarius.dump")
        succeed("cp", folder / "armarius.toml", self.data_dir / "armarius.toml")
        succeed("install", "-m", "600", keys / "audit.key", self.data_dir / "audit.key")


@pytest.fixture(params=ENGINES)
def installation(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Installation]:
    """A fresh installation made by the real `armarius init`."""
    postgres = None
    if request.param == "postgresql":
        postgres = DeployedPostgres.created()
    try:
        installed = Installation(tmp_path / "srv" / "armarius", postgres)
        result = installed.armarius("init")
        assert result.returncode == 0, result.stderr
        yield installed
    finally:
        if postgres is not None:
            postgres.drop()


# Content ----------------------------------------------------------------------------------------


def write_content(app: Armarius) -> Team:
    """Entries with revisions, links and tags, a curation, and a draft proposal, through the services."""
    team = make_team(app)
    memory = app.memory
    assert memory.remember(team.agent, RememberRequest("ops/deploy", "Deploying", DEPLOY_1,
                                                       tags=["ops", "release"]))["status"] == "written"
    assert memory.remember(team.agent, RememberRequest("ops/deploy", "Deploying", DEPLOY_2))["revision"] == 2
    assert memory.curate(team.human, "ops/deploy", 2)["changed"] is True
    assert memory.remember(team.agent, RememberRequest("ops/staging", "Staging", STAGING, tags=["ops"]))[
        "status"] == "written"
    app.drafts.propose(team.agent, {"slug": "ops/runbook", "title": "Runbook", "text": "Page the on-call first.\n"})
    return team


def write_more(app: Armarius, team: Team) -> None:
    """Events in the workspace's chain and in the system chain, and a chain of a new workspace."""
    assert app.memory.remember(team.agent, RememberRequest("notes/later", "Later", LATER))["status"] == "written"
    make_team(app, "beta")


def snapshot(app: Armarius, team: Team) -> bytes:
    """Everything a reader gets back, as bytes: every entry with every revision, the proposals, the heads."""
    agent = app.directory.authenticate_token(team.agent_token)
    slugs = [entry["slug"] for entry in app.memory.list_entries(agent, limit=200)["entries"]]
    content = {
        "entries": {slug: {"read": app.memory.read(agent, slug), "revisions": app.memory.revisions(agent, slug)}
                    for slug in slugs},
        "proposals": app.drafts.proposals(agent, status=None),
        "heads": audit.last_events(app.database),
    }
    assert len(slugs) >= 2
    assert content["proposals"]
    return json.dumps(content, ensure_ascii=False, sort_keys=True).encode("utf-8")


def anchor(installation: Installation, anchors: Path) -> list[tuple[int, int]]:
    result = installation.armarius("--json", "audit", "anchor", anchors)
    assert result.returncode == 0, result.stderr
    return [(head["chain"], head["seq"]) for head in json.loads(result.stdout)["heads"]]


# Tests --------------------------------------------------------------------------------------------


def test_a_restored_backup_verifies_against_the_anchors_and_reads_the_same(installation: Installation,
                                                                            tmp_path: Path) -> None:
    anchors, backup, keys = tmp_path / "anchors" / "heads.txt", tmp_path / "backup", tmp_path / "keys"
    anchors.parent.mkdir()
    app = open_app(installation.settings)
    try:
        team = write_content(app)
        write_more(app, team)
        anchored = anchor(installation, anchors)
        assert {chain for chain, _ in anchored} == {audit.SYSTEM_CHAIN, team.agent.workspace_id,
                                                    app.directory.workspace("beta").id}
        installation.back_up(backup, keys)  # online: the application is open, its last writes in the WAL
        before = snapshot(app, team)
        security = installation.postgres.security_state() if installation.postgres else None
    finally:
        app.close()
    if installation.postgres is not None:
        assert security is not None
        forced = {row[0] for row in security["relations"] if row[3]}
        assert {"entries", "entry_revisions", "audit_events", "audit_heads", "draft_proposals"} <= forced
        assert any(f"{installation.postgres.app} INSERT" in row[5] for row in security["relations"])

    installation.wipe()
    installation.restore(backup, keys)

    code, report = installation.verify("--anchors", anchors)
    assert code == 0, report
    assert (report["intact"], report["anchors_checked"], report["events_checked"]) == (
        True, len(anchored), sum(seq for _, seq in anchored))
    text = installation.armarius("audit", "verify", "--anchors", anchors)
    assert (text.returncode, text.stdout.strip().splitlines()[-1]) == (0, "The audit log is intact.")

    app = open_app(installation.settings)  # PostgreSQL: the server's role, which must still pass its checks
    try:
        assert snapshot(app, team) == before
        # The restored store takes new writes, which continue the chains.
        agent = app.directory.authenticate_token(team.agent_token)
        written = app.memory.remember(agent, RememberRequest("ops/staging", "Staging", STAGING + "Restored.\n"))
        assert (written["status"], written["revision"]) == ("written", 2)
        assert [hit["slug"] for hit in app.memory.recall(agent, "Zürich")["results"]] == ["ops/deploy"]
    finally:
        app.close()
    assert installation.verify("--anchors", anchors)[0] == 0
    if installation.postgres is not None:
        assert security is not None
        restored = installation.postgres.security_state()
        for part, rows in security.items():
            assert restored[part] == rows, (part, sorted(set(rows) ^ set(restored[part])))
        # And they act: the server's role sees no workspace's rows unless its transaction names one,
        # and may not delete audit events.
        with psycopg.connect(installation.postgres.url(installation.postgres.app), autocommit=True) as connection:
            assert connection.execute("SELECT count(*) FROM entries").fetchone() == (0,)
            with connection.transaction():
                connection.execute("SELECT set_config('armarius.workspace_id', %s, true)",
                                   (str(team.agent.workspace_id),))
                assert connection.execute("SELECT count(*) FROM entries").fetchone() == (3,)  # deploy, staging, later
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute("DELETE FROM audit_events")


def test_restoring_a_backup_older_than_the_anchors_is_found(installation: Installation, tmp_path: Path) -> None:
    """Anchors are what tell a restore of an older backup (or a truncated log) from the real log: the
    older copy's chains are intact on their own, but the heads anchored since are gone."""
    anchors, older, keys = tmp_path / "anchors" / "heads.txt", tmp_path / "older", tmp_path / "keys"
    anchors.parent.mkdir()
    app = open_app(installation.settings)
    try:
        team = write_content(app)
        installation.back_up(older, keys)
        at_backup = {chain: seq for chain, seq, _ in audit.last_events(app.database)}
        write_more(app, team)
        anchored = anchor(installation, anchors)
    finally:
        app.close()
    assert all(seq > at_backup.get(chain, 0) for chain, seq in anchored), "every chain grew after the backup"

    installation.wipe()
    installation.restore(older, keys)
    assert installation.verify()[0] == 0, "without anchors the older copy looks intact"
    code, report = installation.verify("--anchors", anchors)
    assert code == 1
    assert (report["intact"], report["broken_links"], report["bad_macs"], report["unknown_workspaces"]) == (
        False, [], [], [])
    assert sorted((item["chain"], item["seq"]) for item in report["anchors_not_found"]) == sorted(anchored)
    for item in report["anchors_not_found"]:
        assert f"is gone: event {item['seq']} no longer exists" in item["problem"], item
    text = installation.armarius("audit", "verify", "--anchors", anchors).stdout
    alpha_seq = dict(anchored)[team.agent.workspace_id]
    assert f"ANCHOR NOT FOUND: chain alpha [{team.agent.workspace_id}] at event {alpha_seq}: the head " in text
    assert text.strip().splitlines()[-1].startswith("The audit log FAILED verification")

    app = open_app(installation.settings)
    try:
        agent = app.directory.authenticate_token(team.agent_token)
        slugs = {entry["slug"] for entry in app.memory.list_entries(agent)["entries"]}
    finally:
        app.close()
    assert slugs == {"ops/deploy", "ops/staging"}, "the older copy holds what it held, no more"


@pytest.mark.postgres
def test_the_owner_cannot_dump_tables_whose_row_level_security_it_is_forced_to_obey(tmp_path: Path) -> None:
    """Why docs/deployment.md dumps with a backup role: pg_dump as the owner stops at the first table."""
    postgres = DeployedPostgres.created()
    try:
        installed = Installation(tmp_path / "data", postgres)
        assert installed.armarius("init").returncode == 0
        result = run(pg_tool("pg_dump"), "--format=custom", f"--file={tmp_path / 'owner.dump'}",
                     f"--dbname={postgres.url(postgres.owner)}")
        assert result.returncode != 0
        assert "query would be affected by row-level security policy" in result.stderr
        succeed(pg_tool("pg_dump"), "--format=custom", f"--file={tmp_path / 'backup.dump'}",
                f"--dbname={postgres.url(postgres.backup)}")
        # The backup role reads everything but may change nothing.
        with (psycopg.connect(postgres.url(postgres.backup), autocommit=True) as connection,
              pytest.raises(psycopg.errors.InsufficientPrivilege)):
            connection.execute("DELETE FROM audit_events")
    finally:
        postgres.drop()
