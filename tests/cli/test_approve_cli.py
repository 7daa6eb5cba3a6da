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
from tests.helpers import OwnerSQL, Team, make_team

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
        return tx.all("SELECT token_digest, outcome, fingerprint FROM approvals ORDER BY id")


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
    assert json.loads(rejected.stdout) == {"proposal": mine["proposal"], "status": "rejected",
                                           "withdrawn_approval": None}
    assert approvals(app, team) == []


def test_rejecting_an_approved_proposal_says_its_approval_is_withdrawn(app: Armarius, settings: Settings,
                                                                      team: Team) -> None:
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    issued = app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    rejected = as_human(team, settings, "drafts", "reject", str(proposed["proposal"]), "--note", "wrong date")
    assert rejected.exit_code == 0, rejected.stderr
    assert rejected.stdout.strip() == (f"Proposal {proposed['proposal']} rejected. Its approval {issued.approval_id} "
                                       "is withdrawn: the token no longer works.")
    assert [row["outcome"] for row in approvals(app, team)] == ["withdrawn"]


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


HIDDEN = {"slug": "news/harmless", "title": "Harmless t\u0456tle \u202eevil", "text": "Zero\u200bwidth.\n"}
RAW = ("\u0456", "\u202e", "\u200b")
MARKERS = ("⟦U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I⟧", "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧")


def test_every_drafts_text_output_reveals_hidden_characters(app: Armarius, settings: Settings, team: Team) -> None:
    """The queue, the list, a draft and the review all print text through the same reveal."""
    proposed = app.drafts.propose(team.agent, dict(HIDDEN))
    queue = as_human(team, settings, "drafts", "proposals")
    review = as_human(team, settings, "approve", "--proposal", str(proposed["proposal"]))
    token = app.drafts.approve(team.human, proposal_id=proposed["proposal"]).token
    app.drafts.create_draft(team.agent, dict(HIDDEN), token, "op-1")
    listed = as_human(team, settings, "drafts", "list")
    shown = as_human(team, settings, "drafts", "show", HIDDEN["slug"])
    for output in (queue.stdout, review.stdout, listed.stdout, shown.stdout):
        assert not any(char in output for char in RAW), output
        assert all(marker in output for marker in MARKERS), output
    assert "Zero⟦U+200B ZERO WIDTH SPACE⟧width." in shown.stdout + review.stdout


def test_drafts_show_has_its_own_heading(app: Armarius, settings: Settings, team: Team) -> None:
    token = app.drafts.approve(team.human, payload=dict(HIDDEN)).token
    app.drafts.create_draft(team.agent, dict(HIDDEN), token, "op-1")
    shown = as_human(team, settings, "drafts", "show", HIDDEN["slug"])
    assert shown.exit_code == 0, shown.stderr
    assert "Approve" not in shown.stdout
    assert "Draft news/harmless (written by agent:alpha-agent at " in shown.stdout
    assert "not promoted" in shown.stdout


def test_a_human_approves_an_expired_proposal_again(app: Armarius, settings: Settings, team: Team) -> None:
    proposed = app.drafts.propose(team.agent, dict(PAYLOAD))
    first = app.drafts.approve(team.human, proposal_id=proposed["proposal"])
    with OwnerSQL(settings) as owner:
        owner.execute("UPDATE approvals SET expires_at = ?", ("2000-01-01T00:00:00.000000Z",))
    queue = json.loads(as_human(team, settings, "--json", "drafts", "proposals", "--status", "expired").stdout)
    assert [(p["proposal"], p["status"], p["approval"]["outcome"]) for p in queue] == [
        (proposed["proposal"], "expired", "issued")]  # expired by the clock, before anything marked it
    again = as_human(team, settings, "--json", "approve", "--proposal", str(proposed["proposal"]),
                     "--confirm-exact-content")
    assert again.exit_code == 0, again.stderr
    issued = json.loads(again.stdout)
    assert (issued["replaces"], issued["replaced_outcome"]) == (first.approval_id, "expired")
    assert [row["outcome"] for row in approvals(app, team)] == ["expired", "issued"]
    collected = app.drafts.proposal_status(team.agent, proposed["proposal"], proposed["collection_key"])
    assert collected["approval"] == issued["approval"] != first.token
    text = as_human(team, settings, "approve", "--proposal", str(proposed["proposal"]), "--confirm-exact-content")
    assert f"It replaces approval {issued['approval_id']} (superseded), which no longer works." in text.stdout
