"""Memory through the agent surface (the SDK's in-memory MCP client) and the human service calls."""

from __future__ import annotations

from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain
from armarius.auth.permissions import Kind, Role
from armarius.errors import Conflict, NotAllowed, NotFound, ReasonRequired
from armarius.mcp.server import ALL_TOOLS
from armarius.memory.service import RememberRequest
from tests.helpers import Team, agent_of, make_team

pytestmark = pytest.mark.anyio

STAGING = {"slug": "ops/staging-server", "title": "Staging server",
           "body": "The staging server runs on host alpha-7 in rack 3. Deploy with [[ops/pipeline]].",
           "tags": ["ops", "hosts"]}


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def state(app: Armarius, team: Team) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was: entries, revisions, audit chain head."""
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        entries = tx.all("SELECT slug, revision, curated_revision, needs_review, tags FROM entries ORDER BY slug")
        revisions = tx.scalar("SELECT count(*) AS n FROM entry_revisions")
    return entries, revisions, chain.tail(app.database, team.agent.workspace_id, 1)


def audit_actions(app: Armarius, team: Team) -> list[str]:
    return [event.action for event in chain.tail(app.database, team.agent.workspace_id, 1000)]


async def test_create_update_and_history(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        created = await agent("remember", **STAGING)
        updated = await agent("remember", **{**STAGING, "body": "Moved to rack 4."}, expected_revision=1)
        unchanged = await agent("remember", **{**STAGING, "body": "Moved to rack 4."})
        history = await agent("history", slug=STAGING["slug"])
        old = await agent("read", slug=STAGING["slug"], revision=1)
        current = await agent("read", slug=STAGING["slug"])
    assert (created["status"], created["revision"], created["created"]) == ("written", 1, True)
    assert (updated["status"], updated["revision"]) == ("written", 2)
    assert unchanged == {"status": "unchanged", "slug": STAGING["slug"], "revision": 2}
    assert [r["revision"] for r in history["revisions"]] == [1, 2]
    assert all(r["author"] == "agent:alpha-agent" and r["operation"].startswith("op_") for r in history["revisions"])
    assert old["body"] == STAGING["body"]
    assert old["current_revision"] == 2
    assert current["body"] == "Moved to rack 4."
    assert current["tags"] == ["hosts", "ops"]  # left out: kept
    assert audit_actions(app, team)[-2:] == ["memory.created", "memory.updated"]


async def test_a_stale_expected_revision_is_a_conflict_and_writes_nothing(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        await agent("remember", **STAGING)
        await agent("remember", **{**STAGING, "body": "Second."})
        before = state(app, team)
        stale = await agent("remember", **{**STAGING, "body": "Third."}, expected_revision=1)
        missing = await agent("remember", slug="ops/new", title="New", body="x", expected_revision=3)
    assert stale["error"] == "conflict"
    assert stale["details"]["current_revision"] == 2
    assert "revision 2" in stale["message"]
    assert missing["error"] == "conflict"
    assert missing["details"]["current_revision"] == 0
    assert state(app, team) == before


async def test_a_curated_entry_needs_an_override_with_a_reason(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        await agent("remember", **STAGING)
        app.memory.curate(team.human, STAGING["slug"], 1)
        before = state(app, team)
        judged = await agent("remember", **{**STAGING, "body": "Moved to beta-2."})
        assert state(app, team) == before
        blank = await agent("remember", **{**STAGING, "body": "Moved to beta-2."}, override_curated=True,
                            reason="  \n ")
        assert state(app, team) == before
        overridden = await agent("remember", **{**STAGING, "body": "Moved to beta-2."}, override_curated=True,
                                 reason="I just saw it on beta-2")
        now = await agent("read", slug=STAGING["slug"])
        needing = await agent("list", needs_review=True)
    assert judged["status"] == "judgment_required"
    assert judged["code"] == "curated_entry"
    assert judged["written"] is False
    for phrase in ("Nothing was written", "human reviewed", "precedence", "demonstrably wrong",
                   "override_curated: true", "reason", "[[ops/staging-server]]"):
        assert phrase in judged["instruction"]
    assert blank["error"] == "reason_required"
    assert "why is the curated content no longer right" in blank["message"]
    assert (overridden["status"], overridden["revision"], overridden["needs_review"]) == ("written", 2, True)
    assert (now["curated"], now["needs_review"]) == (False, True)
    assert [entry["slug"] for entry in needing["entries"]] == [STAGING["slug"]]
    override = chain.tail(app.database, team.agent.workspace_id, 1)[0]
    assert (override.action, override.details["reason"]) == ("memory.curated_override", "I just saw it on beta-2")
    assert override.details["curated_revision"] == 1
    review = app.memory.needs_review(team.human)
    assert review[0]["curated_revision"] == 1
    assert review[0]["overrides"][0]["reason"] == "I just saw it on beta-2"
    assert "-The staging server runs on host alpha-7" in review[0]["diff"]
    assert "+Moved to beta-2." in review[0]["diff"]
    # The human curates the new revision: the entry leaves the review list.
    app.memory.curate(team.human, STAGING["slug"], 2)
    assert app.memory.needs_review(team.human) == []


#: Reasons without a visible character: a zero-width space, a Hangul filler and a blank Braille pattern, a word
#: joiner and a byte order mark, and those with white space (what a title may not hold: memory.model).
INVISIBLE_REASONS = ["\u200b", "\u3164\u2800", "\u2060\ufeff", " \u200b\n\u00a0", "\u034f\ufe00"]


@pytest.mark.parametrize("reason", INVISIBLE_REASONS)
async def test_a_reason_without_a_visible_character_is_no_reason(app: Armarius, team: Team, reason: str) -> None:
    """An override of a curation and a confirmation of a distinct entry need a reason a human can read: one
    made only of invisible characters is refused as a blank one is (``reason_required``), and nothing is
    written; so is a human's revert."""
    async with agent_of(app, team.agent) as agent:
        await agent("remember", **STAGING)
        app.memory.curate(team.human, STAGING["slug"], 1)
        before = state(app, team)
        override = await agent("remember", **{**STAGING, "body": "Moved to beta-2."}, override_curated=True,
                               reason=reason)
        distinct = await agent("remember", slug="infra/stage", title="Staging server", body=STAGING["body"],
                               confirm_distinct=True, reason=reason)
        assert state(app, team) == before
    assert override["error"] == "reason_required"
    assert distinct["error"] == "reason_required"
    assert app.memory.read(team.human, STAGING["slug"])["curated"] is True
    assert "memory.curated_override" not in audit_actions(app, team)
    app.memory.remember(team.agent, RememberRequest(slug=STAGING["slug"], title="Staging server", body="Moved.",
                                                    override_curated=True, reason="seen on beta-2"))
    with pytest.raises(ReasonRequired):
        app.memory.revert_to_curated(team.human, STAGING["slug"], reason)
    assert app.memory.read(team.human, STAGING["slug"])["body"] == "Moved."


