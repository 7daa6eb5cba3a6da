"""Settings: one TOML file in the data folder, then environment overrides.

Only the composition root (:mod:`armarius.app`) and the CLI's entry point call
:func:`load_settings`; every other module receives the values it needs.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from armarius.errors import ConfigError

CONFIG_FILE_NAME = "armarius.toml"
SQLITE_FILE_NAME = "armarius.sqlite3"
AUDIT_KEY_FILE_NAME = "audit.key"
DEFAULT_DATA_DIR = Path(".armarius")
#: The most actions any session may hold, whoever grants them.
SESSION_BUDGET_CEILING = 1_000_000


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    #: ``None`` selects the embedded SQLite file in the data folder.
    database_url: str | None = None
    #: PostgreSQL only: the table owner's connection, used for migrations.
    database_migrate_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    memory_body_max_bytes: int = 64 * 1024
    memory_duplicate_threshold: float = 0.5
    #: Recall by meaning: "wordllama" (the model shipped in the wordllama package) or "off" (words only).
    memory_embeddings: str = "wordllama"
    approval_ttl_seconds: int = 300
    #: A research session's action budget when the agent asks for none, and the most it may ask for.
    session_default_budget: int = 50
    session_max_budget: int = 500
    #: How long a session blocked by a failed source waits before a human may resume it.
    session_retry_after_seconds: int = 60
    #: Invalid project queries in a row after which a session blocks.
    research_invalid_request_limit: int = 5
    #: How long an idle HTTP connection is kept open for the client's next request.
    keep_alive_seconds: int = 65
    #: How many HTTP requests' tools (and other blocking work) run at once in one server process; the
    #: others wait their turn. Python runs one thread at a time, so more of them only take turns longer.
    #: None: the store's default (:data:`DEFAULT_REQUEST_THREADS`).
    request_threads: int | None = None
    #: How many MCP sessions (``Mcp-Session-Id``) one agent token may hold open at once in one server process
    #: (several agents may share a token: the load test runs 64 on one).
    mcp_sessions_per_token: int = 128
    #: A web login session ends after this many minutes without a request ...
    web_session_idle_minutes: int = 60
    #: ... and this many hours after the login, whatever its use.
    web_session_max_hours: int = 12
    #: SQLite's ``synchronous`` pragma: "normal" (a commit survives a process crash) or "full"
    #: (it also survives a power loss or an OS crash, at the cost of an fsync per commit).
    sqlite_synchronous: str = "normal"
    #: The research configuration file (relative: to the data folder); None: no research tools.
    research_config: Path | None = None
    #: The audit key file (relative: to the data folder); None: ``audit.key`` in the data folder.
    audit_key_file: Path | None = None
    #: Audit keys from ARMARIUS_AUDIT_KEY (the environment only, never the file); wins over the key file.
    audit_key: str | None = field(default=None, repr=False, compare=False)
    #: Where research database passwords named by ``password_env`` are looked up (the process
    #: environment as load_settings saw it); never printed.
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def config_file(self) -> Path:
        return self.data_dir / CONFIG_FILE_NAME

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / SQLITE_FILE_NAME

    @property
    def audit_key_path(self) -> Path:
        return self.data_dir / (self.audit_key_file or AUDIT_KEY_FILE_NAME)


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _integer(low: int, high: int) -> Callable[[Any], int | None]:
    def parse(value: Any) -> int | None:
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value if low <= value <= high else None

    return parse


def _synchronous(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) and value.lower() in ("normal", "full") else None


def _embeddings(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) and value.lower() in ("wordllama", "off") else None


def _path(value: Any) -> Path | None:
    return Path(value) if isinstance(value, str) and value.strip() and "\x00" not in value else None


def _fraction(value: Any) -> float | None:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 < value <= 1 else None


class _Unusable(ValueError):
    """A setting's value that cannot be used; the argument says why, repeating nothing of the value."""


def _database_url(value: Any) -> str | None:
    url = _string(value)
    if url is None or not url.startswith(_URL_SCHEMES):
        return None
    problem = database_url_problem(url)
    if problem is not None:
        raise _Unusable(problem)
    return url


# PostgreSQL URLs ----------------------------------------------------------------------------------
#
# A URL is read as libpq reads it (psycopg's conninfo parser is libpq's), and one that libpq would refuse, or
# read otherwise than its writer meant, is refused when the settings are loaded, before any connection is
# tried: libpq's messages and psycopg.pool's log lines quote the URL's text, password and all. Nothing here
# ever repeats a URL's text but through masked_database_url.

_URL_SCHEMES = ("postgresql://", "postgres://")
MASKED = "***"

