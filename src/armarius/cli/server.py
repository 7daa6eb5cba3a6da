"""`armarius init|serve|mcp|demo`."""

from __future__ import annotations

import copy
import errno
import gc
import json
import os
import signal
import socket
import stat
import sys
import traceback
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import click

from armarius.app import Armarius, initialize, open_app
from armarius.auth.permissions import Kind, Role
from armarius.auth.secrets import new_password
from armarius.cli.connect import base_url as _base_url
from armarius.cli.connect import claude_code_http, http_entry, stdio_entry
from armarius.cli.context import CliContext, armarius_command, counted, pass_cli
from armarius.cli.memory import reindex_all
from armarius.config import Settings, write_settings_file
from armarius.errors import ArmariusError, InvalidInput, NotFound, PortInUse
from armarius.store.schema import check_migrator, latest_version, postgres_role

if TYPE_CHECKING:
    import uvicorn

DEMO_WORKSPACE, DEMO_ADMIN, DEMO_AGENT = "demo", "admin", "demo-agent"


@click.command()
@pass_cli
def init(cli: CliContext) -> None:
    """Create the data folder and create or migrate the database."""
    settings = cli.settings
    if settings.database_url is not None:  # a migrate URL that may not migrate is refused before anything is done
        check_migrator(settings.database_migrate_url or settings.database_url, postgres_role(settings.database_url))
    tightened = _private_folder(settings.data_dir)
    if not settings.config_file.exists():
        write_settings_file(settings)
    repaired: list[str] = []
    applied = initialize(settings, repaired=repaired.append)
    version = latest_version("sqlite" if settings.database_url is None else "postgresql")
    embedded: dict[str, Any] = {}
    if settings.memory_embeddings != "off":  # entries written before recall by meaning, or by another model
        app = open_app(replace(settings, research_config=None))  # a research source is not init's concern
        try:
            embedded = {name: result for name, result in reindex_all(app).items() if result["embedded"]}
        finally:
            app.close()
    cli.emit(
        {"data_dir": str(settings.data_dir), "schema_version": version, "applied": applied, "embedded": embedded,
         "data_dir_mode_was": None if tightened is None else f"{tightened:o}", "repaired": repaired},
        text=("" if tightened is None else f"Data folder {settings.data_dir}: mode {tightened:o} tightened to 700 "
              "(group and others had access; it holds the settings and the audit key).\n")
        + f"Data folder {settings.data_dir}: schema at version {version}"
        + (f" (applied {', '.join(map(str, applied))})." if applied else " (already up to date).")
        + "".join(f"\nRepaired: {what}." for what in repaired)
        + "".join(f"\nWorkspace {name}: "
                  f"{counted(result['embedded'], 'entry or evidence unit', 'entries and evidence units')} embedded "
                  "for recall by meaning." for name, result in embedded.items()),
    )


def _private_folder(folder: Path) -> int | None:
    """An existing data folder of this user that group or others may enter is made private (mode 700), as `init`
    makes a new one; returns the mode it had, None when it needed no change. A folder of another user is left to
    `armarius doctor`, which says how to hand it over (init cannot change its mode)."""
    try:
        info = folder.stat()
    except FileNotFoundError:
        return None
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode) or not mode & 0o077:
        return None
    if info.st_uid != os.getuid():
        click.echo(f"Warning: the data folder {folder} belongs to another user and its mode is {mode:o} (group and "
                   "others have access); `armarius doctor` says how to make it this user's and private.", err=True)
        return None
    folder.chmod(0o700)
    return mode


PORT = click.IntRange(1, 65535)


#: Whether the worker processes of `serve --workers N` each listen on a socket of their own (Linux's
#: SO_REUSEPORT: the kernel spreads new connections evenly over them). Sharing one listening socket, whichever
#: worker wakes first accepts every connection waiting: 32 clients connecting at once all went to one worker,
#: the other idle (bench/compare.py, section 6). Elsewhere the workers share the supervisor's socket.
BALANCED = sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")


