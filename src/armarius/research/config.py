"""The research configuration: a TOML file naming what agents may investigate.

    [[sources]]
    name = "app"                         # required: what queries name
    repository = "repos/app"             # required: a local repository, bare or not (relative: to this file's folder)
    url = "https://git.example/app.git"  # required: shown in captures as the origin
    commit = "0123…"                     # required: the pinned commit, a full hash (not a branch or tag)
    max_files = 500                      # optional limits, defaults below
    max_hits = 500
    max_bytes = 1000000
    max_line_length = 500
    max_read_lines = 400
    timeout_seconds = 10

    [[databases]]
    name = "world"                       # what queries name
    dialect = "mariadb"                  # mariadb (or mysql), postgresql, sqlite
    host = "127.0.0.1"                   # servers only
    port = 3306
    database = "world"
    user = "armarius_reader"             # a SELECT-only account
    password_env = "WORLD_DB_PASSWORD"   # or password_file = "world.password" (mode 600); never here
    path = "world.sqlite"                # sqlite only, instead of host/port/database/user
    schema = "public"                    # postgresql only
    snapshot = "world-2026-11-01"        # the operator's name for this data; change it on reimport
    tables = ["creature_template", "quest_template"]
    columns = { quest_template = ["id", "title"] }  # optional: only these columns of a table
    max_rows = 100                       # optional limits, defaults below
    max_bytes = 1000000
    max_value_length = 2000
    max_in_values = 100
    timeout_seconds = 5
    schema_cache_seconds = 60

    [enrichment]                         # optional: armarius.research.model shows its format

Nothing here is chosen by an agent: a query only names a configured source or database.

Loading refuses what is wrong in the file itself: its form, keys, types, names and limits, a pin
that is not a full commit hash and, where the repository folder exists now, a folder inside
another repository's work tree or a pin naming an object that is not a commit (a tree, blob or
tag). A repository folder that is missing (or holds no repository) and a pinned commit it does not
have (yet) are outages, not mistakes of the file: the file loads (a warning is logged), and each
query on that source is ``research_unavailable`` saying what is missing (:func:`source_outage`)
until the operator puts it back.
"""

from __future__ import annotations

import logging
import re
import tomllib
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from armarius.errors import ConfigError, ResearchUnavailable
from armarius.research.git import GitRepository
from armarius.research.model import EnrichmentConfig

_FULL_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
#: A table or column name Armarius will put into a statement (quoted as well).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,63}")
Fail = Callable[[str, str], ConfigError]

logger = logging.getLogger("armarius.research")


def shown(name: str) -> str:
    """A requested source or database name for a message: quoted when it could be one, else not echoed."""
    return repr(name) if _NAME.fullmatch(name) else "by that name"


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
class DatabaseLimits:
    max_rows: int = 100
    max_bytes: int = 1_000_000
    max_value_length: int = 2000
    max_in_values: int = 100
    timeout_seconds: float = 5.0
    schema_cache_seconds: float = 60.0


_DATABASE_LIMIT_RANGES: dict[str, tuple[float, float]] = {
    "max_rows": (1, 10_000), "max_bytes": (1024, 100_000_000), "max_value_length": (16, 10_000_000),
    "max_in_values": (1, 1000), "timeout_seconds": (0.1, 600), "schema_cache_seconds": (0, 86_400),
}

Dialect = Literal["mariadb", "postgresql", "sqlite"]
_DIALECTS: dict[str, Dialect] = {"mariadb": "mariadb", "mysql": "mariadb", "postgresql": "postgresql",
                                 "sqlite": "sqlite"}
_DEFAULT_PORTS = {"mariadb": 3306, "postgresql": 5432}


@dataclass(frozen=True)
class DatabaseSource:
    """One operator-configured database. The password never appears in a repr, log or answer."""

    name: str
    dialect: Dialect
    snapshot: str
    tables: tuple[str, ...]
    #: Per table, the only columns agents may see (tables not named here: every column).
    columns: Mapping[str, tuple[str, ...]]
    host: str | None = None
    port: int | None = None
    database: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False, compare=False)
    path: Path | None = None
    schema: str = "public"
    limits: DatabaseLimits = DatabaseLimits()


