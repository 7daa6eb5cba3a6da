"""Read-only access to git objects of one commit, through the git command line.

git runs with an argument vector (never a shell), a fixed clean environment (no system or user
configuration, no replace objects, literal pathspecs, no prompts), ``--no-pager``, ``--`` before
every pathspec and patterns given with ``-e``, and only ever against a resolved full commit hash:
the working tree, the index and the branches are never consulted. Text conversion is off.
Failures and time-outs become ``research_unavailable``; a git message never reaches a caller.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from armarius.errors import ResearchUnavailable

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
    "HOME": os.devnull,
    "LC_ALL": "C",
}
#: Repository settings that could change what a command prints; pinned on every call.
_PINNED_CONFIG = (
    "-c", "core.quotePath=false", "-c", "core.fsmonitor=false", "-c", "grep.lineNumber=false",
    "-c", "grep.patternType=fixed", "-c", "grep.fullName=false", "-c", "grep.column=false",
    "-c", "grep.fallbackToNoIndex=false", "-c", "color.ui=false", "-c", "core.attributesFile=" + os.devnull,
)


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    kind: str
    blob: str
    path: str


@dataclass(frozen=True)
class GrepLine:
    path: str
    line: int
    text: bytes


class GitRepository:
    def __init__(self, path: Path, *, timeout: float) -> None:
        executable = shutil.which("git")
        if executable is None:
            raise ResearchUnavailable("git is not installed on the server.")
        self.path, self.timeout, self._git = path, timeout, executable
        self._sha256: dict[str, str] = {}
        self._environment = {**_CLEAN_ENVIRONMENT, "PATH": str(Path(executable).parent)}

    def _run(self, arguments: Sequence[str], *, stdin: bytes | None = None, ok_codes: tuple[int, ...] = (0,)) -> bytes:
        command = [self._git, "--no-pager", "-C", str(self.path), *_PINNED_CONFIG, *arguments]
        try:
            completed = subprocess.run(command, input=stdin, capture_output=True, timeout=self.timeout,
                                       env=self._environment, check=False)
        except subprocess.TimeoutExpired:
            raise ResearchUnavailable(f"The source did not answer within {self.timeout:g} seconds.",
                                      timeout_seconds=self.timeout) from None
        except OSError:
            logger.exception("git could not be started")
            raise ResearchUnavailable("git could not be started on the server.") from None
        if completed.returncode not in ok_codes:
            logger.warning("git %s failed (%s): %s", arguments[0], completed.returncode,
                           completed.stderr[:500].decode("utf-8", "replace"))
            raise ResearchUnavailable("The source repository could not be read; the operator was told in the log.")
        return completed.stdout

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
        entries = []
        for record in self._run(["ls-tree", "-r", "-z", "--full-tree", commit]).split(b"\0"):
            if not record:
                continue
            meta, _, raw_path = record.partition(b"\t")
            mode, kind, blob = meta.decode("ascii").split(" ")
            entries.append(TreeEntry(mode, kind, blob, raw_path.decode("utf-8", "surrogateescape")))
        return tuple(entries)

    def grep(self, commit: str, pattern: str, *, whole_word: bool, pathspec: str | None) -> list[GrepLine]:
        """``git grep -F`` over the commit's blobs: binary files skipped, no text conversion."""
        arguments = ["grep", "-z", "-n", "-I", "-F", "--no-textconv", "--no-recurse-submodules"]
        if whole_word:
            arguments.append("-w")
        arguments += ["-e", pattern, commit, "--"]
        if pathspec:
            arguments.append(pathspec)
        output = self._run(arguments, ok_codes=(0, 1))
        prefix = commit.encode("ascii") + b":"
        lines = []
        pending = b""
        for record in output.split(b"\n"):
            if b"\0" not in record:  # part of a name with a newline in it (or the end of the output)
                pending += record + b"\n"
                continue
            name, line_number, text = (pending + record).split(b"\0", 2)
            pending = b""
            lines.append(GrepLine(name.removeprefix(prefix).decode("utf-8", "surrogateescape"), int(line_number), text))
        return lines

    def blob(self, blob_id: str) -> bytes:
        return self._run(["cat-file", "blob", blob_id])

    def tree_index(self, commit: str) -> dict[str, TreeEntry]:
        """The commit's tree entries by path (cached)."""
        return _cached_index(self, commit)

    def blob_sha256(self, blob_ids: Sequence[str]) -> dict[str, str]:
        """SHA-256 of each blob's content: one ``git cat-file --batch`` for those not yet known
        (a blob id names one content forever, so the answers are remembered)."""
        missing = [blob for blob in dict.fromkeys(blob_ids) if blob not in self._sha256]
        if missing:
            output = self._run(["cat-file", "--batch"], stdin="".join(f"{blob}\n" for blob in missing).encode("ascii"))
            position = 0
            for blob in missing:
                header_end = output.index(b"\n", position)
                name, kind, size = output[position:header_end].decode("ascii").split(" ")
                if name != blob or kind != "blob":
                    raise ResearchUnavailable("The source repository answered out of order.")
                start = header_end + 1
                self._sha256[blob] = hashlib.sha256(output[start:start + int(size)]).hexdigest()
                position = start + int(size) + 1
            if len(self._sha256) > _SHA256_MEMORY:
                self._sha256.clear()
        return {blob: self._sha256[blob] for blob in blob_ids}


_SHA256_MEMORY = 200_000


@lru_cache(maxsize=64)
def _cached_tree(repository: GitRepository, commit: str) -> tuple[TreeEntry, ...]:
    return repository._list_tree(commit)


@lru_cache(maxsize=64)
def _cached_index(repository: GitRepository, commit: str) -> dict[str, TreeEntry]:
    return {entry.path: entry for entry in repository.tree(commit)}
