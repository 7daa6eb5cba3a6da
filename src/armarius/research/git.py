"""Read-only access to git objects of one commit, through the git command line.

git runs with an argument vector (never a shell), a fixed clean environment (no system or user
configuration, no replace objects, literal pathspecs, no prompts), ``--no-pager``, ``--`` before
every pathspec and patterns given with ``-e``, and only ever against a resolved full commit hash:
the working tree, the index and the branches are never consulted. Text conversion is off, and
``git grep`` (the only command here whose answer attributes change) runs in a private, empty bare
repository that reads this repository's objects: no ``.gitattributes`` of the working tree or the
index, no ``info/attributes`` and no repository configuration reach it, so a file is binary to a
search exactly when a NUL is in its first 8,000 bytes, as for ``source.read``.
Output is read as a stream within the time limit, so a caller may stop git as soon as it has what
it needs and memory never grows with the size of an answer it does not keep, nor with the length of
a line (a line longer than ``LINE_BYTES`` is kept as its start: see :class:`LineStart`). Failures and
time-outs become ``research_unavailable``; a git message never reaches a caller.
"""

from __future__ import annotations

import codecs
import fcntl
import hashlib
import logging
import os
import re
import select
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import closing, suppress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from armarius.errors import ResearchUnavailable, echo
from armarius.research.paths import is_under, segments_problem, shown_path

logger = logging.getLogger("armarius.research")

BLOB_MODES = ("100644", "100755")
SYMLINK_MODE, GITLINK_MODE = "120000", "160000"

_CLEAN_ENVIRONMENT = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_LITERAL_PATHSPECS": "1",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_ATTR_NOSYSTEM": "1",
    # A partial clone's missing objects are never fetched from its promisor remote (git 2.44 and later; older
    # ones are held back by protocol.allow=never below).
    "GIT_NO_LAZY_FETCH": "1",
    "HOME": os.devnull,
    "LC_ALL": "C",
}
#: Repository settings that could change what a command prints, or make git reach out; pinned on every call.
#: ``protocol.allow=never`` refuses every transport: a partial clone's git would otherwise fetch a missing
#: object from its promisor remote as it reads it, writing into the repository and running what the
#: repository's configuration names for fetching (``remote.*.uploadpack``, ``core.sshCommand``, a credential
#: helper); a query that needs such an object is research_unavailable instead.
_PINNED_CONFIG = (
    "-c", "core.quotePath=false", "-c", "core.fsmonitor=false", "-c", "grep.lineNumber=false",
    "-c", "grep.patternType=fixed", "-c", "grep.fullName=false", "-c", "grep.column=false",
    "-c", "grep.fallbackToNoIndex=false", "-c", "color.ui=false", "-c", "core.attributesFile=" + os.devnull,
    "-c", "protocol.allow=never",
)
#: Bytes read from git at a time (and the pipe size asked for, so git blocks less often).
_CHUNK = 1 << 20
_STDERR_KEPT = 4096
#: Pathspec bytes per git command (Linux allows 2 MiB of arguments and environment together).
_ARGUMENT_BYTES = 256 * 1024
#: One run of ``git grep -z -n`` records of the same file: ``name NUL line NUL text LF``, repeated.
#: A name holding a newline does not match and is read record by record instead.
_GREP_RUN = re.compile(rb"([^\0\n]*)\0[^\n]*\n(?:\1\0[^\n]*\n)*")
#: Bytes of a line kept whole; of a longer line only these first bytes are kept. More than an answer
#: can show: four bytes for each of ``max_line_length`` characters (at most 100,000), and some to spare.
LINE_BYTES = 1 << 20
#: The types ``git cat-file`` names an object by.
_OBJECT_TYPES = frozenset({"blob", "tree", "commit", "tag"})
#: The most bytes of a ``git cat-file --batch`` header line (``id type size``).
_HEADER_BYTES = 256


class NotABlob(Exception):
    """The object that a tree entry of a file's mode (100644 or 100755) names is no blob but a tree, a commit or a
    tag: a crafted tree (``git fsck`` refuses it, ``git ls-tree`` shows it as a blob all the same), which
    ``git cat-file blob`` fails on and ``git grep`` reads as the file's content. ``kind`` is the object's type."""

    def __init__(self, blob: str, kind: str) -> None:
        super().__init__(f"{blob} is a {kind}, not a blob")
        self.blob, self.kind = blob, kind


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    kind: str
    blob: str
    path: str


