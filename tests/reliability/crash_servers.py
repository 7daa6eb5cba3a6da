"""`armarius serve` started, killed with SIGKILL and started again, cheaply enough to do it hundreds of times.

Starting the command costs about 1.8 s on an idle 2-core machine, nearly all of it importing Python
modules (the MCP SDK, Starlette, uvicorn, psycopg); opening the store and serving then takes about
0.1 s. A crash harness that restarts the server hundreds of times pays the imports once: a *zygote*,
a Python process that imported the command's modules, forks one child per start, and the child runs
the real command line (``armarius.cli.main.cli`` with ``--data-dir … serve --port …``), exactly what
the ``armarius`` script runs. Everything a restart does - settings, opening the store, the schema,
role and audit-key checks, building the app, binding the port - runs afresh in each child; only the
imports are inherited (and, where the version recalls by meaning, the embedding model's weights).
The zygote starts no thread and opens no file or connection of the store, and BLAS runs one thread,
so a child inherits no thread pool. (The product forks its own workers the same way: ``armarius
serve --workers N``.) The same zygote runs short CLI commands (``sessions verify``) and reports their
exit status.

The child's output goes to a log file; the test kills the child itself (``os.kill(pid, SIGKILL)``),
then has the zygote reap it and report how it ended.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.servers import ARMARIUS

REPO = Path(__file__).resolve().parents[2]

ZYGOTE = r"""
import json, os, sys, threading

import armarius.cli.main as command_line
import armarius.web.app  # what `serve` imports when it starts serving
import uvicorn.lifespan.on, uvicorn.loops.auto, uvicorn.protocols.http.auto, uvicorn.protocols.websockets.auto

# Recall by meaning, where this version has it: its model's weights, loaded once here rather than once per
# server life (each life's first write or recall would load them again: half a second of CPU). Only
# the loading is shared: each server still makes its own embedder and vectors. Without the model (or
# with another way of loading it) the servers simply load it themselves.
try:
    from wordllama import WordLlama
    from armarius.memory.embeddings import WordLlamaEmbedder
except ImportError:
    pass
else:
    loaded, load = {}, WordLlama.load

    def load_once(*args, **kwargs):
        key = json.dumps([args, kwargs], default=str, sort_keys=True)
        if key not in loaded:
            loaded[key] = load(*args, **kwargs)
        return loaded[key]

    WordLlama.load = staticmethod(load_once)
    try:
        WordLlamaEmbedder().embed(["warm"])
    except Exception:
        WordLlama.load = load

# Forking is safe only without threads: nothing imported may have started one.
print(json.dumps({"ready": True, "threads": threading.active_count()}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    if job["op"] == "reap":
        _pid, status = os.waitpid(job["pid"], 0)
        signalled = os.WIFSIGNALED(status)
        print(json.dumps({"signal": os.WTERMSIG(status) if signalled else None,
                          "exit": None if signalled else os.WEXITSTATUS(status)}), flush=True)
        continue
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.environ.update(job["env"])
            command_line.cli.main(args=job["args"], prog_name="armarius")
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
"""


@dataclass(frozen=True)
class Ended:
    """How a child ended: killed by ``signal``, or exited with ``exit``."""

    signal: int | None
    exit: int | None


class Zygote:
    """The forking parent of every server and CLI child of a crash test (see the module doc)."""

    def __init__(self, stderr: Path) -> None:
        started = time.monotonic()
        with stderr.open("ab") as errors:
            self._process = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=errors, text=True, cwd=REPO,
                                             env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
        ready = self._answer()
        assert ready == {"ready": True, "threads": 1}, ready
        #: Seconds the zygote took to import what `armarius serve` needs (what each start would pay).
        self.import_seconds = time.monotonic() - started

    def _ask(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(job) + "\n")
        self._process.stdin.flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        assert line, f"the zygote ended (exit {self._process.poll()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def spawn(self, args: list[str], *, env: dict[str, str], log: Path) -> int:
        """Fork a child running ``armarius <args>``; its pid."""
        return int(self._ask({"op": "spawn", "args": args, "env": env, "log": str(log)})["pid"])

    def reap(self, pid: int) -> Ended:
        """Wait for the child to end (kill it first, if it is a server)."""
        answer = self._ask({"op": "reap", "pid": pid})
        return Ended(answer["signal"], answer["exit"])

    def run(self, args: list[str], *, env: dict[str, str], log: Path) -> tuple[Ended, str]:
        """Run a CLI command to its end: how it ended and what it printed."""
        log.unlink(missing_ok=True)
        ended = self.reap(self.spawn(args, env=env, log=log))
        return ended, log.read_text(errors="replace")

    def cpu_seconds(self) -> float:
        """CPU time of the children the zygote reaped so far (user and system, as the kernel counts it)."""
        fields = Path(f"/proc/{self._process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # After the command's closing parenthesis, cutime and cstime are fields 16 and 17 (proc(5)).
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """Whether the child still runs (not a zombie waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def healthy(base_url: str, pid: int, *, timeout: float = 30) -> bool:
    """Wait until the server answers /healthz (True), or its process ended first (False)."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as http:
        while running(pid):
            try:
                if http.get(f"{base_url}/healthz").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{base_url} did not become healthy in {timeout} s"
            time.sleep(0.01)
    return False


def start_cold(args: list[str], *, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The real `armarius <args>` command, as the ``armarius`` script runs it, its output appended to ``log``."""
    with log.open("ab") as output:
        return subprocess.Popen([*ARMARIUS, *args], stdout=output, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**os.environ, **env})
