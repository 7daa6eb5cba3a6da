"""Source queries over the git objects of one pinned commit.

Every answer says what it covered: ``next_offset`` when there is another page, ``omitted_files``
when the file limit cut the answer, ``truncated_lines`` when long lines were shortened, and
``complete`` only when nothing at all was cut. Search is lexical: a hit proves neither a
definition, a registration nor an execution, and each search answer says so.

A search reads git's output as git writes it and stops git once the page and ``COUNT_AHEAD`` hits
after it are counted (``total_hits`` is then null and ``total_hits_at_least`` says how many were
counted). An early page comes from one pass of ``git grep -n``; from ``ONE_PASS_OFFSET`` on, a
search counts per file first (``git grep -c``) and then reads the page's files only, so a deep
page costs a count, not a parse of every earlier hit. Memory holds one page whatever the number of
hits. ``source.read`` streams its blob the same way.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from armarius.errors import InvalidInput, NotFound, ResearchUnavailable, echo
from armarius.research.config import GitSource, SourceLimits, source_outage
from armarius.research.git import (
    BLOB_MODES,
    GITLINK_MODE,
    SYMLINK_MODE,
    GrepLine,
    GrepRun,
    LineStart,
    NotABlob,
    TreeEntry,
    TreeIndex,
)
from armarius.research.paths import check_tree_path, is_under, named, shown_path

LEXICAL_NOTE = (
    "Lexical match only: a hit shows that the text occurs at this commit; it proves neither a definition, "
    "a registration nor an execution. Read the code around a hit before concluding anything."
)
REGISTRATION_NOTE = (
    "Occurrences of the symbol as a whole word: starting points for checking where it is registered. "
    + LEXICAL_NOTE
)
SEARCH_ABSENCE = ("No occurrence at this commit within this predicate (a complete search): evidence of absence for "
                  "this snapshot and pattern only.")
FILES_ABSENCE = ("No path at this commit contains this substring (a complete listing): evidence of absence for this "
                 "snapshot and substring only.")
#: Hits counted after a page before git is stopped; past them the total is reported as a lower bound.
COUNT_AHEAD = 10_000
#: Below this offset a search reads git's matching lines once, skipping to the page as they come; from
#: it on, counting per file first (``git grep -c``) is cheaper than reading every line before the page.
ONE_PASS_OFFSET = 20_000
_SYMBOL = re.compile(r"[^\W\d]\w*")
_SCHEMA_SUFFIX = ".sql"
#: git calls a blob binary when its first 8,000 bytes hold a NUL (and so do searches and reads).
_BINARY_PROBE = 8000


def _literal(value: str, field: str) -> str:
    if any(char in value for char in "\x00\n\r"):
        raise InvalidInput(f"{field} is one line of text without NUL.", field=field)
    return value


def _symbol(value: str) -> str:
    if not _SYMBOL.fullmatch(value):
        raise InvalidInput("symbol is one identifier: letters, digits and '_', not starting with a digit.",
                           field="symbol")
    return value


def _text(raw: bytes | LineStart, limit: int) -> tuple[str, bool, bool]:
    """(text, truncated, not_utf8) of one line (without a CRLF's CR), cut to ``limit`` characters. A line
    longer than ``LINE_BYTES`` comes as its start (``cut``), whose first ``4 * limit + 4`` bytes hold more
    than ``limit`` characters (of four bytes at most): the same answer as from the whole line."""
    if isinstance(raw, LineStart):
        if raw.cut:
            return raw.head[:4 * limit + 4].decode("utf-8", "replace")[:limit], True, not raw.utf8
        raw = bytes(raw.head)
    raw = raw.removesuffix(b"\r")
    try:
        text, not_utf8 = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, not_utf8 = raw.decode("utf-8", "replace"), True
    if len(text) > limit:
        return text[:limit], True, not_utf8
    return text, False, not_utf8


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _origin(source: GitSource) -> dict[str, str]:
    return {"kind": "git", "source": source.name, "url": source.url, "commit": source.commit}


def _page_bounds(arguments: dict[str, Any], most: int) -> tuple[int, int]:
    return arguments.get("offset", 0), min(arguments.get("limit", most), most)


def run(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    """One query's answer. A repository or pinned commit that is not there (moved away, not cloned or fetched
    yet), or a pin that names no commit, is refused before the query runs, and a failure of git is named for
    what is missing when that is its cause: ``research_unavailable``, which blocks the query's session."""
    kind = arguments["kind"]
    handler: Callable[[GitSource, dict[str, Any]], dict[str, Any]] = _HANDLERS[kind]
    if (outage := source_outage(source)) is not None:
        raise outage
    try:
        answer = handler(source, arguments)
    except ResearchUnavailable as failure:
        if "timeout_seconds" in failure.details or (outage := source_outage(source, look_again=True)) is None:
            raise
        raise outage from None
    return {"kind": kind, "origin": _origin(source), **answer}


