"""Anchors: chain heads recorded outside the database, to detect truncation, wipes and rewrites.

A head is written ``CHAIN:SEQ:HASH``: the chain (the workspace id; 0 is the system chain), the
number of its newest event and that event's hash. ``armarius audit anchor FILE`` appends one line
per run: the time, then the head of every chain that has events::

    2026-11-30T03:00:00.000000Z 0:12:4f1c…e9 1:40:9a07…11

``armarius audit verify --anchors FILE`` (or ``--expect CHAIN:SEQ:HASH``) then checks that every
recorded head is still on its chain. A hash chain alone cannot show that its newest events were
removed, or that all of it was; a head kept elsewhere can.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from armarius.errors import InvalidInput

_HEAD = re.compile(r"(\d{1,18}):(\d{1,18}):([0-9a-f]{64})")


@dataclass(frozen=True)
class Anchor:
    """A recorded head: event ``seq`` of ``chain`` had ``hash``."""

    chain: int
    seq: int
    hash: str
    #: Where it was recorded: ``--expect`` or ``FILE:LINE``.
    source: str
    anchored_at: str | None = None

    def __str__(self) -> str:
        return f"{self.chain}:{self.seq}:{self.hash}"


def format_head(chain: int, seq: int, event_hash: str) -> str:
    return f"{chain}:{seq}:{event_hash}"


def parse_head(text: str, *, source: str, anchored_at: str | None = None) -> Anchor:
    match = _HEAD.fullmatch(text.strip())
    if match is None or int(match[2]) < 1:
        shown = text if len(text) <= 90 else text[:90] + "…"
        raise InvalidInput(
            f"{source}: {shown!r} is not a head CHAIN:SEQ:HASH (a chain id, an event number from 1 and the "
            "event's 64 lowercase hex digits), as `armarius audit anchor` writes them.",
            field="expect",
        )
    return Anchor(int(match[1]), int(match[2]), match[3], source, anchored_at)


def anchor_line(heads: Iterable[tuple[int, int, str]], *, at: str) -> str:
    return " ".join([at, *(format_head(*head) for head in heads)])


def parse_anchor_lines(lines: Iterable[str], *, source: str) -> list[Anchor]:
    """Anchor lines (``TIME HEAD HEAD …``); blank lines and ``#`` comments are skipped."""
    anchors = []
    for number, line in enumerate(lines, start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{source}:{number}"
        try:
            datetime.fromisoformat(fields[0])
        except ValueError:
            raise InvalidInput(f"{where}: an anchor line starts with the time it was recorded "
                               "(ISO 8601), as `armarius audit anchor` writes it.", field="anchors") from None
        anchors += [parse_head(head, source=where, anchored_at=fields[0]) for head in fields[1:]]
    return anchors


def read_anchor_file(path: Path) -> list[Anchor]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise InvalidInput(f"The anchor file {path} cannot be read as UTF-8 text.", field="anchors") from None
    return parse_anchor_lines(text.splitlines(), source=str(path))


def append_anchor_line(path: Path, line: str) -> None:
    """Append one line and flush it to disk before returning."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    with os.fdopen(descriptor, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
