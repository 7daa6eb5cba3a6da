"""Recall's snippets: a few words of an entry's body around its best hits, from a bounded window.

Neither engine's own snippet function is bounded. FTS5's ``snippet()`` scores a window at every
hit against every other hit, so its time grows with the square of the hits (two 64 KiB entries of
``zz zz …`` took 6 to 35 seconds); PostgreSQL's ``ts_headline()`` parses the whole body (about
50 ms for 64 KiB). Here the query words are searched for in the body (in C, a piece at a time, until
:data:`MAX_HITS` hits are found), only those hits are weighed, and only the words next to the chosen
ones are split out. A piece is searched with its letters and digits lowercased and every other
character a space, where a query word is a hit exactly where it stands between two spaces: a query
word costs one pass over the piece (:func:`_hits_in`), never one per place where it starts inside a
longer word, so the work per entry stays in the body's length whatever the body and the query hold.

Where in a long body its words are is known without reading it: :func:`word_map`, written with the
entry, tells which pieces of :data:`MAP_CHUNK_CHARS` characters hold which words (a Bloom filter
per piece), so the search reads only the pieces that may hold a query word: an entry at the body
limit whose only hit is near its end costs one piece, and a query word the entry lacks costs none.

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
import operator
import re
import sys
import unicodedata
import zlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # numpy is imported where a snippet of text other than ASCII is searched
    import numpy as np

#: Words in a snippet (what FTS5's snippet() was asked for).
SNIPPET_WORDS = 20
#: Hits weighed when choosing the window (later ones are still marked when they fall inside it).
MAX_HITS = 32
#: How much of a body is searched first; each further piece is twice as long as the one before (the
#: search stops after the piece that brings MAX_HITS hits).
FIRST_PIECE_CHARS = 4096
#: A piece is searched for at most this many query words one at a time (a pass of str.find each); for more,
#: its words are compared with the query words all at once (see _hits_in).
FIND_WORDS_MAX = 4
#: Text is composed (NFC) in parts of about this many characters, each cut before an ASCII one (see _composed).
COMPOSE_CHARS = 4096
#: Text holding non-ASCII characters is lowercased this much at a time (see _lowered).
LOWER_CHUNK_CHARS = 4096
#: The pieces a word map tells apart; a body of at most two has none (searching it costs little more).
MAP_CHUNK_CHARS = 4096
#: A word map's Bloom filters: bits per word of the piece holding the most words (at least, up to
#: 2**MAP_ROWS_LOG_MAX bits: a map is at most a quarter of its body), bits set per word. About 3% of
#: the pieces without a word are taken to hold it (and searched for nothing).
MAP_BITS_PER_WORD, MAP_HASHES, MAP_ROWS_LOG_MAX = 8, 3, 13  # (_map_rows sets MAP_HASHES bits)
_MAP_VERSION, _MAP_HEADER = 1, 4
#: Set in a word map's flags when the body is in Unicode's composed form (NFC).
_MAP_COMPOSED = 1
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
#: Any ASCII character (where text is cut to be composed in parts).
_ASCII_CHAR = re.compile(r"[\x00-\x7f]")
#: A word's first character (a search for _WORD would read the whole word).
_WORD_START = re.compile(r"[^\W_]")
#: Splits text into [text, word, text, word, …, text]; _ASCII_PIECES splits ASCII text alike, twice as fast.
_PIECES = re.compile(r"([^\W_]+)")
_ASCII_PIECES = re.compile(r"([A-Za-z0-9]+)")
#: What FTS5 takes for the start of a sentence: '.' or ':', white space, a word (which the match ends before).
_SENTENCE = re.compile(r"[.:][ \t\n\r]+(?=[^\W_])")
#: How many '.' or ':' starting no sentence _last_sentence passes before it reads the rest with the regex.
_SENTENCE_TRIES = 4
#: Tables for _ascii_translated: ASCII letters and digits to 'w', everything else to ' ' (_ASCII_MASK); ASCII
#: letters and digits lowercased, everything else to ' ' (_ASCII_WORDS, as _only_words does other text).
_ASCII_MASK = bytes(ord("w" if chr(code).isalnum() else " ") for code in range(128)) + b" " * 128
_ASCII_WORDS = bytes(ord(chr(code).lower() if chr(code).isalnum() else " ") for code in range(128)) + b" " * 128
#: Latin letters whose accents SQLite's tokenizer removes, in Unicode's blocks of accented latin letters.
_LATIN = (range(0xC0, 0x250), range(0x1E00, 0x1F00))
#: Combining accents (as in decomposed text, or 'İ' lowercased), which SQLite's tokenizer drops from words.
_ACCENTS = range(0x300, 0x370)


class _Hits(NamedTuple):
    """Hits in body order: where each starts, and the query word it is."""

    starts: list[int]
    terms: list[str]


_NO_HITS = _Hits([], [])


def snippet(body: str, terms: Sequence[str], body_map: bytes | None = None) -> str:
    """About :data:`SNIPPET_WORDS` words of ``body`` around its best hits of ``terms``, hits in ``**``.
    ``terms``: the query's words (a term holding other characters than letters and digits stands for the
    words in it). ``body_map``: the body's :func:`word_map` (None: the body is searched from its start)."""
    wanted = _wanted(tuple(terms))
    mapped = _read_map(body_map, len(body))
    hits = _hits(body, wanted, mapped)
    if not hits.starts and not body.isascii() and not (mapped is not None and mapped.composed):
        # Accents written as separate characters split words: compose them, as most text is written, and
        # search the whole body again (a map tells the words of the body as written): two more passes in C.
        composed = _composed(body)
        if composed != body:
            body, hits = composed, _hits(composed, wanted)
    first_word = _WORD_START.search(body)
    if first_word is None:
        return _cut(body)
    origin = first_word.start()
    anchor, back = _window(body, hits, origin) if hits.starts else (origin, None)
    # An ASCII body searched whole without a hit holds no query word: nothing to mark. (Where a word map ruled
    # pieces out, the words shown are still compared, whatever the map.)
    searched_whole = mapped is None and body.isascii()
    return _render(body, anchor, back, origin, frozenset() if searched_whole and not hits.starts else wanted)


