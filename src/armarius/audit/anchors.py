"""Anchors: chain heads recorded outside the database, to detect truncation, wipes and rewrites.

A head is written ``CHAIN:SEQ:HASH``: the chain (the workspace id; 0 is the system chain), the
number of its newest event and that event's hash. ``armarius audit anchor FILE`` appends one line
per run: the time, then the head of every chain that has events::

    2026-11-30T03:00:00.000000Z 0:12:4f1c…e9 1:40:9a07…11

``armarius audit verify --anchors FILE`` (or ``--expect CHAIN:SEQ:HASH``) then checks that every
recorded head is still on its chain. A hash chain alone cannot show that its newest events were
removed, or that all of it was; a head kept elsewhere can.

Every head ``audit anchor`` writes can be read back: a chain id is any signed 64-bit number (the
tables' ids; a forged chain may claim a negative one), an event number from 1, and ``anchor`` passes
over rows whose number or hash Armarius never writes. A line of an anchor file that cannot be read
anyway is a finding of its own; the file's other lines, and the line's other heads, are checked.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from armarius.errors import InvalidInput

_HEAD = re.compile(r"(-?[0-9]{1,19}):([0-9]{1,19}):([0-9a-f]{64})")
#: The ids and numbers the tables hold: signed 64-bit integers.
_LOWEST, _HIGHEST = -(2**63), 2**63 - 1


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
    if match is None or not _LOWEST <= int(match[1]) <= _HIGHEST or not 1 <= int(match[2]) <= _HIGHEST:
        raise InvalidInput(
            f"{source}: {_shown(text)!r} is not a head CHAIN:SEQ:HASH (a chain id, an event number from 1 and the "
            "event's 64 lowercase hex digits), as `armarius audit anchor` writes them.",
            field="expect",
        )
    return Anchor(int(match[1]), int(match[2]), match[3], source, anchored_at)


def _shown(text: str) -> str:
    return text if len(text) <= 90 else text[:90] + "…"


def anchor_line(heads: Iterable[tuple[int, int, str]], *, at: str) -> str:
    return " ".join([at, *(format_head(*head) for head in heads)])


def parse_anchor_lines(lines: Iterable[str], *, source: str) -> tuple[list[Anchor], list[str]]:
    """Anchor lines (``TIME HEAD HEAD …``); blank lines and ``#`` comments are skipped.

    Returns the heads read and what was wrong with the rest, one problem per line or head that
    cannot be read (a head is read without its time if the line's time cannot be): an anchor file
    may be damaged, and its other heads must still be checked.
    """
    anchors, problems = [], []
    for number, line in enumerate(lines, start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{source}:{number}"
        anchored_at: str | None = fields[0]
        try:
            datetime.fromisoformat(fields[0])
        except ValueError:
            anchored_at = None
            problems.append(f"{where}: {_shown(fields[0])!r} is not the time the line was recorded (ISO 8601), "
                            "which an anchor line starts with as `armarius audit anchor` writes it: the anchor "
                            "file was changed, and its line's heads are checked without the time")
        for head in fields[1:]:
            try:
                anchors.append(parse_head(head, source=where, anchored_at=anchored_at))
            except InvalidInput as error:
                problems.append(f"{error.message} The head was not checked: the anchor file was changed or damaged.")
    return anchors, problems


def read_anchor_file(path: Path) -> tuple[list[Anchor], list[str]]:
    """The heads of an anchor file, and what was wrong with the lines that cannot be read (a byte that is not
    UTF-8 spoils only its line)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        raise InvalidInput(f"The anchor file {path} cannot be read.", field="anchors") from None
    return parse_anchor_lines(text.splitlines(), source=str(path))


def append_anchor_line(path: Path, line: str) -> None:
    """Append one line and flush it to disk before returning."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    with os.fdopen(descriptor, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
