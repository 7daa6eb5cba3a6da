"""Drafts through the agent surface (the SDK's in-memory MCP client) and the human service calls.

Every refusal shows its stable code, that no draft was written, and the token's state.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.errors import Conflict, InvalidInput, NotAllowed, NotFound
from tests.helpers import OPERATOR, OwnerSQL, Team, agent_of, make_team

pytestmark = pytest.mark.anyio

PAYLOAD = {"slug": "news/launch", "title": "Launch notes", "text": "Line one.\nLine two.\nLine three.\n"}


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def drafts_and_tokens(app: Armarius, team: Team) -> tuple[list[Any], list[Any]]:
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        drafts = tx.all("SELECT slug, title, text FROM drafts ORDER BY slug")
        approvals = tx.all("SELECT id, outcome, used_at, operation_id FROM approvals ORDER BY id")
    return drafts, approvals


def approve(app: Armarius, team: Team, payload: dict[str, str] | None = None) -> str:
    return app.drafts.approve(team.human, payload=dict(payload or PAYLOAD)).token


async def test_the_whole_round_trip_with_a_proposal(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        proposed = await agent("propose_draft", **PAYLOAD)
        pending = await agent("proposal_status", proposal=proposed["proposal"],
                              collection_key=proposed["collection_key"])
        app.drafts.approve(team.human, proposal_id=proposed["proposal"])
        collected = await agent("proposal_status", proposal=proposed["proposal"],
                                collection_key=proposed["collection_key"])
        again = await agent("proposal_status", proposal=proposed["proposal"],
                            collection_key=proposed["collection_key"])
        created = await agent("create_draft", **PAYLOAD, approval=collected["approval"], operation="op-1")
        replayed = await agent("create_draft", **PAYLOAD, approval=collected["approval"], operation="op-1")
        after = await agent("proposal_status", proposal=proposed["proposal"],
                            collection_key=proposed["collection_key"])
        tools = {tool.name for tool in (await agent.client.list_tools()).tools}
    assert (pending["status"], pending["next_step"]) == ("pending", "wait_for_human")
    assert "approval" not in pending
    assert (collected["status"], collected["next_step"], collected["collected"]) == ("approved", "create_draft", True)
    assert collected["approval"].startswith("arm_")
    assert again["approval"] == collected["approval"]  # the hand-over repeats until the approval is used
    assert created == {"slug": "news/launch", "draft": True, "replayed": False}
    assert replayed == {"slug": "news/launch", "draft": True, "replayed": True}
    assert (after["status"], after["approval_outcome"], after["next_step"]) == ("drafted", "consumed", "none")
    assert "approval" not in after
    assert not {name for name in tools if "approve" in name or "promote" in name or "reject" in name}
    drafts, approvals = drafts_and_tokens(app, team)
    assert drafts == [PAYLOAD]
    assert [(a["outcome"], a["operation_id"]) for a in approvals] == [("consumed", "op-1")]
    actions = [event.action for event in chain.tail(app.database, team.agent.workspace_id, 20)]
    for action in ("draft.proposed", "approval.issued", "approval.collected", "approval.consumed", "draft.created",
                   "draft.replayed"):
        assert action in actions
    # Drafts are not entries: recall does not find them.
    assert app.memory.recall(team.agent, "Launch notes")["results"] == []


@pytest.mark.parametrize("change", [
    {"slug": "news/launch-2"},
    {"title": "Launch notes!"},
    {"text": "Line one.\nLine 2.\nLine three.\n"},
    {"text": "Line one.\nLine two.\nLine three."},
    {"title": "Launch\u200b notes"},
])
async def test_other_content_is_approval_mismatch(app: Armarius, team: Team, change: dict[str, str]) -> None:
    token = approve(app, team)
    before = drafts_and_tokens(app, team)
    async with agent_of(app, team.agent) as agent:
        refused = await agent("create_draft", **{**PAYLOAD, **change}, approval=token, operation="op-1")
    assert refused["error"] == "approval_mismatch"
    assert drafts_and_tokens(app, team) == before
    assert before[1][0]["outcome"] == "issued"


async def test_missing_unknown_and_foreign_tokens_are_approval_missing(app: Armarius, team: Team) -> None:
    other = make_team(app, "beta")
    foreign = app.drafts.approve(other.human, payload=dict(PAYLOAD)).token
    mine = approve(app, team)
    before = drafts_and_tokens(app, team)
    async with agent_of(app, team.agent) as agent:
        answers = [await agent("create_draft", **PAYLOAD, approval=token, operation=f"op-{i}")
                   for i, token in enumerate(["", "   ", "arm_made-up", foreign, mine[:-1], "ümlaut"])]
    assert [answer["error"] for answer in answers] == ["approval_missing"] * 6
    assert drafts_and_tokens(app, team) == before


async def test_an_expired_approval_is_refused_and_recorded_as_expired(
    app: Armarius, settings: Settings, team: Team
) -> None:
    token = approve(app, team)
    with OwnerSQL(settings) as owner:
        owner.execute("UPDATE approvals SET expires_at = ?", ("2000-01-01T00:00:00.000000Z",))
    async with agent_of(app, team.agent) as agent:
        refused = await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
    drafts, approvals = drafts_and_tokens(app, team)
    assert refused["error"] == "approval_expired"
    assert drafts == []
    assert approvals[0]["outcome"] == "expired"
    actions = [event.action for event in chain.tail(app.database, team.agent.workspace_id, 5)]
    assert actions[-2:] == ["approval.expired", "draft.refused"]


async def test_a_real_expiry(app: Armarius, settings: Settings, team: Team) -> None:
    from datetime import timedelta

    app.drafts.approval_ttl = timedelta(milliseconds=1)
    token = approve(app, team)
    async with agent_of(app, team.agent) as agent:
        refused = await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
    assert refused["error"] == "approval_expired"


async def test_a_used_token_and_a_reused_operation(app: Armarius, team: Team) -> None:
    token = approve(app, team)
    async with agent_of(app, team.agent) as agent:
        await agent("create_draft", **PAYLOAD, approval=token, operation="op-1")
        before = drafts_and_tokens(app, team)
        used = await agent("create_draft", **PAYLOAD, approval=token, operation="op-2")
        conflict = await agent("create_draft", **{**PAYLOAD, "title": "Other"}, approval=token, operation="op-1")
    assert used["error"] == "approval_used"
    assert conflict["error"] == "operation_conflict"
    assert drafts_and_tokens(app, team) == before


async def test_an_existing_draft_is_never_overwritten(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        await agent("create_draft", **PAYLOAD, approval=approve(app, team), operation="op-1")
        second = {**PAYLOAD, "text": "Replacement text."}
        token = approve(app, team, second)
        before = drafts_and_tokens(app, team)
        refused = await agent("create_draft", **second, approval=token, operation="op-2")
    assert refused["error"] == "draft_exists"
    assert drafts_and_tokens(app, team) == before
    assert before[1][1]["outcome"] == "issued"  # the refused call left the second token usable


@pytest.mark.parametrize(("arguments", "field"), [
    ({**PAYLOAD, "extra": "x"}, "arguments"),
    ({**PAYLOAD, "title": 7}, "title"),
    ({**PAYLOAD, "title": " Launch notes"}, "title"),  # an entry's title is stored trimmed: promotion would change it
    ({**PAYLOAD, "text": None}, "text"),
    ({**PAYLOAD, "slug": "Not A Slug"}, "slug"),
    ({**PAYLOAD, "text": "x" * (64 * 1024 + 1)}, "text"),
    ({"slug": "a", "title": "t"}, "arguments"),
])
async def test_invalid_input_writes_nothing(app: Armarius, team: Team, arguments: dict[str, Any], field: str) -> None:
    token = approve(app, team)
    before = drafts_and_tokens(app, team)
    async with agent_of(app, team.agent) as agent:
        refused = await agent("create_draft", **arguments, approval=token, operation="op-1")
        proposed = await agent("propose_draft", **{k: v for k, v in arguments.items() if k != "approval"})
    assert refused["error"] == "invalid_input"
    assert refused["details"]["field"] == field
    assert proposed["error"] == "invalid_input"
    assert drafts_and_tokens(app, team) == before
    assert token not in json.dumps(refused)


async def test_a_reader_is_not_allowed(app: Armarius) -> None:
    team = make_team(app, agent_role=Role.READER)
    token = approve(app, team)
    async with agent_of(app, team.agent) as reader:
        refused = await reader("create_draft", **PAYLOAD, approval=token, operation="op-1")
        proposal = await reader("propose_draft", **PAYLOAD)
    assert refused["error"] == "not_allowed"
    assert proposal["error"] == "not_allowed"
    assert drafts_and_tokens(app, team)[1][0]["outcome"] == "issued"


async def test_separation_of_duties(app: Armarius, team: Team) -> None:
    proposed = app.drafts.propose(team.human, dict(PAYLOAD))
    assert "collection_key" not in proposed  # humans are shown their token directly
    with pytest.raises(NotAllowed):
        app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    with pytest.raises(NotAllowed):
        app.drafts.approve(team.agent, payload=dict(PAYLOAD))
    agent_proposal = app.drafts.propose(team.agent, dict(PAYLOAD))
    with pytest.raises(NotAllowed):
        app.drafts.approve(team.agent, proposal_id=agent_proposal["proposal"])
    assert drafts_and_tokens(app, team) == ([], [])
    # Another human may approve the first proposal.
    app.directory.add_principal("second-human", Kind.HUMAN, workspace="alpha", role=Role.EDITOR, by=OPERATOR,
                                password="second human password")
    second = app.directory.authenticate_password("second-human", "second human password", workspace="alpha")
    assert app.drafts.approve(second, proposal_id=proposed["proposal"]).token


async def test_collection_is_for_the_proposer_with_its_key(app: Armarius, team: Team) -> None:
    other_agent = make_team(app, "beta").agent
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    impostor_key = app.drafts.propose(team.agent, {**PAYLOAD, "slug": "news/other"})["collection_key"]
    async with agent_of(app, team.agent) as agent:
        wrong_key = await agent("proposal_status", proposal=proposed["proposal"], collection_key=impostor_key)
        right_key = await agent("proposal_status", proposal=proposed["proposal"],
                                collection_key=proposed["collection_key"])
    async with agent_of(app, other_agent) as outsider:
        foreign = await outsider("proposal_status", proposal=proposed["proposal"],
                                 collection_key=proposed["collection_key"])
    assert wrong_key["error"] == "invalid_input"
    assert right_key["approval"].startswith("arm_")
    assert foreign["error"] == "not_found"


async def test_a_rejected_proposal_cannot_be_approved(app: Armarius, team: Team) -> None:
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    app.drafts.reject(team.human, proposed["proposal"], "Say when the launch is.")
    async with agent_of(app, team.agent) as agent:
        status = await agent("proposal_status", proposal=proposed["proposal"])
    assert (status["status"], status["note"]) == ("rejected", "Say when the launch is.")
    with pytest.raises(Conflict):
        app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    with pytest.raises(Conflict):
        app.drafts.reject(team.human, proposed["proposal"])


async def test_promotion_is_human_and_recorded(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        await agent("create_draft", **PAYLOAD, approval=approve(app, team), operation="op-1")
    with pytest.raises(NotAllowed):
        app.drafts.promote(team.agent, PAYLOAD["slug"])
    promoted = app.drafts.promote(team.human, PAYLOAD["slug"])
    entry = app.memory.read(team.human, PAYLOAD["slug"])
    assert (promoted["revision"], entry["body"], entry["title"]) == (1, PAYLOAD["text"], PAYLOAD["title"])
    assert app.drafts.draft(team.human, PAYLOAD["slug"])["promoted_revision"] == 1
    with pytest.raises(Conflict):
        app.drafts.promote(team.human, PAYLOAD["slug"])
    assert chain.tail(app.database, team.agent.workspace_id, 1)[0].action == "draft.promoted"


async def test_a_draft_whose_title_an_entry_cannot_keep_is_not_promoted(app: Armarius, settings: Settings,
                                                                           team: Team) -> None:
    """A draft written before titles with white space at their ends were refused: promoting it would store
    another title than the one approved, so it is refused and stays a draft."""
    async with agent_of(app, team.agent) as agent:
        await agent("create_draft", **PAYLOAD, approval=approve(app, team), operation="op-1")
    with OwnerSQL(settings) as owner:
        owner.execute("UPDATE drafts SET title = ' ' || title || ' '")
    with pytest.raises(InvalidInput) as refused:
        app.drafts.promote(team.human, PAYLOAD["slug"])
    assert refused.value.details == {"field": "title"}
    assert app.drafts.draft(team.human, PAYLOAD["slug"])["promoted_revision"] is None
    with pytest.raises(NotFound):
        app.memory.read(team.human, PAYLOAD["slug"])


async def test_the_token_never_leaves_its_two_moments(
    app: Armarius, settings: Settings, team: Team, caplog: pytest.LogCaptureFixture
) -> None:
    """Shown once to the human, collected once by the agent: never in logs, audit, tables or errors."""
    caplog.set_level(logging.DEBUG)
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    answers = []
    async with agent_of(app, team.agent) as agent:
        token = (await agent("proposal_status", proposal=proposed["proposal"],
                             collection_key=proposed["collection_key"]))["approval"]
        answers.append(await agent("create_draft", **{**PAYLOAD, "title": "x"}, approval=token, operation="op-0"))
        answers.append(await agent("create_draft", **PAYLOAD, approval=token, operation="op-1"))
        answers.append(await agent("create_draft", **PAYLOAD, approval=token, operation="op-2"))
        answers.append(await agent("create_draft", **PAYLOAD, approval=token + "x", operation="op-3"))
    assert [a.get("error") for a in answers] == ["approval_mismatch", None, "approval_used", "approval_missing"]
    events = json.dumps([event.to_dict() for event in chain.tail(app.database, team.agent.workspace_id, 100)])
    with OwnerSQL(settings) as owner:
        tables = [row[0] for row in owner.rows(
            "SELECT name FROM sqlite_master WHERE type = 'table'" if settings.database_url is None else
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        dump = repr([owner.rows(f'SELECT * FROM "{table}"') for table in tables])
    seen = events + dump + json.dumps(answers) + caplog.text
    assert token not in seen
    assert token[4:20] not in seen
    assert proposed["collection_key"] not in dump
