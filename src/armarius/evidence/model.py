"""Evidence units: their states, limits, and the canonical file with its fingerprint (SPEC §5).

A unit's canonical file is Markdown with front matter::

    ---
    id: "deploy/staging-host"
    title: "Where staging runs"
    revision: 2
    provenance: ["<capture id>"]
    lineage: [{"at":"…","author":"human:ada","revision":1,"via":"capture"},{…,"revision":2,"via":"edited"}]
    ---

    The body, as written.

One ``key: <JSON value>`` a line, the keys in exactly this order, each value canonical JSON (JSON
is YAML, so editors show it as front matter), then a blank line and the body. :func:`render` is
deterministic; :func:`parse` is ours and strict (no YAML library reads these files). A file's
fingerprint is the SHA-256 of its bytes.

Provenance (the captures a unit came from) is carried unchanged to every revision; lineage gains
one step (revision, author, time, how) with each.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from armarius.canonical import canonical_json
from armarius.errors import InvalidInput, echo
from armarius.memory.model import INDEXED_REPETITIONS, check_slug, check_title, words
from armarius.validation import check_storable

#: The largest body of a unit, in bytes of UTF-8 (1 MiB).
BODY_MAX_BYTES = 1_048_576
#: How a revision came about: made by a human, edited by one, made from captures, or a repair's correction.
VIA_PATTERN = re.compile(r"created|edited|capture|repair [A-Za-z0-9_-]{1,64}")
CAPTURE_ID_PATTERN = re.compile(r"[0-9a-f]{64}")
#: The front matter's keys, in their order.
KEYS = ("id", "title", "revision", "provenance", "lineage")
_LINEAGE_KEYS = {"revision", "author", "at", "via"}
FENCE = "---"
#: What the indexed words of one unit may cost at most, counted as PostgreSQL counts a tsvector's size
#: (each distinct word's bytes, its position count and its positions), whose limit is 1 MiB.
SEARCH_COST_MAX = 768 * 1024


class Status(StrEnum):
    EDITED = "edited"  # the latest revision is not reviewed
    REVIEWED = "reviewed"  # a human reviewed exactly the latest revision (and its file)
    ACTIVE = "active"  # the latest revision is the one searched


@dataclass(frozen=True)
class UnitFile:
    """What a unit's canonical file holds."""

    name: str
    title: str
    revision: int
    provenance: tuple[str, ...]
    lineage: tuple[dict[str, Any], ...]
    body: str


@dataclass(frozen=True)
class UnitView:
    """A unit's current state and its latest revision in full (what a repair is prepared against)."""

    name: str
    revision: int
    title: str
    body: str
    status: str
    reviewed_revision: int | None
    active_revision: int | None
    active_fingerprint: str | None
    #: The fingerprint of the latest revision's file.
    fingerprint: str
    path: Path
    provenance: tuple[str, ...]
    lineage: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.name, "revision": self.revision, "title": self.title, "body": self.body,
                "status": self.status, "reviewed_revision": self.reviewed_revision,
                "active_revision": self.active_revision, "active_fingerprint": self.active_fingerprint,
                "fingerprint": self.fingerprint, "path": str(self.path), "provenance": list(self.provenance),
                "lineage": list(self.lineage)}


@dataclass(frozen=True)
class Correction:
    """A unit's next revision as a repair chose it: the complete file to write, and what it replaces.

    Made by ``EvidenceService.correction`` (which writes nothing); ``to_dict``/``from_dict`` keep it in a
    receipt so that a retry writes exactly the same bytes. It holds no path: where the unit's file is follows
    from the workspace and the unit's name where it is written (a data folder moved, or mounted elsewhere by
    another host, never sends a retry to a folder named in the database).
    """

    name: str
    base_revision: int
    base_fingerprint: str
    revision: int
    title: str
    body: str
    via: str
    author: str
    at: str
    provenance: tuple[str, ...]
    lineage: tuple[dict[str, Any], ...]
    content: bytes = field(repr=False)
    fingerprint: str

    def unit_file(self) -> UnitFile:
        return UnitFile(self.name, self.title, self.revision, self.provenance, self.lineage, self.body)

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.name, "base_revision": self.base_revision,
                "base_fingerprint": self.base_fingerprint, "revision": self.revision, "title": self.title,
                "body": self.body, "via": self.via, "author": self.author, "at": self.at,
                "provenance": list(self.provenance), "lineage": list(self.lineage), "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Correction:
        """The correction a receipt kept; its file is rendered again and must have the kept fingerprint. The
        ``path`` older receipts kept is not read."""
        unit = UnitFile(data["unit"], data["title"], data["revision"], tuple(data["provenance"]),
                        tuple(data["lineage"]), data["body"])
        content = render(unit)
        if fingerprint(content) != data["fingerprint"]:
            raise InvalidInput("The kept correction does not render to its fingerprint.", field="correction")
        return cls(name=unit.name, base_revision=data["base_revision"],
                   base_fingerprint=data["base_fingerprint"], revision=unit.revision, title=unit.title,
                   body=unit.body, via=data["via"], author=data["author"], at=data["at"],
                   provenance=unit.provenance, lineage=unit.lineage, content=content, fingerprint=data["fingerprint"])


def check_name(name: Any) -> str:
    """A unit's name follows the entry slug rules."""
    return check_slug(name, "unit")


def check_body(body: Any) -> str:
    if not isinstance(body, str):
        raise InvalidInput("A unit's body is Markdown text.", field="body")
    size = len(check_storable(body, "body").encode("utf-8"))
    if size > BODY_MAX_BYTES:
        raise InvalidInput(f"The body is {size} bytes; an evidence unit holds at most {BODY_MAX_BYTES} bytes. "
                           "Split it into several units.", field="body", size=size, limit=BODY_MAX_BYTES)
    return body


