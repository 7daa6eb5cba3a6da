"""Exports of a workspace (JSONL with everything, a Markdown folder), `export --verify`, and the round
trip through `import armarius` / `import markdown`, on both engines."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from armarius.app import Armarius
from armarius.config import Settings
from armarius.memory.service import RememberRequest
from armarius.transfer.export import LEFT_OUT, TABLES, read_records
from tests.cli.test_cli import Cli
from tests.helpers import Team, make_team
from tests.transfer.test_import import error_of, run


@pytest.fixture
def team(app: Armarius) -> Team:
    """A workspace with history: revisions, a curation, an override, a link, a proposal with its approval."""
    team = make_team(app)
    remember = app.memory.remember
    remember(team.agent, RememberRequest("ops/db", "Database host", "db-1 in rack 2", tags=["ops"]))
    remember(team.agent, RememberRequest("ops/db", "Database host", "db-1 in rack 3, see [[ops/network]]"))
    app.memory.curate(team.human, "ops/db", 2)
    remember(team.agent, RememberRequest("ops/db", "Database host", "db-2 since the move", override_curated=True,
                                         reason="moved last night"))
    remember(team.agent, RememberRequest("ops/network", "Network", "VLAN 12 — Zoë's ✓ notes", tags=["ops", "net"]))
    remember(team.agent, RememberRequest("team/kept", "Kept", "Curated and unchanged"))
    app.memory.curate(team.human, "team/kept", 1)
    proposed = app.drafts.propose(team.agent, {"slug": "docs/setup", "title": "Setup", "text": "Run it."})
    app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    return team


def cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    result = Cli(settings)(*args)
    return result.exit_code, result.stdout, result.stderr


def secrets_of(app: Armarius, settings: Settings, team: Team) -> list[str]:
    """Every secret the workspace's store holds: tokens, their digests, password hashes, sealed approvals."""
    found = [team.agent_token, team.human_password]
    queries = ["SELECT digest FROM agent_tokens",
               "SELECT password_hash FROM principals WHERE password_hash IS NOT NULL",
               "SELECT token_digest FROM approvals",
               "SELECT sealed_token FROM approvals WHERE sealed_token IS NOT NULL"]
    if settings.database_url is None:
        with sqlite3.connect(settings.sqlite_path) as connection:
            rows = [row for query in queries for row in connection.execute(query)]
    else:
        assert settings.database_migrate_url is not None
        with psycopg.connect(settings.database_migrate_url) as connection:
            rows = [row for query in queries for row in connection.execute(query)]
    found += [value.hex() if isinstance(value, bytes) else str(value) for (value,) in rows]
    assert len(found) >= 5
    return found


