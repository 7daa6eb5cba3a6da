"""Sessions on both engines: every transition and every refusal, and that a refusal changes nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from armarius.auth.permissions import Kind, Role
from armarius.errors import (
    ArmariusError,
    BudgetExhausted,
    Conflict,
    InvalidInput,
    NotAllowed,
    NotFound,
    ResearchUnavailable,
    SessionBlocked,
    SessionClosed,
)
from armarius.research.captures import verify_capture
from armarius.sessions import queries
from armarius.sessions.holders import current_holder
from armarius.store import iso_utc
from tests.helpers import OPERATOR, OwnerSQL, make_team
from tests.sessions.conftest import Lab

SEARCH = {"kind": "source.search", "text": "def "}
READ = {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2}
TABLES = ("sessions", "session_checkpoints", "session_reservations", "evidence_records", "captures", "audit_events")


def snapshot(lab: Lab) -> dict[str, Any]:
    """Every session table's rows (and the audit log's length): what a refusal must leave as it was."""
    with OwnerSQL(lab.app.settings) as sql:
        state: dict[str, Any] = {table: sorted(map(repr, sql.rows(f"SELECT * FROM {table}"))) for table in TABLES[:-1]}
        state["audit_events"] = sql.count("audit_events")
    return state


@contextmanager
def changes_nothing(lab: Lab, error: type[ArmariusError]) -> Iterator[list[ArmariusError]]:
    before = snapshot(lab)
    caught: list[ArmariusError] = []
    with pytest.raises(error) as raised:
        yield caught
    caught.append(raised.value)
    assert snapshot(lab) == before


def audit_actions(lab: Lab) -> list[tuple[str, str, dict[str, Any]]]:
    with OwnerSQL(lab.app.settings) as sql:
        rows = sql.rows("SELECT actor, action, details FROM audit_events WHERE action LIKE ? OR action = ? "
                        "ORDER BY workspace_id, seq", ("session.%", "research.query"))
    return [(actor, action, json.loads(details)) for actor, action, details in rows]


def block_by_moving_the_repository(lab: Lab, session: int) -> SessionBlocked:
    moved = lab.repo.path.with_name("moved-away")
    lab.repo.path.rename(moved)
    try:
        with pytest.raises(SessionBlocked) as blocked:
            lab.app.sessions.query(lab.team.agent, session, {"kind": "source.search", "text": "import"})
    finally:
        moved.rename(lab.repo.path)
    return blocked.value


def test_an_answer_lands_as_evidence_and_a_repeat_is_recorded_as_a_repeat(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    opened = sessions.open(agent, "Where is the parser registered?", budget=3)
    session = opened["session"]
    assert opened["status"] == "open"
    assert opened["budget"] == {"total": 3, "used": 0, "running": 0, "held": 0,
                                                               "left": 3}
    first = sessions.query(agent, session, SEARCH)
    again = sessions.query(agent, session, SEARCH)
    assert (first["evidence"], first["repeat_of"], first["budget_left"]) == (1, None, 2)
    assert (again["evidence"], again["repeat_of"], again["budget_left"]) == (2, 1, 1)
    assert again["capture"] == first["capture"]
    assert again["result"] == first["result"]
    file = sessions.session_folder(agent.workspace, session) / f"{first['capture']}.json"
    assert verify_capture(file)
    assert json.loads(file.read_bytes())["request"] == SEARCH
    shown = sessions.show(agent, session)
    assert shown["evidence"]["records"] == 2
    assert shown["evidence"]["repeats"] == 1
    assert [record["capture"] for record in shown["evidence"]["latest"]] == [first["capture"]] * 2
    with OwnerSQL(lab.app.settings) as sql:
        assert sql.count("captures") == 1
        assert sql.rows("SELECT state FROM session_reservations ORDER BY id") == [("consumed",), ("consumed",)]
    queries = [details for _actor, action, details in audit_actions(lab) if action == "research.query"]
    assert [(event["session"], event["evidence"], event["new"], event.get("repeat_of")) for event in queries] == [
        (session, 1, True, None), (session, 2, False, 1)]
    assert sessions.verify(agent, session)["ok"]


def test_a_session_budget_is_granted_within_the_maximum(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    assert sessions.open(agent, "q")["budget"]["total"] == sessions.limits.default_budget
    for wrong in (0, -1, sessions.limits.max_budget + 1, True, "5"):
        with changes_nothing(lab, InvalidInput) as caught:
            sessions.open(agent, "q", budget=wrong)
        assert caught[0].details["field"] == "budget"
    for subject in ("", "   ", "x" * 2001, "a\x00b", "\ud800", 7):
        with changes_nothing(lab, InvalidInput):
            sessions.open(agent, subject)


def test_an_exhausted_budget_refuses_and_a_human_may_raise_it(lab: Lab) -> None:
    sessions, agent, human = lab.app.sessions, lab.team.agent, lab.team.human
    session = sessions.open(agent, "q", budget=1)["session"]
    sessions.query(agent, session, READ)
    with changes_nothing(lab, BudgetExhausted) as caught:
        sessions.query(agent, session, READ)
    assert caught[0].details == {"session": session, "budget": 1, "used": 1, "running": 0}
    with changes_nothing(lab, NotAllowed):
        sessions.raise_budget(agent, session, 5)
    for wrong in (1, 0, sessions.limits.ceiling + 1):
        with changes_nothing(lab, InvalidInput):
            sessions.raise_budget(human, session, wrong)
    assert sessions.raise_budget(human, session, 3)["budget"]["left"] == 2
    assert sessions.query(agent, session, READ)["budget_left"] == 1
    raised = ("human:alpha-human", "session.budget_raised", {"session": session, "from": 1, "to": 3})
    assert raised in audit_actions(lab)


def test_a_failed_source_blocks_the_session_until_a_human_resumes_it_after_the_retry_time(lab: Lab) -> None:
    sessions, agent, human = lab.app.sessions, lab.team.agent, lab.team.human
    session = sessions.open(agent, "q", budget=2)["session"]
    with OwnerSQL(lab.app.settings) as sql:
        captures_before = sql.count("captures")
    blocked = block_by_moving_the_repository(lab, session)
    assert blocked.details["reason"] == "research_unavailable"
    assert blocked.details["cause"]["code"] == "research_unavailable"
    shown = sessions.show(agent, session)
    assert (shown["status"], shown["reason"]) == ("blocked", "research_unavailable")
    assert shown["budget"] == {"total": 2, "used": 0, "running": 0, "held": 1, "left": 1}
    assert shown["resume_state"]["status"] == "open"
    assert shown["resume_state"]["request"] == {"kind": "source.search", "text": "import"}
    assert shown["evidence"]["records"] == 0
    with OwnerSQL(lab.app.settings) as sql:
        assert sql.count("captures") == captures_before  # nothing half-written
        assert sql.count("evidence_records") == 0
    assert not sessions.session_folder(agent.workspace, session).exists()

    with changes_nothing(lab, SessionBlocked):  # blocked: no query runs, valid or not
        sessions.query(agent, session, READ)
    with changes_nothing(lab, SessionBlocked):
        sessions.query(agent, session, {"kind": "nonsense"})
    with changes_nothing(lab, NotAllowed):  # agents never resume, even calling the service directly
        sessions.resume(agent, session)
    with changes_nothing(lab, Conflict) as caught:  # the retry time is binding
        sessions.resume(human, session)
    assert caught[0].details["wait_seconds"] == int(sessions.limits.retry_after.total_seconds())

    lab.clock.advance(sessions.limits.retry_after.total_seconds())
    resumed = sessions.resume(human, session, note="the repository is back")
    with OwnerSQL(lab.app.settings) as sql:
        (saved,) = sql.rows("SELECT resume_state FROM session_checkpoints WHERE event = 'blocked'")
    assert resumed["status"] == json.loads(saved[0])["status"] == "open"
    assert "reason" not in resumed
    assert resumed["budget"]["held"] == 1
    with changes_nothing(lab, Conflict):  # resumed once: nothing left to resume
        sessions.resume(human, session)
    answer = sessions.query(agent, session, {"kind": "source.search", "text": "import"})  # takes the held unit
    assert answer["budget_left"] == 1
    assert sessions.show(agent, session)["budget"] == {"total": 2, "used": 1, "running": 0, "held": 0, "left": 1}
    events = [(actor, action) for actor, action, _ in audit_actions(lab)]
    assert events == [("agent:alpha-agent", "session.opened"), ("agent:alpha-agent", "session.blocked"),
                      ("human:alpha-human", "session.resumed"), ("agent:alpha-agent", "research.query")]
    checkpoints = sessions.history(human, session)["checkpoints"]
    assert [(point["event"], point["status"]) for point in checkpoints] == [
        ("opened", "open"), ("blocked", "blocked"), ("resumed", "open")]


def test_invalid_requests_in_a_row_block_the_session(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    limit = sessions.limits.invalid_request_limit
    session = sessions.open(agent, "q")["session"]
    for _ in range(limit - 1):
        with pytest.raises(InvalidInput):
            sessions.query(agent, session, {"kind": "source.read"})
    sessions.query(agent, session, READ)  # a valid query resets the count
    with pytest.raises(NotFound) as missing:  # a lookup of what is not there counts too, and frees its budget
        sessions.query(agent, session, {"kind": "source.read", "path": "no/such/file", "start_line": 1,
                                        "end_line": 1})
    assert missing.value.details["invalid_requests"] == {"in_a_row": 1, "limit": limit, "session_blocked": False}
    for count in range(2, limit + 1):
        with pytest.raises(InvalidInput) as refused:
            sessions.query(agent, session, {"kind": "source.files"})
        assert refused.value.details["invalid_requests"] == {"in_a_row": count, "limit": limit,
                                                             "session_blocked": count == limit}
    shown = sessions.show(agent, session)
    assert (shown["status"], shown["reason"], shown["retry_not_before"]) == ("blocked", "invalid_requests", None)
    assert shown["budget"]["used"] == 1
    assert shown["budget"]["left"] == sessions.limits.default_budget - 1
    assert sessions.resume(lab.team.human, session)["status"] == "open"
    with pytest.raises(InvalidInput) as again:  # the count starts over after a resume
        sessions.query(agent, session, {"kind": "source.files"})
    assert again.value.details["invalid_requests"]["in_a_row"] == 1


def test_a_closed_session_stays_readable_and_refuses_queries(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q")["session"]
    sessions.query(agent, session, READ)
    closed = sessions.close(agent, session, note="answered")
    assert closed["status"] == "closed"
    assert closed["evidence"]["records"] == 1
    with changes_nothing(lab, SessionClosed):
        sessions.query(agent, session, READ)
    with changes_nothing(lab, SessionClosed):
        sessions.query(agent, session, {"kind": "source.files"})  # closed first: not counted as invalid
    assert sessions.close(agent, session)["status"] == "closed"  # closing again changes nothing
    for note in ("", "x" * 2001, "a\x00", "\udc80"):  # a non-UTF-8 byte on a command line is a lone surrogate
        with changes_nothing(lab, InvalidInput):
            sessions.close(lab.team.human, session, note=note)
    assert sessions.show(agent, session)["evidence"]["records"] == 1
    assert sessions.verify(agent, session)["ok"]
    with changes_nothing(lab, SessionClosed):  # no human change of a closed session either
        sessions.raise_budget(lab.team.human, session, 100)


def test_sessions_are_private_to_their_owner_and_workspace(lab: Lab) -> None:
    sessions, team = lab.app.sessions, lab.team
    session = sessions.open(team.agent, "q")["session"]
    other = make_team(lab.app, "beta")
    directory = lab.app.directory
    directory.add_principal("alpha-second", Kind.AGENT, workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    second = directory.authenticate_token(directory.issue_token("alpha-second", workspace="alpha", by=OPERATOR).token)
    for stranger in (other.agent, other.human, second):
        for call in (lambda actor: sessions.show(actor, session), lambda actor: sessions.query(actor, session, READ),
                     lambda actor: sessions.close(actor, session), lambda actor: sessions.verify(actor, session)):
            with changes_nothing(lab, NotFound):
                call(stranger)
        assert session not in [listed["session"] for listed in sessions.list_sessions(stranger, everyone=True)]
    for call in (lambda actor: sessions.resume(actor, session), lambda actor: sessions.take_over(actor, session)):
        with changes_nothing(lab, (NotFound, NotAllowed)):  # type: ignore[arg-type]
            call(other.human)
    # A human who manages sessions sees every session of the workspace; the agent sees its own.
    assert [listed["session"] for listed in sessions.list_sessions(team.human, everyone=True)] == [session]
    assert sessions.list_sessions(second) == []


def test_an_administrator_takes_a_session_over_before_acting_in_it(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    directory = lab.app.directory
    directory.add_principal("alpha-admin", Kind.HUMAN, workspace="alpha", role=Role.ADMIN, by=OPERATOR,
                            password="admin correct horse")
    admin = directory.authenticate_password("alpha-admin", "admin correct horse", workspace="alpha")
    session = sessions.open(agent, "q")["session"]
    with changes_nothing(lab, NotAllowed) as caught:
        sessions.query(admin, session, READ)
    assert "take it over first" in caught[0].message
    with changes_nothing(lab, NotAllowed):  # an editor human may resume and close, not take over
        sessions.take_over(lab.team.human, session)
    assert sessions.take_over(admin, session)["owner"] == "human:alpha-admin"
    answer = sessions.query(admin, session, READ)
    assert answer["evidence"] == 1
    with changes_nothing(lab, NotFound) as taken:  # the agent's session is the admin's now, and it is told so
        sessions.query(agent, session, READ)
    assert taken[0].message.startswith(f"Session {session} was taken over by human:alpha-admin: it is theirs now")
    assert taken[0].details["taken_over_by"] == "human:alpha-admin"
    with pytest.raises(NotFound, match="was taken over by human:alpha-admin"):
        sessions.show(agent, session)
    directory.add_principal("alpha-other", Kind.AGENT, workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    other = directory.authenticate_token(directory.issue_token("alpha-other", workspace="alpha", by=OPERATOR).token)
    with changes_nothing(lab, NotFound) as elsewhere:  # to anyone else it does not exist, as before
        sessions.query(other, session, READ)
    assert elsewhere[0].message == f"You have no session {session} in this workspace."
    events = audit_actions(lab)
    assert ("human:alpha-admin", "session.taken_over",
            {"session": session, "from": "agent:alpha-agent", "to": "human:alpha-admin"}) in events
    assert [actor for actor, action, _ in events if action == "research.query"] == ["human:alpha-admin"]
    history = sessions.history(admin, session)
    assert history["evidence"]["records_list"][0]["actor"] == "human:alpha-admin"
    assert [point["event"] for point in history["checkpoints"]] == ["opened", "taken_over"]


def test_verify_reports_modified_missing_and_extra_files_and_rebuild_restores_them(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q")["session"]
    first = sessions.query(agent, session, READ)["capture"]
    second = sessions.query(agent, session, SEARCH)["capture"]
    folder = sessions.session_folder(agent.workspace, session)
    shutil.rmtree(lab.repo.path)  # verification needs no repository
    (folder / f"{first}.json").write_bytes(b'{"tampered": true}')
    (folder / f"{second}.json").unlink()
    (folder / f"{'0' * 64}.json").write_text("{}")
    report = sessions.verify(agent, session)
    assert not report["ok"]
    assert sorted((problem["problem"], problem.get("file")) for problem in report["problems"]) == [
        ("extra_file", f"{'0' * 64}.json"), ("missing_file", f"{second}.json"), ("modified_file", f"{first}.json")]
    with changes_nothing(lab, NotAllowed):  # restoring evidence files is a human's act
        sessions.rebuild_files(agent, session)
    rebuilt = sessions.rebuild_files(lab.team.human, session)
    assert sorted(rebuilt["restored"]) == sorted([first, second])
    assert rebuilt["extra_files"] == [f"{'0' * 64}.json"]
    (folder / f"{'0' * 64}.json").unlink()
    assert sessions.verify(agent, session)["ok"]


def test_verify_reports_evidence_that_does_not_match_its_capture(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q")["session"]
    sessions.query(agent, session, READ)
    with OwnerSQL(lab.app.settings) as sql:
        if lab.app.database.dialect == "postgresql":
            sql.execute("ALTER TABLE captures NO FORCE ROW LEVEL SECURITY")
        sql.execute("UPDATE captures SET content = replace(content, 'src/app.py', 'src/app.pz')")
    problems = {problem["problem"] for problem in sessions.verify(agent, session)["problems"]}
    assert problems == {"capture_altered", "modified_file"}


def test_a_failed_commit_gives_its_action_back_at_once(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q", budget=1)["session"]
    real = queries.insert_record

    def fail_once(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(queries, "insert_record", real)
        raise RuntimeError("the commit failed")  # a dropped connection or a deadlock, say

    monkeypatch.setattr(queries, "insert_record", fail_once)
    with pytest.raises(RuntimeError):
        sessions.query(agent, session, READ)
    assert sessions.show(agent, session)["budget"] == {"total": 1, "used": 0, "running": 0, "held": 0, "left": 1}
    assert sessions.query(agent, session, READ)["evidence"] == 1  # not budget_exhausted until the lease ended
    assert sessions.verify(agent, session)["ok"]  # the retry's capture is the file the failed commit left


def test_a_refused_reader_releases_nothing(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q")["session"]
    with OwnerSQL(lab.app.settings) as sql:
        sql.execute("INSERT INTO session_reservations (workspace_id, session_id, state, actor, holder, lease_until, "
                    "created_at) VALUES (?, ?, 'reserved', 'agent:alpha-agent', 'otherhost:1:x', "
                    "'2000-01-01T00:00:00.000000Z', '2000-01-01T00:00:00.000000Z')", (agent.workspace_id, session))
    directory = lab.app.directory
    directory.add_principal("alpha-other", Kind.AGENT, workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    other = directory.authenticate_token(directory.issue_token("alpha-other", workspace="alpha", by=OPERATOR).token)
    for call in (sessions.show, sessions.history):
        with changes_nothing(lab, NotFound):  # the expired reservation is not the stranger's to release
            call(other, session)
    assert sessions.show(agent, session)["budget"]["running"] == 0  # the owner's look releases it


def test_a_source_failing_in_a_session_blocked_meanwhile_keeps_the_first_block(
        lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q")["session"]
    assert sessions.research is not None

    def block_meanwhile_then_fail(request: dict[str, Any]) -> Any:
        for _ in range(sessions.limits.invalid_request_limit):  # the agent's other calls block the session
            with pytest.raises(InvalidInput):
                sessions.query(agent, session, {"kind": "source.read"})
        raise ResearchUnavailable("The source did not answer.")

    monkeypatch.setattr(sessions.research, "run", block_meanwhile_then_fail)
    with pytest.raises(SessionBlocked) as blocked:
        sessions.query(agent, session, READ)
    assert blocked.value.details["reason"] == "invalid_requests"
    shown = sessions.history(agent, session)
    assert (shown["reason"], shown["retry_not_before"]) == ("invalid_requests", None)
    assert [point["event"] for point in shown["checkpoints"]] == ["opened", "blocked"]
    assert shown["budget"]["held"] == 1  # the admitted query's action is kept for its retry


def test_verify_reports_a_temporary_file_a_killed_writer_left(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q")["session"]
    capture = sessions.query(agent, session, READ)["capture"]
    (sessions.session_folder(agent.workspace, session) / f".{capture}.0a1b2c3d.tmp").write_bytes(b"{")
    assert [problem["problem"] for problem in sessions.verify(agent, session)["problems"]] == ["stale_temporary_file"]


def _run_then(lab: Lab, monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> None:
    """The session's next query runs, then ``meanwhile()`` happens before its answer is committed."""
    research = lab.app.sessions.research
    assert research is not None
    real = research.run

    def run_then(request: dict[str, Any]) -> Any:
        answer = real(request)
        monkeypatch.setattr(research, "run", real)
        meanwhile()
        return answer

    monkeypatch.setattr(research, "run", run_then)