@dataclass(frozen=True)
class ResearchConfig:
    path: Path
    sources: dict[str, GitSource]
    databases: dict[str, DatabaseSource] = field(default_factory=dict)
    enrichment: EnrichmentConfig | None = None


def load_research_config(path: Path, environ: Mapping[str, str] | None = None) -> ResearchConfig:
    """Read and check the file. A pin that cannot be a commit fails now; a repository or commit that is not
    there now is an outage its queries report (see the module's documentation), so the file still loads.

    ``environ`` is where ``password_env`` names are looked up (the composition root passes the
    process environment).
    """
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"The research configuration {path} cannot be read: {error.strerror}.",
                          file=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"The research configuration {path} is not valid TOML: {error}", file=str(path)) from None
    unknown = set(document) - {"sources", "databases", "enrichment"}
    if unknown:
        raise ConfigError(f"Unknown key {sorted(unknown)[0]!r} in {path}; expected [[sources]], [[databases]] or "
                          "[enrichment].", file=str(path))
    source_entries, database_entries = document.get("sources", []), document.get("databases", [])
    if not isinstance(source_entries, list) or not isinstance(database_entries, list) or not (
            source_entries or database_entries):
        raise ConfigError(f"{path} names no [[sources]] and no [[databases]].", file=str(path))
    sources: dict[str, GitSource] = {}
    for index, entry in enumerate(source_entries):
        source = _source(entry, f"sources[{index}] in {path}", path.parent)
        if source.name in sources:
            raise ConfigError(f"Two sources are named {source.name!r} in {path}.", file=str(path))
        sources[source.name] = source
    databases: dict[str, DatabaseSource] = {}
    for index, entry in enumerate(database_entries):
        database = _database(entry, f"databases[{index}] in {path}", path.parent, environ or {})
        if database.name in databases:
            raise ConfigError(f"Two databases are named {database.name!r} in {path}.", file=str(path))
        databases[database.name] = database
    if "enrichment" not in document:
        return ResearchConfig(path=path, sources=sources, databases=databases)
    from armarius.research.enrichment_config import parse_enrichment  # it builds on this module's types

    return ResearchConfig(path=path, sources=sources, databases=databases,
                          enrichment=parse_enrichment(document["enrichment"], path, sources, databases))


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
        found = "" if url is None else "; it is blank here" if isinstance(url, str) else "; here it is not a string"
        raise fail("url is required: the repository's address, such as \"https://git.example.com/app.git\", shown "
                   f"in captures as the origin{found}", "url")
    if not isinstance(repository, str) or not repository:
        raise fail("repository is the path of a local git repository", "repository")
    if not isinstance(commit, str) or not _FULL_HASH.fullmatch(commit):
        raise fail("commit must be a full lowercase commit hash (40 or 64 hex digits), not a branch, tag or "
                   "short hash: the pin must not move", "commit")
    limits = SourceLimits(**_limits(entry, _LIMIT_RANGES, fail))
    folder = (base / repository).resolve()
    git = GitRepository(folder, timeout=limits.timeout_seconds)
    source = GitSource(name=name, url=url, commit=commit, repository=git, limits=limits)
    kind = None
    if folder.is_dir():
        try:
            inside, kind = git.prefix(), git.object_type(commit)
        except ResearchUnavailable as failure:  # git did not answer in time: an outage too
            logger.warning("research source %r: its repository %s could not be checked: %s", name, str(folder),
                           failure.message)
            return source
        if inside:
            raise fail(f"repository {str(folder)!r} is the folder {inside!r} inside a repository; name the "
                       "repository's top folder", "repository")
        if kind not in (None, "commit"):
            raise fail(f"commit {commit} is a {kind} in {str(folder)!r}, not a commit: pin a commit", "commit")
    if (outage := _outage(source, kind)) is not None:
        logger.warning("research source %r: %s Its queries are refused (research_unavailable) until then.", name,
                       outage.message)
    return source


