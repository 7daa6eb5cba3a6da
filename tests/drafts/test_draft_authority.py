"""Whose authority a draft rests on: the approver's current right to approve, a proposal drafted through
another approval, and an operation id that belongs to the principal that made it.

- An approval works only while the human who gave it may approve in the workspace: demoted to a role
  without ``approvals.issue``, or no longer a member, and the approval is refused when it is used or
  handed over (``approval_expired``, ``reason: "revoked"``), marked ``revoked``, and a human who may
  approve approves again.
- A proposal whose exact content was drafted with another approval (``armarius approve FILE``) is
  ``drafted``: not pending, not approvable or rejectable, its own live approval not handed over.
- An operation id replays only for the principal that made it; anyone else gets ``operation_conflict``
  whatever the payload, and nothing is written.

The agent side runs through the SDK's in-memory MCP client, the human side calls the service as the CLI
does; on SQLite and PostgreSQL. Every refusal shows that nothing was written.
"""

from __future__ import annotations

from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.errors import Conflict, OperationConflict
from tests.helpers import OPERATOR, Agent, OwnerSQL, Team, agent_of, make_team

pytestmark = pytest.mark.anyio

PAYLOAD = {"slug": "news/launch", "title": "Launch notes", "text": "Line one.\nLine two.\n"}
SECOND_PASSWORD = "alpha-second correct horse battery"


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def stored(app: Armarius, team: Team) -> dict[str, Any]:
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        return {
            "drafts": tx.all("SELECT slug, title, text, approval_id, operation_id, created_by FROM drafts "
                             "ORDER BY slug"),
            "approvals": tx.all("SELECT id, outcome, used_at, operation_id, sealed_token IS NOT NULL AS sealed "
                                "FROM approvals ORDER BY id"),
            "operations": tx.all("SELECT operation_id, fingerprint, result, principal_id FROM operations "
                                 "ORDER BY operation_id"),
            "proposals": tx.all("SELECT id, status, decided_by FROM draft_proposals ORDER BY id"),
        }


def events(app: Armarius, team: Team, since: int = 0) -> list[tuple[str, str]]:
    return [(event.actor, event.action) for event in chain.tail(app.database, team.agent.workspace_id, 1000)][since:]


def second_human(app: Armarius, team: Team) -> Actor:
    """Another human editor of the workspace: one who may approve."""
    app.directory.add_principal(f"{team.workspace}-second", Kind.HUMAN, workspace=team.workspace, role=Role.EDITOR,
                                by=OPERATOR, password=SECOND_PASSWORD)
    return app.directory.authenticate_password(f"{team.workspace}-second", SECOND_PASSWORD, workspace=team.workspace)


def second_agent(app: Armarius, team: Team) -> Actor:
    app.directory.add_principal(f"{team.workspace}-agent2", Kind.AGENT, workspace=team.workspace, role=Role.EDITOR,
                                by=OPERATOR)
    return app.directory.authenticate_token(
        app.directory.issue_token(f"{team.workspace}-agent2", workspace=team.workspace, by=OPERATOR).token)


def take_away_approving(app: Armarius, settings: Settings, team: Team, how: str) -> None:
    """The approving human loses the right to approve: demoted to reader, or no longer a member at all."""
    if how == "demoted":
        app.directory.set_role(team.human.principal, workspace=team.workspace, role=Role.READER, by=OPERATOR)
    else:
        with OwnerSQL(settings) as owner:  # no command removes a member yet; the store allows it
            assert owner.execute("DELETE FROM memberships WHERE principal_id = ?", (team.human.principal_id,)) == 1


async def propose_approve_collect(app: Armarius, approver: Actor, agent: Agent,
                                  payload: dict[str, str]) -> tuple[dict[str, Any], str]:
    proposed = await agent("propose_draft", **payload)
    app.drafts.approve(approver, proposal_id=proposed["proposal"])
    collected = await agent("proposal_status", proposal=proposed["proposal"],
                            collection_key=proposed["collection_key"])
    return proposed, collected["approval"]


# 1. An approval lives only while its approver may approve ------------------------------------------


