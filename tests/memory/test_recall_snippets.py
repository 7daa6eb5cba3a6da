"""Recall's snippets (issue 10 item 5): bounded work and a bounded snippet whatever an entry holds,
the window FTS5's snippet() would choose for ordinary text, and the same snippet on both engines.

Recall over entries at the body limit full of the query word used to take seconds per entry
(FTS5's snippet() scores every hit against every other one; ts_headline() parses the whole body).
Tests assert no timings: bench/recall_pathological.py prints them. These tests show that recall
over such entries answers correctly with bounded snippets, and that a snippet stays short even
where the engines' functions returned a 60 KB word.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata

import pytest
from hypothesis import assume, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from armarius.app import Armarius
from armarius.config import Settings
from armarius.memory.queries import INDEXED_REPETITIONS
from armarius.memory.service import RememberRequest
from armarius.memory.snippets import ELLIPSIS, MARK, MAX_HITS, SNIPPET_MAX_CHARS, SNIPPET_WORDS, fold, snippet
from tests.helpers import OwnerSQL, Team, make_team

OPS = ("Deploys run from the CI pipeline. The staging host is alpha-7 in rack 3: it restarts nightly. "
       "Backups go to the vault at 02:00 and are kept for thirty days. Ask ops before touching the "
       "staging host during a release window, because a rollback takes an hour.")
#: FTS5's snippet(…, '**', '**', '…', 20) of OPS for these queries (checked against FTS5 below as well).
OPS_SNIPPETS = {
    "staging host": "…The **staging** **host** is alpha-7 in rack 3: it restarts nightly. Backups go to the vault "
                    "at 02:00…",
    "rollback": "…Ask ops before touching the staging host during a release window, because a **rollback** "
                "takes an hour.",
    "vault nightly": "…it restarts **nightly**. Backups go to the **vault** at 02:00 and are kept for thirty days. "
                     "Ask ops before…",
    "deploys": "**Deploys** run from the CI pipeline. The staging host is alpha-7 in rack 3: it restarts nightly. "
               "Backups go…",
}
ZZ_SNIPPET = " ".join(["**zz**"] * SNIPPET_WORDS) + "…"


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def body_limit(app: Armarius) -> int:
    return app.settings.memory_body_max_bytes


def remember(app: Armarius, team: Team, slug: str, body: str) -> None:
    result = app.memory.remember(team.agent, RememberRequest(slug=slug, title=f"Entry {slug}", body=body,
                                                             confirm_distinct=True, reason="snippet test"))
    assert result["status"] == "written"


# Through recall, on both engines ------------------------------------------------------------------


def test_recall_over_entries_at_the_body_limit_full_of_the_query_word(app: Armarius, team: Team) -> None:
    limit = body_limit(app)
    heavy = ("zz " * (limit // 3 + 1))[:limit].rstrip()
    assert len(heavy.encode()) <= limit
    assert heavy.count("zz") > 20_000
    for number in range(3):
        remember(app, team, f"big/zz-{number}", heavy)
    remember(app, team, "small/zz", "zz is the word we look for, once.")
    remember(app, team, "small/other", "Nothing to find here.")

    every_word = app.memory.recall(team.agent, "zz", limit=10)
    any_word = app.memory.recall(team.agent, "zz nowhereword", limit=10)

    for answer, match in ((every_word, "all"), (any_word, "any")):
        assert answer["match"] == match
        snippets = {result["slug"]: result["snippet"] for result in answer["results"]}
        assert set(snippets) == {"big/zz-0", "big/zz-1", "big/zz-2", "small/zz"}
        assert snippets["small/zz"] == "**zz** is the word we look for, once."
        for slug in ("big/zz-0", "big/zz-1", "big/zz-2"):
            assert snippets[slug] == ZZ_SNIPPET
        assert all(len(text) <= SNIPPET_MAX_CHARS for text in snippets.values())


def test_a_snippet_stays_short_whatever_the_body_holds(app: Armarius, team: Team) -> None:
    """A 60 KB word or 60 KB of punctuation next to a hit: the engines' functions returned it whole."""
    limit = body_limit(app)
    remember(app, team, "huge/word", "Intro zz " + "y" * (limit - 20) + " zz end")
    remember(app, team, "huge/gap", "zz" + "-" * (limit - 10) + "zz")
    snippets = {result["slug"]: result["snippet"] for result in app.memory.recall(team.agent, "zz")["results"]}
    assert snippets["huge/word"] == "Intro **zz** " + "y" * 64 + "… **zz** end"
    assert snippets["huge/gap"] == "**zz**" + "-" * 64 + "…**zz**"