def listen(host: str, port: int, *, balanced: bool = False) -> list[socket.socket]:
    """The server's listening sockets, bound now: a taken port is reported before anything is
    printed or set up, and no other program can take it between the check and the serving. ``balanced``:
    bound for the workers' own sockets to join (:func:`worker_sockets`), and not listening themselves (until
    the first worker's socket listens, another program could still take the port with SO_REUSEADDR; that
    worker's socket is then refused, and the server stops saying so)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        raise InvalidInput(f"{host!r} is not an address of this machine nor a name that resolves; give --host "
                           "an address such as 127.0.0.1.", field="host") from None
    try:
        if balanced:
            # First as any server binds: a port another program (another Armarius included, balanced or not)
            # has bound is refused here, instead of being shared with it through SO_REUSEPORT.
            _check_free(addresses)
        return _bind(addresses, balanced=balanced)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            other = free_port_near(host, port)
            example = f", for example --port {other}" if other is not None else " with --port"
            raise PortInUse(
                f"Port {port} on {host} is taken: another program (perhaps another Armarius) listens there. "
                f"Stop it, or pick another port{example} (or set [server] port in armarius.toml, or "
                "ARMARIUS_PORT).", host=host, port=port,
            ) from None
        raise InvalidInput(f"Cannot listen on {host} port {port}: {error.strerror}. Pick another --host or --port "
                           "(ports below 1024 need administrator rights).", field="port", host=host,
                           port=port) from None


def _bind(addresses: list[Any], *, balanced: bool = False) -> list[socket.socket]:
    """A listening socket on each address (from getaddrinfo), or OSError with none left open. ``balanced``: see
    :func:`listen`."""
    sockets: list[socket.socket] = []
    try:
        for family, kind, protocol, _, address in dict.fromkeys(addresses):
            sockets.append(_socket(family, kind, protocol, address, reuse_port=balanced, listening=not balanced))
    except OSError:
        for listener in sockets:
            listener.close()
        raise
    return sockets


def _check_free(addresses: list[Any]) -> None:
    """Bind the addresses as a server of one process does, and let them go: OSError where one is taken."""
    for listener in _bind(addresses):
        listener.close()


def _socket(family: int, kind: int, protocol: int, address: Any, *, reuse_port: bool = False,
            listening: bool = True) -> socket.socket:
    """A socket bound to ``address``, listening if ``listening``. ``reuse_port``: in the group of sockets of its
    user on the port (SO_REUSEPORT)."""
    listener = socket.socket(family, kind, protocol)
    try:
        if os.name == "posix":  # as uvicorn does: a restart need not wait out TIME_WAIT
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        listener.bind(address)
        if listening:
            listener.listen(2048)
    except OSError:
        listener.close()
        raise
    return listener


def worker_sockets(bound: list[socket.socket]) -> list[socket.socket]:
    """A worker's own listening sockets on the addresses of the supervisor's ``bound`` ones (from
    ``listen(..., balanced=True)``), each joining its port's group: the kernel hands every new connection to
    one listening socket of the group, spread evenly by the connection's addresses and ports."""
    own: list[socket.socket] = []
    try:
        for shared in bound:
            own.append(_socket(shared.family, shared.type, shared.proto, shared.getsockname(), reuse_port=True))
    except OSError:
        for listener in own:
            listener.close()
        raise
    return own


#: How many ports after a taken one a refusal tries before it suggests one.
PORTS_TRIED = 20


def free_port_near(host: str, port: int) -> int | None:
    """The first of the ports after ``port`` (from 8765 past the last) that the server could listen on
    right now, checked as :func:`listen` binds; None when none of :data:`PORTS_TRIED` is."""
    after: list[int] = [*range(port + 1, min(port + PORTS_TRIED, 65535) + 1), *range(8765, 8765 + PORTS_TRIED)]
    for candidate in [number for number in after if number != port][:PORTS_TRIED]:
        try:
            _check_free(socket.getaddrinfo(host, candidate, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))
        except OSError:  # socket.gaierror included
            continue
        return candidate
    return None


@contextmanager
def listening(host: str, port: int, *, balanced: bool = False) -> Iterator[list[socket.socket]]:
    """:func:`listen`, and the sockets closed when the server is done with them."""
    sockets = listen(host, port, balanced=balanced)
    try:
        yield sockets
    finally:
        for listener in sockets:
            listener.close()


def _ready(config: uvicorn.Config) -> uvicorn.Config:
    """The server's configuration loaded (the app wrapped in its protocol and middleware), then the heap
    settled: what is left to make is made per request."""
    config.load()
    settle_heap()
    return config


def settle_heap() -> None:
    """Before a server process starts answering: what it made while starting (modules, the application,
    its schemas) lives as long as the process, so it is moved out of the garbage collector's full passes.
    Such a pass runs every few thousand requests and stops the event loop meanwhile: 40-50 ms over every
    object of a started server, 4 ms over what the requests made since (bench/compare.py, section 6)."""
    gc.collect()
    gc.freeze()