@dataclass(frozen=True)
class TreeIndex:
    """One commit's tree: entries by exact name, its folders, and the names that are not UTF-8 by the
    form answers show them in (when no other name shows the same)."""

    entries: dict[str, TreeEntry]
    folders: frozenset[str]
    shown: dict[str, TreeEntry]

    @classmethod
    def of(cls, entries: Sequence[TreeEntry]) -> TreeIndex:
        by_path = {entry.path: entry for entry in entries}
        folders = {entry.path[:slash] for entry in entries for slash in _slashes(entry.path)}
        shown: dict[str, list[TreeEntry]] = {}
        for entry in entries:
            if (display := shown_path(entry.path)) != entry.path:
                shown.setdefault(display, []).append(entry)
        unique = {display: found[0] for display, found in shown.items()
                  if len(found) == 1 and display not in by_path and display not in folders}
        return cls(by_path, frozenset(folders), unique)

    def find(self, path: str) -> TreeEntry | None:
        """The entry of this exact name, or of the name not in UTF-8 that an answer showed as ``path``."""
        return self.entries.get(path) or self.shown.get(path)


def _slashes(path: str) -> Iterator[int]:
    slash = path.find("/")
    while slash >= 0:
        yield slash
        slash = path.find("/", slash + 1)


class LineStart:
    """A line that arrives in pieces, in bounded memory: the whole line while it is at most
    ``LINE_BYTES`` long; past that (``cut``) its first ``LINE_BYTES`` bytes and whether the whole
    line is UTF-8 (call :meth:`end` after its last piece)."""

    __slots__ = ("_decoder", "cut", "head", "utf8")

    def __init__(self, piece: bytes | memoryview = b"") -> None:
        self.head = bytearray()
        self.cut, self.utf8 = False, True
        self._decoder: codecs.IncrementalDecoder | None = None
        self.add(piece)

    def add(self, piece: bytes | memoryview) -> None:
        """The next piece of the line (a view is not kept: its bytes are copied or only checked)."""
        if not self.cut:
            room = LINE_BYTES - len(self.head)
            if len(piece) <= room:
                self.head += piece
                return
            view = memoryview(piece)
            self.head += view[:room]
            self.cut, self._decoder = True, codecs.getincrementaldecoder("utf-8")()
            self._check(self.head)
            piece = view[room:]
        self._check(piece)

    def end(self) -> None:
        self._check(b"", final=True)

    def _check(self, piece: bytes | bytearray | memoryview, *, final: bool = False) -> None:
        if self._decoder is None or not self.utf8:
            return
        try:
            self._decoder.decode(piece, final)
        except UnicodeDecodeError:
            self.utf8 = False


@dataclass(frozen=True)
class GrepLine:
    path: str
    line: int
    #: The line's bytes, or the start of a line longer than ``LINE_BYTES``.
    text: bytes | LineStart


class GrepRun:
    """Matching lines of one file that git printed one after another (a file's lines may come in
    several runs). ``count`` is known at once; the lines are only parsed when asked for."""

    __slots__ = ("_data", "_end", "_skip", "_start", "count", "path")

    def __init__(self, path: str, count: int, data: bytes, start: int, end: int, skip: int) -> None:
        self.path, self.count = path, count
        self._data, self._start, self._end, self._skip = data, start, end, skip

    def lines(self) -> Iterator[GrepLine]:
        for record in self._data[self._start:self._end - 1].split(b"\n"):
            number, _, text = record[self._skip:].partition(b"\0")
            yield GrepLine(self.path, int(number), text)


class _LongRun(GrepRun):
    """One matching line longer than ``LINE_BYTES``: its start, kept as git wrote it."""

    __slots__ = ("_line",)

    def __init__(self, line: GrepLine) -> None:
        super().__init__(line.path, 1, b"", 0, 0, 0)
        self._line = line

    def lines(self) -> Iterator[GrepLine]:
        yield self._line


