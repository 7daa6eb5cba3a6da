"""A real uvicorn server in a thread, configured as `armarius serve` configures it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from armarius.app import Armarius
from armarius.web.app import server_config
from tests.e2e.servers import free_port


@pytest.fixture
def base_url(app: Armarius) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=20)