#: The most worker processes `serve` starts by default (on PostgreSQL, where each opens up to 10 connections).
DEFAULT_WORKERS_MAX = 4


def default_workers(settings: Settings) -> int:
    """`serve`'s worker processes where ``--workers`` does not say. On SQLite one: the workers' writes take turns
    on the one file, and with two the writes' tail was long (deployment.md). On PostgreSQL one per CPU this
    process may run on, at most :data:`DEFAULT_WORKERS_MAX`."""
    if settings.database_url is None or not hasattr(os, "fork"):
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cpus, DEFAULT_WORKERS_MAX))


def _serve_http(app: Armarius, sockets: list[socket.socket]) -> None:
    import uvicorn

    from armarius.web.app import listens_on_loopback, server_config
    from armarius.web.limits import raise_open_files_limit

    raise_open_files_limit()
    with suppress(KeyboardInterrupt):
        uvicorn.Server(_ready(server_config(app, loopback=listens_on_loopback(sockets)))).run(sockets=sockets)


@click.command()
@click.option("--host", help="Address to listen on (default from settings: 127.0.0.1).")
@click.option("--port", type=PORT, help="Port (default from settings: 8765).")
@click.option("--workers", type=click.IntRange(1, 64),
              help=f"Server processes sharing the port (default: 1 on SQLite; on PostgreSQL one per CPU, at most "
                   f"{DEFAULT_WORKERS_MAX}); with more than one, MCP runs without sessions.")
@pass_cli
def serve(cli: CliContext, host: str | None, port: int | None, workers: int | None) -> None:
    """Serve MCP over streamable HTTP at /mcp, the JSON API at /api and /healthz."""
    host, port = host or cli.settings.host, port or cli.settings.port
    workers = workers or default_workers(cli.settings)
    if workers > 1 and not hasattr(os, "fork"):
        raise InvalidInput("--workers above 1 needs a system that can fork processes (Linux, macOS, BSD); run one "
                           "server process per port here.", field="workers")
    with listening(host, port, balanced=workers > 1 and BALANCED) as sockets:
        served = f"Serving on {_base_url(host, port)}: MCP at /mcp, the API at /api"
        if workers == 1:
            with cli.app() as app:
                click.echo(f"{served} (Ctrl-C to stop).", err=True)
                _serve_http(app, sockets)
            return
        with cli.app():  # what a worker would refuse (schema, role, audit key) is refused here, once
            pass
        click.echo(f"{served}, in {workers} worker processes, MCP without sessions (Ctrl-C to stop).", err=True)
        _Supervisor(cli, sockets).run(workers)