@pytest.mark.parametrize("how", ["demoted", "removed"])
async def test_an_approval_stops_working_when_its_approver_loses_the_right_to_approve(
    app: Armarius, settings: Settings, team: Team, how: str
) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed, token = await propose_approve_collect(app, team.human, agent, PAYLOAD)
        approval = stored(app, team)["approvals"][0]["id"]
        take_away_approving(app, settings, team, how)
        before, since = stored(app, team), len(events(app, team))
        refused = await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
        after, recorded = stored(app, team), events(app, team, since)
        status = await agent("proposal_status", proposal=proposed["proposal"],
                             collection_key=proposed["collection_key"])
        # The step it names: a human who may approve approves the proposal again; that approval works.
        again = app.drafts.approve(second_human(app, team), proposal_id=proposed["proposal"])
        collected = await agent("proposal_status", proposal=proposed["proposal"],
                                collection_key=proposed["collection_key"])
        created = await agent("create_draft", **PAYLOAD, approval=collected["approval"], operation="op-2")

    assert refused["error"] == "approval_expired"
    assert {key: refused["details"][key] for key in ("approval", "proposal", "reason", "next_step")} == {
        "approval": approval, "proposal": proposed["proposal"], "reason": "revoked",
        "next_step": "ask_human_to_approve_again"}
    assert f"armarius approve --proposal {proposed['proposal']}" in refused["message"]
    # Nothing written: no draft, no operation, the approval unused; only marked revoked, its sealed copy gone.
    assert (after["drafts"], after["operations"]) == ([], []) == (before["drafts"], before["operations"])
    assert [(row["outcome"], row["used_at"], row["sealed"]) for row in before["approvals"]] == [
        ("issued", None, True)]
    assert [(row["outcome"], row["used_at"], row["sealed"]) for row in after["approvals"]] == [
        ("revoked", None, False)]
    assert recorded == [("system", "approval.revoked"), ("agent:alpha-agent", "draft.refused")]

    assert (status["status"], status["approval_outcome"], status["next_step"]) == (
        "expired", "revoked", "ask_human_to_approve_again")
    assert "approval" not in status
    assert "may no longer approve" in status["instruction"]
    assert (again.replaces, again.replaced_outcome) == (approval, "revoked")
    assert collected["approval"] == again.token
    assert created == {"slug": PAYLOAD["slug"], "draft": True, "replayed": False}


async def test_an_approval_is_not_handed_over_once_its_approver_may_no_longer_approve(
    app: Armarius, settings: Settings, team: Team
) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed = await agent("propose_draft", **PAYLOAD)
        app.drafts.approve(team.human, proposal_id=proposed["proposal"])
        take_away_approving(app, settings, team, "demoted")
        since = len(events(app, team))
        status = await agent("proposal_status", proposal=proposed["proposal"],
                             collection_key=proposed["collection_key"])
        revoked = chain.tail(app.database, team.agent.workspace_id, 1000)[since:]
        # Giving the role back does not revive an approval marked revoked.
        app.directory.set_role(team.human.principal, workspace=team.workspace, role=Role.EDITOR, by=OPERATOR)
        later = await agent("proposal_status", proposal=proposed["proposal"],
                            collection_key=proposed["collection_key"])
    assert (status["status"], status["approval_outcome"], status["next_step"]) == (
        "expired", "revoked", "ask_human_to_approve_again")
    assert "approval" not in status
    assert "approval" not in later
    assert later["status"] == "expired"
    approvals = stored(app, team)["approvals"]
    assert [(row["outcome"], row["sealed"]) for row in approvals] == [("revoked", False)]
    assert [(event.actor, event.action, event.details) for event in revoked] == [
        ("system", "approval.revoked", {"approval": approvals[0]["id"], "proposal": proposed["proposal"],
                                        "approved_by": team.human.audit_name})]
    assert [view["status"] for view in app.drafts.proposals(team.human, "expired")] == ["expired"]


@pytest.mark.parametrize("how", ["demoted", "removed"])
async def test_an_approval_of_a_file_stops_working_too(app: Armarius, settings: Settings, team: Team,
                                                       how: str) -> None:
    token = app.drafts.approve(team.human, payload=dict(PAYLOAD)).token
    take_away_approving(app, settings, team, how)
    before = stored(app, team)
    async with agent_of(app, team.agent) as agent:
        refused = await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
        again = await agent("create_draft", **PAYLOAD, approval=token, operation="op-2")
    assert (refused["error"], refused["details"]["reason"], refused["details"]["next_step"]) == (
        "approval_expired", "revoked", "ask_human_to_approve_again")
    assert refused["details"]["proposal"] is None
    assert again["details"]["reason"] == "revoked"  # marked revoked now: refused as such
    after = stored(app, team)
    assert (after["drafts"], after["operations"]) == ([], [])
    assert [row["outcome"] for row in before["approvals"]] == ["issued"]
    assert [(row["outcome"], row["used_at"]) for row in after["approvals"]] == [("revoked", None)]


