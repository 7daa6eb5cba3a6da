"""Migration 0007 on a database written by the previous version (schema 6), on SQLite and PostgreSQL.

The old approvals table is filled by hand as version 6 left it: a live approval already collected
(its sealed copy deleted), one never collected, one used, and two approvals of files. After the
migration every approval keeps its outcome, learns its slug and, where the audit log says so, when
it was collected; the outcome constraint admits ``superseded``; the drafts still reference their
approvals; and a human can approve again the proposal whose token the old version had handed over
for good. On PostgreSQL the migrations run as an owner that is not a superuser, so the policies with
FORCE apply to it and the migration's backfill has to lift them.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from armarius.app import initialize, open_app
from armarius.audit.chain import GENESIS_HASH, event_hash
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.drafts import handoff
from armarius.store import schema
from tests.conftest import ENGINES, PG_ADMIN_URL, service_missing
from tests.helpers import OPERATOR

OLD = 6
AT = "2001-01-01T00:00:00.000000Z"
LATER = "2099-01-01T00:00:00.000000Z"


class RawSQL:
    """Statements past Armarius and past row-level security (SQLite file, or PostgreSQL superuser)."""

    def __init__(self, settings: Settings, admin_url: str | None) -> None:
        self._pg = psycopg.connect(admin_url, autocommit=True) if admin_url else None
        self._lite = None if admin_url else sqlite3.connect(settings.sqlite_path, isolation_level=None)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cursor: Any = (self._pg.execute(sql.replace("?", "%s"), params) if self._pg is not None
                       else self._lite.execute(sql, params))  # type: ignore[union-attr]
        return cursor.fetchall() if cursor.description is not None else []

    def insert(self, sql: str, params: tuple[Any, ...]) -> int:
        return int(self.rows(f"{sql} RETURNING id", params)[0][0])

    def close(self) -> None:
        (self._pg or self._lite).close()  # type: ignore[union-attr]


@pytest.fixture(params=ENGINES)
def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Settings, str | None]]:
    """Settings and a superuser URL (None on SQLite) of a database with no schema yet."""
    if request.param == "sqlite":
        yield Settings(data_dir=tmp_path / "data"), None
        return
    suffix = secrets.token_hex(4)
    name, owner, app_role = f"armarius_m_{suffix}", f"armarius_owner_{suffix}", f"armarius_app_{suffix}"
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)
    host, port, admin = info.get("host", "127.0.0.1"), info.get("port", 5432), info.get("user", "postgres")
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            connection.execute(f'CREATE ROLE "{owner}" LOGIN NOSUPERUSER NOBYPASSRLS')
            connection.execute(f'CREATE ROLE "{app_role}" LOGIN')
            connection.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
    except psycopg.OperationalError as error:
        service_missing("PostgreSQL", error)
    yield (Settings(data_dir=tmp_path / "data", database_url=f"postgresql://{app_role}@{host}:{port}/{name}",
                    database_migrate_url=f"postgresql://{owner}@{host}:{port}/{name}"),
           f"postgresql://{admin}@{host}:{port}/{name}")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'DROP ROLE IF EXISTS "{app_role}"')
        connection.execute(f'DROP ROLE IF EXISTS "{owner}"')


def write_version_6_state(sql: RawSQL) -> dict[str, int]:
    """What version 6 left behind, written as it wrote it."""
    workspace = sql.insert("INSERT INTO workspaces (name, created_at) VALUES (?, ?)", ("legacy", AT))
    agent = sql.insert("INSERT INTO principals (name, kind, created_at) VALUES (?, ?, ?)",
                       ("legacy-agent", "agent", AT))
    sql.rows("INSERT INTO memberships (workspace_ref, principal_id, role, created_at) VALUES (?, ?, ?, ?)",
             (workspace, agent, "editor", AT))
    # The approver: a human editor (an approval lives only while its approver may approve).
    human = sql.insert("INSERT INTO principals (name, kind, created_at) VALUES (?, ?, ?)", ("x", "human", AT))
    sql.rows("INSERT INTO memberships (workspace_ref, principal_id, role, created_at) VALUES (?, ?, ?, ?)",
             (workspace, human, "editor", AT))
    ids: dict[str, int] = {"workspace": workspace}
    public_key = handoff.new_collection_key()[1]
    for name in ("collected", "uncollected", "used"):
        ids[f"proposal_{name}"] = sql.insert(
            "INSERT INTO draft_proposals (workspace_id, slug, title, text, fingerprint, proposer_id, proposed_by, "
            "collection_public_key, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'approved', ?)",
            (workspace, f"old/{name}", "Title", "Text.", f"fp-{name}", agent, "agent:legacy-agent", public_key, AT))

    def approval(name: str, proposal: int | None, outcome: str, sealed: str | None) -> None:
        ids[name] = sql.insert(
            "INSERT INTO approvals (workspace_id, kind, token_digest, fingerprint, proposal_id, approver_id, "
            "approved_by, issued_at, expires_at, outcome, sealed_token) VALUES (?, 'create_draft', ?, ?, ?, ?, ?, ?, "
            "?, ?, ?)", (workspace, f"digest-{name}", f"fp-{name}", proposal, human, "human:x", AT, LATER, outcome,
                         sealed))

    approval("collected", ids["proposal_collected"], "issued", None)  # handed over: sealed copy deleted
    approval("uncollected", ids["proposal_uncollected"], "issued", "sealed-copy")
    approval("used", ids["proposal_used"], "consumed", None)
    approval("file_used", None, "consumed", None)
    approval("file_live", None, "issued", None)
    for name, slug in (("used", "old/used"), ("file_used", "old/from-a-file")):
        sql.rows("INSERT INTO drafts (workspace_id, slug, title, text, fingerprint, approval_id, operation_id, "
                 "created_by, created_at) VALUES (?, ?, 'Title', 'Text.', ?, ?, ?, 'agent:legacy-agent', ?)",
                 (workspace, slug, f"fp-{name}", ids[name], f"op-{name}", AT))
    previous = GENESIS_HASH
    for seq, name in enumerate(("collected", "used"), start=1):
        at = f"200{seq}-02-02T00:00:00.000000Z"
        details = f'{{"approval":{ids[name]},"proposal":{ids[f"proposal_{name}"]}}}'  # canonical JSON
        digest = event_hash(workspace, seq, at, "agent:legacy-agent", "approval.collected", f"old/{name}", details,
                            previous)
        sql.rows("INSERT INTO audit_events (workspace_id, seq, at, actor, action, subject, details, prev_hash, hash) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (workspace, seq, at, "agent:legacy-agent",
                                                       "approval.collected", f"old/{name}", details, previous, digest))
        previous = digest
    sql.rows("INSERT INTO audit_heads (workspace_id, seq, hash) VALUES (?, ?, ?)", (workspace, 2, previous))
    return ids


def test_migration_7_keeps_every_approval_and_frees_proposals_handed_over_for_good(
    old_database: tuple[Settings, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, admin_url = old_database
    every = schema.migrations
    monkeypatch.setattr(schema, "migrations", lambda dialect: [m for m in every(dialect) if m.version <= OLD])
    initialize(settings)
    sql = RawSQL(settings, admin_url)
    try:
        ids = write_version_6_state(sql)
        monkeypatch.undo()
        assert 7 in initialize(settings)
        approvals = {row[0]: row[1:] for row in sql.rows(
            "SELECT id, outcome, slug, collected_at, sealed_token FROM approvals ORDER BY id")}
        assert approvals == {
            ids["collected"]: ("issued", "old/collected", "2001-02-02T00:00:00.000000Z", None),
            ids["uncollected"]: ("issued", "old/uncollected", None, "sealed-copy"),
            ids["used"]: ("consumed", "old/used", "2002-02-02T00:00:00.000000Z", None),
            ids["file_used"]: ("consumed", "old/from-a-file", None, None),
            ids["file_live"]: ("issued", None, None, None),
        }
        assert sql.rows("SELECT slug, approval_id FROM drafts ORDER BY slug") == [
            ("old/from-a-file", ids["file_used"]), ("old/used", ids["used"])]
        if admin_url is None:
            assert sql.rows("PRAGMA foreign_key_check") == []
        sql.rows("UPDATE approvals SET outcome = 'superseded' WHERE id = ?", (ids["file_live"],))
        with pytest.raises((sqlite3.IntegrityError, psycopg.errors.CheckViolation)):
            sql.rows("UPDATE approvals SET outcome = 'cancelled' WHERE id = ?", (ids["file_live"],))
    finally:
        sql.close()

    app = open_app(settings)
    try:
        app.directory.add_principal("legacy-human", Kind.HUMAN, workspace="legacy", role=Role.EDITOR, by=OPERATOR,
                                    password="legacy human password")
        human = app.directory.authenticate_password("legacy-human", "legacy human password", workspace="legacy")
        agent = app.directory.authenticate_token(
            app.directory.issue_token("legacy-agent", workspace="legacy", by=OPERATOR).token)
        stuck = app.drafts.proposal_status(agent, ids["proposal_collected"])
        assert (stuck["status"], stuck["collected"], stuck["next_step"]) == (
            "approved", True, "ask_human_to_approve_again")
        again = app.drafts.approve(human, proposal_id=ids["proposal_collected"])
        assert (again.replaces, again.replaced_outcome) == (ids["collected"], "superseded")
        views = {view["slug"]: view["status"] for view in app.drafts.proposals(human, None)}
        assert views == {"old/collected": "approved", "old/uncollected": "approved", "old/used": "drafted"}
    finally:
        app.close()
