"""The operator CLI, in process through click's runner, on both storage engines."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from armarius.cli.main import cli
from armarius.config import Settings


class Cli:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.env = {"ARMARIUS_DATABASE_URL": settings.database_url or "",
                    "ARMARIUS_DATABASE_MIGRATE_URL": settings.database_migrate_url or ""}
        if settings.database_url is None:
            self.env = {}
        self.runner = CliRunner()

    def __call__(self, *args: str, stdin: str | None = None) -> Result:
        return self.runner.invoke(cli, ["--data-dir", str(self.settings.data_dir), *args], input=stdin,
                                  env=self.env, catch_exceptions=False)

    def json(self, *args: str) -> Any:
        result = self("--json", *args)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def run(settings: Settings) -> Cli:
    command = Cli(settings)
    assert command("workspace", "add", "alpha").exit_code == 0
    return command


def test_init_is_idempotent(run: Cli) -> None:
    again = run.json("init")
    assert again["applied"] == []
    assert again["schema_version"] >= 1


def test_principals_tokens_and_the_audit_trail(run: Cli) -> None:
    human = run.json("principal", "add", "ada", "--kind", "human", "--workspace", "alpha", "--role", "editor")
    assert len(human["password"]) >= 16
    run.json("principal", "add", "bot", "--kind", "agent", "--workspace", "alpha", "--role", "reader")
    issued = run.json("token", "issue", "bot", "--workspace", "alpha", "--label", "ci")
    listed = run.json("token", "list")
    assert [(t["principal"], t["label"], t["revoked_at"]) for t in listed] == [("bot", "ci", None)]
    run.json("token", "revoke", str(issued["id"]))
    assert run.json("token", "list")[0]["revoked_at"] is not None
    principals = {p["name"]: p["roles"] for p in run.json("principal", "list")}
    assert principals == {"ada": {"alpha": "editor"}, "bot": {"alpha": "reader"}}
    events = run.json("audit", "tail", "--workspace", "alpha") + run.json("audit", "tail", "--limit", "100")
    actions = [event["action"] for event in events]
    assert {"workspace.created", "principal.created", "token.issued", "token.revoked"} <= set(actions)
    dumped = json.dumps(events) + run("audit", "tail").stdout + run("token", "list").stdout
    assert issued["token"] not in dumped
    assert human["password"] not in dumped
    assert run.json("audit", "verify")["intact"] is True


def test_an_agent_can_never_be_made_admin(run: Cli) -> None:
    refused = run("principal", "add", "bot", "--kind", "agent", "--workspace", "alpha", "--role", "admin")
    assert refused.exit_code == 4
    assert "error [not_allowed]" in refused.stderr
    assert run.json("principal", "list") == []
    run.json("principal", "add", "bot", "--kind", "agent", "--workspace", "alpha", "--role", "editor")
    before = run.json("audit", "tail", "--limit", "100")
    refused = run("--json", "principal", "set-role", "bot", "--workspace", "alpha", "--role", "admin")
    assert refused.exit_code == 4
    assert json.loads(refused.stderr)["error"]["code"] == "not_allowed"
    assert run.json("principal", "list")[0]["roles"] == {"alpha": "editor"}
    assert run.json("audit", "tail", "--limit", "100") == before


def test_duplicate_names_are_refused_and_change_nothing(run: Cli) -> None:
    before = run.json("audit", "tail", "--limit", "100")
    duplicate = run("workspace", "add", "alpha")
    assert duplicate.exit_code == 6
    assert "already_exists" in duplicate.stderr
    assert [w["name"] for w in run.json("workspace", "list")] == ["alpha"]
    assert run.json("audit", "tail", "--limit", "100") == before


def test_a_password_can_be_read_from_stdin_and_is_never_printed(run: Cli) -> None:
    result = run("--json", "principal", "add", "ada", "--kind", "human", "--workspace", "alpha", "--role", "admin",
                 "--password-stdin", stdin="s3cret-from-stdin\n")
    assert result.exit_code == 0, result.stderr
    assert "s3cret-from-stdin" not in result.stdout + result.stderr
    assert "password" not in json.loads(result.stdout)


def test_unknown_things_are_not_found(run: Cli) -> None:
    assert run("token", "revoke", "999").exit_code == 5
    assert run("token", "issue", "nobody", "--workspace", "alpha").exit_code == 5
    assert run("audit", "tail", "--workspace", "nowhere").exit_code == 5


def test_a_malformed_settings_file_names_the_key_and_the_file(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text('[server]\nport = "eighty"\n', encoding="utf-8")
    result = Cli(settings)("workspace", "list")
    assert result.exit_code == 7
    assert "server.port" in result.stderr
    assert str(settings.config_file) in result.stderr


def test_an_uninitialised_database_says_how_to_migrate(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "empty")
    settings.data_dir.mkdir()
    sqlite3.connect(settings.sqlite_path).close()  # a database file without Armarius's tables
    result = Cli(settings)("workspace", "list")
    assert result.exit_code == 8
    assert "schema_outdated" in result.stderr
    assert "armarius init" in result.stderr


def test_a_missing_data_folder_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    result = Cli(Settings(data_dir=tmp_path / "empty"))("workspace", "list")
    assert result.exit_code == 7
    assert "There is no Armarius data folder" in result.stderr
    assert "init` to make one there" in result.stderr
    assert not (tmp_path / "empty").exists()


def test_audit_verify_exits_1_on_a_tampered_log(run: Cli) -> None:
    tamper = "UPDATE audit_events SET subject = 'beta' WHERE seq = 1"
    if run.settings.database_migrate_url is None:
        with sqlite3.connect(run.settings.sqlite_path) as connection:
            connection.execute(tamper)
        connection.close()
    else:  # as the owner: the server's role may not update audit events at all
        with psycopg.connect(run.settings.database_migrate_url) as owner:
            owner.execute(tamper)
    result = run("audit", "verify")
    assert result.exit_code == 1
    assert "BROKEN" in result.stdout