def _outlive_the_lease(lab: Lab, session: int) -> None:
    lab.clock.advance(lab.app.sessions._lease().total_seconds())
    assert lab.app.sessions.show(lab.team.agent, session)["budget"]["running"] == 0  # released by this look


def test_an_answer_that_outlived_its_lease_still_counts_while_the_budget_has_room(
        lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q", budget=2)["session"]
    _run_then(lab, monkeypatch, lambda: _outlive_the_lease(lab, session))
    answer = sessions.query(agent, session, READ)
    assert (answer["evidence"], answer["budget_left"]) == (1, 1)
    assert sessions.show(agent, session)["budget"] == {"total": 2, "used": 1, "running": 0, "held": 0, "left": 1}
    with OwnerSQL(lab.app.settings) as sql:
        assert sql.rows("SELECT state FROM session_reservations") == [("consumed",)]  # the released one, consumed
    assert sessions.verify(agent, session)["ok"]
    assert sessions.query(agent, session, SEARCH)["budget_left"] == 0


def test_an_answer_that_outlived_its_lease_is_refused_once_others_used_the_budget(
        lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q", budget=1)["session"]

    def outlived_and_overtaken() -> None:
        _outlive_the_lease(lab, session)
        assert sessions.query(agent, session, READ)["budget_left"] == 0  # takes the unit given back

    _run_then(lab, monkeypatch, outlived_and_overtaken)
    with pytest.raises(BudgetExhausted) as refused:
        sessions.query(agent, session, READ)
    assert refused.value.details == {"session": session, "budget": 1, "used": 1, "running": 0}
    assert sessions.show(agent, session)["budget"] == {"total": 1, "used": 1, "running": 0, "held": 0, "left": 0}
    with OwnerSQL(lab.app.settings) as sql:
        assert sql.count("evidence_records") == 1
        assert sorted(sql.rows("SELECT state FROM session_reservations")) == [("consumed",), ("released",)]
    assert [action for _actor, action, _ in audit_actions(lab)].count("research.query") == 1
    assert sessions.verify(agent, session)["ok"]


def test_an_answer_that_outlived_its_lease_is_refused_once_the_session_blocked(
        lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its unit was given back; meanwhile the agent's invalid requests blocked the session. The answer does not
    take the unit back into a blocked session (a running one, admitted before the block, would still count)."""
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q", budget=2)["session"]

    def outlived_then_blocked() -> None:
        _outlive_the_lease(lab, session)
        for _ in range(sessions.limits.invalid_request_limit):
            with pytest.raises(InvalidInput):
                sessions.query(agent, session, {"kind": "source.read"})

    _run_then(lab, monkeypatch, outlived_then_blocked)
    with pytest.raises(SessionBlocked) as refused:
        sessions.query(agent, session, READ)
    assert refused.value.details["reason"] == "invalid_requests"
    shown = sessions.show(agent, session)
    assert (shown["status"], shown["budget"]["used"], shown["evidence"]["records"]) == ("blocked", 0, 0)
    with OwnerSQL(lab.app.settings) as sql:
        assert sql.rows("SELECT state FROM session_reservations") == [("released",)]
        assert sql.rows("SELECT invalid_streak FROM sessions") == [(sessions.limits.invalid_request_limit,)]
    assert [action for _actor, action, _ in audit_actions(lab)].count("research.query") == 0


def test_an_answer_to_a_session_closed_while_it_ran_is_refused(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q", budget=2)["session"]
    _run_then(lab, monkeypatch, lambda: sessions.close(lab.team.human, session))
    with pytest.raises(SessionClosed):
        sessions.query(agent, session, READ)
    shown = sessions.show(agent, session)
    assert (shown["status"], shown["budget"]["used"], shown["evidence"]["records"]) == ("closed", 0, 0)
    with OwnerSQL(lab.app.settings) as sql:
        assert sql.rows("SELECT state FROM session_reservations") == [("released",)]


def test_a_unit_is_reserved_in_one_statement_only_where_nothing_needs_a_look(lab: Lab) -> None:
    """``reserve_if_clear`` (the query's first step) reserves where the session is the caller's, open, enriched
    and has room, and every live reservation is a running one of this process within its lease; anything else
    it leaves, writing nothing, to the path that looks (refusals, a held unit, interrupted ones to release)."""
    sessions, agent, app = lab.app.sessions, lab.team.agent, lab.app
    session = sessions.open(agent, "q", budget=3)["session"]
    holder, now = current_holder(), lab.clock()
    at, lease = iso_utc(now), iso_utc(now + timedelta(minutes=5))

    def reserve(*, owner: int = agent.principal_id, enriched_first: bool = True) -> Any:
        before = snapshot(lab)
        with app.database.transaction(workspace_id=agent.workspace_id, write=True) as tx:
            reserved = queries.reserve_if_clear(tx, session, owner_id=owner, actor=agent.audit_name, holder=holder,
                                                lease_until=lease, at=at, enriched_first=enriched_first)
        if reserved.scalar() is None:
            assert snapshot(lab) == before
        return reserved.scalar()

    def live(state: str, holder: str, lease_until: str) -> None:
        with OwnerSQL(app.settings) as sql:
            sql.execute("INSERT INTO session_reservations (workspace_id, session_id, state, actor, holder, "
                        "lease_until, created_at) VALUES (?, ?, ?, 'agent:alpha-agent', ?, ?, ?)",
                        (agent.workspace_id, session, state, holder, lease_until, at))

    def change(sql_text: str, *params: Any) -> None:
        with OwnerSQL(app.settings) as sql:
            sql.execute(sql_text, params)

    assert reserve(owner=lab.team.human.principal_id) is None  # another's session
    change("UPDATE sessions SET inputs_revision = 1")
    assert reserve() is None  # inputs to enrich first
    first = reserve(enriched_first=False)
    assert first is not None
    change("UPDATE sessions SET inputs_revision = 0")
    live("reserved", holder, iso_utc(now + timedelta(seconds=1)))  # another query of this process, running
    assert reserve() is not None  # three running: the budget is full
    assert reserve() is None
    change("UPDATE session_reservations SET state = 'released' WHERE session_id = ?", session)
    # Held for a retry; another process's; this process's, its lease ended.
    for state, whose, until in (("held", holder, lease), ("reserved", "otherhost:1:x", lease),
                                ("reserved", holder, at)):
        live(state, whose, until)
        assert reserve() is None
        change("UPDATE session_reservations SET state = 'released' WHERE session_id = ?", session)
    for status, reason in (("blocked", "invalid_requests"), ("closed", None)):
        change("UPDATE sessions SET status = ?, reason = ?", status, reason)
        assert reserve() is None
    change("UPDATE sessions SET status = 'open', reason = NULL")
    assert reserve() is not None
