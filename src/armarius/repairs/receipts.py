"""Receipt files: the store's receipt of a repair, mirrored into its session's evidence folder.

``<evidence dir>/<workspace>/sessions/<session>/repairs/<repair>.json`` holds the canonical JSON of the
receipt (see :func:`armarius.repairs.views.receipt`), so a session can be reviewed without the database.
The store is the record: a file is rewritten from it after every transition, and a write that failed is
a pending operation until a retry completes it.

Writers of one session's receipts take turns (an advisory lock on the folder) and each reads the store
after it got its turn, so the last file written holds the newest state, never an older one.

The folders below the evidence folder are reached without following symbolic links (:mod:`armarius.files`):
a link put there refuses the write (conflict), and the receipt stays a pending operation.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from armarius import files


def receipt_folder(evidence_dir: Path, workspace: str, session_id: int) -> Path:
    return evidence_dir / workspace / "sessions" / str(session_id) / "repairs"


class ReceiptFolder(NamedTuple):
    """A session's receipt folder and the evidence folder it is below."""

    evidence_dir: Path
    path: Path


@contextlib.contextmanager
def writing_receipts(evidence_dir: Path, folder: Path) -> Iterator[ReceiptFolder]:
    """Hold the turn of ``folder`` (below ``evidence_dir``) until the block ends (the folder is made if
    missing; a link on the way refuses)."""
    with files.open_folder(evidence_dir, folder, create=True) as descriptor:
        assert descriptor is not None  # made when missing
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield ReceiptFolder(evidence_dir, folder)  # closing the descriptor releases the lock


def write_receipt(folder: ReceiptFolder, repair_id: int, content: bytes) -> Path:
    """Replace ``<repair>.json`` with ``content`` atomically (a complete file or the previous one, never a
    torn one); an intact file is left as it is."""
    target = folder.path / f"{repair_id}.json"
    # Read one byte more than it should hold at most: a file larger than that differs, whatever its size.
    if files.read_bytes(target, root=folder.evidence_dir, limit=len(content) + 1) != content:
        files.write_atomically(target, content, root=folder.evidence_dir)
    return target
