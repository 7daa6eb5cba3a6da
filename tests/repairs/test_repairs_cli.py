"""The repair commands through the real CLI (click's runner) on a real data folder, on both engines: a human
prepares, shows, decides and retries with their own credentials; every text an agent wrote is revealed."""

from __future__ import annotations

import json
from typing import Any

from click.testing import Result

from armarius.config import Settings
from armarius.textview import REVEAL_NOTE
from tests.cli.test_cli import Cli
from tests.repairs.conftest import ADMINS, CORRECT_BODY, ENTRY, UNIT, Desk

PASSWORDS = {"alpha-human": "alpha-correct horse battery", **ADMINS}
RLO = "\u202e"


def run(settings: Settings, *args: str, principal: str = "alpha-human", stdin: str | None = None) -> Result:
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": PASSWORDS[principal]}
    return command(*args, "--workspace", "alpha", "--as", principal, stdin=stdin)


def as_json(settings: Settings, *args: str, principal: str = "alpha-human", stdin: str | None = None) -> Any:
    result = run(settings, "--json", *args, principal=principal, stdin=stdin)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_human_prepares_shows_and_an_administrator_applies(desk: Desk) -> None:
    settings = desk.app.settings
    session = desk.open_session(owner=desk.human)
    target = as_json(settings, "memory", "repair-target", ENTRY, "--session", str(session))
    assert target["revision"] == 1
    alternatives = json.dumps([desk.alternative(), desk.alternative(f"Staging runs on stage-07 {RLO}evil.")])
    prepared = as_json(settings, "memory", "repair-prepare", "--session", str(session), "--conflict",
                       "The deploy log names stage-07.", "--alternatives", "-", stdin=alternatives)
    repair = str(prepared["repair"])
    shown = run(settings, "memory", "repair-show", repair)
    assert shown.exit_code == 0, shown.stderr
    assert "== opt-1: entry deploy/staging-host at revision 1" in shown.stdout
    assert "+Staging moved to host **stage-07**" in shown.stdout  # the diff against the current content
    assert RLO not in shown.stdout  # revealed, never hidden
    assert "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧" in shown.stdout
    assert REVEAL_NOTE in shown.stdout
    assert "memory repair-apply" in shown.stdout
    # An editor may not apply (exit code of not_allowed), an administrator may, taking the session over.
    refused = run(settings, "--json", "memory", "repair-apply", repair, "--option", "opt-1")
    assert refused.exit_code == 4
    assert json.loads(refused.stderr)["error"]["code"] == "not_allowed"
    applied = as_json(settings, "memory", "repair-apply", repair, "--option", "opt-1", "--take-over",
                      principal="alpha-admin")
    assert (applied["status"], applied["applied_revision"]) == ("active", 2)
    assert desk.app.memory.read(desk.agent, ENTRY)["body"] == CORRECT_BODY
    listed = as_json(settings, "memory", "repairs", "--session", str(session))
    assert [(item["repair"], item["status"]) for item in listed] == [(int(repair), "active")]
    text = run(settings, "memory", "repairs", "--status", "active")
    assert "The deploy log names stage-07." in text.stdout
    retried = as_json(settings, "memory", "repair-retry", repair, principal="alpha-admin")
    assert retried["pending_operations"] == []


def test_reject_and_reformulate_from_the_cli(desk: Desk) -> None:
    settings = desk.app.settings
    repair = str(desk.prepare(desk.open_session())["repair"])
    missing = run(settings, "--json", "memory", "repair-reject", repair, "--reformulate")
    assert missing.exit_code == 3
    assert json.loads(missing.stderr)["error"]["details"]["field"] == "comment"
    asked = as_json(settings, "memory", "repair-reject", repair, "--reformulate", "--comment", "Name the account.")
    assert (asked["status"], asked["reformulation_requested"]) == ("rejected", True)
    again = run(settings, "memory", "repair-reject", repair)
    assert again.exit_code == 6
    assert "is rejected, not proposed" in again.stderr


def test_an_evidence_repair_left_pending_and_retried_from_the_cli(desk: Desk) -> None:
    settings = desk.app.settings
    repair = str(desk.prepare(desk.open_session(), desk.unit_alternative())["repair"])
    pending = run(settings, "memory", "repair-apply", repair, "--option", "opt-1", "--take-over",
                  "--continue-pending", principal="alpha-admin")
    assert pending.exit_code == 0, pending.stderr
    assert "pending_activation (activation left pending)" in pending.stdout
    assert "NOT a success" in pending.stdout
    shown = run(settings, "memory", "repair-show", repair, principal="alpha-admin")
    assert "memory repair-retry" in shown.stdout
    done = as_json(settings, "memory", "repair-retry", repair, principal="alpha-admin")
    assert (done["status"], done["published"]) == ("active", True)
    assert desk.app.evidence.current(desk.agent, UNIT).active_revision == 2


def test_an_unknown_repair_is_not_found(desk: Desk) -> None:
    result = run(desk.app.settings, "--json", "memory", "repair-show", "99")
    assert result.exit_code == 5
    assert json.loads(result.stderr)["error"]["details"] == {"repair": 99}
