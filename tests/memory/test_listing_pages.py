"""Needs-review entries a page at a time, their summary, and the diff of any two revisions, on both engines."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.errors import InvalidInput, NotAllowed, NotFound
from armarius.memory.service import RememberRequest
from tests.helpers import OwnerSQL, Team, make_team


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def write(app: Armarius, team: Team, slug: str, body: str, **more: Any) -> dict[str, Any]:
    request = RememberRequest(slug=slug, title=more.pop("title", f"About {slug}"), body=body,
                              confirm_distinct=True, reason=more.pop("reason", "distinct"), **more)
    return app.memory.remember(team.agent, request)


def override(app: Armarius, team: Team, slug: str, body: str, reason: str) -> None:
    written = write(app, team, slug, body, override_curated=True, reason=reason)
    assert written["needs_review"] is True


def reviewed(app: Armarius, team: Team, slugs: list[str]) -> None:
    """Each slug written, curated by the human, then overridden by the agent (and changed again for the first)."""
    for number, slug in enumerate(slugs):
        write(app, team, slug, f"Original text {number} about zebra{number} and quagga{number}.", tags=["ops"])
        app.memory.curate(team.human, slug, 1)
    for number, slug in enumerate(slugs):
        override(app, team, slug, f"Changed text {number}.", f"saw it change ({number})")
    override(app, team, slugs[0], "Changed again.", "and again")


def snapshot(app: Armarius) -> tuple[Any, ...]:
    with OwnerSQL(app.settings) as sql:
        return (sorted(map(repr, sql.rows("SELECT * FROM entries"))), sql.count("entry_revisions"),
                sql.count("audit_events"))


def test_needs_review_pages_by_slug_like_the_full_listing(app: Armarius, team: Team) -> None:
    slugs = ["ops/e", "ops/a", "notes/c", "ops/d", "notes/b"]
    reviewed(app, team, slugs)
    write(app, team, "ops/not-curated", "An entry nobody reviewed.")
    full = app.memory.needs_review(team.human)
    assert [entry["slug"] for entry in full] == sorted(slugs)

    items: list[dict[str, Any]] = []
    after, pages = None, 0
    while True:
        page = app.memory.needs_review_page(team.human, after=after, limit=2, diff=True)
        pages, items = pages + 1, items + page["items"]
        if page["next"] is None:
            break
        assert page["next"] == page["items"][-1]["slug"]
        after = page["next"]
    assert pages == 3
    assert [item["slug"] for item in items] == sorted(slugs)
    for item, entry in zip(items, full, strict=True):
        for key in ("slug", "title", "revision", "curated_revision", "overrides", "diff"):
            assert item[key] == entry[key], key
        assert item["since"] == entry["overrides"][0]["at"]
        assert item["updated_by"] == "agent:alpha-agent"
    first = items[[item["slug"] for item in items].index("ops/e")]
    assert [o["reason"] for o in first["overrides"]] == ["saw it change (0)"]  # the next change overrode nothing
    assert (first["revision"], first["curated_revision"]) == (3, 1)

    plain = app.memory.needs_review_page(team.human, limit=200)
    assert plain["next"] is None
    assert all("diff" not in item for item in plain["items"])

    summary = app.memory.needs_review_summary(team.human)
    assert summary == {"count": 5, "oldest_at": min(entry["overrides"][0]["at"] for entry in full)}

    app.memory.curate(team.human, "ops/a", 2)
    app.memory.revert_to_curated(team.human, "ops/e", "wrong")
    assert [item["slug"] for item in app.memory.needs_review_page(team.human)["items"]] == [
        "notes/b", "notes/c", "ops/d"]
    assert app.memory.needs_review_summary(team.human)["count"] == 3


def test_q_filters_by_slug_or_title(app: Armarius, team: Team) -> None:
    reviewed(app, team, ["ops/alpha", "ops/beta", "notes/gamma"])
    assert [item["slug"] for item in app.memory.needs_review_page(team.human, q="OPS/")["items"]] == [
        "ops/alpha", "ops/beta"]
    assert [item["slug"] for item in app.memory.needs_review_page(team.human, q="about notes")["items"]] == [
        "notes/gamma"]
    assert app.memory.needs_review_page(team.human, q="_")["items"] == []


def test_an_empty_queue(app: Armarius, team: Team) -> None:
    assert app.memory.needs_review_page(team.human) == {"items": [], "next": None}
    assert app.memory.needs_review_summary(team.human) == {"count": 0, "oldest_at": None}


def test_a_diff_splits_at_line_feeds_only_shows_the_final_line_break_and_is_bounded(app: Armarius, team: Team
                                                                                   ) -> None:
    """An agent writes both revisions a person compares: a carriage return or U+2028 stays in its line (where the
    pages show its marker), a change of the final line break alone shows, and a diff too costly to match line by
    line says so instead of taking seconds (textdiff's bound)."""
    write(app, team, "ops/sep", "one\rtwo\u2028three\n")
    write(app, team, "ops/sep", "one\rtwo\u2028three")
    assert app.memory.diff(team.human, "ops/sep", 1, 2)["diff"] == (
        "--- ops/sep@1\n+++ ops/sep@2\n@@ -1,3 +1,3 @@\n # About ops/sep\n \n-one\rtwo\u2028three\n"
        "+one\rtwo\u2028three\n\\ No line break at the end\n")
    lines = [f"{index % 7} {'x' * (index % 3)}" for index in range(12_000)]
    write(app, team, "ops/big", "\n".join(lines) + "\n")
    write(app, team, "ops/big", "\n".join(reversed(lines)) + "\n")
    shown = app.memory.diff(team.human, "ops/big", 1, 2)["diff"]
    assert shown.startswith("--- ops/big@1\n+++ ops/big@2\n"), shown[:300]
    assert len(shown.splitlines()) == 3, shown[:300]
    assert "compare the complete contents" in shown


def test_diff_of_any_two_revisions_shows_title_tags_and_body(app: Armarius, team: Team) -> None:
    write(app, team, "ops/db", "line one\nline two\n", title="The database", tags=["ops"])
    write(app, team, "ops/db", "line one\nline 2\n", title="The database", tags=["ops", "db"])
    app.memory.curate(team.human, "ops/db", 2)
    override(app, team, "ops/db", "line one\nline 2\nline three\n", "added a line")
    app.memory.remember(team.agent, RememberRequest("ops/db", "The main database", "line one\nline 2\nline three\n",
                                                    tags=[]))

    one_two = app.memory.diff(team.human, "ops/db", 1, 2)
    assert one_two["diff"] == ("--- ops/db@1\n+++ ops/db@2 (curated)\n@@ -1,5 +1,5 @@\n # The database\n"
                               "-tags: ops\n+tags: db, ops\n \n line one\n-line two\n+line 2\n")
    assert (one_two["from_revision"], one_two["to_revision"], one_two["current_revision"]) == (1, 2, 4)
    assert one_two["curated_revision"] == 2  # the revision a human curated, though the entry moved on
    back = app.memory.diff(team.human, "ops/db", 4, 1)["diff"]
    assert back == ("--- ops/db@4\n+++ ops/db@1\n@@ -1,6 +1,5 @@\n-# The main database\n-tags: (none)\n"
                    "+# The database\n+tags: ops\n \n line one\n-line 2\n-line three\n+line two\n")
    assert app.memory.diff(team.human, "ops/db", 3, 3)["diff"] == ""

    write(app, team, "ops/plain", "a\n")
    write(app, team, "ops/plain", "b\n")
    assert "tags:" not in app.memory.diff(team.human, "ops/plain", 1, 2)["diff"]

    for wrong in (0, 5, -1, 2**70):
        with pytest.raises(NotFound) as missing:
            app.memory.diff(team.human, "ops/db", 1, wrong)
        assert missing.value.details["revision"] == wrong
    with pytest.raises(NotFound):
        app.memory.diff(team.human, "ops/nothing", 1, 2)
    with pytest.raises(InvalidInput):
        app.memory.diff(team.human, "ops/db", "1", 2)  # type: ignore[arg-type]


def test_the_needs_review_diff_shows_changed_tags(app: Armarius, team: Team) -> None:
    write(app, team, "ops/tagged", "same body\n", tags=["ops"])
    app.memory.curate(team.human, "ops/tagged", 1)
    written = app.memory.remember(team.agent, RememberRequest("ops/tagged", "About ops/tagged", "same body\n",
                                                              tags=["ops", "moved"], override_curated=True,
                                                              reason="retagged"))
    assert written["needs_review"] is True
    assert "-tags: ops\n+tags: moved, ops\n" in app.memory.needs_review(team.human)[0]["diff"]


def test_refusals_change_nothing(app: Armarius, team: Team) -> None:
    reviewed(app, team, ["ops/a"])
    before = snapshot(app)
    withdrawn = dataclasses.replace(team.human, permissions=frozenset())
    with pytest.raises(NotAllowed):
        app.memory.needs_review_page(withdrawn)
    with pytest.raises(NotAllowed):
        app.memory.needs_review_summary(withdrawn)
    with pytest.raises(NotAllowed):
        app.memory.diff(withdrawn, "ops/a", 1, 2)
    for arguments in ({"limit": 0}, {"limit": 201}, {"after": 3}, {"q": "\ud800"}):
        with pytest.raises(InvalidInput):
            app.memory.needs_review_page(team.human, **arguments)
    assert snapshot(app) == before


def test_another_workspace_is_neither_listed_nor_counted(app: Armarius, team: Team) -> None:
    reviewed(app, team, ["ops/a"])
    other = make_team(app, "beta")
    assert app.memory.needs_review_page(other.human)["items"] == []
    assert app.memory.needs_review_summary(other.human)["count"] == 0
    with pytest.raises(NotFound):
        app.memory.diff(other.human, "ops/a", 1, 2)
