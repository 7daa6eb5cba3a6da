"""Paths inside a pinned tree: relative, canonical, never outside it, never into git's metadata."""

from __future__ import annotations

import re
import unicodedata

from armarius.errors import InvalidInput

_ENCODED = re.compile(r"%[0-9a-fA-F]{2}")


def check_tree_path(path: str, *, field: str = "path", prefix: bool = False) -> str:
    """A relative path of the tree as written, or a refusal saying why.

    Refused: absolute paths, backslashes, empty, '.' or '..' segments, '.git' anywhere, NUL and
    other control or format characters, percent-encoding, and characters that Unicode
    normalization would change (fullwidth dots and slashes and other look-alikes). A prefix may
    end with one '/'.
    """
    def refuse(reason: str) -> InvalidInput:
        return InvalidInput(f"{field} {reason}. Give a path relative to the repository root, like 'src/app.py'.",
                            field=field)

    if prefix and path.endswith("/"):
        path = path[:-1]
    if not path:
        raise refuse("is empty")
    if any(unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp") for char in path):
        raise refuse("contains a control or invisible character")
    if unicodedata.normalize("NFKC", path) != path:
        raise refuse("contains look-alike characters that Unicode normalization would change")
    if "\\" in path:
        raise refuse("contains a backslash")
    if _ENCODED.search(path):
        raise refuse("is percent-encoded")
    if path.startswith("/"):
        raise refuse("is absolute")
    segments = path.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise refuse("has an empty, '.' or '..' segment")
    if any(segment.lower() == ".git" for segment in segments):
        raise refuse("points into git's own metadata")
    return path


def is_under(path: str, prefix: str | None) -> bool:
    """Component-wise: 'src' covers 'src' and 'src/…', not 'srcfoo'."""
    return prefix is None or path == prefix or path.startswith(prefix + "/")
