"""How a person compares an alternative with its target's current content: the repair page and ``repair-show``.

A content is read as its title (``# title``), an entry's tags (``tags: a, b``), a blank line and the body, and
compared line by line as :mod:`armarius.textdiff` compares texts: split at line feeds only (every other line
separator shown as its marker), a change of the final line break alone shown, at a bounded cost. When a diff is
not shown line by line, its :class:`~armarius.textdiff.Diff` says why and the person compares the two complete
contents, which every view shows anyway (with how each body ends: :func:`ending`), so nothing the decision
needs is left out.
"""

from __future__ import annotations

from typing import Any

from armarius.textdiff import Diff, text_diff, text_lines


def content_text(content: dict[str, Any]) -> str:
    """An entry's or unit's content as a person reads it: the title, the tags of an entry, a blank line and the
    body exactly as it is."""
    head = [f"# {content['title']}"]
    if "tags" in content:
        head.append(f"tags: {', '.join(content['tags']) or '-'}")
    return "\n".join([*head, "", content["body"]])


def content_lines(content: dict[str, Any]) -> list[str]:
    """:func:`content_text` as lines (see :func:`text_lines`)."""
    return text_lines(content_text(content))


def ending(content: dict[str, Any]) -> str:
    """How the body ends, in words (a final line feed is invisible in a complete view)."""
    return "ends with a line break" if content["body"].endswith("\n") else "no line break at the end"


def diff(before: dict[str, Any], after: dict[str, Any], *, fromfile: str, tofile: str) -> Diff:
    """The diff between two contents (:func:`content_text`), at a bounded cost (see the module's description)."""
    return text_diff(content_text(before), content_text(after), fromfile=fromfile, tofile=tofile)


