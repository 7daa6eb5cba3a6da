"""Run the real `armarius` command in a subprocess and talk to it the way a client would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ARMARIUS = [sys.executable, "-m", "armarius"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_cli(*args: str, data_dir: Path, stdin: str | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ARMARIUS, "--data-dir", str(data_dir), *args], input=stdin, capture_output=True, text=True,
        timeout=120, env={**os.environ, **(env or {})}, check=False,
    )


def agent_token(data_dir: Path) -> str:
    """A new store in ``data_dir`` with workspace alpha and its agent ``bot`` (a reader): bot's token."""
    for command in (["init"], ["workspace", "add", "alpha"],
                    ["principal", "add", "bot", "--kind", "agent", "--workspace", "alpha", "--role", "reader"]):
        assert run_cli(*command, data_dir=data_dir).returncode == 0
    issued = run_cli("--json", "token", "issue", "bot", "--workspace", "alpha", data_dir=data_dir)
    assert issued.returncode == 0, issued.stderr
    return str(json.loads(issued.stdout)["token"])


def read_json_document(stream: Any) -> dict[str, Any]:
    """Read lines until they form one JSON document (the process keeps running after it)."""
    buffer = ""
    for line in stream:
        buffer += line
        if line.rstrip() == "}":
            try:
                document: dict[str, Any] = json.loads(buffer)
            except json.JSONDecodeError:
                continue
            return document
    raise AssertionError(f"the process ended before printing a JSON document: {buffer!r}")


def wait_until_healthy(base_url: str, process: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the server did not become healthy in time")


@contextmanager
def running(args: list[str], *, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [*ARMARIUS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream:
                stream.close()
