"""`armarius serve --workers N`: several processes on one port, MCP without sessions, one stop for all."""

from __future__ import annotations

import http.client
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from armarius.app import Armarius
from armarius.cli.server import DEFAULT_WORKERS_MAX
from armarius.config import Settings
from armarius.web.limits import MAX_CONNECTIONS, SHUTDOWN_GRACE_SECONDS
from tests.cli.test_serve_cli import environment
from tests.e2e.servers import ARMARIUS, free_port, wait_until_healthy
from tests.e2e.test_demo_mcp import http_client, payload
from tests.helpers import make_team

pytestmark = pytest.mark.anyio
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
#: An access log line of a worker: uvicorn's, with the worker's pid.
SERVED_BY = re.compile(r'\[(\d+)\] \S+ - "POST /mcp HTTP/1\.1" 200')
#: A worker's access log line of a health check: the worker's pid and the client's port.
HEALTH_CHECKED = re.compile(r'\[(\d+)\] 127\.0\.0\.1:(\d+) - "GET /healthz HTTP/1\.1" 200')


class Server:
    """`armarius serve --workers 2` as a real process (``workers``: another count, None: no --workers); its
    output is collected as it comes. ``ulimit``: options
    of the shell's ``ulimit`` to start it with (``-S -n 256``: a soft limit of 256 open files)."""

    def __init__(self, settings: Settings, *, workers: int | None = 2, ulimit: str | None = None,
                 port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.url = f"http://127.0.0.1:{port or free_port()}"
        command = [*ARMARIUS, "--data-dir", str(settings.data_dir), "serve", "--port", self.url.rsplit(":", 1)[1],
                   *(["--workers", str(workers)] if workers is not None else [])]
        if ulimit is not None:  # the shell execs the server: its process is the one started here
            command = ["sh", "-c", f'ulimit {ulimit} && exec "$@"', "sh", *command]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=environment(settings) | (env or {}))
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


def test_connections_made_at_once_are_spread_over_the_workers(server: Server) -> None:
    """Sixteen connections made in one burst, as agents starting together make them, as soon as the server
    answers (the other worker may still be loading), then a request on each: both workers answer some (each
    listens on a socket of its own, SO_REUSEPORT, made before its fork, and the kernel spreads the
    connections). On one shared listening socket the worker that woke first accepted every waiting one; with
    a socket made by the worker once it had loaded, connections made before went to the other."""
    port = int(server.url.rsplit(":", 1)[1])
    connections = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(16)]
    try:
        for connection in connections:
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        for connection in connections:
            assert connection.recv(65536).startswith(b"HTTP/1.1 200")
        clients = {connection.getsockname()[1] for connection in connections}

        def answered_by() -> dict[int, int]:
            return {int(match[2]): int(match[1]) for line in list(server.lines)
                    if (match := HEALTH_CHECKED.search(line)) and int(match[2]) in clients}

        wait_for(lambda: len(answered_by()) == len(clients))
        assert set(answered_by().values()) == server.workers(), "".join(server.lines)
    finally:
        for connection in connections:
            connection.close()


