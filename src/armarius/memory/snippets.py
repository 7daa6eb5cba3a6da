"""Recall's snippets: a few words of an entry's body around its best hits, from a bounded window.

Neither engine's own snippet function is bounded. FTS5's ``snippet()`` scores a window at every
hit against every other hit, so its time grows with the square of the hits (two 64 KiB entries of
``zz zz …`` took 6 to 35 seconds); PostgreSQL's ``ts_headline()`` parses the whole body (about
50 ms for 64 KiB). Here the query words are searched for in the lowercased body (in C, a chunk at a
time, until :data:`MAX_HITS` hits are found), only those hits are weighed, and only the words next
to the chosen ones are split out, so the work per entry stays small whatever the body holds.

The window is chosen as FTS5 chooses it: the :data:`SNIPPET_WORDS` words holding the most
distinct query words, then the most hits, the earliest first; it starts at a sentence when the
hits still fit, and is centred on them otherwise. Words compare as SQLite indexes them: lowercased
one character at a time, accents removed from latin letters (``muller`` marks ``Müller``). The same
code serves both engines, so both give the same snippet.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

#: Words in a snippet (what FTS5's snippet() was asked for).
SNIPPET_WORDS = 20
#: Hits weighed when choosing the window (later ones are still marked when they fall inside it).
MAX_HITS = 32
#: How much of a body is lowercased and searched at a time (the search stops after the chunk that
#: brings MAX_HITS hits).
SCAN_CHUNK_CHARS = 4096
#: Matches a query word's search may look at (a short word ends many longer ones: 'the' in 'bathe').
MAX_PROBES = 256
#: The longest a window of words is taken to be: words further apart are a window apart, uncounted.
WINDOW_MAX_CHARS = 16 * SNIPPET_WORDS
#: Hits spread over at most this much text have their word positions counted in one pass.
POSITIONS_SPAN_CHARS = 16384
#: How far before a hit the words that may open its window are looked for.
LOOKBACK_CHARS = 256
#: How much text after the window's first word is split into words at first (more only if needed).
FORWARD_CHARS = 160
#: A word, or the text between two words, longer than this is cut, so that a snippet stays short.
PIECE_MAX_CHARS = 64
MARK, ELLIPSIS = "**", "…"
#: The longest a snippet can be: its words, the text between them and around them, each cut, and the marks.
SNIPPET_MAX_CHARS = (2 * SNIPPET_WORDS + 1) * (PIECE_MAX_CHARS + len(ELLIPSIS)) + SNIPPET_WORDS * 2 * len(MARK)

_WORD = re.compile(r"[^\W_]+")
#: Splits text into [text, word, text, word, …, text].
_PIECES = re.compile(r"([^\W_]+)")
#: What FTS5 takes for the start of a sentence: '.' or ':', white space, a word (which the match ends before).
_SENTENCE = re.compile(r"[.:][ \t\n\r]+(?=[^\W_])")
#: ASCII letters and digits to 'w', everything else to ' '.
_ASCII_MASK = str.maketrans({chr(code): "w" if chr(code).isalnum() else " " for code in range(128)})
#: Latin letters whose accents SQLite's tokenizer removes, in Unicode's blocks of accented latin letters.
_LATIN = (range(0xC0, 0x250), range(0x1E00, 0x1F00))
#: Combining accents (as in decomposed text, or 'İ' lowercased), which SQLite's tokenizer drops from words.
_ACCENTS = range(0x300, 0x370)


class _Hit(NamedTuple):
    start: int
    term: str


def snippet(body: str, terms: Sequence[str]) -> str:
    """About :data:`SNIPPET_WORDS` words of ``body`` around its best hits of ``terms``, hits in ``**``."""
    wanted = {fold(term) for term in terms} - {""}
    hits = _hits(body, wanted)
    if not hits and not body.isascii() and not unicodedata.is_normalized("NFC", body):
        # Accents written as separate characters split words: compose them, as most text is written.
        body = unicodedata.normalize("NFC", body)
        hits = _hits(body, wanted)
    first_word = _WORD.search(body)
    if first_word is None:
        return _cut(body)
    origin = first_word.start()
    anchor, back = _window(body, hits, origin) if hits else (origin, None)
    return _render(body, anchor, back, origin, wanted)


def fold(word: str) -> str:
    """A word as the index compares it: lowercased one character at a time, latin accents removed."""
    lowered = word.lower()
    return lowered if lowered.isascii() else "".join(map(_unaccented, lowered))


@functools.cache
def _unaccented(char: str) -> str:
    """An accented latin letter's base letter; nothing for a combining accent; else the character."""
    if ord(char) in _ACCENTS:
        return ""
    decomposed = unicodedata.normalize("NFD", char)
    if any(ord(char) in block for block in _LATIN) and decomposed[0].isascii():
        return decomposed[0]
    return char


@functools.cache
def _accented() -> dict[str, str]:
    """Each lowercase ascii letter and the accented latin letters that fold to it."""
    variants: dict[str, str] = {}
    for code in itertools.chain(*_LATIN):
        char = chr(code)
        base = _unaccented(char)
        if base != char and char.islower():
            variants[base] = variants.get(base, "") + char
    return variants


