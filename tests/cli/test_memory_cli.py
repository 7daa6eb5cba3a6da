"""Human memory operations from the CLI: a human principal's password is required."""

from __future__ import annotations

import json

import pytest

from armarius.app import Armarius
from armarius.config import Settings
from armarius.memory.service import RememberRequest
from tests.cli.test_cli import Cli
from tests.helpers import Team, make_team


@pytest.fixture
def team(app: Armarius) -> Team:
    team = make_team(app)
    app.memory.remember(team.agent, RememberRequest("ops/db", "Database host", "db-1 in rack 2"))
    return team


def as_human(team: Team, settings: Settings, *args: str, password: str | None = None) -> tuple[int, str, str]:
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": password or team.human_password}
    result = command("--json", *args, "--workspace", "alpha", "--as", "alpha-human")
    return result.exit_code, result.stdout, result.stderr


def test_curate_review_and_uncurate(app: Armarius, settings: Settings, team: Team) -> None:
    code, out, err = as_human(team, settings, "memory", "curate", "ops/db", "--revision", "1")
    assert code == 0, err
    assert json.loads(out) == {"slug": "ops/db", "revision": 1, "curated": True, "changed": True}
    app.memory.remember(team.agent, RememberRequest("ops/db", "Database host", "db-2 now", override_curated=True,
                                                    reason="migrated last night"))
    code, out, _ = as_human(team, settings, "memory", "needs-review")
    review = json.loads(out)
    assert review[0]["overrides"][0]["reason"] == "migrated last night"
    assert "+db-2 now" in review[0]["diff"]
    code, out, _ = as_human(team, settings, "memory", "history", "ops/db")
    assert [r["overrode_curated"] for r in json.loads(out)["revisions"]] == [False, True]
    code, out, _ = as_human(team, settings, "memory", "show", "ops/db", "--revision", "1")
    assert json.loads(out)["body"] == "db-1 in rack 2"
    assert as_human(team, settings, "memory", "curate", "ops/db", "--revision", "2")[0] == 0
    code, out, _ = as_human(team, settings, "memory", "needs-review")
    assert json.loads(out) == []
    code, out, _ = as_human(team, settings, "memory", "uncurate", "ops/db")
    assert json.loads(out)["changed"] is True


def test_curating_a_revision_you_did_not_read_is_refused(app: Armarius, settings: Settings, team: Team) -> None:
    app.memory.remember(team.agent, RememberRequest("ops/db", "Database host", "db-1 in rack 3"))
    code, _, err = as_human(team, settings, "memory", "curate", "ops/db", "--revision", "1")
    assert code == 6
    assert json.loads(err)["error"]["details"]["current_revision"] == 2
    assert app.memory.read(team.human, "ops/db")["curated"] is False


def test_a_wrong_password_or_an_agent_name_is_refused(app: Armarius, settings: Settings, team: Team) -> None:
    code, _, err = as_human(team, settings, "memory", "curate", "ops/db", "--revision", "1", password="wrong")
    assert (code, json.loads(err)["error"]["code"]) == (4, "unauthenticated")
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": team.agent_token}
    result = command("--json", "memory", "curate", "ops/db", "--revision", "1", "--workspace", "alpha",
                     "--as", "alpha-agent")
    assert result.exit_code == 4
    assert team.agent_token not in result.stdout + result.stderr
    assert app.memory.read(team.human, "ops/db")["curated"] is False
