"""Fixtures for evidence unit tests: an application on each engine with a team (an agent, an editor and an
administrator, all of workspace alpha), and what a refusal must leave as it was."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.errors import ArmariusError
from tests.helpers import OPERATOR, OwnerSQL, Team, make_team

TABLES = ("evidence_units", "evidence_revisions", "evidence_search", "unit_vectors")
ADMIN_PASSWORD = "alpha-admin correct horse battery"


@dataclass
class Lab:
    app: Armarius
    team: Team
    admin: Actor

    @property
    def units_folder(self) -> Path:
        return self.app.evidence.evidence_dir / self.team.workspace / "units"

    def path(self, name: str) -> Path:
        return self.app.evidence.unit_path(self.team.workspace, name)

    def active(self, name: str, title: str, body: str) -> int:
        """A unit created, reviewed and activated: its revision (1)."""
        evidence = self.app.evidence
        evidence.create(self.team.human, name, title, body)
        evidence.review(self.team.human, name, 1)
        evidence.activate(self.admin, name, 1)
        return 1


def add_admin(app: Armarius, workspace: str = "alpha") -> Actor:
    app.directory.add_principal(f"{workspace}-admin", Kind.HUMAN, workspace=workspace, role=Role.ADMIN, by=OPERATOR,
                                password=ADMIN_PASSWORD)
    return app.directory.authenticate_password(f"{workspace}-admin", ADMIN_PASSWORD, workspace=workspace)


@pytest.fixture
def lab(app: Armarius) -> Lab:
    return Lab(app, make_team(app, "alpha"), add_admin(app))


def state(app: Armarius, actions: str = "%") -> dict[str, Any]:
    """Every evidence table's rows, the audit log's length (of the events whose action is like ``actions``:
    a human's login through the CLI adds one) and every file under the evidence folder: what a refusal
    must leave as it was."""
    with OwnerSQL(app.settings) as sql:
        found: dict[str, Any] = {table: sorted(map(repr, sql.rows(f"SELECT * FROM {table}"))) for table in TABLES}
        found["audit_events"] = sql.rows("SELECT count(*) FROM audit_events WHERE action LIKE ?", (actions,))[0][0]
    folder = app.evidence.evidence_dir
    found["files"] = {str(path.relative_to(folder)): path.read_bytes()
                      for path in sorted(folder.rglob("*")) if path.is_file()} if folder.exists() else {}
    return found


@contextmanager
def changes_nothing(app: Armarius, error: type[ArmariusError]) -> Iterator[list[ArmariusError]]:
    before = state(app)
    caught: list[ArmariusError] = []
    with pytest.raises(error) as raised:
        yield caught
    caught.append(raised.value)
    assert state(app) == before
