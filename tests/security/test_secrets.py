"""Secrets never leave where they belong (issue 16, item 7), on both engines.

One installation holds every kind of secret at once: an agent token, human passwords (one changed, so an
old one too), an approval token, the audit keys (one rotated), a PostgreSQL login role with a password
(and a password in the owner's URL), and a MariaDB research account with a password (from the
environment). Then every CLI command runs; every agent tool is called over HTTP with the token (and, on
PostgreSQL, some over stdio: `armarius mcp` in a subprocess, its stderr kept); the JSON API answers the
token and a person's login, the pages a logged-in person; and credentials are typed into the wrong fields
(a password as a principal's or workspace's name, a token as a password, a password as a bearer token).

Afterwards each secret is looked for, whole and as a fragment, in every file of the data folder (the
SQLite database's bytes included), every row of every table (audit events and captures included), the
exports (JSONL and folder), every log record of the process (and the stdio server's stderr), and every
answer, stdout and stderr. It may appear only in its one-time display: the token where `token issue`
and `connect` print it, the approval token where `approve` prints it and `proposal_status` hands it to the
agent, and an audit key in its key file; and what a person typed into a visible field is shown back to
that person only (the CLI's "no workspace named …", the login form filled in again). Password hashes may
sit in the principals table, nowhere else.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pymysql
import pytest
import uvicorn
from click.testing import CliRunner, Result
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from armarius.app import Armarius, open_app
from armarius.cli.main import cli
from armarius.config import load_settings
from armarius.web.app import server_config
from tests import scale
from tests.conftest import PostgresDatabase, service_missing
from tests.e2e.servers import free_port
from tests.helpers import OwnerSQL, tool_payload
from tests.research.repos import write_config
from tests.web.people import post_login

pytestmark = [pytest.mark.security, pytest.mark.mariadb]

MARIADB_HOST, MARIADB_PORT = "127.0.0.1", 3306
PASSWORD_VARIABLE = "ARMARIUS_TEST_SECRET_DB_PASSWORD"
WORKSPACE = "shop"
#: Loggers of the test's own clients: what they log is not the product's.
CLIENT_LOGGERS = ("httpx", "httpcore", "mcp.client")


def random_secret(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


@dataclass
class Secrets:
    """Every secret of the installation, by name; the ones made by Armarius are filled in as they appear."""

    values: dict[str, str] = field(default_factory=dict)
    #: Where a secret may appear: its name -> prefixes of the places ("cli token issue", …).
    allowed: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class Record:
    """Everything the test saw: (place, text)."""

    texts: list[tuple[str, str]] = field(default_factory=list)

    def add(self, place: str, text: str | bytes) -> None:
        self.texts.append((place, text.decode("utf-8", "replace") if isinstance(text, bytes) else text))


class LogCapture(logging.Handler):
    """Every log record of the product's process, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith(CLIENT_LOGGERS):
            self.lines.append(self.format(record))


@contextmanager
def capturing_logs(capture: LogCapture, *names: str) -> Iterator[None]:
    """``capture`` on the root logger and on the named loggers that do not propagate (uvicorn's), at INFO: more
    than `armarius serve` emits (uvicorn's loggers at INFO, the root logger at WARNING). (At DEBUG, sse-starlette
    logs every response body it streams, an answer's secret included: never run a server at DEBUG.)"""
    root = logging.getLogger()
    level = root.level
    loggers = [root, *(logging.getLogger(name) for name in names)]
    for logger in loggers:
        logger.addHandler(capture)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.setLevel(level)
        for logger in loggers:
            logger.removeHandler(capture)


@contextmanager
def serving_with_logs(app: Armarius, capture: LogCapture) -> Iterator[str]:
    """A real uvicorn server as `armarius serve` runs it (log level info, access log on), its logs captured."""
    port = free_port()
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port))
    # uvicorn configured its loggers as it made the config; the capture goes on after that.
    with capturing_logs(capture, "uvicorn", "uvicorn.access", "uvicorn.error"):
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(timeout=20)