# --- source.files ---------------------------------------------------------------------------------------------


def _files(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    limits = source.limits
    substring = _literal(arguments["substring"], "substring")
    offset, limit = _page_bounds(arguments, limits.max_files)
    matches = [entry for entry in source.repository.tree(source.commit) if substring in shown_path(entry.path)]
    files: list[dict[str, Any]] = []
    size = 0
    for entry in matches[offset:offset + limit]:
        listed = _file(entry)
        cost = _size(str(listed["path"]))
        if files and size + cost > limits.max_bytes:  # a page holds at least one entry, so paging moves on
            break
        size += cost
        files.append(listed)
    digests, not_blobs = source.repository.blob_sha256([listed["blob"] for listed in files if "blob" in listed])
    for listed in files:
        if (blob := listed.get("blob")) in not_blobs:
            del listed["blob"]
            listed["skipped"] = f"{_listed_as_a_file(not_blobs[blob])}: not a readable source file"
        elif blob is not None:
            listed["blob_sha256"] = digests[blob]
    more = offset + len(files) < len(matches)
    answer: dict[str, Any] = {
        "files": files, "total": len(matches), "next_offset": offset + len(files) if more else None,
        "bytes": size, "complete": not more and offset == 0,
    }
    if not matches and answer["complete"]:
        answer["absence"] = FILES_ABSENCE
    return answer


def _file(entry: TreeEntry) -> dict[str, Any]:
    if entry.mode == SYMLINK_MODE:
        return {**named(entry.path), "skipped": "symlink: not a readable source file"}
    if entry.mode == GITLINK_MODE:
        return {**named(entry.path), "skipped": "submodule: not a readable source file"}
    return {**named(entry.path), "blob": entry.blob}


def _listed_as_a_file(kind: str) -> str:
    """What an entry of a file's mode is whose object is a ``kind`` (a tree, a commit or a tag), not a blob."""
    return f"listed as a file, but its object is a {kind} (a malformed tree entry, which git's own checks refuse)"


# --- source.search, source.symbol, source.registration, source.schema -----------------------------------------


def _search(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    text = _literal(arguments["text"], "text")
    return _grep(source, arguments, text, whole_word=False, note=LEXICAL_NOTE)


def _symbol_search(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    return _grep(source, arguments, _symbol(arguments["symbol"]), whole_word=True, note=LEXICAL_NOTE)


def _registration(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    return _grep(source, arguments, _symbol(arguments["symbol"]), whole_word=True, note=REGISTRATION_NOTE)


def _schema(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    text = _literal(arguments["text"], "text")
    return _grep(source, arguments, text, whole_word=False, note=LEXICAL_NOTE,
                 accept=lambda path: path.lower().endswith(_SCHEMA_SUFFIX))


@dataclass(frozen=True)
class _Slice:
    """Lines ``first`` to ``stop`` (exclusive, counted within the file) of one file belong to the page."""

    path: str
    first: int
    stop: int


@dataclass
class _Page:
    """The hits of one page, in git's order, until the byte limit cuts it (``cut``); files past the
    file limit are ``omitted``."""

    limits: SourceLimits
    tree: TreeIndex
    hits: list[dict[str, Any]] = field(default_factory=list)
    files: set[str] = field(default_factory=set)
    omitted: set[str] = field(default_factory=set)
    truncated: int = 0
    size: int = 0
    cut: bool = False

    def take(self, run: GrepRun, first: int, stop: int, *, counted: int = 0) -> bool:
        """Lines ``first`` to ``stop`` of the run's file (whose lines before this run number
        ``counted``); False once the page is full."""
        if self.cut:
            return False
        if run.path not in self.files and len(self.files) >= self.limits.max_files:
            self.omitted.add(run.path)
            return True
        for index, line in enumerate(run.lines(), start=counted):
            if index >= stop:
                break
            if index >= first and not self._add(line):
                return False
        return True

    def _add(self, line: GrepLine) -> bool:
        text, cut, not_utf8 = _text(line.text, self.limits.max_line_length)
        names = named(line.path)
        cost = _size(text) + _size(str(names["path"]))
        if self.hits and self.size + cost > self.limits.max_bytes:  # a page holds at least one hit
            self.cut = True
            return False
        hit: dict[str, Any] = {**names, "line": line.line, "text": text, "blob": self.tree.entries[line.path].blob}
        if cut:
            hit["truncated"] = True
            self.truncated += 1
        if not_utf8:
            hit["not_utf8"] = True
        self.files.add(line.path)
        self.size += cost
        self.hits.append(hit)
        return True


@dataclass
class _Search:
    """One search's request and what it found so far: the page and the hits counted (``seen``)."""

    source: GitSource
    pattern: str
    whole_word: bool
    prefix: str | None
    accept: Callable[[str], bool]
    offset: int
    page_end: int
    page: _Page
    #: The objects of file entries under the prefix that are no blob (see :class:`NotABlob`): never searched.
    not_blobs: dict[str, str]
    seen: int = 0
    finished: bool = True

    def searchable(self, path: str) -> bool:
        # git grep over a tree searches regular files only; keep it that way whatever git does next. An entry of
        # a file's mode whose object is a commit or a tag is no file: git grep reads that object's text all the same.
        entry = self.page.tree.entries.get(path)
        return (entry is not None and entry.mode in BLOB_MODES and entry.blob not in self.not_blobs
                and self.accept(path) and is_under(path, self.prefix))

    def counted(self, count: int) -> bool:
        """Count a file's hits; False once enough are known (there is a next page, and at least this many)."""
        self.seen += count
        if self.seen > self.page_end + COUNT_AHEAD:
            self.finished = False
        return self.finished

    def in_one_pass(self) -> None:
        """``git grep -n`` over the tree: the page taken while counting. Cheap while the offset is small."""
        repository, last_path, wanted = self.source.repository, None, False
        runs = repository.grep(self.source.commit, self.pattern, whole_word=self.whole_word, pathspec=self.prefix)
        with closing(runs):
            for run in runs:
                if run.path != last_path:
                    last_path, wanted, before = run.path, self.searchable(run.path), self.seen
                if not wanted:
                    continue
                if self.seen < self.page_end and self.seen + run.count > self.offset:
                    self.page.take(run, self.offset - before, self.page_end - before, counted=self.seen - before)
                if not self.counted(run.count):
                    return

    def in_two_passes(self) -> None:
        """``git grep -c`` to count up to the page and past it, then ``git grep -n`` of the page's files."""
        repository, window = self.source.repository, []
        counts = repository.grep_counts(self.source.commit, self.pattern, whole_word=self.whole_word,
                                        pathspec=self.prefix)
        with closing(counts):
            for path, count in counts:
                if not self.searchable(path):
                    continue
                if self.seen < self.page_end and self.seen + count > self.offset:
                    window.append(_Slice(path, max(self.offset - self.seen, 0), min(self.page_end - self.seen, count)))
                if not self.counted(count):
                    break
        shown = window[:self.page.limits.max_files]
        self.page.omitted.update(piece.path for piece in window[len(shown):])
        if shown:
            self._fill(shown)

    def _fill(self, window: list[_Slice]) -> None:
        wanted = {piece.path: piece for piece in window}
        done: dict[str, int] = dict.fromkeys(wanted, 0)  # lines of each file read so far
        runs = self.source.repository.grep(self.source.commit, self.pattern, whole_word=self.whole_word,
                                           files=list(wanted))
        with closing(runs):
            for run in runs:
                piece = wanted.get(run.path)
                if piece is None:
                    continue
                if not self.page.take(run, piece.first, piece.stop, counted=done[run.path]):
                    return
                done[run.path] += run.count
                if piece is window[-1] and done[run.path] >= piece.stop:
                    break  # the page is whole: git may stop
        if any(done[path] < piece.stop for path, piece in wanted.items()):
            raise ResearchUnavailable("The source repository answered two searches of the same commit differently; "
                                      "try again, and tell the operator if it persists.")


def _grep(source: GitSource, arguments: dict[str, Any], pattern: str, *, whole_word: bool, note: str,
          accept: Callable[[str], bool] = lambda _path: True) -> dict[str, Any]:
    prefix = arguments.get("path_prefix")
    tree = source.repository.tree_index(source.commit)
    if prefix is not None:
        prefix = check_tree_path(prefix, field="path_prefix", prefix=True)
        _check_prefix(tree, prefix)
    not_blobs = source.repository.not_blobs(source.commit, prefix)
    if prefix is not None and (entry := tree.entries.get(prefix)) is not None and entry.blob in not_blobs:
        raise InvalidInput(f"path_prefix {echo(prefix)} is {_listed_as_a_file(not_blobs[entry.blob])}: nothing in "
                           "it could be searched.", field="path_prefix", object_type=not_blobs[entry.blob])
    offset, limit = _page_bounds(arguments, source.limits.max_hits)
    page = _Page(source.limits, tree)
    search = _Search(source, pattern, whole_word, prefix, accept, offset, offset + limit, page, not_blobs)
    if offset < ONE_PASS_OFFSET:
        search.in_one_pass()
    else:
        search.in_two_passes()
    hits, seen = page.hits, search.seen
    digests, changed = source.repository.blob_sha256([hit["blob"] for hit in hits])
    if changed:  # searched as blobs a moment ago
        raise ResearchUnavailable("The source repository answered two questions about the same commit differently; "
                                  "try again, and tell the operator if it persists.")
    for hit in hits:
        hit["blob_sha256"] = digests[hit["blob"]]
    more = seen > offset + limit or page.cut or bool(page.omitted)
    next_offset = offset + len(hits) if more else None
    result: dict[str, Any] = {
        "pattern": pattern, "whole_word": whole_word, "path_prefix": prefix, "hits": hits, "files": len(page.files),
        "total_hits": seen if search.finished else None, "next_offset": next_offset,
        "omitted_files": 0 if page.cut else len(page.omitted), "truncated_lines": page.truncated, "bytes": page.size,
        "complete": next_offset is None and offset == 0 and not page.truncated,
        "note": note,
    }
    if not search.finished:
        result["total_hits_at_least"] = seen
    if seen == 0 and result["complete"]:
        result["absence"] = SEARCH_ABSENCE
    return result


def _check_prefix(tree: TreeIndex, prefix: str) -> None:
    """Refuse a prefix that is a symlink or a submodule, or a path inside one: a search never follows them (what
    they point to is not part of this tree), so its answer there could never be evidence of absence. A prefix
    naming a file searches that file; one the tree does not hold, or a path inside a file, finds nothing."""
    shown = echo(prefix)
    entry = tree.entries.get(prefix)
    if entry is not None and entry.mode in (SYMLINK_MODE, GITLINK_MODE):
        what = "a symlink" if entry.mode == SYMLINK_MODE else "a submodule"
        raise InvalidInput(f"path_prefix {shown} is {what} at the pinned commit: searches do not follow it (what it "
                           "points to is not part of this tree), so nothing in it could be searched.",
                           field="path_prefix")
    for slash in range(len(prefix)):
        outer = tree.entries.get(prefix[:slash]) if prefix[slash] == "/" else None
        if outer is not None and outer.mode in (SYMLINK_MODE, GITLINK_MODE):
            what = "symlink" if outer.mode == SYMLINK_MODE else "submodule"
            raise NotFound(f"There is no path {shown} at the pinned commit: {echo(prefix[:slash])} is a {what}, and "
                           "nothing inside it is part of this tree.", field="path_prefix", path=prefix)


# --- source.read ----------------------------------------------------------------------------------------------


def _read(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    path = check_tree_path(arguments["path"])
    start, end = arguments["start_line"], arguments["end_line"]
    if end < start:
        raise InvalidInput("end_line is before start_line.", field="end_line")
    tree = source.repository.tree_index(source.commit)
    entry = tree.find(path)
    if entry is None:
        raise _missing(tree, path)
    if entry.mode not in BLOB_MODES:
        raise InvalidInput(f"{echo(path)} is a {'symlink' if entry.mode == SYMLINK_MODE else 'submodule'}, "
                           "not a readable source file.", field="path")
    reader = _LineReader(source.limits, start, min(end, start + source.limits.max_read_lines - 1))
    try:
        with closing(source.repository.blob_chunks(entry.blob)) as chunks:
            for chunk in chunks:
                reader.feed(chunk)
                if reader.binary():
                    raise InvalidInput(f"{echo(path)} is a binary file.", field="path")
    except NotABlob as wrong:
        raise InvalidInput(f"{echo(path)} is {_listed_as_a_file(wrong.kind)}: not a readable source file.",
                           field="path", object_type=wrong.kind) from None
    total = reader.finish()
    if reader.binary(at_end=True):
        raise InvalidInput(f"{echo(path)} is a binary file.", field="path")
    if start > max(total, 1):
        raise InvalidInput(f"{echo(path)} has {total} lines.", field="start_line", total_lines=total)
    last = start + len(reader.lines) - 1
    clipped = last < min(end, total)
    return {
        **named(entry.path), "blob": entry.blob, "blob_sha256": reader.sha256.hexdigest(),
        "start_line": start, "end_line": last, "total_lines": total, "lines": reader.lines,
        "next_start_line": last + 1 if clipped else None, "truncated_lines": reader.truncated, "bytes": reader.size,
        "complete": not clipped and not reader.truncated,
    }


class _LineReader:
    """Lines ``start`` to ``stop`` of a blob that arrives in chunks, as git counts lines (a lone CR
    does not end one). Every line is counted and the blob hashed; only the wanted lines are kept, until
    the byte limit fills the answer (``full``). Memory: the kept lines, and of a wanted line that goes
    on past a chunk no more than its start (a :class:`LineStart`), however long it is."""

    def __init__(self, limits: SourceLimits, start: int, stop: int) -> None:
        self.limits, self.start, self.stop = limits, start, stop
        self.lines: list[dict[str, Any]] = []
        self.truncated = self.size = self.number = 0  # number: the lines ended so far
        self.full = False
        self.sha256 = hashlib.sha256()
        self._head = b""  # the first bytes, where git looks for a NUL to call a file binary
        self._partial: LineStart | None = None  # the start of a wanted line whose end has not come yet
        self._open = False  # the bytes so far end inside a line

    def _wanted(self) -> bool:
        return self.start <= self.number + 1 <= self.stop and not self.full

    def binary(self, *, at_end: bool = False) -> bool:
        return (at_end or len(self._head) >= _BINARY_PROBE) and b"\0" in self._head

    def feed(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        self._head += chunk[:_BINARY_PROBE - len(self._head)]
        if chunk:
            self._open = not chunk.endswith(b"\n")
        position = 0
        while position < len(chunk):
            if self.number + 1 < self.start:  # before the range: step over whole lines
                newlines = chunk.count(b"\n", position)
                if self.number + newlines < self.start - 1:
                    self.number += newlines
                    return
                while self.number + 1 < self.start:
                    position = chunk.index(b"\n", position) + 1
                    self.number += 1
                continue
            if not self._wanted():  # past the range, or the answer is full: count only
                self.number += chunk.count(b"\n", position)
                return
            newline = chunk.find(b"\n", position)
            if newline < 0:
                if self._partial is None:
                    self._partial = LineStart()
                self._partial.add(memoryview(chunk)[position:])
                return
            if self._partial is None:
                self._take(chunk[position:newline])
            else:
                self._partial.add(memoryview(chunk)[position:newline])
                self._take(self._partial)
                self._partial = None
            self.number += 1
            position = newline + 1

    def finish(self) -> int:
        """The number of lines (a last line without a newline counts)."""
        if self._open:
            if self._wanted():
                self._take(self._partial or b"")
            self.number += 1
        return self.number

    def _take(self, raw: bytes | LineStart) -> None:
        if isinstance(raw, LineStart):
            raw.end()
        text, cut, not_utf8 = _text(raw, self.limits.max_line_length)
        if self.lines and self.size + _size(text) > self.limits.max_bytes:  # at least one line, so reading moves on
            self.full = True
            return
        line: dict[str, Any] = {"line": self.number + 1, "text": text}
        if cut:
            line["truncated"] = True
            self.truncated += 1
        if not_utf8:
            line["not_utf8"] = True
        self.size += _size(text)
        self.lines.append(line)


def _missing(tree: TreeIndex, path: str) -> InvalidInput | NotFound:
    """Why no file has this name: a folder, a path inside a submodule or symlink, or no such name."""
    shown = echo(path)
    if path in tree.folders:
        return InvalidInput(f"{shown} is a folder at the pinned commit, not a file. List its files with source.files "
                            f"(substring {echo(path + '/')}) or search in it with path_prefix {shown}.",
                            field="path", folder=True)
    for slash in range(len(path)):
        if path[slash] == "/" and (outer := tree.entries.get(path[:slash])) is not None:
            what = "symlink" if outer.mode == SYMLINK_MODE else "submodule" if outer.mode == GITLINK_MODE else "file"
            return NotFound(f"There is no file {shown} at the pinned commit: {echo(path[:slash])} is a {what}, and "
                            "nothing inside it is part of this tree.", path=path)
    return NotFound(f"There is no file {shown} at the pinned commit. Names are matched byte for byte (case and "
                    "Unicode normalization count): copy the path from source.files or a search hit.", path=path)


_HANDLERS: dict[str, Callable[[GitSource, dict[str, Any]], dict[str, Any]]] = {
    "source.files": _files, "source.search": _search, "source.symbol": _symbol_search,
    "source.registration": _registration, "source.schema": _schema, "source.read": _read,
}