def connection_owners(server: Server) -> dict[int, int]:
    """The server's open connections, each as the client's port and the worker process holding it (from /proc)."""
    sockets = {}
    for pid in server.workers():
        for descriptor in os.listdir(f"/proc/{pid}/fd"):
            with suppress(OSError):  # closed meanwhile
                target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
                if target.startswith("socket:["):
                    sockets[int(target[len("socket:["):-1])] = pid
    port, owners = int(server.url.rsplit(":", 1)[1]), {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state, inode = (field for number, field in enumerate(line.split()) if number in (1, 2, 3, 9))
        if state == "01" and int(local.rsplit(":", 1)[1], 16) == port and int(inode) in sockets:
            owners[int(remote.rsplit(":", 1)[1], 16)] = sockets[int(inode)]
    return owners


def connected_to(server: Server, worker: int, count: int) -> list[http.client.HTTPConnection]:
    """``count`` open connections that the kernel gave to ``worker`` (the others made meanwhile closed)."""
    port, kept, others = int(server.url.rsplit(":", 1)[1]), [], []
    while len(kept) < count:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.connect()
        client = connection.sock.getsockname()[1]
        wait_for(lambda client=client: client in connection_owners(server))  # accepted by its worker
        (kept if connection_owners(server)[client] == worker else others).append(connection)
    for connection in others:
        connection.close()
    return kept


@pytest.mark.parametrize("replaced", [False, True], ids=["workers", "a replaced worker"])
def test_workers_even_out_the_connections_they_hold(server: Server, replaced: bool) -> None:
    """Clients keep their connections open, each with the worker the kernel gave it: twelve of sixteen on one of
    two workers. As requests come on them, the fuller worker answers some with ``Connection: close`` (the client's
    next connection is spread again) until each holds eight, then none; every request is answered. A worker
    started in place of a killed one (which held connections) takes its place in the count."""
    first, second = sorted(server.workers())
    if replaced:
        held = connected_to(server, second, 5)
        os.kill(second, signal.SIGKILL)
        wait_for(lambda: len(server.workers()) == 2 and second not in server.workers())
        for connection in held:
            connection.close()
        second = (server.workers() - {first}).pop()
    connections = connected_to(server, first, 12) + connected_to(server, second, 4)
    told_to_close: Counter[int] = Counter()
    for _round in range(40):
        owners, closing = connection_owners(server), 0
        for connection in connections:
            worker = None if connection.sock is None else owners[connection.sock.getsockname()[1]]
            connection.request("GET", "/healthz")  # on a new connection if the last answer closed the one before
            answer = connection.getresponse()
            assert (answer.status, answer.read()) == (200, b'{"status":"ok"}')
            if answer.getheader("Connection") == "close":
                closing += 1
                if worker is not None:  # (else it was opened by this request)
                    told_to_close[worker] += 1
        if not closing:
            break
    assert not closing, "the workers still close connections after 40 rounds"
    assert sorted(Counter(connection_owners(server).values()).values()) == [8, 8]
    assert told_to_close[first] >= 4, told_to_close
    for connection in connections:
        connection.close()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_second_server_on_the_port_of_a_balanced_one_is_refused(server: Server, tmp_path: Path, workers: str
                                                                   ) -> None:
    """The workers' sockets share their port (SO_REUSEPORT): another server on it, even one that would share
    it too, is refused as on any taken port, instead of taking some of the connections for a store of its own."""
    port, other = server.url.rsplit(":", 1)[1], str(tmp_path / "other")
    subprocess.run([*ARMARIUS, "--data-dir", other, "init"], capture_output=True, timeout=120, check=True,
                   env=environment())
    second = subprocess.run([*ARMARIUS, "--data-dir", other, "serve", "--port", port, "--workers", workers],
                            capture_output=True, text=True, timeout=120, check=False, env=environment())
    assert second.returncode == 10, second.stderr
    assert f"Port {port} on 127.0.0.1 is taken" in second.stderr


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_workers_start_on_the_port_a_stopped_server_left_connections_waiting_on(settings: Settings) -> None:
    """A server of one process closed an idle connection (its keep-alive ended): its side of it waits out
    TIME_WAIT on the port. Workers started on that port serve (their sockets take the port as any server's
    do; with SO_REUSEPORT alone the bind was refused, port_in_use)."""
    port = free_port()

    def time_wait_on_the_port() -> bool:
        return any(line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "06"
                   for line in Path("/proc/net/tcp").read_text().splitlines()[1:])

    with started(settings, workers=1, port=port, env={"ARMARIUS_KEEP_ALIVE_SECONDS": "1"}) as first:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as kept:
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while piece := kept.recv(65536):  # the answer, then the end the server makes after 1 s
                answer += piece
            assert answer.startswith(b"HTTP/1.1 200")
        wait_for(time_wait_on_the_port)
        first.process.send_signal(signal.SIGTERM)
        first.wait()
    assert time_wait_on_the_port()
    with started(settings, workers=2, port=port) as second:
        wait_for(lambda: len(second.workers()) == 2)
        assert _healthy(second.url)


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


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_a_worker_that_cannot_be_given_a_socket_stops_the_server(server: Server) -> None:
    """The supervisor makes each worker's listening socket before it forks the worker: when it cannot (here its
    limit on open files is what it has open, as a worker is killed), it says so and stops the server, status 1,
    rather than serve on with a worker fewer."""
    first, second = server.workers()
    supervisor = server.process.pid
    hard = resource.prlimit(supervisor, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(supervisor, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{supervisor}/fd")), hard))
    os.kill(first, signal.SIGKILL)
    assert server.wait() == 1, "".join(server.lines)
    assert all(gone(pid) for pid in (first, second))
    assert any("Cannot listen for a worker process: Too many open files; stopping the server." in line
               for line in server.lines), "".join(server.lines)


# Limits of the process -------------------------------------------------------------------------------------


def open_files_limits(pid: int) -> tuple[int, int]:
    """A process's soft and hard limit on open files, from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError(f"no open files limit for process {pid}")


@contextmanager
def started(settings: Settings, **options: Any) -> Iterator[Server]:
    """A server that the block may stop; stopped with SIGTERM (every worker with it) if it did not."""
    running = Server(settings, **options)
    try:
        wait_until_healthy(running.url, running.process)
        yield running
    finally:
        if running.process.poll() is None:
            running.process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                running.process.wait(timeout=60)
        running.close()


@pytest.mark.parametrize("settings", ENGINES, indirect=True)
def test_by_default_serve_runs_a_worker_per_cpu_on_postgresql_and_one_process_on_sqlite(settings: Settings) -> None:
    cpus = len(os.sched_getaffinity(0))
    expected = 1 if settings.database_url is None else min(cpus, DEFAULT_WORKERS_MAX)
    with started(settings, workers=None) as server:
        if expected == 1:
            assert server.workers() == set()
        else:
            wait_for(lambda: len(server.workers()) == expected)
            assert f"in {expected} worker processes" in "".join(server.lines)


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_workers_stop_when_the_supervisor_dies_while_they_start(settings: Settings) -> None:
    """A worker took its supervisor to be whatever its parent was once it had started: the supervisor
    killed while the worker was still starting left it serving for ever, a child of init."""
    server = Server(settings)
    workers: set[int] = set()
    try:
        wait_for(lambda: len(server.workers()) == 2)
        workers = server.workers()
        server.process.kill()  # before they have started (opening the store, loading the app takes a second)
        server.process.wait(timeout=30)
        wait_for(lambda: all(gone(pid) for pid in workers), timeout=60)
    finally:
        for pid in workers:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        server.close()


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
@pytest.mark.parametrize("workers", [1, 2])
def test_serve_raises_its_soft_limit_on_open_files_to_the_hard_one(settings: Settings, workers: int) -> None:
    """systemd starts a service with a soft limit of 1,024 open files: 1,100 connections that never finished
    their request head left no descriptor to accept /healthz with. The server (and every worker) raises it."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit on open files here is {hard}: nothing to raise the soft one to")
    with started(settings, workers=workers, ulimit="-S -n 256") as server:
        processes = [server.process.pid, *(server.workers() if workers > 1 else [])]
        assert len(processes) == 1 + (workers if workers > 1 else 0)
        for pid in processes:
            soft, raised_hard = open_files_limits(pid)
            assert soft == raised_hard == (hard if hard != resource.RLIM_INFINITY else soft), (pid, soft, hard)
            assert soft > 256


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_connections_past_the_limit_on_open_files_are_refused_and_the_server_recovers(settings: Settings) -> None:
    """A server that may open 256 files (soft and hard), held by 300 connections that never finish their head:
    it keeps 128 of them and tells every other connection 503 at once, instead of leaving them unaccepted until
    the head timer (30 s) frees descriptors while asyncio logs a traceback for each failed accept (thousands a
    second); when they go, it serves again."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1024:  # this test's own sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    held: list[socket.socket] = []
    with started(settings, workers=1, ulimit="-n 256") as server:
        assert open_files_limits(server.process.pid) == (256, 256)
        port = int(server.url.rsplit(":", 1)[1])
        try:
            for _ in range(300):
                connection = socket.create_connection(("127.0.0.1", port), timeout=20)
                connection.sendall(b"G")
                held.append(connection)
            with socket.create_connection(("127.0.0.1", port), timeout=20) as fresh:
                answer = b""
                while chunk := fresh.recv(4096):  # a timeout (20 s) here: a connection left unaccepted
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 503 "), answer
        finally:
            for connection in held:
                connection.close()
        wait_for(lambda: _healthy(server.url))
        server.process.send_signal(signal.SIGTERM)
        assert server.wait() in (0, -signal.SIGTERM)  # one process: uvicorn re-raises the signal it stopped on
    output = "".join(server.lines)
    assert "Traceback" not in output, output[max(0, output.find("Traceback") - 1000):][:6000]
    assert output.count("out of system resource") + output.count("cannot accept connections") <= 1, output[-3000:]
    assert output.count("refused a connection") == 1, output[-3000:]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_a_trickled_upload_cannot_hold_a_stop_past_the_grace(settings: Settings) -> None:
    """`serve --workers 2` stopped while clients trickle login bodies (a byte every 2 s, within the body's time
    limits): it took 125 s, past the unit's TimeoutStopSec=30 (SIGKILL). The workers now cancel what is still
    in flight after SHUTDOWN_GRACE_SECONDS (20 s) and the server exits 0."""
    with started(settings, workers=2) as server:
        port = int(server.url.rsplit(":", 1)[1])
        uploads = []
        for _ in range(4):  # likely some on each worker
            upload = socket.create_connection(("127.0.0.1", port), timeout=20)
            upload.sendall((f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1000\r\n"
                            "Content-Type: application/x-www-form-urlencoded\r\n\r\na").encode())
            uploads.append(upload)
        stop_trickling = threading.Event()

        def trickle() -> None:
            while not stop_trickling.wait(2):
                for upload in uploads:
                    with suppress(OSError):
                        upload.sendall(b"a")

        trickler = threading.Thread(target=trickle, daemon=True)
        trickler.start()
        try:
            time.sleep(1)  # the requests are in flight
            server.process.send_signal(signal.SIGTERM)
            # Without the grace: until the bodies' total limit (120 s). A timeout here fails the test.
            assert server.process.wait(timeout=SHUTDOWN_GRACE_SECONDS + 40) == 0, "".join(server.lines)
        finally:
            stop_trickling.set()
            trickler.join(timeout=10)
            for upload in uploads:
                upload.close()
    output = "".join(server.lines)
    assert "timeout graceful shutdown exceeded" in output
    assert "cancelled a request still in flight after the stop's grace" in output  # one line, not a traceback
    assert "Traceback" not in output, output[-3000:]


def test_the_systemd_unit_leaves_room_for_the_grace_and_for_connections() -> None:
    unit = (Path(__file__).resolve().parents[2] / "deploy" / "armarius.service").read_text()
    settings = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#"))
    assert int(settings["TimeoutStopSec"]) >= SHUTDOWN_GRACE_SECONDS + 5
    assert int(settings["LimitNOFILE"]) >= 2 * MAX_CONNECTIONS


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_a_loopback_server_refuses_other_hosts_on_every_route_in_every_worker(settings: Settings) -> None:
    with started(settings, workers=2) as server:
        for path in ("/healthz", "/login", "/api", "/mcp"):
            for _ in range(4):  # new connections: either worker
                answer = httpx.get(f"{server.url}{path}", headers={"Host": "evil.example"}, timeout=10)
                assert answer.status_code == 421, (path, answer.text[:300])
        assert httpx.get(f"{server.url}/healthz", headers={"Host": "localhost"}, timeout=10).status_code == 200


def test_a_stop_while_a_workers_sockets_are_made_starts_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM while the supervisor makes a worker's sockets (before signals wait): the other workers are told
    to stop, and this one must not be forked after them (it would never be told, and the server would wait
    on it)."""
    from armarius.cli import server

    supervisor = server._Supervisor(cli=None, sockets=[])  # type: ignore[arg-type]

    def stopped_meanwhile(bound: list[socket.socket]) -> list[socket.socket]:
        supervisor._stop(signal.SIGTERM, None)
        return []

    monkeypatch.setattr(server, "BALANCED", True)
    monkeypatch.setattr(server, "worker_sockets", stopped_meanwhile)
    try:
        supervisor._start_worker(0)
        assert supervisor.workers == {}
    finally:
        for pid in supervisor.workers:  # the old code's child: it finds no CLI and exits
            os.waitpid(pid, 0)
