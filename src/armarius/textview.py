"""What you see is what you sign: text shown to a reviewer with nothing hidden.

Control, format (zero-width, bidirectional), separator and other invisible characters, letters
that show as blank space (the Hangul fillers), unusual spaces, compatibility forms (fullwidth
letters, ligatures) and letters of another script that pass for Latin are replaced by a visible
marker naming the code point, e.g. ``⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧``. Line feeds stay line
feeds; a carriage return and a tab are marked too.

A run of one marked character, :data:`RUN_MIN` (four) or more in a row, is one marker that also says how
many there are: ``⟦U+200B ZERO WIDTH SPACE ×21000⟧`` is exactly 21,000 zero-width spaces (a shorter run is
that many markers). So a text of long runs of a hidden character shows every one of them without a marker
each, and no page of them grows to megabytes. Only a run of the same character is counted: a run of
different ones is a marker for each (or for each run of one of them), a marker never stands for two
characters. Whatever the count, a fingerprint shown beside a reveal is of the text itself, never of its
reveal. :func:`reveal_pieces` gives the reveal in pieces, each marker apart from the text's own stretches
(the web's markers are highlighted from it, so that a marker typed into the text stays plain text), and
:func:`marked_characters` how many characters it marks.

Letters of another script are marked (:func:`_lookalike_positions`):

- in a word (a run of ``\\w``) that mixes them with Latin letters: ``p⟦U+0430 CYRILLIC SMALL LETTER A⟧ypal``;
- in a word made only of letters that pass for Latin ones (:data:`LATIN_LOOKALIKES`, e.g. "pay" spelt
  with the Cyrillic U+0440, U+0430, U+0443) where it is read as Latin:

  - inside an address: a whitespace-separated token with Latin letters whose words are joined by
    ``.``, ``:``, ``/``, ``@`` or ``\\`` ("apple" in Cyrillic letters in ``https://apple.com/login``);
  - on a line whose Latin letters outnumber its letters of other scripts outside mixed and look-alike
    words (a line with no other letters is read as the whole text is). A one-letter word (the Russian "and", "with",
    "at": U+0430, U+0441, U+0443) is left alone on a line that has other letters of its script that
    pass for no Latin one.

So Russian or Greek prose, with the Latin names and addresses it quotes, stays as it is.
"""  # noqa: RUF002 (the multiplication sign of a run's marker)

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field

_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Mn", "Me"}
#: Characters that show as blank space although Unicode classes them as letters or symbols, so that no
#: category marks them: the Hangul fillers (U+115F, U+1160, U+3164, U+FFA0, default-ignorable) and the
#: blank braille pattern (U+2800).
BLANK_LOOKALIKES = frozenset("\u115f\u1160\u3164\uffa0\u2800")

