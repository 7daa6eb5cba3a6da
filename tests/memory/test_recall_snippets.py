"""Recall's snippets (issue 10 item 5): bounded work and a bounded snippet whatever an entry holds,
the window FTS5's snippet() would choose for ordinary text, and the same snippet on both engines.

Recall over entries at the body limit full of the query word used to take seconds per entry
(FTS5's snippet() scores every hit against every other one; ts_headline() parses the whole body).
Tests assert no timings: bench/recall_pathological.py prints them. These tests show that recall
over such entries answers correctly with bounded snippets, and that a snippet stays short even
where the engines' functions returned a 60 KB word.
"""

from __future__ import annotations

import functools
import itertools
import re
import sqlite3
import sys
import unicodedata
from collections.abc import Iterable
from unittest import mock

import pytest
from hypothesis import assume, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from armarius.app import Armarius
from armarius.config import Settings
from armarius.memory import snippets
from armarius.memory.queries import INDEXED_REPETITIONS
from armarius.memory.service import RememberRequest
from armarius.memory.snippets import (
    ELLIPSIS,
    MAP_CHUNK_CHARS,
    MARK,
    MAX_HITS,
    SNIPPET_MAX_CHARS,
    SNIPPET_WORDS,
    fold,
    snippet,
    word_map,
)
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
    with OwnerSQL(settings) as owner:  # a word left out takes the text after it along: the column stays short
        indexed = owner.rows("SELECT search_body FROM entries WHERE slug = ?", ("big/repeats",))[0][0]
    assert indexed.split() == ["yy"] * INDEXED_REPETITIONS + ["end"]


def test_recall_folds_accents_on_both_engines(app: Armarius, team: Team) -> None:
    """A word is found whatever accents the query or the entry writes on its latin letters (PostgreSQL: the
    unaccent extension, in the configuration the vectors and the queries are both parsed with)."""
    remember(app, team, "people/visit", "Wir trafen Herrn Müller in Zürich, danach im Café.")
    remember(app, team, "people/other", "Nobody of that name lives here.")
    for query in ("muller", "MÜLLER", "Muller zurich", "cafe", "café", "Zürich", "CAFÉ muller"):
        found = app.memory.recall(team.agent, query, mode="lexical")
        assert ([hit["slug"] for hit in found["results"]], found["match"]) == (["people/visit"], "all"), query
    assert app.memory.recall(team.agent, "muller", mode="lexical")["results"][0]["snippet"] == (
        "Wir trafen Herrn **Müller** in Zürich, danach im Café.")


def test_a_query_typed_with_separate_accents_finds_what_the_composed_query_finds(app: Armarius, team: Team) -> None:
    """macOS keyboards and many copies write 'Müller' as 'Mu' and a combining diaeresis (decomposed, NFD).
    Typed so, a query finds what the composed one finds, on both engines, entries written either way: the
    query is composed first, and an accent that composes with no letter stays in its word, as both engines
    index it (they used to get 'Mu' and 'ller', words no entry holds)."""
    remember(app, team, "people/composed", "Ask M\u00fcller about the invoices.")
    remember(app, team, "people/decomposed", "Ask Mu\u0308ller about the payroll.")
    remember(app, team, "people/other", "Nobody of that name works here.")
    remember(app, team, "codes/register", "The q\u0308x register is odd.")
    for query in ("muller", "M\u00fcller", "Mu\u0308ller", "MU\u0308LLER", "mu\u0308ller"):
        for mode in ("lexical", "hybrid"):
            found = app.memory.recall(team.agent, query, mode=mode)
            snippets_found = {hit["slug"]: hit["snippet"] for hit in found["results"]}
            assert found["match"] == "all", (query, mode)
            assert {"people/composed", "people/decomposed"} <= set(snippets_found), (query, mode)
            assert snippets_found["people/composed"] == "Ask **M\u00fcller** about the invoices."
            assert snippets_found["people/decomposed"] == "Ask **M\u00fcller** about the payroll."
            if mode == "lexical":
                assert set(snippets_found) == {"people/composed", "people/decomposed"}
    payroll = app.memory.recall(team.agent, "Mu\u0308ller payroll", mode="lexical")
    assert [hit["slug"] for hit in payroll["results"]] == ["people/decomposed"]
    register = app.memory.recall(team.agent, "q\u0308x", mode="lexical")
    assert ([hit["slug"] for hit in register["results"]], register["match"]) == (["codes/register"], "all")


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


