"""Memory entries: their data, their validation, links and the words search sees."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from armarius.errors import InvalidInput
from armarius.textview import BLANK_LOOKALIKES
from armarius.validation import check_storable

SLUG_SEGMENT = r"[a-z0-9]+(?:-[a-z0-9]+)*"
SLUG_PATTERN = re.compile(rf"{SLUG_SEGMENT}(?:/{SLUG_SEGMENT})*")
SLUG_MAX = 128
TITLE_MAX = 200
TAG_PATTERN = re.compile(r"[a-z0-9][a-z0-9._:-]{0,63}")
TAGS_MAX = 20
REASON_MAX = 2000
LINK_PATTERN = re.compile(rf"\[\[({SLUG_SEGMENT}(?:/{SLUG_SEGMENT})*)\]\]")
#: Words as both full-text engines see them: runs of letters and digits (underscore splits).
WORD_PATTERN = re.compile(r"[^\W_]+")
#: How often one word of an entry or an evidence unit is indexed at most: as many positions of a word as
#: PostgreSQL keeps (memory.queries.search_body, evidence.model.search_text).
INDEXED_REPETITIONS = 255


@dataclass(frozen=True)
class MemoryLimits:
    body_max_bytes: int = 64 * 1024
    #: A new entry at least this similar (0..1) to an existing one needs confirm_distinct.
    duplicate_threshold: float = 0.5


@dataclass(frozen=True)
class Entry:
    id: int
    slug: str
    title: str
    body: str
    tags: tuple[str, ...]
    revision: int
    curated_revision: int | None
    curated_by: str | None
    curated_at: str | None
    review_base_revision: int | None
    needs_review: bool
    created_at: str
    updated_at: str
    updated_by: str

    @property
    def curated(self) -> bool:
        """Curated means a human reviewed exactly the current revision."""
        return self.curated_revision is not None and self.curated_revision == self.revision

    def summary(self) -> dict[str, Any]:
        return {"slug": self.slug, "title": self.title, "revision": self.revision, "curated": self.curated,
                "needs_review": self.needs_review, "tags": list(self.tags), "updated_at": self.updated_at}


@dataclass(frozen=True)
class PastRevision:
    """A revision as it was recorded elsewhere (an import from another Armarius store keeps history)."""

    title: str
    body: str
    tags: tuple[str, ...]
    reason: str | None
    author: str
    created_at: str
    overrode_curated: bool = False


def check_slug(slug: Any, field: str = "slug") -> str:
    if not isinstance(slug, str) or len(slug) > SLUG_MAX or not SLUG_PATTERN.fullmatch(slug):
        raise InvalidInput(
            f"A {field} is lowercase latin letters and digits in segments joined by '-', segments joined "
            f"by '/', at most {SLUG_MAX} characters (for example 'deploy/staging-server').",
            field=field,
        )
    return slug


#: Default-ignorable marks that change nothing a reader sees after a letter, which a title may not hold next
#: to the categories below and textview.BLANK_LOOKALIKES: the combining grapheme joiner, the Khmer inherent
#: vowels, the Mongolian free variation selectors and the variation selectors but the two that choose how an
#: emoji shows (U+FE0E, U+FE0F: "✔️" is written with one).
_IGNORABLE_MARKS = frozenset(
    "\u034f\u17b4\u17b5\u180b\u180c\u180d\u180f"
    + "".join(map(chr, range(0xFE00, 0xFE0E)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)


def invisible_in_title(char: str) -> bool:
    """Whether a title may not hold ``char``: a control, formatting (zero-width, bidirectional) or line
    separating character, a letter that shows as blank space, or a mark that shows as nothing. The web API
    publishes the same set in its titles' pattern."""
    return (unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") or char in BLANK_LOOKALIKES
            or char in _IGNORABLE_MARKS)


def check_title(title: Any) -> str:
    if not isinstance(title, str) or not title.strip() or len(title) > TITLE_MAX:
        raise InvalidInput(f"A title is 1 to {TITLE_MAX} characters.", field="title")
    if any(map(invisible_in_title, title)):
        raise InvalidInput("A title is one line without control or invisible characters (zero-width, "
                           "bidirectional, or letters that show as blank space).", field="title")
    return title.strip()


def check_body(body: Any, limits: MemoryLimits) -> str:
    if not isinstance(body, str):
        raise InvalidInput("The body is Markdown text.", field="body")
    size = len(check_storable(body, "body").encode("utf-8"))
    if size > limits.body_max_bytes:
        raise InvalidInput(
            f"The body is {size} bytes; the limit is {limits.body_max_bytes}. Split it into several "
            "entries and link them with [[slug]].",
            field="body", size=size, limit=limits.body_max_bytes,
        )
    return body


def check_tags(tags: Any) -> tuple[str, ...]:
    if tags is None:
        return ()
    if not isinstance(tags, list) or len(tags) > TAGS_MAX or not all(
        isinstance(tag, str) and TAG_PATTERN.fullmatch(tag) for tag in tags
    ):
        raise InvalidInput(
            f"Tags are a list of at most {TAGS_MAX} lowercase words ([a-z0-9._:-], up to 64 characters).",
            field="tags",
        )
    return tuple(sorted(set(tags)))


def check_reason(reason: Any, field: str = "reason") -> str | None:
    """An optional reason or note: text of at most REASON_MAX characters (blank: none). Text without a
    visible character is blank too: white space and what a title may not hold (:func:`invisible_in_title`:
    a zero-width space, a Hangul filler, a blank Braille pattern) say nothing to whoever reads the reason."""
    if reason is None:
        return None
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise InvalidInput(f"A {field} is text of at most {REASON_MAX} characters.", field=field)
    stripped = check_storable(reason, field).strip()
    if all(char.isspace() or invisible_in_title(char) for char in stripped):
        return None
    return stripped


def parse_links(body: str) -> list[str]:
    """The distinct ``[[slug]]`` targets of a body, in order of first appearance."""
    return list(dict.fromkeys(m.group(1) for m in LINK_PATTERN.finditer(body) if len(m.group(1)) <= SLUG_MAX))


def words(text: str) -> list[str]:
    """The words of a text as written. Case is left to the engines, which lowercase one character
    at a time (Python's casefold would turn 'ß' into 'ss', and the query would miss 'Straße')."""
    return WORD_PATTERN.findall(text)


#: A query's word: letters and digits, and the combining accents (U+0300 to U+036F) after its first letter.
_QUERY_WORD = re.compile(r"[^\W_](?:[^\W_]|[\u0300-\u036f])*")


def query_words(query: str) -> list[str]:
    """The words of a search query as both engines index text: an accent typed as a character of its own
    after its letter (decomposed text: 'Mu' and U+0308 for 'Mü', as macOS often writes it) belongs to the
    letter's word, which the engines take whole and fold ('muller'); :func:`words` would split it there
    ('Mu', 'ller'), words no entry holds. The query is composed (NFC) first, so that such a word is sent as
    an entry written either way is indexed; an accent that composes with nothing stays in its word."""
    return _QUERY_WORD.findall(unicodedata.normalize("NFC", query))


def slug_key(slug: str) -> str:
    """Slugs that differ only in separators or a plural 's' share a key ('deploy/servers' ~ 'deploy-server')."""
    return "".join(part.removesuffix("s") for part in re.split(r"[-/]", slug))