#: Letters of other scripts that look like Latin letters: each letter outside the Latin script that
#: Unicode's confusables data (UTS #39, confusables.txt) maps to ASCII letters, less those NFKC changes
#: (marked anyway), plus the Cyrillic U+043F, U+044A and U+0517 that browsers' IDN spoof checks add.
#: The comment above each group says what its letters read as, in code point order (``*``: the
#: browsers' additions). A letter with accents counts when its base letter does (U+0451, U+03AC).
LATIN_LOOKALIKES = frozenset(
    # Cyrillic: S l J A B E K M H O P C T Y X bl b lO a r e o n* p c y x b* s i j w V v Y y h e l i AE ae
    #           d G p* q W w i OO oo
    "\u0405\u0406\u0408\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0423\u0425\u042b\u042c\u042e"
    "\u0430\u0433\u0435\u043e\u043f\u0440\u0441\u0443\u0445\u044a\u0455\u0456\u0458\u0461\u0474\u0475\u04ae\u04af"
    "\u04bb\u04bd\u04c0\u04cf\u04d4\u04d5\u0501\u050c\u0517\u051b\u051c\u051d\ua647\ua698\ua699"
    # Greek: J A B E Z H l K M N O P T Y X a y i v o p o u F j M r
    "\u037f\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7\u03b1\u03b3\u03b9"
    "\u03bd\u03bf\u03c1\u03c3\u03c5\u03dc\u03f3\u03fa\u1d26"
    # Armenian: U S O w q q h n n u g f o
    "\u054d\u054f\u0555\u0561\u0563\u0566\u0570\u0578\u057c\u057d\u0581\u0584\u0585"
    # Cherokee: D R T i Y A J E W M H Y G h Z b R W S V S L C P K d G B i r w z v s c
    "\u13a0\u13a1\u13a2\u13a5\u13a9\u13aa\u13ab\u13ac\u13b3\u13b7\u13bb\u13bd\u13c0\u13c2\u13c3\u13cf\u13d2\u13d4"
    "\u13d5\u13d9\u13da\u13de\u13df\u13e2\u13e6\u13e7\u13f3\u13f4\uab75\uab81\uab83\uab93\uaba9\uabaa\uabaf"
    # Coptic: r H l K M N O o P p C c T Y X L
    "\u2c85\u2c8e\u2c92\u2c94\u2c98\u2c9a\u2c9e\u2c9f\u2ca2\u2ca3\u2ca4\u2ca5\u2ca6\u2ca8\u2cac\u2cd0"
    # Lisu: B P d D T G K J C Z F M N L S R V H W X Y A E l O U
    "\ua4d0\ua4d1\ua4d2\ua4d3\ua4d4\ua4d6\ua4d7\ua4d9\ua4da\ua4dc\ua4dd\ua4df\ua4e0\ua4e1\ua4e2\ua4e3\ua4e6\ua4e7"
    "\ua4ea\ua4eb\ua4ec\ua4ee\ua4f0\ua4f2\ua4f3\ua4f4"
    # Canadian syllabics: V U P d b J L x H x R b F A D D M B
    "\u142f\u144c\u146d\u146f\u1472\u148d\u14aa\u1541\u157c\u157d\u1587\u15af\u15b4\u15c5\u15de\u15ea\u15f0\u15f7"
    # Tifinagh: V E l O Q X
    "\u2d38\u2d39\u2d4f\u2d54\u2d55\u2d5d"
    # Runic: X l K M
    "\u16b7\u16c1\u16d5\u16d6"
    # Georgian: y o
    "\u10e7\u10ff"
    # Ethiopic: U O
    "\u1200\u12d0"
    # Malayalam: o
    "\u0d20"
    # Myanmar: o
    "\u101d"
    # Oriya: O
    "\u0b20"
    # Bamum: V
    "\ua6df"
    # Deseret: O C L S o c s
    "\U00010404\U00010415\U0001041b\U00010420\U0001042c\U0001043d\U00010448"
    # Osage: R O U o u
    "\U000104b4\U000104c2\U000104ce\U000104ea\U000104f6"
    # Carian: A B C F O M T Y X H
    "\U000102a0\U000102a1\U000102a2\U000102a5\U000102ab\U000102b0\U000102b1\U000102b2\U000102b4\U000102cf"
    # Lycian: B E F l X O P S T
    "\U00010282\U00010286\U00010287\U0001028a\U00010290\U00010292\U00010295\U00010296\U00010297"
    # Old Italic: B C l M T X
    "\U00010301\U00010302\U00010309\U00010311\U00010315\U00010317"
    # Elbasan: N O K C V F L X
    "\U00010513\U00010516\U00010518\U0001051c\U0001051d\U00010525\U00010526\U00010527"
    # Miao: V T L l R S A U Y
    "\U00016f08\U00016f0a\U00016f16\U00016f28\U00016f35\U00016f3a\U00016f40\U00016f42\U00016f43"
    # Warang Citi: V F L Y E Z E L O U T v s F i z o o u y
    "\U000118a0\U000118a2\U000118a3\U000118a4\U000118a6\U000118a9\U000118ae\U000118b2\U000118b5\U000118b8\U000118bc"
    "\U000118c0\U000118c1\U000118c2\U000118c3\U000118c4\U000118c8\U000118d7\U000118d8\U000118dc"
    # Ahom: rn v w w w
    "\U00011700\U00011706\U0001170a\U0001170e\U0001170f"
)

_CONTROL_NAMES = {"\t": "CHARACTER TABULATION", "\r": "CARRIAGE RETURN", "\x00": "NULL", "\x1b": "ESCAPE",
                  "\x0b": "LINE TABULATION", "\x0c": "FORM FEED", "\x7f": "DELETE"}


@functools.lru_cache(maxsize=8192)
def _marker(char: str) -> str:
    name = _CONTROL_NAMES.get(char) or unicodedata.name(char, "CONTROL" if unicodedata.category(char) == "Cc"
                                                          else "UNASSIGNED")
    return f"⟦U+{ord(char):04X} {name}⟧"


@functools.lru_cache(maxsize=8192)
def _script(char: str) -> str:
    """The script word of a letter's Unicode name (LATIN, CYRILLIC, GREEK, …)."""
    return unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]


