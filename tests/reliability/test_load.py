"""Many MCP clients at once against one `armarius serve`, on SQLite and on PostgreSQL (issue 16).

64 agents, each the SDK's streamable-HTTP client with its own connections and MCP session, connect
to the server; 32 of them call a mix of remember (their own entries), recall and read as fast as
answers come, for a bounded time; then all sit idle for longer than uvicorn's default keep-alive
(5 s); then all 64 go on, on the same connections and sessions, for as long again (at the local
scale, five times over, with a gap between every phase). The promises:

* **zero errors**: every call answers (no refusal, no exception, no 5xx), before and after the idle
  gap, and the server logs no error or traceback;
* **connections survive idleness**: half the clients keep idle connections for a minute, as a reverse
  proxy does; after the gap each of them sends its first request over a connection it had opened
  before (the server keeps idle connections ``server.keep_alive_seconds``, 65 s by default;
  docs/deployment.md). The other half are the SDK's client as it comes, which drops connections idle
  for 5 s: they reconnect, and carry on in the same MCP session;
* **no leak**: the server's resident memory after the run stays below twice what it was after the
  warm-up, plus 100 MB (a leak detector, not a benchmark), and it holds no more open files than
  it did then, give or take a connection per client.

Latency (p50, p99) and the server's CPU time per call are printed, never asserted.

The last test is a leak this run found on SQLite, reduced to the engine: bursts of calls after idle
gaps longer than 10 s (anyio ends idle worker threads; the next burst runs on new ones) left every
ended thread's connection open, two file descriptors and a page cache each.
"""

from __future__ import annotations

import os
import random
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from armarius.app import Armarius
from armarius.config import Settings
from armarius.memory.service import RememberRequest
from armarius.store.engine import SqliteDatabase
from tests.helpers import Team, make_team
from tests.racers import Outcome
from tests.reliability.http_agents import HttpAgent, cpu_seconds, log_problems, percentile, rss_bytes, serving
from tests.scale import pick, record

pytestmark = [pytest.mark.reliability, pytest.mark.anyio,
              pytest.mark.timeout(pick(ci=300, local=3600))]

#: The phases of a run: how many clients call at once (the first N of them), with an idle gap between phases.
PHASES = [32, 64] * pick(ci=1, local=5)
CLIENTS = max(PHASES)
#: How long each phase lasts.
ACTIVE_SECONDS = pick(ci=3, local=20)
#: Longer than uvicorn's (and httpx's) default keep-alive (5 s) and, at the local scale, than anyio's
#: worker threads stay idle (10 s: the next burst runs on new threads).
IDLE_SECONDS = pick(ci=6, local=12)
#: How long the proxy-like clients keep an idle connection (nginx's upstream keepalive_timeout). A
#: client that sits out a phase is idle for a gap, the phase and another gap: that stays below this
#: (and so below the server's keep-alive, 65 s), so that a lost connection is the server's doing.
PROXY_KEEPALIVE_SECONDS = 60
WARM_UP_CALLS = 1
SEED_ENTRIES = 40
#: The leak bound: after < FACTOR * before + SLACK.
RSS_FACTOR, RSS_SLACK = 2, 100 * 2**20

VOCABULARY = [f"{first}{second}" for first in ("harbor", "signal", "copper", "meadow", "lantern", "quartz",
                                               "falcon", "timber") for second in ("gate", "line", "stone", "field",
                                                                                  "light", "watch")]


@dataclass
class Meeting:
    """Clients report here at the end of a phase; the test waits for all of them."""

    expected: int
    arrived: int = 0
    all_here: anyio.Event = field(default_factory=anyio.Event)

    def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.expected:
            self.all_here.set()


@dataclass
class Phase:
    """``clients`` clients (the first ones) calling until ``deadline``, and what they saw."""

    clients: int
    done: Meeting
    go: anyio.Event = field(default_factory=anyio.Event)
    deadline: float = 0.0
    calls: int = 0
    cpu_seconds: float = 0.0
    rss_after: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)


