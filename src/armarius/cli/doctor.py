"""`armarius doctor`: is this installation ready to serve? Each check is ok or a problem with its fix.

The doctor only looks. It creates, migrates and repairs nothing: the SQLite file is opened only if
it exists, read-write (so that its write-ahead log is tidied away on close, as the server leaves
it) but with ``query_only``; on PostgreSQL it only reads. Passwords are never printed: a database
URL is shown with its password masked, and research databases by host, port, user and name. The
embedding model is never loaded: its identity comes from its package's metadata.
"""

from __future__ import annotations

import getpass
import logging
import os
import pwd
import shlex
import sqlite3
import stat
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import psycopg

from armarius.audit.chain import BAD_MAC
from armarius.audit.keys import ENV_VARIABLE
from armarius.audit.setup import open_keyed
from armarius.audit.verify import verify_log
from armarius.auth.directory import Directory
from armarius.cli.context import CliContext, counted, pass_cli
from armarius.config import Settings, masked_database_url
from armarius.errors import ArmariusError, ConfigError, SchemaOutdated, StorageUnavailable
from armarius.memory.embeddings import WordLlamaEmbedder
from armarius.memory.service import vector_counts
from armarius.research.config import DatabaseSource, SourceLimits, load_research_config
from armarius.research.dbdrivers import open_driver
from armarius.research.git import GitRepository
from armarius.store import Database, open_database
from armarius.store.engine import SqliteDatabase
from armarius.store.schema import (
    UNSCOPED_TABLES,
    RoleRefused,
    check_postgres_role,
    check_schema,
    current_version,
    missing_objects,
    postgres_role,
    unforced_tables,
)

logger = logging.getLogger("armarius.cli")
#: How many workspaces whose entries lack vectors the vectors check names (the rest it counts).
WORKSPACES_NAMED = 5

@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


@click.command()
@pass_cli
def doctor(cli: CliContext) -> None:
    """Check settings, data folder, database, research sources and audit log; exit 1 on any problem."""
    checks = list(_checks(cli))
    healthy = all(check.ok for check in checks)
    lines = []
    for check in checks:
        lines.append(f"{'ok' if check.ok else 'PROBLEM':8} {check.name}: {check.detail}")
        lines += [f"{'':8} fix: {check.fix}"] if check.fix else []
    problems = sum(not check.ok for check in checks)
    lines.append(f"All {len(checks)} checks passed." if healthy else
                 f"{problems} of {len(checks)} checks found a problem.")
    cli.emit({"ok": healthy, "checks": [check.to_dict() for check in checks]}, text="\n".join(lines))
    if not healthy:
        sys.exit(1)


def _checks(cli: CliContext) -> Iterator[Check]:
    try:
        settings = cli.settings
    except ConfigError as error:
        where = error.details.get("file") or "the ARMARIUS_* environment variable named"
        yield Check("configuration", False, error.message,
                    f"Correct {where} (docs/configuration.md lists every setting and its values).")
        return
    found = settings.config_file.is_file()
    yield Check("configuration", True, f"{settings.config_file if found else 'defaults'} and the environment")
    init = f"`{cli.command_line('init')}` creates it."
    yield _private("data folder", settings.data_dir, 0o700, init)
    if settings.audit_key is None:
        yield _private("audit key file", settings.audit_key_path, 0o600,
                       f"Copy audit.key from a backup or from the first server of this database; on a new "
                       f"installation {init}")
    else:
        yield Check("audit key file", True, f"not used: the keys come from {ENV_VARIABLE}")
    database = _open(cli, settings)
    if isinstance(database, Check):
        yield database
        yield from _research(settings)
        yield _not_checked("audit log", "database")
        yield _meaning_off(settings) or _not_checked("recall by meaning", "database")
        return
    try:
        schema = _guarded("database", lambda: _schema(cli, database, _where(settings)))
        yield schema
        if database.dialect == "postgresql":
            yield _guarded("database role", lambda: _role(database, settings))
            yield _guarded("row-level security", lambda: _forced_security(database))
            yield _guarded("database objects", lambda: _objects(cli, database)) if schema.ok else _not_checked(
                "database objects", "database")
        yield from _research(settings)
        yield _guarded("audit log", lambda: _audit(cli, settings, database)) if schema.ok else _not_checked(
            "audit log", "database")
        yield _meaning_off(settings) or (_guarded("recall by meaning", lambda: _vectors(cli, database))
                                         if schema.ok else _not_checked("recall by meaning", "database"))
    finally:
        database.close()


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    """One check; an unexpected failure is this check's problem (its traceback logged), not the end of all."""
    try:
        return check()
    except Exception:
        logger.exception("the doctor's %s check failed unexpectedly", name)
        return Check(name, False, "the check failed unexpectedly; its traceback was logged",
                     "Fix the other problems listed first; if this one stays, report it with the logged traceback.")