def source_outage(source: GitSource, *, look_again: bool = False) -> ResearchUnavailable | None:
    """What of the source is not there now: its repository folder, a git repository in that folder, or its
    pinned commit (or the pin names another kind of object). None when they are there, or when git does not
    answer in time (the query that asks next says so itself). Only a look: nothing is fetched or changed.
    A pin once seen to name a commit in this repository is not asked about again unless ``look_again`` (an
    object never changes kind; after a failure of git, look again): then this costs a look at the folder."""
    if not source.repository.path.is_dir():
        return _outage(source, None)
    if not look_again and _PINS_SEEN.get(source.repository) == source.commit:
        return None
    try:
        kind = source.repository.object_type(source.commit)
    except ResearchUnavailable:
        return None
    return _outage(source, kind)


#: Each repository whose source's pinned commit was seen there, as a commit: that pin.
_PINS_SEEN: weakref.WeakKeyDictionary[GitRepository, str] = weakref.WeakKeyDictionary()


def _outage(source: GitSource, kind: str | None) -> ResearchUnavailable | None:
    """:func:`source_outage`, given what git says the pin names (None: nothing, or no repository answered)."""
    folder, name, commit = source.repository.path, source.name, source.commit
    if kind == "commit" and folder.is_dir():
        _PINS_SEEN[source.repository] = commit
        return None
    _PINS_SEEN.pop(source.repository, None)
    # Agents see these: the server's own paths stay out of them (as out of captures); `doctor` shows them.
    missing_repository = {"source": name, "missing": "repository"}
    if not folder.is_dir():
        return ResearchUnavailable(
            f"The repository of source {name!r} is missing: its folder is not on the server (moved away, "
            "deleted or not cloned yet). The operator must put it back, or correct repository in the research "
            "configuration; `armarius doctor` says how.", **missing_repository)
    if kind is None and not _holds_a_repository(folder):
        return ResearchUnavailable(
            f"The repository of source {name!r} is missing: its folder holds no git repository. The operator must "
            "clone it there, or correct repository in the research configuration; `armarius doctor` says how.",
            **missing_repository)
    pin = {"source": name, "missing": "commit", "commit": commit}
    if kind is None:
        return ResearchUnavailable(
            f"The pinned commit {commit} of source {name!r} is not in its repository (not fetched yet?). "
            "The operator must fetch it, or pin a commit the repository has; `armarius doctor` says how.", **pin)
    return ResearchUnavailable(
        f"The pin {commit} of source {name!r} names a {kind} in its repository, not a commit. The operator must pin a "
        "commit in the research configuration.", **pin)


def _holds_a_repository(folder: Path) -> bool:
    """Whether a folder looks like a repository: a work tree's ``.git`` (a folder, or the file of a linked worktree
    or submodule), or a bare repository's ``HEAD`` and ``objects``. Only to word a message."""
    return (folder / ".git").exists() or ((folder / "HEAD").is_file() and (folder / "objects").is_dir())


