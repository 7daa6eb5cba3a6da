"""Property tests for memory: the slug grammar, [[link]] parsing, the words search sees, and
recall on arbitrary text (both engines).

Slugs and links are checked against independent implementations written here without regular
expressions, from the grammar in SPEC §2: segments of ``[a-z0-9]+`` joined by '-', segments
joined by '/', at most 128 characters.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.errors import InvalidInput
from armarius.memory.model import SLUG_MAX, check_slug, parse_links, words
from armarius.memory.service import RECALL_MAX, RememberRequest
from tests.helpers import Team, make_team

ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
PURE = hypothesis_settings(max_examples=300, deadline=None)
#: Function-scoped fixtures (one database per engine) are shared by all the examples of a test.
ON_ENGINES = hypothesis_settings(max_examples=150, deadline=None,
                                 suppress_health_check=[HealthCheck.function_scoped_fixture])


# An independent slug grammar ---------------------------------------------------------------------


def is_slug(text: object) -> bool:
    if not isinstance(text, str) or not 0 < len(text) <= SLUG_MAX:
        return False
    return all(part and all(char in ALNUM for char in part) for segment in text.split("/")
               for part in segment.split("-"))


#: Slugs built from the grammar: some longer than the limit (up to ~300 characters).
grammar_slugs = st.lists(
    st.lists(st.text(ALNUM, min_size=1, max_size=12), min_size=1, max_size=4).map("-".join),
    min_size=1, max_size=6,
).map("/".join)
valid_slugs = grammar_slugs.filter(lambda slug: len(slug) <= SLUG_MAX)


@st.composite
def mutated_slugs(draw: st.DrawFn) -> str:
    """A grammar slug with one character inserted, replaced or removed: mostly invalid, sometimes not."""
    slug = draw(grammar_slugs)
    position = draw(st.integers(0, len(slug)))
    char = draw(st.sampled_from([*"-/_.A Z\n\t\x00é0a", "\u0130", "\u212a", "\uff41", "\u0660"]))
    how = draw(st.sampled_from(["insert", "replace", "delete"]))
    if how == "insert":
        return slug[:position] + char + slug[position:]
    if how == "replace":
        return slug[:position] + char + slug[position + 1:]
    return slug[:position] + slug[position + 1:]


slug_candidates = st.one_of(
    grammar_slugs,
    mutated_slugs(),
    st.text(alphabet=ALNUM + "-/", max_size=140),
    st.text(alphabet=ALNUM + "-/_. A\n\u0131\u017f\u212a", max_size=40),
    st.text(),
)


@PURE
@given(slug_candidates)
@example("a" * SLUG_MAX)
@example("a" * (SLUG_MAX + 1))
@example("a\n")
@example("a-b/c")
@example("\u212a")  # KELVIN SIGN: lowercases to 'k' under IGNORECASE, must stay refused
@example("\u0661")  # ARABIC-INDIC DIGIT ONE: a digit to \d, not to [0-9]
def test_check_slug_accepts_exactly_the_grammar(candidate: str) -> None:
    if is_slug(candidate):
        assert check_slug(candidate) == candidate
    else:
        with pytest.raises(InvalidInput) as refused:
            check_slug(candidate)
        assert refused.value.details == {"field": "slug"}


@PURE
@given(valid_slugs)
def test_every_slug_the_grammar_builds_is_accepted(slug: str) -> None:
    assert check_slug(slug) == slug
    assert check_slug(slug, field="target") == slug


@PURE
@given(st.one_of(st.none(), st.integers(), st.floats(), st.binary(), st.lists(valid_slugs, max_size=2),
                 valid_slugs.map(str.encode), st.booleans()))
def test_check_slug_refuses_what_is_not_a_string(value: Any) -> None:
    with pytest.raises(InvalidInput):
        check_slug(value)


# Links ---------------------------------------------------------------------------------------------


def links_oracle(body: str) -> list[str]:
    """[[slug]] targets found by scanning, without the model's regular expression."""
    found: list[str] = []
    position = 0
    while (start := body.find("[[", position)) != -1:
        end = body.find("]", start + 2)
        if end != -1 and body.startswith("]]", end) and is_slug(body[start + 2:end]):
            found.append(body[start + 2:end])
            position = end + 2
        else:
            position = start + 1
    return list(dict.fromkeys(found))


