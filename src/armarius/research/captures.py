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

from armarius import files
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
    target = folder / capture.file_name
    try:
        try:
            _create(folder, target, capture.content)
        except FileNotFoundError:  # the folder's first capture
            folder.mkdir(parents=True, exist_ok=True)
            _create(folder, target, capture.content)
    except FileExistsError:  # written before, or by another writer just now: the same bytes, unless torn
        if not _intact(target, capture):
            files.write_atomically(target, capture.content)
    return target


def _create(folder: Path, target: Path, content: bytes) -> None:
    """A complete new file at ``target`` (FileExistsError if there is one): written under a temporary name,
    then linked, which fails where a file is."""
    temporary = folder / f".{target.name}.{secrets.token_hex(6)}.tmp"
    try:
        with open(temporary, "xb") as handle:
            handle.write(content)
        os.link(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _intact(path: Path, capture: Capture) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(capture.content) + 1) == capture.content
    except FileNotFoundError:
        return False


def verify_capture(path: Path) -> bool:
    """True when the file's bytes hash to the id in its name."""
    return hashlib.sha256(path.read_bytes()).hexdigest() == path.name.removesuffix(".json")
