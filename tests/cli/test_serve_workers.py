"""`armarius serve --workers N`: several processes on one port, MCP without sessions, one stop for all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from armarius.app import Armarius
from armarius.config import Settings
from tests.cli.test_serve_cli import environment
from tests.e2e.servers import ARMARIUS, free_port, wait_until_healthy
from tests.e2e.test_demo_mcp import http_client, payload
from tests.helpers import make_team

pytestmark = pytest.mark.anyio
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
#: An access log line of a worker: uvicorn's, with the worker's pid.
SERVED_BY = re.compile(r'\[(\d+)\] \S+ - "POST /mcp HTTP/1\.1" 200')


class Server:
    """`armarius serve --workers 2` as a real process; its output is collected as it comes."""

    def __init__(self, settings: Settings) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process = subprocess.Popen(
            [*ARMARIUS, "--data-dir", str(settings.data_dir), "serve", "--port", self.url.rsplit(":", 1)[1],
             "--workers", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(settings))
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout or []:
            self.lines.append(line)

    def workers(self) -> set[int]:
        """The supervisor's child processes now."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text()
        return {int(pid) for pid in children.split()}

    def served_by(self) -> set[int]:
        return {int(match[1]) for line in list(self.lines) if (match := SERVED_BY.search(line))}

    def wait(self) -> int:
        status = self.process.wait(timeout=30)
        self._reader.join(timeout=10)
        return status

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def server(settings: Settings) -> Iterator[Server]:
    running = Server(settings)
    try:
        wait_until_healthy(running.url, running.process)
        yield running
    finally:
        running.close()


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def wait_for(condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("settings", ENGINES, indirect=True)
async def test_two_workers_answer_mcp_clients_and_stop_together(app: Armarius, server: Server) -> None:
    team = make_team(app)
    workers = server.workers()
    assert len(workers) == 2

    async def client() -> None:
        async with http_client(f"{server.url}/mcp", team.agent_token) as mcp:
            assert "whoami" in {tool.name for tool in (await mcp.list_tools()).tools}
            assert payload(await mcp.call_tool("whoami", {}))["principal"] == "alpha-agent"
            assert payload(await mcp.call_tool("workspace_info", {}))["workspace"] == "alpha"

    # Every client opens connections of its own; the kernel hands them to either worker.
    for _round in range(20):
        async with anyio.create_task_group() as clients:
            for _ in range(4):
                clients.start_soon(client)
        await anyio.sleep(0.1)  # the last access lines
        if server.served_by() == workers:
            break
    assert server.served_by() == workers, "".join(server.lines)

    # Stateless: no session for a client to lose when its next request reaches the other worker.
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    answer = httpx.post(f"{server.url}/mcp", json=initialize, timeout=10, headers={
        "Authorization": f"Bearer {team.agent_token}", "Accept": "application/json, text/event-stream"})
    assert answer.status_code == 200
    assert "mcp-session-id" not in answer.headers

    server.process.send_signal(signal.SIGTERM)
    assert server.wait() == 0, "".join(server.lines)
    assert all(gone(pid) for pid in workers)
    assert "Traceback" not in "".join(server.lines)
    assert sum("Finished server process" in line for line in server.lines) == 2


@pytest.mark.parametrize("settings", ENGINES, indirect=True)
def test_a_killed_worker_is_replaced_and_a_stopped_one_stops_the_server(server: Server) -> None:
    first, second = server.workers()
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: len(server.workers() - {first, second}) == 1)
    replacement = (server.workers() - {second}).pop()
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    # A worker stopped on its own (as systemd stops every process of a service) stops the others.
    os.kill(second, signal.SIGTERM)
    assert server.wait() == 0, "".join(server.lines)
    assert all(gone(pid) for pid in (first, second, replacement))
    assert any(f"Worker process {first} was killed by signal 9; starting another." in line for line in server.lines)
