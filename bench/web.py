"""Review-gate page renders with a long queue, on SQLite and PostgreSQL.

A workspace with N pending draft proposals (default 1,000) and a real `armarius serve` web app
(uvicorn in a thread, real HTTP): a person logs in through the form, then the queue page (`/`, the
first page and a page deep in the list), the queue's JSON twin and one draft proposal's page are
each fetched repeatedly. Prints p50 and p95 per page and the bytes of each answer; the queue pages
(never renders everything), so its cost does not grow with N.

    .venv/bin/python bench/web.py [--pending 1000] [--requests 200] [--engines sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import re
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import uvicorn
from databases import engine_settings, percentile, postgres_available

from armarius.app import Armarius, open_app
from armarius.auth.permissions import Kind, Role
from armarius.auth.secrets import new_password
from armarius.web.app import server_config

BY = "operator:bench"
_CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


@contextmanager
def serving(app: Armarius) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def populate(app: Armarius, pending: int) -> tuple[str, int]:
    """A workspace with ``pending`` proposals from an agent; the reviewer's password and one proposal's id."""
    directory = app.directory
    directory.create_workspace("bench", by=BY)
    password = new_password()
    directory.add_principal("bench-human", Kind.HUMAN, workspace="bench", role=Role.EDITOR, by=BY, password=password)
    directory.add_principal("bench-agent", Kind.AGENT, workspace="bench", role=Role.EDITOR, by=BY)
    agent = directory.authenticate_token(directory.issue_token("bench-agent", workspace="bench", by=BY).token)
    shown = 0
    for index in range(pending):
        text = f"Proposal {index}.\n" + "A paragraph of a realistic note, with a few words more. " * 20
        proposal = app.drafts.propose(agent, {"slug": f"bench/p{index:05d}", "title": f"Note {index}", "text": text})
        if index == pending // 2:
            shown = proposal["proposal"]
    return password, shown


def log_in(base_url: str, password: str) -> httpx.Client:
    http = httpx.Client(base_url=base_url, follow_redirects=False)
    token = _CSRF_FIELD.search(http.get("/login").text)
    assert token, "the login form carries a CSRF field"
    answer = http.post("/login", data={"csrf": token.group(1), "workspace": "bench", "name": "bench-human",
                                       "password": password})
    assert answer.status_code == 303, answer.text
    return http


def timed(http: httpx.Client, path: str, requests: int) -> tuple[list[float], int]:
    for _ in range(10):  # warm-up
        assert http.get(path).status_code == 200, path
    latencies, size = [], 0
    for _ in range(requests):
        started = time.perf_counter()
        answer = http.get(path)
        latencies.append(time.perf_counter() - started)
        assert answer.status_code == 200, (path, answer.status_code)
        size = len(answer.content)
    return latencies, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--engines", default="sqlite,postgresql")
    options = parser.parse_args()
    engines = [e for e in options.engines.split(",") if e == "sqlite" or postgres_available()]
    print(f"{options.pending} pending draft proposals")
    print(f"{'engine':<12} {'page':<28} {'p50 ms':>8} {'p95 ms':>8} {'bytes':>8}")
    for engine in engines:
        with tempfile.TemporaryDirectory() as folder, engine_settings(engine, Path(folder) / "data") as settings:
            app = open_app(settings)
            try:
                password, proposal = populate(app, options.pending)
                with serving(app) as base_url, closing(log_in(base_url, password)) as http:
                    deep = http.get("/api/queue", params={"kind": "drafts"}).json()["next"]
                    pages = {"queue /": "/", "queue, second page": f"/?kind=drafts&after={deep}",
                             "queue JSON /api/queue": "/api/queue",
                             "draft proposal page": f"/drafts/proposals/{proposal}"}
                    for label, path in pages.items():
                        latencies, size = timed(http, path, options.requests)
                        print(f"{engine:<12} {label:<28} {percentile(latencies, 0.5) * 1000:>8.2f} "
                              f"{percentile(latencies, 0.95) * 1000:>8.2f} {size:>8}")
            finally:
                app.close()


if __name__ == "__main__":
    main()