def _not_checked(name: str, because: str) -> Check:
    return Check(name, False, f"not checked: the {because} check failed", f"Fix the {because} problem first.")


# Data folder --------------------------------------------------------------------------------------


def _private(name: str, path: Path, mode: int, when_missing: str) -> Check:
    """The path exists, belongs to this user and only this user may read or write it."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return Check(name, False, f"{path} does not exist", when_missing)
    user, owner = getpass.getuser(), _user_name(info.st_uid)
    found, fixes = [], []
    if info.st_uid != os.getuid():
        found.append(f"it belongs to {owner}, not to {user} who runs this")
        fixes.append(f"sudo chown {shlex.quote(user)} {shlex.quote(str(path))}")
    if stat.S_IMODE(info.st_mode) & 0o077:
        found.append(f"its mode is {stat.S_IMODE(info.st_mode):o}: group and others have access")
        fixes.append(f"chmod {mode:o} {shlex.quote(str(path))}")
    if found:
        return Check(name, False, f"{path}: " + "; ".join(found), " && ".join(fixes))
    return Check(name, True, f"{path} (mode {stat.S_IMODE(info.st_mode):o}, owner {owner})")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user id {uid}"


# Database -----------------------------------------------------------------------------------------


class _LookingSqlite(SqliteDatabase):
    """The existing SQLite file, never created and never written (not even its journal mode)."""

    def connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(f"file:{quote(str(self.path))}?mode=rw", uri=True, isolation_level=None,
                                     check_same_thread=False, timeout=10)
        connection.execute("PRAGMA query_only = ON")
        return connection


def _where(settings: Settings) -> str:
    if settings.database_url is None:
        return f"SQLite file {settings.sqlite_path}"
    return f"PostgreSQL {masked_database_url(settings.database_url)}"


def _open(cli: CliContext, settings: Settings) -> Database | Check:
    """The database, opened as the server opens it (SQLite: only if the file exists); or the problem."""
    if settings.database_url is None:
        if not settings.sqlite_path.is_file():
            return Check("database", False, f"there is no {_where(settings)}",
                         f"`{cli.command_line('init')}` creates it.")
        return _LookingSqlite(settings.sqlite_path)
    try:
        return open_database(settings.database_url, settings.sqlite_path)
    except StorageUnavailable:
        # Where libpq goes (settings refuse a URL it would read otherwise than written): its first host and port.
        # Without a host libpq uses its default (a unix socket), and so does pg_isready without -h.
        info = psycopg.conninfo.conninfo_to_dict(settings.database_url)
        host = str(info.get("host") or "").split(",")[0]
        port = str(info.get("port") or "").split(",")[0] or "5432"
        probe = ["pg_isready", *(["-h", host] if host else []), "-p", port]
        return Check("database", False, f"{_where(settings)} cannot be reached or refused the login",
                     f"Start PostgreSQL or correct database.url (ARMARIUS_DATABASE_URL); `{shlex.join(probe)}` "
                     "says whether the server answers.")


def _schema(cli: CliContext, database: Database, where: str) -> Check:
    try:
        check_schema(database)
    except SchemaOutdated as error:
        if error.details["current"] > error.details["required"]:
            fix = ("Upgrade Armarius to the release that wrote this database (`pip install --upgrade armarius` in "
                   "its environment); never serve it with an older one.")
        else:
            fix = f"`{cli.command_line('init')}` (with the same database settings) migrates it."
        return Check("database", False, f"{where}: {error.message}", fix)
    return Check("database", True, f"{where}, schema at version {current_version(database)} (the latest)")


def _role(database: Database, settings: Settings) -> Check:
    """The check `serve` makes (check_postgres_role): the same problem, and the same fix."""
    assert settings.database_url is not None
    role = postgres_role(settings.database_url)
    try:
        check_postgres_role(database)
    except RoleRefused as error:
        fix = error.fix
        # The migrate URL may leave its user to libpq (PGUSER, the system's user): then it is not known here.
        migrator = psycopg.conninfo.conninfo_to_dict(settings.database_migrate_url or settings.database_url).get("user")
        if error.kind == "bypasses" and role == migrator:
            fix = (f"Give the server a login role of its own that owns nothing (as a superuser: CREATE ROLE "
                   f"armarius_app LOGIN PASSWORD '…';), set database.url to it, keep {role} for "
                   "database.migrate_url, and run `armarius init` (docs/deployment.md).")
        return Check("database role", False, f"{role}: {error.problem}", fix)
    return Check("database role", True, f"{role}: no superuser, no BYPASSRLS, owns nothing and is a member of no "
                 "role that does, has every grant of the migrations and no more")


def _forced_security(database: Database) -> Check:
    unforced = unforced_tables(database)
    if unforced:
        statements = " ".join(f"ALTER TABLE {name} ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;"
                              for name in unforced)
        return Check("row-level security", False, f"not forced on {', '.join(unforced)}: those rows are not kept "
                     "apart by workspace", f"As the table owner (database.migrate_url): {statements}")
    return Check("row-level security", True, "enabled and forced on every workspace table (but "
                 f"{', '.join(UNSCOPED_TABLES)}, which the server's role may not touch)")


def _objects(cli: CliContext, database: Database) -> Check:
    """The functions, triggers and text search configuration the migrations made, and the server uses, are there."""
    missing = missing_objects(database)
    if not missing:
        return Check("database objects", True, "the tables, functions, triggers and text search configuration of "
                     "the migrations are there")
    init = f"`{cli.command_line('init')}` (with database.migrate_url: the owner's)"
    repairable = [item.name for item in missing if item.repairable]
    lost = [item.name for item in missing if not item.repairable]
    fixes = [f"{init} makes the {' and the '.join(repairable)} again, as its migration made it."] if repairable else []
    if lost:
        fixes.append(f"Restore the database from a backup (docs/deployment.md#backups-and-restore): `armarius init` "
                     f"cannot make the {', the '.join(lost)} again.")
    return Check("database objects", False, f"missing: the {', the '.join(item.name for item in missing)}; recall "
                 "and writes that need them fail", " ".join(fixes))


# Research -----------------------------------------------------------------------------------------


def _research(settings: Settings) -> list[Check]:
    """Each source's repository and pinned commit, then each database's login (when research is configured)."""
    if settings.research_config is None:
        return []
    path = settings.data_dir / settings.research_config
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        document = {}  # loading the file says so
    # One check per source (loading the file stops at the first bad one); the loader checks the rest.
    checks = [_source(path, entry) for entry in _tables(document, "sources") if _has_pin(entry)]
    try:
        config = load_research_config(path, settings.environ)
    except ConfigError as error:
        if all(check.ok for check in checks):
            checks.append(Check("research configuration", False, error.message,
                                f"Edit {path} (or set the environment variable it names) as said above; "
                                "docs/research.md shows the format."))
        elif _tables(document, "databases"):  # the server would not start either; the sources say why
            checks.append(_not_checked("research databases", "research source"))
        return checks
    return [*checks, *(_research_database(path, source) for source in config.databases.values())]


def _tables(document: dict[str, Any], key: str) -> list[Any]:
    entries = document.get(key)
    return entries if isinstance(entries, list) else []


def _has_pin(entry: Any) -> bool:
    return isinstance(entry, dict) and all(isinstance(entry.get(key), str) for key in ("name", "repository", "commit"))


def _source(path: Path, entry: dict[str, Any]) -> Check:
    """The repository exists and has the pinned commit (GitRepository, as the loader asks it)."""
    commit, folder = entry["commit"], (path.parent / entry["repository"]).resolve()
    check, shown = f"research source {entry['name']}", shlex.quote(str(folder))
    if not folder.is_dir():
        return Check(check, False, f"the repository {folder} does not exist",
                     f"git clone {shlex.quote(str(entry.get('url', 'URL')))} {shown} (or correct repository in "
                     f"{path}).")
    try:
        kind = GitRepository(folder, timeout=SourceLimits.timeout_seconds).object_type(commit)
    except ArmariusError as error:
        return Check(check, False, error.message, f"Check the repository by hand: git -C {shown} status")
    if kind not in (None, "commit"):  # a mistake of the file (the loader refuses it), not something to fetch
        return Check(check, False, f"the pin {commit} names a {kind} in {folder}, not a commit",
                     f"Pin a commit in {path}: `git -C {shown} rev-parse HEAD` prints the one checked out.")
    if kind is None:
        return Check(check, False, f"the pinned commit {commit} is not in {folder}",
                     f"git -C {shown} fetch origin {commit} (or pin a commit it has in {path}: "
                     f"`git -C {shown} rev-parse HEAD` prints the one checked out).")
    return Check(check, True, f"commit {commit[:12]} in {folder}")


def _research_database(path: Path, source: DatabaseSource) -> Check:
    """A trivial query through the research layer's own driver, as its read-only account."""
    check = f"research database {source.name}"
    if source.dialect == "sqlite":
        where, by_hand = f"SQLite file {source.path}", f"sqlite3 -readonly {shlex.quote(str(source.path))} 'SELECT 1'"
    else:
        host, port, user, name = (shlex.quote(str(value)) for value in
                                  (source.host, source.port, source.user, source.database))
        where = f"{source.dialect} {source.user}@{source.host}:{source.port}/{source.database}"
        by_hand = (f"mariadb -h {host} -P {port} -u {user} -p {name} -e 'SELECT 1'" if source.dialect == "mariadb"
                   else f"psql -h {host} -p {port} -U {user} -d {name} -c 'SELECT 1'")
    driver = open_driver(source)
    try:
        driver.fetch("SELECT 1")
    except ArmariusError as error:
        return Check(check, False, f"{where}: {error.message}",
                     f"Start the database or correct its entry in {path} (and the password it names), then try "
                     f"the login by hand: `{by_hand}`.")
    finally:
        driver.close()
    return Check(check, True, f"{where} answers")


