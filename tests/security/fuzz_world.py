"""The world the MCP fuzzer runs in, the two ways it reaches the server, and what it checks per call.

:func:`plant_world` builds a research setup with things that must never come out: a pinned git tree
whose symlinks point at a secret file beside the repository, the same secret in a later commit, in the
working tree (over a pinned path), in an untracked file and in git's own files; and a research
database with a non-allowlisted table holding a marker (besides the world's ``account`` secrets).

The server is reached in memory (:func:`in_memory`) or as ``armarius mcp`` over stdio
(:func:`over_stdio`), through the SDK's client; what that client refuses to write (a lone surrogate in
a nested name, or any on stdio; nesting past 254 levels) goes as JSON-RPC messages written by hand
(:class:`RawSession`): as objects over memory streams, or as JSON lines with ``\\udXXX`` escapes.

A :class:`Prober` sends one call through a transport and checks the answer: no exception, no hang,
an error only with a documented code and never ``internal``, no ``research_unavailable`` (the
sources are healthy), an answer that a real transport can send (UTF-8 JSON), and no planted secret.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.streams.buffered
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.context import ServerRequestContext
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.config import Settings
from armarius.errors import ERROR_CODES
from armarius.mcp.server import build_server
from tests.research.repos import (
    NEWLINE_NAME,
    NOT_UTF8_CONTENT,
    NOT_UTF8_NAME,
    PINNED,
    SYMLINKS,
    Repo,
    build_tree_repo,
    git,
    source_entry,
    write_config,
)
from tests.research.test_hostile_inputs import INJECTIONS, LOOKALIKES, MAGIC, TRAVERSALS
from tests.research.world import ALLOWLISTED, SECRET_MARKERS, TABLES, build_sqlite_world, database_entry
from tests.security.fuzz_values import Live, fill_live

#: A call slower than this is a hang (a detector, not a benchmark).
HANG_SECONDS = 10.0
#: The first line of /etc/passwd, which a symlink in the pinned tree points at.
PASSWD_MARKER = "root:x:0:0"
HIDDEN_TABLE = "fuzz_hidden"
ENRICHMENT = """
[enrichment]
max_queries = 8
max_depth = 1
[[enrichment.entities]]
type = "quest"
table = "quest_template"
id_column = "id"
columns = ["title", "reward_item"]
[[enrichment.entities]]
type = "item"
table = "item_template"
id_column = "entry"
columns = ["name"]
[[enrichment.relationships]]
relation = "rewards_item"
from_table = "quest_template"
from_id_column = "id"
from_column = "reward_item"
entity_type = "item"
"""


@dataclass
class World:
    repo: Repo
    world_path: Path
    #: Text that must never appear in any answer, by what it is.
    forbidden: dict[str, str]
    #: Hostile texts that point at the planted things.
    hostile: list[str]
    #: The state of everything the server must only read.
    fingerprint: Callable[[], str]


def plant_world(folder: Path, data_dir: Path) -> World:
    """The repository, the research database and ``research.toml`` in ``data_dir``."""
    file_secret = f"FUZZ-SECRET-{secrets.token_hex(8)}"
    row_secret = f"FUZZ-HIDDEN-{secrets.token_hex(8)}"
    neighbour = folder / "neighbour-secret.txt"
    neighbour.write_text(f"{file_secret} beside the repository\n", encoding="utf-8")
    root = folder / "repo"
    files = {path.encode(): content for path, content in PINNED.items()} | {NOT_UTF8_NAME: NOT_UTF8_CONTENT}
    links = {name.encode(): target.encode() for name, target in SYMLINKS.items()}
    links |= {b"neighbour-link": b"../neighbour-secret.txt", b"neighbour-abs": str(neighbour).encode()}
    repo = build_tree_repo(root, files, links=links, submodules=[b"vendor/lib"])
    # Outside the pinned tree: a later commit on the branch, the working tree, git's own files.
    blob = git(root, "hash-object", "-w", "--stdin", stdin=f"{file_secret} in a later commit\n".encode()).decode()
    git(root, "update-index", "--add", "--cacheinfo", f"100644,{blob.strip()},later/secret.txt")
    tree = git(root, "write-tree").decode().strip()
    later = git(root, "commit-tree", "-p", repo.pin, "-m", "later", tree).decode().strip()
    git(root, "update-ref", "refs/heads/main", later)
    (root / "src").mkdir()
    (root / "src/app.py").write_text(f"{file_secret} in the working tree over a pinned path\n", encoding="utf-8")
    (root / "untracked-secret.txt").write_text(f"{file_secret} untracked\n", encoding="utf-8")
    (root / ".git/description").write_text(f"{file_secret} in git's own files\n", encoding="utf-8")

    world = build_sqlite_world(folder / "world.sqlite")
    assert world.path is not None
    with sqlite3.connect(world.path) as connection:
        connection.execute(f"CREATE TABLE {HIDDEN_TABLE} (id INTEGER PRIMARY KEY, marker TEXT NOT NULL)")
        connection.execute(f"INSERT INTO {HIDDEN_TABLE} VALUES (1, ?)", (row_secret,))
    config = write_config(data_dir / "research.toml", [source_entry(repo)],
                          databases=[database_entry(world, tables=ALLOWLISTED)])
    config.write_text(config.read_text(encoding="utf-8") + ENRICHMENT, encoding="utf-8")

    def fingerprint() -> str:
        with sqlite3.connect(f"file:{world.path}?mode=ro", uri=True) as connection:
            counts = [connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                      for table in (*TABLES, HIDDEN_TABLE)]
        return f"{repo.state()} {counts}"

    forbidden = {"file outside the pinned tree": file_secret, "row of a table outside the allowlist": row_secret,
                 "/etc/passwd": PASSWD_MARKER, **{f"account secret {marker}": marker for marker in SECRET_MARKERS}}
    hostile = [*TRAVERSALS, *LOOKALIKES, *INJECTIONS, *MAGIC, str(neighbour), "../neighbour-secret.txt",
               "neighbour-link", "neighbour-abs", "neighbour-link/", "later/secret.txt", "untracked-secret.txt",
               ".git/description", "vendor/lib", "vendor/lib/x", "outside", "link.py", NEWLINE_NAME,
               HIDDEN_TABLE, "account", "canary", "broadcast_text", "sqlite_master", "sqlite_schema", "main.account",
               "ACCOUNT", "account ", '"account"', "`account`", "creature_template; DROP TABLE canary",
               "creature_template--", "creature_template,account", "temp.sqlite_master", "pragma_table_info",
               "rowid", "*", "entry) OR 1=1 --", "sha_pass_hash", "marker", "' OR '1'='1", "%", "_", "%%", "\\%"]
    return World(repo, world.path, forbidden, hostile, fingerprint)


def fuzz_settings(settings: Settings) -> Settings:
    """Research on; budgets and the invalid-request limit high enough that fuzzing mostly reaches the
    sources (a session still blocks now and then, and the prober opens another)."""
    return replace(settings, research_config=Path("research.toml"), research_invalid_request_limit=50,
                   session_max_budget=1_000_000)


def stdio_environment(settings: Settings, token: str) -> dict[str, str]:
    """What ``armarius mcp`` needs to serve the same data folder as :func:`fuzz_settings`."""
    environment = {"ARMARIUS_TOKEN": token, "ARMARIUS_RESEARCH_CONFIG": "research.toml",
                   "ARMARIUS_RESEARCH_INVALID_REQUEST_LIMIT": "50", "ARMARIUS_SESSION_MAX_BUDGET": "1000000"}
    if settings.database_url is not None:
        environment["ARMARIUS_DATABASE_URL"] = settings.database_url
    return environment


# --- transports ---------------------------------------------------------------------------------------


@dataclass
class Reply:
    is_error: bool
    text: str
    structured: Any


Send = Callable[[str, dict[str, Any]], Awaitable[Reply]]


def _sdk_serializes(tool: str, arguments: dict[str, Any], *, as_json: bool) -> bool:
    """Whether the SDK's client can write this call: as it does before any send (``model_dump``: not
    nested deeper than 255 levels, no lone surrogate in a nested key), and as JSON text for stdio (no
    lone surrogate at all)."""
    request = types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=arguments))
    try:
        tool.encode("utf-8")  # the client puts the name in a header
        request.model_dump(by_alias=True, mode="json", exclude_none=True)
        if as_json:
            request.model_dump_json(by_alias=True, exclude_none=True)
    except (ValueError, UnicodeError):
        return False
    return True


class ProtocolError(Exception):
    """A JSON-RPC error instead of a tool result."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"JSON-RPC error {error}")
        self.code = error.get("code")


