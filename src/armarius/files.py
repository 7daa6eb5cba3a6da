"""Files written by atomic replace, so that a reader finds the old file or the new one, never a torn one.

A new content goes to a temporary file in the same folder (``.<name>.<random>.tmp``: hidden, and never
named like the file it replaces), is forced to disk, renamed over the file, and the folder is forced to
disk too. A writer killed before the rename leaves the old file intact and its temporary file behind
(which :func:`temporary_files` finds); one killed after it leaves the new file. Evidence units' canonical
files and repair receipts are written this way.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def write_atomically(path: Path, content: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``content``. ``mode``: exactly these permissions, set before the first byte is
    written (a file holding a secret is never readable by others, not even for a moment); otherwise the
    umask decides, as for any new file."""
    folder = path.parent
    _make_folder(folder)
    temporary = _write_temporary(folder, path.name, content, mode)
    try:
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    _sync_folder(folder)


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes; None when there is no file."""
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def temporary_files(path: Path) -> list[str]:
    """Temporary files an interrupted writer of ``path`` left behind."""
    folder = path.parent
    return sorted(found.name for found in folder.glob(f".{path.name}.*.tmp")) if folder.is_dir() else []


def _write_temporary(folder: Path, name: str, content: bytes, mode: int | None = None) -> Path:
    temporary = folder / f".{name}.{secrets.token_hex(6)}.tmp"
    try:
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if mode is not None else 0o666),
                       "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    return temporary


def _make_folder(folder: Path) -> None:
    """Create the folder and its missing parents, each made durable in its own parent."""
    missing = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    folder.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        _sync_folder(created.parent)


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