@functools.lru_cache(maxsize=256)
def _wanted(terms: tuple[str, ...]) -> frozenset[str]:
    """The words the query's terms stand for, as the index compares them (one query's terms serve every entry
    it finds)."""
    return frozenset(word for term in terms for word in _WORD.findall(fold(term)))


def _composed(text: str) -> str:
    """``text`` in Unicode's composed form (NFC), normalized only where it is not already: composing text
    decomposes all of it first, so the text is cut before an ASCII character every COMPOSE_CHARS characters
    or so, and each part passes Unicode's quick check unchanged or is composed on its own. That gives the
    same text: an ASCII character composes with nothing before it, and no accent reorders or composes
    across it. (A hostile body of 32,000 composed letters and one decomposed accent costs one part.)"""
    cuts, at = [0], COMPOSE_CHARS
    while at < len(text) and (found := _ASCII_CHAR.search(text, at)) is not None:
        cuts.append(found.start())
        at = found.start() + COMPOSE_CHARS
    cuts.append(len(text))
    return "".join(unicodedata.normalize("NFC", text[start:end]) for start, end in itertools.pairwise(cuts))


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


def _hits(body: str, wanted: AbstractSet[str], mapped: _Map | None = None) -> _Hits:
    """The first MAX_HITS hits of the query words in ``body``, whole words only, in body order;
    ``mapped``: the body's word map, which rules out the parts that hold none."""
    if not wanted:
        return _NO_HITS
    hits = _hits_in(body, wanted, None if mapped is None else mapped.pieces(wanted), accented=False)
    if not hits.starts and not body.isascii():
        # The body may hold the words accented where the query did not ('Müller' for 'muller').
        hits = _hits_in(body, wanted, None if mapped is None else mapped.pieces(wanted), accented=True)
    return hits