def test_a_jsonl_export_holds_everything_but_secrets_and_reimports_with_its_history(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    out = tmp_path / "alpha.jsonl"
    code, stdout, err = cli(settings, "--json", "export", str(out), "--workspace", "alpha", "--verify")
    assert code == 0, err
    result = json.loads(stdout)
    assert (result["verified"], result["problems"]) == (True, [])
    assert result["counts"]["entries"] == 3
    assert result["counts"]["entry_revisions"] == 5
    assert result["counts"]["approvals"] == 1
    assert result["counts"]["audit_events"] > 5
    assert oct(out.stat().st_mode & 0o777) == oct(0o600)
    text = out.read_text(encoding="utf-8")
    assert "Zoë's ✓" in text
    for secret in secrets_of(app, settings, team):
        assert secret not in text
    header, tables = read_records(out)
    assert header["workspace"] == "alpha"
    assert not any(key in row for row in tables["approvals"] for key in ("token_digest", "sealed_token"))
    assert [event["action"] for event in tables["audit_events"]][-1] == "approval.issued"

    # The export of the export: import it into another workspace, export that, compare entries and history.
    beta = make_team(app, "beta")
    code, report, err = run(settings, beta, "import", "armarius", str(out))
    assert code == 0, err
    assert report["counts"] == {"created": 3, "updated": 0, "unchanged": 0, "curated_kept": 0}
    assert report["curated_in_source"] == ["team/kept"]
    db = app.memory.read(beta.human, "ops/db")
    assert (db["revision"], db["curated"], db["body"]) == (3, False, "db-2 since the move")
    history = app.memory.history(beta.human, "ops/db")["revisions"]
    assert [(r["revision"], r["overrode_curated"], r["reason"]) for r in history] == [
        (1, False, None), (2, False, None), (3, True, "moved last night")]
    again = tmp_path / "beta.jsonl"
    assert cli(settings, "export", str(again), "--workspace", "beta")[0] == 0
    assert entries_and_history(read_records(again)[1]) == entries_and_history(tables)

    code, report, _ = run(settings, beta, "import", "armarius", str(out))
    assert (code, report["counts"]["unchanged"], report["written"]) == (0, 3, False)


def entries_and_history(tables: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    revisions: dict[Any, list[Any]] = {}
    for row in tables["entry_revisions"]:
        revisions.setdefault(row["entry_id"], []).append(
            (row["title"], row["body"], row["tags"], row["reason"], row["author"], row["created_at"],
             bool(row["overrode_curated"])))
    return {row["slug"]: (row["title"], row["body"], row["tags"], row["revision"], revisions[row["id"]])
            for row in tables["entries"]}


def test_a_markdown_export_reads_as_notes_and_reimports(app: Armarius, settings: Settings, team: Team,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "alpha-notes"
    code, stdout, err = cli(settings, "--json", "export", str(out), "--workspace", "alpha", "--verify")
    assert code == 0, err
    assert json.loads(stdout)["counts"] == {"entries": 3, "drafts": 1, "evidence": 0}
    note = (out / "entries" / "ops" / "db.md").read_text(encoding="utf-8")
    assert note.startswith("---\nslug: ops/db\ntitle: Database host\ntags:\n- ops\nrevision: 3\ncurated_revision: 2\n")
    assert note.endswith("---\n\ndb-2 since the move")
    assert "needs_review: true" in note
    assert (out / "drafts" / "proposal-1-docs--setup.md").read_text(encoding="utf-8").endswith("\n\nRun it.")
    manifest = json.loads((out / "armarius-export.json").read_text())
    assert manifest["workspace"] == "alpha"
    for secret in secrets_of(app, settings, team):
        assert all(secret not in path.read_text(encoding="utf-8") for path in out.rglob("*") if path.is_file())

    beta = make_team(app, "beta")
    code, report, err = run(settings, beta, "import", "markdown", str(out))
    assert code == 0, err
    assert report["counts"]["created"] == 3
    assert report["renamed"] == []
    for slug in ("ops/db", "ops/network", "team/kept"):
        mine, theirs = app.memory.read(team.human, slug), app.memory.read(beta.human, slug)
        assert (theirs["title"], theirs["body"], theirs["tags"]) == (mine["title"], mine["body"], mine["tags"])


def test_an_export_refuses_a_folder_that_is_not_empty(settings: Settings, team: Team, tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("mine")
    code, _, err = cli(settings, "export", str(tmp_path / "used"), "--workspace", "alpha")
    assert code == 3
    assert "not an empty folder" in err
    assert [path.name for path in (tmp_path / "used").iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("damage", ["cut", "edited", "not_an_export", "line_after_end"])
def test_a_damaged_export_is_refused_naming_its_line_and_nothing_is_imported(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, damage: str) -> None:
    out = tmp_path / "alpha.jsonl"
    assert cli(settings, "export", str(out), "--workspace", "alpha")[0] == 0
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    if damage == "cut":
        out.write_text("".join(lines[:-3]) + lines[-3][:20], encoding="utf-8")
        expected = f"alpha.jsonl line {len(lines) - 2}"
    elif damage == "edited":
        lines[1] = lines[1].replace("db-1 in rack 2", "db-9 in rack 2").replace("Database host", "Database Host")
        out.write_text("".join(lines), encoding="utf-8")
        expected = f"alpha.jsonl line {len(lines)}: the lines do not match"
    elif damage == "not_an_export":
        out.write_text('{"type":"entity","name":"A","entityType":"x","observations":[]}\n', encoding="utf-8")
        expected = "alpha.jsonl line 1: not an Armarius export"
    else:
        out.write_text("".join(lines) + lines[1], encoding="utf-8")
        expected = f"alpha.jsonl line {len(lines) + 1}: a line after the end line"
    beta = make_team(app, "beta")
    code, _, err = run(settings, beta, "import", "armarius", str(out))
    assert code == 3
    assert expected in error_of(err)["message"]
    assert app.memory.list_entries(beta.human)["entries"] == []


def test_every_table_is_exported_or_left_out_for_a_stated_reason(app: Armarius, settings: Settings) -> None:
    if settings.database_url is None:
        with sqlite3.connect(settings.sqlite_path) as connection:
            names = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        names = {name for name in names if not name.startswith(("entries_fts", "evidence_fts", "sqlite_"))}
    else:
        assert settings.database_migrate_url is not None
        with psycopg.connect(settings.database_migrate_url) as connection:
            names = {name for (name,) in connection.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    assert set(TABLES) <= names
    assert names - set(TABLES) <= set(LEFT_OUT), "a new table: export it, or say in LEFT_OUT why not"
    assert not set(TABLES) & set(LEFT_OUT)
