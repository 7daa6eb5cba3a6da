"""Fixtures for session tests: an application with one git source, a team, and a movable clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from armarius.app import Armarius
from tests.helpers import Team, make_team
from tests.research.conftest import research_app  # noqa: F401  (a fixture used here)
from tests.research.repos import Repo


@dataclass
class Clock:
    """The sessions' clock, moved by the test instead of waiting."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Lab:
    app: Armarius
    repo: Repo
    team: Team
    clock: Clock


@pytest.fixture
def lab(research_app: tuple[Armarius, Repo]) -> Lab:  # noqa: F811
    application, repo = research_app
    clock = Clock(datetime.now(UTC))
    application.sessions.clock = clock
    return Lab(application, repo, make_team(application, "alpha"), clock)