# Finding hits ----------------------------------------------------------------------------------


def _hits(body: str, wanted: set[str]) -> list[_Hit]:
    """The first MAX_HITS hits of the query words in ``body``, whole words only, in body order."""
    if not wanted:
        return []
    hits = _hits_in(body, wanted, accented=False)
    if not hits and not body.isascii():
        # The body may hold the words accented where the query did not ('Müller' for 'muller').
        hits = _hits_in(body, wanted, accented=True)
    return hits


def _hits_in(body: str, wanted: set[str], *, accented: bool) -> list[_Hit]:
    """Searches the lowercased body a chunk at a time, and stops at a chunk's end once MAX_HITS hits
    are found (later chunks could only add later ones). Lowercasing is slow for a string holding any
    non-ASCII character, but a chunk of ASCII characters is an ASCII string again."""
    patterns = {term: _term_pattern(term, accented=accented) for term in wanted}
    found: dict[int, _Hit] = {}
    probes, counts = dict.fromkeys(wanted, 0), dict.fromkeys(wanted, 0)
    for offset in range(0, len(body), SCAN_CHUNK_CHARS):
        # A word starting in the chunk is seen whole, with the character after it.
        chunk = body[offset:offset + SCAN_CHUNK_CHARS + max(map(len, wanted)) + 1]
        lowered = chunk.lower() if chunk.isascii() else chunk.replace("\u0130", "i").lower()  # 'İ': one character
        for term, pattern in patterns.items():
            for match in pattern.finditer(lowered, 0, min(len(lowered), SCAN_CHUNK_CHARS + len(term) + 1)):
                start = match.start()
                if start >= SCAN_CHUNK_CHARS or probes[term] == MAX_PROBES or counts[term] == MAX_HITS:
                    break
                probes[term] += 1
                before = lowered[start - 1] if start else body[offset - 1] if offset else ""
                if not before.isalnum():
                    found[offset + start] = _Hit(offset + start, term)
                    counts[term] += 1
        if len(found) >= MAX_HITS:
            break
    return [found[start] for start in sorted(found)[:MAX_HITS]]


@functools.lru_cache(maxsize=1024)
def _term_pattern(term: str, *, accented: bool) -> re.Pattern[str]:
    """The word ``term`` not followed by a letter or digit (the search runs in C from its first letter);
    ``accented``: any accented form of its latin letters too."""
    variants = _accented() if accented else {}
    letters = "".join(f"[{char}{variants[char]}]" if char in variants else re.escape(char) for char in term)
    return re.compile(letters + r"(?![^\W_])")


# Choosing the window ---------------------------------------------------------------------------


def _window(body: str, hits: list[_Hit], origin: int) -> tuple[int, int | None]:
    """Where the window is: the offset of a word, and how many words before it the window starts
    (a centred window, which moves back from the body's end as FTS5's does), or None (a window from
    a sentence start, which starts at that word whatever follows).

    FTS5's scoring: a window scores 1000 for each distinct query word in it and 1 for each further
    hit. Each hit proposes the window centred on it and the hits that follow it within a window,
    and the window from the start of its sentence with 100 more (120 from the body's start); the
    first of the best wins (so a window no other can beat ends the search).
    """
    positions = _positions(body, hits)

    def score(begin: int) -> int:
        """The score of the window from word position ``begin``."""
        index, seen, count = bisect.bisect_left(positions, begin), set(), 0
        while index < len(hits) and positions[index] < begin + SNIPPET_WORDS:
            seen.add(hits[index].term)
            index, count = index + 1, count + 1
        return 999 * len(seen) + count

    unbeatable = 999 * len({hit.term for hit in hits}) + SNIPPET_WORDS + 120
    best_score, best_start, best_back = -1, origin, None
    counts: dict[str, int] = {}
    last = -1
    sentence: tuple[int, int] | None = None  # offset and word position of the sentence the hit is in
    sentence_scores: dict[int, int] = {}
    # Like FTS5, sentence starts count only in a body longer than one window.
    one_window = _words_between(body, origin, len(body)) < SNIPPET_WORDS
    for number, hit in enumerate(hits):
        if best_score == unbeatable:
            break
        while last + 1 < len(hits) and positions[last + 1] < positions[number] + SNIPPET_WORDS:
            last += 1
            counts[hits[last].term] = counts.get(hits[last].term, 0) + 1
        centred = 999 * len(counts) + last - number + 1
        if centred > best_score:
            spare = SNIPPET_WORDS - (positions[last] - positions[number] + 1)
            best_score, best_start, best_back = centred, hit.start, spare // 2
        counts[hit.term] -= 1
        if not counts[hit.term]:
            del counts[hit.term]
        if one_window:
            continue
        sentence = _sentence_of(body, hits, positions, number, origin, sentence)
        if sentence is None or sentence[0] == hit.start or positions[number] - sentence[1] >= SNIPPET_WORDS:
            continue
        if sentence[0] not in sentence_scores:
            sentence_scores[sentence[0]] = score(sentence[1]) + (120 if sentence[0] == origin else 100)
        if sentence_scores[sentence[0]] > best_score:
            best_score, best_start, best_back = sentence_scores[sentence[0]], sentence[0], None
    return best_start, best_back


