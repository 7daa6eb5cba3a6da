"""A chain's head of the right form but behind its events (restored from an older backup than the events, or
moved back outside Armarius), on both engines.

The next event's number is then an existing event's, and its insert fails on the events' primary key: on
SQLite at once, on PostgreSQL with the statement or commit it is sent with, wherever in the feature that is.
That is never a race between writers (appenders hold the head's lock), so no feature may answer it as its own
conflict: every audited write of the workspace fails with :class:`audit.HeadBehind` (a damaged head: an
internal error to the caller, the reason with the chain in the log), nothing of it is kept, and `armarius audit
verify` reports the head with its number and the chain's last event. A feature's own conflict (its own
constraint violated) is still its conflict, and each constraint a feature handles is named alike on both
engines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.audit.verify import verify_log
from armarius.auth import directory
from armarius.config import Settings
from armarius.drafts import service as drafts_service
from armarius.errors import AlreadyExists
from armarius.evidence import service as evidence_service
from armarius.memory import service as memory_service
from armarius.memory.service import RememberRequest
from armarius.store import UniqueViolation, utc_now
from tests.audit.tamper import set_head
from tests.audit.test_audit_cli import Cli
from tests.helpers import OPERATOR, OwnerSQL, Team, agent_of, make_team

#: What a write must leave as it was: each table's rows, in an order of their own.
TABLES = {
    "entries": "id", "entry_revisions": "entry_id, revision", "entry_tags": "entry_id, tag",
    "drafts": "id", "approvals": "id", "operations": "workspace_id, operation_id",
    "evidence_units": "id", "evidence_revisions": "unit_id, revision",
    "workspaces": "id", "principals": "id", "memberships": "workspace_ref, principal_id",
    "audit_events": "workspace_id, seq", "audit_heads": "workspace_id",
}
PAYLOAD = {"slug": "news/launch", "title": "Launch notes", "text": "Line one.\nLine two.\n"}


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def rows(settings: Settings) -> dict[str, list[tuple[Any, ...]]]:
    with OwnerSQL(settings) as owner:
        return {table: owner.rows(f"SELECT * FROM {table} ORDER BY {order}") for table, order in TABLES.items()}


def head(settings: Settings, chain: int) -> tuple[int, str]:
    with OwnerSQL(settings) as owner:
        seq, digest = owner.rows("SELECT seq, hash FROM audit_heads WHERE workspace_id = ?", (chain,))[0]
    return int(seq), str(digest)


def move_head_back(settings: Settings, chain: int, events: int) -> int:
    """The head set onto an earlier event of its chain (that event's seq and hash: a head of the right form);
    its seq."""
    last, _ = head(settings, chain)
    seq = last - events
    assert seq >= 1, "the chain has too few events to move its head back so far"
    with OwnerSQL(settings) as owner:
        [(digest,)] = owner.rows("SELECT hash FROM audit_events WHERE workspace_id = ? AND seq = ?", (chain, seq))
        set_head(owner, chain, seq, digest)
    return seq


@contextmanager
def fails_with_head_behind(settings: Settings, chain: int, head_seq: int) -> Iterator[None]:
    """The block fails with HeadBehind for ``chain`` (no feature's conflict), and leaves every table as it was."""
    before = rows(settings)
    with pytest.raises(audit.HeadBehind) as raised:
        yield
    error = raised.value
    assert (error.chain, error.head_seq) == (chain, head_seq)
    assert isinstance(error, audit.DamagedHead)
    assert f"The head of audit chain {chain} is behind its events" in str(error)
    assert f"event {head_seq + 1} exists already" in str(error)
    assert "armarius audit verify" in str(error)
    assert rows(settings) == before


#: Words no two bodies share, so that no entry looks like a duplicate of another.
WORDS = ("lighthouses beacons", "harbours quays", "tides moons", "ropes knots", "sails masts", "anchors chains")


def remember(app: Armarius, team: Team, slug: str, body: str) -> dict[str, Any]:
    return app.memory.remember(team.agent, RememberRequest(slug=slug, title=f"Title of {slug}", body=body))


def written(app: Armarius, team: Team, slug: str, body: str) -> None:
    answer = remember(app, team, slug, body)
    assert answer["status"] == "written", answer


# Every audited write of the workspace fails, and nothing of it is kept -------------------------------


@pytest.mark.parametrize("events", [1, 3])
def test_remembering_a_new_entry_after_a_head_behind_is_no_conflict(app: Armarius, settings: Settings, team: Team,
                                                                    events: int) -> None:
    for number in range(3):
        written(app, team, f"notes/earlier-{number}", f"Entry {number} about {WORDS[number]}.")
    chain = team.agent.workspace_id
    seq = move_head_back(settings, chain, events)
    with fails_with_head_behind(settings, chain, seq):
        remember(app, team, "notes/new", f"A new entry about {WORDS[4]}.")
    # Every later write fails alike, and says so each time.
    with fails_with_head_behind(settings, chain, seq):
        app.memory.remember(team.agent, RememberRequest(slug="notes/other", title="Other", body="Ropes and sails.",
                                                        confirm_distinct=True, reason="not the same"))


def test_updating_an_entry_after_a_head_behind_is_no_conflict(app: Armarius, settings: Settings,
                                                              team: Team) -> None:
    written(app, team, "notes/kept", "The first text about lighthouses.")
    written(app, team, "notes/kept", "The second text about lighthouses.")
    chain = team.agent.workspace_id
    seq = move_head_back(settings, chain, 1)
    with fails_with_head_behind(settings, chain, seq):
        app.memory.remember(team.agent, RememberRequest(slug="notes/kept", title="Title of notes/kept",
                                                        body="A third text about lighthouses.", expected_revision=2))


def test_a_draft_after_a_head_behind_is_no_draft_exists(app: Armarius, settings: Settings, team: Team) -> None:
    token = app.drafts.approve(team.human, payload=dict(PAYLOAD)).token
    chain = team.agent.workspace_id
    seq = move_head_back(settings, chain, 1)
    with fails_with_head_behind(settings, chain, seq):
        app.drafts.create_draft(team.agent, dict(PAYLOAD), token, "op-behind")


def test_an_evidence_unit_after_a_head_behind_is_no_already_exists(app: Armarius, settings: Settings,
                                                                   team: Team) -> None:
    app.evidence.create(team.human, "harbour-report", "Harbour report", "The harbour was quiet.")
    chain = team.human.workspace_id
    seq = move_head_back(settings, chain, 1)
    with fails_with_head_behind(settings, chain, seq):
        app.evidence.create(team.human, "tide-table", "Tide table", "High water at noon.")
    with fails_with_head_behind(settings, chain, seq):
        app.evidence.edit(team.human, "harbour-report", 1, body="The harbour was busy.")


def test_a_workspace_after_a_head_behind_of_the_system_chain_is_no_already_exists(app: Armarius,
                                                                                   settings: Settings) -> None:
    app.directory.create_workspace("first", by=OPERATOR)
    app.directory.create_workspace("second", by=OPERATOR)
    seq = move_head_back(settings, audit.SYSTEM_CHAIN, 1)
    with fails_with_head_behind(settings, audit.SYSTEM_CHAIN, seq):
        app.directory.create_workspace("third", by=OPERATOR)


def test_a_head_of_no_event_before_events_is_behind_them(app: Armarius, settings: Settings, team: Team) -> None:
    written(app, team, "notes/one", "One entry about lighthouses.")
    chain = team.agent.workspace_id
    with OwnerSQL(settings) as owner:
        set_head(owner, chain, 0, audit.GENESIS_HASH)
    with fails_with_head_behind(settings, chain, 0):
        remember(app, team, "notes/two", "Another entry about harbours.")


@pytest.mark.anyio
async def test_an_agent_gets_an_internal_error_and_the_log_names_the_chain(
        app: Armarius, settings: Settings, team: Team, caplog: pytest.LogCaptureFixture) -> None:
    written(app, team, "notes/earlier", "An earlier entry about lighthouses.")
    chain = team.agent.workspace_id
    seq = move_head_back(settings, chain, 1)
    before = rows(settings)
    caplog.set_level(logging.ERROR)
    async with agent_of(app, team.agent) as agent:
        answer = await agent("remember", slug="notes/new", title="New", body="Harbours and tides.")
    assert answer["error"] == "internal", answer
    assert "someone else" not in str(answer)
    logged = [record for record in caplog.records if record.exc_info and record.exc_info[1] is not None]
    assert logged, caplog.text
    assert any(isinstance(record.exc_info[1], audit.HeadBehind) for record in logged if record.exc_info)
    assert f"The head of audit chain {chain} is behind its events" in caplog.text
    assert f"it records event {seq} as the chain's last" in caplog.text
    assert rows(settings) == before


def test_other_workspaces_write_on_and_a_restored_head_writes_again(app: Armarius, settings: Settings,
                                                                    team: Team) -> None:
    written(app, team, "notes/earlier", "An earlier entry about lighthouses.")
    other = make_team(app, "beta")
    chain = team.agent.workspace_id
    last = head(settings, chain)
    move_head_back(settings, chain, 1)
    with pytest.raises(audit.HeadBehind):
        remember(app, team, "notes/new", "Harbours and tides.")
    assert remember(app, other, "notes/new", "Harbours and tides.")["status"] == "written"
    with OwnerSQL(settings) as owner:
        set_head(owner, chain, *last)
    assert remember(app, team, "notes/new", "Harbours and tides.")["status"] == "written"
    assert verify_log(app.database).intact


# `armarius audit verify` reports the head with its number and the chain's last event's ------------------


@pytest.mark.parametrize("events", [1, 2])
def test_verify_reports_a_head_behind_its_events(app: Armarius, settings: Settings, team: Team,
                                                 events: int) -> None:
    for number in range(2):
        written(app, team, f"notes/earlier-{number}", f"Entry {number} about {WORDS[number]}.")
    chain = team.agent.workspace_id
    last, _ = head(settings, chain)
    seq = move_head_back(settings, chain, events)
    report = verify_log(app.database, known_workspaces={space.id for space in app.directory.workspaces()})
    [problem] = report.problems
    assert (problem.workspace_id, problem.seq, problem.kind) == (chain, seq + 1, audit.BROKEN_LINK)
    assert f"the head records {seq} but events go on to {last}" in problem.problem
    assert "the head is behind its events" in problem.problem
    code, printed = Cli(settings).verify()
    assert code == 1
    assert [(item["chain"], item["workspace"], item["seq"]) for item in printed["broken_links"]] == [
        (chain, team.workspace, seq + 1)]
    assert f"the head records {seq} but events go on to {last}" in printed["broken_links"][0]["problem"]


# A feature's own conflict stays its conflict; every other violation goes up --------------------------


def test_a_taken_name_is_still_already_exists(app: Armarius) -> None:
    app.directory.create_workspace("taken", by=OPERATOR)
    with pytest.raises(AlreadyExists):
        app.directory.create_workspace("taken", by=OPERATOR)


def test_an_event_inserted_outside_an_append_is_a_plain_violation(app: Armarius, team: Team) -> None:
    """Only a transaction that appended reads a taken event number as its head being behind."""
    chain = team.agent.workspace_id
    columns = "workspace_id, seq, at, actor, action, subject, details, prev_hash, hash"
    with pytest.raises(UniqueViolation) as raised, app.database.transaction(workspace_id=chain, write=True) as tx:
        tx.execute(f"INSERT INTO audit_events ({columns}) VALUES (?, 1, ?, 'x', 'x', '', '{{}}', ?, ?)",
                   (chain, utc_now(), "0" * 64, "f" * 64))
    assert not isinstance(raised.value, audit.DamagedHead)
    assert (raised.value.constraint, raised.value.table) == (audit.EVENTS_KEY, "audit_events")


def _evidence(app: Armarius, team: Team) -> None:
    for name in ("first-unit", "second-unit"):
        app.evidence.create(team.human, name, name.title(), f"The body of {name}.")


def _drafts(app: Armarius, team: Team) -> None:
    for slug in ("first/draft", "second/draft"):
        payload = {**PAYLOAD, "slug": slug}
        token = app.drafts.approve(team.human, payload=payload).token
        app.drafts.create_draft(team.agent, payload, token, f"op-{slug.replace('/', '-')}")


def _nothing(app: Armarius, team: Team) -> None:
    """The rows are there already (make_team's)."""


def _entries(app: Armarius, team: Team) -> None:
    written(app, team, "first/entry", "The first entry about lighthouses.")
    written(app, team, "second/entry", "The second entry about quays and tides.")


#: Each constraint a feature answers as its own conflict: the feature's name for it, how two rows are made, the
#: table, the column that makes them collide, and the first row's value of it.
FEATURE_CONSTRAINTS: list[tuple[str, Callable[[Armarius, Team], None], str, str, str, str]] = [
    (memory_service._ENTRY_SLUG, _entries, "entries", "slug", "first/entry", "second/entry"),
    (drafts_service._DRAFT_SLUG, _drafts, "drafts", "slug", "first/draft", "second/draft"),
    (evidence_service._UNIT_NAME, _evidence, "evidence_units", "name", "first-unit", "second-unit"),
    (directory._WORKSPACE_NAME, _nothing, "workspaces", "name", "alpha", "beta"),
    (directory._PRINCIPAL_NAME, _nothing, "principals", "name", "alpha-agent", "alpha-human"),
]


@pytest.mark.parametrize(("constraint", "make", "table", "column", "first", "second"), FEATURE_CONSTRAINTS,
                         ids=[item[0] for item in FEATURE_CONSTRAINTS])
def test_each_feature_s_constraint_is_named_alike_on_both_engines(
        app: Armarius, team: Team, constraint: str, make: Callable[[Armarius, Team], None], table: str, column: str,
        first: str, second: str) -> None:
    """The name each feature compares a violation's with is the one its constraint's violation carries, on
    either engine (PostgreSQL's default name; SQLite's made from its message the same way)."""
    make(app, team)
    make_team(app, "beta")
    with pytest.raises(UniqueViolation) as raised, \
            app.database.transaction(workspace_id=team.agent.workspace_id, write=True) as tx:
        assert tx.execute(f"UPDATE {table} SET {column} = ? WHERE {column} = ?", (first, second)) == 1
    assert (raised.value.constraint, raised.value.table) == (constraint, table)
