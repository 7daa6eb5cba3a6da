"""Humans racing to create one unit and to edit it from the same revision, on SQLite and PostgreSQL, threads and
processes: per round exactly one creation and exactly one edit succeed, the others are refused
(``already_exists``, ``conflict``), and the unit's file always holds the store's latest revision: files are
written in the order of the store's revisions, inside the transaction that holds the unit."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.auth.model import Actor
from tests.evidence.conftest import Lab
from tests.helpers import OwnerSQL
from tests.racers import Outcome, ProcessRacers, Racers, ThreadRacers, as_outcome

RACERS = 6
ROUNDS = {"threads": 40, "processes": 15}


def create_or_edit(app: Armarius, human: Actor, name: str, expected: int, index: int) -> Outcome:
    """Racer ``index``: create the unit (expected 0) or edit it from revision ``expected``, with a body of its own."""
    body = f"Written by racer {index} in round {name} at revision {expected + 1}.\n"
    if expected == 0:
        return as_outcome(lambda: app.evidence.create(human, name, f"Race {name}", body)["revision"])
    return as_outcome(lambda: app.evidence.edit(human, name, expected, body=body)["revision"])


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_one_creation_and_one_edit_win_and_the_file_follows_the_store(lab: Lab, kind: str) -> None:
    human = lab.team.human
    racers: Racers = (ThreadRacers(lab.app, human, RACERS, create_or_edit, "evidence") if kind == "threads"
                      else ProcessRacers(lab.app.settings, human, RACERS, create_or_edit, "evidence"))
    try:
        for number in range(ROUNDS[kind]):
            name = f"race/{kind}-{number}"
            for expected, refusal in ((0, "already_exists"), (1, "conflict")):
                outcomes = racers.race([(number, name, expected, index) for index in range(RACERS)])
                assert Counter(_kind(outcome) for outcome in outcomes) == {"ok": 1, refusal: RACERS - 1}, outcomes
                assert next(o["ok"] for o in outcomes if "ok" in o) == expected + 1
                view = lab.app.evidence.current(human, name)
                assert view.revision == expected + 1
                assert lab.app.evidence.file_fingerprint(human, name) == view.fingerprint
    finally:
        racers.close()
    with OwnerSQL(lab.app.settings) as sql:
        assert sql.rows("SELECT count(*), max(revision) FROM evidence_units") == [(ROUNDS[kind], 2)]
        assert sql.count("evidence_revisions") == 2 * ROUNDS[kind]
        actions = dict(sql.rows("SELECT action, count(*) FROM audit_events WHERE action LIKE ? GROUP BY action",
                                ("evidence.%",)))
    assert actions == {"evidence.created": ROUNDS[kind], "evidence.edited": ROUNDS[kind]}
    assert not list(lab.units_folder.rglob(".*.tmp"))


def _kind(outcome: dict[str, Any]) -> str:
    return "ok" if "ok" in outcome else str(outcome.get("code", outcome))