@contextmanager
def mariadb_account(password: str) -> Iterator[dict[str, Any]]:
    """A fresh MariaDB database with one table and a SELECT-only account that has ``password``."""
    suffix = secrets.token_hex(4)
    database, user = f"armarius_secrets_{suffix}", f"sec_{suffix}"
    try:
        root = pymysql.connect(host=MARIADB_HOST, port=MARIADB_PORT, user="root", autocommit=True)
    except pymysql.err.OperationalError as error:
        service_missing("MariaDB", error)
    try:
        with root.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{database}`")
            cursor.execute(f"CREATE TABLE `{database}`.parts (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL)")
            cursor.execute(f"INSERT INTO `{database}`.parts VALUES (1, 'flange'), (2, 'gasket')")
            for host in ("%", "localhost"):
                cursor.execute("CREATE USER %s@%s IDENTIFIED BY %s", (user, host, password))
                cursor.execute(f"GRANT SELECT ON `{database}`.parts TO %s@%s", (user, host))
        yield {"name": "stock", "dialect": "mariadb", "snapshot": "stock-1", "tables": ["parts"],
               "host": MARIADB_HOST, "port": MARIADB_PORT, "database": database, "user": user,
               "password_env": PASSWORD_VARIABLE}
    finally:
        with root.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
            for host in ("%", "localhost"):
                cursor.execute("DROP USER IF EXISTS %s@%s", (user, host))
        root.close()


@dataclass
class Installation:
    data_dir: Path
    env: dict[str, str]
    secrets: Secrets
    record: Record
    logs: LogCapture
    outside: Path
    runner: CliRunner = field(default_factory=CliRunner)

    def run(self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None,
            allow: tuple[str, ...] = ()) -> Result:
        """One CLI command in process, its stdout and stderr recorded (``allow``: secrets it may print)."""
        place = "cli " + " ".join(args)
        for name, value in self.secrets.values.items():
            place = place.replace(value, f"<{name}>")
        for name in allow:
            self.secrets.allowed[name] = (*self.secrets.allowed.get(name, ()), place)
        result = self.runner.invoke(cli, ["--data-dir", str(self.data_dir), *args], input=stdin,
                                    env={**self.env, **(env or {})}, catch_exceptions=False)
        self.record.add(place, result.stdout)
        self.record.add(place + " (stderr)", result.stderr)
        return result

    def ok(self, *args: str, **options: Any) -> Any:
        result = self.run("--json", *args, **options)
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
        return json.loads(result.stdout) if result.stdout.strip() else None

    def human(self, *args: str, password: str | None = None, principal: str = "alice", check: bool = True) -> Any:
        """A human command as ``principal`` (alice, the administrator, unless told otherwise)."""
        env = {"ARMARIUS_PASSWORD": password or self.secrets.values["alice password"]}
        result = self.run("--json", *args, "--workspace", WORKSPACE, "--as", principal, env=env)
        if check:
            assert result.exit_code == 0, (args, result.stdout, result.stderr)
            return json.loads(result.stdout) if result.stdout.strip() else None
        return result


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def installation(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Installation]:
    """A data folder (and on PostgreSQL a database whose login role has a password), every secret named."""
    values = {name: random_secret(prefix) for name, prefix in (
        ("alice password", "alicepw"), ("bob password", "bobpw"), ("bob new password", "bobnewpw"),
        ("mariadb password", "mariapw"))}
    env = {PASSWORD_VARIABLE: values["mariadb password"], "ARMARIUS_RESEARCH_CONFIG": "research.toml"}
    database: PostgresDatabase | None = None
    if request.param == "postgresql":
        database = request.getfixturevalue("postgres_database")
        values["postgres password"] = random_secret("pgpw")
        values["postgres owner password"] = random_secret("ownerpw")  # trust auth: sent nowhere, checked never
        with psycopg.connect(database.owner_url, autocommit=True) as connection:
            connection.execute(f'ALTER ROLE "{database.app_role}" PASSWORD \'{values["postgres password"]}\'')
        app_url = database.app_url.replace(f"//{database.app_role}@",
                                           f"//{database.app_role}:{values['postgres password']}@")
        owner_url = database.owner_url.replace("//postgres@", f"//postgres:{values['postgres owner password']}@")
        assert app_url != database.app_url
        assert owner_url != database.owner_url
        env |= {"ARMARIUS_DATABASE_URL": app_url, "ARMARIUS_DATABASE_MIGRATE_URL": owner_url}
    with mariadb_account(values["mariadb password"]) as entry:
        data_dir = tmp_path / "data"
        write_config(data_dir / "research.toml", databases=[entry])
        outside = tmp_path / "outside"
        outside.mkdir()
        yield Installation(data_dir, env, Secrets(values), Record(), LogCapture(), outside)


# The work ------------------------------------------------------------------------------------------------


def audit_keys(inst: Installation) -> list[str]:
    lines = (inst.data_dir / "audit.key").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def set_up(inst: Installation) -> None:
    values = inst.secrets.values
    inst.ok("init")
    values["audit key"] = audit_keys(inst)[0]
    inst.secrets.allowed["audit key"] = ("file audit.key",)
    inst.ok("workspace", "add", WORKSPACE)
    inst.ok("workspace", "add", "other")
    inst.ok("principal", "add", "alice", "--kind", "human", "--workspace", WORKSPACE, "--role", "admin",
            "--password-stdin", stdin=values["alice password"] + "\n")
    inst.ok("principal", "add", "bob", "--kind", "human", "--workspace", WORKSPACE, "--role", "editor",
            "--password-stdin", stdin=values["bob password"] + "\n")
    inst.ok("principal", "set-password", "bob", "--password-stdin", stdin=values["bob new password"] + "\n")
    inst.ok("principal", "add", "bot", "--kind", "agent", "--workspace", WORKSPACE, "--role", "editor")
    issued = inst.ok("token", "issue", "bot", "--workspace", WORKSPACE, "--label", "ci", allow=("token",))
    values["token"] = issued["token"]
    inst.ok("connect", "http", "--token", values["token"], allow=("token",))
    inst.ok("connect", "claude-code", "--transport", "stdio", env={"ARMARIUS_TOKEN": values["token"]},
            allow=("token",))
    for listing in (("workspace", "list"), ("principal", "list"), ("token", "list"), ("doctor",)):
        inst.run(*listing)


async def agent_over_http(inst: Installation, base_url: str) -> dict[str, Any]:
    """Every agent tool, called with the token over streamable HTTP; what later steps need."""
    values, found = inst.secrets.values, {}
    headers = {"Authorization": f"Bearer {values['token']}"}
    async with (create_mcp_http_client(headers=headers) as http,
                Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode="legacy") as client):
        called: set[str] = set()

        async def call(tool: str, **arguments: Any) -> Any:
            result = await client.call_tool(tool, arguments)
            inst.record.add(f"mcp {tool}", result.content[0].text if result.content else "")  # type: ignore[union-attr]
            called.add(tool)
            return tool_payload(result)

        listed = {tool.name for tool in (await client.list_tools()).tools}
        await call("whoami")
        await call("workspace_info")
        await call("remember", slug="stock/parts", title="Parts", body="Flanges and gaskets.\n", tags=["stock"])
        await call("recall", query="flanges")
        await call("read", slug="stock/parts")
        await call("history", slug="stock/parts")
        await call("list")
        proposal = await call("propose_draft", slug="stock/plan", title="Plan", text="Count the gaskets.\n")
        found["proposal"], found["collection_key"] = proposal["proposal"], proposal["collection_key"]
        await call("proposal_status", proposal=proposal["proposal"])
        approved = inst.human("approve", "--proposal", str(proposal["proposal"]), "--confirm-exact-content")
        values["approval"] = approved["approval"]
        inst.secrets.allowed["approval"] = (f"cli --json approve --proposal {proposal['proposal']}",
                                            "mcp proposal_status")
        collected = await call("proposal_status", proposal=proposal["proposal"],
                               collection_key=proposal["collection_key"])
        assert collected["approval"] == values["approval"]
        await call("create_draft", slug="stock/plan", title="Plan", text="Count the gaskets.\n",
                   approval=collected["approval"], operation="op-1")
        session = (await call("session_open", subject="Which parts are stocked?"))["session"]
        await call("project_query", session=session, arguments={"kind": "database.tables"})
        rows = await call("project_query", session=session, arguments={"kind": "database.rows", "table": "parts"})
        await call("project_query", session=session, arguments={"kind": "database.schema", "table": "parts"})
        found["session"], found["capture"] = session, rows["capture"]
        await call("session_show", session=session)
        await call("sessions")
        target = await call("repair_target", session=session, kind="entry", name="stock/parts")
        repair = await call("repair_prepare", session=session, conflict="The table lists only two parts.",
                            alternatives=[{"target": {"kind": "entry", "name": "stock/parts",
                                                      "revision": target["revision"]},
                                           "title": "Parts", "body": "Flanges and gaskets only.\n",
                                           "rationale": "The parts table."}])
        found["repair"] = repair["repair"]
        await call("repair_show", repair=repair["repair"])
        second = (await call("session_open", subject="A session to close"))["session"]
        await call("session_close", session=second)
        assert sorted(listed - called) == [], "every agent tool is called with the token"
    return found


def web_and_api(inst: Installation, base_url: str, found: dict[str, Any]) -> None:
    values = inst.secrets.values
    bearer = {"Authorization": f"Bearer {values['token']}"}
    session, capture = found["session"], found["capture"]
    with httpx.Client(base_url=base_url) as http:
        for path in ("/api/whoami", "/api/entries", "/api/entries/search?q=flanges", f"/api/sessions/{session}",
                     f"/api/sessions/{session}/captures/{capture}", "/api/evidence", f"/api/repairs/{found['repair']}"):
            inst.record.add(f"api {path} (agent)", http.get(path, headers=bearer).text)
        for wrong in (values["alice password"], values["token"][:-1]):
            answer = http.get("/api/whoami", headers={"Authorization": f"Bearer {wrong}"})
            assert answer.status_code == 401
            inst.record.add("api whoami (wrong bearer)", answer.text + json.dumps(dict(answer.headers)))
            answer = http.post("/mcp", headers={"Authorization": f"Bearer {wrong}"}, json={"jsonrpc": "2.0"})
            assert answer.status_code == 401
            inst.record.add("mcp (wrong bearer)", answer.text)
    # Credentials typed into the wrong fields of the login form: refused, recorded without them.
    # The form shown again keeps what was typed into its visible fields (name, workspace) for whoever typed it:
    # a password typed there comes back in that one answer (no-store), and is recorded nowhere.
    mistakes = [("a password as the name", values["alice password"], values["alice password"], WORKSPACE),
                ("a password as the workspace", "alice", values["alice password"], values["alice password"]),
                ("the token as the password", "alice", values["token"], WORKSPACE),
                ("another's password", "alice", values["bob password"], WORKSPACE)]
    for mistake, name, password, workspace in mistakes:
        with httpx.Client(base_url=base_url) as http:
            answer = post_login(http, name, password, workspace)
            assert answer.status_code in (401, 403), answer.status_code
            assert answer.headers["cache-control"] == "no-store"
            inst.record.add(f"web login ({mistake})", answer.text + json.dumps(dict(answer.headers)))
    inst.secrets.allowed["alice password"] = (*inst.secrets.allowed.get("alice password", ()),
                                              "web login (a password as the name)",
                                              "web login (a password as the workspace)")
    with httpx.Client(base_url=base_url) as http:
        answer = post_login(http, "alice", values["alice password"], WORKSPACE)
        assert answer.status_code == 303, answer.text
        inst.record.add("web login", answer.text)
        for path in ("/", "/audit", "/entries/stock/parts", f"/sessions/{session}",
                     f"/sessions/{session}/captures/{capture}", "/drafts?status=all", f"/repairs/{found['repair']}",
                     "/api/audit", "/api/queue", f"/api/sessions/{session}/verify"):
            inst.record.add(f"page {path}", http.get(path).text)


def humans_at_the_cli(inst: Installation, found: dict[str, Any]) -> None:
    values, session = inst.secrets.values, str(found["session"])
    human = inst.human
    human("memory", "list")
    human("memory", "search", "flanges")
    human("memory", "show", "stock/parts")
    human("memory", "history", "stock/parts")
    human("memory", "curate", "stock/parts", "--revision", "1")
    human("memory", "uncurate", "stock/parts")
    human("memory", "needs-review")
    human("memory", "revert", "stock/parts", "--to-curated", "--reason", "why", check=False)
    human("memory", "repairs")
    human("memory", "repair-show", str(found["repair"]))
    human("memory", "repair-target", "stock/parts", "--session", session, check=False)
    human("memory", "repair-reject", str(found["repair"]), "--reformulate", "--comment", "Name the source.")
    human("drafts", "proposals", "--status", "all")
    human("drafts", "list")
    human("drafts", "show", "stock/plan")
    human("drafts", "promote", "stock/plan")
    human("sessions", "list")
    human("sessions", "show", session, "--facts")
    human("sessions", "verify", session)
    human("sessions", "budget", session, "80")
    human("sessions", "rebuild-files", session)
    human("sessions", "resume", session, check=False)
    human("sessions", "enrich", session, "--input", "part=1", check=False)
    human("evidence", "create", "stock/count", "--title", "Count", "--body", "Two parts.\n")
    human("evidence", "from-capture", "stock/capture", "--session", session)
    human("evidence", "review", "stock/count", "--revision", "1")
    human("evidence", "activate", "stock/count", "--revision", "1")
    human("evidence", "edit", "stock/count", "--expected-revision", "1", "--body", "Still two.\n")
    human("evidence", "restore", "stock/count")
    human("evidence", "show", "stock/count")
    human("evidence", "list")
    human("sessions", "takeover", session, check=False)
    human("sessions", "close", session)
    notes = inst.outside / "notes"
    notes.mkdir()
    (notes / "gaskets.md").write_text("# Gaskets\n\nRubber ones.\n", encoding="utf-8")
    human("import", "markdown", str(notes), "--prefix", "imported")
    query = inst.outside / "query.json"
    query.write_text(json.dumps({"kind": "database.rows", "table": "parts"}), encoding="utf-8")
    inst.run("research", "query", "--config", str(inst.data_dir / "research.toml"), "--query", str(query),
             "--evidence", str(inst.outside / "research-evidence"))
    # Credentials typed into the wrong fields at the CLI: refused, recorded without them.
    for password, principal in ((values["token"], "alice"), (values["alice password"], values["alice password"]),
                                (values["bob password"], "bob"), (values["mariadb password"], "alice")):
        refused = human("memory", "list", password=password, principal=principal, check=False)
        assert refused.exit_code != 0
    # A password typed as the workspace's name is shown back to whoever typed it ("no workspace named …"), on
    # their own terminal, before any password is asked for; it is recorded nowhere (the searches below).
    refused = inst.run("memory", "list", "--workspace", values["alice password"], "--as", "alice",
                       env={"ARMARIUS_PASSWORD": values["alice password"]}, allow=("alice password",))
    assert refused.exit_code != 0
    assert "no workspace named" in refused.stderr
    human("memory", "list", password=values["bob new password"], principal="bob")


def operators_at_the_cli(inst: Installation) -> None:
    exported = inst.outside / "shop.jsonl"
    inst.ok("export", str(exported), "--workspace", WORKSPACE)
    inst.ok("export", str(inst.outside / "shop-folder"), "--workspace", WORKSPACE)
    inst.ok("export", str(inst.outside / "verified.jsonl"), "--workspace", WORKSPACE, "--verify")
    inst.human("import", "armarius", str(exported), "--prefix", "again")
    inst.ok("audit", "verify")
    inst.ok("audit", "anchor", str(inst.outside / "anchors.txt"))
    inst.ok("audit", "tail", "--workspace", WORKSPACE, "--limit", "500")
    inst.ok("audit", "tail", "--limit", "500")
    inst.run("demo", "--no-serve")
    inst.ok("audit", "rotate-key")
    keys = audit_keys(inst)
    assert len(keys) == 2
    inst.secrets.values["rotated audit key"] = keys[-1]
    inst.secrets.allowed["rotated audit key"] = ("file audit.key",)
    inst.ok("audit", "verify")
    inst.run("doctor")


async def agent_over_stdio(inst: Installation) -> None:
    """`armarius mcp` in a subprocess with the token and the database passwords in its environment."""
    env = {**inst.env, "ARMARIUS_TOKEN": inst.secrets.values["token"], "PATH": os.environ.get("PATH", "")}
    parameters = StdioServerParameters(command=sys.executable, args=["-m", "armarius", "--data-dir",
                                                                     str(inst.data_dir), "mcp"], env=env)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        async with Client(stdio_client(parameters, errlog=errors)) as client:
            for tool, arguments in (("whoami", {}), ("recall", {"query": "gaskets"}),
                                    ("session_open", {"subject": "Over stdio"})):
                result = await client.call_tool(tool, arguments)
                inst.record.add(f"stdio {tool}", result.content[0].text)  # type: ignore[union-attr]
            session = tool_payload(result)["session"]
            for arguments in ({"kind": "database.rows", "table": "parts"}, {"kind": "database.rows", "table": "nope"}):
                result = await client.call_tool("project_query", {"session": session, "arguments": arguments})
                inst.record.add("stdio project_query", result.content[0].text)  # type: ignore[union-attr]
        errors.seek(0)
        inst.record.add("stdio server stderr", errors.read())


# Looking -------------------------------------------------------------------------------------------------


def table_rows(inst: Installation) -> dict[str, list[str]]:
    """Every row of every table as text, read as the owner (past row-level security)."""
    settings = load_settings(inst.data_dir, environ=inst.env)
    with OwnerSQL(settings) as sql:
        if settings.database_url is not None:
            tables = [str(row[0]) for row in sql.rows(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
            return {table: [str(row[0]) for row in sql.rows(f"SELECT t::text FROM {table} t")] for table in tables}
        tables = [str(row[0]) for row in sql.rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")]
        return {table: [repr(row) for row in sql.rows(f"SELECT * FROM {table}")] for table in tables}


def files_under(*folders: Path) -> Iterator[tuple[str, bytes]]:
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                yield f"file {path.relative_to(folder)}", path.read_bytes()


def fragments(secret: str) -> list[str]:
    """The secret and a piece from its middle (a cut-off echo of it is a leak too)."""
    return [secret, secret[len(secret) // 3:len(secret) // 3 + 12]]


def test_no_secret_reaches_a_file_a_row_a_log_or_an_answer(installation: Installation) -> None:
    inst = installation
    with capturing_logs(inst.logs):
        set_up(inst)
        app = open_app(load_settings(inst.data_dir, environ=inst.env))
        try:
            with serving_with_logs(app, inst.logs) as base_url:
                found = anyio.run(agent_over_http, inst, base_url)
                web_and_api(inst, base_url, found)
        finally:
            app.close()
        humans_at_the_cli(inst, found)
        operators_at_the_cli(inst)
        if "ARMARIUS_DATABASE_URL" in inst.env:  # the stdio server once (its start costs seconds): with every secret
            anyio.run(agent_over_stdio, inst)
    values = inst.secrets.values
    places: list[tuple[str, str]] = list(inst.record.texts)
    assert any("POST /mcp" in line for line in inst.logs.lines), "the server's access log was captured"
    places += [(f"log {index}", line) for index, line in enumerate(inst.logs.lines)]
    places += [(where.replace(f"file {Path('audit.key')}", "file audit.key"), content.decode("utf-8", "replace"))
               for where, content in files_under(inst.data_dir, inst.outside)]
    rows = table_rows(inst)
    places += [(f"table {table}", "\n".join(texts)) for table, texts in rows.items()]
    assert rows["audit_events"], "the audit log was searched"
    assert rows["captures"], "the captures were searched"
    assert any(place.startswith("file ") and place.endswith(".jsonl") for place, _ in places), "an export"
    leaks = []
    for name, secret in values.items():
        allowed = inst.secrets.allowed.get(name, ())
        for piece in fragments(secret):
            leaks += [(name, place) for place, text in places if piece in text and not place.startswith(allowed)]
    hashes = [str(row.split("scrypt$", 1)[1]).split("$")[-1][:44] for row in rows["principals"] if "scrypt$" in row]
    assert len(hashes) >= 2, rows["principals"]  # alice's, bob's (and the demo's administrator's)
    for digest in hashes:
        leaks += [("a password hash", place) for place, text in places
                  if digest in text and place != "table principals" and not place.startswith("file armarius.sqlite3")]
    assert not leaks, "secrets found:\n" + "\n".join(sorted({f"  {name}: in {place}" for name, place in leaks}))
    scale.record("secret greps", len(places) * sum(len(fragments(secret)) for secret in values.values()))
