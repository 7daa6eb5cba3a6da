"""Receipt files: the store's receipt of a repair, mirrored into its session's evidence folder.

``<evidence dir>/<workspace>/sessions/<session>/repairs/<repair>.json`` holds the canonical JSON of the
receipt (see :func:`armarius.repairs.views.receipt`), so a session can be reviewed without the database.
The store is the record: a file is rewritten from it after every transition, and a write that failed is
a pending operation until a retry completes it.

Writers of one session's receipts take turns (an advisory lock on the folder) and each reads the store
after it got its turn, so the last file written holds the newest state, never an older one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from armarius import files


def receipt_folder(evidence_dir: Path, workspace: str, session_id: int) -> Path:
    return evidence_dir / workspace / "sessions" / str(session_id) / "repairs"


@contextlib.contextmanager
def writing_receipts(folder: Path) -> Iterator[Path]:
    """Hold the folder's turn until the block ends (the folder is made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield folder
    finally:
        os.close(descriptor)  # releases the lock


def write_receipt(folder: Path, repair_id: int, content: bytes) -> Path:
    """Replace ``<repair>.json`` with ``content`` atomically (a complete file or the previous one, never a
    torn one); an intact file is left as it is."""
    target = folder / f"{repair_id}.json"
    if files.read_bytes(target) != content:
        files.write_atomically(target, content)
    return target
