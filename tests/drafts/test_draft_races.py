"""Eight create_draft calls at once with one approval, on SQLite and PostgreSQL, threads and processes.

Each round a human approves a fresh payload; eight racers line up on a barrier and call
``create_draft`` with that one token at the same moment. With eight different operation ids exactly
one creates the draft and seven are refused with ``approval_used``; nothing else is allowed (no
``storage_unavailable``, no ``draft_exists``, no unexpected exception). With one shared operation
id exactly one creates it and seven get the earlier answer replayed. Afterwards the stored state
must agree with the answers: one draft per slug naming the winner's operation, its approval
``consumed`` by that operation, an operation row for the winner only, and the audit log recording
each creation, refusal and replay exactly once, with an intact chain.

A second race pits a human approving a proposal again against the agent using the approval it
collected before, at the same moment: either the draft is created and the re-approval refused
(the proposal is drafted), or the old approval is superseded and create_draft refused; never both.
Rejecting the proposal instead races the same way: the draft and a refused rejection, or the
approval withdrawn and create_draft refused.

A third race has a human approve a proposal again while its agent asks for it, each round with
an approval of the workspace past its lifetime, which both transactions set out to mark expired:
they must queue, not deadlock, and the expiry is recorded once.

Threads share one application (SQLite: one connection per thread; PostgreSQL: the pool). The
processes are started once per test with 'spawn', each opens its own application and takes its
rounds from a queue, so spawning costs are paid once, not per round (tests/racers.py).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.config import Settings
from armarius.errors import ApprovalUsed
from tests.helpers import OwnerSQL, Team, make_team
from tests.racers import TIMEOUT, Outcome, ProcessRacers, Racers, ThreadRacers, as_outcome

RACERS = 8
ROUNDS = 200
SAME_OPERATION_ROUNDS = 100
REAPPROVAL_ROUNDS = 60
SWEEP_ROUNDS = 40
WORKSPACE = "races"


def payload_for(variant: str, number: int) -> dict[str, str]:
    return {"slug": f"{variant}/round-{number}", "title": f"Race {variant} round {number}",
            "text": f"Round {number} of the {variant} race.\nZweite Zeile: grüße, 🙂\n"}


def attempt(app: Armarius, agent: Actor, payload: dict[str, str], token: str, operation: str) -> Outcome:
    """The answer, the refusal (its class and code) or any other exception, as picklable data."""
    return as_outcome(app.drafts.create_draft, agent, payload, token, operation=operation)


# Rounds and their checks -----------------------------------------------------------------------


class Rounds:
    """What every round promised, checked per round against the answers and at the end against the store."""

    def __init__(self, app: Armarius, team: Team) -> None:
        self.app, self.team = app, team
        #: slug -> (approval id, the winning operation, every operation tried, shared operation or not)
        self.expected: dict[str, tuple[int, str, list[str], bool]] = {}
        self.categories: Counter[str] = Counter()
        #: How often each racer won: the races are real only if more than one of them ever does.
        self.winners: Counter[int] = Counter()

    def play(self, racers: Racers, variant: str, number: int, *, same_operation: bool) -> None:
        payload = payload_for(variant, number)
        approval = self.app.drafts.approve(self.team.human, payload=payload)
        operations = ([f"op-{variant}-{number}"] * RACERS if same_operation
                      else [f"op-{variant}-{number}-{index}" for index in range(RACERS)])
        outcomes = racers.race([(number, payload, approval.token, operation) for operation in operations])
        winner = self._check(payload["slug"], operations, outcomes, same_operation=same_operation)
        self.expected[payload["slug"]] = (approval.approval_id, winner, operations, same_operation)

    def _check(self, slug: str, operations: list[str], outcomes: list[Outcome], *, same_operation: bool) -> str:
        context = f"{slug}: {list(zip(operations, outcomes, strict=True))}"
        crashed = [outcome for outcome in outcomes if "exception" in outcome]
        assert not crashed, f"{context}\n{crashed[0]['traceback']}"
        created = [index for index, outcome in enumerate(outcomes)
                   if outcome.get("ok") == {"slug": slug, "draft": True, "replayed": False}]
        assert len(created) == 1, context
        others = [outcome for index, outcome in enumerate(outcomes) if index != created[0]]
        if same_operation:
            assert all(outcome.get("ok") == {"slug": slug, "draft": True, "replayed": True} for outcome in others), \
                context
            self.categories["1 created, 7 replayed"] += 1
        else:
            assert all(outcome.get("type") == ApprovalUsed.__name__ and outcome["code"] == ApprovalUsed.code
                       for outcome in others), context
            self.categories["1 created, 7 approval_used"] += 1
        self.winners[created[0]] += 1
        return operations[created[0]]

    def check_store(self) -> None:
        """The stored drafts, approvals, operations and audit events agree with every round's answers."""
        workspace = self.team.agent.workspace_id
        with OwnerSQL(self.app.settings) as sql:
            drafts = sql.rows("SELECT slug, operation_id, approval_id FROM drafts WHERE workspace_id = ?",
                              (workspace,))
            approvals = {row[0]: (row[1], row[2]) for row in sql.rows(
                "SELECT id, outcome, operation_id FROM approvals WHERE workspace_id = ?", (workspace,))}
            operations = sorted(row[0] for row in sql.rows(
                "SELECT operation_id FROM operations WHERE workspace_id = ?", (workspace,)))
        assert Counter(row[0] for row in drafts) == Counter(dict.fromkeys(self.expected, 1))
        for slug, operation, approval_id in drafts:
            expected_approval, winner, _, _ = self.expected[slug]
            assert (operation, approval_id) == (winner, expected_approval), slug
            assert approvals[approval_id] == ("consumed", winner), slug
        assert len(approvals) == len(self.expected)
        assert len(self.winners) > 1, f"one racer won every round: {self.winners}"
        assert operations == sorted(winner for _, winner, _, _ in self.expected.values())
        listed = {row["slug"]: row["operation"] for row in self.app.drafts.drafts(self.team.human)}
        assert listed == {slug: winner for slug, (_, winner, _, _) in self.expected.items()}
        self._check_audit(workspace)

    def _check_audit(self, workspace: int) -> None:
        events: dict[str, Counter[str]] = {slug: Counter() for slug in self.expected}
        unrelated = 0  # events of the workspace that are about no round (the team's setup, logins)
        for event in audit.tail(self.app.database, workspace, limit=1_000_000):
            action = event.action
            if event.subject not in self.expected:
                assert not action.startswith(("draft.", "approval.")), event
                unrelated += 1
                continue
            _, winner, operations, _ = self.expected[event.subject]
            if action == "draft.refused":
                action = f"{action}:{event.details['code']}"
                assert event.details["operation"] in operations, event
                assert event.details["operation"] != winner, event
            elif action in ("draft.created", "approval.consumed", "draft.replayed"):
                assert event.details["operation"] == winner, event
            events[event.subject][action] += 1
        for slug, (_, _, _, same_operation) in self.expected.items():
            losers = {"draft.replayed": RACERS - 1} if same_operation else {"draft.refused:approval_used": RACERS - 1}
            assert events[slug] == Counter({"approval.issued": 1, "draft.created": 1, "approval.consumed": 1,
                                            **losers}), slug
        checked, broken = audit.verify_chain(self.app.database, workspace)
        assert broken is None, broken
        assert checked == sum(events[slug].total() for slug in self.expected) + unrelated


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app, WORKSPACE)