@functools.lru_cache(maxsize=8192)
def _looks_latin(char: str) -> bool:
    """Whether a letter of another script passes for a Latin one (with its accents, if it has any)."""
    return char in LATIN_LOOKALIKES or unicodedata.normalize("NFD", char)[0] in LATIN_LOOKALIKES


@functools.lru_cache(maxsize=8192)
def _needs_marking(char: str) -> bool:
    if char == "\n":
        return False
    if char == " ":
        return False
    category = unicodedata.category(char)
    if category in _INVISIBLE_CATEGORIES or category == "Zs" or char in BLANK_LOOKALIKES:
        return True
    # Fullwidth letters, ligatures, superscripts: they render like other characters.
    return unicodedata.normalize("NFKC", char) != char


#: A run of one marked character this long or longer (four of a kind in a row) is shown as one marker that
#: says how many there are (see the module's description); a shorter one as that many markers.
RUN_MIN = 4

#: The line that explains the markers to whoever reads a revealed text.
REVEAL_NOTE = ("Invisible, control, bidirectional and look-alike characters are shown as ⟦U+XXXX NAME⟧, "
               "a run of one of them as ⟦U+XXXX NAME \u00d7COUNT⟧.")

#: What :func:`_spans` reads a text through: each character it leaves as it is becomes this letter (never
#: marked), each character to mark stays itself; then a match is a stretch left as it is or a run of one
#: character to mark.
_PLAIN = "a"
_SPANS = re.compile(f"{_PLAIN}+|(.)\\1*", re.DOTALL)


def _run_marker(char: str, count: int) -> str:
    """The marker of ``count`` (at least :data:`RUN_MIN`) of ``char`` in a row."""
    return f"{_marker(char)[:-1]} \u00d7{count}⟧"  # a multiplication sign


def reveal(text: str) -> str:
    """The text with every character a reader could miss or mistake made visible."""
    pieces = reveal_pieces(text)
    if len(pieces) == 1 and not pieces[0][1]:
        return text
    return "".join(shown for shown, _ in pieces)


def reveal_pieces(text: str) -> list[tuple[str, bool]]:
    """The reveal of ``text`` in order, in pieces: ``(stretch, False)``, a stretch of the text as it is
    (line feeds included), or ``(marker, True)``, the marker of one character or of a run of one character.
    Joined, they are :func:`reveal`'s text; a marker the text itself holds is in a stretch, never a marker."""
    pieces: list[tuple[str, bool]] = []
    for start, end, marked in _spans(text):
        if not marked:
            pieces.append((text[start:end], False))
        elif end - start >= RUN_MIN:
            pieces.append((_run_marker(text[start], end - start), True))
        else:
            pieces += [(_marker(text[start]), True)] * (end - start)
    return pieces


def marked_characters(text: str) -> int:
    """How many characters of ``text`` the reveal marks (a run shown as one marker counts each of them)."""
    return sum(end - start for start, end, marked in _spans(text) if marked)


def _spans(text: str) -> list[tuple[int, int, bool]]:
    """The text cut, in order, into stretches shown as they are (``False``) and maximal runs of one character
    to mark (``True``): ``(start, end, marked)``."""
    if not text:
        return []
    chars = set(text)
    kept = {ord(char): _PLAIN for char in chars if not _needs_marking(char)}
    confusable = sorted(_lookalike_positions(text))
    if not confusable and len(kept) == len(chars):
        return [(0, len(text), False)]
    classes = text.translate(kept)
    if confusable:  # a look-alike letter to mark stays itself; the same letter elsewhere is left as it is
        parts: list[str] = []
        start = 0
        for index in confusable:
            parts += (classes[start:index], text[index])
            start = index + 1
        parts.append(classes[start:])
        classes = "".join(parts)
    return [(found.start(), found.end(), found.group(1) is not None) for found in _SPANS.finditer(classes)]


# The look-alike rules read a text through one class character per character (str.translate keeps the
# indices): L a Latin letter, A a letter of another script that passes for a Latin one, O any other
# letter, d any other word character (digit, underscore), "." what joins the parts of an address
# (. : / @ \\), a space for whitespace but the line feed, which stays itself, and - anything else.
#: A word (a run of word characters, as ``\w+``) that mixes a Latin letter with a letter of another script,
#: or whose letters all pass for Latin and none is Latin.
_MARKED_WORD = re.compile(r"(?<![LAOd])(?:(?P<mixed>(?=[LAOd]*L)(?=[LAOd]*[AO])[LAOd]+)|(?=d*A)[Ad]+(?![LAOd]))")
#: A whitespace-separated token is an address (URL, host, e-mail, path) when two of its words are joined so.
_ADDRESS_JOINT = re.compile(r"[LAOd]\.+[LAOd]")