async def test_an_approver_still_allowed_to_approve_keeps_the_approval_working(app: Armarius, team: Team) -> None:
    """The check is the approver's right now, not an unchanged role: an editor made admin may still approve."""
    token = app.drafts.approve(team.human, payload=dict(PAYLOAD)).token
    app.directory.set_role(team.human.principal, workspace=team.workspace, role=Role.ADMIN, by=OPERATOR)
    created = app.drafts.create_draft(team.agent, dict(PAYLOAD), token, "op-1")
    assert created == {"slug": PAYLOAD["slug"], "draft": True, "replayed": False}


async def test_a_sweep_by_anyone_marks_the_approvals_of_a_demoted_approver(app: Armarius, team: Team) -> None:
    """Like an expiry, a revocation is marked by the next drafts transaction that looks, whoever runs it."""
    other = second_human(app, team)
    tokens = [app.drafts.approve(team.human, payload={**PAYLOAD, "slug": f"news/n{i}"}).token for i in range(2)]
    kept = app.drafts.approve(other, payload={**PAYLOAD, "slug": "news/kept"}).token
    app.directory.set_role(team.human.principal, workspace=team.workspace, role=Role.READER, by=OPERATOR)
    since = len(events(app, team))
    app.drafts.approve(other, payload={**PAYLOAD, "slug": "news/other"})
    assert events(app, team, since) == [("human:alpha-second", "approval.issued"), ("system", "approval.revoked"),
                                        ("system", "approval.revoked")]
    assert [row["outcome"] for row in stored(app, team)["approvals"]] == ["revoked", "revoked", "issued", "issued"]
    assert app.drafts.create_draft(team.agent, {**PAYLOAD, "slug": "news/kept"}, kept, "op-1")["draft"] is True
    assert tokens[0] != kept


# 2. A proposal whose exact content was drafted with another approval is drafted ----------------------


