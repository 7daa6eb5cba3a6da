"""The human's session commands: list, show, resume, take over, budget, close, verify, rebuild-files.
Through the real CLI (click's runner) on a real data folder, on both storage engines; the sessions
are opened and queried by an agent through the real service, over a real git repository."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from armarius.app import Armarius, open_app
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.errors import SessionBlocked
from armarius.research.captures import verify_capture
from armarius.textview import REVEAL_NOTE
from tests.cli.test_cli import Cli
from tests.helpers import OPERATOR, OwnerSQL, Team, make_team
from tests.research.repos import Repo, build_repo, source_entry, write_config

RLO = "\u202e"
SEARCH = {"kind": "source.search", "text": "handle_order"}
FILES = {"kind": "source.files", "substring": "src/"}
PASSWORDS = {"alpha-human": "alpha-correct horse battery", "alpha-admin": "admin correct horse battery",
             "alpha-reader": "reader correct horse battery"}


@dataclass
class Lab:
    app: Armarius
    repo: Repo
    team: Team
    settings: Settings

    def cli(self, *args: str, principal: str = "alpha-human") -> Result:
        """A session command as a human; the data folder names the research configuration, as a
        server's would, so that a missing repository is in the way if anything opened it."""
        command = Cli(self.settings)
        command.env = {**command.env, "ARMARIUS_RESEARCH_CONFIG": "research.toml",
                       "ARMARIUS_PASSWORD": PASSWORDS[principal]}
        return command(*args, "--workspace", "alpha", "--as", principal)

    def json(self, *args: str, principal: str = "alpha-human") -> Any:
        result = self.cli("--json", *args, principal=principal)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    def refused(self, *args: str, principal: str = "alpha-human") -> tuple[int, dict[str, Any]]:
        result = self.cli("--json", *args, principal=principal)
        return result.exit_code, json.loads(result.stderr)["error"]

    def open(self, subject: str = "Why does handle_order fail?", **more: Any) -> int:
        return int(self.app.sessions.open(self.team.agent, subject, **more)["session"])

    def query(self, session_id: int, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.app.sessions.query(self.team.agent, session_id, arguments)

    def move_repo_away(self) -> Path:
        away = self.repo.path.with_name("repo-away")
        self.repo.path.rename(away)
        return away

    def block(self, session_id: int, *, seconds_ago: float = 0) -> None:
        """A failed source blocks the session (at a moment ``seconds_ago`` in the past)."""
        away = self.move_repo_away()
        self.app.sessions.clock = lambda: datetime.now(UTC) - timedelta(seconds=seconds_ago)
        try:
            with pytest.raises(SessionBlocked):
                self.query(session_id, FILES)
        finally:
            self.app.sessions.clock = lambda: datetime.now(UTC)
            away.rename(self.repo.path)


@pytest.fixture
def lab(settings: Settings, tmp_path: Path) -> Iterator[Lab]:
    repo = build_repo(tmp_path / "repo")
    write_config(settings.data_dir / "research.toml", [source_entry(repo)])
    application = open_app(replace(settings, research_config=Path("research.toml")))
    team = make_team(application)
    for name, role in (("alpha-admin", Role.ADMIN), ("alpha-reader", Role.READER)):
        application.directory.add_principal(name, Kind.HUMAN, workspace="alpha", role=role, by=OPERATOR,
                                            password=PASSWORDS[name])
    yield Lab(application, repo, team, settings)
    application.close()


def session_state(settings: Settings) -> tuple[Any, ...]:
    """Sessions, checkpoints, reservations, evidence and the sessions' audit events (human logins may
    add login events)."""
    with OwnerSQL(settings) as sql:
        return (
            sql.rows("SELECT id, owner, status, reason, resume_state, retry_not_before, budget, used, updated_at "
                     "FROM sessions ORDER BY id"),
            sql.rows("SELECT session_id, seq, event, details FROM session_checkpoints ORDER BY session_id, seq"),
            sql.rows("SELECT id, state FROM session_reservations ORDER BY id"),
            sql.rows("SELECT session_id, seq, capture_id FROM evidence_records ORDER BY session_id, seq"),
            sql.rows("SELECT seq, action, subject FROM audit_events WHERE action LIKE ? ORDER BY seq", ("session.%",)),
        )


# Reviewing ----------------------------------------------------------------------------------------


def test_list_and_show_in_text_and_json(lab: Lab) -> None:
    first = lab.open()
    lab.query(first, SEARCH)
    lab.query(first, SEARCH)  # the same answer again: a repeat of record 1
    lab.block(first)
    long_subject = f"Pay{RLO}ment totals drift after the nightly job " + "y" * 80
    second = lab.open(long_subject, budget=7)

    listing = lab.json("sessions", "list")
    assert listing == lab.app.sessions.list_sessions(lab.team.human, everyone=True)
    assert [(s["session"], s["status"]) for s in listing] == [(second, "open"), (first, "blocked")]
    assert [s["session"] for s in lab.json("sessions", "list", "--status", "blocked")] == [first]
    assert lab.json("sessions", "list", "--mine") == []  # the human owns none of them

    text = lab.cli("sessions", "list")
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "OWNER", "BUDGET", "UPDATED", "SUBJECT"]
    assert lines[1].split()[:5] == [str(second), "open", "agent:alpha-agent", "0/7", listing[0]["updated_at"]]
    assert "Pay⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧ment totals drift" in lines[1]
    assert lines[1].endswith("y…")
    assert "y" * 30 not in text.stdout
    assert RLO not in text.stdout
    assert lines[2].split()[:4] == [str(first), "blocked", "(research_unavailable)", "agent:alpha-agent"]
    assert lines[2].split()[4] == "2/50"
    assert REVEAL_NOTE in text.stdout

    history = lab.json("sessions", "show", str(first))
    assert history == lab.app.sessions.history(lab.team.human, first)
    capture = history["evidence"]["records_list"][0]["capture"]
    shown = lab.cli("sessions", "show", str(first))
    assert shown.exit_code == 0, shown.stderr
    out = shown.stdout
    assert f"Session {first}: blocked (research_unavailable)" in out
    assert "Budget:  2 used of 50, 1 held; 47 left" in out
    assert f"Retry not before: {history['retry_not_before']}" in out
    assert '"request": {"kind": "source.files", "substring": "src/"}' in out
    assert f"sessions resume {first} --workspace alpha --as alpha-human" in out
    assert [line.split()[1] for line in out.split("Checkpoints:\n")[1].split("\n\n")[0].splitlines()[1:]] == [
        "opened", "blocked"]
    records = out.split("Evidence: 2 records, 1 repeat\n")[1].splitlines()
    assert records[1].split()[:4] == ["1", "source.search", capture, "agent:alpha-agent"]
    assert records[2].split()[:4] == ["2", "source.search", capture, "1"]

    missing = lab.cli("sessions", "show", "999")
    assert missing.exit_code == 5
    assert "sessions list" in missing.stderr


