"""The reveal's runs: RUN_MIN or more of one marked character in a row are one marker with their exact count.

``⟦U+200B ZERO WIDTH SPACE ×21000⟧`` is exactly 21,000 zero-width spaces; three in a row are three markers. A
run of different characters is never merged, line feeds stay line feeds, and visible characters are as typed.
What is shown still determines what is signed: expanding the markers gives the text back.
"""

# ruff: noqa: RUF001, RUF002 (the multiplication sign of a run's marker)

from __future__ import annotations

import itertools
import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from markupsafe import Markup

from armarius.drafts.model import DraftPayload
from armarius.textview import RUN_MIN, marked_characters, reveal, reveal_pieces
from armarius.web.pages.filters import reveal_html

ZWSP = "⟦U+200B ZERO WIDTH SPACE⟧"
ZWNJ = "⟦U+200C ZERO WIDTH NON-JOINER⟧"
RLO = "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧"
#: A marker: its code point and, for a run, its count.
MARKER = re.compile(r"⟦U\+([0-9A-F]{4,6}) [A-Z0-9 -]+?(?: ×([0-9]+))?⟧")


def run(marker: str, count: int) -> str:
    return f"{marker[:-1]} ×{count}⟧"


def expand(shown: str) -> str:
    """The text a reveal shows: each marker back to the characters it stands for."""
    return MARKER.sub(lambda found: chr(int(found.group(1), 16)) * int(found.group(2) or 1), shown)


# Examples -------------------------------------------------------------------------------------------------------


def test_the_threshold_is_four() -> None:
    assert RUN_MIN == 4


@pytest.mark.parametrize("count", [1, 2, RUN_MIN - 1])
def test_a_short_run_is_a_marker_for_each_character(count: int) -> None:
    assert reveal("a" + "\u200b" * count + "b") == "a" + ZWSP * count + "b"
    assert marked_characters("a" + "\u200b" * count + "b") == count


@pytest.mark.parametrize("count", [RUN_MIN, RUN_MIN + 1, 100, 21_000, 1_000_003])
def test_a_run_of_one_hidden_character_is_one_marker_with_its_exact_count(count: int) -> None:
    text = "Pay" + "\u200b" * count + "pal"
    assert reveal(text) == f"Pay{run(ZWSP, count)}pal"
    assert marked_characters(text) == count
    assert reveal(text + "\u200b") == f"Pay{run(ZWSP, count)}pal{ZWSP}", "a run after visible text is a run apart"


def test_runs_at_the_start_and_the_end_of_the_text() -> None:
    assert reveal("\u202e" * 5 + "evil" + "\u200b" * 7) == f"{run(RLO, 5)}evil{run(ZWSP, 7)}"
    assert reveal("\u200b" * 4) == run(ZWSP, 4)
    assert reveal("\u200b" * 3) == ZWSP * 3


def test_runs_of_different_hidden_characters_are_never_merged() -> None:
    assert reveal("\u200b" * 5 + "\u200c" * 6) == run(ZWSP, 5) + run(ZWNJ, 6)
    assert reveal("\u200b\u200c" * 4) == (ZWSP + ZWNJ) * 4, "in turn: a marker for each"
    assert reveal("\u200b\u200b\u200c\u200c\u200b\u200b") == ZWSP * 2 + ZWNJ * 2 + ZWSP * 2
    assert reveal("\u200c" + "\u200b" * 4 + "\u200c") == ZWNJ + run(ZWSP, 4) + ZWNJ


def test_line_feeds_stay_line_feeds_and_split_runs() -> None:
    assert reveal("a\n\n\n\n\nb\n") == "a\n\n\n\n\nb\n"
    assert reveal("\u200b\u200b\n\u200b\u200b") == f"{ZWSP * 2}\n{ZWSP * 2}", "a line feed ends a run"
    assert reveal(("\u200b" * 5 + "\n") * 2) == f"{run(ZWSP, 5)}\n{run(ZWSP, 5)}\n"
    assert reveal("\r\n" * 5) == "⟦U+000D CARRIAGE RETURN⟧\n" * 5


def test_runs_of_visible_characters_are_as_typed() -> None:
    text = "aaaaaaaa ------ ======      ........ 0000000\n"
    assert reveal(text) == text
    assert reveal_pieces(text) == [(text, False)]


def test_other_marked_characters_run_too() -> None:
    assert reveal("\t" * 8 + "x") == "⟦U+0009 CHARACTER TABULATION ×8⟧x"
    assert reveal("a" + "\u00a0" * 5 + "b") == "a⟦U+00A0 NO-BREAK SPACE ×5⟧b"
    assert reveal("\u3164" * 4) == "⟦U+3164 HANGUL FILLER ×4⟧"
    assert reveal("e" + "\u0301" * 6) == "e⟦U+0301 COMBINING ACUTE ACCENT ×6⟧"
    assert reveal("\x00" * 4) == "⟦U+0000 NULL ×4⟧"
    # A look-alike letter in a word with Latin ones, five times over.
    assert reveal("p" + "\u0430" * 5 + "ypal") == "p⟦U+0430 CYRILLIC SMALL LETTER A ×5⟧ypal"