# Audit log ----------------------------------------------------------------------------------------


def _audit(cli: CliContext, settings: Settings, database: Database) -> Check:
    """What `armarius audit verify` does, without anchors."""
    try:
        keyed = open_keyed(database, env_keys=settings.audit_key, key_file=settings.audit_key_path)
    except ConfigError as error:
        return Check("audit log", False, error.message,
                     f"Restore the key: copy audit.key from a backup or the first server to {settings.audit_key_path} "
                     f"(chmod 600), or set {ENV_VARIABLE} (docs/security.md#the-audit-key).")
    names = {space.id: space.name for space in Directory(keyed).workspaces()}
    report = verify_log(keyed, known_workspaces=names)
    if report.intact:
        return Check("audit log", True,
                     f"{counted(report.events_checked, 'event')} in {counted(report.chains, 'chain')} verify")
    first = report.problems[0]
    restore = ("Keep a copy of the database as evidence and restore it from a backup older than the first finding.")
    if any(problem.kind == BAD_MAC for problem in report.problems):
        # The key file may be the culprit, not the database: an older copy, or another server's key.
        restore = (f"If {settings.audit_key_path} (or {ENV_VARIABLE}) was replaced by an older or another copy, put "
                   "the current one back first: it holds every key that signed the log (a rotation keeps the "
                   f"retired ones). Otherwise: {restore[0].lower()}{restore[1:]}")
    return Check("audit log", False, f"{counted(len(report.problems), 'finding')}; the first, in chain "
                 f"{first.workspace_id}"
                 f"{f' at event {first.seq}' if first.seq else ''}: {first.problem}",
                 f"`{cli.command_line('audit', 'verify')}` lists every finding; docs/security.md#verification says "
                 f"what each means. {restore}")