# Human decisions ----------------------------------------------------------------------------------


def test_resume_waits_for_the_retry_time_and_only_a_manager_may(lab: Lab) -> None:
    early, due = lab.open(), lab.open()
    lab.block(early)
    lab.block(due, seconds_ago=120)  # blocked two minutes ago: its retry time (60 s) has passed
    before = session_state(lab.settings)

    code, error = lab.refused("sessions", "resume", str(early))
    assert (code, error["code"]) == (6, "conflict")
    assert 0 < error["details"]["wait_seconds"] <= 60
    code, error = lab.refused("sessions", "resume", str(due), principal="alpha-reader")
    assert (code, error["code"]) == (4, "not_allowed")
    assert session_state(lab.settings) == before

    resumed = lab.json("sessions", "resume", str(due), "--note", "the repository is back")
    assert (resumed["status"], resumed["budget"]["held"]) == ("open", 1)
    checkpoint = lab.app.sessions.history(lab.team.human, due)["checkpoints"][-1]
    assert (checkpoint["event"], checkpoint["actor"], checkpoint["details"]["note"]) == (
        "resumed", "human:alpha-human", "the repository is back")
    # The agent goes on; the action the failed query held is the one its next query uses.
    assert lab.query(due, FILES)["budget_left"] == 49
    assert lab.app.sessions.show(lab.team.human, early)["status"] == "blocked"