@functools.lru_cache(maxsize=8192)
def _class(char: str) -> str:
    if char.isalpha():
        if _script(char) == "LATIN":
            return "L"
        return "A" if _looks_latin(char) else "O"
    if char.isalnum() or char == "_":
        return "d"
    if char == "\n":
        return "\n"
    if char.isspace():
        return " "
    return "." if char in ".:/@\\" else "-"


def _lookalike_positions(text: str) -> set[int]:
    """The letters of other scripts a reader would take for Latin ones (see the module's description)."""
    if text.isascii():
        return set()
    classes = text.translate({ord(char): _class(char) for char in set(text)})
    if "L" not in classes:  # nothing is read as Latin
        return set()
    positions: set[int] = set()
    lines = _read_words(classes, positions)
    latin_text = classes.count("L") > classes.count("A") + classes.count("O") + sum(line.other for line in lines)
    written_in_text: set[str] | None = None
    for line in lines:
        if not line.words:
            continue
        if line.latin or line.letters(classes):
            if line.latin <= line.letters(classes):
                continue
            written = _scripts_written(text, classes, line)
        else:  # a line with no letters but its look-alike words is read as the whole text is
            if not latin_text:
                continue
            if written_in_text is None:
                written_in_text = _scripts_written(text, classes, _Line(0, len(text), 0, words=[[0]]))
            written = written_in_text
        for letters in line.words:
            # A one-letter word of a script the line also writes other words in is that language's (a
            # Russian "and", "with" in a sentence naming Latin tools), not a disguise.
            if len(letters) > 1 or _script(text[letters[0]]) not in written:
                positions.update(letters)
    return positions


@dataclass(slots=True)
class _Line:
    """A line that has a mixed or a look-alike word: its span, its Latin letters, how many of its letters of
    other scripts are in such words (negative), and its look-alike words outside addresses (the indices of
    their letters)."""

    start: int
    end: int
    latin: int
    other: int = 0
    words: list[list[int]] = field(default_factory=list)

    def letters(self, classes: str) -> int:
        """The line's letters of other scripts outside mixed and look-alike words."""
        return classes.count("A", self.start, self.end) + classes.count("O", self.start, self.end) + self.other


def _read_words(classes: str, positions: set[int]) -> list[_Line]:
    """Mark the other letters of mixed words and the look-alike words in addresses; the lines with such words,
    each with its look-alike words left to judge. Words are found in order, so a line is looked up once."""
    lines: list[_Line] = []
    line = _Line(0, -1, 0)
    token_end, in_address = -1, False
    for word in _MARKED_WORD.finditer(classes):
        if word.start() > line.end:
            start = classes.rfind("\n", line.end + 1, word.start()) + 1 or line.end + 1
            end = _find(classes, "\n", word.end(), len(classes))
            line = _Line(start, end, classes.count("L", start, end))
            lines.append(line)
        if word.group("mixed"):
            others = [i for i in range(word.start(), word.end()) if classes[i] in "AO"]
            positions.update(others)
            line.other -= len(others)
            continue
        letters = [i for i in range(word.start(), word.end()) if classes[i] == "A"]
        line.other -= len(letters)
        if line.latin and word.start() > token_end:  # the first look-alike word of its token
            token_end = _find(classes, " ", word.end(), line.end)
            token = classes[classes.rfind(" ", line.start, word.start()) + 1 or line.start:token_end]
            in_address = "L" in token and _ADDRESS_JOINT.search(token) is not None
        if line.latin and in_address:
            positions.update(letters)
        else:
            line.words.append(letters)
    return lines


def _find(text: str, char: str, start: int, end: int) -> int:
    """Where ``char`` is first in ``text[start:end]``, or ``end``."""
    found = text.find(char, start, end)
    return end if found < 0 else found


def _scripts_written(text: str, classes: str, line: _Line) -> set[str]:
    """The scripts of the line's letters that pass for no Latin letter (asked for its one-letter words)."""
    if all(len(letters) > 1 for letters in line.words) or classes.find("O", line.start, line.end) < 0:
        return set()
    return {_script(char) for char in set(text[line.start:line.end]) if _class(char) == "O"}


def short_fingerprint(fingerprint: str) -> str:
    """The first 64 bits of a hex fingerprint in groups of four, for reading aloud and comparing."""
    head = fingerprint[:16]
    return " ".join(head[i:i + 4] for i in range(0, 16, 4))
