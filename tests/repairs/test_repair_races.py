"""Two administrators applying the same proposal at once, on SQLite and PostgreSQL, threads and processes.

Each round an agent prepares a fresh proposal in a session of its own, and the two administrators line up on
a barrier and call ``repairs.apply`` with the same option at the same moment. The rounds cycle through four
cases: an entry or an evidence unit, in a closed session (no takeover needed) or in the agent's open session
(each administrator asks to take it over first, so the takeovers race too). Exactly one application happens:
one administrator's answer is the applied repair, the other's a refusal, ``conflict`` (the decision is made,
or the unit's file is already the other's correction) or ``not_allowed`` (the other took the session over
last). Nothing else: no ``storage_unavailable``, no deadlock, no unexpected exception.

Afterwards the store agrees: per round one ``applied`` (entries) or one ``applying``, ``pending_activation``
and ``activated`` (units) event, one new revision of the target with the round's content, one
``memory.repaired`` or ``evidence.edited`` audit event, the unit's file holding the last round's correction,
and an intact audit chain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.errors import Conflict, NotAllowed
from armarius.evidence.model import parse
from tests.helpers import OwnerSQL
from tests.racers import Outcome, ProcessRacers, Racers, ThreadRacers, as_outcome
from tests.repairs.conftest import ENTRY, UNIT, Desk

pytestmark = pytest.mark.slow

ROUNDS = 200
KINDS = ["threads", "processes"]
#: The four cases a round number cycles through: (target kind, whether the session stays open).
CASES = [("entry", False), ("entry", True), ("evidence", False), ("evidence", True)]


def attempt(app: Armarius, _agent: Actor, admin: Actor, repair: int, take_over: bool) -> Outcome:
    """An administrator's part in a round: apply option 1 of the repair (taking the session over if asked)."""
    return as_outcome(app.repairs.apply, admin, repair, "opt-1", take_over=take_over)


@pytest.fixture
def make_racers(desk: Desk) -> Iterator[Any]:
    started: list[Racers] = []

    def make(kind: str) -> Racers:
        racers: Racers
        if kind == "threads":
            racers = ThreadRacers(desk.app, desk.agent, 2, attempt, "repair-racer")
        else:
            racers = ProcessRacers(desk.app.settings, desk.agent, 2, attempt, "repair-racer")
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
    outcomes = racers.race([(number, admin, repair, stays_open) for admin in admins])
    context = f"round {number} ({kind}, {'open' if stays_open else 'closed'} session): {outcomes}"
    crashed = [outcome for outcome in outcomes if "exception" in outcome]
    assert not crashed, f"{context}\n{crashed[0]['traceback']}"
    won = [index for index, outcome in enumerate(outcomes) if "ok" in outcome]
    assert len(won) == 1, context
    (winner,) = won
    answer = outcomes[winner]["ok"]
    assert (answer["status"], answer["written"], answer["decided_by"]) == (
        "active", True, admins[winner].audit_name), context
    loser = outcomes[1 - winner]
    assert (loser["type"], loser["code"]) in {(Conflict.__name__, "conflict"), (NotAllowed.__name__, "not_allowed")}, \
        context
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