def _hits_in(body: str, wanted: AbstractSet[str], pieces: Iterable[tuple[tuple[int, int], Collection[str]]] | None,
             *, accented: bool) -> _Hits:
    """The first MAX_HITS hits in body order. The body is searched a piece at a time (``pieces``, with the
    words each may hold, or see :func:`_pieces`), and the search stops at the end of the piece that brings
    MAX_HITS hits (later pieces could only add later ones).

    A piece is searched as :func:`_only_words` gives it: lowercased, every character that is not a letter
    or digit a space, between two spaces. A query word is a hit exactly where it stands between two spaces,
    so no match inside a longer word is ever made and rejected, and Python handles only the hits kept: a
    piece costs one pass in C per query word it may hold (``str.find``), or, for more than
    FIND_WORDS_MAX of them, one pass over its words (:func:`_word_hits`), whatever the words and the piece
    hold (a run of 32,000 ``à`` against a query word of 994 ``a`` costs one pass, not one per ``à``).
    ``accented``: the second search, for accented forms, with the piece's accented latin letters folded to
    their base letters; a piece of ASCII text cannot hold one (nor, since the first search found nothing,
    a plain one), so it is skipped."""
    hits: list[tuple[int, str]] = []  # (offset, query word)
    reach = max(map(len, wanted)) + 1  # a word starting in a piece is seen whole, with the character after it
    if pieces is None:
        pieces = zip(_pieces(len(body)), itertools.repeat(wanted))
    for (offset, end), may_hold in pieces:
        base = offset - 1 if offset else 0  # the character before the piece, which tells whether a word starts with it
        chunk, lead, stop = body[base:end + reach], offset - base, end - base  # a hit starts before chunk[stop]
        terms = may_hold
        if chunk.isascii():
            if accented:
                continue
            words = _ascii_translated(chunk, _ASCII_WORDS)
        else:
            lowered = _lowered(chunk)
            if not accented:  # a query word not even inside a word of the piece costs a find, not the numpy pass
                terms = [term for term in terms if lowered.find(term, lead, stop - 1 + len(term)) >= 0]
                if not terms:
                    continue
            words = _only_words(lowered, folded=accented)
        # A space before the body's start and after its end, where words end too: a hit at spaced[at] (the
        # space before the word) starts at chunk[at], and must start in the piece, from chunk[lead] to stop.
        spaced, need = f" {words} ", MAX_HITS - len(hits)
        if len(terms) > FIND_WORDS_MAX:
            hits += [(base + at, term) for at, term in _word_hits(spaced, terms, lead, stop, need)]
        else:
            found: list[tuple[int, str]] = []
            for term in terms:
                needle, at, kept = f" {term} ", lead, 0
                while kept < need and (at := spaced.find(needle, at, stop + len(needle) - 1)) >= 0:
                    found.append((base + at, term))
                    at, kept = at + len(needle) - 1, kept + 1  # the space after the word may be the next one's
            found.sort()
            hits += found[:need]
        if len(hits) >= MAX_HITS:
            break
    return _Hits([start for start, _ in hits], [term for _, term in hits])


def _word_hits(spaced: str, terms: Collection[str], lead: int, stop: int, need: int) -> list[tuple[int, str]]:
    """The first ``need`` hits of ``terms`` in ``spaced`` (a piece as :func:`_hits_in` searches it) that start
    from ``lead`` and before ``stop``, each as (where its word starts in the piece, the query word): its
    words are split out and compared with all the query words at once, with each word's offset counted
    alongside, all in C (Python handles only the words that are query words)."""
    words = spaced.split(" ")
    present = set(terms).intersection(words)
    if not present:
        return []
    # Where each word starts in the piece (one less than in spaced): a space past the end of the one before.
    starts = itertools.accumulate(map(operator.add, map(len, words), itertools.repeat(1)), initial=-1)
    found: list[tuple[int, str]] = []
    pairs = zip(starts, words, strict=False)  # (starts has one more: where a word after the last would start)
    for start, word in itertools.compress(pairs, map(present.__contains__, words)):
        if start >= stop:
            break
        if start >= lead:
            found.append((start, word))
            if len(found) == need:
                break
    return found


def _pieces(length: int, first: int = FIRST_PIECE_CHARS) -> Iterator[tuple[int, int]]:
    """Where text of ``length`` characters is searched, piece by piece: ``first`` characters, then
    pieces twice as long as the one before (an entry whose words are near its start costs a small
    piece; one whose only hit is near its end costs a few passes in C, not one per 4 KB)."""
    offset, size = 0, first
    while offset < length:
        yield offset, min(offset + size, length)
        offset, size = offset + size, 2 * size


