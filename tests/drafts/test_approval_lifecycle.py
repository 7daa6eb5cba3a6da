"""An approval's life after it is issued: handed over (repeatably), used, expired, superseded, withdrawn,
issued again.

The agent side runs through the SDK's in-memory MCP client; the human side calls the service as the
CLI does. Time moves by the service's clock, never by sleeping. Every refusal shows that nothing was
written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain
from armarius.config import Settings
from armarius.errors import Conflict
from tests.helpers import Agent, OwnerSQL, Team, agent_of, make_team

pytestmark = pytest.mark.anyio

PAYLOAD = {"slug": "news/launch", "title": "Launch notes", "text": "Line one.\nLine two.\n"}


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def move_clock(app: Armarius, by: timedelta) -> None:
    """From now on the service's clock runs ``by`` ahead of the real one."""
    app.drafts.clock = lambda: datetime.now(UTC) + by


def stored(app: Armarius, team: Team) -> dict[str, Any]:
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        return {
            "drafts": tx.all("SELECT slug, title, text, approval_id FROM drafts ORDER BY slug"),
            "approvals": tx.all("SELECT id, outcome, used_at, collected_at, sealed_token IS NOT NULL AS sealed "
                                "FROM approvals ORDER BY id"),
            "operations": tx.all("SELECT operation_id FROM operations ORDER BY operation_id"),
        }


def actions(app: Armarius, team: Team, since: int = 0) -> list[str]:
    return [event.action for event in chain.tail(app.database, team.agent.workspace_id, 1000)][since:]


async def propose_approve_collect(app: Armarius, team: Team, agent: Agent,
                                  payload: dict[str, str]) -> tuple[dict[str, Any], str]:
    proposed = await agent("propose_draft", **payload)
    app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    collected = await agent("proposal_status", proposal=proposed["proposal"],
                            collection_key=proposed["collection_key"])
    return proposed, collected["approval"]


# Item 1: expiry is a real state ---------------------------------------------------------------


async def test_an_expired_approval_is_approved_again_and_the_agent_is_told_so(app: Armarius, team: Team) -> None:
    app.drafts.approval_ttl = timedelta(seconds=1)  # ARMARIUS_APPROVAL_TTL_SECONDS=1
    async with agent_of(app, team.agent) as agent:
        proposed, first_token = await propose_approve_collect(app, team, agent, PAYLOAD)
        proposal = proposed["proposal"]
        move_clock(app, timedelta(seconds=2))  # "wait 2 s"
        refused = await agent("create_draft", **PAYLOAD, approval=first_token, operation="op-1")
        before = stored(app, team)
        status = await agent("proposal_status", proposal=proposal, collection_key=proposed["collection_key"])
        queue = {view["proposal"]: view["status"] for view in app.drafts.proposals(team.human, "expired")}
        again = app.drafts.approve(team.human, proposal_id=proposal)
        collected = await agent("proposal_status", proposal=proposal, collection_key=proposed["collection_key"])
        old_refused = await agent("create_draft", **PAYLOAD, approval=first_token, operation="op-2")
        created = await agent("create_draft", **PAYLOAD, approval=collected["approval"], operation="op-3")

    assert refused["error"] == "approval_expired"
    assert refused["details"]["next_step"] == "ask_human_to_approve_again"
    assert (refused["details"]["proposal"], refused["details"]["reason"]) == (proposal, "expired")
    assert f"armarius approve --proposal {proposal}" in refused["message"]
    assert (before["drafts"], before["operations"]) == ([], [])
    assert [(a["outcome"], a["sealed"]) for a in before["approvals"]] == [("expired", False)]

    assert (status["status"], status["approval_outcome"], status["collected"]) == ("expired", "expired", True)
    assert status["next_step"] == "ask_human_to_approve_again"
    assert f"approve --proposal {proposal}" in status["instruction"]
    assert "approval" not in status
    assert queue == {proposal: "expired"}

    assert (again.replaces, again.replaced_outcome) == (before["approvals"][0]["id"], "expired")
    assert again.token != first_token
    assert collected["approval"] == again.token
    assert old_refused["error"] == "approval_expired"  # the old token stays dead
    assert created == {"slug": PAYLOAD["slug"], "draft": True, "replayed": False}
    after = stored(app, team)
    assert [(a["outcome"], a["sealed"]) for a in after["approvals"]] == [("expired", False), ("consumed", False)]
    assert after["drafts"][0]["approval_id"] == again.approval_id
    events = actions(app, team)
    assert events.count("approval.expired") == 1
    assert "approval.reissued" in events


