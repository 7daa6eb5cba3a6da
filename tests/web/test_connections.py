"""Connections as the network sees them: clients that hang up, idle keep-alive connections."""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import replace
from pathlib import Path

import pytest

from armarius.app import Armarius
from armarius.web.app import server_config
from tests.e2e.servers import free_port, run_cli, running, wait_until_healthy
from tests.helpers import make_team


def _hang_up_mid_request(base_url: str, token: str) -> None:
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Length: 4096\r\n\r\n{\"jsonrpc\": ".encode()
        )


def test_a_client_that_hangs_up_is_one_brief_line_not_an_error(
        app: Armarius, base_url: str, caplog: pytest.LogCaptureFixture) -> None:
    token = make_team(app).agent_token
    caplog.set_level(logging.INFO)
    for _ in range(3):
        _hang_up_mid_request(base_url, token)
    deadline = time.monotonic() + 20
    while sum("disconnected" in r.getMessage() for r in caplog.records) < 3:
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.05)
    brief = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert all(r.levelno == logging.INFO and r.exc_info is None and r.name == "armarius.web" for r in brief)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "a hang-up is not a server error"


def test_the_server_keeps_idle_connections_for_the_setting(app: Armarius) -> None:
    """uvicorn's own default closes an idle connection after 5 s; `armarius serve` uses the setting."""
    assert server_config(app).timeout_keep_alive == app.settings.keep_alive_seconds == 65
    short = replace(app.settings, keep_alive_seconds=7)
    assert server_config(replace(app, settings=short)).timeout_keep_alive == 7


def test_armarius_serve_closes_an_idle_connection_after_the_setting(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    assert run_cli("init", data_dir=data_dir).returncode == 0
    port = free_port()
    with running(["--data-dir", str(data_dir), "serve", "--port", str(port)],
                 env={"ARMARIUS_KEEP_ALIVE_SECONDS": "1"}) as process:
        wait_until_healthy(f"http://127.0.0.1:{port}", process)
        with socket.create_connection(("127.0.0.1", port)) as connection:
            connection.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            connection.settimeout(60)
            received = b""
            while b'"ok"' not in received:
                received += connection.recv(4096)
            assert received.startswith(b"HTTP/1.1 200")
            assert connection.recv(4096) == b"", "the server closes the idle connection"
