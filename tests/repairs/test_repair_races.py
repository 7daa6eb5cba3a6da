"""Two administrators applying the same proposal at once, on SQLite and PostgreSQL, threads and processes.

Each round an agent prepares a fresh proposal in a session of its own, and the two administrators line up on
a barrier and call ``repairs.apply`` with the same option at the same moment. The rounds cycle through four
cases: an entry or an evidence unit, in a closed session (no takeover needed) or in the agent's open session
(each administrator asks to take it over first, so the takeovers race too). Exactly one application happens:
one administrator's answer is the applied repair, the other's a refusal, ``conflict`` (the decision is made,
or the unit's file is already the other's correction). Nothing else: no ``storage_unavailable``, no deadlock,
no unexpected exception.

**A refused apply changes nothing**, its takeover included: the takeover is made in the transaction that
records the decision. So after each round the session is the winner's (taken over once, from the agent) or
still the agent's (closed), and every audit event of the round names the winner: none names the loser.
A second race sets an editor's reject against an administrator's apply with takeover: whoever loses leaves
no trace, so a reject that wins leaves the session to the agent.

Afterwards the store agrees: per round one ``applied`` (entries) or one ``applying``, ``pending_activation``
and ``activated`` (units) event, one new revision of the target with the round's content, one
``memory.repaired`` or ``evidence.edited`` audit event, the unit's file holding the last round's correction,
and an intact audit chain.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.errors import Conflict
from armarius.evidence.model import parse
from tests.helpers import OwnerSQL
from tests.racers import Outcome, ProcessRacers, Racers, ThreadRacers, as_outcome
from tests.repairs.conftest import ENTRY, UNIT, Desk

pytestmark = pytest.mark.slow

ROUNDS = 200
#: Rounds of an editor's reject against an administrator's apply with takeover.
REJECT_ROUNDS = 100
KINDS = ["threads", "processes"]
#: The four cases a round number cycles through: (target kind, whether the session stays open).
CASES = [("entry", False), ("entry", True), ("evidence", False), ("evidence", True)]


def attempt(app: Armarius, _agent: Actor, admin: Actor, repair: int, take_over: bool) -> Outcome:
    """An administrator's part in a round: apply option 1 of the repair (taking the session over if asked)."""
    return as_outcome(app.repairs.apply, admin, repair, "opt-1", take_over=take_over)


def decide(app: Armarius, _agent: Actor, person: Actor, repair: int, reject: bool) -> Outcome:
    """A person's part in a round of the second race: reject the repair, or apply option 1 taking the session over."""
    if reject:
        return as_outcome(app.repairs.reject, person, repair, "Not this one.")
    return as_outcome(app.repairs.apply, person, repair, "opt-1", take_over=True)


def sole_winner(outcomes: list[Outcome], context: str) -> int:
    """The index of the one racer whose call answered: none crashed, exactly one won."""
    crashed = [outcome for outcome in outcomes if "exception" in outcome]
    assert not crashed, f"{context}\n{crashed[0]['traceback']}"
    won = [index for index, outcome in enumerate(outcomes) if "ok" in outcome]
    assert len(won) == 1, context
    return won[0]


def audit_head(desk: Desk) -> int:
    """The workspace's last audit sequence number."""
    with OwnerSQL(desk.app.settings) as sql:
        return int(sql.rows("SELECT coalesce(max(seq), 0) FROM audit_events WHERE workspace_id = ?",
                            (desk.agent.workspace_id,))[0][0])