@pytest.mark.parametrize("query", sorted(OPS_SNIPPETS))
def test_both_engines_give_fts5s_snippet_of_an_ordinary_entry(app: Armarius, team: Team, query: str) -> None:
    remember(app, team, "ops/notes", OPS)
    results = app.memory.recall(team.agent, query)["results"]
    assert [(result["slug"], result["snippet"]) for result in results] == [("ops/notes", OPS_SNIPPETS[query])]


def indexed_repetitions(settings: Settings, slug: str, word: str) -> int:
    """How often the full-text index holds ``word`` for the entry ``slug`` (read as the owner)."""
    with OwnerSQL(settings) as owner:
        if settings.database_url is None:
            owner.execute("CREATE VIRTUAL TABLE temp.instances USING fts5vocab(main, entries_fts, instance)")
            return int(owner.rows("SELECT count(*) FROM temp.instances i JOIN entries e ON e.id = i.doc "
                                  "WHERE i.term = ? AND e.slug = ?", (word, slug))[0][0])
        rows = owner.rows("SELECT array_length(w.positions, 1) FROM entry_search s "
                          "JOIN entries e ON e.id = s.entry_id, unnest(s.tsv) w WHERE w.lexeme = ? AND e.slug = ?",
                          (word, slug))
        return sum(int(row[0]) for row in rows)


def test_a_word_is_indexed_at_most_255_times_per_entry_and_every_word_stays_findable(
        app: Armarius, team: Team, settings: Settings) -> None:
    """The ranking reads every indexed repetition (FTS5's bm25()): an entry's repetitions are capped."""
    limit = body_limit(app)
    remember(app, team, "big/repeats", ("zz " * (limit // 3))[:limit - 40] + " and the tail words")
    remember(app, team, "even/repeats", "zz " * INDEXED_REPETITIONS + "ordinary")
    assert indexed_repetitions(settings, "big/repeats", "zz") == INDEXED_REPETITIONS
    assert indexed_repetitions(settings, "even/repeats", "zz") == INDEXED_REPETITIONS
    found = {result["slug"] for result in app.memory.recall(team.agent, "zz")["results"]}
    assert found == {"big/repeats", "even/repeats"}
    assert [result["slug"] for result in app.memory.recall(team.agent, "tail")["results"]] == ["big/repeats"]

    # A new revision replaces what was indexed; the body itself is kept whole.
    app.memory.remember(team.agent, RememberRequest(slug="big/repeats", title="Entry big/repeats",
                                                    body="yy " * 1000 + "end"))
    assert indexed_repetitions(settings, "big/repeats", "zz") == 0
    assert indexed_repetitions(settings, "big/repeats", "yy") == INDEXED_REPETITIONS
    assert app.memory.read(team.agent, "big/repeats")["body"] == "yy " * 1000 + "end"
    assert app.memory.recall(team.agent, "tail")["results"] == []
    if settings.database_url is None:
        with OwnerSQL(settings) as owner:  # the index agrees with its content (the view of what was indexed)
            owner.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")


def test_a_snippet_marks_words_as_the_index_compares_them(app: Armarius, team: Team) -> None:
    remember(app, team, "trip/notes", "We drove down the STRASSE to İstanbul with Herrn Müller.")
    results = app.memory.recall(team.agent, "strasse istanbul")["results"]
    assert [result["snippet"] for result in results] == [
        "We drove down the **STRASSE** to **İstanbul** with Herrn Müller."]


# The snippet function, against FTS5's snippet() as the oracle ----------------------------------


def fts5_snippet(body: str, terms: list[str]) -> str | None:
    """What FTS5's snippet() gives for ``body`` and any of ``terms`` (None: no match)."""
    with sqlite3.connect(":memory:") as connection:
        connection.execute("CREATE VIRTUAL TABLE f USING fts5 (body, tokenize = 'unicode61 remove_diacritics 2')")
        connection.execute("INSERT INTO f (body) VALUES (?)", (body,))
        row = connection.execute("SELECT snippet(f, 0, '**', '**', '…', 20) FROM f WHERE f MATCH ?",
                                 (" OR ".join(f'"{term}"' for term in terms),)).fetchone()
    return None if row is None else str(row[0])


@pytest.mark.parametrize("query", sorted(OPS_SNIPPETS))
def test_the_expected_snippets_are_fts5s(query: str) -> None:
    assert fts5_snippet(OPS, query.split()) == OPS_SNIPPETS[query]
    assert snippet(OPS, query.split()) == OPS_SNIPPETS[query]


VOCABULARY = ["alpha", "Alpha", "ALPHA", "beta", "gamma", "delta", "x", "y2", "zz", "the", "a", "rack", "42"]
SEPARATORS = [" ", " ", " ", " ", ", ", ". ", ": ", ".\n", "\n\n", " (", ") ", " - ", "/", ".", "; ", "\t"]


@st.composite
def ordinary_bodies(draw: st.DrawFn) -> str:
    """Short words with punctuation and sentences: text whose every hit the snippet code weighs."""
    words = draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=120))
    separators = draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(words) + 1, max_size=len(words) + 1))
    return separators[0].lstrip() + "".join(word + separator for word, separator in zip(words, separators[1:],
                                                                                          strict=True))


