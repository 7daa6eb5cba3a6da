"""Fixtures for repair tests: a workspace with an agent, a human editor and two administrators, an entry and
an active evidence unit to repair, and a record of everything a refusal must leave as it was."""

from __future__ import annotations

import hashlib
import json
import random
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
from armarius.memory.service import RememberRequest
from tests.helpers import OPERATOR, OwnerSQL, Team, make_team

ENTRY = "deploy/staging-host"
ENTRY_TITLE = "Where staging runs"
ENTRY_BODY = "Staging runs on host **stage-01** behind the office VPN; deploy with `make stage`."
CORRECT_BODY = "Staging moved to host **stage-07** in the cloud account; deploy with `make stage-cloud`."
UNIT = "incident/dns-outage"
UNIT_TITLE = "The DNS outage of March"
UNIT_BODY = "The resolver cache expired while the primary was down.\n"
OTHER_UNIT = "incident/disk-full"
ADMINS = {"alpha-admin": "admin correct horse battery", "alpha-admin-2": "second admin correct horse battery"}
#: The tables a refusal must leave as they were (audit_events by its length).
TABLES = ("repairs", "repair_events", "pending_operations", "entries", "entry_revisions", "evidence_units",
          "evidence_revisions", "sessions", "session_checkpoints")

#: Every character but the line feed that str.splitlines() ends a line at, and its marker as the draft page
#: shows it (tests/web/test_repair_display.py checks the list against str.splitlines()).
MARKERS = {"\x0b": "⟦U+000B LINE TABULATION⟧", "\x0c": "⟦U+000C FORM FEED⟧", "\r": "⟦U+000D CARRIAGE RETURN⟧",
           "\x1c": "⟦U+001C CONTROL⟧", "\x1d": "⟦U+001D CONTROL⟧", "\x1e": "⟦U+001E CONTROL⟧",
           "\x85": "⟦U+0085 CONTROL⟧", "\u2028": "⟦U+2028 LINE SEPARATOR⟧",
           "\u2029": "⟦U+2029 PARAGRAPH SEPARATOR⟧"}
SEPARATORS = list(MARKERS)


@dataclass
class Desk:
    app: Armarius
    team: Team
    admin: Actor
    admin_2: Actor

    @property
    def agent(self) -> Actor:
        return self.team.agent

    @property
    def human(self) -> Actor:
        return self.team.human

    @property
    def evidence_dir(self) -> Path:
        return self.app.settings.data_dir / "evidence"

    def open_session(self, subject: str = "Why does the staging deploy fail?", owner: Actor | None = None) -> int:
        return int(self.app.sessions.open(owner or self.agent, subject)["session"])

    def entry_revision(self, slug: str = ENTRY) -> int:
        return int(self.app.memory.read(self.agent, slug)["revision"])

    def alternative(self, body: str = CORRECT_BODY, *, name: str = ENTRY, revision: int | None = None,
                    title: str = ENTRY_TITLE, **more: Any) -> dict[str, Any]:
        kind = more.pop("kind", "entry")
        if revision is None:
            revision = self.entry_revision(name) if kind == "entry" else self.app.evidence.current(
                self.agent, name).revision
        return {"target": {"kind": kind, "name": name, "revision": revision}, "title": title, "body": body,
                "rationale": "The session's query showed the new host.", **more}

    def unit_alternative(self, body: str = "The resolver cache expired: the TTL was 60 s, not 3600 s.\n",
                         name: str = UNIT, title: str = UNIT_TITLE, **more: Any) -> dict[str, Any]:
        return self.alternative(body, name=name, title=title, kind="evidence", **more)

    def prepare(self, session: int, *alternatives: dict[str, Any], actor: Actor | None = None) -> dict[str, Any]:
        return self.app.repairs.prepare(actor or self.agent, session, "The captured config names another host.",
                                        list(alternatives) or [self.alternative()])

    def unit_file(self, name: str = UNIT) -> bytes:
        return self.app.evidence.unit_path("alpha", name).read_bytes()

    def receipt_path(self, session: int, repair: int) -> Path:
        return self.evidence_dir / "alpha" / "sessions" / str(session) / "repairs" / f"{repair}.json"

    def make_unit(self, name: str, title: str, body: str) -> None:
        """An active evidence unit: created and reviewed by the human editor, activated by an administrator."""
        self.app.evidence.create(self.human, name, title, body)
        self.app.evidence.review(self.human, name, 1)
        self.app.evidence.activate(self.admin, name, 1)