@dataclass
class Run:
    phases: list[Phase]
    warmed: Meeting = field(default_factory=lambda: Meeting(CLIENTS))
    close: anyio.Event = field(default_factory=anyio.Event)
    errors: list[tuple[int, str, Outcome]] = field(default_factory=list)
    #: Proxy-like clients whose first request after an idle gap went over a connection they had not used
    #: before it: (client, phase, port, the ports used before).
    reconnected: list[tuple[int, int, int, set[int]]] = field(default_factory=list)


def open_files(pid: int | str = "self", under: Path | None = None) -> int:
    """How many files the process holds open; with ``under``, only those in that folder."""
    folder = f"/proc/{pid}/fd"
    if under is None:
        return len(os.listdir(folder))
    held = 0
    for descriptor in os.listdir(folder):
        try:
            held += os.readlink(f"{folder}/{descriptor}").startswith(f"{under}/")
        except FileNotFoundError:  # closed meanwhile
            continue
    return held


def seed(app: Armarius, team: Team) -> list[str]:
    """Entries for recall and read to find."""
    chance = random.Random("load-seed")
    slugs = []
    for number in range(SEED_ENTRIES):
        slug = f"seed/entry-{number}"
        body = " ".join(chance.choice(VOCABULARY) for _ in range(120))
        app.memory.remember(team.agent, RememberRequest(slug=slug, title=f"Seed {number} {secrets.token_hex(4)}",
                                                        body=body, confirm_distinct=True, reason="load test seed"))
        slugs.append(slug)
    return slugs


async def one_call(agent: HttpAgent, index: int, chance: random.Random, seeded: list[str], run: Run,
                   phase: Phase | None) -> None:
    """One call of the mix: 30 % remember (the client's own entries), 35 % recall, 35 % read."""
    choice = chance.random()
    started = time.perf_counter()
    if choice < 0.3:
        tool = "remember"
        words = " ".join(secrets.token_hex(5) for _ in range(12))
        outcome = await agent.call(tool, slug=f"load/client-{index}/note-{chance.randrange(3)}",
                                   title=f"Note {secrets.token_hex(4)}", body=f"{words} {chance.choice(VOCABULARY)}")
    elif choice < 0.65:
        tool = "recall"
        outcome = await agent.call(tool, query=" ".join(chance.sample(VOCABULARY, chance.choice((1, 2)))), limit=10)
    else:
        tool = "read"
        outcome = await agent.call(tool, slug=chance.choice(seeded))
    if "ok" not in outcome:
        run.errors.append((index, tool, outcome))
    elif phase is not None:
        phase.latencies.append(time.perf_counter() - started)
        phase.calls += 1
        phase.statuses[f"{tool}:{outcome['ok'].get('status', 'ok')}"] += 1


async def client(url: str, token: str, index: int, seeded: list[str], run: Run) -> None:
    """One agent: a warm-up call, then its part in each phase it belongs to, idle otherwise."""
    chance = random.Random(f"load-client-{index}")
    like_a_proxy = index % 2 == 0
    async with HttpAgent(url, token, keepalive_expiry=PROXY_KEEPALIVE_SECONDS if like_a_proxy else None) as agent:
        await one_call(agent, index, chance, seeded, run, None)
        run.warmed.arrive()
        for number, phase in enumerate(run.phases):
            await phase.go.wait()
            if index >= phase.clients:
                continue
            before, used = set(agent.ports), len(agent.ports)
            while time.monotonic() < phase.deadline:
                await one_call(agent, index, chance, seeded, run, phase)
            first = agent.ports[used] if len(agent.ports) > used else -1
            if like_a_proxy and first not in before:
                run.reconnected.append((index, number, first, before))
            phase.done.arrive()
        await run.close.wait()