class _Supervisor:
    """Forks the worker processes from the bound sockets and waits for them until SIGTERM or SIGINT,
    which it passes on to every worker as SIGTERM.

    Each worker opens its own database connections after the fork (a connection pool must not be
    shared across processes); this process holds none, and no threads, so forking is safe. A worker
    killed by a signal (the OOM killer, an operator) is replaced. A worker that exits on its own
    stops the server with its exit status: 0 when it was stopped (systemd signals every process of
    the service at once), else the code of the error it reported, most likely as it started.
    """

    def __init__(self, cli: CliContext, sockets: list[socket.socket]) -> None:
        self.cli, self.sockets = cli, sockets
        self.pid = os.getpid()  # a worker's parent until the supervisor is gone
        self.workers: dict[int, int] = {}  # pid: the worker's number, which one started in its place takes
        self.stopping, self.status = False, 0

    def run(self, count: int) -> None:
        from armarius.web.limits import ConnectionShares, raise_open_files_limit

        raise_open_files_limit()  # for the workers, which inherit it
        self.shares = ConnectionShares(count)
        for handled in (signal.SIGTERM, signal.SIGINT):
            signal.signal(handled, self._stop)
        for number in range(count):
            if not self.stopping:
                self._start_worker(number)
        while self.workers:
            pid, status = os.wait()  # retried after a signal handler (PEP 475)
            if pid not in self.workers:
                continue
            number = self.workers.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                continue
            if code < 0:
                click.echo(f"Worker process {pid} was killed by signal {-code}; starting another.", err=True)
                self._start_worker(number)
            else:
                click.echo(f"Worker process {pid} exited with status {code}; stopping the server.", err=True)
                self.status = code
                self._stop(signal.SIGTERM, None)
        if self.status:
            sys.exit(self.status)

    def _stop(self, _signal: int, _frame: Any) -> None:
        self.stopping = True
        for pid in self.workers:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _start_worker(self, number: int) -> None:
        # On Linux the worker's own listening sockets are made before the fork: they take their share of the
        # connections from the moment the server has started (queued until the worker answers), not from
        # whenever the worker has loaded (connections made meanwhile all went to the workers ready first).
        try:
            sockets = worker_sockets(self.sockets) if BALANCED else self.sockets
        except OSError as error:
            click.echo(f"Cannot listen for a worker process: {error.strerror}; stopping the server.", err=True)
            self.status = 1
            self._stop(signal.SIGTERM, None)
            return
        # Signals wait until the new pid is recorded, so that a stop reaches every worker; a stop that came before
        # (while the sockets were made) starts none.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        try:
            if not self.stopping:
                pid = os.fork()
                if pid == 0:
                    self._worker(sockets, number)
                self.workers[pid] = number
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
            if BALANCED:
                for listener in sockets:
                    listener.close()  # the worker's now: this process keeps only the port

    def _worker(self, sockets: list[socket.socket], number: int) -> None:
        """The forked child, worker ``number``: never returns into the command that forked it."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        status = 0
        try:
            from armarius.web.app import listens_on_loopback, server_config
            from armarius.web.limits import share_connections

            share_connections(self.shares, number)
            if BALANCED:
                for shared in self.sockets:
                    shared.close()  # this process's copy of the supervisor's port
            with self.cli.app() as app:
                config = server_config(app, stateless=True, loopback=listens_on_loopback(sockets),
                                       log_config=_log_config_with_pid())
                _worker_server(_ready(config), supervisor=self.pid).run(sockets)
        except ArmariusError as error:  # e.g. the database went away since the supervisor's check
            click.echo(f"error [{error.code}]: {error.message}", err=True)
            status = error.exit_code
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)


def _worker_server(config: uvicorn.Config, *, supervisor: int) -> uvicorn.Server:
    """A worker's server: stops on SIGTERM from the supervisor, ignores Ctrl-C's SIGINT (the supervisor
    gets it too and passes it on as SIGTERM), and stops when the supervisor (its pid recorded before the
    fork: one that died while this worker was starting is gone too) is gone."""
    import uvicorn

    class WorkerServer(uvicorn.Server):
        def handle_exit(self, sig: int, _frame: Any) -> None:
            if sig != signal.SIGINT:  # not recorded for re-raising: the worker closes its database, exits 0
                self.should_exit = True

        async def on_tick(self, counter: int) -> bool:
            if os.getppid() != supervisor:
                self.should_exit = True
            return await super().on_tick(counter)

    return WorkerServer(config)


def _log_config_with_pid() -> dict[str, Any]:
    """uvicorn's logging, each line naming the worker process that wrote it."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    for formatter in config["formatters"].values():
        formatter["fmt"] = formatter["fmt"].replace("%(levelprefix)s", "%(levelprefix)s [%(process)d]", 1)
    return config


@click.command()
@click.option("--token", envvar="ARMARIUS_TOKEN", required=True, show_envvar=True,
              help="The agent token the connection acts as (prefer the environment variable).")
@pass_cli
def mcp(cli: CliContext, token: str) -> None:
    """Serve MCP over stdio for one agent principal."""
    from armarius.mcp.stdio import serve_stdio

    with cli.app() as app:
        settle_heap()
        anyio.run(serve_stdio, app, token)


@click.command()
@click.option("--host", help="Address to listen on.")
@click.option("--port", type=PORT, help="Port to listen on.")
@click.option("--no-serve", is_flag=True, help="Set up and print, but do not start the server.")
@pass_cli
def demo(cli: CliContext, host: str | None, port: int | None, no_serve: bool) -> None:
    """Set up a demo workspace on the embedded SQLite file, print credentials, and serve."""
    settings = cli.settings
    host, port = host or settings.host, port or settings.port
    # The port is taken before anything is set up or shown.
    bound: AbstractContextManager[list[socket.socket]] = nullcontext([]) if no_serve else listening(host, port)
    with bound as sockets:
        if not settings.config_file.exists():
            write_settings_file(settings)
        initialize(settings)
        with cli.app() as app:
            try:
                app.directory.workspace(DEMO_WORKSPACE)
                created = None
            except NotFound:
                created = _create_demo(cli, app)
            url = f"{_base_url(host, port)}/mcp"
            if created is None:
                cli.emit({"data_dir": str(settings.data_dir), "workspace": DEMO_WORKSPACE, "created": False},
                         text=_demo_again(cli))
            else:
                password, token = created
                data = _demo_connection(cli, url, password, token)
                cli.emit(data, text=_demo_instructions(data))
            if sockets:
                click.echo(f"\nServing on {_base_url(host, port)} (Ctrl-C to stop).", err=True)
                _serve_http(app, sockets)