@pytest.fixture
def thread_racers(app: Armarius, team: Team) -> Iterator[ThreadRacers]:
    racers = ThreadRacers(app, team.agent, RACERS, attempt, "draft-racer")
    yield racers
    racers.close()


@pytest.fixture
def process_racers(settings: Settings, team: Team) -> Iterator[ProcessRacers]:
    racers = ProcessRacers(settings, team.agent, RACERS, attempt, "draft-racer")
    yield racers
    racers.close()


def test_one_token_eight_threads_one_draft(app: Armarius, team: Team, thread_racers: ThreadRacers) -> None:
    rounds = Rounds(app, team)
    for number in range(ROUNDS):
        rounds.play(thread_racers, "threads", number, same_operation=False)
    rounds.check_store()
    assert rounds.categories == {"1 created, 7 approval_used": ROUNDS}


def test_one_token_eight_processes_one_draft(app: Armarius, team: Team, process_racers: ProcessRacers) -> None:
    rounds = Rounds(app, team)
    for number in range(ROUNDS):
        rounds.play(process_racers, "processes", number, same_operation=False)
    for number in range(SAME_OPERATION_ROUNDS):
        rounds.play(process_racers, "processes-same-op", number, same_operation=True)
    rounds.check_store()
    assert rounds.categories == {"1 created, 7 approval_used": ROUNDS,
                                 "1 created, 7 replayed": SAME_OPERATION_ROUNDS}


def test_one_token_one_operation_eight_threads_replay(app: Armarius, team: Team,
                                                      thread_racers: ThreadRacers) -> None:
    rounds = Rounds(app, team)
    for number in range(SAME_OPERATION_ROUNDS):
        rounds.play(thread_racers, "threads-same-op", number, same_operation=True)
    rounds.check_store()
    assert rounds.categories == {"1 created, 7 replayed": SAME_OPERATION_ROUNDS}


@dataclass(frozen=True)
class Decision:
    """A human's decision that races the agent's create_draft with the approval it collected before."""

    #: The decision's answer for a proposal, as data.
    decide: Callable[[Armarius, Team, int], Any]
    #: What it answers when it comes first, for (proposal, the approval it ends).
    answer: Callable[[int, int], Any]
    #: create_draft's refusal then (approval_expired's reason), and the proposal's approvals' outcomes.
    reason: str
    outcomes: tuple[str, ...]


def _approve_again(app: Armarius, team: Team, proposal: int) -> tuple[int | None, str | None]:
    issued = app.drafts.approve(team.human, proposal_id=proposal)
    return issued.replaces, issued.replaced_outcome


