"""Paths inside a pinned tree: relative, never outside it, never into git's metadata.

A path is looked up byte for byte in the tree, so whatever name the tree holds can be given back
exactly as an answer showed it: decomposed (NFD) and composed (NFC) accents, fullwidth letters,
tabs, newlines and bidirectional controls alike. Only what cannot name a file of the tree is
refused before the lookup: traversal, absolute paths and git's own metadata.
"""

from __future__ import annotations

import unicodedata

from armarius.errors import InvalidInput

#: Characters a reader cannot see or that move other text: shown escaped next to the real name.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def check_tree_path(path: str, *, field: str = "path", prefix: bool = False) -> str:
    """A relative path of the tree as written, or a refusal saying why.

    Refused: empty, absolute, an empty, '.' or '..' segment, a '.git' segment in any case, NUL
    (no git name holds one) and lone surrogates (not text). Anything else is a name to look up
    literally; a name the tree does not hold is simply not found. A prefix may end with one '/'.
    """
    def refuse(reason: str) -> InvalidInput:
        return InvalidInput(f"{field} {reason}. Give a path relative to the repository root as source.files "
                            "lists it, like 'src/app.py'.", field=field)

    if prefix and path.endswith("/"):
        path = path[:-1]
    if not path:
        raise refuse("is empty")
    if "\0" in path:
        raise refuse("contains a NUL character, which no file name holds")
    if any(unicodedata.category(char) == "Cs" for char in path):
        raise refuse("contains a lone surrogate, which is not text")
    if path.startswith("/"):
        raise refuse("is absolute")
    reason = segments_problem(path)
    if reason is not None:
        raise refuse(reason)
    return path


def segments_problem(path: str) -> str | None:
    """What makes a path's segments no name of a tree (an empty, '.' or '..' segment, or '.git' in any case,
    which git's own checks refuse too), or None."""
    segments = path.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        return "has an empty, '.' or '..' segment"
    if any(segment.lower() == ".git" for segment in segments):
        return "points into git's own metadata"
    return None


def is_under(path: str, prefix: str | None) -> bool:
    """Component-wise: 'src' covers 'src' and 'src/…', not 'srcfoo'."""
    return prefix is None or path == prefix or path.startswith(prefix + "/")


def shown_path(path: str) -> str:
    """A tree name as JSON can carry it: bytes that are not UTF-8 (kept as surrogates) become U+FFFD."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return path


def escaped_path(path: str) -> str | None:
    """The name with its control, format (bidirectional, zero-width) and line-separator characters
    written as escapes (``\\n``, ``\\t``, ``\\u202e``), or None when it has none."""
    if not any(unicodedata.category(char) in _HIDDEN_CATEGORIES for char in path):
        return None
    return "".join(_escape(char) if unicodedata.category(char) in _HIDDEN_CATEGORIES else char for char in path)


def _escape(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def named(path: str) -> dict[str, str | bool]:
    """How an answer names a tree path: ``path`` (give it back as is to read the file), with
    ``path_not_utf8`` when the name's bytes are not UTF-8 and ``path_escaped`` when it holds
    characters a reader could not see."""
    shown = shown_path(path)
    fields: dict[str, str | bool] = {"path": shown}
    if shown != path:
        fields["path_not_utf8"] = True
    escaped = escaped_path(shown)
    if escaped is not None:
        fields["path_escaped"] = escaped
    return fields
