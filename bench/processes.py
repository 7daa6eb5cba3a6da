"""Server processes for bench/compare.py: MCP servers over stdio through the SDK's own client (with the
server's pid, to read its CPU time), `armarius serve` over HTTP, and the npm packages of the peers.

CPU time is read from the process's own CPU clock (clock_gettime(2) on the clock id Linux derives from
the pid, as clock_getcpuclockid(3) does: nanoseconds, every thread's, ended threads included), so it is
the server's own work, whatever the client and the rest of the machine do meanwhile. Where that clock
cannot be read, ``/proc/<pid>/stat`` (utime + stime, proc(5)) in clock ticks, 10 ms on this kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

ARMARIUS = [sys.executable, "-m", "armarius"]
NOOP_SERVER = Path(__file__).with_name("noop_server.py")
#: Where the peers' npm packages are installed, once per version (``--reinstall`` empties it).
NPM_DIR = Path("/tmp/armarius-bench-npm")  # noqa: S108 (a fixed cache path, like the source corpus's)


# CPU and children ---------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The direct children of a process (every thread's)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.extend(int(child) for child in (task / "children").read_text().split())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return found


def cpu_seconds(pid: int) -> float:
    """CPU time the process has used so far, user and system, to the nanosecond."""
    try:
        # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of the kernel: what clock_getcpuclockid(3) returns.
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return ticked_cpu_seconds(pid)


def ticked_cpu_seconds(pid: int) -> float:
    """CPU time the process has used so far, user and system (utime + stime), in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command's closing parenthesis: state is field 3, utime field 14 and stime field 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def database_cpu_seconds() -> float:
    """CPU time the PostgreSQL server's processes on this machine have used so far (its backends, one a
    connection, and the writers behind them), user and system; 0 where none runs. A backend that ends
    takes its time with it: read it over a window in which the pool keeps its connections."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1].split()
        if name == "postgres":
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# MCP over stdio ------------------------------------------------------------------------------------


@dataclass
class StdioServer:
    """A running MCP server over stdio and the SDK's client connected to it."""

    name: str
    client: Client
    pid: int

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The tool's answer as JSON (its first text content); raises when the answer is an error."""
        result = await self.client.call_tool(tool, arguments)
        text = getattr(result.content[0], "text", "") if result.content else ""
        if result.is_error:
            raise ToolError(f"{self.name} {tool}: {text[:300]}")
        return json.loads(text) if text else None

    async def call_text(self, tool: str, arguments: dict[str, Any]) -> str:
        """The tool's first text content, unparsed (its answer bytes); raises when it is an error."""
        result = await self.client.call_tool(tool, arguments)
        text = getattr(result.content[0], "text", "") if result.content else ""
        if result.is_error:
            raise ToolError(f"{self.name} {tool}: {text[:300]}")
        return str(text)


class ToolError(RuntimeError):
    """A tool answered with an error."""


@asynccontextmanager
async def stdio_server(name: str, command: str, args: list[str], env: dict[str, str], log: Path
                       ) -> AsyncIterator[StdioServer]:
    """Start ``command`` as an MCP server over stdio with the SDK's client (its stderr into ``log``)."""
    before = set(children(os.getpid()))
    parameters = StdioServerParameters(command=command, args=args, env=env)
    with log.open("a", encoding="utf-8") as errlog:
        async with Client(stdio_client(parameters, errlog=errlog)) as client:
            spawned = sorted(set(children(os.getpid())) - before)
            if len(spawned) != 1:
                raise RuntimeError(f"expected one new child process for {name}, found {spawned}")
            yield StdioServer(name, client, spawned[0])


# armarius serve over HTTP -------------------------------------------------------------------------


@dataclass
class HttpServer:
    process: subprocess.Popen[bytes]
    base_url: str
    log: Path

    def pids(self) -> list[int]:
        """The command's process and its forked workers."""
        return [self.process.pid, *children(self.process.pid)]


@contextmanager
def armarius_serve(data_dir: Path, env: dict[str, str], log: Path, workers: int = 1) -> Iterator[HttpServer]:
    """`armarius serve --workers N` on a free port, healthy, stopped with SIGTERM after."""
    port = free_port()
    args = [*ARMARIUS, "--data-dir", str(data_dir), "serve", "--port", str(port), "--workers", str(workers)]
    with http_server(args, port, {**os.environ, **env}, log, workers) as server:
        yield server


@contextmanager
def noop_serve(log: Path) -> Iterator[HttpServer]:
    """The no-op MCP server (bench/noop_server.py) over streamable HTTP on a free port, healthy."""
    port = free_port()
    with http_server([sys.executable, str(NOOP_SERVER), "--http", str(port)], port, dict(os.environ), log) as server:
        yield server


@contextmanager
def http_server(args: list[str], port: int, env: dict[str, str], log: Path, workers: int = 1) -> Iterator[HttpServer]:
    """An HTTP server started with ``args`` and listening on ``port``, healthy, stopped with SIGTERM after."""
    with log.open("ab") as output:
        process = subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = HttpServer(process, f"http://127.0.0.1:{port}", log)
    try:
        wait_until_healthy(server, workers)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_healthy(server: HttpServer, workers: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.process.args!r} exited with {server.process.returncode}: "
                               f"{server.log.read_text(errors='replace')[-2000:]}")
        try:
            healthy = httpx.get(f"{server.base_url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            healthy = False
        if healthy and len(server.pids()) >= (1 if workers == 1 else workers + 1):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{server.process.args!r} did not become healthy in {timeout:.0f} s")


def refusal_of_serve(data_dir: Path, env: dict[str, str], workers: int) -> str:
    """What `armarius serve --workers N` says when it refuses to start (or '' if it started)."""
    args = [*ARMARIUS, "--data-dir", str(data_dir), "serve", "--port", str(free_port()), "--workers", str(workers)]
    try:
        completed = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
                                   check=False)
    except subprocess.TimeoutExpired:
        return ""
    return (completed.stderr or completed.stdout).strip()


# npm packages --------------------------------------------------------------------------------------


def npm_package(name: str, version: str, *, reinstall: bool = False) -> Path:
    """The package's folder, installed with npm (no audit, no funding notes) into its own folder under
    NPM_DIR the first time, or again with ``reinstall``."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise RuntimeError("node and npm are needed for the peers' MCP servers")
    prefix = NPM_DIR / f"{name.replace('/', '__')}@{version}"
    folder = prefix / "node_modules" / name
    if reinstall and prefix.exists():
        shutil.rmtree(prefix)
    if not (folder / "package.json").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        print(f"  npm install {name}@{version} into {prefix} ...", flush=True)
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
                        "--no-save", f"{name}@{version}"], check=True, stdout=subprocess.DEVNULL, timeout=600)
        print(f"  installed in {time.perf_counter() - started:.0f} s", flush=True)
    return folder


def npm_bin(folder: Path) -> Path:
    """The package's (single) command script."""
    manifest = json.loads((folder / "package.json").read_text())
    command = manifest["bin"]
    return folder / (command if isinstance(command, str) else next(iter(command.values())))


def node_version() -> str:
    return subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()