bracket_free_text = st.text(st.characters(exclude_characters="[]"), max_size=20)
invalid_targets = slug_candidates.filter(lambda text: not is_slug(text) and "]" not in text and "[" not in text)


@st.composite
def bodies_with_links(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A body of text, valid links, invalid links and overlong slugs; and the links it holds."""
    pieces, expected = [], []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["text", "link", "repeat", "invalid", "overlong"]))
        if kind == "text":
            pieces.append(draw(bracket_free_text))
        elif kind == "link" or (kind == "repeat" and not expected):
            slug = draw(valid_slugs)
            pieces.append(f"[[{slug}]]")
            expected.append(slug)
        elif kind == "repeat":
            pieces.append(f"[[{draw(st.sampled_from(expected))}]]")
        elif kind == "invalid":
            pieces.append(f"[[{draw(invalid_targets)}]]")
        else:
            pieces.append(f"[[{draw(st.text(ALNUM, min_size=SLUG_MAX + 1, max_size=SLUG_MAX + 40))}]]")
    return "".join(pieces), list(dict.fromkeys(expected))


@PURE
@given(bodies_with_links())
def test_parse_links_finds_exactly_the_valid_links_in_order(generated: tuple[str, list[str]]) -> None:
    body, expected = generated
    assert parse_links(body) == expected


link_noise = st.lists(st.one_of(
    st.sampled_from(["[", "]", "[[", "]]", "[[[", "]]]", " ", "\n", "-", "/"]),
    valid_slugs, grammar_slugs, st.text(alphabet=ALNUM + "-/[] ", max_size=12), st.text(max_size=8),
    st.text("ab-/", min_size=SLUG_MAX - 2, max_size=SLUG_MAX + 2),
), max_size=20).map("".join)


@PURE
@given(link_noise)
@example("[[[a]]]")
@example("[[a]][[b]]]]")
@example("[[a]b]]")
@example("[[a/b-c]] [[a/b-c]] [[A]] [[a--b]] [[a/]] [[]]")
@example(f"[[{'a' * SLUG_MAX}]] [[{'b' * (SLUG_MAX + 1)}]]")
def test_parse_links_agrees_with_a_scanner_on_bracket_noise(body: str) -> None:
    assert parse_links(body) == links_oracle(body)


# The words search sees -----------------------------------------------------------------------------

QUERY_SYNTAX = set("\"'*:^()-+&|!<>{}[],.;~@#$%\\/?=`_ \t\n\r\x00")


@PURE
@given(st.text())
@example("İstanbul Straße ǰ ΐ ﬁle ½ x²")
@example('"deploy" OR staging* NEAR(a b) -x +y ^z a:b a&b a|b !a <-> \'q\'')
def test_words_are_non_empty_runs_of_letters_and_digits(text: str) -> None:
    found = words(text)
    for word in found:
        assert word
        assert not QUERY_SYNTAX & set(word), word
        # Letters and digits as written: the engines lowercase them.
        assert all(char.isalnum() for char in word), word


@PURE
@given(st.lists(st.text(st.characters(categories=["Ll", "Lu", "Lo", "Nd"]), min_size=1, max_size=10),
                max_size=10))
def test_words_splits_on_anything_else(parts: list[str]) -> None:
    separators = " \t\n-_/.,;:!?\"'()[]{}*^+&|<>\x00\u200f\u200e\u2028🦀"
    text = "".join(part + separators[index % len(separators)] for index, part in enumerate(parts))
    assert words(text) == parts


# Recall on arbitrary text, on both engines ---------------------------------------------------------

CORPUS = [
    # slug, title, body, tags, curated
    ("deploy/staging-server", "Deploy to the staging server", "Run `make deploy` on **staging**; it needs "
     "the VPN. See [[deploy/production]].", ["ops", "infra"], True),
    ("deploy/production", "Production deploys", "Only on weekdays, with a second person watching the "
     "dashboards. Rollback: `git revert`.", ["ops"], False),
    ("team/greetings", "Grüße und Ärger", "Umlaute, emoji 🦀 and RTL text: שלום עולם, مرحبا. "
     "Quotes \"double\" and 'single', and operators AND OR NOT NEAR.", ["people"], False),
    ("kb/fts-syntax", "Search syntax notes", "FTS5 uses \"phrases\", prefix*, col:term, ^start; PostgreSQL "
     "uses a & b | !c <-> d:*. None of it must reach the engine.", [], True),
]
CORPUS_SLUGS = {row[0] for row in CORPUS}
CORPUS_TAGS = {row[0]: set(row[3]) for row in CORPUS}
CORPUS_CURATED = {row[0]: row[4] for row in CORPUS}
#: A word that appears in exactly one entry (and nowhere in the others' slug, title or body).
UNIQUE_WORDS = {"vpn": "deploy/staging-server", "weekdays": "deploy/production", "umlaute": "team/greetings",
                "phrases": "kb/fts-syntax"}


@pytest.fixture
def corpus(app: Armarius) -> Team:
    """A few entries, one workspace, created once per engine and shared by every example."""
    team = make_team(app, "props")
    for slug, title, body, tags, curated in CORPUS:
        result = app.memory.remember(team.agent, RememberRequest(slug=slug, title=title, body=body, tags=tags,
                                                                 confirm_distinct=True, reason="corpus"))
        assert result["status"] == "written", result
        if curated:
            app.memory.curate(team.human, slug, 1)
    return team


SPECIAL = [
    *"\"'*:^()-+&|!<>{}[],.;~@#$%\\/?=`_", "\x00", "\t", "\n", "\r", "\u200e", "\u200f", "\u202e", "\u2066",
    "\ufeff", "\u00ad", "\u0301", "🦀", "👩‍👩‍👧", "🇩🇪", "NEAR", "AND", "OR", "NOT", "&&", "||", "<->", "<2>", ":*",
    "!!", "''", '""', "\\'", "a:*", "col:term", "NEAR(a b, 3)", "^", "İ", "ß", "ﬁ", "²", "½", "\u0661", "Ⅻ", "ς",
]
query_pieces = st.one_of(st.sampled_from(SPECIAL), st.sampled_from(sorted(UNIQUE_WORDS)), st.text(max_size=6))
queries = st.one_of(
    st.text(),
    st.lists(query_pieces, max_size=16).map("".join),
    st.lists(query_pieces, max_size=16).map(" ".join),
    st.integers(2000, 3000).map(lambda n: "a" * n),
    st.lists(st.text(ALNUM, min_size=1, max_size=4), min_size=30, max_size=60).map(" ".join),
)
tag_filters = st.sampled_from([None, [], ["ops"], ["ops", "infra"], ["people"], ["absent"]])


@ON_ENGINES
@given(query=queries, limit=st.integers(1, RECALL_MAX), curated_only=st.booleans(), tags=tag_filters)
@example(query="\x00", limit=10, curated_only=False, tags=None)
@example(query='"', limit=10, curated_only=False, tags=None)
@example(query="'", limit=10, curated_only=False, tags=None)
@example(query="vpn'); DROP TABLE entries; --", limit=10, curated_only=False, tags=None)
@example(query="a" * 2048, limit=10, curated_only=False, tags=None)
def test_recall_never_raises_on_arbitrary_text(app: Armarius, corpus: Team, query: str, limit: int,
                                               curated_only: bool, tags: list[str] | None) -> None:
    answer = app.memory.recall(corpus.agent, query, limit=limit, curated_only=curated_only, tags=tags)
    assert answer["query"] == query
    assert answer["match"] in {"all", "any", "meaning", "none"}
    results = answer["results"]
    assert all(set(result["ranked_by"]) <= {"lexical", "semantic"} and result["ranked_by"] for result in results)
    assert (answer["match"] == "none") == (results == [])
    assert len(results) <= limit
    assert len({result["slug"] for result in results}) == len(results)
    assert {result["slug"] for result in results} <= CORPUS_SLUGS
    if not words(query):
        assert answer["match"] == "none"
    for result in results:
        assert isinstance(result["snippet"], str)
        assert result["revision"] == 1
        assert result["curated"] is CORPUS_CURATED[result["slug"]]
        assert result["curated"] or not curated_only
        assert set(tags or ()) <= CORPUS_TAGS[result["slug"]]


@ON_ENGINES
@given(before=st.text(max_size=40), word=st.sampled_from(sorted(UNIQUE_WORDS)), after=st.text(max_size=40),
       upper=st.booleans())
@example(before='"', word="vpn", after="*", upper=False)
@example(before="NOT", word="weekdays", after="\x00'", upper=True)
def test_recall_finds_a_word_among_arbitrary_noise(app: Armarius, corpus: Team, before: str, word: str,
                                                   after: str, upper: bool) -> None:
    query = f"{before} {word.upper() if upper else word} {after}"
    terms = list(dict.fromkeys(words(query)))
    if word not in terms[:32]:
        return  # past the first 32 distinct words, a term is not searched
    answer = app.memory.recall(corpus.agent, query, limit=RECALL_MAX)
    assert UNIQUE_WORDS[word] in {result["slug"] for result in answer["results"]}, answer


#: Characters that show as nothing though no category above says so: the Hangul fillers, the blank braille
#: pattern, the combining grapheme joiner, the Khmer inherent vowels, the Mongolian free variation selectors
#: and the variation selectors but U+FE0E and U+FE0F (which choose how an emoji shows).
BLANK_OR_IGNORED = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f\u17b4\u17b5\u180b\u180c\u180d\u180f"
                             + "".join(map(chr, [*range(0xFE00, 0xFE0E), *range(0xE0100, 0xE01F0)])))


@ON_ENGINES
@given(title=st.text(min_size=1, max_size=60), body=st.text(max_size=300))
@example(title="x", body="a\x00b")
@example(title="a\u202eb", body="x")
@example(title="\u3164\u3164\u3164", body="x")
@example(title="ok", body="\r\n\t 🦀 \u200f שלום \ufeff")
def test_remember_round_trips_arbitrary_text_or_refuses_it(app: Armarius, corpus: Team, title: str,
                                                           body: str) -> None:
    slug = f"any/{abs(hash((title, body))) % 10**12}"
    request = RememberRequest(slug=slug, title=title, body=body, confirm_distinct=True, reason="arbitrary text")
    invisible = any(unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp"} or char in BLANK_OR_IGNORED
                    for char in title)
    refused_field = "title" if not title.strip() or invisible else "body" if "\x00" in body else None
    if refused_field:
        with pytest.raises(InvalidInput) as refused:
            app.memory.remember(corpus.agent, request)
        assert refused.value.details["field"] == refused_field
        return
    result = app.memory.remember(corpus.agent, request)
    assert result["status"] in {"written", "unchanged"}
    stored = app.memory.read(corpus.agent, slug)
    assert (stored["title"], stored["body"]) == (title.strip(), body)


# Words whose full case folding differs from per-character lowercasing ---------------------------------


@pytest.mark.parametrize("word", ["Straße", "İstanbul", "STRASSE", "ǅemal"])
def test_recall_finds_a_word_exactly_as_written(app: Armarius, word: str) -> None:
    """Query words reach the engine as written and are lowercased there exactly as the index was
    (Python's casefold would make 'ß' 'ss' and 'İ' 'i' plus U+0307, and miss the entry)."""
    team = make_team(app, "casefold")
    actor: Actor = team.agent
    app.memory.remember(actor, RememberRequest(slug="trip/notes", title="Trip notes",
                                               body=f"We drove down the {word} at night."))
    found = app.memory.recall(actor, word)["results"]
    assert [result["slug"] for result in found] == ["trip/notes"]
