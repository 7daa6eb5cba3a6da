"""Schemathesis against the live /api, as an agent (bearer token) and as a person (cookie + CSRF header):
no server error, and no response that breaks the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from armarius.app import Armarius
from armarius.auth.permissions import Role
from tests.helpers import OPERATOR, Team, make_team
from tests.web.people import Visitors


def populated(app: Armarius) -> Team:
    team = make_team(app)
    make_team(app, "beta")
    app.directory.set_role("alpha-human", workspace="beta", role=Role.READER, by=OPERATOR)
    app.drafts.propose(team.agent, {"slug": "notes/one", "title": "One <b>\u202e", "text": "x"})
    return team


@pytest.fixture
def agent_headers(app: Armarius) -> dict[str, str]:
    return {"Authorization": f"Bearer {populated(app).agent_token}"}


@pytest.fixture
def person_headers(app: Armarius, visitors: Visitors) -> dict[str, str]:
    person = visitors.log_in_team(populated(app))
    return {"Cookie": f"armarius_session={person.cookie}", "X-CSRF-Token": person.csrf()}


def conforms(base_url: str, headers: dict[str, str]) -> list[str]:
    """Every operation of the live document, called with generated data; the operations checked."""
    schema = schemathesis.openapi.from_url(f"{base_url}/api/openapi.json")
    checked = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case: Any) -> None:
            case.call_and_validate(headers=headers)

        call()
        checked.append(f"{operation.method.upper()} {operation.path}")
    return checked


def test_the_api_keeps_its_document_for_an_agent(base_url: str, agent_headers: dict[str, str]) -> None:
    assert "GET /api/queue" in conforms(base_url, agent_headers)


def test_the_api_keeps_its_document_for_a_person(base_url: str, person_headers: dict[str, str]) -> None:
    assert "POST /api/workspace" in conforms(base_url, person_headers)
