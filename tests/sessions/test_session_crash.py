"""A server killed in the middle of a session query leaves the session consistent after a restart.

A child process opens the application and runs one ``query`` in a session whose budget is one
action; a real function of the controller is wrapped to run and then kill the process with SIGKILL:

* ``provider_answered``: ``ResearchService.run`` returned (the provider answered), before the
  capture file is written;
* ``file_written``: ``write_capture`` wrote the capture file, before the commit;
* ``record_inserted``: inside the commit transaction, right after ``queries.insert_record`` ran
  (the child reports what its own transaction sees: the capture row, the evidence record and the
  consumed reservation), before the commit.

After each kill a fresh ``open_app`` (the restart) finds no evidence record, no capture row and no
used budget; ``verify`` reports the dead query's reservation as interrupted and, when the file had
been written, that file as ``extra_file``, nothing else. The next touch of the session (``show``, or
the next ``query``) releases the reservation, because its holder's process is gone, with a
``session.reservations_released`` audit event; the whole budget is then available again, and a new
query succeeds.

A holder on another host is not judged by its process: its reservation stays while its lease runs
(the unit is ``running``, the budget stays spent) and is released once the service clock passes the
lease.

On SQLite the parent closes its connections first and the child keeps a tiny page cache, so the
commit transaction's uncommitted pages reach the WAL before the kill (tests/crash_child.py, as in the
draft crash test).
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.audit import chain as audit
from armarius.config import Settings
from armarius.errors import BudgetExhausted
from armarius.store import iso_utc
from tests.crash_child import PRELUDE, run_child
from tests.helpers import OwnerSQL
from tests.sessions.conftest import Clock, Lab

SEARCH = {"kind": "source.search", "text": "def "}
READ = {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2}
FREE = {"total": 1, "used": 0, "running": 0, "held": 0, "left": 1}

CHILD = PRELUDE + r"""
from armarius.research.captures import verify_capture
from armarius.research.service import ResearchService
from armarius.sessions import queries, service
from armarius.sessions.holders import current_holder

folder = app.sessions.session_folder(agent.workspace, job["session"])
seen = {"pid": os.getpid(), "holder": current_holder()}


def die(**more):
    seen.update(more)
    report_and_die(seen)


real_run = ResearchService.run


def run_then_die(self, request):
    answer = real_run(self, request)
    seen["capture"] = answer.capture.id
    if job["kill"] == "provider_answered":
        die(folder_exists=folder.exists())
    return answer


real_write = service.write_capture


def write_then_die(target, capture, spares=None, **options):
    path = real_write(target, capture, spares, **options)
    seen["wal_before_commit"] = wal_size()
    if job["kill"] == "file_written":
        die(file=path.name, intact=verify_capture(path))
    return path


real_insert = queries.insert_record


def insert_then_die(tx, session_id, **kwargs):
    seq = real_insert(tx, session_id, **kwargs).seq
    workspace = tx.require_workspace()
    die(seq=seq, inside={
        "records": tx.all("SELECT seq, capture_id FROM evidence_records WHERE workspace_id = ? AND session_id = ?",
                          (workspace, session_id)),
        "captures": tx.scalar("SELECT count(*) AS n FROM captures WHERE workspace_id = ? AND capture_id = ?",
                              (workspace, kwargs["capture_id"])),
        "reservations": tx.all("SELECT state, holder FROM session_reservations WHERE workspace_id = ? "
                               "AND session_id = ?", (workspace, session_id)),
        "used": tx.scalar("SELECT used FROM sessions WHERE workspace_id = ? AND id = ?", (workspace, session_id)),
    }, wal_grew=wal_size() > seen.pop("wal_before_commit"))


