"""The human's evidence commands: list, show, create, edit, review, activate, from-capture, restore. Through the
real CLI (click's runner) on a real data folder, on both storage engines; the captures come from a session
an agent ran over a real git repository, which is moved away before the CLI runs: nothing fetches again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from armarius.app import Armarius, open_app
from armarius.config import Settings
from armarius.evidence.model import fingerprint
from armarius.textview import REVEAL_NOTE, short_fingerprint
from tests.cli.test_cli import Cli
from tests.evidence.conftest import ADMIN_PASSWORD, add_admin, state
from tests.helpers import Team, make_team
from tests.research.repos import Repo, build_repo, source_entry, write_config

CYRILLIC_A = "\u0430"  # looks like a latin a
NAME = "deploy/staging-host"
PASSWORDS = {"alpha-human": "alpha-correct horse battery", "alpha-admin": ADMIN_PASSWORD}


@dataclass
class Lab:
    app: Armarius
    repo: Repo
    team: Team
    settings: Settings

    def cli(self, *args: str, principal: str = "alpha-human", stdin: str | None = None) -> Result:
        command = Cli(self.settings)
        command.env = {**command.env, "ARMARIUS_RESEARCH_CONFIG": "research.toml",
                       "ARMARIUS_PASSWORD": PASSWORDS[principal]}
        return command(*args, "--workspace", "alpha", "--as", principal, stdin=stdin)

    def json(self, *args: str, principal: str = "alpha-human", stdin: str | None = None) -> Any:
        result = self.cli("--json", *args, principal=principal, stdin=stdin)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    def refused(self, *args: str, principal: str = "alpha-human") -> tuple[int, dict[str, Any]]:
        result = self.cli("--json", *args, principal=principal)
        return result.exit_code, json.loads(result.stderr)["error"]

    def path(self, name: str = NAME) -> Path:
        return self.app.evidence.unit_path("alpha", name)


@pytest.fixture
def lab(settings: Settings, tmp_path: Path) -> Iterator[Lab]:
    repo = build_repo(tmp_path / "repo")
    write_config(settings.data_dir / "research.toml", [source_entry(repo)])
    application = open_app(replace(settings, research_config=Path("research.toml")))
    team = make_team(application)
    add_admin(application)
    yield Lab(application, repo, team, settings)
    application.close()


def test_create_show_review_activate_in_text_and_json(lab: Lab) -> None:
    created = lab.json("evidence", "create", NAME, "--title", f"Where st{CYRILLIC_A}ging runs", "--body",
                       "Staging runs on zeppelin.\n", "--reason", "ops call")
    assert created == {"unit": NAME, "revision": 1, "status": "edited", "changed": True, "path": str(lab.path()),
                       "fingerprint": fingerprint(lab.path().read_bytes())}

    listing = lab.json("evidence", "list")
    assert listing == lab.app.evidence.list_units(lab.team.human)
    text = lab.cli("evidence", "list")
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["UNIT", "STATUS", "REV", "REVIEWED", "ACTIVE", "TITLE"]
    assert lines[1].split()[:3] == [NAME, "edited", "1"]
    assert "st⟦U+0430 CYRILLIC SMALL LETTER A⟧ging" in lines[1]
    assert CYRILLIC_A not in text.stdout
    assert REVEAL_NOTE in text.stdout
    assert lab.json("evidence", "list", "--status", "active") == {"units": []}

    shown = lab.json("evidence", "show", NAME)
    assert shown == lab.app.evidence.show(lab.team.human, NAME)
    text = lab.cli("evidence", "show", NAME)
    assert text.exit_code == 0, text.stderr
    assert f"File: {lab.path()} holds revision 1" in text.stdout
    assert short_fingerprint(created["fingerprint"]) in text.stdout
    assert "Staging runs on zeppelin." in text.stdout
    assert "Review it: " in text.stdout
    assert f"evidence review {NAME} --revision 1 --workspace alpha --as alpha-human" in text.stdout

    reviewed = lab.cli("evidence", "review", NAME, "--revision", "1")
    assert reviewed.exit_code == 0, reviewed.stderr
    assert reviewed.stdout.startswith(f"{NAME} revision 1 is reviewed.")
    assert "Activate it: " in reviewed.stdout
    assert lab.json("evidence", "review", NAME, "--revision", "1")["changed"] is False

    before = state(lab.app, "evidence.%")
    code, error = lab.refused("evidence", "activate", NAME, "--revision", "1")  # an editor
    assert (code, error["code"], error["details"]) == (4, "not_allowed", {"permission": "evidence.manage"})
    assert state(lab.app, "evidence.%") == before
    activated = lab.cli("evidence", "activate", NAME, "--revision", "1", principal="alpha-admin")
    assert activated.exit_code == 0, activated.stderr
    assert "is active" in activated.stdout
    assert lab.json("evidence", "activate", NAME, "--revision", "1", principal="alpha-admin") == {
        "unit": NAME, "revision": 1, "status": "active", "fingerprint": created["fingerprint"], "changed": False}
    assert [hit["unit"] for hit in lab.app.memory.recall(lab.team.agent, "zeppelin")["evidence"]] == [NAME]
    searched = lab.json("memory", "search", "zeppelin")
    assert searched["evidence"][0]["kind"] == "evidence"


def test_create_and_edit_take_the_body_from_a_file_or_standard_input(lab: Lab, tmp_path: Path) -> None:
    body_file = tmp_path / "body.md"
    body_file.write_text("From a file: zeppelin.\n", encoding="utf-8")
    lab.json("evidence", "create", NAME, "--title", "Staging", "--body-file", str(body_file))
    assert lab.app.evidence.current(lab.team.human, NAME).body == "From a file: zeppelin.\n"
    lab.json("evidence", "edit", NAME, "--expected-revision", "1", "--body-file", "-", stdin="From stdin.\n")
    assert lab.app.evidence.current(lab.team.human, NAME).body == "From stdin.\n"
    # No body: the file as the human edited it.
    lab.path().write_bytes(lab.path().read_bytes() + b"Edited in an editor.\n")
    edited = lab.cli("evidence", "edit", NAME, "--expected-revision", "2", "--reason", "typo")
    assert edited.exit_code == 0, edited.stderr
    assert edited.stdout.startswith(f"{NAME} revision 3 is written to {lab.path()}.")
    assert lab.app.evidence.current(lab.team.human, NAME).body == "From stdin.\nEdited in an editor.\n"
    unchanged = lab.cli("evidence", "edit", NAME, "--expected-revision", "3")
    assert unchanged.stdout.strip() == f"{NAME} is unchanged at revision 3."
    history = lab.json("evidence", "show", NAME)["revisions"]
    assert [(r["revision"], r["via"], r["reason"]) for r in history] == [
        (1, "created", None), (2, "edited", None), (3, "edited", "typo")]
    assert lab.json("evidence", "show", NAME, "--revision", "1")["body"] == "From a file: zeppelin.\n"

    body_file.write_bytes(b"\xff not utf-8")
    assert lab.cli("evidence", "create", "other", "--title", "T", "--body-file", str(body_file)).exit_code == 2
    assert lab.cli("evidence", "create", "other", "--title", "T").exit_code == 2
    assert lab.cli("evidence", "create", "other", "--title", "T", "--body", "b", "--body-file",
                   str(body_file)).exit_code == 2


def test_refusals_say_what_to_do_and_change_nothing(lab: Lab) -> None:
    lab.json("evidence", "create", NAME, "--title", "Staging", "--body", "zeppelin\n")
    before = state(lab.app, "evidence.%")
    code, error = lab.refused("evidence", "show", "nothing/here")
    assert (code, error["code"]) == (5, "not_found")
    assert "evidence list" in error["message"]
    code, error = lab.refused("evidence", "review", NAME, "--revision", "2")
    assert (code, error["code"], error["details"]["current_revision"]) == (6, "conflict", 1)
    code, error = lab.refused("evidence", "create", NAME, "--title", "Again", "--body", "b")
    assert (code, error["code"]) == (6, "already_exists")
    code, error = lab.refused("evidence", "create", "other", "--title", "T", "--body", "x" * (1_048_576 + 1))
    assert (code, error["code"], error["details"]["field"]) == (3, "invalid_input", "body")
    lab.path().write_bytes(b"no front matter\n")
    code, error = lab.refused("evidence", "edit", NAME, "--expected-revision", "1")
    assert (code, error["code"], error["details"]["field"]) == (3, "invalid_input", "file")
    code, error = lab.refused("evidence", "review", NAME, "--revision", "1")
    assert (code, error["code"], error["details"]["file"]) == (6, "conflict", "differs")
    assert str(lab.path()) in error["message"]
    text = lab.cli("evidence", "review", NAME, "--revision", "1")
    assert text.exit_code == 6
    assert text.stderr.startswith("error [conflict]: The file ")
    after = state(lab.app, "evidence.%")
    after["files"] = before["files"]  # only the file the test itself changed differs
    assert after == before


def test_restore_writes_the_latest_revision_back(lab: Lab) -> None:
    lab.json("evidence", "create", NAME, "--title", "Staging", "--body", "zeppelin\n")
    original = lab.path().read_bytes()
    lab.path().write_bytes(original + b"Changed outside.\n")
    text = lab.cli("evidence", "show", NAME)
    assert "differs from revision 1" in text.stdout
    assert f"evidence restore {NAME}" in text.stdout
    restored = lab.cli("evidence", "restore", NAME)
    assert restored.exit_code == 0, restored.stderr
    assert restored.stdout.strip() == f"{lab.path()} differed from revision 1; it holds it again."
    assert lab.path().read_bytes() == original
    assert lab.json("evidence", "restore", NAME) == {"unit": NAME, "revision": 1, "path": str(lab.path()),
                                                     "restored": False}


def test_from_capture_makes_a_unit_of_a_sessions_captures_without_the_source(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "Where are orders handled?")["session"]
    capture = sessions.query(agent, session, {"kind": "source.search", "text": "handle_order"})["capture"]
    lab.repo.path.rename(lab.repo.path.with_name("repo-away"))  # nothing may fetch again
    made = lab.json("evidence", "from-capture", "orders/handler", "--session", str(session), "--capture", capture,
                    "--title", "Order handling")
    assert (made["unit"], made["revision"], made["status"]) == ("orders/handler", 1, "edited")
    shown = lab.json("evidence", "show", "orders/handler")
    assert shown["provenance"] == [capture]
    assert shown["title"] == "Order handling"
    assert [step["via"] for step in shown["lineage"]] == ["capture"]
    text = lab.cli("evidence", "from-capture", "orders/all", "--session", str(session))
    assert text.exit_code == 0, text.stderr
    assert f"from session {session}'s captures" in text.stdout
    assert lab.json("evidence", "show", "orders/all")["title"] == f"Evidence from research session {session}"
    code, error = lab.refused("evidence", "from-capture", "orders/none", "--session", str(session + 1))
    assert (code, error["code"]) == (5, "not_found")