def test_a_run_is_one_highlighted_marker_and_a_typed_marker_stays_plain_text() -> None:
    typed = run(ZWSP, 3)  # typed into the text: it stands for no zero-width space
    text = f"<b>{typed}</b>" + "\u200b" * 4_000 + "\n"
    assert str(reveal_html(text)) == f'&lt;b&gt;{typed}&lt;/b&gt;<mark class="reveal">{run(ZWSP, 4_000)}</mark>\n'
    assert marked_characters(text) == 4_000


def test_a_page_of_runs_is_small() -> None:
    text = "\u200b" * 21_000 + "\u200c" * 21_000 + "\u202e" * 21_000
    assert len(str(reveal_html(text))) < 200


def test_what_is_shown_tells_the_texts_that_are_signed_apart() -> None:
    """Two texts a zero-width space apart show different counts, and their fingerprints (of the text, never of its
    reveal) differ."""
    shorter, longer = "\u200b" * 21_000, "\u200b" * 21_001
    assert reveal(shorter) != reveal(longer)
    assert DraftPayload("a", "A", shorter).fingerprint != DraftPayload("a", "A", longer).fingerprint
    assert DraftPayload("a", "A", expand(reveal(longer))).fingerprint == DraftPayload("a", "A", longer).fingerprint


# Properties -----------------------------------------------------------------------------------------------------

#: Visible characters (Latin and Cyrillic letters, digits, punctuation, spaces, line feeds) and hidden ones
#: (zero-width, bidirectional, controls, a tab, a carriage return, a no-break space, a Hangul filler, a line
#: separator, a byte order mark, a tag, a combining accent, a private-use and an unassigned code point).
_VISIBLE = "abcxyzABC019 .,-_/:@\n\u0430\u0435\u043e\u0436"
_HIDDEN = ("\u200b\u200c\u200d\u202e\u2066\u2069\t\r\x00\x1b\x7f\u00a0\u3164\u2028\ufeff\U000e0041\u0301"
           "\ue000\U000e0fff")
_TEXT = st.lists(st.tuples(st.sampled_from(_VISIBLE + _HIDDEN), st.integers(1, 3 * RUN_MIN)), max_size=30).map(
    lambda runs: "".join(char * count for char, count in runs))


@given(_TEXT)
def test_expanding_the_markers_gives_the_text_back(text: str) -> None:
    shown = reveal(text)
    assert expand(shown) == text
    assert not set(shown) & set(_HIDDEN), "nothing hidden is shown raw"
    assert shown.count("\n") == text.count("\n"), "line feeds stay line feeds"


@given(_TEXT)
def test_a_run_of_one_character_is_one_marker_exactly_when_it_is_long(text: str) -> None:
    markers = [(found.start(), found.end(), found.group(1), int(found.group(2) or 1)) for found in
               MARKER.finditer(reveal(text))]
    assert sum(count for *_, count in markers) == marked_characters(text)
    for _, _, _, count in markers:
        assert count == 1 or count >= RUN_MIN
    # Next to each other, two markers of one character are two single ones, never RUN_MIN of them in a row.
    in_a_row = 1
    for (_, end, point, count), (start, _, next_point, next_count) in itertools.pairwise(markers):
        if end == start and point == next_point:
            assert count == next_count == 1
            in_a_row += 1
            assert in_a_row < RUN_MIN
        else:
            in_a_row = 1


@given(_TEXT)
def test_the_pieces_are_the_reveal_and_the_web_highlights_each_marker(text: str) -> None:
    pieces = reveal_pieces(text)
    assert "".join(shown for shown, _ in pieces) == reveal(text)
    for shown, marker in pieces:
        assert bool(MARKER.fullmatch(shown)) == marker
    html = str(reveal_html(text))
    assert html.count('<mark class="reveal">') == sum(marker for _, marker in pieces)
    plain = re.sub(r'</?mark(?: class="reveal")?>', "", html)
    assert plain == str(Markup.escape(reveal(text)))


def test_a_marker_names_the_character_it_stands_for() -> None:
    for char in _HIDDEN:
        found = MARKER.fullmatch(reveal(char * RUN_MIN))
        assert found
        assert chr(int(found.group(1), 16)) == char
        assert unicodedata.name(char, "UNASSIGNED") in found.group(0) or char in "\t\r\x00\x1b\x7f"