#: libpq's refusals, by a word of its message (the message itself quotes the URL), as a reason to show.
_LIBPQ_REASONS = (
    ("spaces", "it has a space, which libpq refuses: write a space as %20 (in a password too)"),
    ("percent-encoded", "it has a % that does not start a percent-encoded character (write % itself as %25; "
                        "%00 is not allowed)"),
    ("query parameter", "its query (after ?) has a parameter that libpq does not know or that is not written "
                        "key=value"),
    ("IPv6", "its host part is malformed"),
    ("unexpected character", "its host part is malformed"),
)


def database_url_problem(url: str) -> str | None:
    """Why the PostgreSQL URL cannot be used as written, or None when libpq reads it as written.

    Besides libpq's refusals (a space, a stray %, an unknown parameter), a URL is refused when libpq would
    read it otherwise than meant: an ``@`` or a ``/`` in the password that is not percent-encoded moves the
    rest of the password into the host, the port or the database name (and then into error messages), so
    the one ``@`` a URL may hold unencoded before its query is the one that ends the user part, before any
    ``/`` (:func:`_url_parts`; the query's parameters may hold one). The reason repeats nothing of the URL."""
    if not url.startswith(_URL_SCHEMES):
        return "it must start with postgresql://"
    if "\x00" in url:  # libpq would read the URL up to it only
        return "it has a NUL character"
    if "@" in _url_parts(url)[2]:
        return ("it has an @ or a / that libpq would not read as meant: write @ as %40 and / as %2F in the user "
                "name and the password (an @ in the host or the database name as %40 too)")
    return _libpq_problem(url)


def _libpq_problem(url: str) -> str | None:
    """Why libpq refuses the URL, or its port is no port; None when neither."""
    import psycopg  # only where PostgreSQL is configured

    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        message = str(error)
        return next((reason for word, reason in _LIBPQ_REASONS if word in message), "libpq cannot read it")
    except UnicodeError:  # a percent-encoded byte that is no UTF-8, or a character that cannot be sent
        return "it is not UTF-8 text once its percent-encoded characters are decoded"
    ports = [port for port in str(info.get("port") or "").split(",") if port]
    if not all(port.isascii() and port.isdigit() and 1 <= int(port) <= 65535 for port in ports):
        return "its port must be a number from 1 to 65535"
    return None


def _url_parts(url: str) -> tuple[str, str, str, str, str]:
    """A URL cut where libpq cuts it: the scheme and ``://``, the user part (with its ``@``, or empty), the host,
    port and path, and the query (with its ``?``, or empty). As libpq reads it, the user part ends at the first
    ``@`` unless a ``/`` comes first (then there is none), whatever else it holds (a ``?`` too); an ``@`` in the
    query is the parameters' own (``?user=me@corp``)."""
    scheme, separator, rest = url.partition("://")
    end = next((index for index, char in enumerate(rest) if char in "@/"), len(rest))
    user_part = rest[:end + 1] if rest[end:end + 1] == "@" else ""
    host_and_path, question, query = rest[len(user_part):].partition("?")
    return scheme + separator, user_part, host_and_path, question, query


def masked_database_url(url: str) -> str:
    """A PostgreSQL URL fit to print: as written, but its password, in the user part or as a parameter
    (``password``, ``sslpassword``), shown as ``***``. A URL that cannot be used is not shown at all: there is
    no telling where its password ends. The one way a database URL is shown."""
    if database_url_problem(url) is not None:
        return "(a PostgreSQL URL that cannot be used as written)"
    start, user_part, host_and_path, question, query = _url_parts(url)
    user, colon, _password = user_part.removesuffix("@").partition(":")
    shown_user = f"{user}{':' + MASKED if colon else ''}@" if user_part else ""
    return f"{start}{shown_user}{host_and_path}{question}{'&'.join(map(_masked_parameter, query.split('&')))}"


def _masked_parameter(parameter: str) -> str:
    key, equals, _value = parameter.partition("=")
    return f"{key}={MASKED}" if equals and "password" in unquote(key) else parameter


def database_url_secrets(url: str) -> set[str]:
    """The secrets of a PostgreSQL URL, as written in it and as decoded: its password and password
    parameters (for scrubbing text that may quote them). Empty for a URL that cannot be used."""
    if database_url_problem(url) is not None:
        return set()
    import psycopg

    _start, user_part, _host_and_path, _question, query = _url_parts(url)
    written = [user_part.removesuffix("@").partition(":")[2]]
    written += [parameter.partition("=")[2] for parameter in query.split("&")
                if "password" in unquote(parameter.partition("=")[0])]
    decoded = [str(value) for key, value in psycopg.conninfo.conninfo_to_dict(url).items() if "password" in key]
    return {secret for secret in [*written, *decoded] if secret}


