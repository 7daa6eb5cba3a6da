"""Upgrading a store that the previous release made: `armarius init` migrates it, and everything reads.

The store is made by every migration but the newest (``migrate_*(upto=...)``), and filled by raw SQL
as the previous release's code wrote it: a workspace, a human with a password, an agent with a token,
entries with revisions, tags, links and a curation, and both audit chains signed with the audit key.
Then the real `armarius init` (a process of its own) upgrades it, and the services read the old data,
write new data (also into what the newest migration added: a web login session for the old human)
and `armarius audit verify` finds the chains intact and continued. On SQLite and PostgreSQL.

When a migration is added, make the old data below touch what it changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from armarius.app import open_app
from armarius.audit import chain as audit
from armarius.audit.keys import AuditKey, create_key_file, require_keyring
from armarius.auth.permissions import Role
from armarius.auth.secrets import hash_password, new_token, token_digest
from armarius.auth.web_sessions import WebSessions
from armarius.canonical import canonical_json
from armarius.config import Settings, write_settings_file
from armarius.drafts.model import DraftPayload
from armarius.errors import ApprovalExpired, Conflict, OperationConflict, SchemaOutdated, Unauthenticated
from armarius.evidence.model import UnitFile, fingerprint, render, search_text
from armarius.memory.embeddings import WordLlamaEmbedder, entry_text, quantize
from armarius.memory.model import parse_links, slug_key
from armarius.memory.queries import encode_tags, search_body
from armarius.memory.service import RememberRequest
from armarius.memory.snippets import word_map
from armarius.store import Tx, iso_utc
from armarius.store.engine import Database, PostgresDatabase, SqliteDatabase
from armarius.store.schema import latest_version, migrate_postgres, migrate_sqlite, postgres_role
from tests.conftest import ENGINES, PG_ADMIN_URL
from tests.helpers import OwnerSQL, make_team

PASSWORD = "ada: a password set by the previous release"
OPERATOR = "operator:ops"
AGENT, HUMAN = "agent:bot", "human:ada"
DEPLOY_1 = "Deploy with `make release`; the servers stand in Zürich.\n"
DEPLOY_2 = DEPLOY_1 + "Roll back with `make rollback` — never by hand. ✓\n"
STAGING = "Staging mirrors production; read [[ops/deploy]] before touching it.\n"
UNIT, UNIT_BODY = "infra/database-host", "The PostgreSQL primary runs on db-7.internal in München, next to db-8.\n"
DRAFTED, APPROVED = "notes/drafted", "notes/approved"
#: The previous release wrote its rows at these times (the hashes cover them).
THEN = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)


def dialect_of(settings: Settings) -> str:
    return "sqlite" if settings.database_url is None else "postgresql"


@pytest.fixture(params=ENGINES)
def old_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings for an empty database (PostgreSQL: an owner and a server role of its own; the owner is no
    superuser, as in production, so that forced row-level security applies to the migrations too)."""
    if request.param == "sqlite":
        yield Settings(data_dir=tmp_path / "data")
        return
    database = request.getfixturevalue("postgres_database")
    owner = f"{database.name}_owner"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{owner}" LOGIN NOSUPERUSER NOBYPASSRLS')
        admin.execute(f'ALTER DATABASE "{database.name}" OWNER TO "{owner}"')
    try:
        yield Settings(data_dir=tmp_path / "data", database_url=database.app_url,
                       database_migrate_url=database.owner_url.replace(
                           f"{urlsplit(database.owner_url).username}@", f"{owner}@", 1))
    finally:
        database.drop()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{owner}"')


def operator_environment(settings: Settings) -> dict[str, str]:
    """An operator's shell: no stray ARMARIUS_* variables; for PostgreSQL the two URLs."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("ARMARIUS_")}
    if settings.database_url is not None:
        env |= {"ARMARIUS_DATABASE_URL": settings.database_url,
                "ARMARIUS_DATABASE_MIGRATE_URL": settings.database_migrate_url or ""}
    return env


def cli_command(settings: Settings, *args: str) -> list[str]:
    return [sys.executable, "-m", "armarius", "--data-dir", str(settings.data_dir), *args]


def armarius(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a process of its own."""
    return subprocess.run(cli_command(settings, *args), capture_output=True, text=True,
                          env=operator_environment(settings), timeout=120, check=False)