class RawSession:
    """JSON-RPC messages written by hand, for calls the SDK's client refuses to write: Python objects
    over memory streams, or JSON lines (every non-ASCII character escaped, a lone surrogate as
    ``\\udXXX``) to a process."""

    def __init__(self, write: Callable[[dict[str, Any]], Awaitable[None]],
                 read: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self.write, self.read = write, read
        self.last_id = 1000

    async def start(self) -> None:
        await self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": "fuzz", "version": "0"}})
        await self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.last_id += 1
        await self.write({"jsonrpc": "2.0", "id": self.last_id, "method": method, "params": params})
        while True:
            answer = await self.read()
            if answer.get("id") == self.last_id:
                return answer

    async def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        answer = await self.request("tools/call", {"name": tool, "arguments": arguments})
        if "error" in answer:
            raise ProtocolError(answer["error"])
        result = answer["result"]
        assert [content["type"] for content in result["content"]] == ["text"], result
        return Reply(bool(result.get("isError")), result["content"][0]["text"], result.get("structuredContent"))


def _reply(result: Any) -> Reply:
    assert [content.type for content in result.content] == ["text"], result
    return Reply(bool(result.is_error), result.content[0].text, result.structured_content)


@asynccontextmanager
async def in_memory(app: Armarius, actor: Actor) -> AsyncIterator[tuple[Client, Send]]:
    """The real server in this process, through the SDK's in-memory client (no JSON on the way); what
    that client refuses to write goes as hand-made messages over a second pair of memory streams."""

    def resolve(_ctx: ServerRequestContext[Any]) -> Actor:
        return actor

    server = build_server(app, resolve)
    async with Client(server) as client, create_client_server_memory_streams() as (client_side, server_side), \
            anyio.create_task_group() as tasks:
        tasks.start_soon(server.run, *server_side, server.create_initialization_options())
        received, sent = client_side

        async def write(message: dict[str, Any]) -> None:
            await sent.send(SessionMessage(types.jsonrpc_message_adapter.validate_python(message)))

        async def read() -> dict[str, Any]:
            item = await received.receive()
            assert isinstance(item, SessionMessage), item
            return dict(item.message.model_dump(by_alias=True, exclude_none=True))

        raw = RawSession(write, read)
        await raw.start()

        async def send(tool: str, arguments: dict[str, Any]) -> Reply:
            if _sdk_serializes(tool, arguments, as_json=False):
                return _reply(await client.call_tool(tool, arguments))
            return await raw.call(tool, arguments)

        yield client, send
        tasks.cancel_scope.cancel()


def dumps_escaped(value: Any) -> str:
    """JSON text with every non-ASCII character escaped (a lone surrogate as ``\\udXXX``), without
    recursion, so any depth can be written."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, _Token):
            out.append(node.text)
        elif isinstance(node, dict):
            parts: list[Any] = [_Token("{")]
            for index, (key, child) in enumerate(node.items()):
                parts += [_Token(("," if index else "") + json.dumps(key) + ":"), child]
            stack += reversed([*parts, _Token("}")])
        elif isinstance(node, list):
            items: list[Any] = [_Token("[")]
            for index, child in enumerate(node):
                items += [_Token(","), child] if index else [child]
            stack += reversed([*items, _Token("]")])
        else:
            out.append(json.dumps(node))
    return "".join(out)


class _Token:
    def __init__(self, text: str) -> None:
        self.text = text


@asynccontextmanager
async def raw_stdio(data_dir: Path, environment: dict[str, str], log: Path
                    ) -> AsyncIterator[tuple[anyio.abc.Process, RawSession]]:
    """``armarius mcp`` in a subprocess, spoken to in JSON lines written by hand: the process (its stdin
    takes raw bytes too) and a started RawSession over its stdin and stdout."""
    command = [sys.executable, "-m", "armarius", "--data-dir", str(data_dir), "mcp"]
    with log.open("ab") as errors:
        async with await anyio.open_process(command, env={**os.environ, **environment}, stderr=errors) as process:
            assert process.stdin is not None
            assert process.stdout is not None
            lines = anyio.streams.buffered.BufferedByteReceiveStream(process.stdout)
            stdin = process.stdin

            async def write(message: dict[str, Any]) -> None:
                await stdin.send((dumps_escaped(message) + "\n").encode("ascii"))

            async def read() -> dict[str, Any]:
                return dict(json.loads(await lines.receive_until(b"\n", 2**26)))

            raw = RawSession(write, read)
            with anyio.fail_after(60):
                await raw.start()
            yield process, raw


@asynccontextmanager
async def over_stdio(data_dir: Path, environment: dict[str, str], log: Path) -> AsyncIterator[tuple[Client, Send]]:
    """``armarius mcp`` in a subprocess through the SDK's stdio client; what that client refuses to
    write goes, as JSON lines written by hand, to a second ``armarius mcp``."""
    command = [sys.executable, "-m", "armarius", "--data-dir", str(data_dir), "mcp"]
    parameters = StdioServerParameters(command=command[0], args=command[1:], env=environment)
    async with Client(parameters) as client, raw_stdio(data_dir, environment, log) as (_process, raw):

        async def send(tool: str, arguments: dict[str, Any]) -> Reply:
            if _sdk_serializes(tool, arguments, as_json=True):
                return _reply(await client.call_tool(tool, arguments))
            return await raw.call(tool, arguments)

        yield client, send


# --- the prober -------------------------------------------------------------------------------------

#: Codes after which the live session is of no more use: the prober opens another.
_SESSION_GONE = {"session_blocked", "session_closed", "budget_exhausted"}


@dataclass
class Problem:
    what: str
    tool: str
    arguments: Any
    detail: str
    seed: int

    def show(self) -> str:
        shown = dumps_escaped(self.arguments)
        if len(shown) > 600:
            shown = shown[:600] + f"… ({len(shown)} characters)"
        return f"{self.tool} {shown}\n    (hypothesis seed {self.seed}) {self.detail[:400]}"


@dataclass
class Prober:
    send: Send
    forbidden: dict[str, str]
    live: dict[Live, Any] = field(default_factory=dict)
    calls: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    slowest: float = 0.0
    fuzzed: int = 0
    #: The hypothesis seed of the run in progress (each problem names its own).
    seed: int = 0
    per_tool: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)

    @property
    def stopped(self) -> bool:
        """After a few hangs (each costs HANG_SECONDS) the rest of the run is not worth waiting for."""
        return sum(problem.what == "hang" for problem in self.problems) >= 3

    async def prepare(self) -> None:
        """An entry, a proposal and a repair to aim at, and a session."""
        entry = {"slug": "fuzz/entry", "title": "Fuzz entry", "body": "About handle_order. [[fuzz/other]]"}
        await self.call("remember", entry)
        proposal = await self.call("propose_draft", {"slug": "fuzz/draft", "title": "Draft", "text": "Text."})
        self.live[Live.PROPOSAL] = (proposal or {}).get("proposal", 1)
        await self._open_session()
        repair = await self.call("repair_prepare", {
            "session": self.live[Live.SESSION], "conflict": "The source says otherwise.",
            "alternatives": [{"target": {"kind": "entry", "name": "fuzz/entry", "revision": 1}, "title": "Fuzz entry",
                              "body": "Corrected.", "rationale": "The source shows it."}]})
        self.live[Live.REPAIR] = (repair or {}).get("repair", 1)

    async def _open_session(self) -> None:
        opened = await self.call("session_open", {"subject": "Fuzzing the research tools", "budget": 1_000_000})
        assert opened is not None, f"no session could be opened: {self.problems}"
        self.live[Live.SESSION] = opened["session"]

    async def cases(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        """Fuzz cases, their placeholders filled in as each is sent."""
        for tool, arguments in batch:
            if self.stopped:
                return
            if Live.SESSION not in self.live:
                await self._open_session()
            self.fuzzed += 1
            self.per_tool[tool] += 1
            await self.call(tool, fill_live(arguments, self.live.__getitem__))

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """Send one call, check the answer, record any problem; the decoded answer, or None."""
        reply = await self._send(tool, arguments)
        if reply is None:
            return None
        try:
            reply.text.encode("utf-8")
            payload = json.loads(reply.text)
        except (UnicodeEncodeError, ValueError) as error:
            self._problem("an answer no transport can send", tool, arguments, repr(error))
            return None
        if reply.structured is not None:
            self._problem("the answer is sent twice (text and structured content)", tool, arguments, reply.text)
        for what, secret in self.forbidden.items():
            if secret in reply.text:
                self._problem(f"leak: {what}", tool, arguments, reply.text)
        if reply.is_error:
            self._check_refusal(tool, arguments, payload, reply.text)
            return None
        self.answered[tool] += 1
        if tool == "session_close":
            self.live.pop(Live.SESSION, None)
        return dict(payload) if isinstance(payload, dict) else None

    async def _send(self, tool: str, arguments: dict[str, Any]) -> Reply | None:
        """The transport's reply; None (and the problem recorded) when there is none to check."""
        self.calls += 1
        started = time.monotonic()
        try:
            with anyio.fail_after(HANG_SECONDS):
                reply = await self.send(tool, arguments)
        except TimeoutError:
            self._problem("hang", tool, arguments, f"no answer within {HANG_SECONDS:.0f} s")
            return None
        except ProtocolError as error:
            if error.code == types.PARSE_ERROR:  # nested deeper than any parser reads: it cannot be read
                self.codes["JSON-RPC parse error"] += 1
            else:
                self._problem("JSON-RPC error", tool, arguments, str(error))
            return None
        except Exception as error:  # the check is that nothing escapes
            self._problem("exception", tool, arguments, f"{type(error).__name__}: {error}")
            return None
        self.slowest = max(self.slowest, time.monotonic() - started)
        return reply

    def _check_refusal(self, tool: str, arguments: Any, payload: Any, text: str) -> None:
        code = payload.get("code") if isinstance(payload, dict) else None
        self.codes[str(code)] += 1
        if code in _SESSION_GONE:
            self.live.pop(Live.SESSION, None)
        details = payload.get("details") if isinstance(payload, dict) else None
        if code not in ERROR_CODES or set(payload) != {"code", "message", "details"} or not isinstance(details, dict):
            self._problem("not a documented error", tool, arguments, text)
        elif code == "internal":
            self._problem("internal", tool, arguments, text)
        elif code == "research_unavailable" or (code == "session_blocked"
                                                and details.get("reason") == "research_unavailable"):
            self._problem("research_unavailable from input", tool, arguments, text)

    def _problem(self, what: str, tool: str, arguments: Any, detail: str) -> None:
        self.problems.append(Problem(what, tool, arguments, detail, self.seed))

    def report(self, limit: int = 3) -> str:
        """Each kind of problem per tool, with its shortest examples."""
        groups: dict[tuple[str, str], list[Problem]] = {}
        for problem in self.problems:
            groups.setdefault((problem.what, problem.tool), []).append(problem)
        lines = []
        for (what, tool), found in sorted(groups.items()):
            lines.append(f"{what} in {tool}, {len(found)} times; shortest:")
            shortest = sorted(found, key=lambda p: len(dumps_escaped(p.arguments)))[:limit]
            lines += [f"  {problem.show()}" for problem in shortest]
        return "\n".join(lines)
