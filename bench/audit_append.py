"""Audit chain figures on SQLite and PostgreSQL: appends per second, and the time of verify_all.

Each append is its own transaction (``database.transaction(workspace_id=..., write=True)`` around
``armarius.audit.chain.append``), by 1 and by 4 writer processes racing on one workspace chain.
Then a chain of 100,000 events is built in large transactions and ``verify_all`` is timed.

The benchmark makes its own temporary SQLite file and its own temporary PostgreSQL database with
a non-owner login role (admin URL from ARMARIUS_BENCH_PG_URL, default
postgresql://postgres@127.0.0.1:5432/test), and drops them afterwards. Without a reachable
PostgreSQL it reports SQLite only.

    .venv/bin/python bench/audit_append.py [--events N] [--verify-events 100000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import psycopg
from databases import PG_ADMIN_URL, postgres_settings, sqlite_settings

from armarius.app import Armarius, open_app
from armarius.audit import chain as audit
from armarius.config import Settings

WRITER_COUNTS = (1, 4)
BUILD_BATCH = 10_000
#: Enough events for each measurement to last a second or more.
DEFAULT_EVENTS = {"sqlite": 20_000, "postgresql": 4_000}


@dataclass(frozen=True)
class AppendResult:
    engine: str
    writers: int
    events: int
    seconds: float


@dataclass(frozen=True)
class VerifyResult:
    engine: str
    events: int
    build_seconds: float
    verify_seconds: float


# Appends ----------------------------------------------------------------------------------------


def _writer(settings: Settings, workspace_id: int, worker: int, events: int, barrier: Barrier,
            results: Queue[tuple[float, float]]) -> None:
    application = open_app(settings)
    try:
        barrier.wait(timeout=120)
        started = time.monotonic()
        for index in range(events):
            with application.database.transaction(workspace_id=workspace_id, write=True) as tx:
                audit.append(tx, actor=f"agent:bench{worker}", action="bench.append",
                             details={"worker": worker, "index": index})
        results.put((started, time.monotonic()))
    finally:
        application.close()


def measure_appends(app: Armarius, engine: str, writers: int, total_events: int) -> AppendResult:
    workspace_id = app.directory.create_workspace(f"append-{writers}", by="operator:bench").id
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(writers)
    results: Queue[tuple[float, float]] = context.Queue()
    per_writer = total_events // writers
    processes = [
        context.Process(target=_writer, args=(app.settings, workspace_id, worker, per_writer, barrier, results))
        for worker in range(writers)
    ]
    for process in processes:
        process.start()
    spans = [results.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"a writer process failed with exit code {process.exitcode}")
    results.close()
    results.join_thread()
    checked, problem = audit.verify_chain(app.database, workspace_id)
    if problem is not None or checked != per_writer * writers:
        raise SystemExit(f"{engine}: the raced chain does not verify: {checked} events, {problem}")
    seconds = max(end for _, end in spans) - min(start for start, _ in spans)
    return AppendResult(engine, writers, per_writer * writers, seconds)


# verify_all -------------------------------------------------------------------------------------


def measure_verify(app: Armarius, engine: str, events: int) -> VerifyResult:
    workspace_id = app.directory.create_workspace("verify", by="operator:bench").id
    started = time.monotonic()
    written = 0
    while written < events:
        batch = min(BUILD_BATCH, events - written)
        with app.database.transaction(workspace_id=workspace_id, write=True) as tx:
            for index in range(written, written + batch):
                audit.append(tx, actor="agent:bench", action="bench.append", subject=f"entry/{index}",
                             details={"index": index, "revision": index % 7})
        written += batch
    built = time.monotonic()
    checked, breaks = audit.verify_all(app.database, [workspace_id])
    verified = time.monotonic()
    if breaks or checked < events:
        raise SystemExit(f"{engine}: the built chain does not verify: {checked} events, {breaks}")
    return VerifyResult(engine, checked, built - started, verified - built)


# Report -----------------------------------------------------------------------------------------


def run_engine(engine: str, settings: Settings, events: int, verify_events: int
               ) -> tuple[list[AppendResult], VerifyResult]:
    app = open_app(settings)
    try:
        appends = [measure_appends(app, engine, writers, events) for writers in WRITER_COUNTS]
        return appends, measure_verify(app, engine, verify_events)
    finally:
        app.close()


def print_report(appends: list[AppendResult], verifies: list[VerifyResult]) -> None:
    print("audit append, one transaction per event")
    print(f"{'engine':<12}{'writers':>8}{'events':>9}{'seconds':>10}{'events/s':>11}")
    for result in appends:
        rate = result.events / result.seconds
        print(f"{result.engine:<12}{result.writers:>8}{result.events:>9}{result.seconds:>10.2f}{rate:>11.0f}")
    print()
    print(f"verify_all (every chain: the one built in transactions of {BUILD_BATCH:,}, and the append chains)")
    print(f"{'engine':<12}{'events':>9}{'build s':>10}{'verify s':>10}{'verified/s':>12}")
    for verified in verifies:
        rate = verified.events / verified.verify_seconds
        print(f"{verified.engine:<12}{verified.events:>9}{verified.build_seconds:>10.2f}"
              f"{verified.verify_seconds:>10.2f}{rate:>12.0f}")


def postgres_version() -> str | None:
    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=5) as connection:
            row = connection.execute("SHOW server_version").fetchone()
    except psycopg.OperationalError as error:
        print(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {error}; reporting SQLite only")
        return None
    return str(row[0]) if row else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=None,
                        help="events appended per measurement, all writers together "
                             f"(default: sqlite {DEFAULT_EVENTS['sqlite']}, postgresql {DEFAULT_EVENTS['postgresql']})")
    parser.add_argument("--verify-events", type=int, default=100_000, help="events in the chain verify_all walks")
    args = parser.parse_args()
    version = postgres_version()
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, postgresql {version or '-'}, "
          f"cpus {os.cpu_count()}")
    appends: list[AppendResult] = []
    verifies: list[VerifyResult] = []
    with tempfile.TemporaryDirectory(prefix="armarius-bench-") as temporary:
        engines = [("sqlite", sqlite_settings)] + ([("postgresql", postgres_settings)] if version else [])
        for engine, make_settings in engines:
            with make_settings(Path(temporary) / engine) as settings:
                engine_appends, engine_verify = run_engine(
                    engine, settings, args.events or DEFAULT_EVENTS[engine], args.verify_events)
            appends += engine_appends
            verifies.append(engine_verify)
    print()
    print_report(appends, verifies)


if __name__ == "__main__":
    main()