async def test_a_pending_proposal_drafted_through_a_file_approval_is_drafted(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed = await agent("propose_draft", **PAYLOAD)
        other_slug = await agent("propose_draft", **{**PAYLOAD, "text": "Other content, same slug.\n"})
        token = app.drafts.approve(team.human, payload=dict(PAYLOAD)).token  # `armarius approve FILE`
        created = await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
        status = await agent("proposal_status", proposal=proposed["proposal"],
                             collection_key=proposed["collection_key"])
    proposal = proposed["proposal"]
    assert created["draft"] is True
    assert (status["status"], status["next_step"]) == ("drafted", "none")
    assert "another approval" in status["instruction"]
    assert "approval" not in status
    assert app.drafts.proposal(team.human, proposal)["status"] == "drafted"
    assert [view["proposal"] for view in app.drafts.proposals(team.human, "drafted")] == [proposal]
    assert [view["proposal"] for view in app.drafts.proposals(team.human, "pending")] == [other_slug["proposal"]]
    for state, listed in (("drafted", [proposal]), ("pending", [other_slug["proposal"]]), ("approved", []),
                          ("expired", []), ("rejected", [])):
        page = app.drafts.proposals_page(team.human, status=state)
        assert [item["proposal"] for item in page["items"]] == listed, state
    assert app.drafts.pending_summary(team.human)["count"] == 1  # the proposal of other content still waits

    # Nothing is left to approve or reject, and trying writes nothing.
    before, since = stored(app, team), len(events(app, team))
    with pytest.raises(Conflict) as approving:
        app.drafts.approve(team.human, proposal_id=proposal)
    with pytest.raises(Conflict) as rejecting:
        app.drafts.reject(team.human, proposal, "Too late.")
    assert approving.value.details == rejecting.value.details == {"proposal": proposal, "status": "drafted"}
    assert (stored(app, team), events(app, team, since)) == (before, [])


async def test_a_proposal_approved_and_drafted_through_a_file_keeps_its_approval_unused(
    app: Armarius, team: Team
) -> None:
    """The proposal's own approval, collected before, can only meet the draft: it is told nothing is left."""
    async with agent_of(app, team.agent) as agent:
        proposed, own = await propose_approve_collect(app, team.human, agent, PAYLOAD)
        file_token = app.drafts.approve(team.human, payload=dict(PAYLOAD)).token
        await agent("create_draft", **PAYLOAD, approval=file_token, operation="op-1")
        status = await agent("proposal_status", proposal=proposed["proposal"],
                             collection_key=proposed["collection_key"])
        before = stored(app, team)
        refused = await agent("create_draft", **PAYLOAD, approval=own, operation="op-2")
    assert (status["status"], status["approval_outcome"], status["next_step"]) == ("drafted", "issued", "none")
    assert "approval" not in status
    assert (refused["error"], refused["details"]["next_step"]) == ("draft_exists", "none")
    assert "exactly this content" in refused["message"]
    assert stored(app, team) == before


async def test_a_rejected_proposal_stays_rejected_when_its_content_is_drafted(app: Armarius, team: Team) -> None:
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    app.drafts.reject(team.human, proposed["proposal"], "Not like this.")
    app.drafts.create_draft(team.agent, dict(PAYLOAD), app.drafts.approve(team.human, payload=dict(PAYLOAD)).token,
                            "op-1")
    assert app.drafts.proposal(team.human, proposed["proposal"])["status"] == "rejected"
    assert [item["proposal"] for item in app.drafts.proposals_page(team.human, status="rejected")["items"]] == [
        proposed["proposal"]]


# 3. An operation belongs to the principal that made it -----------------------------------------------


@pytest.mark.parametrize("other", ["agent", "human"])
async def test_another_principal_cannot_replay_an_operation(app: Armarius, team: Team, other: str) -> None:
    token = app.drafts.approve(team.human, payload=dict(PAYLOAD)).token
    async with agent_of(app, team.agent) as agent:
        first = await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
    stranger = second_agent(app, team) if other == "agent" else second_human(app, team)
    before, since = stored(app, team), len(events(app, team))
    if other == "agent":
        async with agent_of(app, stranger) as agent2:
            same = await agent2("create_draft", **PAYLOAD, approval="", operation="op-1")
            changed = await agent2("create_draft", **{**PAYLOAD, "title": "Other"}, approval="", operation="op-1")
    else:
        refusals = []
        for sent in (PAYLOAD, {**PAYLOAD, "title": "Other"}):
            with pytest.raises(OperationConflict) as refused:
                app.drafts.create_draft(stranger, dict(sent), "", "op-1")
            refusals.append({"error": refused.value.code, "message": refused.value.message,
                             "details": refused.value.details})
        same, changed = refusals
    after, recorded = stored(app, team), events(app, team, since)
    async with agent_of(app, team.agent) as agent:
        replayed = await agent("create_draft", **PAYLOAD, approval="", operation="op-1")

    assert first == {"slug": PAYLOAD["slug"], "draft": True, "replayed": False}
    assert (same["error"], same["details"]["next_step"]) == ("operation_conflict", "new_operation_id")
    # The same answer whatever the payload: a stranger learns nothing of what the operation wrote.
    assert (same["message"], same["details"]) == (changed["message"], changed["details"])
    assert after == before
    assert recorded == [(stranger.audit_name, "draft.refused")] * 2
    assert replayed == {"slug": PAYLOAD["slug"], "draft": True, "replayed": True}  # its maker still replays it
    assert [row["principal_id"] for row in after["operations"]] == [team.agent.principal_id]


async def test_an_operation_whose_maker_is_unknown_replays_for_nobody(app: Armarius, settings: Settings,
                                                                      team: Team) -> None:
    """An operation an older release stored and no draft names the maker of (the upgrade could not tell)."""
    app.drafts.create_draft(team.agent, dict(PAYLOAD), app.drafts.approve(team.human, payload=dict(PAYLOAD)).token,
                            "op-1")
    with OwnerSQL(settings) as owner:
        assert owner.execute("UPDATE operations SET principal_id = NULL WHERE operation_id = 'op-1'") == 1
    before = stored(app, team)
    with pytest.raises(OperationConflict):
        app.drafts.create_draft(team.agent, dict(PAYLOAD), "", "op-1")
    assert stored(app, team) == before
