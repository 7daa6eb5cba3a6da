"""The research configuration: a TOML file naming what agents may investigate.

    [[sources]]
    name = "app"                         # what queries name
    repository = "repos/app"             # a local repository, bare or not (relative: to this file's folder)
    url = "https://git.example/app.git"  # shown in captures as the origin
    commit = "0123…"                     # the pinned commit: a full hash that must exist
    max_files = 500                      # optional limits, defaults below
    max_hits = 500
    max_bytes = 1000000
    max_line_length = 500
    max_read_lines = 400
    timeout_seconds = 10

Nothing here is chosen by an agent: a query only names a configured source.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from armarius.errors import ConfigError
from armarius.research.git import GitRepository

_FULL_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


@dataclass(frozen=True)
class SourceLimits:
    max_files: int = 500
    max_hits: int = 500
    max_bytes: int = 1_000_000
    max_line_length: int = 500
    max_read_lines: int = 400
    timeout_seconds: float = 10.0


_LIMIT_RANGES: dict[str, tuple[float, float]] = {
    "max_files": (1, 100_000), "max_hits": (1, 100_000), "max_bytes": (1024, 100_000_000),
    "max_line_length": (16, 100_000), "max_read_lines": (1, 100_000), "timeout_seconds": (0.1, 600),
}


@dataclass(frozen=True)
class GitSource:
    name: str
    url: str
    commit: str
    repository: GitRepository = field(compare=False)
    limits: SourceLimits = SourceLimits()


@dataclass(frozen=True)
class ResearchConfig:
    path: Path
    sources: dict[str, GitSource]


def load_research_config(path: Path) -> ResearchConfig:
    """Read and check the file; every pinned commit is resolved now, so a bad pin fails at start."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"The research configuration {path} cannot be read: {error.strerror}.",
                          file=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"The research configuration {path} is not valid TOML: {error}", file=str(path)) from None
    unknown = set(document) - {"sources"}
    if unknown:
        raise ConfigError(f"Unknown key {sorted(unknown)[0]!r} in {path}; expected [[sources]].", file=str(path))
    entries = document.get("sources", [])
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path} names no [[sources]].", file=str(path))
    sources: dict[str, GitSource] = {}
    for index, entry in enumerate(entries):
        source = _source(entry, f"sources[{index}] in {path}", path.parent)
        if source.name in sources:
            raise ConfigError(f"Two sources are named {source.name!r} in {path}.", file=str(path))
        sources[source.name] = source
    return ResearchConfig(path=path, sources=sources)


def _source(entry: Any, where: str, base: Path) -> GitSource:
    def fail(message: str, key: str) -> ConfigError:
        return ConfigError(f"{where}: {message}", key=key)

    if not isinstance(entry, dict):
        raise fail("each source is a table", "sources")
    known = {"name", "repository", "url", "commit", *_LIMIT_RANGES}
    for key in entry:
        if key not in known:
            raise fail(f"unknown key {key!r}", key)
    name, repository, url, commit = (entry.get(key) for key in ("name", "repository", "url", "commit"))
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail("name must be 1-64 of [a-z0-9._-]", "name")
    if not isinstance(url, str) or not url.strip():
        raise fail("url is the repository's address to show in captures", "url")
    if not isinstance(repository, str) or not repository:
        raise fail("repository is the path of a local git repository", "repository")
    if not isinstance(commit, str) or not _FULL_HASH.fullmatch(commit):
        raise fail("commit must be a full lowercase commit hash (40 or 64 hex digits), not a branch, tag or "
                   "short hash: the pin must not move", "commit")
    limits = _limits(entry, fail)
    folder = (base / repository).resolve()
    if not folder.is_dir():
        raise fail(f"repository {str(folder)!r} is not a folder", "repository")
    git = GitRepository(folder, timeout=limits.timeout_seconds)
    if inside := git.prefix():
        raise fail(f"repository {str(folder)!r} is the folder {inside!r} inside a repository; name the "
                   "repository's top folder", "repository")
    if git.object_type(commit) != "commit":
        raise fail(f"commit {commit} does not exist in {str(folder)!r} (or is not a commit)", "commit")
    return GitSource(name=name, url=url, commit=commit, repository=git, limits=limits)


def _limits(entry: dict[str, Any], fail: Any) -> SourceLimits:
    values: dict[str, Any] = {}
    for key, (low, high) in _LIMIT_RANGES.items():
        if key not in entry:
            continue
        value = entry[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise fail(f"{key} must be a number from {low:g} to {high:g}", key)
        values[key] = float(value) if key == "timeout_seconds" else int(value)
    return SourceLimits(**values)