@hypothesis_settings(max_examples=400, deadline=None)
@given(body=ordinary_bodies(), terms=st.lists(st.sampled_from(["alpha", "beta", "zz", "the", "42", "nowhere"]),
                                              min_size=1, max_size=3, unique=True))
@example(body=OPS, terms=["staging", "host"])
@example(body="The end. alpha beta. gamma alpha", terms=["alpha"])
@example(body="alpha beta beta beta. " + "alpha " * 16, terms=["alpha"])
def test_the_window_is_a_run_of_the_body_around_its_hits(body: str, terms: list[str]) -> None:
    """Whatever window is chosen (FTS5 may break a tie between equally good windows otherwise): it is
    a run of at most SNIPPET_WORDS of the body's own words, it marks only query words, and it marks
    at least one of them when the body holds one."""
    wanted = {fold(term) for term in terms}
    words = re.findall(r"[^\W_]+", body)
    assume(any(fold(word) in wanted for word in words))
    result = snippet(body, terms)
    marked = re.findall(re.escape(MARK) + r"(.+?)" + re.escape(MARK), result)
    assert marked, result
    assert all(fold(word) in wanted for word in marked)
    shown = re.findall(r"[^\W_]+", result.replace(MARK, " ").replace(ELLIPSIS, " "))
    assert len(shown) <= SNIPPET_WORDS
    assert any(words[start:start + len(shown)] == shown for start in range(len(words))), result


@pytest.mark.parametrize("body", [
    "zz " * 2000, "a. " + "zz " * 2000, "one two three four. " * 5 + "zz " * 2000, "zz x " * 1000 + "zz. zz",
])
def test_past_max_hits_the_window_is_still_fts5s(body: str) -> None:
    """Only the first MAX_HITS hits are weighed, which for these bodies leaves FTS5's choice."""
    assert body.count("zz") > MAX_HITS
    assert snippet(body, ["zz"]) == fts5_snippet(body, ["zz"])


@pytest.mark.parametrize(("body", "terms", "expected"), [
    ("Wir trafen Herrn Müller gestern.", ["muller"], "Wir trafen Herrn **Müller** gestern."),
    ("Wir trafen Herrn Mu\u0301ller gestern.", ["MULLER"], "Wir trafen Herrn **Múller** gestern."),
    ("Nach İstanbul fahren.", ["istanbul"], "Nach **İstanbul** fahren."),
    ("Nach Istanbul fahren.", ["İstanbul"], "Nach **Istanbul** fahren."),
    ("We drove down the Straße.", ["straße"], "We drove down the **Straße**."),
    ("a_b and snake_case", ["b", "case"], "a_**b** and snake_**case**"),
    ("", ["x"], ""),
    ("---", ["x"], "---"),
    ("A title hit. " * 12, ["title"], "A **title** hit. " * 6 + "A **title**…"),
    ("Only the title matched, so the body's start is shown: one two three four five six seven eight nine ten "
     "eleven.",
     ["nowhere"], "Only the title matched, so the body's start is shown: one two three four five six seven eight "
     "nine…"),
])
def test_words_compare_as_the_index_compares_them(body: str, terms: list[str], expected: str) -> None:
    assert snippet(body, terms) == expected


@hypothesis_settings(max_examples=300, deadline=None)
@given(body=st.text(st.characters(blacklist_characters="*…"), max_size=3000),
       terms=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4))
@example(body="zz" + "y" * 5000 + " zz", terms=["zz"])
@example(body="\u0130" * 50 + " x", terms=["i", "x"])
def test_a_snippet_of_any_text_is_short_and_shows_the_body(body: str, terms: list[str]) -> None:
    text = snippet(body, terms)
    assert len(text) <= SNIPPET_MAX_CHARS
    # Without its marks and cuts, what is shown is text of the body.
    for piece in text.replace(MARK, "").split(ELLIPSIS):
        assert piece in body or piece in unicodedata.normalize("NFC", body)