#: ``server.request_threads`` where none is set. On PostgreSQL every tool takes a thread, and fewer of them
#: taking turns at the interpreter served 32 clients faster (bench/compare.py section 6 on 2 cores, 2026-12-06:
#: 203-228 operations a second with 8, 231-252 with 4; p99 279-299 ms, 222-247 ms); on SQLite most tools run
#: on the event loop, and the few that queue for the writers' turn wait better with more.
DEFAULT_REQUEST_THREADS = {"sqlite": 8, "postgresql": 4}


def request_threads(settings: Settings, dialect: str) -> int:
    """How many request threads a server on a store of ``dialect`` runs (see ``Settings.request_threads``)."""
    return settings.request_threads or DEFAULT_REQUEST_THREADS[dialect]


@dataclass(frozen=True)
class _Key:
    section: str
    name: str
    field: str
    env: str
    parse: Callable[[Any], Any]
    expected: str


_KEYS = (
    _Key("database", "url", "database_url", "ARMARIUS_DATABASE_URL", _database_url,
         "a postgresql:// URL (leave it out for the embedded SQLite file)"),
    _Key("database", "migrate_url", "database_migrate_url", "ARMARIUS_DATABASE_MIGRATE_URL",
         _database_url, "a postgresql:// URL of the role that owns the tables"),
    _Key("server", "host", "host", "ARMARIUS_HOST", _string, "a host name or address"),
    _Key("server", "port", "port", "ARMARIUS_PORT", _integer(1, 65535), "a port number from 1 to 65535"),
    _Key("server", "keep_alive_seconds", "keep_alive_seconds", "ARMARIUS_KEEP_ALIVE_SECONDS", _integer(1, 3600),
         "a number of seconds from 1 to 3600"),
    _Key("server", "request_threads", "request_threads", "ARMARIUS_REQUEST_THREADS", _integer(1, 1024),
         "a number of threads from 1 to 1024"),
    _Key("server", "mcp_sessions_per_token", "mcp_sessions_per_token", "ARMARIUS_MCP_SESSIONS_PER_TOKEN",
         _integer(1, 1000), "a number of sessions from 1 to 1000"),
    _Key("storage", "sqlite_synchronous", "sqlite_synchronous", "ARMARIUS_SQLITE_SYNCHRONOUS", _synchronous,
         '"normal" or "full"'),
    _Key("memory", "body_max_bytes", "memory_body_max_bytes", "ARMARIUS_MEMORY_BODY_MAX_BYTES",
         _integer(1024, 16 * 1024 * 1024),
         "a number of bytes from 1024 to 16777216"),
    _Key("memory", "duplicate_threshold", "memory_duplicate_threshold", "ARMARIUS_MEMORY_DUPLICATE_THRESHOLD",
         _fraction, "a number greater than 0 and at most 1"),
    _Key("memory", "embeddings", "memory_embeddings", "ARMARIUS_MEMORY_EMBEDDINGS", _embeddings,
         '"wordllama" (recall by meaning as well as by words) or "off" (by words only)'),
    _Key("research", "config", "research_config", "ARMARIUS_RESEARCH_CONFIG", _path,
         "the path of a research configuration TOML file"),
    _Key("research", "invalid_request_limit", "research_invalid_request_limit",
         "ARMARIUS_RESEARCH_INVALID_REQUEST_LIMIT", _integer(1, 10_000), "a number from 1 to 10000"),
    _Key("sessions", "default_budget", "session_default_budget", "ARMARIUS_SESSION_DEFAULT_BUDGET",
         _integer(1, SESSION_BUDGET_CEILING), f"a number of actions from 1 to {SESSION_BUDGET_CEILING}"),
    _Key("sessions", "max_budget", "session_max_budget", "ARMARIUS_SESSION_MAX_BUDGET",
         _integer(1, SESSION_BUDGET_CEILING), f"a number of actions from 1 to {SESSION_BUDGET_CEILING}"),
    _Key("sessions", "retry_after_seconds", "session_retry_after_seconds", "ARMARIUS_SESSION_RETRY_AFTER_SECONDS",
         _integer(0, 86_400), "a number of seconds from 0 to 86400"),
    _Key("web", "session_idle_minutes", "web_session_idle_minutes", "ARMARIUS_WEB_SESSION_IDLE_MINUTES",
         _integer(1, 7 * 24 * 60), "a number of minutes from 1 to 10080"),
    _Key("web", "session_max_hours", "web_session_max_hours", "ARMARIUS_WEB_SESSION_MAX_HOURS",
         _integer(1, 30 * 24), "a number of hours from 1 to 720"),
    _Key("approvals", "ttl_seconds", "approval_ttl_seconds", "ARMARIUS_APPROVAL_TTL_SECONDS", _integer(1, 86_400),
         "a number of seconds from 1 to 86400"),
    _Key("audit", "key_file", "audit_key_file", "ARMARIUS_AUDIT_KEY_FILE", _path,
         "the path of the audit key file"),
)


