"""Queries racing for a session's last units of budget, on SQLite and PostgreSQL, threads and processes.

Each round opens a fresh session with one unit of budget left (every other round a session of budget
2 that has already spent one), and ``RACERS`` racers line up on a barrier and call
``sessions.query`` on it at the same moment, each with its own request (a different ``end_line``, so
every racer's capture is distinct). Exactly one gets an answer; every other is refused with
``budget_exhausted``, having seen the whole budget taken (used plus running equals the budget).
Nothing else is allowed: no ``storage_unavailable``, no deadlock, no unexpected exception.

Afterwards the store must show that the losers never ran: per session exactly ``budget`` evidence
records (the last one the winner's request and capture), ``budget`` consumed reservations and no
other reservation (a refused racer never reserved anything), ``used == budget``, exactly ``budget``
``research.query`` audit events, no released or blocked anything, an intact audit chain, and
``sessions.verify`` finds the capture files, records and budget in agreement (a capture file a loser
wrote would show as an ``extra_file``).

A second race gives a session room for ``SHARED_BUDGET`` of ``SHARED_RACERS`` racers: exactly that
many succeed, with evidence records 1..budget, and the rest are refused.

Threads share one application (SQLite: one connection per thread; PostgreSQL: the pool). The
processes are spawned once per test, each opens its own application from the same settings and
takes its rounds from a queue (tests/racers.py, shared with tests/drafts/test_draft_races.py).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.errors import BudgetExhausted
from tests.helpers import OwnerSQL
from tests.racers import Outcome, ProcessRacers, Racers, ThreadRacers, as_outcome
from tests.sessions.conftest import Lab

pytestmark = pytest.mark.slow

ROUNDS = 200
#: Racers for the last unit of budget.
RACERS = 8
#: The k-of-n race: a budget with room for SHARED_BUDGET of SHARED_RACERS racers.
SHARED_RACERS = 6
SHARED_BUDGET = 3
KINDS = ["threads", "processes"]


def racer_query(index: int) -> dict[str, Any]:
    """Racer ``index``'s request: src/app.py from line 1 to line ``index + 1`` (a capture of its own)."""
    return {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": index + 1}


#: What a session spends before its round, to leave it with exactly the units the racers fight for.
EARLIER_QUERY: dict[str, Any] = {"kind": "source.read", "path": "src/app.py", "start_line": 10, "end_line": 12}


# Racers (tests/racers.py) ----------------------------------------------------------------------


def attempt(app: Armarius, agent: Actor, session: int, query: dict[str, Any]) -> Outcome:
    """What a racer does with its part of a round, ``(round number, session, query)``: the query's answer,
    refusal or exception, as picklable data."""
    return as_outcome(app.sessions.query, agent, session, query)


@pytest.fixture
def make_racers(lab: Lab) -> Iterator[Any]:
    """Start racers of a kind ("threads" or "processes"), closed when the test ends."""
    started: list[Racers] = []

    def make(kind: str, count: int) -> Racers:
        racers: Racers
        if kind == "threads":
            racers = ThreadRacers(lab.app, lab.team.agent, count, attempt, "session-racer")
        else:
            racers = ProcessRacers(lab.app.settings, lab.team.agent, count, attempt, "session-racer")
        started.append(racers)
        return racers

    yield make
    for racers in started:
        racers.close()


# Rounds and their checks -----------------------------------------------------------------------


@dataclass
class Expected:
    """What a round left in one session: its budget and the requests (end_line) and captures that won."""

    budget: int
    end_lines: list[int]
    captures: list[str]


@dataclass
class Rounds:
    """What every round promised, checked per round against the answers and at the end against the store."""

    lab: Lab
    expected: dict[int, Expected] = field(default_factory=dict)
    categories: Counter[str] = field(default_factory=Counter)
    #: How often each racer won: the races are real only if more than one of them ever does.
    winners: Counter[int] = field(default_factory=Counter)
    #: What the refused racers saw: the budget taken by a query still running, or by one committed.
    refusals_saw: Counter[str] = field(default_factory=Counter)

    def play(self, racers: Racers, number: int, *, budget: int, spent: int = 0) -> None:
        """Open a session of ``budget``, spend ``spent`` of it, then race for the rest."""
        sessions, agent = self.lab.app.sessions, self.lab.team.agent
        session = sessions.open(agent, f"race round {number}", budget=budget)["session"]
        earlier = [sessions.query(agent, session, EARLIER_QUERY) for _ in range(spent)]
        queries = [racer_query(index) for index in range(racers.count)]
        outcomes = racers.race([(number, session, query) for query in queries])
        won = self._check(session, budget, spent, outcomes)
        self.expected[session] = Expected(
            budget, [EARLIER_QUERY["end_line"]] * spent + [queries[index]["end_line"] for index in won],
            [answer["capture"] for answer in earlier] + [outcomes[index]["ok"]["capture"] for index in won])

    def _check(self, session: int, budget: int, spent: int, outcomes: list[Outcome]) -> list[int]:
        """The winners' indexes in the order of their evidence records."""
        context = f"session {session} (budget {budget}, {spent} spent): {outcomes}"
        crashed = [outcome for outcome in outcomes if "exception" in outcome]
        assert not crashed, f"{context}\n{crashed[0]['traceback']}"
        won = sorted((index for index, outcome in enumerate(outcomes) if "ok" in outcome),
                     key=lambda index: outcomes[index]["ok"]["evidence"])
        assert len(won) == budget - spent, context
        assert [outcomes[index]["ok"]["evidence"] for index in won] == list(range(spent + 1, budget + 1)), context
        assert all(outcomes[index]["ok"]["session"] == session for index in won), context
        assert [outcomes[index]["ok"]["budget_left"] for index in won][-1] == 0, context
        for index, outcome in enumerate(outcomes):
            if index in won:
                continue
            assert (outcome.get("type"), outcome.get("code")) == (BudgetExhausted.__name__, BudgetExhausted.code), \
                context
            details = outcome["details"]
            assert (details["session"], details["budget"]) == (session, budget), context
            # Refused only because the others took every unit: committed or still running.
            assert details["used"] + details["running"] == budget, context
            self.refusals_saw["running" if details["running"] else "used"] += 1
        self.winners.update(won)
        self.categories[f"{len(won)} answered, {len(outcomes) - len(won)} budget_exhausted"] += 1
        return won

    def check_store(self) -> None:
        """The stored sessions, reservations, evidence and audit events agree with every round's answers."""
        app, agent = self.lab.app, self.lab.team.agent
        workspace = agent.workspace_id
        with OwnerSQL(app.settings) as sql:
            sessions = {row[0]: row[1:] for row in sql.rows(
                "SELECT id, status, budget, used, invalid_streak FROM sessions WHERE workspace_id = ?", (workspace,))}
            reservations: dict[int, Counter[str]] = {}
            for session, state in sql.rows("SELECT session_id, state FROM session_reservations "
                                           "WHERE workspace_id = ?", (workspace,)):
                reservations.setdefault(session, Counter())[state] += 1
            records: dict[int, list[tuple[int, str, str]]] = {}
            for session, seq, capture, request in sql.rows(
                    "SELECT session_id, seq, capture_id, request FROM evidence_records WHERE workspace_id = ? "
                    "ORDER BY session_id, seq", (workspace,)):
                records.setdefault(session, []).append((seq, capture, request))
        assert sorted(sessions) == sorted(self.expected)
        for session, expected in self.expected.items():
            budget = expected.budget
            assert sessions[session] == ("open", budget, budget, 0), session
            # The losers reserved nothing: no released reservation, none left running or held.
            assert reservations[session] == Counter({"consumed": budget}), (session, reservations[session])
            stored = records[session]
            assert [seq for seq, _, _ in stored] == list(range(1, budget + 1)), session
            assert [capture for _, capture, _ in stored] == expected.captures, session
            assert [json.loads(request)["end_line"] for _, _, request in stored] == expected.end_lines, session
            verified = app.sessions.verify(agent, session)
            assert verified["ok"], verified
            assert verified["evidence_records"] == budget, verified
            assert verified["captures"] == len(set(expected.captures)), verified
        self._check_audit(workspace)

    def _check_audit(self, workspace: int) -> None:
        events: dict[int, Counter[str]] = {session: Counter() for session in self.expected}
        evidence: dict[int, list[int]] = {session: [] for session in self.expected}
        for event in audit.tail(self.lab.app.database, workspace, limit=1_000_000):
            session = event.details.get("session") if isinstance(event.details, dict) else None
            if session is None:
                assert not event.action.startswith(("session.", "research.")), event
                continue
            events[session][event.action] += 1
            if event.action == "research.query":
                evidence[session].append(event.details["evidence"])
        for session, expected in self.expected.items():
            assert events[session] == Counter({"session.opened": 1, "research.query": expected.budget}), \
                (session, events[session])
            assert sorted(evidence[session]) == list(range(1, expected.budget + 1)), session
        _, broken = audit.verify_chain(self.lab.app.database, workspace)
        assert broken is None, broken


# The races -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_queries_racing_for_the_last_unit_of_budget_exactly_one_runs(lab: Lab, make_racers: Any, kind: str) -> None:
    racers = make_racers(kind, RACERS)
    rounds = Rounds(lab)
    for number in range(ROUNDS):
        # Even rounds: a fresh session of budget 1; odd rounds: budget 2 with one unit already spent.
        rounds.play(racers, number, budget=1 + number % 2, spent=number % 2)
    rounds.check_store()
    assert rounds.categories == {f"1 answered, {RACERS - 1} budget_exhausted": ROUNDS}
    assert len(rounds.winners) > 1, f"one racer won every round: {rounds.winners}"
    assert rounds.refusals_saw.total() == ROUNDS * (RACERS - 1)


@pytest.mark.parametrize("kind", KINDS)
def test_a_budget_with_room_for_k_of_n_racers_answers_exactly_k(lab: Lab, make_racers: Any, kind: str) -> None:
    racers = make_racers(kind, SHARED_RACERS)
    rounds = Rounds(lab)
    for number in range(ROUNDS):
        rounds.play(racers, number, budget=SHARED_BUDGET)
    rounds.check_store()
    assert rounds.categories == {
        f"{SHARED_BUDGET} answered, {SHARED_RACERS - SHARED_BUDGET} budget_exhausted": ROUNDS}
    assert len(rounds.winners) > SHARED_BUDGET, f"the same racers won every round: {rounds.winners}"