def audited_since(desk: Desk, head: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(actor, action, details) of the workspace's audit events after ``head``, in order."""
    with OwnerSQL(desk.app.settings) as sql:
        rows = sql.rows("SELECT actor, action, details FROM audit_events WHERE workspace_id = ? AND seq > ? "
                        "ORDER BY seq", (desk.agent.workspace_id, head))
    return [(actor, action, json.loads(details)) for actor, action, details in rows]


def check_traces(desk: Desk, session: int, head: int, winner: Actor, *, taken_over: bool, context: str) -> None:
    """Only the winner acted in the round: the session is theirs when it was taken over (once, from the agent)
    and the agent's otherwise, and every audit event since ``head`` names them."""
    shown = desk.app.sessions.history(desk.admin, session)
    takeovers = [(point["actor"], point["details"]) for point in shown["checkpoints"]
                 if point["event"] == "taken_over"]
    audited = audited_since(desk, head)
    assert {actor for actor, _, _ in audited} == {winner.audit_name}, f"{context}\naudited: {audited}"
    session_events = [(actor, details) for actor, action, details in audited if action == "session.taken_over"]
    if taken_over:
        expected = [(winner.audit_name, {"from": desk.agent.audit_name, "to": winner.audit_name})]
        assert (shown["owner"], takeovers) == (winner.audit_name, expected), context
        assert session_events == [(winner.audit_name, {"session": session, **expected[0][1]})], context
    else:
        assert (shown["owner"], takeovers, session_events) == (desk.agent.audit_name, [], []), context


@pytest.fixture
def make_racers(desk: Desk) -> Iterator[Any]:
    started: list[Racers] = []

    def make(kind: str, call: Any = attempt) -> Racers:
        racers: Racers
        if kind == "threads":
            racers = ThreadRacers(desk.app, desk.agent, 2, call, "repair-racer")
        else:
            racers = ProcessRacers(desk.app.settings, desk.agent, 2, call, "repair-racer")
        started.append(racers)
        return racers

    yield make
    for racers in started:
        racers.close()


def play(desk: Desk, racers: Racers, number: int, outcomes_seen: Counter[str], winners: Counter[str]) -> str:
    """One round; the content it applied."""
    kind, stays_open = CASES[number % len(CASES)]
    session = desk.open_session(f"race round {number}")
    content = f"Round {number}: the host is stage-{number:03d}.\n"
    alternative = desk.alternative(content) if kind == "entry" else desk.unit_alternative(content)
    repair = desk.prepare(session, alternative)["repair"]
    if not stays_open:
        desk.app.sessions.close(desk.agent, session)
    admins = [desk.admin, desk.admin_2]
    head = audit_head(desk)
    outcomes = racers.race([(number, admin, repair, stays_open) for admin in admins])
    context = f"round {number} ({kind}, {'open' if stays_open else 'closed'} session): {outcomes}"
    winner = sole_winner(outcomes, context)
    answer = outcomes[winner]["ok"]
    assert (answer["status"], answer["written"], answer["decided_by"]) == (
        "active", True, admins[winner].audit_name), context
    loser = outcomes[1 - winner]
    assert (loser["type"], loser["code"]) == (Conflict.__name__, "conflict"), context
    check_traces(desk, session, head, admins[winner], taken_over=stays_open, context=context)
    outcomes_seen[f"{kind}/{'open' if stays_open else 'closed'}: {loser['code']}"] += 1
    winners[admins[winner].principal] += 1
    events = [event["event"] for event in desk.app.repairs.show(desk.admin, repair)["history"]]
    expected = ["applied"] if kind == "entry" else ["applying", "pending_activation", "activated"]
    assert events == ["proposed", *expected], context
    return content


def check_store(desk: Desk, applied: dict[str, list[str]]) -> None:
    """One revision per round of each target, with the round's content, and one audit event for each."""
    entry_revisions = desk.app.memory.revisions(desk.agent, ENTRY)
    assert [revision["body"] for revision in entry_revisions[1:]] == applied["entry"]
    assert all(revision["author"].startswith("human:alpha-admin") for revision in entry_revisions[1:])
    unit = desk.app.evidence.show(desk.agent, UNIT)
    assert unit["current_revision"] == 1 + len(applied["evidence"])
    assert (unit["status"], unit["file"]["state"]) == ("active", "matches")
    assert parse(desk.unit_file(), UNIT).body == applied["evidence"][-1]
    with OwnerSQL(desk.app.settings) as sql:
        counted = dict(sql.rows("SELECT action, count(*) FROM audit_events WHERE action IN "
                                "('memory.repaired', 'repair.applied', 'repair.applying', 'repair.activated') "
                                "GROUP BY action"))
        edits = sql.rows("SELECT count(*) FROM audit_events WHERE action = 'evidence.edited' AND details LIKE ?",
                         ('%"via":"repair %',))[0][0]
    rounds = {kind: len(contents) for kind, contents in applied.items()}
    assert counted == {"memory.repaired": rounds["entry"], "repair.applied": rounds["entry"],
                       "repair.applying": rounds["evidence"], "repair.activated": rounds["evidence"]}
    assert edits == rounds["evidence"]
    _, broken = audit.verify_chain(desk.app.database, desk.agent.workspace_id)
    assert broken is None, broken


@pytest.mark.parametrize("kind", KINDS)
def test_two_administrators_applying_one_proposal_apply_it_once(desk: Desk, make_racers: Any, kind: str) -> None:
    racers = make_racers(kind)
    outcomes_seen: Counter[str] = Counter()
    winners: Counter[str] = Counter()
    applied: dict[str, list[str]] = {"entry": [], "evidence": []}
    for number in range(ROUNDS):
        content = play(desk, racers, number, outcomes_seen, winners)
        applied[CASES[number % len(CASES)][0]].append(content)
    check_store(desk, applied)
    assert sum(outcomes_seen.values()) == ROUNDS
    assert len(winners) == 2, f"one administrator won every round: {winners}"


@pytest.mark.parametrize("kind", KINDS)
def test_a_reject_racing_an_apply_with_takeover_leaves_no_trace_of_the_loser(desk: Desk, make_racers: Any,
                                                                           kind: str) -> None:
    racers = make_racers(kind, decide)
    winners: Counter[str] = Counter()
    for number in range(REJECT_ROUNDS):
        target = "entry" if number % 2 == 0 else "evidence"
        session = desk.open_session(f"reject race round {number}")
        content = f"Round {number}: the host is stage-{number:03d}.\n"
        alternative = desk.alternative(content) if target == "entry" else desk.unit_alternative(content)
        repair = desk.prepare(session, alternative)["repair"]
        people = [desk.human, desk.admin]  # the editor rejects, the administrator applies
        head = audit_head(desk)
        outcomes = racers.race([(number, person, repair, person is desk.human) for person in people])
        context = f"round {number} ({target}): {outcomes}"
        winner = sole_winner(outcomes, context)
        loser = outcomes[1 - winner]
        assert (loser["type"], loser["code"]) == (Conflict.__name__, "conflict"), context
        status = outcomes[winner]["ok"]["status"]
        assert status == ("rejected" if winner == 0 else "active"), context
        check_traces(desk, session, head, people[winner], taken_over=winner == 1, context=context)
        winners["reject" if winner == 0 else "apply"] += 1
    _, broken = audit.verify_chain(desk.app.database, desk.agent.workspace_id)
    assert broken is None, broken
    assert len(winners) == 2, f"one decision won every round: {winners}"
