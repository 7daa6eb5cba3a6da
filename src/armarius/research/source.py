"""Source queries over the git objects of one pinned commit.

Every answer says what it covered: ``next_offset`` when there is another page, ``omitted_files``
when the file limit cut the answer, ``truncated_lines`` when long lines were shortened, and
``complete`` only when nothing at all was cut. Search is lexical: a hit proves neither a
definition, a registration nor an execution, and each search answer says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from armarius.errors import InvalidInput, NotFound
from armarius.research.config import GitSource
from armarius.research.git import BLOB_MODES, GITLINK_MODE, SYMLINK_MODE, GrepLine, TreeEntry
from armarius.research.paths import check_tree_path, is_under

LEXICAL_NOTE = (
    "Lexical match only: a hit shows that the text occurs at this commit; it proves neither a definition, "
    "a registration nor an execution. Read the code around a hit before concluding anything."
)
REGISTRATION_NOTE = (
    "Occurrences of the symbol as a whole word: starting points for checking where it is registered. "
    + LEXICAL_NOTE
)
_SYMBOL = re.compile(r"[^\W\d]\w*")
_SCHEMA_SUFFIX = ".sql"


def _literal(value: str, field: str) -> str:
    if any(char in value for char in "\x00\n\r"):
        raise InvalidInput(f"{field} is one line of text without NUL.", field=field)
    return value


def _symbol(value: str) -> str:
    if not _SYMBOL.fullmatch(value):
        raise InvalidInput("symbol is one identifier: letters, digits and '_', not starting with a digit.",
                           field="symbol")
    return value


def _text(raw: bytes, limit: int) -> tuple[str, bool, bool]:
    """(text, truncated, not_utf8) of one line (without a CRLF's CR), cut to ``limit`` characters."""
    raw = raw.removesuffix(b"\r")
    try:
        text, not_utf8 = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, not_utf8 = raw.decode("utf-8", "replace"), True
    if len(text) > limit:
        return text[:limit], True, not_utf8
    return text, False, not_utf8


def _named(path: str) -> dict[str, Any]:
    """A tree path as JSON can carry it: a name that is not UTF-8 is shown with U+FFFD and flagged."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return {"path": path.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "path_not_utf8": True}
    return {"path": path}


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _origin(source: GitSource) -> dict[str, str]:
    return {"kind": "git", "source": source.name, "url": source.url, "commit": source.commit}


def run(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    kind = arguments["kind"]
    handler: Callable[[GitSource, dict[str, Any]], dict[str, Any]] = _HANDLERS[kind]
    return {"kind": kind, "origin": _origin(source), **handler(source, arguments)}


def _files(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    substring = _literal(arguments["substring"], "substring")
    offset, limit = arguments.get("offset", 0), min(arguments.get("limit", source.limits.max_files),
                                                     source.limits.max_files)
    matches = [entry for entry in source.repository.tree(source.commit) if substring in entry.path]
    page = matches[offset:offset + limit]
    more = offset + limit < len(matches)
    files = [_file(entry) for entry in page]
    return {
        "files": files, "total": len(matches), "next_offset": offset + limit if more else None,
        "complete": not more and offset == 0,
    }


def _file(entry: TreeEntry) -> dict[str, Any]:
    if entry.mode == SYMLINK_MODE:
        return {**_named(entry.path), "skipped": "symlink: not a readable source file"}
    if entry.mode == GITLINK_MODE:
        return {**_named(entry.path), "skipped": "submodule: not a readable source file"}
    return {**_named(entry.path), "blob": entry.blob}


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


def _grep(source: GitSource, arguments: dict[str, Any], pattern: str, *, whole_word: bool, note: str,
          accept: Callable[[str], bool] = lambda _path: True) -> dict[str, Any]:
    limits = source.limits
    prefix = arguments.get("path_prefix")
    if prefix is not None:
        prefix = check_tree_path(prefix, field="path_prefix", prefix=True)
    entries = source.repository.tree_index(source.commit)
    lines = [line for line in source.repository.grep(source.commit, pattern, whole_word=whole_word, pathspec=prefix)
             if accept(line.path) and is_under(line.path, prefix)]
    # git grep over a tree searches regular files only; keep it that way whatever git does next.
    lines = [line for line in lines if entries[line.path].mode in BLOB_MODES]
    offset = arguments.get("offset", 0)
    limit = min(arguments.get("limit", limits.max_hits), limits.max_hits)
    page = lines[offset:offset + limit]
    more_hits = offset + limit < len(lines)
    hits, files, truncated, size, omitted = _hits(source, page, entries)
    digests = source.repository.blob_sha256([hit["blob"] for hit in hits])
    for hit in hits:
        hit["blob_sha256"] = digests[hit["blob"]]
    next_offset = offset + len(hits) if (more_hits or len(hits) < len(page)) else None
    result: dict[str, Any] = {
        "pattern": pattern, "whole_word": whole_word, "path_prefix": prefix, "hits": hits, "files": len(files),
        "total_hits": len(lines), "next_offset": next_offset, "omitted_files": omitted,
        "truncated_lines": truncated, "bytes": size,
        "complete": next_offset is None and offset == 0 and not omitted and not truncated,
        "note": note,
    }
    if not lines and result["complete"]:
        result["absence"] = ("No occurrence at this commit within this predicate (a complete search): evidence of "
                             "absence for this snapshot and pattern only.")
    return result


def _hits(source: GitSource, page: list[GrepLine], entries: dict[str, TreeEntry]
          ) -> tuple[list[dict[str, Any]], set[str], int, int, int]:
    limits = source.limits
    hits: list[dict[str, Any]] = []
    files: set[str] = set()
    omitted: set[str] = set()
    truncated = size = 0
    for line in page:
        if line.path not in files and len(files) >= limits.max_files:
            omitted.add(line.path)
            continue
        text, cut, not_utf8 = _text(line.text, limits.max_line_length)
        cost = _size(text) + _size(line.path)
        if hits and size + cost > limits.max_bytes:  # a page holds at least one hit, so paging moves on
            break
        entry = entries[line.path]
        hit: dict[str, Any] = {**_named(line.path), "line": line.line, "text": text, "blob": entry.blob}
        if cut:
            hit["truncated"] = True
            truncated += 1
        if not_utf8:
            hit["not_utf8"] = True
        files.add(line.path)
        size += cost
        hits.append(hit)
    return hits, files, truncated, size, len(omitted)


def _read(source: GitSource, arguments: dict[str, Any]) -> dict[str, Any]:
    limits = source.limits
    path = check_tree_path(arguments["path"])
    start, end = arguments["start_line"], arguments["end_line"]
    if end < start:
        raise InvalidInput("end_line is before start_line.", field="end_line")
    entry = source.repository.tree_index(source.commit).get(path)
    if entry is None:
        raise NotFound(f"There is no file {path!r} at the pinned commit; find paths with source.files.", path=path)
    if entry.mode not in BLOB_MODES:
        raise InvalidInput(f"{path!r} is a {'symlink' if entry.mode == SYMLINK_MODE else 'submodule'}, "
                           "not a readable source file.", field="path")
    content = source.repository.blob(entry.blob)
    if b"\0" in content[:8000]:
        raise InvalidInput(f"{path!r} is a binary file.", field="path")
    all_lines = content.split(b"\n")  # lines as git counts them: a lone CR does not end one
    if all_lines[-1] == b"":
        all_lines.pop()
    if start > max(len(all_lines), 1):
        raise InvalidInput(f"{path!r} has {len(all_lines)} lines.", field="start_line", total_lines=len(all_lines))
    wanted_last = min(end, len(all_lines))
    last = min(wanted_last, start + limits.max_read_lines - 1)
    lines: list[dict[str, Any]] = []
    truncated = size = 0
    for number in range(start, last + 1):
        text, cut, not_utf8 = _text(all_lines[number - 1], limits.max_line_length)
        if lines and size + _size(text) > limits.max_bytes:  # at least one line, so reading moves on
            last = number - 1
            break
        line: dict[str, Any] = {"line": number, "text": text}
        if cut:
            line["truncated"] = True
            truncated += 1
        if not_utf8:
            line["not_utf8"] = True
        size += _size(text)
        lines.append(line)
    clipped = last < wanted_last
    return {
        "path": path, "blob": entry.blob, "blob_sha256": source.repository.blob_sha256([entry.blob])[entry.blob],
        "start_line": start, "end_line": last, "total_lines": len(all_lines), "lines": lines,
        "next_start_line": last + 1 if clipped else None,
        "truncated_lines": truncated, "complete": not clipped and not truncated,
    }


_HANDLERS: dict[str, Callable[[GitSource, dict[str, Any]], dict[str, Any]]] = {
    "source.files": _files, "source.search": _search, "source.symbol": _symbol_search,
    "source.registration": _registration, "source.schema": _schema, "source.read": _read,
}
