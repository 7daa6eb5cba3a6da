"""On PostgreSQL every round trip to the server is a wait, and under load a wait for the interpreter too:
read, recall and remember send what they need together, the last of it with the commit."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import pq

from armarius.app import Armarius
from armarius.memory.service import RememberRequest
from armarius.store import Tx
from tests.helpers import Team, make_team

pytestmark = pytest.mark.parametrize("settings", ["postgresql"], indirect=True)


@pytest.fixture
def team(app: Armarius) -> Team:
    team = make_team(app)
    app.memory.remember(team.agent, RememberRequest("ops/deploy", "Deploy host", "Releases go to [[ops/stage]]."))
    app.memory.remember(team.agent, RememberRequest("ops/stage", "Stage host", "The staging box is stage-3."))
    return team


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times transactions went to the server: statements sent together count once, and so does a
    commit or a rollback the pool sends at the end of a transaction that had nothing left to send with it."""
    counted = [0]
    send = Tx._send

    def counting_send(tx: Tx, then: Any) -> None:  # every statement goes through it on PostgreSQL
        counted[0] += 1
        send(tx, then)

    def counting(end: Any) -> Any:
        def counting_end(connection: psycopg.Connection[Any]) -> None:
            if connection.pgconn.transaction_status != pq.TransactionStatus.IDLE:
                counted[0] += 1
            end(connection)
        return counting_end

    monkeypatch.setattr(Tx, "_send", counting_send)
    monkeypatch.setattr(psycopg.Connection, "commit", counting(psycopg.Connection.commit))
    monkeypatch.setattr(psycopg.Connection, "rollback", counting(psycopg.Connection.rollback))
    return counted


def trips(counted: list[int], call: Any) -> int:
    before = counted[0]
    call()
    return counted[0] - before


def test_read_is_one_round_trip(app: Armarius, team: Team, round_trips: list[int]) -> None:
    answer: dict[str, Any] = {}
    assert trips(round_trips, lambda: answer.update(app.memory.read(team.agent, "ops/deploy"))) == 1
    assert answer["links"] == ["ops/stage"]
    assert trips(round_trips, lambda: answer.update(app.memory.read(team.agent, "ops/stage"))) == 1
    assert answer["backlinks"] == ["ops/deploy"]


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_recall_by_meaning_is_two_round_trips(app: Armarius, team: Team, round_trips: list[int], mode: str) -> None:
    answer: dict[str, Any] = {}
    assert trips(round_trips, lambda: answer.update(app.memory.recall(team.agent, "staging box", mode=mode))) == 2
    assert answer["results"][0]["slug"] == "ops/stage"


def test_recall_by_words_is_one_round_trip_and_one_more_for_any_of_the_words(
        app: Armarius, team: Team, round_trips: list[int]) -> None:
    """By words alone the searches go with the commit; when all the words find nothing, the search by any
    of them follows in a transaction of its own."""
    answer: dict[str, Any] = {}
    assert trips(round_trips, lambda: answer.update(app.memory.recall(team.agent, "staging box", mode="lexical"))) == 1
    assert (answer["match"], answer["results"][0]["slug"]) == ("all", "ops/stage")
    assert trips(round_trips, lambda: answer.update(app.memory.recall(team.agent, "staging nowhere",
                                                                      mode="lexical"))) == 2
    assert (answer["match"], [hit["slug"] for hit in answer["results"]]) == ("any", ["ops/stage"])


def test_remember_is_three_round_trips_for_a_new_entry_and_for_a_new_revision(
        app: Armarius, team: Team, round_trips: list[int]) -> None:
    """A new entry: its look; its turn among creations with a second look, the duplicate check's reads and its
    insert with the audit chain's head; the rest with the commit (a duplicate found: the rollback instead). A
    new revision: its look, its writes with the audit chain's head, the audit event with the commit."""
    answer: dict[str, Any] = {}
    new = RememberRequest("ops/new", "New host", "The new box in rack 7 runs the release pipeline.")
    assert trips(round_trips, lambda: answer.update(app.memory.remember(team.agent, new))) == 3
    assert answer["status"] == "written"
    again = RememberRequest("ops/new", "New host", "The new box in rack 8 runs the release pipeline.")
    assert trips(round_trips, lambda: answer.update(app.memory.remember(team.agent, again))) == 3
    assert answer["revision"] == 2
    same = RememberRequest("ops/new-box", "New host", "The new box in rack 8 runs the release pipeline.")
    assert trips(round_trips, lambda: answer.update(app.memory.remember(team.agent, same))) == 3
    assert answer["code"] == "possible_duplicate"
    assert app.memory.recall(team.agent, "rack 8 release pipeline")["results"][0]["slug"] == "ops/new"
