"""`armarius approve` and `armarius drafts`: what you see is what you sign."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result

from armarius.app import Armarius
from armarius.auth.secrets import token_digest
from armarius.config import Settings
from tests.cli.test_cli import Cli
from tests.helpers import Team, make_team

PAYLOAD = {"slug": "news/launch", "title": "Launch \u202enotes", "text": "First line.\nSecond\u200b line.\n"}


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def as_human(team: Team, settings: Settings, *args: str, stdin: str | None = None) -> Result:
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": team.human_password}
    return command(*args, "--workspace", "alpha", "--as", "alpha-human", stdin=stdin)


def approvals(app: Armarius, team: Team) -> list[dict[str, object]]:
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        return tx.all("SELECT token_digest, outcome, fingerprint FROM approvals")


def test_without_confirmation_the_content_is_shown_and_nothing_approved(
    app: Armarius, settings: Settings, team: Team, tmp_path: Path
) -> None:
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps(PAYLOAD), encoding="utf-8")
    result = as_human(team, settings, "approve", str(proposal))
    assert result.exit_code == 9
    assert "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧" in result.stdout
    assert "Second⟦U+200B ZERO WIDTH SPACE⟧ line." in result.stdout
    assert "First line." in result.stdout
    fingerprint = app.drafts.parse(PAYLOAD).fingerprint
    assert fingerprint in result.stdout
    assert "--confirm-exact-content" in result.stderr
    assert approvals(app, team) == []


def test_with_confirmation_a_token_is_printed_once_and_stored_as_a_digest(
    app: Armarius, settings: Settings, team: Team, tmp_path: Path
) -> None:
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps(PAYLOAD, indent=4), encoding="utf-8")
    result = as_human(team, settings, "--json", "approve", str(proposal), "--confirm-exact-content")
    assert result.exit_code == 0, result.stderr
    issued = json.loads(result.stdout)
    stored = approvals(app, team)
    assert [(row["token_digest"], row["outcome"]) for row in stored] == [(token_digest(issued["approval"]), "issued")]
    created = app.drafts.create_draft(team.agent, PAYLOAD, issued["approval"], "op-1")
    assert created["draft"] is True


@pytest.mark.parametrize("content", [
    '{"slug": "a", "title": "t", "text": "x", "extra": 1}',
    '{"slug": "a", "title": "t", "text": 5}',
    '{"slug": "a", "title": "t", "text": "x", "text": "y"}',
    '{"slug": "a", "title": "t", "text": NaN}',
    '["a", "t", "x"]',
    "not json",
])
def test_a_malformed_proposal_file_is_refused(
    app: Armarius, settings: Settings, team: Team, tmp_path: Path, content: str
) -> None:
    proposal = tmp_path / "proposal.json"
    proposal.write_text(content, encoding="utf-8")
    result = as_human(team, settings, "approve", str(proposal), "--confirm-exact-content")
    assert result.exit_code == 3
    assert "invalid_input" in result.stderr
    assert approvals(app, team) == []


def test_the_review_queue_and_an_agents_proposal(app: Armarius, settings: Settings, team: Team) -> None:
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    queue = json.loads(as_human(team, settings, "--json", "drafts", "proposals").stdout)
    assert [(p["proposal"], p["status"]) for p in queue] == [(proposed["proposal"], "pending")]
    shown = as_human(team, settings, "approve", "--proposal", str(proposed["proposal"]))
    assert shown.exit_code == 9
    assert "proposal 1 by agent:alpha-agent" in shown.stdout
    approved = as_human(team, settings, "--json", "approve", "--proposal", str(proposed["proposal"]),
                        "--confirm-exact-content")
    assert approved.exit_code == 0, approved.stderr
    token = json.loads(approved.stdout)["approval"]
    collected = app.drafts.proposal_status(team.agent, proposed["proposal"], proposed["collection_key"])
    assert collected["approval"] == token
    app.drafts.create_draft(team.agent, PAYLOAD, token, "op-1")
    listed = json.loads(as_human(team, settings, "--json", "drafts", "list").stdout)
    assert [d["slug"] for d in listed] == ["news/launch"]
    shown_draft = as_human(team, settings, "drafts", "show", "news/launch")
    assert "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧" in shown_draft.stdout
    # An entry's title may not hide characters: this draft cannot become an entry as it is.
    promotion = as_human(team, settings, "--json", "drafts", "promote", "news/launch")
    assert promotion.exit_code == 3
    assert json.loads(promotion.stderr)["error"]["details"] == {"field": "title"}
    assert app.drafts.draft(team.human, "news/launch")["promoted_revision"] is None


def test_reject_and_self_approval(app: Armarius, settings: Settings, team: Team) -> None:
    mine = app.drafts.propose(team.human, dict(PAYLOAD))
    refused = as_human(team, settings, "approve", "--proposal", str(mine["proposal"]), "--confirm-exact-content")
    assert refused.exit_code == 4
    assert "separation of duties" in refused.stderr
    rejected = as_human(team, settings, "--json", "drafts", "reject", str(mine["proposal"]), "--note", "too vague")
    assert json.loads(rejected.stdout) == {"proposal": mine["proposal"], "status": "rejected"}
    assert approvals(app, team) == []


def test_an_agent_cannot_approve_from_the_cli(app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps(PAYLOAD), encoding="utf-8")
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": team.agent_token}
    result = command("approve", str(proposal), "--confirm-exact-content", "--workspace", "alpha",
                     "--as", "alpha-agent")
    assert result.exit_code == 4
    assert team.agent_token not in result.stdout + result.stderr
    assert approvals(app, team) == []