class GitRepository:
    def __init__(self, path: Path, *, timeout: float) -> None:
        executable = shutil.which("git")
        if executable is None:
            raise ResearchUnavailable("git is not installed on the server.")
        self.path, self.timeout, self._git = path, timeout, executable
        self._sha256: dict[str, str] = {}
        #: Objects that file entries name and that are no blob, by id: their type (see :class:`NotABlob`).
        self._not_blobs: dict[str, str] = {}
        #: The prefixes (None: the whole tree) of each commit whose file entries' objects were all checked.
        self._checked: dict[str, list[str | None]] = {}
        self._types_lock = threading.Lock()
        self._environment = {**_CLEAN_ENVIRONMENT, "PATH": str(Path(executable).parent)}
        self._bare: str | None = None
        self._bare_environment: dict[str, str] = {}
        self._bare_lock = threading.Lock()
        #: Removes the bare repository's folder and lets go of its lock (when this object goes, or at exit).
        self._bare_removal: weakref.finalize[Any, GitRepository] | None = None

    def _stream(self, arguments: Sequence[str], *, stdin: bytes = b"", ok_codes: tuple[int, ...] = (0,),
                bare: bool = False) -> Generator[bytes, None, None]:
        """git's standard output, chunk by chunk, all within the time limit. Closing the generator
        early stops git; its exit status is checked only when the output was read to the end.
        ``bare``: a search, in the private bare repository that reads this one's objects (see
        :meth:`_bare_git`), which must also write nothing to its standard error: ``git grep`` that cannot
        read a blob (one a partial clone never fetched) says so there, and still exits 0 or 1."""
        where, environment = self._bare_git() if bare else (str(self.path), self._environment)
        command = [self._git, "--no-pager", "-C", where, *_PINNED_CONFIG, *arguments]
        deadline = time.monotonic() + self.timeout
        try:
            process = subprocess.Popen(command, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
        except OSError:
            logger.exception("git could not be started")
            raise ResearchUnavailable("git could not be started on the server.") from None
        try:
            stderr = yield from self._pump(process, stdin, deadline)
            returncode = _exit_status(process, deadline)
            if returncode is None:
                raise self._timed_out()
            if returncode not in ok_codes or (bare and stderr):
                logger.warning("git %s failed (%s): %s", arguments[0], returncode,
                               stderr[:500].decode("utf-8", "replace"))
                raise ResearchUnavailable("The source repository could not be read; the operator was told in the log.")
        finally:
            if process.returncode is None:
                process.kill()
                process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()

    def _pump(self, process: subprocess.Popen[bytes], stdin: bytes, deadline: float
              ) -> Generator[bytes, None, bytes]:
        """Feed ``stdin`` and yield standard output until git closes it; the start of its standard error."""
        assert process.stdout is not None
        assert process.stderr is not None
        stderr = bytearray()
        with suppress(OSError):  # a pipe size is a wish (a per-user limit may refuse it)
            fcntl.fcntl(process.stdout.fileno(), fcntl.F_SETPIPE_SZ, _CHUNK)
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            selector.register(process.stderr, selectors.EVENT_READ)
            unsent = memoryview(stdin)
            if process.stdin is not None:
                os.set_blocking(process.stdin.fileno(), False)
                selector.register(process.stdin, selectors.EVENT_WRITE)
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._timed_out()
                for key, _events in selector.select(remaining):
                    if key.fileobj is process.stdin:
                        unsent = unsent[_write(key.fd, unsent):]
                        if not unsent:
                            selector.unregister(process.stdin)
                            process.stdin.close()
                        continue
                    data = os.read(key.fd, _CHUNK)
                    if not data:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is process.stdout:
                        yield data
                    else:
                        stderr += data[:_STDERR_KEPT - len(stderr)]
        return bytes(stderr)

    def _timed_out(self) -> ResearchUnavailable:
        return ResearchUnavailable(f"The source did not answer within {self.timeout:g} seconds.",
                                   timeout_seconds=self.timeout)

    def _run(self, arguments: Sequence[str], *, stdin: bytes = b"", ok_codes: tuple[int, ...] = (0,)) -> bytes:
        return b"".join(self._stream(arguments, stdin=stdin, ok_codes=ok_codes))

    def _bare_git(self) -> tuple[str, dict[str, str]]:
        """(folder, environment) of a private, empty bare repository whose object store is this repository's
        (``GIT_OBJECT_DIRECTORY``, so its alternates count too, from a work tree, a linked worktree or a bare
        repository alike). It is made once, in a temporary folder removed with this object or when the process
        exits normally (and made again if that folder went away); one a process left behind (killed, or a
        worker that ended without clean-up) is removed by the next one made (:func:`_remove_orphans`). Being
        bare and new, it has no working tree, index, ``info/attributes``, refs or configuration of the
        repository's: git reads no attributes there, whatever the repository holds."""
        with self._bare_lock:
            if self._bare is None or not os.path.isfile(os.path.join(self._bare, "HEAD")):
                if self._bare_removal is not None:  # its folder went away: its lock goes too
                    self._bare_removal()
                output = self._run(["rev-parse", "--git-path", "objects", "--show-object-format"])
                objects, _, object_format = output.decode("utf-8", "surrogateescape").rstrip("\n").rpartition("\n")
                environment = {**self._environment, "GIT_OBJECT_DIRECTORY": str(self.path / objects)}
                folder, held = _new_search_folder()
                try:
                    _remove_orphans(os.path.dirname(folder))
                    subprocess.run([self._git, "--no-pager", "init", "--quiet", "--bare", "--template=",
                                    f"--object-format={object_format}", folder],
                                   env=self._environment, capture_output=True, check=True, timeout=self.timeout)
                except (OSError, subprocess.SubprocessError):
                    _remove_held(folder, held)
                    raise _no_search_folder() from None
                self._bare_removal = weakref.finalize(self, _remove_held, folder, held)
                self._bare, self._bare_environment = folder, environment
            return self._bare, self._bare_environment

    def prefix(self) -> str:
        """The folder's place inside its repository's work tree: '' at the top, in a bare repository or outside."""
        return self._run(["rev-parse", "--show-prefix"], ok_codes=(0, 128)).decode("utf-8", "replace").strip()

    def object_type(self, name: str) -> str | None:
        output = self._run(["cat-file", "-t", name], ok_codes=(0, 1, 128))
        return output.decode("ascii", "replace").strip() or None

    def tree(self, commit: str) -> tuple[TreeEntry, ...]:
        """Every entry of the commit's tree, recursively (cached: a commit never changes)."""
        return _cached_tree(self, commit)

    def _list_tree(self, commit: str) -> tuple[TreeEntry, ...]:
        try:
            return tuple(_tree_entries(self._run(["ls-tree", "-r", "-z", "--full-tree", commit])))
        except ResearchUnavailable as failure:
            if "timeout_seconds" not in failure.details:
                self._refuse_a_folder_of_another_type(commit)
            raise

    def _refuse_a_folder_of_another_type(self, commit: str) -> None:
        """``git ls-tree -r`` stops at a folder entry (mode 040000) whose object is no tree (a blob, a commit or a
        tag: a crafted tree, which git fsck refuses), and so does every query of the source. Name that entry: with
        ``-t`` git shows each folder before it reads it, so the last folder shown is the one it could not read.
        Nothing is raised when that is not the cause (a tree object that is missing, say)."""
        output = self._run(["ls-tree", "-r", "-t", "-z", "--full-tree", commit], ok_codes=(0, 1, 128))
        folders = [entry for entry in _tree_entries(output) if entry.kind == "tree"]
        if folders and (kind := self.object_type(folders[-1].blob)) in _OBJECT_TYPES - {"tree"}:
            raise _malformed(f"a folder named {echo(shown_path(folders[-1].path))} whose object is a {kind}",
                             "git cannot list it")

    def not_blobs(self, commit: str, prefix: str | None = None) -> dict[str, str]:
        """The objects that the commit's file entries under ``prefix`` (every one when None) name and that are no
        blob (see :class:`NotABlob`), by id: their type. Searches leave those entries out. One
        ``git cat-file --batch-check`` for a commit and prefix not covered yet; the answer is remembered (an
        object's type never changes). An object that is missing is no answer here (reading it fails)."""
        with self._types_lock:
            covered = self._checked.get(commit, [])
            if any(done is None or (prefix is not None and is_under(prefix, done)) for done in covered):
                return dict(self._not_blobs)
        blobs = [entry.blob for entry in self.tree(commit) if entry.mode in BLOB_MODES and is_under(entry.path, prefix)]
        return self._remember_not_blobs(self._object_types(blobs), covered=(commit, prefix))

    def _object_types(self, objects: Sequence[str]) -> dict[str, str]:
        """The type of each of these objects that is there and is no blob (``git cat-file --batch-check``)."""
        wanted = list(dict.fromkeys(objects))
        if not wanted:
            return {}
        request = "".join(f"{name}\n" for name in wanted).encode("ascii")
        lines = self._run(["cat-file", "--batch-check"], stdin=request).decode("ascii", "replace").split("\n")
        if len(lines) != len(wanted) + 1 or lines[-1]:
            raise ResearchUnavailable("The source repository answered out of order.")
        found = {}
        for name, line in zip(wanted, lines, strict=False):
            kind, _size = _object_header(line, name, missing_ok=True)
            if kind not in ("blob", "missing"):
                found[name] = kind
        return found

    def grep_counts(self, commit: str, pattern: str, *, whole_word: bool, pathspec: str | None
                    ) -> Generator[tuple[str, int], None, None]:
        """(path, matching lines) per file, in git's order, read while ``git grep -c`` writes them.
        Close the iterator to stop git."""
        arguments = [*_grep_options(whole_word), "-c", "-e", pattern, commit, "--"]
        if pathspec:
            arguments.append(pathspec)
        with closing(self._stream(arguments, ok_codes=(0, 1), bare=True)) as chunks:
            yield from _grep_counts(chunks, commit.encode("ascii") + b":")

    def grep(self, commit: str, pattern: str, *, whole_word: bool, pathspec: str | None = None,
             files: Sequence[str] | None = None) -> Generator[GrepRun, None, None]:
        """Matching lines under ``pathspec`` (or the whole tree), or of exactly these ``files``, as runs
        of lines read while ``git grep -n`` writes them. Close the iterator to stop git."""
        batches = _batches(files) if files is not None else iter([[pathspec] if pathspec else []])
        for batch in batches:  # no files, no batch: an empty list of files never means the whole tree
            arguments = [*_grep_options(whole_word), "-n", "-e", pattern, commit, "--", *batch]
            with closing(self._stream(arguments, ok_codes=(0, 1), bare=True)) as chunks:
                yield from _grep_runs(chunks, commit.encode("ascii") + b":")

    def blob_chunks(self, blob_id: str) -> Generator[bytes, None, None]:
        """A blob's content as git writes it, after ``git cat-file --batch`` said what the object is: an object
        that is no blob raises :class:`NotABlob` before any content (``git cat-file blob`` would fail on a tree
        or a commit, and show the blob a tag points to as if it were this one). Close the generator to stop git."""
        with closing(self._stream(["cat-file", "--batch"], stdin=f"{blob_id}\n".encode("ascii"))) as chunks:
            header, remaining = b"", -1  # remaining: content bytes still to come, once the header is read
            for chunk in chunks:
                content = chunk
                if remaining < 0:
                    header += chunk
                    newline = header.find(b"\n")
                    if newline < 0:
                        if len(header) > _HEADER_BYTES:
                            raise ResearchUnavailable("The source repository answered out of order.")
                        continue
                    kind, remaining = _object_header(header[:newline].decode("ascii", "replace"), blob_id)
                    if kind != "blob":
                        self._remember_not_blobs({blob_id: kind})
                        raise NotABlob(blob_id, kind)
                    content, header = header[newline + 1:], b""
                piece = content if len(content) <= remaining else content[:remaining]  # not the newline after it
                remaining -= len(piece)
                if piece:
                    yield piece
            if remaining != 0:
                raise ResearchUnavailable("The source repository answered in a form that could not be read.")

    def _remember_not_blobs(self, found: dict[str, str], *, covered: tuple[str, str | None] | None = None
                            ) -> dict[str, str]:
        """Remember objects that are no blob (all forgotten past _SHA256_MEMORY of them); ``covered``: the commit
        and prefix whose file entries were all checked (all forgotten past _COMMITS_CHECKED commits). What is
        remembered now."""
        with self._types_lock:
            if (len(self._not_blobs) + len(found) > _SHA256_MEMORY
                    or (covered is not None and len(self._checked) >= _COMMITS_CHECKED)):
                self._not_blobs.clear()
                self._checked.clear()
            self._not_blobs.update(found)
            if covered is not None:
                commit, prefix = covered
                checked = self._checked.setdefault(commit, [])
                checked[:] = [None] if prefix is None else [*checked[1 - _PREFIXES_CHECKED:], prefix]
            return dict(self._not_blobs)

    def tree_index(self, commit: str) -> TreeIndex:
        """The commit's tree, indexed (cached)."""
        return _cached_index(self, commit)

    def blob_sha256(self, blob_ids: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
        """SHA-256 of each blob's content: one ``git cat-file --batch`` for those not yet known, hashed
        as it streams (a blob id names one content forever, so the answers are remembered). Second, the ids
        whose object is no blob (see :class:`NotABlob`) with their type: they have no digest."""
        not_blobs = dict(self._not_blobs)
        missing = [blob for blob in dict.fromkeys(blob_ids) if blob not in self._sha256 and blob not in not_blobs]
        found: dict[str, str] = {}
        if missing:
            request = "".join(f"{blob}\n" for blob in missing).encode("ascii")
            with closing(self._stream(["cat-file", "--batch"], stdin=request)) as chunks:
                found, others = _batch_digests(chunks, missing)
            not_blobs.update(others)
            self._remember_not_blobs(others)
        digests = {blob: found.get(blob) or self._sha256[blob] for blob in blob_ids if blob not in not_blobs}
        if len(self._sha256) + len(found) > _SHA256_MEMORY:
            self._sha256.clear()
        self._sha256.update(found)
        return digests, {blob: not_blobs[blob] for blob in blob_ids if blob in not_blobs}


_SHA256_MEMORY = 200_000
#: Commits whose checked prefixes are remembered (more, and they are all forgotten), and prefixes per commit.
_COMMITS_CHECKED, _PREFIXES_CHECKED = 64, 256


def _exit_status(process: subprocess.Popen[bytes], deadline: float) -> int | None:
    """git's exit status once it ends, which it does right after closing its output; None if it has not by the
    deadline. Its end is waited for on a process descriptor (pidfd), which wakes the wait as it happens:
    ``Popen.wait`` with a time limit polls, sleeping half a millisecond, then one, two… between looks, which cost
    every git call about a millisecond."""
    try:
        descriptor = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        with suppress(subprocess.TimeoutExpired):
            return process.wait(max(deadline - time.monotonic(), 0.001))
        return None
    try:
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        ended = poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
    finally:
        os.close(descriptor)
    return process.wait() if ended else None


def _write(fd: int, data: memoryview) -> int:
    """Bytes of ``data`` written to a non-blocking pipe (all of them when git stopped reading)."""
    try:
        return os.write(fd, data[:_CHUNK])
    except BlockingIOError:
        return 0
    except BrokenPipeError:  # git stopped reading: what it says about that comes on stdout and stderr
        return len(data)


_SEARCH_FOLDER_PREFIX = "armarius-git-"
#: Held (flock) by the process that made a search folder, for as long as it may use it.
_HELD = "armarius.lock"


_MAKING_PREFIX = ".armarius-git-making-"


def _new_search_folder() -> tuple[str, int]:
    """A new temporary folder for a search repository, and the lock this process holds on it for as long as
    it may use it (the lock goes with the process, however it ends). It is made and locked under another
    name, then renamed: every folder :func:`_remove_orphans` looks at is locked from the start."""
    try:
        making = tempfile.mkdtemp(prefix=_MAKING_PREFIX)
    except OSError:
        raise _no_search_folder() from None
    held = -1
    try:
        held = os.open(os.path.join(making, _HELD), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        folder = os.path.join(os.path.dirname(making), _SEARCH_FOLDER_PREFIX + os.path.basename(making)[len(
            _MAKING_PREFIX):])
        os.rename(making, folder)
    except OSError:
        _remove_held(making, held)
        raise _no_search_folder() from None
    return folder, held


def _no_search_folder() -> ResearchUnavailable:
    logger.exception("git could not make the bare repository to search in")
    return ResearchUnavailable("The source repository could not be read; the operator was told in the log.")


def _remove_held(folder: str, held: int) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    if held >= 0:
        os.close(held)


def _remove_orphans(parent: str) -> None:
    """Remove the search folders whose process ended without removing its own (killed): those whose lock
    nobody holds. A folder another process still uses, or another user's, is left alone."""
    try:
        entries = [entry for entry in os.scandir(parent)
                   if entry.name.startswith(_SEARCH_FOLDER_PREFIX) and entry.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        try:
            held = os.open(os.path.join(entry.path, _HELD), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # being made (its lock comes first thing), someone else's, or not ours at all
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(held)
            continue  # in use
        shutil.rmtree(entry.path, ignore_errors=True)
        os.close(held)


def _batches(paths: Sequence[str]) -> Iterator[list[str]]:
    """The paths in order, in groups that fit a command line comfortably."""
    batch: list[str] = []
    size = 0
    for path in paths:
        cost = len(path.encode("utf-8", "surrogateescape")) + 1
        if batch and size + cost > _ARGUMENT_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(path)
        size += cost
    if batch:
        yield batch


def _grep_options(whole_word: bool) -> list[str]:
    """``git grep -F`` over a commit's blobs: binary files skipped (in the bare repository without
    attributes: a NUL in the first 8,000 bytes), no text conversion, NUL after names."""
    return ["grep", "-z", "-I", "-F", "--no-textconv", "--no-recurse-submodules", *(["-w"] if whole_word else [])]


def _grep_counts(chunks: Iterator[bytes], name_prefix: bytes) -> Iterator[tuple[str, int]]:
    """``name NUL count LF`` records of ``git grep -z -c``; a name may hold a newline."""
    leftover = pending = b""
    for chunk in chunks:
        block = leftover + chunk
        end = block.rfind(b"\n") + 1
        leftover = block[end:]
        for piece in block[:end].split(b"\n")[:-1]:
            if b"\0" not in piece:  # a name with a newline in it: the record goes on
                pending += piece + b"\n"
                continue
            raw_name, _, count = (pending + piece).partition(b"\0")
            pending = b""
            if not count.isdigit():
                raise ResearchUnavailable("The source repository answered in a form that could not be read.")
            yield _decode_name(raw_name, name_prefix), int(count)
    if leftover or pending:
        raise ResearchUnavailable("The source repository answered in a form that could not be read.")


def _grep_runs(chunks: Iterator[bytes], name_prefix: bytes) -> Iterator[GrepRun]:
    """Runs of ``git grep -z -n`` records from its output chunks. Records of a name holding a newline
    come one at a time; everything else a run per file and chunk, found by one regular expression.
    A record whose line is longer than ``LINE_BYTES`` comes alone too, with the start of its line
    (its end is looked for in each new chunk only, so the work stays linear in the output)."""
    leftover = pending = name = b""
    path = ""
    long: tuple[bytes, bytes, LineStart] | None = None  # name, line number and text of an unfinished long record
    for chunk in chunks:
        start = 0  # where the chunk's records begin (after the end of a long record)
        if long is not None:
            newline = chunk.find(b"\n")
            long[2].add(chunk if newline < 0 else memoryview(chunk)[:newline])
            if newline < 0:
                continue
            raw_name, number, text = long
            text.end()
            if not number.isdigit():
                raise ResearchUnavailable("The source repository answered in a form that could not be read.")
            yield _LongRun(GrepLine(_decode_name(raw_name, name_prefix), int(number), text))
            long, start = None, newline + 1
        block = leftover + chunk if leftover else chunk[start:]  # a long record leaves no leftover
        end = block.rfind(b"\n") + 1
        leftover = block[end:]
        position = 0
        while position < end:
            match = None if pending else _GREP_RUN.match(block, position, end)
            if match is None:
                stop = block.index(b"\n", position) + 1
                piece, position = block[position:stop], stop
                if b"\0" not in piece:  # a name with a newline in it: the record goes on
                    pending += piece
                    continue
                raw_name, _, rest = (pending + piece).partition(b"\0")
                pending = b""
                yield GrepRun(_decode_name(raw_name, name_prefix), 1, rest, 0, len(rest), 0)
                continue
            if match.group(1) != name:
                name = match.group(1)
                path = _decode_name(name, name_prefix)
            stop = match.end()
            yield GrepRun(path, block.count(b"\n", position, stop), block, position, stop, len(name) + 1)
            position = stop
        if len(leftover) > LINE_BYTES:
            long = _long_record(pending + leftover)
            if long is not None:
                leftover = pending = b""
    if leftover or pending or long is not None:
        raise ResearchUnavailable("The source repository answered in a form that could not be read.")


def _long_record(start: bytes) -> tuple[bytes, bytes, LineStart] | None:
    """(name, line number, text so far) of a record that has come as far as its text; None while its
    name and number are still coming."""
    name_end = start.find(b"\0")
    number_end = start.find(b"\0", name_end + 1) if name_end >= 0 else -1
    if number_end < 0:
        return None
    return start[:name_end], start[name_end + 1:number_end], LineStart(memoryview(start)[number_end + 1:])


def _decode_name(raw: bytes, prefix: bytes) -> str:
    return raw.removeprefix(prefix).decode("utf-8", "surrogateescape")


def _batch_digests(chunks: Iterator[bytes], blobs: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """SHA-256 of each blob in ``git cat-file --batch`` output (``id type size LF content LF``), without
    holding a whole blob; second, the type of each object that is no blob, whose content is stepped over (so
    the objects after it are read in step)."""
    digests: dict[str, str] = {}
    others: dict[str, str] = {}
    wanted = iter(blobs)
    header = b""
    hasher: hashlib._Hash | None = None  # None while stepping over an object that is no blob
    blob, kind, remaining = "", "", -1  # content bytes still to come, plus its closing newline; -1: a header
    for chunk in chunks:
        view, position = memoryview(chunk), 0
        while position < len(chunk):
            if remaining < 0:
                newline = chunk.find(b"\n", position)
                if newline < 0:
                    header += chunk[position:]
                    if len(header) > _HEADER_BYTES:
                        raise ResearchUnavailable("The source repository answered out of order.")
                    break
                blob = next(wanted, "")
                kind, size = _object_header((header + chunk[position:newline]).decode("ascii", "replace"), blob)
                header, position = b"", newline + 1
                hasher, remaining = hashlib.sha256() if kind == "blob" else None, size + 1
                continue
            take = min(len(chunk) - position, remaining)
            if hasher is not None:
                hasher.update(view[position:position + min(take, remaining - 1)])
            position += take
            remaining -= take
            if remaining == 0:
                if hasher is None:
                    others[blob] = kind
                else:
                    digests[blob] = hasher.hexdigest()
                remaining = -1
    if remaining >= 0 or header or len(digests) + len(others) != len(blobs):
        raise ResearchUnavailable("The source repository answered out of order.")
    return digests, others


def _object_header(line: str, name: str, *, missing_ok: bool = False) -> tuple[str, int]:
    """(type, size) of a ``git cat-file --batch`` or ``--batch-check`` header for the object ``name``:
    ``id type size``, or ``id missing`` (type ``missing``, size 0, when ``missing_ok``; otherwise the source
    cannot be read: a repository that lacks an object its tree names is broken, or a partial clone)."""
    fields = line.split(" ")
    if fields == [name, "missing"]:
        if missing_ok:
            return "missing", 0
        logger.warning("git cat-file: the object %s is missing from the repository", name)
        raise ResearchUnavailable("The source repository could not be read; the operator was told in the log.")
    if len(fields) != 3 or fields[0] != name or fields[1] not in _OBJECT_TYPES or not fields[2].isdigit():
        raise ResearchUnavailable("The source repository answered out of order.")
    return fields[1], int(fields[2])


def _tree_entries(output: bytes) -> Iterable[TreeEntry]:
    """The entries of ``git ls-tree -z`` output."""
    for record in output.split(b"\0"):
        if not record:
            continue
        meta, _, raw_path = record.partition(b"\t")
        mode, kind, blob = meta.decode("ascii").split(" ")
        yield TreeEntry(mode, kind, blob, raw_path.decode("utf-8", "surrogateescape"))


@lru_cache(maxsize=64)
def _cached_tree(repository: GitRepository, commit: str) -> tuple[TreeEntry, ...]:
    entries = repository._list_tree(commit)
    _refuse_malformed(entries)
    return entries


def _refuse_malformed(entries: Sequence[TreeEntry]) -> None:
    """Refuse a tree that git's own checks (``git fsck``) refuse and a crafted repository can still hold: two
    entries of one name (a hit would be credited to the other's blob, and one of them could never be read), or
    a name that is empty, '.', '..' or '.git' (listed, it could never be given back to source.read). No answer
    from such a tree could be trusted, so the source is unavailable until another commit is pinned."""
    seen: set[str] = set()
    for entry in entries:
        duplicate = entry.path in seen
        if duplicate or segments_problem(entry.path) is not None:
            raise _malformed(f"{'two entries' if duplicate else 'an entry'} named {echo(shown_path(entry.path))}",
                             "no answer from it could be trusted")
        seen.add(entry.path)


def _malformed(what: str, why: str) -> ResearchUnavailable:
    """The refusal of every query of a source whose pinned tree holds ``what``, which ``git fsck`` refuses."""
    logger.warning("the pinned tree holds %s, which git fsck refuses: the source's queries are refused", what)
    return ResearchUnavailable(f"The pinned commit's tree is malformed ({what}, which git's own checks refuse): "
                               f"{why}, so its queries are refused. The operator must pin a commit whose tree "
                               "`git fsck` accepts.")


@lru_cache(maxsize=64)
def _cached_index(repository: GitRepository, commit: str) -> TreeIndex:
    return TreeIndex.of(repository.tree(commit))