async def test_collected_means_the_agent_received_the_token(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed = await agent("propose_draft", **PAYLOAD)
        app.drafts.approve(team.human, proposal_id=proposed["proposal"])
        waiting = await agent("proposal_status", proposal=proposed["proposal"])
        move_clock(app, app.drafts.approval_ttl + timedelta(seconds=1))
        expired = await agent("proposal_status", proposal=proposed["proposal"])
        late = await agent("proposal_status", proposal=proposed["proposal"], collection_key=proposed["collection_key"])
    assert (waiting["status"], waiting["collected"], waiting["next_step"]) == ("approved", False, "collect_approval")
    assert (expired["status"], expired["collected"], expired["next_step"]) == (
        "expired", False, "ask_human_to_approve_again")
    assert "approval" not in late
    assert late["collected"] is False
    assert [(a["outcome"], a["collected_at"], a["sealed"]) for a in stored(app, team)["approvals"]] == [
        ("expired", None, False)]


async def test_a_used_approval_cannot_be_approved_again(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed, token = await propose_approve_collect(app, team, agent, PAYLOAD)
        await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
    before, events = stored(app, team), actions(app, team)
    with pytest.raises(Conflict) as refused:
        app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    assert refused.value.details == {"proposal": proposed["proposal"], "status": "drafted"}
    assert (stored(app, team), actions(app, team)) == (before, events)


# Item 10: the hand-over repeats; an unused approval can be issued again ------------------------------


async def test_the_hand_over_repeats_until_the_approval_is_used(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed = await agent("propose_draft", **PAYLOAD)
        issued = app.drafts.approve(team.human, proposal_id=proposed["proposal"])
        key = proposed["collection_key"]
        lost = await agent("proposal_status", proposal=proposed["proposal"], collection_key=key)  # never arrives
        collected_at = stored(app, team)["approvals"][0]["collected_at"]
        again = await agent("proposal_status", proposal=proposed["proposal"], collection_key=key)
        mid = stored(app, team)
        created = await agent("create_draft", **PAYLOAD, approval=again["approval"], operation="op-1")
        after = await agent("proposal_status", proposal=proposed["proposal"], collection_key=key)
    assert lost["approval"] == again["approval"] == issued.token
    assert [(a["outcome"], a["collected_at"], a["sealed"]) for a in mid["approvals"]] == [
        ("issued", collected_at, True)]  # the sealed copy stays while the approval is live; first collection kept
    assert created["draft"] is True
    assert "approval" not in after
    assert after["collected"] is True
    assert [(a["outcome"], a["sealed"]) for a in stored(app, team)["approvals"]] == [("consumed", False)]
    collections = [event.details for event in chain.tail(app.database, team.agent.workspace_id, 100)
                   if event.action == "approval.collected"]
    assert [details["repeat"] for details in collections] == [False, True]


async def test_a_collected_unused_approval_is_replaced_by_a_new_one(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed, first_token = await propose_approve_collect(app, team, agent, PAYLOAD)
        second = app.drafts.approve(team.human, proposal_id=proposed["proposal"])
        before = stored(app, team)
        refused = await agent("create_draft", **PAYLOAD, approval=first_token, operation="op-1")
        unchanged = stored(app, team)
        collected = await agent("proposal_status", proposal=proposed["proposal"],
                                collection_key=proposed["collection_key"])
        created = await agent("create_draft", **PAYLOAD, approval=collected["approval"], operation="op-2")
    assert (second.replaces, second.replaced_outcome) == (before["approvals"][0]["id"], "superseded")
    assert [(a["outcome"], a["sealed"]) for a in before["approvals"]] == [("superseded", False), ("issued", True)]
    assert refused["error"] == "approval_expired"
    assert (refused["details"]["reason"], refused["details"]["next_step"]) == ("superseded", "collect_approval")
    assert unchanged == before
    assert collected["approval"] == second.token != first_token
    assert created["draft"] is True
    events = actions(app, team)
    assert (events.count("approval.superseded"), events.count("approval.reissued")) == (1, 1)


async def test_an_uncollected_approval_is_replaced_too(app: Armarius, team: Team) -> None:
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    first = app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    second = app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    status = app.drafts.proposal_status(team.agent, proposed["proposal"], proposed["collection_key"])
    assert (second.replaces, second.replaced_outcome) == (first.approval_id, "superseded")
    assert status["approval"] == second.token


# Item 3: a replay answers whatever the approval field holds -----------------------------------------


@pytest.mark.parametrize("approval", ["", "   ", "arm_garbage", "ümlaut", None, 7])
async def test_a_replay_of_a_known_operation_ignores_the_approval_field(
    app: Armarius, team: Team, approval: Any
) -> None:
    token = app.drafts.approve(team.human, payload=dict(PAYLOAD)).token
    app.drafts.create_draft(team.agent, dict(PAYLOAD), token, "op-1")
    before, events = stored(app, team), len(actions(app, team))
    if isinstance(approval, str):
        async with agent_of(app, team.agent) as agent:
            replayed = await agent("create_draft", **PAYLOAD, approval=approval, operation="op-1")
    else:  # the tool's schema wants a string; the service takes anything
        replayed = app.drafts.create_draft(team.agent, dict(PAYLOAD), approval, "op-1")
    assert replayed == {"slug": PAYLOAD["slug"], "draft": True, "replayed": True}
    assert stored(app, team) == before
    assert actions(app, team, since=events) == ["draft.replayed"]


async def test_a_new_operation_with_an_empty_approval_is_refused(app: Armarius, team: Team) -> None:
    app.drafts.create_draft(team.agent, dict(PAYLOAD), app.drafts.approve(team.human, payload=dict(PAYLOAD)).token,
                            "op-1")
    before = stored(app, team)
    async with agent_of(app, team.agent) as agent:
        refused = await agent("create_draft", **PAYLOAD, approval="", operation="op-2")
        other = await agent("create_draft", **{**PAYLOAD, "title": "Other"}, approval="", operation="op-1")
    assert (refused["error"], refused["details"]["next_step"]) == ("approval_missing", "propose_draft")
    assert other["error"] == "operation_conflict"  # same operation, other payload: refused whatever the approval
    assert stored(app, team) == before


# The sweep: an expiry is recorded once, whoever sees it first ----------------------------------------


async def test_an_expiry_is_marked_once_and_drops_the_sealed_copy(app: Armarius, settings: Settings,
                                                                  team: Team) -> None:
    proposals = [app.drafts.propose(team.agent, {**PAYLOAD, "slug": f"news/n{i}"}) for i in range(3)]
    for proposed in proposals:
        app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    move_clock(app, app.drafts.approval_ttl + timedelta(seconds=1))
    events = len(actions(app, team))
    app.drafts.proposal_status(team.agent, proposals[0]["proposal"])
    app.drafts.proposal_status(team.agent, proposals[1]["proposal"])
    assert actions(app, team, since=events) == ["approval.expired"] * 3
    with OwnerSQL(settings) as owner:
        assert owner.rows("SELECT outcome, sealed_token FROM approvals ORDER BY id") == [("expired", None)] * 3


# A human withdraws an approval by rejecting the proposal ------------------------------------------


async def test_rejecting_an_approved_proposal_withdraws_its_approval_at_once(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed, token = await propose_approve_collect(app, team, agent, PAYLOAD)
        approval = stored(app, team)["approvals"][0]["id"]
        events = len(actions(app, team))
        rejected = app.drafts.reject(team.human, proposed["proposal"], "Wrong launch date.")
        after_reject, withdrawal = stored(app, team), actions(app, team, since=events)
        refused = await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
        status = await agent("proposal_status", proposal=proposed["proposal"],
                             collection_key=proposed["collection_key"])
    assert rejected == {"proposal": proposed["proposal"], "status": "rejected", "withdrawn_approval": approval}
    assert withdrawal == ["approval.withdrawn", "proposal.rejected"]
    assert [(a["outcome"], a["sealed"]) for a in after_reject["approvals"]] == [("withdrawn", False)]
    assert refused["error"] == "approval_expired"
    assert {key: refused["details"][key] for key in ("approval", "proposal", "reason", "next_step")} == {
        "approval": approval, "proposal": proposed["proposal"], "reason": "withdrawn", "next_step": "propose_draft"}
    assert stored(app, team) == after_reject  # nothing written: no draft, the approval withdrawn as it was
    assert (status["status"], status["note"], status["next_step"]) == ("rejected", "Wrong launch date.",
                                                                       "propose_draft")
    assert "approval" not in status
    with pytest.raises(Conflict):  # a rejected proposal is not approved again
        app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    event = next(event for event in chain.tail(app.database, team.agent.workspace_id, 100)
                 if event.action == "proposal.rejected")
    assert event.details == {"proposal": proposed["proposal"], "note": "Wrong launch date.",
                             "withdrawn_approval": approval}


async def test_a_rejection_after_the_approval_expired_withdraws_nothing(app: Armarius, team: Team) -> None:
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    move_clock(app, app.drafts.approval_ttl + timedelta(seconds=1))
    events = len(actions(app, team))
    rejected = app.drafts.reject(team.human, proposed["proposal"])
    assert rejected["withdrawn_approval"] is None
    assert actions(app, team, since=events) == ["proposal.rejected", "approval.expired"]
    assert [a["outcome"] for a in stored(app, team)["approvals"]] == ["expired"]


@pytest.mark.parametrize("situation", ["drafted", "rejected"])
async def test_a_drafted_or_rejected_proposal_cannot_be_rejected(app: Armarius, team: Team, situation: str) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed, token = await propose_approve_collect(app, team, agent, PAYLOAD)
        if situation == "drafted":
            await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
        else:
            app.drafts.reject(team.human, proposed["proposal"])
    before, events = stored(app, team), actions(app, team)
    with pytest.raises(Conflict) as refused:
        app.drafts.reject(team.human, proposed["proposal"], "Too late.")
    assert refused.value.details == {"proposal": proposed["proposal"], "status": situation}
    assert (stored(app, team), actions(app, team)) == (before, events)


# Every refusal names a next step, and following it works --------------------------------------------

Scenario = Callable[[Armarius, Team, Agent], Any]


async def _draft_exists(app: Armarius, team: Team, agent: Agent) -> dict[str, Any]:
    _, token = await propose_approve_collect(app, team, agent, PAYLOAD)
    await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
    second = {**PAYLOAD, "text": "Other text.\n"}
    _, second_token = await propose_approve_collect(app, team, agent, second)
    refused = await agent("create_draft", **second, approval=second_token, operation="op-2")
    # The step the old message named ("choose another slug") does not work with this approval:
    another_slug = await agent("create_draft", **{**second, "slug": "news/launch-2"}, approval=second_token,
                               operation="op-3")
    assert another_slug["error"] == "approval_mismatch"
    return {"refused": refused, "want": {**second, "slug": "news/launch-2"}}


async def _mismatch(app: Armarius, team: Team, agent: Agent) -> dict[str, Any]:
    _, token = await propose_approve_collect(app, team, agent, PAYLOAD)
    changed = {**PAYLOAD, "title": "Launch notes, revised"}
    return {"refused": await agent("create_draft", **changed, approval=token, operation="op-1"), "want": changed}


async def _expired(app: Armarius, team: Team, agent: Agent) -> dict[str, Any]:
    proposed, token = await propose_approve_collect(app, team, agent, PAYLOAD)
    move_clock(app, app.drafts.approval_ttl + timedelta(seconds=1))
    return {"refused": await agent("create_draft", **PAYLOAD, approval=token, operation="op-1"), "want": PAYLOAD,
            "key": proposed["collection_key"]}


async def _superseded(app: Armarius, team: Team, agent: Agent) -> dict[str, Any]:
    proposed, token = await propose_approve_collect(app, team, agent, PAYLOAD)
    app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    return {"refused": await agent("create_draft", **PAYLOAD, approval=token, operation="op-1"), "want": PAYLOAD,
            "key": proposed["collection_key"]}


async def _withdrawn(app: Armarius, team: Team, agent: Agent) -> dict[str, Any]:
    proposed, token = await propose_approve_collect(app, team, agent, PAYLOAD)
    app.drafts.reject(team.human, proposed["proposal"], "Reformulate it.")
    return {"refused": await agent("create_draft", **PAYLOAD, approval=token, operation="op-1"), "want": PAYLOAD}


async def _used(app: Armarius, team: Team, agent: Agent) -> dict[str, Any]:
    _, token = await propose_approve_collect(app, team, agent, PAYLOAD)
    await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
    return {"refused": await agent("create_draft", **PAYLOAD, approval=token, operation="op-2"), "want": PAYLOAD}


async def _operation_conflict(app: Armarius, team: Team, agent: Agent) -> dict[str, Any]:
    _, token = await propose_approve_collect(app, team, agent, PAYLOAD)
    await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
    other = {**PAYLOAD, "slug": "news/other"}
    _, other_token = await propose_approve_collect(app, team, agent, other)
    return {"refused": await agent("create_draft", **other, approval=other_token, operation="op-1"), "want": other,
            "token": other_token}


async def _missing(app: Armarius, team: Team, agent: Agent) -> dict[str, Any]:
    return {"refused": await agent("create_draft", **PAYLOAD, approval="arm_made-up", operation="op-1"),
            "want": PAYLOAD}


async def follow(app: Armarius, team: Team, agent: Agent, situation: dict[str, Any]) -> dict[str, Any]:
    """Do exactly the step the refusal names; the answer of the create_draft it leads to."""
    details, want = situation["refused"]["details"], situation["want"]
    step = details["next_step"]
    if step == "propose_draft":
        _, token = await propose_approve_collect(app, team, agent, want)
    elif step == "ask_human_to_approve_again":
        app.drafts.approve(team.human, proposal_id=details["proposal"])
        token = (await agent("proposal_status", proposal=details["proposal"],
                             collection_key=situation["key"]))["approval"]
    elif step == "collect_approval":
        token = (await agent("proposal_status", proposal=details["proposal"],
                             collection_key=situation["key"]))["approval"]
    elif step == "new_operation_id":
        token = situation["token"]
    else:
        assert step == "none"
        return {"slug": want["slug"], "draft": True, "replayed": False,
                "stored": app.drafts.draft(team.human, want["slug"])["text"] == want["text"]}
    return {**await agent("create_draft", **want, approval=token, operation="op-follow"), "stored": True}


@pytest.mark.parametrize(("scenario", "code", "step"), [
    (_draft_exists, "draft_exists", "propose_draft"),
    (_mismatch, "approval_mismatch", "propose_draft"),
    (_expired, "approval_expired", "ask_human_to_approve_again"),
    (_superseded, "approval_expired", "collect_approval"),
    (_withdrawn, "approval_expired", "propose_draft"),
    (_used, "approval_used", "none"),
    (_operation_conflict, "operation_conflict", "new_operation_id"),
    (_missing, "approval_missing", "propose_draft"),
], ids=lambda value: getattr(value, "__name__", value))
async def test_every_refusal_names_a_next_step_that_works(app: Armarius, team: Team, scenario: Scenario, code: str,
                                                          step: str) -> None:
    async with agent_of(app, team.agent) as agent:
        situation = await scenario(app, team, agent)
        assert (situation["refused"]["error"], situation["refused"]["details"]["next_step"]) == (code, step)
        followed = await follow(app, team, agent, situation)
    assert followed == {"slug": situation["want"]["slug"], "draft": True, "replayed": False, "stored": True}