def costly_repair(desk: Desk, slug: str = "ops/many-lines") -> tuple[str, int]:
    """An entry of 21,000 short lines, each repeated just under difflib's junk threshold (~21,000 / 100 times),
    and a repair of it with five alternatives of the same lines shuffled: a line-by-line diff of each would cost
    seconds of CPU. The entry's body and the repair."""
    chosen = random.Random(7)
    count = 21_000
    kinds = count // 100 - 5
    current = "\n".join(f"{index % kinds:x}" for index in range(count))
    desk.app.memory.remember(desk.agent, RememberRequest(slug, "Big", current, tags=[]))
    alternatives = [desk.alternative("\n".join(f"{chosen.randrange(kinds):x}" for _ in range(count)), name=slug,
                                     title="Big") for _ in range(5)]
    return current, int(desk.prepare(desk.open_session(), *alternatives)["repair"])


def make_desk(app: Armarius) -> Desk:
    team = make_team(app, "alpha")
    admins = []
    for name, password in ADMINS.items():
        app.directory.add_principal(name, Kind.HUMAN, workspace="alpha", role=Role.ADMIN, by=OPERATOR,
                                    password=password)
        admins.append(app.directory.authenticate_password(name, password, workspace="alpha"))
    desk = Desk(app, team, *admins)
    app.memory.remember(team.agent, RememberRequest(ENTRY, ENTRY_TITLE, ENTRY_BODY, tags=["ops", "staging"]))
    desk.make_unit(UNIT, UNIT_TITLE, UNIT_BODY)
    desk.make_unit(OTHER_UNIT, "The disk that filled up", "Logs were never rotated on db-02.\n")
    return desk


@pytest.fixture
def desk(app: Armarius) -> Desk:
    return make_desk(app)


def files_of(folder: Path) -> dict[str, str]:
    """Every file under the folder (hidden ones included) and the SHA-256 of its bytes."""
    if not folder.exists():
        return {}
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def state(desk: Desk) -> dict[str, Any]:
    """Every repair, entry, unit and session row, the audit log's length and the evidence folder's files."""
    with OwnerSQL(desk.app.settings) as sql:
        found: dict[str, Any] = {table: sorted(map(repr, sql.rows(f"SELECT * FROM {table}"))) for table in TABLES}
        found["audit_events"] = sql.count("audit_events")
    found["files"] = files_of(desk.evidence_dir)
    return found


@contextmanager
def changes_nothing(desk: Desk, error: type[ArmariusError]) -> Iterator[list[ArmariusError]]:
    before = state(desk)
    caught: list[ArmariusError] = []
    with pytest.raises(error) as raised:
        yield caught
    caught.append(raised.value)
    assert state(desk) == before


def statuses(desk: Desk, repair: int) -> list[tuple[str, str]]:
    """The repair's history as (event, status) pairs."""
    return [(event["event"], event["status"]) for event in desk.app.repairs.show(desk.admin, repair)["history"]]


def audit_of(desk: Desk, prefix: str = "repair.") -> list[tuple[str, str, dict[str, Any]]]:
    """(actor, action, details) of the audit events whose action starts with ``prefix``, in order."""
    with OwnerSQL(desk.app.settings) as sql:
        rows = sql.rows("SELECT actor, action, details FROM audit_events WHERE action LIKE ? "
                        "ORDER BY workspace_id, seq", (prefix + "%",))
    return [(actor, action, json.loads(details)) for actor, action, details in rows]