def _ascii_translated(text: str, table: bytes) -> str:
    """ASCII ``text`` with each character replaced as ``table`` says: as bytes, one pass in C (str.translate
    looks each character up in a dict, twice as slow)."""
    return text.encode("ascii").translate(table).decode("ascii")


def _lowered(text: str) -> str:
    """``text`` lowercased one character for one. Lowercasing a string that holds any non-ASCII
    character is ten times slower, so such text is lowercased in LOWER_CHUNK_CHARS pieces (a piece
    of ASCII characters is an ASCII string again); 'İ' lowercases to two characters, so it becomes 'i'."""
    if text.isascii():
        return text.lower()
    if len(text) <= LOWER_CHUNK_CHARS:
        return text.replace("\u0130", "i").lower()
    return "".join(map(_lowered, (text[at:at + LOWER_CHUNK_CHARS] for at in range(0, len(text), LOWER_CHUNK_CHARS))))


def _only_words(lowered: str, *, folded: bool) -> str:
    """Lowercased text (:func:`_lowered`) with every character that is not a letter or digit (that the
    regex ``[^\\W_]`` does not match) as a space, and ``folded``: each accented latin letter as its base
    letter (``à`` as ``a``, as :func:`fold` folds it). One character for one, so that offsets are the
    text's own. In C, as an array of code points in numpy: ``str.translate`` looks each character of text
    other than ASCII up in a dict, ten times slower (ASCII text gets _ASCII_WORDS, in _hits_in)."""
    import numpy as np

    codes = np.frombuffer(lowered.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    kinds, folding = _code_kinds(), _folding()
    kind = kinds[codes]
    if not kind.all():  # code points not met before: looked at once per process
        for code in np.unique(codes[kind == _UNKNOWN]).tolist():
            kinds[code] = _LETTER if chr(code).isalnum() else _OTHER
        kind = kinds[codes]
    only = np.where(kind == _LETTER, codes, np.uint32(ord(" ")))
    if folded:
        only = np.where(only < len(folding), folding[np.minimum(only, len(folding) - 1)], only)
    return only.tobytes().decode("utf-32-le", "surrogatepass")


#: What _code_kinds says of a code point: not met yet, a letter or digit, anything else.
_UNKNOWN, _LETTER, _OTHER = 0, 1, 2


@functools.cache
def _code_kinds() -> np.ndarray[Any, np.dtype[np.int8]]:
    """Each code point's kind (_UNKNOWN, _LETTER, _OTHER), filled in as :func:`_only_words` meets them: a
    process meets few of the 1,114,112, and looking each up costs more than the table's 1.1 MB."""
    import numpy as np

    return np.zeros(sys.maxunicode + 1, dtype=np.int8)


@functools.cache
def _folding() -> np.ndarray[Any, np.dtype[np.uint32]]:
    """The code points up to the last accented latin letter, each accented latin letter replaced by its base
    letter's (``à`` by ``a``), for :func:`_only_words`."""
    import numpy as np

    table = np.arange(max(block.stop for block in _LATIN), dtype=np.uint32)
    for base, letters in _accented().items():
        table[[ord(letter) for letter in letters]] = ord(base)
    return table


# The word map ----------------------------------------------------------------------------------


def word_map(body: str) -> bytes | None:
    """Which words each piece of MAP_CHUNK_CHARS characters of ``body`` holds, for :func:`snippet`
    (None: a body of at most two pieces). A word belongs to the piece it starts in, as the search
    assigns it, and is recorded as the search compares it (:func:`fold`), so a piece the map rules
    out holds no hit, plain or accented.

    Each piece has a Bloom filter of 2**rows_log bits (MAP_HASHES bits set per word), stored sliced
    by groups of eight pieces: byte r of a group holds bit r of its pieces' filters (piece i of the
    group in bit i), so a word's pieces are the AND of MAP_HASHES bytes per group. Header: version,
    log2 of the piece size, rows_log, flags (_MAP_COMPOSED)."""
    if len(body) <= 2 * MAP_CHUNK_CHARS:
        return None
    lowered = _lowered(body)
    chunks = [_words_starting_in(lowered, start, start + MAP_CHUNK_CHARS)
              for start in range(0, len(body), MAP_CHUNK_CHARS)]
    rows_log = min(max(6, (MAP_BITS_PER_WORD * max(map(len, chunks)) - 1).bit_length()), MAP_ROWS_LOG_MAX)
    rows = {word: _map_rows(word, rows_log) for word in set().union(*chunks)}
    flags = _MAP_COMPOSED if body.isascii() or unicodedata.is_normalized("NFC", body) else 0
    table = bytearray([_MAP_VERSION, MAP_CHUNK_CHARS.bit_length() - 1, rows_log, flags])
    for group in (chunks[start:start + 8] for start in range(0, len(chunks), 8)):
        sliced = 0
        for number, chunk in enumerate(group):
            bits = bytearray(1 << rows_log)  # one byte per bit of the filter, 0 or 1
            for row in {row for word in chunk for row in rows[word]}:
                bits[row] = 1
            sliced |= int.from_bytes(bits, "little") << number  # each byte's bit `number`
        table += sliced.to_bytes(1 << rows_log, "little")
    return bytes(table)


def _words_starting_in(lowered: str, start: int, end: int) -> set[str]:
    """The words (folded) that start in lowered[start:end], each whole."""
    words = _WORD.findall(lowered, start, end)
    if words and end < len(lowered) and lowered[end - 1].isalnum() and lowered[end].isalnum():
        tail = _WORD.match(lowered, end)
        assert tail is not None
        words[-1] += tail.group()  # the last word runs on into the next piece
    if words and start and lowered[start - 1].isalnum() and lowered[start].isalnum():
        del words[0]  # the first one began in the piece before
    return {word if word.isascii() else fold(word) for word in set(words)}


def _map_rows(word: str, rows_log: int) -> tuple[int, int, int]:
    """The MAP_HASHES bits of a filter of 2**rows_log bits that ``word`` sets: double hashing with
    CRC-32 of its UTF-8 bytes, forwards and backwards (two unrelated linear hashes)."""
    data = word.encode("utf-8", "surrogatepass")
    first, second, mask = zlib.crc32(data), zlib.crc32(data[::-1]) | 1, (1 << rows_log) - 1
    return first & mask, (first + second) & mask, (first + 2 * second) & mask


_term_rows = functools.lru_cache(maxsize=1024)(_map_rows)  # a query's words, looked up in map after map


class _Map(NamedTuple):
    table: bytes
    chunk: int  # characters per piece
    rows_log: int
    chunks: int  # pieces
    composed: bool

    def pieces(self, wanted: AbstractSet[str]) -> Iterator[tuple[tuple[int, int], Collection[str]]]:
        """The parts of the body that may hold one of ``wanted``, in body order, each with the words
        it may hold: a run of such pieces is searched as :func:`_pieces` searches a body, in pieces
        twice as long as the one before."""
        table, size = self.table, 1 << self.rows_log
        masks: dict[str, int] = {}  # the pieces each word may be in, piece i in bit i
        for term in wanted:
            first, second, third = _term_rows(term, self.rows_log)
            mask = 0
            for group, base in enumerate(range(_MAP_HEADER, len(table), size)):
                mask |= (table[base + first] & table[base + second] & table[base + third]) << 8 * group
            masks[term] = mask
        found = functools.reduce(int.__or__, masks.values(), 0)
        number = 0
        while found >> number:
            rest = found >> number
            number += (rest & -rest).bit_length() - 1  # the pieces ruled out
            rest = found >> number
            run = (rest ^ (rest + 1)).bit_length() - 1  # the pieces that follow, each maybe holding a word
            for start, end in _pieces(run * self.chunk, self.chunk):
                first, last = number + start // self.chunk, number + -(-end // self.chunk)
                span = (1 << last) - (1 << first)
                terms = wanted if len(masks) == 1 else [term for term, mask in masks.items() if mask & span]
                yield (number * self.chunk + start, number * self.chunk + end), terms
            number += run


def _read_map(table: bytes | None, length: int) -> _Map | None:
    """The word map ``table`` of a body of ``length`` characters, or None if it is not one (none
    was written, or a later version): the body is then searched from its start."""
    if not table or len(table) < _MAP_HEADER or table[0] != _MAP_VERSION:
        return None
    chunk, rows_log, flags = 1 << table[1], table[2], table[3]
    chunks = -(-length // chunk)
    if chunks < 2 or len(table) != _MAP_HEADER + (1 << rows_log) * -(-chunks // 8):
        return None
    return _Map(table, chunk, rows_log, chunks, bool(flags & _MAP_COMPOSED))


# Choosing the window ---------------------------------------------------------------------------


def _window(body: str, hits: _Hits, origin: int) -> tuple[int, int | None]:
    """Where the window is: the offset of a word, and how many words before it the window starts
    (a centred window, which moves back from the body's end as FTS5's does), or None (a window from
    a sentence start, which starts at that word whatever follows).

    FTS5's scoring: a window scores 1000 for each distinct query word in it and 1 for each further
    hit. Each hit proposes the window centred on it and the hits that follow it within a window,
    and the window from the start of its sentence with 100 more (120 from the body's start); the
    first of the best wins (so a window no other can beat ends the search).
    """
    starts, terms = hits
    positions = _positions(body, starts)

    def score(begin: int) -> int:
        """The score of the window from word position ``begin``."""
        first = bisect.bisect_left(positions, begin)
        end = bisect.bisect_left(positions, begin + SNIPPET_WORDS, first)
        return 999 * len(set(terms[first:end])) + end - first

    unbeatable = 999 * len(set(terms)) + SNIPPET_WORDS + 120
    best_score, best_start, best_back = -1, origin, None
    counts: dict[str, int] = {}  # the query words of the hits from the current one to the last
    last = -1
    sentence: tuple[int, int] | None = None  # offset and word position of the sentence the hit is in
    sentence_scores: dict[int, int] = {}
    # Like FTS5, sentence starts count only in a body longer than one window.
    one_window = _words_between(body, origin, len(body)) < SNIPPET_WORDS
    for number, (start, term) in enumerate(zip(starts, terms, strict=True)):
        if best_score == unbeatable:
            break
        end = bisect.bisect_left(positions, positions[number] + SNIPPET_WORDS, last + 1)
        for index in range(last + 1, end):  # the hits that join the window centred on this one
            counts[terms[index]] = counts.get(terms[index], 0) + 1
        last = end - 1
        centred = 999 * len(counts) + last - number + 1
        if centred > best_score:
            spare = SNIPPET_WORDS - (positions[last] - positions[number] + 1)
            best_score, best_start, best_back = centred, start, spare // 2
        counts[term] -= 1
        if not counts[term]:
            del counts[term]
        if one_window:
            continue
        sentence = _sentence_of(body, starts, positions, number, origin, sentence)
        if sentence is None or sentence[0] == start or positions[number] - sentence[1] >= SNIPPET_WORDS:
            continue
        if sentence[0] not in sentence_scores:
            sentence_scores[sentence[0]] = score(sentence[1]) + (120 if sentence[0] == origin else 100)
        if sentence_scores[sentence[0]] > best_score:
            best_score, best_start, best_back = sentence_scores[sentence[0]], sentence[0], None
    return best_start, best_back


def _positions(body: str, starts: list[int]) -> list[int]:
    """Word positions of the hits starting at ``starts``, counted from the first; a gap of a whole
    window or more counts as one window."""
    base = starts[0]
    span = body[base:starts[-1]]
    if not span.isascii() or len(span) > POSITIONS_SPAN_CHARS:
        gaps = [_words_between(body, previous, start) for previous, start in itertools.pairwise(starts)]
    else:  # one pass in C over the span, then a count per gap (in the mask a word is a run of 'w')
        count = _ascii_translated(span, _ASCII_MASK).count
        gaps = [SNIPPET_WORDS if start - previous > WINDOW_MAX_CHARS
                or (gap := count(" w", previous - base, start - base) + 1) >= SNIPPET_WORDS else gap
                for previous, start in itertools.pairwise(starts)]
    return [0, *itertools.accumulate(gaps)]


def _sentence_of(body: str, starts: list[int], positions: list[int], number: int, origin: int,
                 previous: tuple[int, int] | None) -> tuple[int, int] | None:
    """The start of the sentence hit ``number`` is in (offset, word position), or None if it is
    further back than LOOKBACK_CHARS. Only the text since the previous hit is searched; a sentence
    that began before that hit is the previous hit's sentence, ``previous``."""
    at = starts[number]
    since = starts[number - 1] + 1 if number else origin
    start = max(since, at - LOOKBACK_CHARS)
    found = _last_sentence(body, start, at + 1)
    if found is not None:
        offset = found
    elif start > since:
        return None
    elif number:
        return previous
    else:
        offset = origin
    return offset, positions[number] - _words_between(body, offset, at)


def _last_sentence(body: str, start: int, end: int) -> int | None:
    """Where the last sentence that starts in body[start:end] begins (its first word), or None: the last match
    of _SENTENCE, looked for from the end a '.' or ':' at a time (a few finds in C; the regex would read the
    whole span). After _SENTENCE_TRIES that start no sentence, the regex reads what is left."""
    stop = end
    for _ in range(_SENTENCE_TRIES):
        mark = max(body.rfind(".", start, stop), body.rfind(":", start, stop))
        if mark < 0:
            return None
        if (match := _SENTENCE.match(body, mark, end)) is not None:
            return match.end()
        stop = mark  # a match before this one ends before it ('.' and ':' are no white space, nor a word)
    found = None
    for found in _SENTENCE.finditer(body, start, stop):  # noqa: B007 (the last one is wanted)
        pass
    return None if found is None else found.end()


def _words_between(body: str, start: int, end: int) -> int:
    """The words from the word at offset ``start`` up to ``end``, or SNIPPET_WORDS if they cannot
    share a window."""
    if end - start > WINDOW_MAX_CHARS:
        return SNIPPET_WORDS
    text = body[start:end]
    if not text.isascii():
        return min(len(_WORD.findall(text)), SNIPPET_WORDS)
    # In the mask a word is a run of 'w': counting the runs is one pass in C.
    return min(_ascii_translated(text, _ASCII_MASK).count(" w") + (1 if text else 0), SNIPPET_WORDS)


# Rendering -------------------------------------------------------------------------------------


def _render(body: str, anchor: int, back: int | None, origin: int, wanted: AbstractSet[str]) -> str:
    """SNIPPET_WORDS words from ``back`` words before the word at offset ``anchor``, query words
    marked; a centred window (``back`` not None) that would run past the body's end starts earlier."""
    lookback = 0 if back is None else min(anchor, LOOKBACK_CHARS)
    split = _ASCII_PIECES.split if body.isascii() else _PIECES.split  # the same pieces of ASCII text, sooner
    before = split(body[anchor - lookback:anchor]) if lookback else [""]  # [text, word, …, word, text]
    if lookback < anchor and body[anchor - lookback - 1].isalnum() and len(before) > 1 and not before[0]:
        before[:3] = [before[0] + before[1] + before[2]]  # a word cut by the lookback is only text
    size = FORWARD_CHARS
    while True:  # the anchor's word and SNIPPET_WORDS more (no further: the rest stays one piece), or the body's end
        after = split(body[anchor:anchor + size], SNIPPET_WORDS + 1)
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
    marked = _marked(shown[1::2], wanted) if wanted else ()
    if max(map(len, shown)) > PIECE_MAX_CHARS:
        shown = [_cut(piece) for piece in shown]
    for at in itertools.compress(range(1, len(shown), 2), marked):
        shown[at] = f"{MARK}{shown[at]}{MARK}"
    return ("" if start == origin else ELLIPSIS) + "".join(shown) + (ELLIPSIS if more else "")


def _marked(words: list[str], wanted: AbstractSet[str]) -> list[bool]:
    """Which of ``words`` are query words. A word folds to as many characters as it has (fold drops only
    combining accents, which no word holds), so one longer than every query word is none of them: a long word
    is not folded a character at a time."""
    if all(map(str.isascii, words)):
        return list(map(wanted.__contains__, map(str.lower, words)))
    longest = max(map(len, wanted))
    return [len(word) <= longest and (word.lower() if word.isascii() else fold(word)) in wanted for word in words]


def _cut(text: str) -> str:
    return text if len(text) <= PIECE_MAX_CHARS else text[:PIECE_MAX_CHARS] + ELLIPSIS
