"""What an import brings: notes with their slugs, the renames and notices, and the problems found.

Names from elsewhere become slugs by one rule (:func:`slugify`), deterministically, so that a
re-run of the same import arrives at the same slugs and changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from armarius.auth.directory import NAME_PATTERN
from armarius.errors import InvalidInput, echo
from armarius.memory.model import SLUG_MAX, TAG_PATTERN, TAGS_MAX, TITLE_MAX, PastRevision, invisible_in_title
from armarius.validation import check_storable

#: How many problems an error message lists (all of them are in its details).
PROBLEMS_SHOWN = 20
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_NOT_TAG = re.compile(r"[^a-z0-9._:-]+")
#: Who a revision names as its author, as the store writes it: an agent or a human of the
#: installation (``agent:name``, ``human:name``, names as principals' are), an operator, or the
#: system; at most AUTHOR_MAX characters.
AUTHOR_PATTERN = re.compile(rf"(?:agent|human):{NAME_PATTERN.pattern}|operator:[A-Za-z0-9][A-Za-z0-9._@-]{{0,63}}"
                            r"|system")
AUTHOR_MAX = 73


@dataclass(frozen=True)
class Note:
    """One entry to be: its content, where it came from, and (from an Armarius export) its history."""

    slug: str
    title: str
    body: str
    tags: tuple[str, ...]
    origin: str
    history: tuple[PastRevision, ...] = ()
    curated_in_source: bool = False


@dataclass
class Plan:
    """A source read whole and checked: what an import would write."""

    kind: str
    source: str
    digest: str
    notes: list[Note] = field(default_factory=list)
    #: Every name or path that did not become its slug unchanged: {"origin", "name", "slug"}.
    renamed: list[dict[str, str]] = field(default_factory=list)
    #: What was kept in another form or left out, one line each (links to nothing, tags changed).
    notices: list[str] = field(default_factory=list)


class Problems:
    """The problems found reading a source, each naming its file and line; raised together."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.found.append(f"{where}: {message}")

    def raise_if_any(self, source: str) -> None:
        if not self.found:
            return
        shown = self.found[:PROBLEMS_SHOWN]
        more = len(self.found) - len(shown)
        raise InvalidInput(
            f"{len(self.found)} problem{'s' if len(self.found) != 1 else ''} in {echo(source)}; nothing was imported. "
            + "; ".join(shown) + (f"; and {more} more" if more else ""),
            field="source", problems=self.found,
        )


def check_author(author: Any) -> str:
    """A revision's recorded author: a principal as the store names authors (``human:ada``), nothing else."""
    if not isinstance(author, str) or len(author) > AUTHOR_MAX or not AUTHOR_PATTERN.fullmatch(
            check_storable(author, "author")):
        raise InvalidInput("A revision's author is a principal as the store names it: 'agent:NAME', 'human:NAME' "
                           "(a name of 1-64 lowercase letters, digits, '.', '_' or '-'), 'operator:NAME' or "
                           "'system'.", field="author")
    return author


def shown_name(name: str) -> str:
    """A file name as text that can be stored and shown: bytes that are not UTF-8 as '\\xe9', and every
    character that is not printable (controls, line breaks, bidirectional and other format characters)
    escaped as :func:`~armarius.errors.echo` escapes it ('\\x1b', '\\u202e'), so that a name never moves a
    terminal's cursor or turns the text around it in a message, an answer or a revision's reason."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in text)


def digest_of(*chunks: bytes) -> str:
    sha = hashlib.sha256()
    for chunk in chunks:
        sha.update(len(chunk).to_bytes(8, "big"))
        sha.update(chunk)
    return sha.hexdigest()


def slug_segment(text: str) -> str:
    """Lowercase Latin letters and digits joined by '-' (accents dropped; other scripts fall away)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _NOT_SLUG.sub("-", ascii_text.lower()).strip("-")


def slugify(text: str, *, separator: str | None = None) -> str:
    """A valid slug for ``text`` (path segments split at ``separator``); text with no Latin letters or
    digits gets ``note-`` and a short hash of itself."""
    parts = text.split(separator) if separator else [text]
    segments = [segment for segment in map(slug_segment, parts) if segment]
    slug = "/".join(segments)
    if len(slug) > SLUG_MAX:
        slug = slug[:SLUG_MAX].rstrip("-/")
    return slug or "note-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


class SlugBook:
    """Unique slugs in the order names arrive: a second name with the same slug gets '-2', '-3', …"""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.taken: set[str] = set()

    def assign(self, wanted: str) -> str:
        base = (self.prefix + wanted)[:SLUG_MAX].rstrip("-/")
        slug, number = base, 1
        while slug in self.taken:
            number += 1
            suffix = f"-{number}"
            slug = base[:SLUG_MAX - len(suffix)].rstrip("-/") + suffix
        self.taken.add(slug)
        return slug


def clean_title(text: str, fallback: str) -> str:
    """One line of at most TITLE_MAX characters, invisible characters dropped."""
    line = " ".join("".join(" " if invisible_in_title(ch) else ch for ch in text).split())
    return (line or fallback)[:TITLE_MAX].strip() or fallback


def clean_tags(values: list[Any], where: str, plan: Plan) -> tuple[str, ...]:
    """Tags as Armarius keeps them ('#Project/Alpha' becomes 'project:alpha'); what changes is noted."""
    tags: list[str] = []
    for value in values:
        text = str(value).strip().lstrip("#").lower().replace("/", ":")
        tag = _NOT_TAG.sub("-", text).strip("-._:")[:64]
        if not tag or not TAG_PATTERN.fullmatch(tag):
            plan.notices.append(f"{where}: tag {str(value)!r} left out (no letters or digits)")
            continue
        if tag not in tags:
            tags.append(tag)
    if len(tags) > TAGS_MAX:
        plan.notices.append(f"{where}: {len(tags)} tags; the first {TAGS_MAX} kept")
        tags = tags[:TAGS_MAX]
    return tuple(sorted(tags))