def _limits(entry: dict[str, Any], ranges: dict[str, tuple[float, float]], fail: Fail) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, (low, high) in ranges.items():
        if key not in entry:
            continue
        value = entry[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise fail(f"{key} must be a number from {low:g} to {high:g}", key)
        values[key] = float(value) if key.endswith("_seconds") else int(value)
    return values


_DATABASE_KEYS = {"name", "dialect", "snapshot", "tables", "columns", "host", "port", "database", "user",
                  "password_env", "password_file", "path", "schema", *_DATABASE_LIMIT_RANGES}
_SERVER_KEYS = ("host", "port", "database", "user", "password_env", "password_file", "schema")


def _database(entry: Any, where: str, base: Path, environ: Mapping[str, str]) -> DatabaseSource:
    def fail(message: str, key: str) -> ConfigError:
        return ConfigError(f"{where}: {message}", key=key)

    if not isinstance(entry, dict):
        raise fail("each database is a table", "databases")
    if "password" in entry:
        raise fail("a password never goes into this file; use password_env or password_file", "password")
    for key in entry:
        if key not in _DATABASE_KEYS:
            raise fail(f"unknown key {key!r}", key)
    name, dialect, snapshot = entry.get("name"), entry.get("dialect"), entry.get("snapshot")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail("name must be 1-64 of [a-z0-9._-]", "name")
    if dialect not in _DIALECTS:
        raise fail(f"dialect must be one of {', '.join(_DIALECTS)}", "dialect")
    if not isinstance(snapshot, str) or not snapshot.strip() or len(snapshot) > 200:
        raise fail("snapshot is the operator's id for this data (change it when the data is reimported)",
                   "snapshot")
    tables = _identifiers(entry.get("tables"), "tables", fail, allow_empty=False)
    columns = _column_allowlists(entry.get("columns", {}), tables, fail)
    common: dict[str, Any] = {
        "name": name, "dialect": _DIALECTS[dialect], "snapshot": snapshot, "tables": tables, "columns": columns,
        "limits": DatabaseLimits(**_limits(entry, _DATABASE_LIMIT_RANGES, fail)),
    }
    if common["dialect"] == "sqlite":
        return DatabaseSource(**common, path=_sqlite_path(entry, base, fail))
    return DatabaseSource(**common, **_server(entry, common["dialect"], base, environ, fail))


def _identifiers(value: Any, key: str, fail: Fail, *, allow_empty: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or (not value and not allow_empty):
        raise fail(f"{key} is a list of names", key)
    for item in value:
        if not isinstance(item, str) or not IDENTIFIER.fullmatch(item):
            raise fail(f"{key}: each name is 1-64 of letters, digits, '_' and '$', not starting with a digit", key)
    if len(set(value)) != len(value):
        raise fail(f"{key} names something twice", key)
    return tuple(value)


def _column_allowlists(value: Any, tables: tuple[str, ...], fail: Fail) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise fail("columns maps a table to the list of its columns agents may see", "columns")
    allowlists = {}
    for table, names in value.items():
        if table not in tables:
            raise fail(f"columns names the table {table!r}, which is not in tables", "columns")
        allowlists[table] = _identifiers(names, f"columns.{table}", fail, allow_empty=False)
    return allowlists


def _sqlite_path(entry: dict[str, Any], base: Path, fail: Fail) -> Path:
    for key in _SERVER_KEYS:
        if key in entry:
            raise fail(f"{key} is for database servers; a sqlite database has only a path", key)
    path = entry.get("path")
    if not isinstance(path, str) or not path:
        raise fail("path is the SQLite file", "path")
    resolved = (base / path).resolve()
    if not resolved.is_file():
        raise fail(f"the SQLite file {str(resolved)!r} does not exist", "path")
    return resolved


def _server(entry: dict[str, Any], dialect: str, base: Path, environ: Mapping[str, str],
            fail: Fail) -> dict[str, Any]:
    if "path" in entry:
        raise fail("path is for sqlite; a database server has host, port, database and user", "path")
    if dialect != "postgresql" and "schema" in entry:
        raise fail("schema is for postgresql", "schema")
    values: dict[str, Any] = {}
    for key in ("host", "database", "user"):
        value = entry.get(key)
        if not isinstance(value, str) or not value or any(ord(char) < 32 for char in value):
            raise fail(f"{key} is required: a non-empty string", key)
        values[key] = value
    port = entry.get("port", _DEFAULT_PORTS[dialect])
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise fail("port must be a number from 1 to 65535", "port")
    values["port"] = port
    schema = entry.get("schema", "public")
    if not isinstance(schema, str) or not IDENTIFIER.fullmatch(schema):
        raise fail("schema is a PostgreSQL schema name", "schema")
    if dialect == "postgresql":
        values["schema"] = schema
    values["password"] = _password(entry, base, environ, fail)
    return values


def _password(entry: dict[str, Any], base: Path, environ: Mapping[str, str], fail: Fail) -> str:
    """The password, from an environment variable or a private file; never from this TOML."""
    variable, file = entry.get("password_env"), entry.get("password_file")
    if (variable is None) == (file is None):
        raise fail("give exactly one of password_env (an environment variable's name) and password_file",
                   "password_env")
    if variable is not None:
        if not isinstance(variable, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
            raise fail("password_env is the name of an environment variable", "password_env")
        if variable not in environ:
            raise fail(f"the environment variable {variable} (password_env) is not set", "password_env")
        return environ[variable]
    if not isinstance(file, str) or not file:
        raise fail("password_file is the path of a file holding the password", "password_file")
    path = (base / file).resolve()
    try:
        if path.stat().st_mode & 0o077:
            raise fail(f"the password file {str(path)!r} is readable by others; chmod 600 it", "password_file")
        return path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        raise fail(f"the password file {str(path)!r} cannot be read as UTF-8 text", "password_file") from None
