"""Draft approvals as a state machine, on both engines: an agent proposes, collects and creates drafts
through its MCP tools; a human approves (again) through the service; time moves by the service's
clock. After every step the store must equal a small model of proposals and their approvals.

What the model pins down (SPEC §3 and §8): a token is consumed at most once, and only by a draft of
exactly its content; a draft exists if and only if its approval was consumed; an expired or
superseded token never works, and a used one never works again; a retry of the same operation
replays its first answer and writes nothing; the hand-over gives the live approval, again and again,
until it is used or expires; a human may approve an unused proposal again.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition

from armarius.app import Armarius
from armarius.errors import Conflict
from tests.helpers import Team
from tests.reliability.machines import CountedMachine, SyncAgent, fresh_team, machine_settings, run_machine, step

pytestmark = pytest.mark.reliability

SLUGS = ("news/launch", "news/recap")  # two, so that proposals compete for a slug
TITLES = ("Launch notes", "Recap")


@dataclass
class Approval:
    id: int
    token: str
    expires: int  # seconds on the machine's clock
    outcome: str = "issued"  # issued, consumed or superseded (expiry is a matter of time)

    def usable(self, now: int) -> bool:
        return self.outcome == "issued" and now < self.expires


@dataclass
class Proposal:
    id: int
    payload: dict[str, str]
    collection_key: str
    approvals: list[Approval] = field(default_factory=list)

    def state(self, now: int) -> str:
        """As proposal_status names it."""
        if not self.approvals:
            return "pending"
        latest = self.approvals[-1]
        if latest.outcome == "consumed":
            return "drafted"
        return "approved" if latest.usable(now) else "expired"


class ApprovalsMachine(CountedMachine):
    app: Armarius

    def __init__(self) -> None:
        super().__init__()
        self.team: Team = fresh_team(self.app, "apv")
        self.agent = SyncAgent(self.app, self.team.agent, self.resources)
        self.ttl = int(self.app.drafts.approval_ttl.total_seconds())
        start, self.now = datetime.now(UTC).replace(microsecond=0), 0
        self.resources.callback(setattr, self.app.drafts, "clock", self.app.drafts.clock)
        self.app.drafts.clock = lambda: start + timedelta(seconds=self.now)
        self.proposals: list[Proposal] = []
        #: Tokens the agent collected (perhaps dead since), with their approval.
        self.held: list[Approval] = []
        #: Operations that created a draft: operation id -> (payload, answer).
        self.operations: dict[str, tuple[dict[str, str], dict[str, object]]] = {}
        self.drafts: dict[str, Approval] = {}  # slug -> the approval that created it
        self.numbers = itertools.count(1)

    def proposal_of(self, approval: Approval) -> Proposal:
        return next(proposal for proposal in self.proposals if approval in proposal.approvals)

    def pick(self, number: int, prefer: str | None) -> Proposal:
        """A proposal in the state ``prefer`` if there is one (None: any), chosen by ``number``."""
        candidates = [proposal for proposal in self.proposals if proposal.state(self.now) == prefer] or self.proposals
        return candidates[number % len(candidates)]

    # Agent steps (MCP tools) -------------------------------------------------------------------

    @step(slug=st.sampled_from(SLUGS), title=st.sampled_from(TITLES))
    def propose(self, slug: str, title: str) -> None:
        payload = {"slug": slug, "title": title, "text": f"Text number {next(self.numbers)}.\n"}
        answer = self.agent("propose_draft", **payload)
        assert answer["status"] == "pending", answer
        self.proposals.append(Proposal(answer["proposal"], payload, answer["collection_key"]))

    @precondition(lambda self: self.proposals)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["approved", "approved", None]))
    def collect(self, number: int, prefer: str | None) -> None:
        """proposal_status with the collection key: the live approval, as often as asked; nothing otherwise."""
        proposal = self.pick(number, prefer)
        answer = self.agent("proposal_status", proposal=proposal.id, collection_key=proposal.collection_key)
        state = proposal.state(self.now)
        assert answer["status"] == state, answer
        if state == "approved":
            latest = proposal.approvals[-1]
            assert answer["approval"] == latest.token
            if latest not in self.held:
                self.held.append(latest)
        else:
            assert "approval" not in answer

    @precondition(lambda self: self.held)
    @step(number=st.integers(min_value=0), newest=st.booleans(), late=st.sampled_from([False, False, True]),
          tampered=st.sampled_from([False, False, False, True]))
    def create_draft(self, number: int, newest: bool, late: bool, tampered: bool) -> None:
        """create_draft with a token the agent holds (the newest, or any: live or not) and a new operation id;
        ``late``: the clock moves to the token's expiry first (no sweep has marked it expired yet)."""
        approval = self.held[-1] if newest else self.held[number % len(self.held)]
        if late:
            self.now = max(self.now, approval.expires)
        payload = dict(self.proposal_of(approval).payload)
        if tampered:
            payload["text"] += "One more line.\n"
        operation = f"op-{next(self.numbers)}"
        answer = self.agent("create_draft", **payload, approval=approval.token, operation=operation)
        if approval.outcome == "consumed":
            expected = "approval_used"
        elif not approval.usable(self.now):
            expected = "approval_expired"  # expired, or superseded by a newer approval
        elif tampered:
            expected = "approval_mismatch"
        elif payload["slug"] in self.drafts:
            expected = "draft_exists"
        else:
            expected = "created"
        if expected != "created":
            assert answer["error"] == expected, (expected, answer)
            return
        assert answer == {"slug": payload["slug"], "draft": True, "replayed": False}, answer
        approval.outcome = "consumed"
        self.drafts[payload["slug"]] = approval
        self.operations[operation] = (payload, answer)

    @precondition(lambda self: self.operations)
    @step(number=st.integers(min_value=0), other_content=st.booleans())
    def retry(self, number: int, other_content: bool) -> None:
        """The same operation again: its first answer, replayed (whatever the approval field holds); with
        other content, refused."""
        operation = sorted(self.operations)[number % len(self.operations)]
        payload, first = self.operations[operation]
        sent = {**payload, "text": payload["text"] + "Changed.\n"} if other_content else payload
        answer = self.agent("create_draft", **sent, approval="not a token", operation=operation)
        if other_content:
            assert answer["error"] == "operation_conflict", answer
        else:
            assert answer == {**first, "replayed": True}, answer

    @step(seconds=st.sampled_from([1, 60]), to_the_edge=st.booleans())
    def time_passes(self, seconds: int, to_the_edge: bool) -> None:
        """Some seconds, or exactly up to the next expiry of a live approval."""
        live = [approval.expires for proposal in self.proposals for approval in proposal.approvals
                if approval.usable(self.now)]
        self.now = min(live) if to_the_edge and live else self.now + seconds

    # Human steps (the service) -----------------------------------------------------------------

    @precondition(lambda self: self.proposals)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["pending", "expired", None]))
    def approve(self, number: int, prefer: str | None) -> None:
        proposal = self.pick(number, prefer)
        if proposal.state(self.now) == "drafted":
            with pytest.raises(Conflict):
                self.app.drafts.approve(self.team.human, proposal_id=proposal.id)
            return
        issued = self.app.drafts.approve(self.team.human, proposal_id=proposal.id)
        if proposal.approvals:
            previous = proposal.approvals[-1]
            replaced = "superseded" if previous.usable(self.now) else "expired"
            assert (issued.replaces, issued.replaced_outcome) == (previous.id, replaced)
            if replaced == "superseded":
                previous.outcome = "superseded"
        assert all(issued.token != approval.token for approval in self.held)
        proposal.approvals.append(Approval(issued.approval_id, issued.token, self.now + self.ttl))

    # After every step ----------------------------------------------------------------------------

    @invariant()
    def the_store_agrees_with_the_model(self) -> None:
        human = self.team.human
        listed = {view["proposal"]: view["status"] for view in self.app.drafts.proposals(human, status=None)}
        assert listed == {proposal.id: proposal.state(self.now) for proposal in self.proposals}
        mine = (human.workspace_id,)
        with self.app.database.transaction(workspace_id=human.workspace_id) as tx:
            approvals = {row["id"]: row["outcome"]
                         for row in tx.all("SELECT id, outcome FROM approvals WHERE workspace_id = ?", mine)}
            drafts = {row["slug"]: row["approval_id"]
                      for row in tx.all("SELECT slug, approval_id FROM drafts WHERE workspace_id = ?", mine)}
            operations = {row["operation_id"]
                          for row in tx.all("SELECT operation_id FROM operations WHERE workspace_id = ?", mine)}
        modelled = [approval for proposal in self.proposals for approval in proposal.approvals]
        assert sorted(approvals) == sorted(approval.id for approval in modelled)
        for approval in modelled:
            if approval.outcome == "issued" and not approval.usable(self.now):
                # Past its lifetime: marked expired by the next sweep (a drafts call), refused either way.
                assert approvals[approval.id] in ("issued", "expired"), approval
            else:
                assert approvals[approval.id] == approval.outcome, approval
        # A draft exists iff its approval was consumed, each approval creating one draft at most.
        assert drafts == {slug: approval.id for slug, approval in self.drafts.items()}
        assert sorted(drafts.values()) == sorted(id_ for id_, outcome in approvals.items() if outcome == "consumed")
        assert operations == set(self.operations)
        for slug, approval in self.drafts.items():
            stored = self.app.drafts.draft(human, slug)
            assert (stored["title"], stored["text"]) == (self.proposal_of(approval).payload["title"],
                                                         self.proposal_of(approval).payload["text"])


def test_approvals_state_machine(app: Armarius) -> None:
    run_machine(ApprovalsMachine, machine_settings(examples=(10, 200), steps=(40, 80)), app=app)
