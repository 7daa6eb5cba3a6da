"""Captures: every research answer, content-addressed and append-only.

A capture is the canonical JSON of ``{format: 1, schema, request, origin, result}``; its id is the
SHA-256 of exactly those bytes, and the file ``<id>.json`` holds exactly those bytes, so anyone can
verify a capture by hashing the file, with no repository or database at hand. Writing the same
capture again changes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from armarius.canonical import canonical_json

FORMAT_VERSION = 1
SCHEMA = "project-query-v1"


@dataclass(frozen=True)
class Capture:
    id: str
    content: bytes

    @property
    def file_name(self) -> str:
        return f"{self.id}.json"


def build_capture(request: dict[str, Any], origin: dict[str, Any], result: dict[str, Any]) -> Capture:
    document = {"format": FORMAT_VERSION, "schema": SCHEMA, "request": request, "origin": origin, "result": result}
    content = canonical_json(document).encode("utf-8")
    return Capture(hashlib.sha256(content).hexdigest(), content)


def write_capture(folder: Path, capture: Capture) -> Path:
    """Write ``<id>.json`` once: a complete file appears atomically, an intact one is never touched.

    Like the SQLite store (``synchronous=NORMAL``) the file is not forced to disk: a crash of the
    process loses nothing, a power loss may lose the newest captures (the store's copy is the
    record). A file a power loss left torn no longer holds its bytes; it is replaced the next time
    the same capture is written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / capture.file_name
    if _intact(target, capture):
        return target
    temporary = folder / f".{capture.id}.{secrets.token_hex(4)}.tmp"
    with open(temporary, "xb") as handle:
        handle.write(capture.content)
    try:
        os.link(temporary, target)  # fails if another writer got there first: theirs is the same bytes
    except FileExistsError:
        if not _intact(target, capture):
            os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return target


def _intact(path: Path, capture: Capture) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(capture.content) + 1) == capture.content
    except FileNotFoundError:
        return False


def verify_capture(path: Path) -> bool:
    """True when the file's bytes hash to the id in its name."""
    return hashlib.sha256(path.read_bytes()).hexdigest() == path.name.removesuffix(".json")
