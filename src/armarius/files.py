"""Files written by atomic replace, so that a reader finds the old file or the new one, never a torn one.

A new content goes to a temporary file in the same folder (``.<name>.<random>.tmp``: hidden, and never
named like the file it replaces), is forced to disk, renamed over the file, and the folder is forced to
disk too. A writer killed before the rename leaves the old file intact and its temporary file behind
(which :func:`temporary_files` finds); one killed after it leaves the new file. Evidence units' canonical
files and repair receipts are written this way.

Given a ``root`` (the evidence folder), a path below it is reached one component at a time, each opened
relative to its parent without following a symbolic link (``O_NOFOLLOW``, ``dir_fd``): a link put into the
folders (by anyone who can write there) would otherwise send a read or a write anywhere the server may go.
A reader takes a link, or anything but a regular file, for no file; a writer refuses it (``conflict``,
naming the path below the root). The root itself is the deployment's and may be a link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from armarius.errors import Conflict

#: What opening a folder component gives where a link, a file or anything else is: (a link with O_NOFOLLOW,
#: not a folder).
_NOT_A_FOLDER = (errno.ELOOP, errno.ENOTDIR)


def write_atomically(path: Path, content: bytes, *, mode: int | None = None, root: Path | None = None) -> None:
    """Replace ``path`` with ``content``. ``mode``: exactly these permissions, set before the first byte is
    written (a file holding a secret is never readable by others, not even for a moment); otherwise the
    umask decides, as for any new file. ``root``: ``path`` is below it and reached without following links."""
    if root is not None:
        with open_folder(root, path.parent, create=True) as descriptor:
            assert descriptor is not None  # made when missing
            refuse_other_than_file(root, path, descriptor)
            temporary = _write_temporary(path.parent, path.name, content, mode, descriptor)
            try:
                os.replace(temporary.name, path.name, src_dir_fd=descriptor, dst_dir_fd=descriptor)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary.name, dir_fd=descriptor)
                raise
            os.fsync(descriptor)
        return
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


def read_bytes(path: Path, *, root: Path | None = None, limit: int | None = None) -> bytes | None:
    """The file's bytes (at most ``limit`` of them); None when there is no file. ``root``: ``path`` is below it
    and reached without following links; a link (at any component) or anything but a regular file is no file."""
    if root is None:
        try:
            with path.open("rb") as handle:
                return handle.read(-1 if limit is None else limit)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
    with open_folder(root, path.parent) as folder:
        found = None if folder is None else read_regular(folder, path.name, limit=limit)
        return None if found is None else found.content


class Found(NamedTuple):
    """What :func:`read_regular` read of a regular file: its first bytes (all of them without a limit) and
    its size."""

    content: bytes
    size: int


def read_regular(folder: int, name: str, *, limit: int | None = None) -> Found | None:
    """The regular file ``name`` in ``folder`` (a descriptor), not followed if a link: at most ``limit`` of
    its bytes (a reader that knows how long the file must be reads one more, never an endless stream) and its
    size; None when it is missing, a link or anything but a regular file (a FIFO, a folder, a device)."""
    with open_regular(folder, name) as handle:
        if handle is None:
            return None
        return Found(handle.read(-1 if limit is None else limit), os.fstat(handle.fileno()).st_size)


@contextlib.contextmanager
def open_regular(folder: int, name: str) -> Iterator[BinaryIO | None]:
    """The regular file ``name`` in ``folder`` (a descriptor) open for reading until the block ends; None when
    it is missing, a link or anything but a regular file. Opening never waits (a FIFO put there included)."""
    descriptor = _open_file(folder, name)
    if descriptor is None:
        yield None
        return
    with _if_regular(descriptor) as handle:
        yield handle


@contextlib.contextmanager
def open_named_regular(path: Path) -> Iterator[BinaryIO | None]:
    """The regular file at ``path``, a path a person named (links followed), open for reading until the block
    ends; None when it is anything but a regular file. Opening never waits (a FIFO included)."""
    with _if_regular(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)) as handle:
        yield handle


@contextlib.contextmanager
def _if_regular(descriptor: int) -> Iterator[BinaryIO | None]:
    """``descriptor`` as a file to read if it is a regular file; else None, and it is closed (a folder, which
    opens for reading, a FIFO, a device)."""
    try:
        regular = stat.S_ISREG(os.fstat(descriptor).st_mode)
    except BaseException:
        os.close(descriptor)
        raise
    if not regular:
        os.close(descriptor)
        yield None
        return
    with os.fdopen(descriptor, "rb") as handle:
        yield handle


def _open_file(folder: int, name: str) -> int | None:
    """The file ``name`` in ``folder`` opened for reading, not followed if a link; None when it is missing or
    a link. O_NONBLOCK: a FIFO put there does not hold the reader (the caller takes it for no file)."""
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno in (*_NOT_A_FOLDER, errno.ENXIO):
            return None
        raise


def temporary_files(path: Path, *, root: Path | None = None) -> list[str]:
    """Temporary files an interrupted writer of ``path`` left behind. ``root``: as for :func:`read_bytes`."""
    prefix = f".{path.name}."
    if root is None:
        folder = path.parent
        return sorted(found.name for found in folder.glob(f".{path.name}.*.tmp")) if folder.is_dir() else []
    with open_folder(root, path.parent) as descriptor:
        if descriptor is None:
            return []
        return sorted(name for name in os.listdir(descriptor) if name.startswith(prefix) and name.endswith(".tmp")
                      and len(name) > len(prefix) + len(".tmp"))


@contextlib.contextmanager
def open_folder(root: Path, folder: Path, *, create: bool = False, durable: bool = True,
                strict: bool = False, mode: int = 0o777) -> Iterator[int | None]:
    """A descriptor of ``folder`` (below ``root``), reached one component at a time without following links,
    until the block ends; None when it is missing or not a folder. ``create``: missing folders are made (with
    ``mode``, less the umask), each made durable in its parent (unless not ``durable``: for files that are not
    forced to disk either); a link where a folder belongs refuses (conflict), a file fails (FileExistsError),
    or refuses too when ``strict``."""
    parts = folder.relative_to(root).parts
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{folder} is not a plain path below {root}")
    if create:
        _make_folder(root)
    try:
        descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        if create:
            raise
        yield None
        return
    try:
        for depth, part in enumerate(parts):
            child = _open_child(descriptor, part, create=create, durable=durable, mode=mode)
            if child is None:
                if create:
                    _refuse_link(descriptor, part, Path(*parts[:depth + 1]), strict=strict)
                os.close(descriptor)
                descriptor = -1
                break
            os.close(descriptor)
            descriptor = child
        yield None if descriptor < 0 else descriptor
    finally:
        if descriptor >= 0:
            os.close(descriptor)


def _open_child(parent: int, name: str, *, create: bool, durable: bool = True, mode: int = 0o777) -> int | None:
    """The folder ``name`` in ``parent``, not followed if a link; None when it is missing (and not to be made),
    a link or anything else."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            return None
    except OSError as error:
        if error.errno in _NOT_A_FOLDER:
            return None
        raise
    with contextlib.suppress(FileExistsError):  # made by another writer just now
        os.mkdir(name, mode, dir_fd=parent)
    if durable:
        os.fsync(parent)
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as error:
        if error.errno in _NOT_A_FOLDER:
            return None
        raise


