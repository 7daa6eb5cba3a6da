"""Captures: every research answer, content-addressed and append-only.

A capture is the canonical JSON of ``{format: 1, schema, request, origin, result}``; its id is the
SHA-256 of exactly those bytes, and the file ``<id>.json`` holds exactly those bytes, so anyone can
verify a capture by hashing the file, with no repository or database at hand. Writing the same
capture again changes nothing.

Capture files and spare files are reached from a root (the evidence folder) one path component at a time
without following a symbolic link (:mod:`armarius.files`), and opened without following one and without
waiting (``O_NOFOLLOW | O_NONBLOCK``): a link or anything but a folder on the way, or a link or anything but a
regular file where a capture file belongs, is no file to a reader and refused by a writer (``conflict``, naming
the path below the root). A reader that knows how long a capture is reads at most one byte more.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import logging
import os
import secrets
import stat
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from armarius import files
from armarius.canonical import canonical_json
from armarius.errors import Conflict

FORMAT_VERSION = 1
SCHEMA = "project-query-v1"

logger = logging.getLogger("armarius.research")


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


def write_capture(folder: Path, capture: Capture, spares: SpareFiles | None = None, *,
                  root: Path | None = None) -> Path:
    """Write ``<id>.json`` once: a complete file appears atomically, an intact one is never touched.
    ``spares``: empty files made ahead of need, one of which becomes the new file. ``root``: the folder
    ``folder`` is below (by default ``folder`` itself), from which it is reached without following links: a
    link or anything but a folder on the way, or a link or anything but a regular file where the capture file
    belongs, refuses (conflict, naming the path below ``root``) and nothing is written.

    Like the SQLite store (``synchronous=NORMAL``) the file is not forced to disk: a crash of the
    process loses nothing, a power loss may lose the newest captures (the store's copy is the
    record). A file a power loss left torn no longer holds its bytes; it is replaced the next time
    the same capture is written.
    """
    root = folder if root is None else root
    target = folder / capture.file_name
    with files.open_folder(root, folder, create=True, durable=False, strict=True) as descriptor:
        assert descriptor is not None  # made when missing
        try:
            if _create(descriptor, capture, spares):
                return target
        except FileExistsError:  # written before, or by another writer just now: the same bytes, unless torn
            if _intact(root, target, descriptor, capture):
                return target
    files.write_atomically(target, capture.content, root=root)  # which refuses what _intact refused, if put meanwhile
    return target


def _create(folder: int, capture: Capture, spares: SpareFiles | None) -> bool:
    """A complete new capture file in ``folder`` (a descriptor; FileExistsError if there is anything of its
    name): written into a spare file or under a temporary name, then linked, which fails where anything is.
    False in the unlikely case that the temporary file was taken from under the writer (then nothing is linked)."""
    if spares is not None and (spare := spares.take()) is not None:
        try:
            if spares.fill_and_link(spare, capture.content, folder, capture.file_name):
                return True
            # else another process removed the spare, or put something else there: the file is created here
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            spares.close()  # the spares are on another file system than this folder: none from now on
    temporary = f".{capture.file_name}.{secrets.token_hex(6)}.tmp"
    return _fill_and_link(folder, temporary, os.O_CREAT | os.O_EXCL, capture.content, folder, capture.file_name)


def _fill_and_link(folder: int, name: str, flags: int, content: bytes, target_folder: int, target: str) -> bool:
    """Write ``content`` into the file ``name`` of ``folder`` and link it as ``target`` in ``target_folder``
    (descriptors); ``name`` is gone afterwards. False (nothing linked) when ``name`` is missing, or is
    anything but a regular file of one name: a link, a FIFO, a folder, another's file linked there."""
    try:
        descriptor = os.open(name, flags | os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666,
                             dir_fd=folder)
    except FileNotFoundError:
        return False
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise  # FileExistsError included: a new file's name is taken, which is not ``name``'s to remove
        descriptor = -1
    try:
        if descriptor < 0:
            return False
        with open(descriptor, "wb") as handle:
            found = os.fstat(descriptor)
            if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
                return False
            if found.st_size:
                handle.truncate(0)
            handle.write(content)
        os.link(name, target, src_dir_fd=folder, dst_dir_fd=target_folder, follow_symlinks=False)
        return True
    finally:
        with contextlib.suppress(OSError):  # gone already, or a folder put there: left
            os.unlink(name, dir_fd=folder)


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

    def __init__(self, folder: Path, keep: int = 16, *, root: Path | None = None) -> None:
        self.folder = folder
        #: The folder ``folder`` is reached from without following links (by default its parent: the pool's
        #: folder is never a link followed, lest its sweep remove files elsewhere).
        self.root = folder.parent if root is None else root
        self.keep = keep
        self._closed = False
        self._forget()
        _POOLS.add(self)

    def _forget(self) -> None:
        """Start afresh (also in a forked child: the parent's spares and thread are the parent's)."""
        self._ready: collections.deque[str] = collections.deque()  # names in the folder
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._filling = threading.Lock()
        self._thread: threading.Thread | None = None
        self._swept = False
        self._refused = False

    def take(self) -> str | None:
        """The name of an empty file to fill and link (:meth:`fill_and_link`), or None when none is ready (then
        the refill is under way)."""
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
        folder cannot be written, nor where a link or anything but a folder is on its way from the root (said
        once in the log): writers then create their files themselves."""
        with self._filling, contextlib.suppress(OSError):  # a full disk, the folder removed: tried again later
            try:
                with files.open_folder(self.root, self.folder, create=True, durable=False, strict=True) as folder:
                    assert folder is not None  # made when missing
                    if not self._swept:
                        self._swept = True
                        self._remove_stale(folder)
                    while len(self._ready) < self.keep and not self._closed:
                        name = f"{os.getpid()}-{secrets.token_hex(8)}"
                        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                         0o666, dir_fd=folder))
                        self._ready.append(name)
            except Conflict as refusal:
                if not self._refused:
                    self._refused = True
                    logger.warning("No spare files are made: %s", refusal.message)

    def fill_and_link(self, spare: str, content: bytes, folder: int, name: str) -> bool:
        """Write ``content`` into the spare ``spare`` (from :meth:`take`) and link it as ``name`` in ``folder``
        (a descriptor): FileExistsError if anything has that name; False (nothing written there) when the
        spare is gone or is no longer an empty file of the pool's. The spare is used up either way."""
        with files.open_folder(self.root, self.folder) as spares:
            return spares is not None and _fill_and_link(spares, spare, 0, content, folder, name)

    def close(self) -> None:
        """Stop making spares and remove the ones not handed out."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wanted.set()
        if thread is not None:
            thread.join()
        names = [self._ready.popleft() for _ in range(len(self._ready))]
        if names:
            with contextlib.suppress(OSError), files.open_folder(self.root, self.folder) as folder:
                for name in names if folder is not None else ():
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=folder)

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

    def _remove_stale(self, folder: int) -> None:
        """Remove the regular files of ``folder`` (the pool's, a descriptor) older than :attr:`STALE_SECONDS`."""
        before = time.time() - self.STALE_SECONDS
        with os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < before:
                        os.unlink(entry.name, dir_fd=folder)


#: Every pool of this process, for a forked child to forget.
_POOLS: weakref.WeakSet[SpareFiles] = weakref.WeakSet()


def _forget_pools() -> None:
    for pool in _POOLS:
        pool._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def _intact(root: Path, target: Path, folder: int, capture: Capture) -> bool:
    """Whether the file ``target`` (in ``folder``, a descriptor) holds the capture; a link or anything but a
    regular file there refuses (conflict). Read up to one byte past the capture's length."""
    found = files.read_regular(folder, target.name, limit=len(capture.content) + 1)
    if found is None:
        files.refuse_other_than_file(root, target, folder)
        return False  # removed meanwhile
    return found.content == capture.content


def capture_digest(folder: int, name: str) -> tuple[str, int] | None:
    """The SHA-256 (hex) and the size of the regular file ``name`` in ``folder`` (a descriptor), read in
    pieces; None when it is missing, a link or anything but a regular file."""
    with files.open_regular(folder, name) as handle:
        if handle is None:
            return None
        digest = hashlib.sha256()
        size = 0
        while piece := handle.read(1 << 20):
            digest.update(piece)
            size += len(piece)
        return digest.hexdigest(), size


def verify_capture(path: Path, *, root: Path | None = None) -> bool:
    """True when ``path`` is a regular file whose bytes hash to the id in its name. ``root``: ``path`` is below
    it (by default its folder is the root) and reached without following links."""
    root = path.parent if root is None else root
    with files.open_folder(root, path.parent) as folder:
        digest = None if folder is None else capture_digest(folder, path.name)
    return digest is not None and digest[0] == path.name.removesuffix(".json")
