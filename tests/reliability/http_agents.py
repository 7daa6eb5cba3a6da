"""Real `armarius serve` processes, and agents and people talking to them over real HTTP.

An agent is the SDK's own MCP client over streamable HTTP, with an HTTP connection pool of its own
(so every agent holds its own connections and, with one server process, its own MCP session). A
person is an httpx client that logs in with the form and sends JSON writes with the session's CSRF
token. Both turn answers into the outcomes of tests/racers.py: ``{"ok": answer}``, ``{"error":
code, "type": class name, "details": …}`` for a refusal, ``{"exception": …}`` for anything else.

A server's output goes to a file, never to a pipe nobody reads (a full pipe would stall the server
under load); :func:`log_problems` reads it back for errors and tracebacks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import traceback
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT, create_mcp_http_client

from armarius.config import Settings
from armarius.errors import ArmariusError
from tests.e2e.servers import ARMARIUS, free_port, wait_until_healthy
from tests.racers import Outcome

_CSRF_FIELD = re.compile(r'<input type="hidden" name="csrf" value="([^"]+)">')
_CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


def _error_classes() -> dict[str, str]:
    """Error code -> the name of its class, as the in-process racers report refusals."""
    names: dict[str, str] = {}
    pending: list[type[ArmariusError]] = [ArmariusError]
    while pending:
        kind = pending.pop()
        pending.extend(kind.__subclasses__())
        code = getattr(kind, "code", None)
        if isinstance(code, str):
            names.setdefault(code, kind.__name__)
    return names


ERROR_CLASSES = _error_classes()


def refusal(error: dict[str, Any]) -> Outcome:
    """A ``{code, message, details}`` error body as a racer's outcome."""
    code = str(error["code"])
    return {"error": code, "type": ERROR_CLASSES.get(code, code), "details": error.get("details", {}),
            "message": error.get("message", "")}


def unexpected(error: BaseException) -> Outcome:
    return {"exception": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}


# Server processes ------------------------------------------------------------------------------


def server_environment(settings: Settings) -> dict[str, str]:
    """What a server process needs besides its data folder (which holds the audit key)."""
    return {} if settings.database_url is None else {"ARMARIUS_DATABASE_URL": settings.database_url}


@dataclass
class Server:
    """One `armarius serve` command (with ``--workers N``: its supervisor and N forked workers)."""

    process: subprocess.Popen[bytes]
    base_url: str
    log: Path

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def serving(settings: Settings, logs: Path, count: int = 1, *, workers: int = 1) -> Iterator[list[Server]]:
    """``count`` `armarius serve` commands on free ports (each with ``--workers``), started at
    once; each one's output in ``logs/server-N.log``. Stopped with SIGTERM afterwards."""
    started: list[Server] = []
    try:
        for index in range(count):
            port = free_port()
            args = [*ARMARIUS, "--data-dir", str(settings.data_dir), "serve", "--port", str(port), "--workers",
                    str(workers)]
            log = logs / f"server-{index}.log"
            with log.open("wb") as output:
                process = subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env={**os.environ, **server_environment(settings)})
            started.append(Server(process, f"http://127.0.0.1:{port}", log))
        for server in started:
            try:
                wait_until_healthy(server.base_url, server.process, timeout=60)  # type: ignore[arg-type]
            except AssertionError as error:
                raise AssertionError(f"{error}\n{server.log.read_text(errors='replace')}") from None
        yield started
    finally:
        for server in started:
            server.process.terminate()
        for server in started:
            try:
                server.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait()


def log_problems(log: Path) -> list[str]:
    """Lines of a server's output that tell of a failure: errors, tracebacks, 5xx answers."""
    return [line for line in log.read_text(errors="replace").splitlines()
            if line.startswith(("ERROR", "Traceback", "CRITICAL")) or re.search(r'HTTP/1\.1" 5\d\d', line)]


def rss_bytes(pid: int) -> int:
    """The process's resident set size (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """The CPU time the process has used so far, in user and system mode (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command's closing parenthesis: state is field 3, utime 14 and stime 15 (proc(5)).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Agents and people -----------------------------------------------------------------------------


@dataclass
class HttpAgent:
    """One MCP client (the SDK's, streamable HTTP) with its own connections; records each call's latency
    and the local ports of the connections its answers came on.

    By default its HTTP client is the SDK's (``create_mcp_http_client``), which closes connections idle
    for 5 s (httpx's default); ``keepalive_expiry`` keeps them longer, as a reverse proxy does (nginx's
    upstream keep-alive: 60 s), so that whether the *server* keeps an idle connection shows.
    """

    url: str
    token: str
    keepalive_expiry: float | None = None
    latencies: list[float] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    _client: Client | None = None

    async def __aenter__(self) -> HttpAgent:
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.keepalive_expiry is None:
            http = create_mcp_http_client(headers=headers)
        else:  # the SDK's settings, but for how long an idle connection is kept
            http = httpx2.AsyncClient(headers=headers, limits=httpx2.Limits(keepalive_expiry=self.keepalive_expiry),
                                      timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT))
        await self._stack.enter_async_context(http)

        async def note_port(response: Any) -> None:
            stream = response.extensions.get("network_stream")
            address = stream.get_extra_info("client_addr") if stream is not None else None
            if address:
                self.ports.append(int(address[1]))

        http.event_hooks["response"].append(note_port)
        self._client = await self._stack.enter_async_context(Client(streamable_http_client(self.url, http_client=http)))
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._stack.aclose()

    async def call(self, tool: str, **arguments: Any) -> Outcome:
        assert self._client is not None
        started = time.perf_counter()
        try:
            result = await self._client.call_tool(tool, arguments)
        except Exception as error:
            return unexpected(error)
        finally:
            self.latencies.append(time.perf_counter() - started)
        first = result.content[0] if result.content else None
        text = first.text if first is not None and first.type == "text" else ""
        try:
            answer = json.loads(text)
        except ValueError:
            return {"exception": f"{tool} answered no JSON (is_error {result.is_error}): {text[:500]!r}",
                    "traceback": ""}
        if result.is_error:
            return refusal(answer)
        return {"ok": answer}


@dataclass
class HttpHuman:
    """A person logged in to one server's web pages; sends the API's JSON writes with the CSRF header."""

    base_url: str
    http: httpx.AsyncClient = field(init=False)
    csrf: str = ""

    def __post_init__(self) -> None:
        self.http = httpx.AsyncClient(base_url=self.base_url, timeout=60)

    async def log_in(self, name: str, password: str, workspace: str) -> HttpHuman:
        form = await self.http.get("/login")
        found = _CSRF_FIELD.search(form.text)
        assert found, form.text
        answer = await self.http.post("/login", data={"csrf": found.group(1), "workspace": workspace, "name": name,
                                                      "password": password})
        assert answer.status_code == 303, answer.text
        page = await self.http.get("/")
        meta = _CSRF_META.search(page.text)
        assert meta, page.text
        self.csrf = meta.group(1)
        return self

    async def post(self, path: str, body: dict[str, Any]) -> Outcome:
        try:
            answer = await self.http.post(path, json=body, headers={"X-CSRF-Token": self.csrf})
            decoded = answer.json()
        except Exception as error:
            return unexpected(error)
        if answer.status_code == 200:
            return {"ok": decoded}
        if isinstance(decoded, dict) and "error" in decoded and answer.status_code < 500:
            return refusal(decoded["error"])
        return {"exception": f"HTTP {answer.status_code}: {answer.text[:500]}", "traceback": ""}

    async def close(self) -> None:
        await self.http.aclose()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")