ResearchService.run = run_then_die
service.write_capture = write_then_die
queries.insert_record = insert_then_die
app.sessions.query(agent, job["session"], job["request"])
print("query returned: the process was not killed", flush=True)
"""


def _run_child(lab: Lab, session: int, kill: str) -> dict[str, Any]:
    settings = lab.app.settings
    assert settings.research_config is not None
    seen = run_child(settings, {"agent_token": lab.team.agent_token, "session": session, "request": SEARCH,
                                "kill": kill}, CHILD)
    # The reservation names the dead process as its holder.
    assert seen["holder"].startswith(f"{socket.gethostname()}:{seen['pid']}:")
    return seen


def _open_and_crash(app: Armarius, lab: Lab, kill: str) -> tuple[int, dict[str, Any]]:
    """A session with a budget of one action, and a child killed at ``kill`` in a query of it."""
    session = lab.app.sessions.open(lab.team.agent, "What does the crash leave behind?", budget=1)["session"]
    if lab.app.database.dialect == "sqlite":
        # The child is then the only connection (the parent's next ones open afresh).
        app.database.close()
        lab.app.database.close()
    return session, _run_child(lab, session, kill)


def _stored(settings: Settings, workspace: int, session: int) -> dict[str, Any]:
    """What the store holds of the session, read as the owner past Armarius."""
    with OwnerSQL(settings) as sql:
        state: dict[str, Any] = {
            "used": sql.rows("SELECT used FROM sessions WHERE id = ?", (session,))[0][0],
            "records": sql.rows("SELECT seq, capture_id FROM evidence_records WHERE session_id = ? ORDER BY seq",
                                (session,)),
            "captures": sql.rows("SELECT capture_id FROM captures WHERE workspace_id = ? ORDER BY capture_id",
                                 (workspace,)),
            "reservations": sql.rows("SELECT id, state, holder FROM session_reservations WHERE session_id = ? "
                                     "ORDER BY id", (session,)),
            "queries": sql.rows("SELECT count(*) FROM audit_events WHERE workspace_id = ? AND action = ?",
                                (workspace, "research.query"))[0][0],
            "released": [(actor, json.loads(details)) for actor, details in sql.rows(
                "SELECT actor, details FROM audit_events WHERE workspace_id = ? AND action = ? ORDER BY seq",
                (workspace, "session.reservations_released"))],
        }
        if settings.database_url is None:
            state["integrity"] = sql.rows("PRAGMA integrity_check")
    return state


def _files(folder: Path) -> list[str]:
    """Every entry of the capture folder, hidden temporary files included."""
    return sorted(os.listdir(folder)) if folder.exists() else []


def _chain_holds(app: Armarius, workspace: int) -> None:
    _checked, broken = audit.verify_chain(app.database, workspace)
    assert broken is None, broken


@pytest.mark.parametrize("kill", ["provider_answered", "file_written", "record_inserted"])
def test_a_query_killed_before_its_commit_leaves_the_session_consistent(app: Armarius, lab: Lab, kill: str) -> None:
    session, seen = _open_and_crash(app, lab, kill)
    settings, workspace = lab.app.settings, lab.team.agent.workspace_id
    sqlite = settings.database_url is None
    capture = seen["capture"]
    orphan = f"{capture}.json"
    written = kill != "provider_answered"

    # What the dead process had done (or seen inside its own transaction).
    if kill == "provider_answered":
        assert seen["folder_exists"] is False
    elif kill == "file_written":
        assert (seen["file"], seen["intact"]) == (orphan, True)
    else:
        assert seen["seq"] == 1
        assert seen["inside"] == {"records": [{"seq": 1, "capture_id": capture}], "captures": 1,
                                  "reservations": [{"state": "consumed", "holder": seen["holder"]}], "used": 1}
        assert seen["wal_grew"] is sqlite  # the dead transaction's pages reached the WAL
        if sqlite:
            assert Path(f"{settings.sqlite_path}-wal").stat().st_size > 0

    restarted = open_app(settings)  # the restart
    try:
        sessions = restarted.sessions
        agent = restarted.directory.authenticate_token(lab.team.agent_token)
        human = restarted.directory.authenticate_password("alpha-human", lab.team.human_password, workspace="alpha")
        folder = sessions.session_folder(agent.workspace, session)

        # Nothing of the query committed: no record, no capture row, no used budget; its reservation
        # is still there, held by the dead process.
        stored = _stored(settings, workspace, session)
        (reservation, state, holder), = stored.pop("reservations")
        assert (state, holder) == ("reserved", seen["holder"])
        assert stored == {"used": 0, "records": [], "captures": [], "queries": 0, "released": [],
                          **({"integrity": [("ok",)]} if sqlite else {})}
        assert _files(folder) == ([orphan] if written else [])  # no temporary file left either

        # Verify names every trace of it: the interrupted reservation and the file the store does not know.
        extra = [{"problem": "extra_file", "file": orphan}] if written else []
        report = sessions.verify(agent, session)
        assert (report["ok"], report["evidence_records"], report["captures"]) == (False, 0, 0)
        assert report["problems"] == [*extra, {"problem": "interrupted_reservation", "reservation": reservation}]

        # The next touch releases the reservation, because its holder's process is gone.
        if kill == "provider_answered":  # touched by the next query, which needs the released unit
            answer = sessions.query(agent, session, SEARCH)
            assert (answer["evidence"], answer["capture"], answer["budget_left"]) == (1, capture, 0)
        else:
            shown = sessions.show(agent, session)
            assert shown["budget"] == FREE
            assert shown["evidence"]["records"] == 0
        stored = _stored(settings, workspace, session)
        assert stored["reservations"][0] == (reservation, "released", seen["holder"])
        assert stored["released"] == [("agent:alpha-agent", {"session": session, "reservations": [reservation],
                                                              "why": "interrupted"})]
        assert sessions.verify(agent, session)["problems"] == extra  # the file, and only the file

        if kill == "file_written":
            # The same query again writes the same capture: the orphan becomes its file.
            answer = sessions.query(agent, session, SEARCH)
            assert (answer["evidence"], answer["capture"], answer["budget_left"]) == (1, capture, 0)
        elif kill == "record_inserted":
            # Another query: the orphan stays one; rebuild reports it, and it may be removed.
            answer = sessions.query(agent, session, READ)
            assert (answer["evidence"], answer["budget_left"]) == (1, 0)
            assert answer["capture"] != capture
            assert sessions.verify(agent, session)["problems"] == extra
            rebuilt = sessions.rebuild_files(human, session)
            assert (rebuilt["restored"], rebuilt["extra_files"]) == ([], [orphan])
            (folder / orphan).unlink()
        report = sessions.verify(agent, session)
        assert (report["ok"], report["evidence_records"], report["captures"]) == (True, 1, 1), report
        assert _files(folder) == [f"{answer['capture']}.json"]
        assert sessions.show(agent, session)["budget"] == {"total": 1, "used": 1, "running": 0, "held": 0,
                                                           "left": 0}
        stored = _stored(settings, workspace, session)
        assert [state for _id, state, _holder in stored["reservations"]] == ["released", "consumed"]
        assert (stored["used"], stored["records"], stored["captures"], stored["queries"]) == (
            1, [(1, answer["capture"])], [(answer["capture"],)], 1)
        assert len(stored["released"]) == 1
        if sqlite:
            assert stored["integrity"] == [("ok",)]
        _chain_holds(restarted, workspace)
    finally:
        restarted.close()


def test_a_reservation_held_on_another_host_is_released_only_when_its_lease_ends(app: Armarius, lab: Lab) -> None:
    session, seen = _open_and_crash(app, lab, "provider_answered")
    settings, workspace = lab.app.settings, lab.team.agent.workspace_id
    foreign = f"otherhost:{seen['pid']}:x"  # the dead child's pid, but on a host this server cannot look into
    with OwnerSQL(settings) as sql:
        (reservation, lease), = sql.rows("SELECT id, lease_until FROM session_reservations WHERE session_id = ?",
                                         (session,))
        assert sql.execute("UPDATE session_reservations SET holder = ? WHERE id = ?", (foreign, reservation)) == 1
    lease_until = datetime.fromisoformat(lease.replace("Z", "+00:00"))

    restarted = open_app(settings)
    try:
        clock = Clock(datetime.now(UTC))
        restarted.sessions.clock = clock
        sessions = restarted.sessions
        agent = restarted.directory.authenticate_token(lab.team.agent_token)
        assert lease_until > clock.now

        def still_running() -> None:
            shown = sessions.show(agent, session)
            assert shown["budget"] == {"total": 1, "used": 0, "running": 1, "held": 0, "left": 0}
            stored = _stored(settings, workspace, session)
            assert stored["reservations"] == [(reservation, "reserved", foreign)]
            assert stored["released"] == []

        # While its lease runs the query may still be running over there: nothing is released, the unit
        # stays spent (the next query is refused and releases nothing either), and verify has no complaint.
        still_running()
        with pytest.raises(BudgetExhausted) as refused:
            sessions.query(agent, session, READ)
        assert refused.value.details == {"session": session, "budget": 1, "used": 0, "running": 1}
        still_running()
        assert sessions.verify(agent, session)["ok"]
        clock.now = lease_until - timedelta(microseconds=1)
        still_running()
        assert sessions.verify(agent, session)["ok"]

        # The lease has ended: verify reports it, the next touch releases it, and the budget is back.
        clock.now = lease_until
        assert sessions.verify(agent, session)["problems"] == [
            {"problem": "interrupted_reservation", "reservation": reservation}]
        assert sessions.show(agent, session)["budget"] == FREE
        stored = _stored(settings, workspace, session)
        assert stored["reservations"] == [(reservation, "released", foreign)]
        assert stored["released"] == [("agent:alpha-agent", {"session": session, "reservations": [reservation],
                                                              "why": "interrupted"})]
        assert sessions.query(agent, session, READ)["budget_left"] == 0
        assert sessions.verify(agent, session)["ok"]
        _chain_holds(restarted, workspace)
    finally:
        restarted.close()


def test_a_live_lease_on_another_host_is_not_released(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "Is a query elsewhere left alone?", budget=1)["session"]
    lease_until = lab.clock.now + timedelta(hours=1)
    with OwnerSQL(lab.app.settings) as sql:  # a query running on another server of the same store
        sql.execute("INSERT INTO session_reservations (workspace_id, session_id, state, actor, holder, lease_until, "
                    "created_at) VALUES (?, ?, 'reserved', ?, ?, ?, ?)",
                    (agent.workspace_id, session, agent.audit_name, f"otherhost:{os.getpid()}:x",
                     iso_utc(lease_until), iso_utc(lab.clock.now)))
    lab.clock.advance(3599)
    for _ in range(2):
        shown = sessions.show(agent, session)
        assert shown["status"] == "open"
        assert shown["budget"] == {"total": 1, "used": 0, "running": 1, "held": 0, "left": 0}
        with pytest.raises(BudgetExhausted):
            sessions.query(agent, session, READ)
        assert sessions.verify(agent, session)["ok"]
        sessions.history(agent, session)
    stored = _stored(lab.app.settings, agent.workspace_id, session)
    assert [state for _id, state, _holder in stored["reservations"]] == ["reserved"]
    assert stored["released"] == []
