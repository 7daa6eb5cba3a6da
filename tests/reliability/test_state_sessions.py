"""Research sessions as a state machine, on both engines: an agent opens, queries (a real git source)
and closes sessions through its MCP tools; the source fails (its repository moved away); a human
resumes and raises budgets through the service; time moves by the service's clock. After every step
the store must equal a small model of each session.

What the model pins down (SPEC §4.3 and §8): the budget used never exceeds the budget (a unit held
by a failed source included); every answered query is one evidence record and one unit; a failed
source blocks the session, keeping its unit for the retry; too many invalid requests in a row block
it; a blocked session refuses every query until a human resumes it, and not before its retry time;
a closed session refuses and stays readable; a human may only raise a budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition

from armarius.app import Armarius
from armarius.errors import Conflict, InvalidInput, SessionClosed
from armarius.store import iso_utc
from tests.helpers import Team
from tests.reliability.machines import (
    CountedMachine,
    Lab,
    SyncAgent,
    fresh_team,
    machine_settings,
    research_lab,
    run_machine,
    step,
)

pytestmark = pytest.mark.reliability

QUERIES = (
    {"kind": "source.search", "text": "def "},
    {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2},
)
INVALID_LIMIT = 3  # invalid requests in a row that block a session (the default is 5: reached less often)


@pytest.fixture
def lab(app: Armarius, tmp_path: Path) -> Iterator[Lab]:
    with research_lab(app, tmp_path, research_invalid_request_limit=INVALID_LIMIT) as opened:
        yield opened


@dataclass
class Session:
    id: int
    budget: int
    used: int = 0
    held: int = 0  # the unit a failed source left for the retry
    records: int = 0
    status: str = "open"
    reason: str | None = None
    retry_at: int | None = None  # seconds on the machine's clock
    invalid_in_a_row: int = 0

    def refusal(self) -> str | None:
        """What a query of this session is refused with before it runs (None: it runs)."""
        if self.status != "open":
            return {"closed": "session_closed", "blocked": "session_blocked"}[self.status]
        if not self.held and self.used >= self.budget:  # a unit held by a failed source is the retry's
            return "budget_exhausted"
        return None


class SessionsMachine(CountedMachine):
    lab: Lab

    def __init__(self) -> None:
        super().__init__()
        self.app = self.lab.app
        self.team: Team = fresh_team(self.app, "ses")
        self.agent = SyncAgent(self.app, self.team.agent, self.resources)
        self.retry_after = int(self.app.sessions.limits.retry_after.total_seconds())
        self.start, self.now = datetime.now(UTC).replace(microsecond=0), 0
        self.resources.callback(setattr, self.app.sessions, "clock", self.app.sessions.clock)
        self.app.sessions.clock = lambda: self.start + timedelta(seconds=self.now)
        self.sessions: list[Session] = []
        self.touched: Session | None = None

    def pick(self, number: int, prefer: str | None = None) -> Session:
        """A session in the status ``prefer`` if there is one (None: any), chosen by ``number``."""
        candidates = [session for session in self.sessions if session.status == prefer] or self.sessions
        self.touched = candidates[number % len(candidates)]
        return self.touched

    def query(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.agent("project_query", session=session.id, arguments=arguments)

    # Agent steps (MCP tools) -------------------------------------------------------------------

    @step(budget=st.integers(min_value=1, max_value=3))
    def open(self, budget: int) -> None:
        answer = self.agent("session_open", subject="Where are orders handled?", budget=budget)
        assert (answer["status"], answer["budget"]["total"]) == ("open", budget), answer
        self.sessions.append(Session(answer["session"], budget))

    @precondition(lambda self: self.sessions)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["open", "open", None]),
          arguments=st.sampled_from(QUERIES))
    def project_query(self, number: int, prefer: str | None, arguments: dict[str, Any]) -> None:
        session = self.pick(number, prefer)
        answer = self.query(session, arguments)
        if session.refusal():
            assert answer["error"] == session.refusal(), answer
            return
        session.used, session.held, session.records = session.used + 1, 0, session.records + 1
        session.invalid_in_a_row = 0
        assert (answer["evidence"], answer["budget_left"]) == (session.records, session.budget - session.used)

    @precondition(lambda self: self.sessions)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["open", "open", None]))
    def invalid_query(self, number: int, prefer: str | None) -> None:
        session = self.pick(number, prefer)
        answer = self.query(session, {"kind": "source.everything"})
        # Refused before any budget is looked at: an open session answers invalid_input, and counts it.
        assert answer["error"] == (session.refusal() if session.status != "open" else "invalid_input"), answer
        if session.status == "open":
            session.invalid_in_a_row += 1
            if session.invalid_in_a_row >= INVALID_LIMIT:
                session.status, session.reason, session.retry_at = "blocked", "invalid_requests", None

    @precondition(lambda self: self.sessions)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["open", "open", None]))
    def query_a_failing_source(self, number: int, prefer: str | None) -> None:
        """The repository is moved away while the query runs: the source fails."""
        session = self.pick(number, prefer)
        moved = self.lab.repo.with_name("moved-away")
        self.lab.repo.rename(moved)
        try:
            answer = self.query(session, QUERIES[0])
        finally:
            moved.rename(self.lab.repo)
        if session.refusal():
            assert answer["error"] == session.refusal(), answer
            return
        assert (answer["error"], answer["details"]["reason"]) == ("session_blocked", "research_unavailable"), answer
        session.status, session.reason, session.held = "blocked", "research_unavailable", 1
        session.retry_at = self.now + self.retry_after

    @precondition(lambda self: self.sessions)
    @step(number=st.integers(min_value=0))
    def close(self, number: int) -> None:
        session = self.pick(number)
        answer = self.agent("session_close", session=session.id)
        assert answer["status"] == "closed", answer
        session.status, session.reason, session.retry_at, session.held = "closed", None, None, 0

    # Human steps (the service) and time --------------------------------------------------------

    @step(seconds=st.sampled_from([1, 30]), to_a_retry_time=st.booleans())
    def time_passes(self, seconds: int, to_a_retry_time: bool) -> None:
        """Some seconds, or exactly up to the earliest retry time still ahead."""
        ahead = [session.retry_at for session in self.sessions
                 if session.retry_at is not None and session.retry_at > self.now]
        self.now = min(ahead) if to_a_retry_time and ahead else self.now + seconds

    @precondition(lambda self: self.sessions)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["blocked", "blocked", None]))
    def resume(self, number: int, prefer: str | None) -> None:
        session = self.pick(number, prefer)
        too_early = session.retry_at is not None and self.now < session.retry_at
        if session.status != "blocked" or too_early:
            with pytest.raises(Conflict):
                self.app.sessions.resume(self.team.human, session.id, note="the source is back")
            return
        answer = self.app.sessions.resume(self.team.human, session.id, note="the source is back")
        assert answer["status"] == "open", answer
        session.status, session.reason, session.retry_at, session.invalid_in_a_row = "open", None, None, 0

    @precondition(lambda self: self.sessions)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["open", "blocked", None]),
          more=st.integers(min_value=-1, max_value=2))
    def raise_budget(self, number: int, prefer: str | None, more: int) -> None:
        session = self.pick(number, prefer)
        wanted = session.budget + more
        if session.status == "closed":
            with pytest.raises(SessionClosed):
                self.app.sessions.raise_budget(self.team.human, session.id, wanted)
        elif more <= 0:  # only ever more
            with pytest.raises(InvalidInput):
                self.app.sessions.raise_budget(self.team.human, session.id, wanted)
        else:
            assert self.app.sessions.raise_budget(self.team.human, session.id, wanted)["budget"]["total"] == wanted
            session.budget = wanted

    # After every step ----------------------------------------------------------------------------

    @invariant()
    def every_session_is_as_the_model_says(self) -> None:
        listed = {item["session"]: item for item in self.app.sessions.list_sessions(self.team.agent)}
        assert sorted(listed) == sorted(session.id for session in self.sessions)
        for session in self.sessions:
            item, budget = listed[session.id], listed[session.id]["budget"]
            assert budget["used"] + budget["held"] + budget["running"] <= budget["total"], item
            assert (item["status"], item.get("reason")) == (session.status, session.reason), item
            assert (budget["total"], budget["used"], budget["held"], budget["running"], budget["left"]) == (
                session.budget, session.used, session.held, 0, session.budget - session.used - session.held), item
            retry = None if session.retry_at is None else iso_utc(self.start + timedelta(seconds=session.retry_at))
            assert item.get("retry_not_before") == retry, item

    @invariant()
    def the_last_session_touched_shows_its_evidence_and_verifies(self) -> None:
        """Its evidence records are counted, and its capture files, records and budget agree (budget used =
        units consumed = records charged)."""
        if self.touched is not None:
            shown = self.app.sessions.show(self.team.agent, self.touched.id)
            assert (shown["status"], shown["evidence"]["records"]) == (self.touched.status, self.touched.records)
            verified = self.app.sessions.verify(self.team.agent, self.touched.id)
            assert (verified["ok"], verified["evidence_records"]) == (True, self.touched.records), verified


def test_sessions_state_machine(lab: Lab) -> None:
    run_machine(SessionsMachine, machine_settings(examples=(10, 200), steps=(40, 80)), lab=lab)