def _refuse_link(parent: int, name: str, relative: Path, *, strict: bool = False) -> None:
    """Where a folder must be made: a link refuses (conflict); anything else fails as making the folder would
    (FileExistsError), or refuses too when ``strict``."""
    if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
        raise _refused(relative, "is a symbolic link, not a folder")
    if strict:
        raise _refused(relative, "is not a folder")
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(relative))


def refuse_other_than_file(root: Path, path: Path, folder: int) -> None:
    """A writer replaces a regular file or makes a new one; a link (whose target a reader would be shown) or
    anything else is left alone and refused (conflict, naming ``path`` below ``root``; ``folder`` is the
    descriptor of its folder). Nothing there, or a regular file: nothing to refuse."""
    try:
        found = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(found.st_mode):
        raise _refused(path.relative_to(root),
                       "is a symbolic link" if stat.S_ISLNK(found.st_mode) else "is not a regular file")


def _refused(relative: Path, what: str) -> Conflict:
    return Conflict(f"{relative} in the evidence folder {what}: Armarius does not follow links there nor write "
                    "over anything but its own files. Remove it (after checking who put it there), then try again.",
                    path=str(relative))


def _write_temporary(folder: Path, name: str, content: bytes, mode: int | None = None,
                     descriptor: int | None = None) -> Path:
    """A new temporary file in ``folder`` holding ``content``, forced to disk. ``descriptor``: the folder's,
    opened without following links, in which it is made (``folder`` then only names it)."""
    temporary = folder / f".{name}.{secrets.token_hex(6)}.tmp"
    where = temporary if descriptor is None else temporary.name
    try:
        with os.fdopen(os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                               0o600 if mode is not None else 0o666, dir_fd=descriptor), "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(where, dir_fd=descriptor)
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