# Recall by meaning --------------------------------------------------------------------------------


def _meaning_off(settings: Settings) -> Check | None:
    """The check when recall by meaning is off (nothing to check, not even the database); None when it is on."""
    if settings.memory_embeddings != "off":
        return None
    return Check("recall by meaning", True, 'off (memory.embeddings = "off"): recall is by words only; no vectors '
                 "to check")


def _vectors(cli: CliContext, database: Database) -> Check:
    """Every entry and active evidence unit has a vector of the current model (what `armarius memory reindex`
    makes): those written while memory.embeddings was off, or by another model, are missed by recall by meaning.
    The counts the reindex itself reports (:func:`vector_counts`), of each workspace in a read transaction of
    its own (PostgreSQL: under its row-level security), without the model (its identity is metadata)."""
    model = WordLlamaEmbedder().model_id
    spaces = Directory(database).workspaces()
    lacking: list[tuple[str, int, int]] = []
    for space in spaces:
        counts = vector_counts(database, space.id, model)
        entries, units = counts["entries"] - counts["with_vector"], counts["units"] - counts["units_with_vector"]
        if entries or units:
            lacking.append((space.name, entries, units))
    if not spaces:
        return Check("recall by meaning", True, f"there are no workspaces yet: nothing to embed (model {model})")
    if not lacking:
        return Check("recall by meaning", True, f"every entry and active evidence unit of "
                     f"{counted(len(spaces), 'workspace')} has a vector of {model}")
    entries, units = sum(entry for _, entry, _ in lacking), sum(unit for _, _, unit in lacking)
    named = [f"{_texts(entry, unit)} in {name}" for name, entry, unit in lacking[:WORKSPACES_NAMED]]
    if len(lacking) > WORKSPACES_NAMED:
        named.append(f"the rest in {counted(len(lacking) - WORKSPACES_NAMED, 'more workspace')}")
    reindex = cli.command_line("memory", "reindex", *(["--workspace", lacking[0][0]] if len(lacking) == 1 else []))
    lack, them = ("lacks", "it") if entries + units == 1 else ("lack", "them")
    return Check("recall by meaning", False,
                 f"{_texts(entries, units)} {lack} a vector of {model} (written while memory.embeddings was off, "
                 f"or by another model): recall by meaning misses {them} ({', '.join(named)})",
                 f"`{reindex}` embeds {them} (resumable; the server answers meanwhile). Give every server process "
                 "of this store the same memory.embeddings, or what one with it off writes lacks a vector again "
                 "(docs/memory.md).")


def _texts(entries: int, units: int) -> str:
    """For example "3 entries and 1 active evidence unit": a kind there are none of is left out."""
    return " and ".join([*([counted(entries, "entry", "entries")] if entries else []),
                         *([counted(units, "active evidence unit")] if units else [])])