def load_settings(data_dir: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read ``armarius.toml`` from the data folder, then apply ``ARMARIUS_*`` variables.

    The data folder is ``data_dir`` if given, else ``ARMARIUS_DATA_DIR``, else ``./.armarius``.
    A missing file means defaults; a malformed one is refused naming the file and the key.
    """
    env = os.environ if environ is None else environ
    folder = data_dir or Path(env.get("ARMARIUS_DATA_DIR") or DEFAULT_DATA_DIR)
    values: dict[str, Any] = {"data_dir": folder.resolve()}
    path = folder / CONFIG_FILE_NAME
    for key, value in _read_file(path).items():
        values[key.field] = _checked(key, value, f"{key.section}.{key.name} in {path}")
    for key in _KEYS:
        if key.env in env:
            values[key.field] = _checked(key, env[key.env], f"environment variable {key.env}")
    if "ARMARIUS_AUDIT_KEY" in env:  # a secret: from the environment only; checked where it is used
        values["audit_key"] = env["ARMARIUS_AUDIT_KEY"]
    return Settings(**values, environ=dict(env))


def _checked(key: _Key, value: Any, where: str) -> Any:
    try:
        parsed = key.parse(value)
    except _Unusable as unusable:
        raise ConfigError(f"Setting {where} is not a PostgreSQL URL that can be used as written: {unusable}. The "
                          "value is not repeated here, as it may hold a password (docs/configuration.md says how "
                          "to write one).", key=f"{key.section}.{key.name}") from None
    if parsed is None:
        raise ConfigError(f"Setting {where} must be {key.expected}.", key=f"{key.section}.{key.name}")
    return parsed


def _read_file(path: Path) -> dict[_Key, Any]:
    if not path.exists():
        return {}
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"The settings file {path} is not valid TOML: {exc}", file=str(path)) from None
    known = {(key.section, key.name): key for key in _KEYS}
    sections = {key.section for key in _KEYS}
    found: dict[_Key, Any] = {}
    for section, table in document.items():
        if section not in sections:
            raise ConfigError(
                f"Unknown section [{section}] in {path}; known sections: {', '.join(sorted(sections))}.",
                file=str(path), key=section,
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{section} in {path} must be a [{section}] table of settings.",
                              file=str(path), key=section)
        for name, value in table.items():
            key = known.get((section, name))
            if key is None:
                raise ConfigError(f"Unknown setting {section}.{name} in {path}.", file=str(path),
                                  key=f"{section}.{name}")
            found[key] = value
    return found


#: Written as set (the rest of a new settings file is commented out at its default).
_WRITTEN_LIVE = ("host", "port")


def write_settings_file(settings: Settings) -> None:
    """Write a settings file for a new data folder: every setting, commented out at its default.

    The host and port in force are written live; database URLs are never written (they may hold
    credentials: set them in the environment).
    """

    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # private: it holds credentials
    defaults = Settings(data_dir=settings.data_dir)
    lines = [
        "# Armarius settings. Each ARMARIUS_* environment variable overrides its key.",
        "# Every setting is listed; a commented one is at its default. See docs/configuration.md.",
    ]
    section = None
    for key in _KEYS:
        if key.section != section:
            section = key.section
            lines += ["", f"[{section}]"]
        default = getattr(defaults, key.field)
        lines.append(f"# {key.name}: {key.expected} ({key.env})")
        if key.field in _WRITTEN_LIVE:
            lines.append(f"{key.name} = {_toml_value(getattr(settings, key.field))}")
        elif default is None:
            lines.append(f"# {key.name} is not set by default")
        else:
            lines.append(f"# {key.name} = {_toml_value(default)}")
    settings.config_file.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _toml_value(value: Any) -> str:
    if isinstance(value, str | Path):
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def one_blas_thread() -> None:
    """Run numpy's matrix products in this process on one thread, unless the operator chose otherwise
    (``OPENBLAS_NUM_THREADS``); a process's entry point calls it before numpy is first imported (OpenBLAS
    reads the setting as it loads). A server answers many requests at once, and the pool of BLAS threads,
    which spin between products, took more CPU than it saved: recall over MCP stdio among 2,000 entries
    took 6.3-7.8 ms of server CPU a call with two threads on two cores, 2.8-3.3 ms with one."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