# The previous release's store ------------------------------------------------------------------


@dataclass
class OldStore:
    """What the previous release left, as the test wrote it."""

    workspace_id: int
    agent_token: str
    #: (chain, seq, hash) of every event written, in order.
    events: list[tuple[int, int, str]]
    #: Draft proposals: one whose approval made its draft, one approved with its approval still live.
    drafted_proposal: int
    approved_proposal: int

    def heads(self) -> dict[int, tuple[int, str]]:
        return {chain: (seq, digest) for chain, seq, digest in self.events}


class OldWriter:
    """Raw SQL as the previous release's code wrote it: rows and the signed audit events with them."""

    def __init__(self, database: Database, key: AuditKey, version: int) -> None:
        self.database, self.key, self.version = database, key, version
        self.events: list[tuple[int, int, str]] = []
        self.clock = THEN

    def at(self) -> str:
        self.clock += timedelta(minutes=1)
        return iso_utc(self.clock)

    def event(self, tx: Tx, actor: str, action: str, subject: str, details: dict[str, Any]) -> None:
        chain = tx.workspace_id or audit.SYSTEM_CHAIN
        head = tx.one("SELECT seq, hash FROM audit_heads WHERE workspace_id = ?", (chain,))
        if head is None:
            tx.execute("INSERT INTO audit_heads (workspace_id, seq, hash) VALUES (?, 0, ?)",
                       (chain, audit.GENESIS_HASH))
            head = {"seq": 0, "hash": audit.GENESIS_HASH}
        seq, prev_hash, at, text = int(head["seq"]) + 1, str(head["hash"]), self.at(), canonical_json(details)
        digest = audit.event_hash(chain, seq, at, actor, action, subject, text, prev_hash)
        tx.execute("INSERT INTO audit_events (workspace_id, seq, at, actor, action, subject, details, prev_hash, "
                   "hash, key_id, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (chain, seq, at, actor, action, subject, text, prev_hash, digest, self.key.id,
                    self.key.mac(digest)))
        tx.execute("UPDATE audit_heads SET seq = ?, hash = ? WHERE workspace_id = ?", (seq, digest, chain))
        self.events.append((chain, seq, digest))

    def identities(self) -> tuple[int, str]:
        token = new_token()
        with self.database.transaction(write=True) as tx:
            alpha = int(tx.scalar("INSERT INTO workspaces (name, created_at) VALUES ('alpha', ?) RETURNING id",
                                  (self.at(),)))
            self.event(tx, OPERATOR, "workspace.created", "alpha", {})
            ada = int(tx.scalar("INSERT INTO principals (name, kind, password_hash, created_at) "
                                "VALUES ('ada', 'human', ?, ?) RETURNING id", (hash_password(PASSWORD), self.at())))
            self.event(tx, OPERATOR, "principal.created", "ada", {"kind": "human"})
            tx.execute("INSERT INTO memberships (workspace_ref, principal_id, role, created_at) "
                       "VALUES (?, ?, 'editor', ?)", (alpha, ada, self.at()))
            self.event(tx, OPERATOR, "principal.role_set", "ada", {"workspace": "alpha", "role": "editor"})
            bot = int(tx.scalar("INSERT INTO principals (name, kind, password_hash, created_at) "
                                "VALUES ('bot', 'agent', NULL, ?) RETURNING id", (self.at(),)))
            self.event(tx, OPERATOR, "principal.created", "bot", {"kind": "agent"})
            tx.execute("INSERT INTO memberships (workspace_ref, principal_id, role, created_at) "
                       "VALUES (?, ?, 'editor', ?)", (alpha, bot, self.at()))
            self.event(tx, OPERATOR, "principal.role_set", "bot", {"workspace": "alpha", "role": "editor"})
            token_id = tx.scalar("INSERT INTO agent_tokens (principal_id, workspace_ref, label, digest, created_at) "
                                 "VALUES (?, ?, '', ?, ?) RETURNING id", (bot, alpha, token_digest(token), self.at()))
            self.event(tx, OPERATOR, "token.issued", "bot", {"token_id": token_id, "workspace": "alpha", "label": ""})
        with self.database.transaction(workspace_id=alpha, write=True) as tx:
            self.event(tx, "unauthenticated", "login.failed", "ada", {"reason": "wrong_password"})
            self.event(tx, HUMAN, "login.succeeded", "ada", {"role": "editor"})
        return alpha, token

    def entry(self, alpha: int, slug: str, title: str, bodies: list[str], tags: list[str]) -> int:
        """An entry with one revision per body, each written by the agent as memory.created/updated."""
        with self.database.transaction(workspace_id=alpha, write=True) as tx:
            at, encoded = self.at(), encode_tags(tags)
            entry_id = int(tx.scalar(
                "INSERT INTO entries (workspace_id, slug, slug_key, title, body, search_body, tags, revision, "
                "created_at, updated_at, updated_by) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?) RETURNING id",
                (alpha, slug, slug_key(slug), title, bodies[0], search_body(bodies[0]), encoded, at, at, AGENT)))
            for tag in tags:
                tx.execute("INSERT INTO entry_tags (workspace_id, entry_id, tag) VALUES (?, ?, ?)",
                           (alpha, entry_id, tag))
            for revision, body in enumerate(bodies, start=1):
                at, operation = self.at(), f"op_old_{slug.replace('/', '_')}_{revision}"
                tx.execute("INSERT INTO entry_revisions (workspace_id, entry_id, revision, title, body, tags, "
                           "reason, operation_id, author, created_at, overrode_curated) "
                           "VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)",
                           (alpha, entry_id, revision, title, body, encoded, operation, AGENT, at, False))
                if revision > 1:
                    tx.execute("UPDATE entries SET body = ?, search_body = ?, revision = ?, updated_at = ? "
                               "WHERE workspace_id = ? AND id = ?",
                               (body, search_body(body), revision, at, alpha, entry_id))
                tx.execute("DELETE FROM entry_links WHERE workspace_id = ? AND source_id = ?", (alpha, entry_id))
                for target in parse_links(body):
                    tx.execute("INSERT INTO entry_links (workspace_id, source_id, target_slug) VALUES (?, ?, ?)",
                               (alpha, entry_id, target))
                words = word_map(body)
                tx.execute("DELETE FROM entry_word_maps WHERE workspace_id = ? AND entry_id = ?", (alpha, entry_id))
                if words is not None:
                    tx.execute("INSERT INTO entry_word_maps (entry_id, workspace_id, word_map) VALUES (?, ?, ?)",
                               (entry_id, alpha, words))
                self.event(tx, AGENT, "memory.created" if revision == 1 else "memory.updated", slug,
                           {"revision": revision, "operation": operation})
            # Its vector (recall by meaning), the model named by its number in vector_models.
            embedder = WordLlamaEmbedder()
            tx.execute("INSERT INTO vector_models (name) VALUES (?) ON CONFLICT (name) DO NOTHING",
                       (embedder.model_id,))
            tx.execute("INSERT INTO entry_vectors (entry_id, workspace_id, seq, revision, model, vector) "
                       "SELECT ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM entry_vectors), ?, id, ? "
                       "FROM vector_models WHERE name = ?",
                       (entry_id, alpha, len(bodies), quantize(embedder.embed([entry_text(title, bodies[-1])])[0]),
                        embedder.model_id))
        return entry_id

    def active_unit(self, alpha: int, name: str, title: str, body: str) -> None:
        """An evidence unit a human wrote, reviewed and activated: searched by its words, with no vector (a unit
        activated before recall by meaning of units came, in migration 19, has none until `armarius init`)."""
        with self.database.transaction(workspace_id=alpha, write=True) as tx:
            at = self.at()
            content = render(UnitFile(name=name, title=title, revision=1, provenance=(), lineage=(), body=body))
            unit_id = int(tx.scalar(
                "INSERT INTO evidence_units (workspace_id, name, title, status, revision, reviewed_revision, "
                "reviewed_by, reviewed_at, active_revision, active_fingerprint, activated_by, activated_at, "
                "created_by, created_at, updated_by, updated_at) "
                "VALUES (?, ?, ?, 'active', 1, 1, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (alpha, name, title, HUMAN, at, fingerprint(content), HUMAN, at, HUMAN, at, HUMAN, at)))
            tx.execute("INSERT INTO evidence_revisions (workspace_id, unit_id, revision, title, body, fingerprint, "
                       "provenance, lineage, author, reason, created_at) VALUES (?, ?, 1, ?, ?, ?, '[]', '[]', ?, "
                       "NULL, ?)", (alpha, unit_id, title, body, fingerprint(content), HUMAN, at))
            tx.execute("INSERT INTO evidence_search (unit_id, workspace_id, revision, name, title, body, search_body) "
                       "VALUES (?, ?, 1, ?, ?, ?, ?)", (unit_id, alpha, name, title, body, search_text(body)))
            self.event(tx, HUMAN, "evidence.activated", name, {"unit": name, "revision": 1,
                                                               "fingerprint": fingerprint(content), "replaced": None})

    def draft_proposals(self, alpha: int) -> tuple[int, int]:
        """Two proposals of the agent's that the human approved: one whose approval made its draft, one whose
        approval is still live (its lifetime runs past the upgrade). The proposals' ids, drafted first."""
        ids = []
        with self.database.transaction(workspace_id=alpha, write=True) as tx:
            bot, ada = (int(tx.scalar("SELECT id FROM principals WHERE name = ?", (name,))) for name in ("bot", "ada"))
            for number, (slug, used) in enumerate([(DRAFTED, True), (APPROVED, False)]):
                content = DraftPayload(slug, f"Notes {number}", f"Old draft {number}.\n")
                at = self.at()
                proposal = int(tx.scalar(
                    "INSERT INTO draft_proposals (workspace_id, slug, title, text, fingerprint, proposer_id, "
                    "proposed_by, collection_public_key, status, decided_by, decided_at, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, NULL, 'approved', ?, ?, ?) RETURNING id",
                    (alpha, slug, content.title, content.text, content.fingerprint, bot, AGENT, HUMAN, at, at)))
                self.event(tx, AGENT, "draft.proposed", slug,
                           {"proposal": proposal, "fingerprint": content.fingerprint})
                expires = iso_utc(datetime.now(UTC) + timedelta(days=1)) if not used else self.at()
                approval = int(tx.scalar(
                    "INSERT INTO approvals (workspace_id, kind, token_digest, fingerprint, slug, proposal_id, "
                    "approver_id, approved_by, issued_at, expires_at, outcome, collected_at) "
                    "VALUES (?, 'draft', ?, ?, ?, ?, ?, ?, ?, ?, 'issued', ?) RETURNING id",
                    (alpha, token_digest(new_token()), content.fingerprint, slug, proposal, ada, HUMAN, at, expires,
                     at)))
                self.event(tx, HUMAN, "approval.issued", slug, {"approval": approval, "proposal": proposal,
                                                                 "fingerprint": content.fingerprint,
                                                                 "expires_at": expires})
                if used:
                    operation = f"op_old_draft_{number}"
                    tx.execute("UPDATE approvals SET outcome = 'consumed', used_at = ?, operation_id = ? "
                               "WHERE workspace_id = ? AND id = ?", (at, operation, alpha, approval))
                    tx.execute("INSERT INTO drafts (workspace_id, slug, title, text, fingerprint, approval_id, "
                               "operation_id, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               (alpha, slug, content.title, content.text, content.fingerprint, approval, operation,
                                AGENT, at))
                    # The operation, for replays; before migration 22, without the principal that made it (the
                    # migration finds it from the draft).
                    maker = {"principal_id": bot} if self.version >= DRAFT_AUTHORITY else {}
                    tx.execute(f"INSERT INTO operations (workspace_id, operation_id, kind, fingerprint, result, "
                               f"created_at{''.join(', ' + column for column in maker)}) "
                               f"VALUES (?, ?, 'create_draft', ?, ?, ?{', ?' * len(maker)})",
                               (alpha, operation, content.fingerprint,
                                json.dumps({"slug": slug, "draft": True}, sort_keys=True), at, *maker.values()))
                    self.event(tx, AGENT, "draft.created", slug, {"operation": operation,
                                                                  "fingerprint": content.fingerprint})
                ids.append(proposal)
        return ids[0], ids[1]

    def curate(self, alpha: int, entry_id: int, slug: str, revision: int) -> None:
        with self.database.transaction(workspace_id=alpha, write=True) as tx:
            tx.execute("UPDATE entries SET curated_revision = ?, curated_by = ?, curated_at = ?, "
                       "review_base_revision = ?, needs_review = ? WHERE workspace_id = ? AND id = ?",
                       (revision, HUMAN, self.at(), revision, False, alpha, entry_id))
            self.event(tx, HUMAN, "memory.curated", slug, {"revision": revision})


def make_previous_release_store(settings: Settings, previous: int | None = None) -> OldStore:
    """Every migration but the newest (or up to ``previous``: an older release, whose tables the writer's rows
    fit too), the audit key, and data written the previous release's way."""
    previous = latest_version(dialect_of(settings)) - 1 if previous is None else previous
    if settings.database_url is None:
        assert migrate_sqlite(settings.sqlite_path, upto=previous) == list(range(1, previous + 1))
        database: Database = SqliteDatabase(settings.sqlite_path)
    else:
        assert settings.database_migrate_url is not None
        assert migrate_postgres(settings.database_migrate_url, postgres_role(settings.database_url),
                                upto=previous) == list(range(1, previous + 1))
        database = PostgresDatabase(settings.database_url)  # the server's role, as the old server wrote
    write_settings_file(settings)
    assert create_key_file(settings.audit_key_path)
    writer = OldWriter(database, require_keyring(None, settings.audit_key_path).active, previous)
    try:
        alpha, token = writer.identities()
        deploy = writer.entry(alpha, "ops/deploy", "Deploying", [DEPLOY_1, DEPLOY_2], ["ops", "release"])
        writer.curate(alpha, deploy, "ops/deploy", 2)
        writer.entry(alpha, "ops/staging", "Staging", [STAGING], ["ops"])
        writer.active_unit(alpha, UNIT, "Where the database lives", UNIT_BODY)
        drafted, approved = writer.draft_proposals(alpha)
    finally:
        database.close()
    return OldStore(alpha, token, writer.events, drafted, approved)


@pytest.fixture
def upgraded(old_settings: Settings) -> tuple[Settings, OldStore]:
    old = make_previous_release_store(old_settings)
    with pytest.raises(SchemaOutdated) as refused:  # this release refuses the old store until it is migrated
        open_app(old_settings)
    latest = latest_version(dialect_of(old_settings))
    assert refused.value.details["missing"] == [latest]
    not_yet = armarius(old_settings, "--json", "audit", "verify")
    assert (not_yet.returncode, json.loads(not_yet.stderr)["error"]["code"]) == (8, "schema_outdated")

    result = armarius(old_settings, "--json", "init")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["applied"] == [latest]
    # The old entries' vectors are carried over, not made again; the active unit, which had none, gets one.
    assert json.loads(result.stdout)["embedded"] == {"alpha": {"embedded": 1, "entries": 2, "with_vector": 2,
                                                               "units": 1, "units_with_vector": 1}}
    return old_settings, old


# The upgrade -------------------------------------------------------------------------------------


def verify(settings: Settings) -> dict[str, Any]:
    result = armarius(settings, "--json", "audit", "verify")
    report: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == 0, report
    assert report["intact"] is True
    return report


def test_init_upgrades_the_previous_release_and_the_log_verifies(upgraded: tuple[Settings, OldStore]) -> None:
    settings, old = upgraded
    report = verify(settings)
    assert (report["events_checked"], report["chains_checked"], report["legacy_events"]) == (len(old.events), 2, 0)
    with OwnerSQL(settings) as owner:
        versions = [row[0] for row in owner.rows("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == list(range(1, latest_version(dialect_of(settings)) + 1))
    # `armarius init` made no new key and sealed nothing: the old chains end where they ended.
    application = open_app(settings)
    try:
        assert {chain: (seq, digest) for chain, seq, digest in audit.last_events(application.database)} == old.heads()
    finally:
        application.close()


def test_the_old_data_reads_through_the_services(upgraded: tuple[Settings, OldStore]) -> None:
    settings, old = upgraded
    application = open_app(settings)
    try:
        agent = application.directory.authenticate_token(old.agent_token)
        assert (agent.principal, agent.workspace, agent.role.value) == ("bot", "alpha", "editor")
        deploy = application.memory.read(agent, "ops/deploy")
        assert {key: deploy[key] for key in ("title", "body", "tags", "revision", "curated", "curated_revision",
                                             "curated_by", "needs_review", "updated_by", "backlinks")} == {
            "title": "Deploying", "body": DEPLOY_2, "tags": ["ops", "release"], "revision": 2, "curated": True,
            "curated_revision": 2, "curated_by": HUMAN, "needs_review": False, "updated_by": AGENT,
            "backlinks": ["ops/staging"]}
        assert deploy["body"].encode("utf-8") == DEPLOY_2.encode("utf-8")
        assert [revision["body"] for revision in application.memory.revisions(agent, "ops/deploy")] == [
            DEPLOY_1, DEPLOY_2]
        assert application.memory.read(agent, "ops/deploy", revision=1)["body"] == DEPLOY_1
        assert application.memory.read(agent, "ops/staging")["links"] == ["ops/deploy"]
        # The search index the old rows were given (by triggers) answers, also for words of the old revision.
        assert [hit["slug"] for hit in application.memory.recall(agent, "Zürich")["results"]] == ["ops/deploy"]
        assert [hit["slug"] for hit in application.memory.recall(agent, "rollback")["results"]] == ["ops/deploy"]
        # The old vectors answer, and the one `armarius init` made for the active unit.
        by_meaning = application.memory.recall(agent, "how do we ship a release?", mode="semantic")
        assert by_meaning["results"][0]["slug"] == "ops/deploy"
        assert [unit["unit"] for unit in application.memory.recall(agent, "which server holds our data store?",
                                                                   mode="semantic")["evidence"]] == [UNIT]
        assert application.memory.vector_counts(old.workspace_id) == {"entries": 2, "with_vector": 2,
                                                                      "units": 1, "units_with_vector": 1}
        assert [entry["slug"] for entry in application.memory.list_entries(agent, tag="release")["entries"]] == [
            "ops/deploy"]
        assert [entry["slug"] for entry in application.memory.list_entries(agent, curated=True)["entries"]] == [
            "ops/deploy"]
        # The old curation still binds: an agent's write over it needs a reason.
        refused = application.memory.remember(agent, RememberRequest("ops/deploy", "Deploying", DEPLOY_2 + "More."))
        assert (refused["status"], refused["code"]) == ("judgment_required", "curated_entry")
        human = application.directory.authenticate_password("ada", PASSWORD, workspace="alpha")
        assert [entry["slug"] for entry in application.memory.needs_review(human)] == []
    finally:
        application.close()


def test_new_writes_continue_the_old_data_and_chains(upgraded: tuple[Settings, OldStore]) -> None:
    settings, old = upgraded
    application = open_app(settings)
    try:
        agent = application.directory.authenticate_token(old.agent_token)
        updated = application.memory.remember(
            agent, RememberRequest("ops/staging", "Staging", STAGING + "Reset it every Monday.\n"))
        assert (updated["status"], updated["revision"]) == ("written", 2)
        created = application.memory.remember(
            agent, RememberRequest("notes/upgrade", "After the upgrade", "Written by the new release.", tags=["new"]))
        assert (created["status"], created["revision"]) == ("written", 1)
        human = application.directory.authenticate_password("ada", PASSWORD, workspace="alpha")
        assert application.memory.curate(human, "ops/staging", 2)["changed"] is True
        overridden = application.memory.remember(agent, RememberRequest(
            "ops/deploy", "Deploying", DEPLOY_2 + "Tag the release first.\n", override_curated=True,
            reason="the release needs a tag now"))
        assert (overridden["status"], overridden["revision"], overridden["needs_review"]) == ("written", 3, True)
        assert [hit["slug"] for hit in application.memory.recall(agent, "Monday", mode="lexical")["results"]] == [
            "ops/staging"]
        assert application.memory.recall(agent, "Monday")["results"][0]["slug"] == "ops/staging"

        # What migration 20 changed, used by the old rows: the human rejects the proposal whose approval
        # is live, which withdraws it; the one that was drafted cannot be rejected, and its draft reads.
        rejected = application.drafts.reject(human, old.approved_proposal, "Not any more.")
        with pytest.raises(Conflict):
            application.drafts.reject(human, old.drafted_proposal)
        assert application.drafts.draft(human, DRAFTED)["text"] == "Old draft 0.\n"
        with application.database.transaction(workspace_id=old.workspace_id) as tx:
            approvals = tx.all("SELECT id, proposal_id, outcome FROM approvals ORDER BY id")
        assert [(row["proposal_id"], row["outcome"]) for row in approvals] == [
            (old.drafted_proposal, "consumed"), (old.approved_proposal, "withdrawn")]
        assert (rejected["status"], rejected["withdrawn_approval"]) == ("rejected", approvals[1]["id"])

        # What an earlier migration added, used by the old rows: a web login of the old human.
        web = WebSessions(application.database, application.directory, idle=timedelta(minutes=60),
                          lifetime=timedelta(hours=12))
        with pytest.raises(Unauthenticated):
            web.start("ada", "not the password", workspace="alpha", client="192.0.2.7")
        started = web.start("ada", PASSWORD, workspace="alpha", client="192.0.2.8")
        session = web.resolve(started.secret)
        assert (session.actor.principal, session.actor.workspace, session.actor.role.value) == ("ada", "alpha",
                                                                                               "editor")
        with application.database.transaction() as tx:
            assert tx.scalar("SELECT count(*) AS n FROM login_attempts WHERE client = '192.0.2.7'") == 1
        web.end(session)
        with pytest.raises(Unauthenticated):
            web.resolve(started.secret)

        # What migration 22 changed, used by the old rows: the old operation has its maker (a store from before
        # 22 learns it from the draft: test below), so the agent's retry replays it and anyone else is refused;
        # the rebuilt approvals (SQLite) take the outcome revoked: an approval of the old human's stops working
        # once she may no longer approve. (Migration 23's index serves the recalls of the old entries above.)
        old_draft = {"slug": DRAFTED, "title": "Notes 0", "text": "Old draft 0.\n"}
        assert application.drafts.create_draft(agent, dict(old_draft), "", "op_old_draft_0") == {
            "slug": DRAFTED, "draft": True, "replayed": True}
        with pytest.raises(OperationConflict):
            application.drafts.create_draft(human, dict(old_draft), "", "op_old_draft_0")
        with application.database.transaction(workspace_id=old.workspace_id) as tx:
            assert [dict(row) for row in tx.all("SELECT operation_id, principal_id FROM operations")] == [
                {"operation_id": "op_old_draft_0", "principal_id": agent.principal_id}]
        after = {"slug": "notes/after", "title": "After", "text": "Approved after the upgrade.\n"}
        token = application.drafts.approve(human, payload=dict(after)).token
        application.directory.set_role("ada", workspace="alpha", role=Role.READER, by=OPERATOR)
        with pytest.raises(ApprovalExpired) as revoked:
            application.drafts.create_draft(agent, dict(after), token, "op_after")
        assert revoked.value.details["reason"] == "revoked"
        with application.database.transaction(workspace_id=old.workspace_id) as tx:
            assert tx.scalar("SELECT outcome FROM approvals ORDER BY id DESC LIMIT 1") == "revoked"

        # The new events continue the old chains: the next number, linked to the old head.
        heads = old.heads()
        for chain in (audit.SYSTEM_CHAIN, old.workspace_id):
            events = audit.tail(application.database, chain if chain else None, limit=1000)
            old_seq, old_hash = heads[chain]
            assert [event.seq for event in events] == list(range(1, len(events) + 1))
            assert [(chain, event.seq, event.hash) for event in events[:old_seq]] == [
                event for event in old.events if event[0] == chain]
            if len(events) > old_seq:
                assert events[old_seq].prev_hash == old_hash
        workspace_events = audit.tail(application.database, old.workspace_id, limit=1000)
        assert len(workspace_events) > heads[old.workspace_id][0]
        key_ids = {event.key_id for event in workspace_events}
        assert len(key_ids) == 1, "the old key signs on"
        total = sum(len(audit.tail(application.database, chain or None, limit=1000))
                    for chain in (audit.SYSTEM_CHAIN, old.workspace_id))
    finally:
        application.close()
    report = verify(settings)
    assert report["events_checked"] == total > len(old.events)


def test_hosts_upgrading_at_once_apply_the_new_migration_once(old_settings: Settings) -> None:
    """Several hosts (here: processes) run `armarius init` together: one applies the migration, under the
    migration lock, and the others find it applied."""
    old = make_previous_release_store(old_settings)
    hosts = [subprocess.Popen(cli_command(old_settings, "--json", "init"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=operator_environment(old_settings))
             for _ in range(3)]
    outcomes = [host.communicate(timeout=120) for host in hosts]
    assert [host.returncode for host in hosts] == [0, 0, 0], [stderr for _, stderr in outcomes]
    applied = sorted(json.loads(stdout)["applied"] for stdout, _ in outcomes)
    assert applied == [[], [], [latest_version(dialect_of(old_settings))]]
    assert verify(old_settings)["events_checked"] == len(old.events)


@pytest.mark.parametrize("old_settings", ["postgresql"], indirect=True)
def test_where_unaccent_cannot_be_created_recall_keeps_the_accents(old_settings: Settings) -> None:
    """The unaccent extension is trusted, so the database's owner creates it; an owner that may not (no CREATE
    on the database, or a server without contrib) still migrates, and recall then matches words as written."""
    settings = old_settings
    assert settings.database_migrate_url is not None
    owner = urlsplit(settings.database_migrate_url).username
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'REVOKE CREATE ON DATABASE "{urlsplit(settings.database_migrate_url).path[1:]}" FROM "{owner}"')
    result = armarius(settings, "--json", "init")
    assert result.returncode == 0, result.stderr
    with psycopg.connect(settings.database_migrate_url) as connection:
        assert connection.execute("SELECT count(*) FROM pg_extension WHERE extname = 'unaccent'").fetchone() == (0,)
    application = open_app(settings)
    try:
        team = make_team(application)
        application.memory.remember(team.agent, RememberRequest("people/visit", "Visit", "Herr Müller kam."))
        found = {query: [hit["slug"] for hit in application.memory.recall(team.agent, query, mode="lexical")["results"]]
                 for query in ("Müller", "MÜLLER", "muller")}
        assert found == {"Müller": ["people/visit"], "MÜLLER": ["people/visit"], "muller": []}
    finally:
        application.close()


#: The migration after which PostgreSQL's search vectors fold accents (0021_accent_folding).
ACCENT_FOLDING = 21
#: The migration that gave an operation the principal that made it (0022_draft_authority).
DRAFT_AUTHORITY = 22


def upgraded_from_before(settings: Settings, migration: int) -> OldStore:
    """A store of the release before ``migration``, upgraded by `armarius init` (which applies it and every later
    one)."""
    old = make_previous_release_store(settings, previous=migration - 1)
    result = armarius(settings, "--json", "init")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["applied"] == list(range(migration, latest_version(dialect_of(settings)) + 1))
    return old


def test_a_store_from_before_accent_folding_has_its_search_vectors_made_again(old_settings: Settings) -> None:
    """PostgreSQL made the vectors of entries and units without folding accents before 0021; the migration makes
    them again (SQLite's index always folded them)."""
    old = upgraded_from_before(old_settings, ACCENT_FOLDING)
    application = open_app(old_settings)
    try:
        agent = application.directory.authenticate_token(old.agent_token)
        for query in ("Zürich", "zurich", "ZURICH"):
            assert [hit["slug"] for hit in application.memory.recall(agent, query)["results"]] == ["ops/deploy"]
        for query in ("München", "munchen"):
            assert [unit["unit"] for unit in application.memory.recall(agent, query, mode="lexical")["evidence"]] == [
                UNIT]
    finally:
        application.close()


def test_a_store_from_before_draft_authority_learns_each_operations_maker_from_its_draft(
        old_settings: Settings) -> None:
    """An operation written before 0022 names no principal; the migration takes the one its draft was created by,
    so that principal's retry replays it and anyone else's is refused."""
    old = upgraded_from_before(old_settings, DRAFT_AUTHORITY)
    application = open_app(old_settings)
    try:
        agent = application.directory.authenticate_token(old.agent_token)
        human = application.directory.authenticate_password("ada", PASSWORD, workspace="alpha")
        old_draft = {"slug": DRAFTED, "title": "Notes 0", "text": "Old draft 0.\n"}
        assert application.drafts.create_draft(agent, dict(old_draft), "", "op_old_draft_0")["replayed"] is True
        with pytest.raises(OperationConflict):
            application.drafts.create_draft(human, dict(old_draft), "", "op_old_draft_0")
        with application.database.transaction(workspace_id=old.workspace_id) as tx:
            assert [dict(row) for row in tx.all("SELECT operation_id, principal_id FROM operations")] == [
                {"operation_id": "op_old_draft_0", "principal_id": agent.principal_id}]
    finally:
        application.close()