def check_via(via: Any) -> str:
    if not isinstance(via, str) or not VIA_PATTERN.fullmatch(via):
        raise InvalidInput("via is 'created', 'edited', 'capture' or 'repair <id>'.", field="via")
    return via


def check_capture_ids(captures: Any) -> list[str]:
    if not isinstance(captures, list) or not all(isinstance(c, str) and CAPTURE_ID_PATTERN.fullmatch(c)
                                                  for c in captures):
        raise InvalidInput("Captures are named by their ids: 64 lowercase hex digits.", field="captures")
    return list(dict.fromkeys(captures))


def step(revision: int, author: str, at: str, via: str) -> dict[str, Any]:
    """One lineage step: which revision, who made it, when, and how."""
    return {"revision": revision, "author": author, "at": at, "via": via}


def fingerprint(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def render(unit: UnitFile) -> bytes:
    """The canonical file of a revision: the same revision always gives the same bytes."""
    values = (unit.name, unit.title, unit.revision, list(unit.provenance), list(unit.lineage))
    lines = [FENCE, *(f"{key}: {canonical_json(value)}" for key, value in zip(KEYS, values, strict=True)), FENCE, ""]
    return ("\n".join(lines) + "\n" + unit.body).encode("utf-8")


def parse(content: bytes, name: str) -> UnitFile:
    """The unit in a canonical file of unit ``name``; a file of any other form is refused (invalid_input,
    field ``file``), saying what is wrong with it."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad("it is not UTF-8 text") from None
    lines = text.split("\n", len(KEYS) + 3)  # the fences, the keys, the blank line, then the body
    if len(lines) < len(KEYS) + 4 or lines[0].rstrip("\r") != FENCE:
        raise _bad("it does not start with front matter: a line '---', one line for each of "
                   f"{', '.join(KEYS)}, a line '---' and a blank line")
    if any(line.endswith("\r") for line in lines[:len(KEYS) + 3]):
        raise _bad("its front matter has Windows line endings (CRLF); save it with LF line endings")
    if lines[len(KEYS) + 1] != FENCE or lines[len(KEYS) + 2] != "":
        raise _bad("its front matter does not end with a line '---' followed by a blank line")
    values = [_value(line, key) for line, key in zip(lines[1:len(KEYS) + 1], KEYS, strict=True)]
    unit_id, title, revision, provenance, lineage = values
    if unit_id != name:
        raise _bad(f"its id is {echo(unit_id)}, not {echo(name)}")
    try:
        title = check_title(title)
        body = check_body(lines[-1])
    except InvalidInput as refusal:
        raise _bad(refusal.message) from None
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
        raise _bad("its revision is not a positive whole number")
    if not isinstance(provenance, list) or not all(isinstance(c, str) and CAPTURE_ID_PATTERN.fullmatch(c)
                                                   for c in provenance):
        raise _bad("its provenance is not a list of capture ids")
    if not isinstance(lineage, list) or [_step_revision(item) for item in lineage] != list(range(1, revision + 1)):
        raise _bad("its lineage is not one step (revision, author, at, via) for each revision up to its own")
    return UnitFile(name, title, revision, tuple(provenance), tuple(lineage), body)


def _value(line: str, key: str) -> Any:
    prefix = f"{key}: "
    if not line.startswith(prefix):
        raise _bad(f"the front matter's line for {key!r} does not start with '{prefix}'")
    try:
        return json.loads(line[len(prefix):], parse_constant=_no_constant)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise _bad(f"the value of {key!r} is not JSON") from None


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _step_revision(item: Any) -> int | None:
    if (not isinstance(item, dict) or set(item) != _LINEAGE_KEYS or not all(
            isinstance(item[key], str) for key in ("author", "at", "via")) or not VIA_PATTERN.fullmatch(item["via"])
            or isinstance(item["revision"], bool) or not isinstance(item["revision"], int)):
        return None
    return int(item["revision"])


def _bad(what: str) -> InvalidInput:
    return InvalidInput(f"This is not a valid evidence unit file: {what}.", field="file")


def search_text(body: str) -> str | None:
    """The text the search index is given for a body when it differs from the body; None: the body itself.

    A body's words past their INDEXED_REPETITIONS-th repetition (case aside) are left out, so that ranking
    reads a bounded number of positions (FTS5's bm25() reads every one), and the words are cut where their
    index would outgrow SEARCH_COST_MAX: a tsvector holds at most 1 MiB, and a unit's body may be 1 MiB of
    distinct words. Ordinary text at the body limit is indexed whole; a body past that budget is found
    by the words before the cut. Both engines index the same text.
    """
    if len(body) <= 2 * INDEXED_REPETITIONS:  # too short to repeat a word that often or to cost that much
        return None
    found = words(body)
    counts = Counter(word.lower() for word in found)
    if max(counts.values(), default=0) <= INDEXED_REPETITIONS and sum(
            _word_cost(word) + 2 * count for word, count in counts.items()) <= SEARCH_COST_MAX:
        return None
    kept, seen, cost = [], Counter[str](), 0
    for word in found:
        key = word.lower()
        seen[key] += 1
        if seen[key] > INDEXED_REPETITIONS:
            continue
        cost += 2 + (_word_cost(key) if seen[key] == 1 else 0)
        if cost > SEARCH_COST_MAX:
            break
        kept.append(word)
    return " ".join(kept)


def _word_cost(word: str) -> int:
    """A distinct word's bytes in a tsvector besides its positions: the word, alignment, the position count."""
    return len(word.encode("utf-8")) + 3
