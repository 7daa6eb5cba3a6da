"""Recall over a bounded candidate set (issue 17): both engines rank at most RANK_CANDIDATES matches.

A common word matches a third of a workspace, and ranking costs per match (PostgreSQL reads each
match's vector, FTS5's bm25 its column sizes), so recall ranks only the first RANK_CANDIDATES entries
that match and pass the filters, in the index's order (PostgreSQL's search function, migration 0017;
SQLite's query, memory.queries.search_later). The bound is lowered here so that a handful of entries
exceed it. What must hold on both engines whatever the bound: every result holds all the words, an
entry holding all of them is found by them (never a fallback to "any word"), filters choose among all
matches (not among the first few), and snippets are cut from each result's own body as before."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from armarius.app import Armarius, open_app
from armarius.config import Settings
from armarius.memory import queries
from armarius.memory.service import RememberRequest
from tests.helpers import OwnerSQL, Team, make_team

#: Fewer than the entries written below.
BOUND = 3
ENTRIES = 8


@pytest.fixture
def app(settings: Settings) -> Iterator[Armarius]:
    """Recall by words alone: these tests are about the word search, not about fusing it with vectors."""
    application = open_app(replace(settings, memory_embeddings="off"))
    yield application
    application.close()


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries, "RANK_CANDIDATES", BOUND)


def remember(app: Armarius, team: Team, slug: str, title: str, body: str, tags: list[str] | None = None) -> None:
    result = app.memory.remember(team.agent, RememberRequest(slug=slug, title=title, body=body, tags=tags,
                                                             confirm_distinct=True, reason="candidate test"))
    assert result["status"] == "written"


def write_entries(app: Armarius, team: Team) -> None:
    """ENTRIES entries holding 'lantern' in the order written (the index's order on PostgreSQL); the last
    two also hold 'quartz', are tagged 'late', and the last one is curated."""
    for number in range(ENTRIES):
        late = number >= ENTRIES - 2
        extra = " Its case is quartz." if late else ""
        remember(app, team, f"lamp/number-{number}", f"Lamp number {number}",
                 f"Entry {number} mentions the lantern once.{extra}", ["late"] if late else [])
    app.memory.curate(team.human, f"lamp/number-{ENTRIES - 1}", 1)


def slugs(answer: dict[str, Any]) -> list[str]:
    return [result["slug"] for result in answer["results"]]


def test_a_word_matching_more_entries_than_the_bound_answers_with_entries_holding_it(
    app: Armarius, team: Team, bounded: None
) -> None:
    write_entries(app, team)
    answer = app.memory.recall(team.agent, "lantern", limit=BOUND - 1)
    assert answer["match"] == "all"
    found = slugs(answer)
    assert len(found) == BOUND - 1
    # Both engines rank the first BOUND entries holding the word, in the order they were written.
    assert set(found) <= {f"lamp/number-{number}" for number in range(BOUND)}
    for result in answer["results"]:
        number = result["slug"].rsplit("-", 1)[1]
        late = " Its case is quartz." if int(number) >= ENTRIES - 2 else ""
        # The snippet is cut from the result's own body, exactly as before the bound.
        assert result["snippet"] == f"Entry {number} mentions the **lantern** once.{late}"


def test_past_the_bound_only_the_first_matches_are_ranked(app: Armarius, team: Team, bounded: None) -> None:
    """Entries written later that mention the word more (and would rank first) are not among the candidates:
    the first BOUND entries holding it are, on both engines."""
    for number in range(ENTRIES):
        mentions = 1 if number < BOUND else 6
        remember(app, team, f"lamp/number-{number}", f"Lamp number {number}",
                 f"Entry {number}: " + "the lantern glows. " * mentions)
    answer = app.memory.recall(team.agent, "lantern", limit=BOUND)  # (the bound is never below the limit)
    assert answer["match"] == "all"
    assert sorted(slugs(answer)) == [f"lamp/number-{number}" for number in range(BOUND)]


def test_entries_holding_every_word_are_found_beyond_the_bound(app: Armarius, team: Team, bounded: None) -> None:
    write_entries(app, team)
    # Only the last two entries hold both words: past the first BOUND holding 'lantern', yet the search
    # bounds the entries that hold both, so they are found by both words.
    answer = app.memory.recall(team.agent, "lantern quartz", limit=10)
    assert answer["match"] == "all"
    assert sorted(slugs(answer)) == [f"lamp/number-{ENTRIES - 2}", f"lamp/number-{ENTRIES - 1}"]
    assert answer["results"][0]["snippet"].count("**") == 4  # both words marked
    # A word no entry holds together with them still falls back to any word, and says so.
    fallback = app.memory.recall(team.agent, "quartz zeppelin", limit=10)
    assert fallback["match"] == "any"
    assert sorted(slugs(fallback)) == [f"lamp/number-{ENTRIES - 2}", f"lamp/number-{ENTRIES - 1}"]


def test_filters_choose_among_every_match_not_among_the_first(app: Armarius, team: Team, bounded: None) -> None:
    write_entries(app, team)
    tagged = app.memory.recall(team.agent, "lantern", tags=["late"], limit=10)
    curated = app.memory.recall(team.agent, "lantern", curated_only=True, limit=10)
    assert tagged["match"] == curated["match"] == "all"
    assert sorted(slugs(tagged)) == [f"lamp/number-{ENTRIES - 2}", f"lamp/number-{ENTRIES - 1}"]
    assert slugs(curated) == [f"lamp/number-{ENTRIES - 1}"]
    assert curated["results"][0]["curated"] is True


def test_a_query_within_the_bound_is_ranked_as_without_it(
    app: Armarius, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    remember(app, team, "ops/pump", "Pump", "The pump runs nightly. The pump stops at dawn. Pump, pump.")
    remember(app, team, "ops/valve", "Valve", "The valve opens when the pump runs.")
    remember(app, team, "pump/manual", "Pump manual", "How to service it.")
    remember(app, team, "ops/other", "Other", "Nothing about it.")
    full = app.memory.recall(team.agent, "pump", limit=10)
    monkeypatch.setattr(queries, "RANK_CANDIDATES", BOUND)  # exactly the three matches
    bounded = app.memory.recall(team.agent, "pump", limit=10)
    assert full == bounded
    assert sorted(slugs(full)) == ["ops/pump", "ops/valve", "pump/manual"]
    assert slugs(full)[-1] == "ops/valve"  # one mention in the body ranks below a title or four mentions


# PostgreSQL: the search function itself ---------------------------------------------------------

ON_POSTGRESQL = pytest.mark.parametrize("settings", [pytest.param("postgresql", marks=pytest.mark.postgres)],
                                        indirect=True)


def search_ids(app: Armarius, team: Team, query: str, candidates: int | None, *, limit: int = 10) -> list[int]:
    """Entry ids as armarius_search_entries ranks them, through the server's own role."""
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        rows = tx.all("SELECT entry_id FROM armarius_search_entries(to_tsquery('simple', ?), ?, false, '{}', ?)",
                      (query, limit, candidates))
    return [int(row["entry_id"]) for row in rows]


def entry_ids(settings: Settings) -> dict[str, int]:
    with OwnerSQL(settings) as owner:
        return {slug: int(entry_id) for slug, entry_id in owner.rows("SELECT slug, id FROM entries")}


@ON_POSTGRESQL
def test_postgresql_ranks_the_first_candidates_in_the_index_order(settings: Settings, app: Armarius,
                                                                  team: Team) -> None:
    write_entries(app, team)
    remember(app, team, "lantern/best", "Lantern", "The lantern, the lantern, the lantern.")  # ranks first
    ids = entry_ids(settings)
    first = [ids[f"lamp/number-{number}"] for number in range(BOUND)]
    everything = search_ids(app, team, "lantern", None)
    assert everything[0] == ids["lantern/best"]
    assert len(everything) == ENTRIES + 1
    assert search_ids(app, team, "lantern", 1000) == everything  # within the bound: ranked as without one
    # Over the bound: the first BOUND matches in the index's order (the entries written first), ranked.
    assert search_ids(app, team, "lantern", BOUND) == sorted(first)  # equal ranks: by id
    assert search_ids(app, team, "lantern", BOUND, limit=1) == [min(first)]
    # The four-argument form of earlier releases ranks every match.
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        old_form = tx.all("SELECT entry_id FROM armarius_search_entries(to_tsquery('simple', 'lantern'), 10, false, "
                          "'{}')")
    assert [int(row["entry_id"]) for row in old_form] == everything


@ON_POSTGRESQL
def test_postgresql_search_function_keeps_its_guards(settings: Settings, app: Armarius) -> None:
    assert settings.database_url is not None
    assert settings.database_migrate_url is not None
    with psycopg.connect(settings.database_migrate_url, autocommit=True) as owner:
        rows = owner.execute(
            "SELECT p.prosecdef, l.lanname, p.proconfig, p.prorows, pg_get_function_identity_arguments(p.oid), "
            "has_function_privilege('public', p.oid, 'EXECUTE'), "
            "has_function_privilege(%s, p.oid, 'EXECUTE') "
            "FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = 'armarius_search_entries'",
            (psycopg.conninfo.conninfo_to_dict(settings.database_url)["user"],),
        ).fetchall()
    assert len(rows) == 1  # the four-argument function is gone; its calls resolve to this one
    definer, language, config, estimate, arguments, public_may, server_may = rows[0]
    assert (definer, language, estimate) == (True, "plpgsql", 10)
    assert arguments == ("query tsquery, max_rows integer, curated_only boolean, required_tags text[], "
                         "max_candidates integer")
    assert set(config) == {"search_path=pg_catalog, pg_temp", "enable_seqscan=off",
                           "max_parallel_workers_per_gather=0"}
    assert (public_may, server_may) == (False, True)