def _demo_again(cli: CliContext) -> str:
    return "\n".join([
        f"The demo workspace exists already in {cli.settings.data_dir}; its credentials were shown once.",
        "  New agent token:    " + cli.command_line("token", "issue", DEMO_AGENT, "--workspace", DEMO_WORKSPACE,
                                                    with_data_dir=True),
        "  New admin password: " + cli.command_line("principal", "set-password", DEMO_ADMIN, with_data_dir=True),
        *_path_note(),
    ])


def _path_note() -> list[str]:
    """Say how to get `armarius` onto the PATH when it is not there (a fresh venv is not)."""
    if armarius_command() == "armarius":
        return []
    activate = Path(sys.executable).parent / "activate"
    how = f"`source {activate}` puts it there" if activate.is_file() else "the commands above use its full path"
    return ["", f"`armarius` is not on your PATH: these commands name it in full; {how}."]


def _create_demo(cli: CliContext, app: Armarius) -> tuple[str, str]:
    directory, by = app.directory, cli.operator
    directory.create_workspace(DEMO_WORKSPACE, by=by)
    password = new_password()
    directory.add_principal(DEMO_ADMIN, Kind.HUMAN, workspace=DEMO_WORKSPACE, role=Role.ADMIN, by=by,
                            password=password)
    directory.add_principal(DEMO_AGENT, Kind.AGENT, workspace=DEMO_WORKSPACE, role=Role.EDITOR, by=by)
    issued = directory.issue_token(DEMO_AGENT, workspace=DEMO_WORKSPACE, label="demo", by=by)
    return password, issued.token


def _demo_connection(cli: CliContext, url: str, password: str, token: str) -> dict[str, Any]:
    data_dir = str(cli.settings.data_dir)
    return {
        "data_dir": data_dir, "workspace": DEMO_WORKSPACE, "created": True, "url": url,
        "web": url.removesuffix("/mcp") + "/",
        "admin": {"principal": DEMO_ADMIN, "password": password},
        "agent": {"principal": DEMO_AGENT, "role": Role.EDITOR.value, "token": token},
        "claude_code": claude_code_http(url, token),
        "stdio": {"mcpServers": {"armarius": stdio_entry(data_dir, token)}},
        "http": {"mcpServers": {"armarius": http_entry(url, token)}},
        "review": [cli.command_line("memory", command, "--workspace", DEMO_WORKSPACE, "--as", DEMO_ADMIN,
                                    with_data_dir=True) for command in ("needs-review", "list")],
    }


def _demo_instructions(data: dict[str, Any]) -> str:
    def block(config: Any) -> list[str]:
        return ["    " + line for line in json.dumps(config, indent=2).splitlines()]

    return "\n".join([
        f"Armarius demo in {data['data_dir']} (embedded SQLite), workspace '{data['workspace']}'.",
        "These credentials are shown once; store them now.",
        "",
        f"Human login (administrator): principal '{DEMO_ADMIN}', password: {data['admin']['password']}",
        f"Agent token for '{DEMO_AGENT}' (editor): {data['agent']['token']}",
        "",
        "Connect an agent:",
        "  Claude Code (streamable HTTP):",
        f"    {data['claude_code']}",
        "  Claude Desktop (claude_desktop_config.json) or Cursor (.cursor/mcp.json), over stdio:",
        *block(data["stdio"]),
        "  Cursor over HTTP (.cursor/mcp.json):",
        *block(data["http"]),
        "",
        f"Review in the browser: {data['web']} (workspace '{data['workspace']}', principal '{DEMO_ADMIN}', "
        "the password above)",
        "Or from the CLI (asks for the password above; scripts set ARMARIUS_PASSWORD):",
        *(f"  {command}" for command in data["review"]),
        *_path_note(),
    ])