DECISIONS = {
    "approve again": Decision(_approve_again, lambda _proposal, approval: (approval, "superseded"), "superseded",
                              ("superseded", "issued")),
    "reject": Decision(lambda app, team, proposal: app.drafts.reject(team.human, proposal, "Withdrawn."),
                       lambda proposal, approval: {"proposal": proposal, "status": "rejected",
                                                   "withdrawn_approval": approval}, "withdrawn", ("withdrawn",)),
}


@pytest.mark.parametrize("decision", DECISIONS.values(), ids=DECISIONS.keys())
def test_a_human_s_decision_racing_the_approval_never_lets_both_work(app: Armarius, team: Team,
                                                                     decision: Decision) -> None:
    barrier = threading.Barrier(2, timeout=TIMEOUT)

    def decide(proposal: int) -> Outcome:
        barrier.wait()
        return as_outcome(decision.decide, app, team, proposal)

    def create(payload: dict[str, str], token: str, operation: str) -> Outcome:
        barrier.wait()
        return attempt(app, team.agent, payload, token, operation)

    categories: Counter[str] = Counter()
    expected: dict[int, list[str]] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for number in range(REAPPROVAL_ROUNDS):
            payload = payload_for("decision", number)
            proposed = app.drafts.propose(team.agent, payload)
            first = app.drafts.approve(team.human, proposal_id=proposed["proposal"])
            token = app.drafts.proposal_status(team.agent, proposed["proposal"], proposed["collection_key"])["approval"]
            created_future = pool.submit(create, payload, token, f"op-decision-{number}")
            decided = pool.submit(decide, proposed["proposal"]).result(timeout=2 * TIMEOUT)
            created = created_future.result(timeout=2 * TIMEOUT)
            context = f"round {number}: create {created}, decision {decided}"
            assert "exception" not in created, f"{context}\n{created['traceback']}"
            assert "exception" not in decided, f"{context}\n{decided['traceback']}"
            if created.get("ok") == {"slug": payload["slug"], "draft": True, "replayed": False}:
                assert (decided.get("code"), decided["details"].get("status")) == ("conflict", "drafted"), context
                categories["created, the decision refused"] += 1
                expected[proposed["proposal"]] = ["consumed"]
            else:
                assert (created.get("code"), created["details"].get("reason")) == ("approval_expired",
                                                                                   decision.reason), context
                assert decided.get("ok") == decision.answer(proposed["proposal"], first.approval_id), context
                categories["decided, create_draft refused"] += 1
                expected[proposed["proposal"]] = list(decision.outcomes)
    assert categories.total() == REAPPROVAL_ROUNDS
    with OwnerSQL(app.settings) as sql:
        rows = sql.rows("SELECT proposal_id, outcome, sealed_token IS NOT NULL FROM approvals WHERE workspace_id = ? "
                        "ORDER BY id", (team.agent.workspace_id,))
        drafts = {row[0] for row in sql.rows("SELECT slug FROM drafts WHERE workspace_id = ?",
                                             (team.agent.workspace_id,))}
    stored: dict[int, list[str]] = {}
    for proposal, outcome, sealed in rows:
        stored.setdefault(proposal, []).append(outcome)
        assert bool(sealed) == (outcome == "issued"), (proposal, outcome)  # a sealed copy only while live
    assert stored == expected
    assert len(drafts) == categories["created, the decision refused"]
    _, broken = audit.verify_chain(app.database, team.agent.workspace_id)
    assert broken is None, broken


def test_approving_and_collecting_while_marking_expiries_never_deadlock(app: Armarius, team: Team) -> None:
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    real_clock = app.drafts.clock

    def run(call: Any) -> Outcome:
        barrier.wait()
        return as_outcome(call)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for number in range(SWEEP_ROUNDS):
            payload = payload_for("sweep", number)
            proposed = app.drafts.propose(team.agent, payload)
            first = app.drafts.approve(team.human, proposal_id=proposed["proposal"])
            app.drafts.clock = lambda: real_clock() - app.drafts.approval_ttl - timedelta(seconds=1)
            due = app.drafts.approve(team.human, payload=payload_for("due", number))  # already past its lifetime
            app.drafts.clock = real_clock
            status = pool.submit(run, partial(app.drafts.proposal_status, team.agent, proposed["proposal"],
                                              proposed["collection_key"]))
            again = pool.submit(run, partial(app.drafts.approve, team.human, proposal_id=proposed["proposal"]))
            outcomes = [status.result(timeout=2 * TIMEOUT), again.result(timeout=2 * TIMEOUT)]
            assert all("ok" in outcome for outcome in outcomes), outcomes
            handed, reissued = outcomes[0]["ok"]["approval"], outcomes[1]["ok"]
            assert handed in (first.token, reissued.token), number
            expiries = [event for event in audit.tail(app.database, team.agent.workspace_id, limit=20)
                        if event.action == "approval.expired" and event.details["approval"] == due.approval_id]
            assert len(expiries) == 1, (number, expiries)
    _, broken = audit.verify_chain(app.database, team.agent.workspace_id)
    assert broken is None, broken