@pytest.mark.parametrize("dots", [0, 2, 12])
@pytest.mark.parametrize("separator", [". ", ": ", ".\n"])
def test_a_window_starts_at_its_sentence_behind_stops_that_start_none(dots: int, separator: str) -> None:
    """The sentence a hit is in is found from the hit backwards, past '.' and ':' that start no sentence
    (a few at a time, then the rest at once): the window FTS5 chooses."""
    body = ("one two three four five six seven eight nine ten eleven twelve thirteen" + separator
            + "Here it starts " + ".".join(["v1"] * (dots + 1)) + " and then zz comes, " + "more words " * 12)
    assert snippet(body, ["zz"]) == fts5_snippet(body, ["zz"])
    assert snippet(body, ["zz"]).startswith(ELLIPSIS + "Here it starts")


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


# Long entries: the word map ------------------------------------------------------------------------

PROSE = ("Deploys run from the CI pipeline: the staging host restarts nightly, and backups go to the vault "
         "at two. Ask ops before touching it during a release window, because a rollback takes an hour.\n\n")


def long_prose(size: int, ending: str, *, middle: str = "") -> str:
    """Ordinary sentences of about ``size`` characters ending in ``ending``; ``middle`` starts four
    characters before the boundary of two map pieces half-way, so that its first word crosses it."""
    text = PROSE * (size // len(PROSE) + 1)
    if middle:
        boundary = size // 2 // MAP_CHUNK_CHARS * MAP_CHUNK_CHARS
        text = text[:boundary - 5] + " " + middle + text[boundary - 5:]
    return text[:size - len(ending) - 1].rstrip() + " " + ending


def stored_map(settings: Settings, slug: str) -> bytes | None:
    with OwnerSQL(settings) as owner:
        found = owner.rows("SELECT m.word_map FROM entries e LEFT JOIN entry_word_maps m ON m.entry_id = e.id "
                           "WHERE e.slug = ?", (slug,))[0][0]
    return None if found is None else bytes(found)


def test_recall_shows_a_rare_word_wherever_it_stands_in_an_entry_at_the_body_limit(
        app: Armarius, team: Team, settings: Settings) -> None:
    """A word once near the end of an entry at the body limit, once across a piece boundary, once in
    every piece, before a word longer than a piece, only in the slug: each snippet is the one cut
    from the whole body (FTS5's, or the body's start), on both engines, for every word of the query
    and for any of them."""
    size = body_limit(app) - 100
    bodies = {
        "big/end": long_prose(size, "Ask Quasimodo about the bells."),
        "big/middle": long_prose(size, "The end.", middle="Quasimodo rang them. "),
        "big/spread": " ".join(long_prose(MAP_CHUNK_CHARS - 1, "Quasimodo.") for _ in range(size // MAP_CHUNK_CHARS)),
        # a hit followed by a word longer than a map piece
        "big/long-word": long_prose(size - 5000, "Ask Quasimodo " + "y" * 4000 + " twice."),
        "big/quasimodo-slug": long_prose(size, "Nothing to find here."),
        "small/other": "Quasimodo, once.",
    }
    for slug, body in bodies.items():
        remember(app, team, slug, body)
        assert (stored_map(settings, slug) is None) == (len(body) <= 2 * MAP_CHUNK_CHARS)
        assert stored_map(settings, slug) == word_map(body)
    for query in ("quasimodo", "Quasimodo nowhereword"):
        answer = app.memory.recall(team.agent, query, limit=10)
        assert answer["match"] == ("all" if query == "quasimodo" else "any")
        snippets = {result["slug"]: result["snippet"] for result in answer["results"]}
        assert set(snippets) == set(bodies)
        for slug, body in bodies.items():  # the snippet cut from the whole body, which is FTS5's
            assert snippets[slug] == snippet(body, ["quasimodo"]), slug
            if slug not in {"big/quasimodo-slug", "big/long-word"}:  # (a snippet cuts a long word short)
                assert snippets[slug] == fts5_snippet(body, ["quasimodo"]), slug
        assert "**Quasimodo**" in snippets["big/end"]
        assert "**Quasimodo**" in snippets["big/middle"]
        assert "**Quasimodo**" in snippets["big/spread"]
        assert snippets["big/quasimodo-slug"].startswith("Deploys run from the CI pipeline")
        assert snippets["big/long-word"].endswith("**Quasimodo** " + "y" * 64 + "… twice.")


def test_the_word_map_follows_each_revision(app: Armarius, team: Team, settings: Settings) -> None:
    long_body, short_body = long_prose(body_limit(app) - 100, "Ask Quasimodo."), "Quasimodo, in short."
    remember(app, team, "big/changing", short_body)
    assert stored_map(settings, "big/changing") is None
    for body in (long_body, short_body, long_body + " More.", long_body):
        app.memory.remember(team.agent, RememberRequest(slug="big/changing", title="Entry big/changing", body=body))
        assert stored_map(settings, "big/changing") == word_map(body)
        [result] = app.memory.recall(team.agent, "quasimodo")["results"]
        assert result["snippet"] == fts5_snippet(body, ["quasimodo"])


def test_an_entry_written_before_word_maps_is_searched_whole(app: Armarius, team: Team, settings: Settings) -> None:
    size = body_limit(app) - 100
    body = long_prose(size, "Ask Quasimodo about the bells.")
    remember(app, team, "big/old", body)
    with OwnerSQL(settings) as owner:
        assert owner.execute("DELETE FROM entry_word_maps WHERE entry_id = (SELECT id FROM entries WHERE slug = ?)",
                             ("big/old",)) == 1
    [result] = app.memory.recall(team.agent, "quasimodo")["results"]
    assert result["snippet"] == fts5_snippet(body, ["quasimodo"])
    assert "**Quasimodo**" in result["snippet"]


FILLER = ["lorem", "ipsum", "dolor", "sit", "amet", "Alphabet", "betamax", "zzz"]


@st.composite
def long_bodies(draw: st.DrawFn) -> str:
    """Several map pieces of filler, with ordinary bodies (query words, sentences, accents) dropped in
    at drawn places, some right at a piece boundary or across it."""
    size = draw(st.integers(2 * MAP_CHUNK_CHARS + 1, 6 * MAP_CHUNK_CHARS))
    filler = " ".join(FILLER[i % len(FILLER)] for i in range(size // 5))
    body = filler[:size]
    for _ in range(draw(st.integers(0, 4))):
        insert = draw(st.one_of(ordinary_bodies(), st.sampled_from([
            "Müller", "MULLER", "İstanbul", "\u212aelvin", "Mu\u0301ller", "a_zz_b", "zz", "ZZ.", "the" * 40])))
        at = draw(st.one_of(st.integers(0, len(body)),
                            st.sampled_from([MAP_CHUNK_CHARS, 2 * MAP_CHUNK_CHARS]).flatmap(
                                lambda edge: st.integers(edge - 12, edge + 2))))
        body = body[:at] + insert + body[at:]
    return body


@hypothesis_settings(max_examples=150, deadline=None)
@given(body=long_bodies(), terms=st.lists(st.sampled_from(["alpha", "beta", "zz", "the", "muller", "istanbul",
                                                            "kelvin", "b", "lorem", "nowhere", "thethe"]),
                                          min_size=1, max_size=3, unique=True))
@example(body="lorem " * 1400 + "ipsu" + "m" * 20 + " alpha", terms=["alpha"])
@example(body="x" * (2 * MAP_CHUNK_CHARS - 3) + " alpha" + " lorem" * 1000, terms=["alpha"])
@example(body="lorem " * 2000 + "Mu\u0301ller", terms=["muller"])
def test_a_word_map_never_changes_a_snippet(body: str, terms: list[str]) -> None:
    """The map only rules out the pieces that hold no query word: the snippet is the one cut from
    the body searched whole."""
    assert snippet(body, terms, word_map(body)) == snippet(body, terms)


@pytest.mark.parametrize(("ending", "terms", "marked"), [
    ("Wir trafen Herrn Müller.", ["muller"], "**Müller**"),
    ("Nach İstanbul.", ["istanbul"], "**İstanbul**"),
    ("Ask Quasimodo.", ["QUASIMODO", "nowhere"], "**Quasimodo**"),
    ("Wir trafen Herrn Mu\u0301ller.", ["muller"], "**Múller**"),
])
def test_an_accented_or_folded_word_near_the_end_of_a_long_body_is_found(ending: str, terms: list[str],
                                                                          marked: str) -> None:
    body = long_prose(60_000, ending)
    found = snippet(body, terms, word_map(body))
    assert marked in found
    assert found == snippet(body, terms)
    if "\u0301" not in body:  # (recall composes separate accents first, and counts the words composed)
        assert found == fts5_snippet(body, terms)


def test_a_word_after_hundreds_of_longer_words_ending_in_it_is_found() -> None:
    """Matches inside longer words ('the' in 'bathe') are passed over by the regex engine, however
    many there are: the word after them is found, as FTS5 finds it."""
    body = "They bathe. " + "bathe " * 2000 + "the end"
    assert snippet(body, ["the"]) == fts5_snippet(body, ["the"])
    assert snippet(body, ["the"]).endswith("**the** end")


def test_a_word_map_that_does_not_fit_its_body_is_not_used() -> None:
    body = long_prose(40_000, "Ask Quasimodo.")
    words = word_map(body)
    assert words is not None
    assert len(words) <= len(body) // 4
    expected = snippet(body, ["quasimodo"])
    assert "**Quasimodo**" in expected
    for wrong in (words[:-1], b"\x02" + words[1:], word_map(body + " more" * 2000), b"", b"\x01"):
        assert snippet(body, ["quasimodo"], wrong) == expected
    assert word_map("short " * 100) is None


# Hostile bodies and queries: the search costs time in the body's length ---------------------------

#: A hang guard, not a timing: each body below cost the search of every query word by a regex (until
#: 2026-12) minutes, in the body's length times the query word's (one character class per letter, matched
#: again from each letter of a run); the search of a word between spaces costs it milliseconds.
HANG_GUARD = pytest.mark.timeout(60)


@HANG_GUARD
@pytest.mark.parametrize(("body", "word", "expected"), [
    # a run of accented letters, not in composed form (a decomposed accent at its end): the report's body
    ("\u00e0" * 1_000_000 + " e\u0301", "a" * 20_000, "\u00e0" * 64 + "\u2026 \u00e9"),
    # a run of plain letters: the query word is found inside the run at each of its letters
    ("a" * 2_000_000, "a" * 100_000, "a" * 64 + "\u2026"),
], ids=["accented-run", "plain-run"])
def test_a_query_word_inside_a_long_run_of_letters_costs_one_pass(body: str, word: str, expected: str) -> None:
    for body_map in (None, word_map(body)):
        assert snippet(body, ["zebra", word], body_map) == expected
        assert snippet(body, [f"b{word}", word[:5000], word[:70], "a"], body_map) == expected


@HANG_GUARD
def test_many_query_words_inside_runs_of_letters_cost_a_pass_over_the_words() -> None:
    """More query words than snippets.FIND_WORDS_MAX are compared with a piece's words at once: 32 query words
    that are all found inside a run of letters, or start a word of it, cost one pass over the piece's words."""
    words = ["a" * length for length in range(2, 34)]
    for body in ("a" * 500_000 + " e\u0301", "\u00e0" * 250_000 + " e\u0301", "a " * 250_000 + "e\u0301",
                 ("abcdefghijklmnopqrstuvwxyzabcdefg " * 15_000) + "e\u0301"):
        shown = snippet(body, words, word_map(body))
        assert MARK not in shown
        assert shown == snippet(body, ["nowhere"])
    runs = ("a" * 3000 + " " + "a" * 30 + " ") * 100
    shown = snippet(runs, words, word_map(runs))
    assert shown.count(f"{MARK}{'a' * 30}{MARK}") == 10
    assert shown == snippet(runs, ["a" * 30]) == snippet(runs, ["a" * 30, "nowhere"])


@HANG_GUARD
def test_recall_over_entries_planted_against_a_long_query_word(app: Armarius, team: Team) -> None:
    """The attack, through recall on both engines: entries at the body limit of one word of accented letters
    with a decomposed accent at the end, and of runs holding the query word once a piece, recalled with a
    query word of 994 letters (a query is at most 1,000 characters)."""
    limit = body_limit(app)
    accented = "\u00e0" * ((limit - 4) // 2) + " e\u0301"
    runs = (("a" * 3000 + " " + "a" * 994 + " ") * (limit // 3996 + 1))[:limit].rstrip()
    for number in range(4):
        app.memory.remember(team.agent, RememberRequest(
            slug=f"planted/accented-{number}", title=f"Zebra note {number}", body=accented, confirm_distinct=True,
            reason="planted"))
        app.memory.remember(team.agent, RememberRequest(
            slug=f"planted/runs-{number}", title=f"Yak note {number}", body=runs, confirm_distinct=True,
            reason="planted"))
    for mode in ("lexical", "hybrid"):
        found = app.memory.recall(team.agent, "zebra " + "a" * 994, limit=50, mode=mode)
        snippets = {hit["slug"]: hit["snippet"] for hit in found["results"] if hit["slug"].startswith("planted/")}
        assert {slug for slug in snippets if "accented" in slug} == {f"planted/accented-{n}" for n in range(4)}
        for slug, shown in snippets.items():
            assert shown == ("\u00e0" * 64 + "\u2026 \u00e9" if "accented" in slug else snippet(runs, ["a" * 994]))
        runs_found = app.memory.recall(team.agent, "yak " + "a" * 994, limit=50, mode=mode)
        assert runs_found["match"] == "all"
        assert {hit["slug"] for hit in runs_found["results"]} >= {f"planted/runs-{n}" for n in range(4)}
        for hit in runs_found["results"]:
            if hit["slug"].startswith("planted/runs"):
                assert hit["snippet"] == snippet(runs, ["a" * 994])
                assert hit["snippet"].count(f"{MARK}{'a' * 64}{ELLIPSIS}{MARK}") == 10  # (a word is cut at 64)


def regex_hits_in(body: str, wanted: set[str], pieces: object, *, accented: bool) -> snippets._Hits:
    """The search the snippets used until 2026-12, as the oracle: each query word by a regex (for accented
    forms one character class per letter) from its first find, rejecting matches inside longer words.
    Right, and slow on long runs of letters (see above)."""
    patterns = {term: _regex_of(term, accented=accented) for term in wanted}
    starts: dict[str, list[int]] = {term: [] for term in wanted}
    reach = max(map(len, wanted)) + 1
    if pieces is None:
        pieces = ((piece, wanted) for piece in snippets._pieces(len(body)))
    assert isinstance(pieces, Iterable)
    for (offset, end), terms in pieces:
        lead = 1 if offset else 0
        chunk = body[offset - lead:end + reach]
        if accented and chunk.isascii():
            continue
        lowered, stop = snippets._lowered(chunk), end - offset + lead
        for term in terms:
            kept, pattern = starts[term], patterns[term]
            if len(kept) == MAX_HITS:
                continue
            begin = lead if accented else lowered.find(term, lead, stop - 1 + len(term))
            if begin < 0:
                continue
            matches = itertools.islice(pattern.finditer(lowered, begin, stop + len(term)), MAX_HITS - len(kept))
            kept += [offset - lead + match.start() for match in matches if match.start() < stop]
        if sum(map(len, starts.values())) >= MAX_HITS:
            break
    pairs = sorted((start, term) for term, positions in starts.items() for start in positions)[:MAX_HITS]
    return snippets._Hits([start for start, _ in pairs], [term for _, term in pairs])


@functools.lru_cache(maxsize=256)
def _regex_of(term: str, *, accented: bool) -> re.Pattern[str]:
    variants = snippets._accented() if accented else {}
    letters = "".join(f"[{char}{variants[char]}]" if char in variants else re.escape(char) for char in term)
    return re.compile(f"{letters}(?<![^\\W_]{letters})(?![^\\W_])")


#: Words and what stands between them in the bodies below: accents composed and decomposed, letters that
#: lowercase to more than one (U+0130) or fold ('ǅ'), underscores, digits, letters of other scripts, runs.
TRICKY_WORDS = ["alpha", "Alpha", "ALPHA", "\u00e0lpha", "\u00c0LPH\u00c1", "a\u0300lpha", "M\u00fcller",
                "Mu\u0308ller", "MULLER", "m\u00fcller", "\u0130stanbul", "istanbul", "stra\u00dfe", "\u01c5ungla",
                "x2", "42", "\u00e9t\u00e9", "ete", "\u03b1\u03bb\u03c6\u03b1", "\u6771\u4eac", "a", "aa",
                "aaaa", "\u00e0\u00e0", "a" * 80, "\u00e0" * 70, "b" + "a" * 40]
TRICKY_GAPS = [" ", " ", " ", "_", ", ", ". ", "\u00a0", "\u2014", "\u3002", "\U0001f600", "\n", "-", "\u0301 ",
               "'", "\u200b"]
TRICKY_TERMS = ["alpha", "muller", "istanbul", "strasse", "straße", "dzungla", "x2", "42", "ete",
                "\u03b1\u03bb\u03c6\u03b1", "\u6771\u4eac", "a", "aa", "aaaa", "a" * 80, "a" * 70, "a" * 40, "nowhere"]


@st.composite
def tricky_bodies(draw: st.DrawFn) -> str:
    """Tricky words and gaps, sometimes repeated into bodies of several map pieces."""
    words = draw(st.lists(st.sampled_from(TRICKY_WORDS), min_size=1, max_size=60))
    gaps = draw(st.lists(st.sampled_from(TRICKY_GAPS), min_size=len(words), max_size=len(words)))
    text = "".join(word + gap for word, gap in zip(words, gaps, strict=True))
    return text * draw(st.sampled_from([1, 1, 1, 40, 300]))


@hypothesis_settings(max_examples=250, deadline=None)
@given(body=tricky_bodies(),  # up to 7 query words: fewer and more than FIND_WORDS_MAX (4), found both ways
       terms=st.lists(st.sampled_from(TRICKY_TERMS), min_size=1, max_size=7, unique=True))
@example(body="a" * 300 + " " + "\u00e0" * 120 + " aaaa a_aaaa", terms=["aaaa", "a" * 120])
@example(body="Mu\u0308ller and M\u00fcller, muller." * 300, terms=["muller", "alpha", "aa", "a", "x2", "42"])
def test_the_search_finds_what_the_regex_search_found(body: str, terms: list[str]) -> None:
    """The same snippets as the regex search (the oracle, above), with and without the word map, whichever
    way the query words are compared (one find each, or with the words of a piece at once)."""
    body_map = word_map(body)
    with mock.patch.object(snippets, "_hits_in", regex_hits_in):
        expected = [snippet(body, terms), snippet(body, terms, body_map)]
    assert [snippet(body, terms), snippet(body, terms, body_map)] == expected


def test_the_search_sees_letters_digits_and_accents_as_fold_and_the_word_pattern_do() -> None:
    """Every code point: a letter or digit is kept (lowercased; in the accented search folded as fold folds
    it), anything else is a space, one character for one."""
    every = [chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code < 0xE000]
    letters = [char for char in every if re.fullmatch(r"[^\W_]", char)]
    others = "".join(char for char in every if not re.fullmatch(r"[^\W_]", char))
    joined = "".join(letters)
    assert snippets._only_words(snippets._lowered(joined), folded=True) == "".join(map(fold, letters))
    assert snippets._only_words(snippets._lowered(joined), folded=False) == snippets._lowered(joined)
    assert snippets._only_words(others, folded=True) == " " * len(others)
    ascii_text = "".join(map(chr, range(128)))
    assert ascii_text.translate(snippets._ASCII_WORDS) == "".join(
        char.lower() if re.fullmatch(r"[^\W_]", char) else " " for char in ascii_text)
