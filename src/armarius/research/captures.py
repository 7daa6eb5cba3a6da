"""Captures: every research answer, content-addressed and append-only.

A capture is the canonical JSON of ``{format: 1, schema, request, origin, result}``; its id is the
SHA-256 of exactly those bytes, and the file ``<id>.json`` holds exactly those bytes, so anyone can
verify a capture by hashing the file, with no repository or database at hand. Writing the same
capture again changes nothing.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import os
import secrets
import threading
import time
import weakref
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


def write_capture(folder: Path, capture: Capture, spares: SpareFiles | None = None) -> Path:
    """Write ``<id>.json`` once: a complete file appears atomically, an intact one is never touched.
    ``spares``: empty files made ahead of need, one of which becomes the new file.

    Like the SQLite store (``synchronous=NORMAL``) the file is not forced to disk: a crash of the
    process loses nothing, a power loss may lose the newest captures (the store's copy is the
    record). A file a power loss left torn no longer holds its bytes; it is replaced the next time
    the same capture is written.
    """
    target = folder / capture.file_name
    try:
        try:
            _create(folder, target, capture.content, spares)
        except FileNotFoundError:  # the folder's first capture
            folder.mkdir(parents=True, exist_ok=True)
            _create(folder, target, capture.content, spares)
    except FileExistsError:  # written before, or by another writer just now: the same bytes, unless torn
        if not _intact(target, capture):
            files.write_atomically(target, capture.content)
    return target


def _create(folder: Path, target: Path, content: bytes, spares: SpareFiles | None) -> None:
    """A complete new file at ``target`` (FileExistsError if there is one): written into a spare file or
    under a temporary name, then linked, which fails where a file is."""
    if spares is not None and (spare := spares.take()) is not None:
        try:
            _fill_and_link(spare, os.O_WRONLY | os.O_TRUNC, content, target)
            return
        except FileNotFoundError:
            if not folder.is_dir():
                raise  # the folder's first capture: the caller makes it and tries again
            # else another process removed the spare: the file is created here
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            spares.close()  # the spares are on another file system than this folder: none from now on
    _fill_and_link(folder / f".{target.name}.{secrets.token_hex(6)}.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                   content, target)


def _fill_and_link(path: Path, flags: int, content: bytes, target: Path) -> None:
    """Write ``content`` into the file at ``path`` and link it at ``target``; ``path`` is gone afterwards."""
    try:
        with open(os.open(path, flags | os.O_CLOEXEC, 0o666), "wb") as handle:
            handle.write(content)
        os.link(path, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class SpareFiles:
    """Empty files made ahead of need in one folder, so that writing a capture creates no file on a query's
    path.

    Creating a file (its inode) is the costly step of writing a small one on some file systems: from
    0.02 to 0.7 ms of kernel time, depending on the folder, on this project's test machines, against
    0.03 ms to fill an existing empty file and link it under its name. A thread of this process keeps up
    to :attr:`keep` empty files in ``folder``, which must be on the captures' file system (they are
    linked from there); each is handed out once, and a forked process makes its own. A spare another
    process removed meanwhile costs nothing but the saving: the writer creates its file itself, as it
    does while none is ready. Spares left by a process that ended without :meth:`close` are removed by
    the next pool started on the folder once they are an hour old.
    """

    #: A spare file older than this, in a pool that is starting, belongs to a process that is gone, or to
    #: an idle one that can do without it.
    STALE_SECONDS = 3600

    def __init__(self, folder: Path, keep: int = 16) -> None:
        self.folder = folder
        self.keep = keep
        self._closed = False
        self._forget()
        _POOLS.add(self)

    def _forget(self) -> None:
        """Start afresh (also in a forked child: the parent's spares and thread are the parent's)."""
        self._ready: collections.deque[Path] = collections.deque()
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._filling = threading.Lock()
        self._thread: threading.Thread | None = None
        self._swept = False

    def take(self) -> Path | None:
        """An empty file to fill and link, or None when none is ready (then the refill is under way)."""
        if self._thread is None:
            self._start()
        try:
            spare = self._ready.popleft()
        except IndexError:
            spare = None
        if len(self._ready) <= self.keep // 2:
            self._wanted.set()
        return spare

    def fill(self) -> None:
        """Make spares up to :attr:`keep` now, in the calling thread (the pool's own thread does it whenever
        they run low); on the first fill, remove the stale spares of others first. Nothing is made where the
        folder cannot be written: writers then create their files themselves."""
        with self._filling, contextlib.suppress(OSError):  # a full disk, the folder removed: tried again later
            self.folder.mkdir(parents=True, exist_ok=True)
            if not self._swept:
                self._swept = True
                self._remove_stale()
            while len(self._ready) < self.keep and not self._closed:
                path = self.folder / f"{os.getpid()}-{secrets.token_hex(8)}"
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
                self._ready.append(path)

    def close(self) -> None:
        """Stop making spares and remove the ones not handed out."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wanted.set()
        if thread is not None:
            thread.join()
        while self._ready:
            with contextlib.suppress(OSError):
                os.unlink(self._ready.popleft())

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._refill, name="armarius-spare-files", daemon=True)
                self._thread.start()

    def _refill(self) -> None:
        while not self._closed:
            self._wanted.wait()
            self._wanted.clear()
            self.fill()

    def _remove_stale(self) -> None:
        before = time.time() - self.STALE_SECONDS
        for entry in os.scandir(self.folder):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < before:
                    os.unlink(entry.path)


#: Every pool of this process, for a forked child to forget.
_POOLS: weakref.WeakSet[SpareFiles] = weakref.WeakSet()


def _forget_pools() -> None:
    for pool in _POOLS:
        pool._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def _intact(path: Path, capture: Capture) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(capture.content) + 1) == capture.content
    except FileNotFoundError:
        return False


def verify_capture(path: Path) -> bool:
    """True when the file's bytes hash to the id in its name."""
    return hashlib.sha256(path.read_bytes()).hexdigest() == path.name.removesuffix(".json")