def test_takeover_budget_and_close(lab: Lab) -> None:
    session = lab.open(budget=5)
    code, error = lab.refused("sessions", "takeover", str(session))  # an editor may not take over
    assert (code, error["code"]) == (4, "not_allowed")

    taken = lab.json("sessions", "takeover", str(session), principal="alpha-admin")
    assert taken["owner"] == "human:alpha-admin"
    raised = lab.cli("sessions", "budget", str(session), "80")
    assert raised.exit_code == 0, raised.stderr
    assert f"Session {session}'s budget is now 80 actions" in raised.stdout
    code, error = lab.refused("sessions", "budget", str(session), "60")  # never lower
    assert (code, error["code"]) == (3, "invalid_input")

    closed = lab.json("sessions", "close", str(session), "--note", "answered elsewhere")
    assert (closed["status"], closed["owner"], closed["budget"]["total"]) == ("closed", "human:alpha-admin", 80)
    events = [(c["event"], c["actor"]) for c in lab.app.sessions.history(lab.team.human, session)["checkpoints"]]
    assert events == [("opened", "agent:alpha-agent"), ("taken_over", "human:alpha-admin"),
                      ("budget_raised", "human:alpha-human"), ("closed", "human:alpha-human")]
    code, error = lab.refused("sessions", "budget", str(session), "90")
    assert (code, error["code"]) == (13, "session_closed")


# Evidence files -----------------------------------------------------------------------------------


def test_verify_and_rebuild_files_need_no_repository(lab: Lab) -> None:
    session = lab.open()
    lab.query(session, SEARCH)
    lab.query(session, FILES)
    ok = lab.cli("sessions", "verify", str(session))
    assert ok.exit_code == 0, ok.stderr
    assert "OK: the records, the store and the files agree." in ok.stdout

    lab.move_repo_away()  # from here on no source can be read, and the configuration names a missing folder
    folder = lab.app.sessions.session_folder("alpha", session)
    altered, deleted = sorted(folder.glob("*.json"))
    stored = {path.name: path.read_bytes() for path in (altered, deleted)}
    altered.write_bytes(stored[altered.name] + b" ")
    deleted.unlink()
    extra = folder / f"{'0' * 64}.json"
    extra.write_text("{}", encoding="utf-8")

    report = lab.cli("--json", "sessions", "verify", str(session))
    assert report.exit_code == 1, report.stderr
    problems = json.loads(report.stdout)["problems"]
    assert sorted((p["problem"], p["file"]) for p in problems) == sorted([
        ("modified_file", altered.name), ("missing_file", deleted.name), ("extra_file", extra.name)])
    text = lab.cli("sessions", "verify", str(session))
    assert text.exit_code == 1
    assert f"MODIFIED FILE: {altered.name}" in text.stdout
    assert f"MISSING FILE: {deleted.name}" in text.stdout
    assert f"EXTRA FILE: {extra.name}" in text.stdout
    assert "3 problems found." in text.stdout

    rebuilt = lab.cli("sessions", "rebuild-files", str(session))
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert "Restored 2 of 2 capture files" in rebuilt.stdout
    assert f"  {extra.name}" in rebuilt.stdout.split("left as they are):")[1]
    assert {path.name: path.read_bytes() for path in (altered, deleted)} == stored
    assert verify_capture(altered)
    assert verify_capture(deleted)
    assert extra.exists()  # never deleted: a person decides what it is

    after = lab.json("sessions", "rebuild-files", str(session))
    assert (after["restored"], after["extra_files"]) == ([], [extra.name])
    extra.unlink()
    assert lab.json("sessions", "verify", str(session))["ok"] is True

    # A link where a capture file belongs is read by nobody; the text says what to do about it.
    stray = lab.app.sessions.evidence_dir / "stray.json"
    stray.write_bytes(stored[deleted.name])
    deleted.unlink()
    deleted.symlink_to(stray)
    linked = lab.cli("sessions", "verify", str(session))
    assert linked.exit_code == 1
    assert f"NOT A FILE: {deleted.name}: a link or something other than a file has the capture's name" in linked.stdout
    assert "1 problem found." in linked.stdout
