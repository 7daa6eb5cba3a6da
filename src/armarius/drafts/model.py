"""A draft proposal is exactly ``{slug, title, text}``, all strings; its fingerprint binds an approval."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from armarius.canonical import canonical_sha256
from armarius.errors import InvalidInput
from armarius.memory.model import check_slug

DRAFT_KIND = "create_draft"
PAYLOAD_KEYS = frozenset({"slug", "title", "text"})
TITLE_MAX = 200


@dataclass(frozen=True)
class DraftPayload:
    slug: str
    title: str
    text: str

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON of the payload with its action kind."""
        return approval_fingerprint(DRAFT_KIND, {"slug": self.slug, "title": self.title, "text": self.text})

    def to_dict(self) -> dict[str, str]:
        return {"slug": self.slug, "title": self.title, "text": self.text}


def approval_fingerprint(kind: str, payload: dict[str, str]) -> str:
    return canonical_sha256({"kind": kind, **payload})


def parse_payload(value: Any, *, text_max_bytes: int) -> DraftPayload:
    """Exactly slug, title and text, all strings, within limits; anything else is invalid_input.

    Nothing is trimmed or normalized: the approval binds the bytes as given.
    """
    if not isinstance(value, dict) or set(value) != PAYLOAD_KEYS:
        keys = sorted(value, key=str) if isinstance(value, dict) else type(value).__name__
        raise InvalidInput(f"A draft proposal is exactly {{slug, title, text}}; got {keys}.", field="proposal")
    for key in sorted(PAYLOAD_KEYS):
        if not isinstance(value[key], str):
            raise InvalidInput(f"{key} must be a string.", field=key)
    check_slug(value["slug"])
    title, text = value["title"], value["text"]
    if not title.strip() or len(title) > TITLE_MAX:
        raise InvalidInput(f"A title is 1 to {TITLE_MAX} characters.", field="title")
    if title != title.strip():  # an entry's title is stored trimmed: promotion would change what was approved
        raise InvalidInput("A title has no white space at its start or end.", field="title")
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > text_max_bytes:
        raise InvalidInput(f"The text is {size} bytes; the limit is {text_max_bytes}.", field="text",
                           size=size, limit=text_max_bytes)
    if "\x00" in title + text or any(0xD800 <= ord(ch) <= 0xDFFF for ch in title + text):
        raise InvalidInput("The proposal contains a NUL or an unpaired surrogate.", field="text")
    return DraftPayload(slug=value["slug"], title=title, text=text)
