"""The repair commands through the real CLI (click's runner) on a real data folder, on both engines: a human
prepares, shows, decides and retries with their own credentials; every text an agent wrote is revealed."""

from __future__ import annotations

import json
from typing import Any

from click.testing import Result

from armarius.config import Settings
from armarius.memory.service import RememberRequest
from armarius.repairs import compare
from armarius.textview import REVEAL_NOTE
from tests.cli.test_cli import Cli
from tests.repairs.conftest import (
    ADMINS,
    CORRECT_BODY,
    ENTRY,
    ENTRY_BODY,
    MARKERS,
    SEPARATORS,
    UNIT,
    Desk,
    costly_repair,
)

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


def test_repair_show_marks_every_line_separator_inside_its_line(desk: Desk) -> None:
    """As the draft page and the repair page show them: split at line feeds only, every other separator marked."""
    slug = "ops/wire-instructions"
    current = "".join(f"Pay account 1234.{char}Pay account 6666.\n" for char in SEPARATORS)
    desk.app.memory.remember(desk.agent, RememberRequest(slug, "Wire instructions", current, tags=[]))
    session = desk.open_session()
    result = "".join(f"Pay account 1234.{char}Pay account 7777.\n" for char in SEPARATORS)
    repair = str(desk.prepare(session, desk.alternative(result, name=slug, title="Wire instructions"))["repair"])
    shown = run(desk.app.settings, "memory", "repair-show", repair)
    assert shown.exit_code == 0, shown.stderr
    assert not [char for char in SEPARATORS if char in shown.stdout]
    lines = shown.stdout.split("\n")
    for char, marker in MARKERS.items():
        assert f"   -Pay account 1234.{marker}Pay account 6666." in lines, repr(char)
        assert f"   +Pay account 1234.{marker}Pay account 7777." in lines, repr(char)
        assert f"   | Pay account 1234.{marker}Pay account 7777." in lines, repr(char)
    assert REVEAL_NOTE in shown.stdout
    own = desk.open_session(owner=desk.human)
    target = run(desk.app.settings, "memory", "repair-target", slug, "--session", str(own))
    assert target.exit_code == 0, target.stderr
    assert not [char for char in SEPARATORS if char in target.stdout]
    assert f"Pay account 1234.{MARKERS[chr(0x2028)]}Pay account 6666." in target.stdout.split("\n")


def test_repair_show_marks_an_alternative_that_only_adds_the_final_line_break(desk: Desk) -> None:
    repair = str(desk.prepare(desk.open_session(), desk.alternative(ENTRY_BODY + "\n"))["repair"])
    shown = run(desk.app.settings, "memory", "repair-show", repair)
    assert f"   -{ENTRY_BODY}\n   \\ No line break at the end\n   +{ENTRY_BODY}\n" in shown.stdout
    assert "   Resulting content in full (ends with a line break):" in shown.stdout


def test_repair_show_of_a_diff_crafted_to_be_costly_prints_both_contents_in_full_instead(desk: Desk) -> None:
    _, repair = costly_repair(desk)
    shown = run(desk.app.settings, "memory", "repair-show", str(repair))
    assert shown.exit_code == 0, shown.stderr
    alternatives = desk.app.repairs.show(desk.admin, repair)["alternatives"]
    contents = [compare.content_lines(item[side]) for item in alternatives for side in ("current", "result")]
    assert len(shown.stdout.split("\n")) < sum(map(len, contents)) + 100, "each content once, no diff"
    assert shown.stdout.count("Too many lines differ or repeat to compare line by line") == 5
    for item in alternatives:
        for side, heading in (("current", "Current content in full"), ("result", "Resulting content in full")):
            block = "\n".join(f"   | {line}" for line in compare.content_lines(item[side]))
            assert f"{heading} (no line break at the end):\n{block}\n" in shown.stdout
