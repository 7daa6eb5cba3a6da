"""Small builders shared by tests: a workspace with an agent and a human in it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role

OPERATOR = "operator:test"


@dataclass
class Team:
    workspace: str
    agent_token: str
    agent: Actor
    human: Actor
    human_password: str


def make_team(app: Armarius, workspace: str = "alpha", *, agent_role: Role = Role.EDITOR,
              human_role: Role = Role.EDITOR) -> Team:
    directory = app.directory
    directory.create_workspace(workspace, by=OPERATOR)
    directory.add_principal(f"{workspace}-agent", Kind.AGENT, workspace=workspace, role=agent_role, by=OPERATOR)
    password = f"{workspace}-correct horse battery"
    directory.add_principal(f"{workspace}-human", Kind.HUMAN, workspace=workspace, role=human_role, by=OPERATOR,
                            password=password)
    token = directory.issue_token(f"{workspace}-agent", workspace=workspace, by=OPERATOR).token
    return Team(
        workspace=workspace,
        agent_token=token,
        agent=directory.authenticate_token(token),
        human=directory.authenticate_password(f"{workspace}-human", password, workspace=workspace),
        human_password=password,
    )


def tool_payload(result: Any) -> Any:
    """The JSON a tool answered with (text content and structured content agree)."""
    assert result.content[0].type == "text"
    decoded = json.loads(result.content[0].text)
    assert decoded == result.structured_content
    return decoded