def _positions(body: str, hits: list[_Hit]) -> list[int]:
    """Word positions of the hits, counted from the first; a gap of a whole window or more counts as one window."""
    base = hits[0].start
    span = body[base:hits[-1].start]
    if not span.isascii() or len(span) > POSITIONS_SPAN_CHARS:
        gaps = [_words_between(body, previous.start, hit.start) for previous, hit in itertools.pairwise(hits)]
    else:  # one pass in C over the span, then a count per gap (in the mask a word is a run of 'w')
        mask = span.translate(_ASCII_MASK)
        gaps = [SNIPPET_WORDS if hit.start - previous.start > WINDOW_MAX_CHARS
                else min(mask.count(" w", previous.start - base, hit.start - base) + 1, SNIPPET_WORDS)
                for previous, hit in itertools.pairwise(hits)]
    return [0, *itertools.accumulate(gaps)]


def _sentence_of(body: str, hits: list[_Hit], positions: list[int], number: int, origin: int,
                 previous: tuple[int, int] | None) -> tuple[int, int] | None:
    """The start of the sentence hit ``number`` is in (offset, word position), or None if it is
    further back than LOOKBACK_CHARS. Only the text since the previous hit is searched; a sentence
    that began before that hit is the previous hit's sentence, ``previous``."""
    at = hits[number].start
    since = hits[number - 1].start + 1 if number else origin
    start = max(since, at - LOOKBACK_CHARS)
    found = None
    for found in _SENTENCE.finditer(body, start, at + 1):  # noqa: B007 (the last one is wanted)
        pass
    if found is not None:
        offset = found.end()
    elif start > since:
        return None
    elif number:
        return previous
    else:
        offset = origin
    return offset, positions[number] - _words_between(body, offset, at)


def _words_between(body: str, start: int, end: int) -> int:
    """The words from the word at offset ``start`` up to ``end``, or SNIPPET_WORDS if they cannot
    share a window."""
    if end - start > WINDOW_MAX_CHARS:
        return SNIPPET_WORDS
    text = body[start:end]
    if not text.isascii():
        return min(len(_WORD.findall(text)), SNIPPET_WORDS)
    # In the mask a word is a run of 'w': counting the runs is one pass in C.
    return min(text.translate(_ASCII_MASK).count(" w") + (1 if text else 0), SNIPPET_WORDS)


# Rendering -------------------------------------------------------------------------------------


def _render(body: str, anchor: int, back: int | None, origin: int, wanted: set[str]) -> str:
    """SNIPPET_WORDS words from ``back`` words before the word at offset ``anchor``, query words
    marked; a centred window (``back`` not None) that would run past the body's end starts earlier."""
    lookback = 0 if back is None else min(anchor, LOOKBACK_CHARS)
    before = _PIECES.split(body[anchor - lookback:anchor])  # [text, word, …, word, text]
    if lookback < anchor and body[anchor - lookback - 1].isalnum() and len(before) > 1 and not before[0]:
        before[:3] = [before[0] + before[1] + before[2]]  # a word cut by the lookback is only text
    size = FORWARD_CHARS
    while True:  # the anchor's word and SNIPPET_WORDS more, or the body's end
        after = _PIECES.split(body[anchor:anchor + size])
        if len(after) // 2 > SNIPPET_WORDS or anchor + size >= len(body):
            break
        size *= 4
    pieces = [*before[:-1], before[-1] + after[0], *after[1:]]
    words = len(pieces) // 2
    first = len(before) // 2 - min(back or 0, len(before) // 2)  # the window's first word
    if back is not None and words - first < SNIPPET_WORDS and len(after) // 2 <= SNIPPET_WORDS:
        first = max(0, words - SNIPPET_WORDS)  # the body ends: the window ends with it
    last = min(words, first + SNIPPET_WORDS)
    shown = pieces[2 * first:2 * last + 1]  # [text, word, …, word, text after]
    start = anchor - lookback + sum(map(len, pieces[:2 * first + 1]))  # the offset of the first word
    shown[0] = body[:start] if start == origin else ""
    more = last < words
    if more:
        shown[-1] = ""
    marked = [(word.lower() if word.isascii() else fold(word)) in wanted for word in shown[1::2]]
    if max(map(len, shown)) > PIECE_MAX_CHARS:
        shown = [_cut(piece) for piece in shown]
    shown[1::2] = [f"{MARK}{word}{MARK}" if mark else word for word, mark in zip(shown[1::2], marked, strict=True)]
    return ("" if start == origin else ELLIPSIS) + "".join(shown) + (ELLIPSIS if more else "")


def _cut(text: str) -> str:
    return text if len(text) <= PIECE_MAX_CHARS else text[:PIECE_MAX_CHARS] + ELLIPSIS