async def test_32_then_64_clients_zero_errors_no_leak(app: Armarius, settings: Settings, tmp_path: Path,
                                                      request: pytest.FixtureRequest) -> None:
    engine = request.node.callspec.params["settings"]
    longest_idle = 2 * IDLE_SECONDS + ACTIVE_SECONDS + 10  # with time for the calls that overrun a phase
    assert longest_idle < PROXY_KEEPALIVE_SECONDS, "the proxy-like clients would drop their own connections"
    team = make_team(app, "load")
    seeded = seed(app, team)
    run = Run([Phase(clients, Meeting(clients)) for clients in PHASES])
    with serving(settings, tmp_path) as (server,):
        rss_fresh = rss_bytes(server.pid)
        async with anyio.create_task_group() as group:
            for index in range(CLIENTS):
                group.start_soon(client, server.mcp_url, team.agent_token, index, seeded, run)
            with anyio.fail_after(120):
                await run.warmed.all_here.wait()
            rss_warm, files_warm = rss_bytes(server.pid), open_files(server.pid)
            for number, phase in enumerate(run.phases):
                if number:
                    await anyio.sleep(IDLE_SECONDS)  # every client idle
                cpu_before = cpu_seconds(server.pid)
                phase.deadline = time.monotonic() + ACTIVE_SECONDS
                phase.go.set()
                with anyio.fail_after(ACTIVE_SECONDS + 120):
                    await phase.done.all_here.wait()
                phase.cpu_seconds = cpu_seconds(server.pid) - cpu_before
                phase.rss_after = rss_bytes(server.pid)
            rss_after, files_after = rss_bytes(server.pid), open_files(server.pid)
            run.close.set()
    for number, phase in enumerate(run.phases):
        record("load clients", phase.clients)
        record("load calls", phase.calls)
        print(f"\nload [{engine}] phase {number + 1}, {phase.clients} clients{' after an idle gap' if number else ''}: "
              f"{phase.calls} calls in {ACTIVE_SECONDS} s ({phase.calls / ACTIVE_SECONDS:.0f}/s); latency p50 "
              f"{percentile(phase.latencies, 0.5) * 1000:.1f} ms, p99 {percentile(phase.latencies, 0.99) * 1000:.1f} "
              f"ms; server CPU {phase.cpu_seconds / max(phase.calls, 1) * 1000:.2f} ms per call, RSS "
              f"{phase.rss_after / 2**20:.0f} MiB; "
              f"{dict(sorted(phase.statuses.items()))}")
    print(f"load [{engine}] server RSS {rss_fresh / 2**20:.0f} MiB fresh, {rss_warm / 2**20:.0f} MiB with "
          f"{CLIENTS} clients connected, {rss_after / 2**20:.0f} MiB after the run; open files {files_warm} with the "
          f"clients connected, {files_after} after the run")
    assert not run.errors, f"{len(run.errors)} errors, the first: {run.errors[:3]}"
    problems = log_problems(server.log)
    assert not problems, problems[:20]
    assert all(phase.calls >= phase.clients for phase in run.phases)  # every client called in its phases
    assert not run.reconnected, f"clients that lost their connections over an idle gap: {run.reconnected[:5]}"
    assert rss_after < RSS_FACTOR * rss_warm + RSS_SLACK, (rss_warm, rss_after)
    assert files_after <= files_warm + CLIENTS, (files_warm, files_after)


def test_threads_that_ended_leave_no_sqlite_connection_open(tmp_path: Path) -> None:
    """The server runs each call on one of anyio's worker threads, and a worker idle for 10 s ends (a new
    one starts with the next burst); the SQLite engine opens a connection per thread. Bursts after idle
    gaps must not leave the connections of ended threads open: each holds two file descriptors (the
    database and its write-ahead log) and a page cache, and a server with the common limit of 1,024
    open files would run out after a few dozen bursts."""
    database = SqliteDatabase(tmp_path / "threads.sqlite3")
    with database.transaction(write=True) as tx:
        tx.execute("CREATE TABLE numbers (n INTEGER)")

    def read() -> None:
        with database.transaction() as tx:
            tx.execute("SELECT count(*) FROM numbers")

    try:
        after_each_burst = []
        for _ in range(5):
            threads = [threading.Thread(target=read) for _ in range(20)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            after_each_burst.append(open_files(under=tmp_path))
    finally:
        database.close()
    # Each burst's 20 connections (two files each) stay open until the next thread connects; an ended
    # thread's connection never outlives that.
    assert max(after_each_burst) <= 2 * 20, after_each_burst
    assert open_files(under=tmp_path) == 0