async def test_history_keeps_every_revision_byte_for_byte(app: Armarius, team: Team) -> None:
    bodies = ["line one\r\nline two\t\n\n  trailing  ", "ünïcødé — \u202ertl\u202c and \u200bzero width\n", "x" * 5000]
    async with agent_of(app, team.agent) as agent:
        await agent("remember", slug="notes/bytes", title="Bytes", body=bodies[0])
        app.memory.curate(team.human, "notes/bytes", 1)
        await agent("remember", slug="notes/bytes", title="Bytes", body=bodies[1], override_curated=True, reason="r")
        await agent("remember", slug="notes/bytes", title="Bytes", body=bodies[2])
    stored = app.memory.revisions(team.human, "notes/bytes")
    assert [r["body"] for r in stored] == bodies
    assert [r["overrode_curated"] for r in stored] == [False, True, False]


async def test_possible_duplicates_need_a_judgment(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        await agent("remember", **STAGING)
        before = state(app, team)
        same_content = await agent("remember", slug="infra/stage", title="Staging server",
                                   body="The staging server runs on host alpha-7 in rack 3. Deploy with care.")
        close_slug = await agent("remember", slug="ops/staging-servers", title="Cats", body="Nothing alike.")
        no_reason = await agent("remember", slug="infra/stage", title="Staging server", body="The staging server "
                                "runs on host alpha-7 in rack 3.", confirm_distinct=True)
        assert state(app, team) == before
        distinct = await agent("remember", slug="infra/stage", title="Staging server", body="The staging server "
                               "runs on host alpha-7 in rack 3.", confirm_distinct=True,
                               reason="this one is about the infrastructure view")
        unrelated = await agent("remember", slug="food/lunch", title="Lunch menu", body="Soup on Mondays.")
    assert same_content["code"] == "possible_duplicate"
    assert same_content["written"] is False
    assert same_content["candidates"][0]["slug"] == STAGING["slug"]
    assert 0.5 <= same_content["candidates"][0]["score"] <= 1
    assert "confirm_distinct: true" in same_content["instruction"]
    assert close_slug["code"] == "possible_duplicate"
    assert no_reason["error"] == "reason_required"
    assert distinct["status"] == "written"
    assert unrelated["status"] == "written"
    created = [e for e in chain.tail(app.database, team.agent.workspace_id, 10) if e.subject == "infra/stage"]
    assert created[0].details["confirmed_distinct"] == "this one is about the infrastructure view"


@pytest.mark.parametrize(("title", "body"), [
    ("Staging host", "Staging runs on host alpha-7, port 8443."),
    ("DB", "Postgres is db-7."),
    ("On call", "Ask Kim."),
])
async def test_a_copy_of_a_short_entry_is_a_possible_duplicate(app: Armarius, team: Team, title: str,
                                                               body: str) -> None:
    """An entry too short for two words of six letters is still found when its content comes again under
    another slug; nothing is written."""
    app.memory.remember(team.agent, RememberRequest("ops/card", title, body))
    app.memory.remember(team.agent, RememberRequest("ops/other", "Lunch menu", "Soup on Mondays, fish on Fridays."))
    before = state(app, team)
    copied = app.memory.remember(team.agent, RememberRequest("copy/card-again", title, body))
    assert (copied["code"], [hit["slug"] for hit in copied["candidates"]]) == ("possible_duplicate", ["ops/card"])
    assert copied["candidates"][0]["score"] == 1.0
    assert state(app, team) == before


async def test_recall_ranks_filters_and_never_parses_syntax(app: Armarius, team: Team) -> None:
    other = make_team(app, "beta")
    async with agent_of(app, team.agent) as agent:
        await agent("remember", **STAGING)
        await agent("remember", slug="ops/pipeline", title="Pipeline", body="CI deploys to the staging host.",
                    tags=["ci"])
        await agent("remember", slug="ops/rack-plan", title="Rack plan", body="Rack 3 is full; rack 4 is free.")
        app.memory.curate(team.human, "ops/rack-plan", 1)
        both = await agent("recall", query="staging host")
        tagged = await agent("recall", query="staging", tags=["ci"])
        curated = await agent("recall", query="rack", curated_only=True)
        limited = await agent("recall", query="rack staging pipeline", limit=1)
        any_word = await agent("recall", query="pipeline zebra")
        hostile = [await agent("recall", query=q) for q in ('"', "AND OR NOT", "NEAR(a b)", "col:x", "a*", "'; --",
                                                            "^start", "(", ")", "", "   ", "\x00")]
    async with agent_of(app, other.agent) as outsider:
        await outsider("remember", slug="ops/secret", title="Beta only", body="staging host of beta")
        beta_view = await outsider("recall", query="staging")
    assert {r["slug"] for r in both["results"]} == {"ops/staging-server", "ops/pipeline"}
    assert both["match"] == "all"
    assert "**" in both["results"][0]["snippet"]
    assert [r["slug"] for r in tagged["results"]] == ["ops/pipeline"]
    assert [(r["slug"], r["curated"]) for r in curated["results"]] == [("ops/rack-plan", True)]
    assert len(limited["results"]) == 1
    assert any_word["match"] == "any"
    assert [r["slug"] for r in any_word["results"]] == ["ops/pipeline", "ops/staging-server"]  # title beats link
    assert all("error" not in answer for answer in hostile)
    assert [r["slug"] for r in beta_view["results"]] == ["ops/secret"]


async def test_links_backlinks_and_broken_links(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        await agent("remember", slug="a/one", title="One", body="See [[a/two]], [[a/missing]] and [[a/two]].")
        await agent("remember", slug="a/two", title="Two", body="Back to [[a/one]]. Not a link: [[Bad Slug]].")
        one = await agent("read", slug="a/one")
        two = await agent("read", slug="a/two")
        gone = await agent("read", slug="a/nothing")
    assert (one["links"], one["broken_links"], one["backlinks"]) == (["a/two"], ["a/missing"], ["a/two"])
    assert (two["links"], two["broken_links"], two["backlinks"]) == (["a/one"], [], ["a/one"])
    assert gone["error"] == "not_found"


async def test_list_filters_and_pages(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        for index in range(5):
            await agent("remember", slug=f"lst/item-{index}", title=f"Item number {index}",
                        body=f"Distinct body {index} " + "word " * index, tags=["even"] if index % 2 == 0 else [],
                        confirm_distinct=True, reason="numbered items")
        await agent("remember", slug="other/x", title="Other", body="Elsewhere.")
        app.memory.curate(team.human, "lst/item-1", 1)
        first = await agent("list", prefix="lst/", limit=2)
        second = await agent("list", prefix="lst/", limit=2, after=first["next_after"])
        even = await agent("list", tag="even")
        curated = await agent("list", curated=True)
        uncurated = await agent("list", curated=False, prefix="lst/")
    assert [e["slug"] for e in first["entries"]] == ["lst/item-0", "lst/item-1"]
    assert [e["slug"] for e in second["entries"]] == ["lst/item-2", "lst/item-3"]
    assert [e["slug"] for e in even["entries"]] == ["lst/item-0", "lst/item-2", "lst/item-4"]
    assert [e["slug"] for e in curated["entries"]] == ["lst/item-1"]
    assert len(uncurated["entries"]) == 4
    assert "next_after" not in even


@pytest.mark.parametrize(("arguments", "field"), [
    ({"slug": "Bad/Slug", "title": "t", "body": "b"}, "slug"),
    ({"slug": "a//b", "title": "t", "body": "b"}, "slug"),
    ({"slug": "a-", "title": "t", "body": "b"}, "slug"),
    ({"slug": "x" * 129, "title": "t", "body": "b"}, "slug"),
    ({"slug": "ok", "title": "", "body": "b"}, "title"),
    ({"slug": "ok", "title": "two\nlines", "body": "b"}, "title"),
    ({"slug": "ok", "title": "t" * 201, "body": "b"}, "title"),
    ({"slug": "ok", "title": "t", "body": "b" * (64 * 1024 + 1)}, "body"),
    ({"slug": "ok", "title": "t", "body": "b", "tags": ["Has Space"]}, "tags"),
    ({"slug": "ok", "title": "t", "body": "b", "tags": [f"t{i}" for i in range(21)]}, "tags"),
    ({"slug": "ok", "title": "t", "body": "b", "expected_revision": -1}, "expected_revision"),
    ({"slug": "ok", "title": "t", "body": "b", "curated": True}, "arguments"),
])
async def test_invalid_input_is_refused_and_writes_nothing(
    app: Armarius, team: Team, arguments: dict[str, Any], field: str
) -> None:
    before = state(app, team)
    async with agent_of(app, team.agent) as agent:
        refused = await agent("remember", **arguments)
    assert refused["error"] == "invalid_input"
    assert refused["details"]["field"] == field
    assert state(app, team) == before


async def test_a_reader_cannot_write_and_an_agent_cannot_curate(app: Armarius) -> None:
    team = make_team(app, agent_role=Role.READER)
    async with agent_of(app, team.agent) as reader:
        tools = await reader.tools()
        refused = await reader("remember", **STAGING)
    assert {"recall", "read", "history", "list"} <= tools
    assert "remember" not in tools
    assert refused["error"] == "not_allowed"
    app.directory.set_role("alpha-agent", workspace="alpha", role=Role.EDITOR, by="operator:test")
    editor = app.directory.authenticate_token(team.agent_token)
    app.memory.remember(editor, _request(STAGING))
    with pytest.raises(NotAllowed):
        app.memory.curate(editor, STAGING["slug"], 1)
    with pytest.raises(NotAllowed):
        app.memory.uncurate(editor, STAGING["slug"])


async def test_curation_is_exactly_what_the_human_read(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        await agent("remember", **STAGING)
        await agent("remember", **{**STAGING, "body": "Revision two."})
    before = state(app, team)
    with pytest.raises(Conflict) as stale:
        app.memory.curate(team.human, STAGING["slug"], 1)
    assert stale.value.details["current_revision"] == 2
    assert state(app, team) == before
    with pytest.raises(NotFound):
        app.memory.curate(team.human, "ops/none", 1)
    assert app.memory.curate(team.human, STAGING["slug"], 2)["changed"] is True
    assert app.memory.curate(team.human, STAGING["slug"], 2)["changed"] is False
    assert app.memory.uncurate(team.human, STAGING["slug"])["changed"] is True
    assert app.memory.read(team.human, STAGING["slug"])["curated"] is False
    assert audit_actions(app, team)[-2:] == ["memory.curated", "memory.uncurated"]


def _request(arguments: dict[str, Any]) -> Any:
    from armarius.memory.service import RememberRequest

    return RememberRequest(**arguments)


# An older revision is shown as it was ------------------------------------------------------------


async def test_an_older_revision_carries_its_own_time_author_and_links(app: Armarius, team: Team) -> None:
    app.directory.add_principal("alpha-agent-2", Kind.AGENT, workspace="alpha", role=Role.EDITOR, by="operator:test")
    second = app.directory.authenticate_token(
        app.directory.issue_token("alpha-agent-2", workspace="alpha", by="operator:test").token)
    async with agent_of(app, team.agent) as agent:
        await agent("remember", slug="ops/db", title="Database", body="db-1")
        await agent("remember", slug="ops/host", title="Host", body="On [[ops/db]], deployed by [[ops/pipeline]].")
    async with agent_of(app, second) as other:
        await other("remember", slug="ops/host", title="Host", body="Now standalone.")
        old = await other("read", slug="ops/host", revision=1)
        current = await other("read", slug="ops/host")
        history = await other("history", slug="ops/host")
    first, latest = history["revisions"]
    assert (old["updated_at"], old["updated_by"]) == (first["at"], "agent:alpha-agent")
    assert (current["updated_at"], current["updated_by"]) == (latest["at"], "agent:alpha-agent-2")
    assert old["updated_at"] != current["updated_at"]
    assert (old["links"], old["broken_links"]) == (["ops/db"], ["ops/pipeline"])
    assert (current["links"], current["broken_links"]) == ([], [])


# Errors speak to their reader ---------------------------------------------------------------------


async def test_an_unknown_entry_tells_an_agent_which_tools_find_one_and_a_person_nothing_of_tools(
    app: Armarius, team: Team
) -> None:
    async with agent_of(app, team.agent) as agent:
        missing = await agent("read", slug="ops/nothing")
    assert missing["error"] == "not_found"
    assert "recall or list" in missing["message"]
    with pytest.raises(NotFound) as refused:
        app.memory.read(team.human, "ops/nothing")
    assert refused.value.agent_hint is not None
    human_view = refused.value.to_dict(for_agent=False)
    assert "recall" not in human_view["message"]
    assert " list" not in human_view["message"]
    assert human_view["message"].startswith("There is no entry 'ops/nothing'")


# Reverting an override to the curated revision ---------------------------------------------------

CURATED = {"slug": "ops/db", "title": "Database host", "body": "db-1 in rack 2, see [[ops/rack]].",
           "tags": ["hosts", "ops"]}


def _overridden(app: Armarius, team: Team) -> None:
    """ops/db curated at revision 1, then overridden twice by the agent (revisions 2 and 3)."""
    app.memory.remember(team.agent, _request(CURATED))
    app.memory.curate(team.human, "ops/db", 1)
    app.memory.remember(team.agent, _request({**CURATED, "title": "DB host", "body": "zeppelin-2, see [[ops/moved]].",
                                              "tags": ["moved"], "override_curated": True,
                                              "reason": "migrated last night"}))
    app.memory.remember(team.agent, _request({**CURATED, "title": "DB host", "body": "zeppelin-3", "tags": ["moved"]}))


async def test_revert_to_curated_writes_the_curated_content_as_a_new_curated_revision(
    app: Armarius, team: Team
) -> None:
    _overridden(app, team)
    result = app.memory.revert_to_curated(team.human, "ops/db", "  the migration was rolled back  ")
    assert (result["revision"], result["reverted_to"], result["curated"], result["changed"]) == (4, 1, True, True)
    entry = app.memory.read(team.human, "ops/db")
    assert {key: entry[key] for key in CURATED} == CURATED
    assert (entry["revision"], entry["curated"], entry["curated_revision"]) == (4, True, 4)
    assert (entry["curated_by"], entry["needs_review"]) == ("human:alpha-human", False)
    assert entry["links"] == []
    assert entry["broken_links"] == ["ops/rack"]
    assert app.memory.needs_review(team.human) == []
    latest = app.memory.history(team.human, "ops/db")["revisions"][-1]
    assert (latest["author"], latest["reason"], latest["overrode_curated"]) == (
        "human:alpha-human", "the migration was rolled back", False)
    assert [r["body"] for r in app.memory.revisions(team.human, "ops/db")][1:3] == [
        "zeppelin-2, see [[ops/moved]].", "zeppelin-3"]
    event = chain.tail(app.database, team.agent.workspace_id, 1)[0]
    assert (event.action, event.actor, event.subject) == ("memory.reverted", "human:alpha-human", "ops/db")
    assert {k: event.details[k] for k in ("revision", "reverted_to", "reverted_from", "reason")} == {
        "revision": 4, "reverted_to": 1, "reverted_from": 3, "reason": "the migration was rolled back"}
    assert event.details["operation"] == result["operation"]
    found = app.memory.recall(team.agent, "rack", curated_only=True)
    assert [(hit["slug"], hit["revision"]) for hit in found["results"]] == [("ops/db", 4)]
    assert app.memory.recall(team.agent, "zeppelin")["results"] == []
    assert app.memory.list_entries(team.human, tag="moved")["entries"] == []
    # An agent's next change meets the curation again.
    judged = app.memory.remember(team.agent, _request({**CURATED, "body": "db-4"}))
    assert judged["code"] == "curated_entry"


async def test_revert_after_uncurate_goes_back_to_the_last_curated_revision(app: Armarius, team: Team) -> None:
    _overridden(app, team)
    app.memory.uncurate(team.human, "ops/db")
    assert app.memory.revert_to_curated(team.human, "ops/db", "back to what I checked")["reverted_to"] == 1
    assert app.memory.read(team.human, "ops/db")["body"] == CURATED["body"]


async def test_reverting_a_curated_current_revision_changes_nothing(app: Armarius, team: Team) -> None:
    app.memory.remember(team.agent, _request(CURATED))
    app.memory.curate(team.human, "ops/db", 1)
    before = state(app, team)
    assert app.memory.revert_to_curated(team.human, "ops/db", "nothing to undo") == {
        "slug": "ops/db", "revision": 1, "curated": True, "changed": False}
    assert state(app, team) == before


@pytest.mark.parametrize("who", ["agent", "reader", "never_curated", "unknown_entry", "blank_reason"])
async def test_revert_refusals_write_nothing(app: Armarius, team: Team, who: str) -> None:
    _overridden(app, team)
    app.memory.remember(team.agent, _request({"slug": "ops/fresh", "title": "Fresh", "body": "Never reviewed.",
                                              "confirm_distinct": True, "reason": "unrelated"}))
    app.directory.add_principal("alpha-reader", Kind.HUMAN, workspace="alpha", role=Role.READER, by="operator:test",
                                password="reader correct horse")
    reader = app.directory.authenticate_password("alpha-reader", "reader correct horse", workspace="alpha")
    before = state(app, team)
    actor, slug, reason, expected = {
        "agent": (team.agent, "ops/db", "agent wants it back", NotAllowed),
        "reader": (reader, "ops/db", "reader wants it back", NotAllowed),
        "never_curated": (team.human, "ops/fresh", "no curated revision", NotFound),
        "unknown_entry": (team.human, "ops/none", "nothing there", NotFound),
        "blank_reason": (team.human, "ops/db", " \n ", ReasonRequired),
    }[who]
    with pytest.raises(expected) as refused:
        app.memory.revert_to_curated(actor, slug, reason)
    if who == "never_curated":
        assert "never curated" in refused.value.message
    if who in ("agent", "reader"):
        assert refused.value.details["permission"] == "memory.curate"
    assert state(app, team) == before
    assert app.memory.read(team.human, "ops/db")["needs_review"] is True


async def test_revert_is_no_agent_tool() -> None:
    assert not any("revert" in tool.name for tool in ALL_TOOLS)
