"""What you see is what you sign: text shown to a reviewer with nothing hidden.

Control, format (zero-width, bidirectional), separator and other invisible characters, letters
that show as blank space (the Hangul fillers), unusual spaces, compatibility forms (fullwidth
letters, ligatures) and letters from another script inside a Latin word are replaced by a visible
marker naming the code point, e.g. ``⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧``. Line feeds stay line
feeds; a carriage return and a tab are marked too.
"""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"\w+")
_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Mn", "Me"}
#: Characters that show as blank space although Unicode classes them as letters or symbols, so that no
#: category marks them: the Hangul fillers (U+115F, U+1160, U+3164, U+FFA0, default-ignorable) and the
#: blank braille pattern (U+2800).
BLANK_LOOKALIKES = frozenset("\u115f\u1160\u3164\uffa0\u2800")


_CONTROL_NAMES = {"\t": "CHARACTER TABULATION", "\r": "CARRIAGE RETURN", "\x00": "NULL", "\x1b": "ESCAPE",
                  "\x0b": "LINE TABULATION", "\x0c": "FORM FEED", "\x7f": "DELETE"}


def _marker(char: str) -> str:
    name = _CONTROL_NAMES.get(char) or unicodedata.name(char, "CONTROL" if unicodedata.category(char) == "Cc"
                                                          else "UNASSIGNED")
    return f"⟦U+{ord(char):04X} {name}⟧"


def _script(char: str) -> str:
    """The script word of a letter's Unicode name (LATIN, CYRILLIC, GREEK, …)."""
    return unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]


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


#: The line that explains the markers to whoever reads a revealed text.
REVEAL_NOTE = "Invisible, control, bidirectional and look-alike characters are shown as ⟦U+XXXX NAME⟧."


def reveal(text: str) -> str:
    """The text with every character a reader could miss or mistake made visible."""
    confusable = _mixed_script_positions(text)
    return "".join(
        _marker(char) if index in confusable or _needs_marking(char) else char for index, char in enumerate(text)
    )


def _mixed_script_positions(text: str) -> set[int]:
    """Letters of another script inside a word that is mostly Latin (e.g. a Cyrillic 'a' (U+0430) in 'paypal')."""
    positions: set[int] = set()
    for match in _WORD.finditer(text):
        letters = [(match.start() + i, _script(ch)) for i, ch in enumerate(match.group()) if ch.isalpha()]
        scripts = {script for _, script in letters}
        if "LATIN" in scripts and len(scripts) > 1:
            positions.update(index for index, script in letters if script != "LATIN")
    return positions


def short_fingerprint(fingerprint: str) -> str:
    """The first 64 bits of a hex fingerprint in groups of four, for reading aloud and comparing."""
    head = fingerprint[:16]
    return " ".join(head[i:i + 4] for i in range(0, 16, 4))
