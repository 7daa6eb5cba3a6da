"""Database research figures: ``database.rows`` and ``database.count`` on MariaDB next to the same
statement through the bare driver (PyMySQL).

Setup: a fresh MariaDB database ``armarius_bench_<hex>`` with one table ``creature`` of ``--rows`` rows
(default 1,000,000, loaded with ``INSERT ... SELECT`` from the Sequence engine), an index on
``(faction, level)``, and a SELECT-only login with a random password (hosts ``%`` and ``localhost``)
granted SELECT on that table only. Everything is dropped at the end. The admin login comes from
ARMARIUS_BENCH_MARIADB_URL (default mysql://root@127.0.0.1:3306).

Data: ``faction = id % 50`` (20,000 rows each), ``level = (id DIV 50) % 80``, so ``faction = 7 AND
level >= 40`` matches 10,000 rows (the page of 100 is full: 101 rows are fetched) and is what COUNT
counts. One row in 20,000 has a comment holding ``50%_off``: the escaped LIKE ``contains`` query reads
the whole table (fewer rows match than fit in a page).

Layers, all timed alternately in one loop after a warm-up (each iteration: bare, service, recorded,
stdio):

* **bare**: one persistent autocommit PyMySQL connection as the reader, the statement Armarius
  builds (backtick-quoted columns, ``ORDER BY `id` ASC``, ``LIMIT 101 OFFSET 0``), ``fetchall``.
* **service**: ``ResearchService.query(arguments)``: validation, the driver (its own read-only
  transaction per statement), JSON conversion, the capture (hashed, written nowhere).
* **session**: ``SessionService.query(actor, session, arguments)`` in an opened app (SQLite data
  folder): as ``service`` plus the reservation, the capture file, the capture row, the evidence record
  and the audit event, as over MCP.
* **stdio**: ``project_query`` of a session through ``armarius mcp`` with the SDK's client.

"same" repeats the identical query: after the first call the capture already exists (its file is
left as it is; the session records a repeat). "varying" cycles through 2,000 (faction, level)
pairs, a distinct query per call and layer, so every call writes a new capture; its bare figure
runs the service's pairs. The target: service p50 <= 1.5x bare p50.

    .venv/bin/python bench/database_rows.py [--rows 1000000] [--iterations 300] [--scan-iterations 15]
                                            [--warmup 30] [--no-stdio] [--profile N]

``--profile N`` also runs cProfile over N service calls of "rows same" and "rows varying" and prints
the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import random
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql
from databases import percentile
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from armarius.app import Armarius, initialize, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.canonical import canonical_json
from armarius.config import Settings
from armarius.research.config import load_research_config
from armarius.research.service import ResearchService

MARIADB_ADMIN_URL = os.environ.get("ARMARIUS_BENCH_MARIADB_URL", "mysql://root@127.0.0.1:3306")
PASSWORD_ENV = "ARMARIUS_BENCH_DB_PASSWORD"  # noqa: S105 (a variable's name)
TABLE = "creature"
COLUMNS = ("id", "name", "faction", "level", "price", "created", "flags", "comment")
FACTIONS = 50
LEVELS = 80
FACTION, LEVEL = 7, 40
NEEDLE = "50%_off"
NEEDLE_EVERY = 20_000
PAGE = 100
TARGET_RATIO = 1.5
BY = "operator:bench"
SESSION_BUDGET = 1_000_000
SEED = 20261129


# --- the database ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchDatabase:
    host: str
    port: int
    database: str
    user: str
    password: str


def _admin() -> dict[str, Any]:
    parts = urlsplit(MARIADB_ADMIN_URL)
    return {"host": parts.hostname or "127.0.0.1", "port": parts.port or 3306,
            "user": unquote(parts.username or "root"), "password": unquote(parts.password or "")}


def _load_sql(rows: int) -> str:
    return (
        f"INSERT INTO `{TABLE}` ({', '.join(f'`{name}`' for name in COLUMNS)}) "
        f"SELECT seq, CONCAT('Creature ', seq), seq % {FACTIONS}, (seq DIV {FACTIONS}) % {LEVELS}, "
        "(seq * 37 % 1000000) / 100, TIMESTAMPADD(SECOND, seq * 17, '2020-01-01 00:00:00'), seq * 40503 % 65536, "
        f"IF(seq % {NEEDLE_EVERY} = 0, CONCAT('Sale: {NEEDLE} for creature ', seq), "
        f"CONCAT('A plain comment about creature number ', seq, ' of faction ', seq % {FACTIONS})) "
        f"FROM seq_1_to_{rows}"
    )


@contextmanager
def mariadb_table(rows: int) -> Iterator[tuple[BenchDatabase, float]]:
    """A fresh database with the table loaded and a SELECT-only reader; dropped on exit."""
    admin = _admin()
    suffix = secrets.token_hex(4)
    bench = BenchDatabase(host=admin["host"], port=admin["port"], database=f"armarius_bench_{suffix}",
                          user=f"armarius_bench_reader_{suffix}", password=secrets.token_hex(16))
    root = pymysql.connect(**admin, charset="utf8mb4", autocommit=True)
    started = time.perf_counter()
    try:
        with root.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{bench.database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
            cursor.execute(f"USE `{bench.database}`")
            cursor.execute(
                f"CREATE TABLE `{TABLE}` (`id` INT NOT NULL PRIMARY KEY, `name` VARCHAR(64) NOT NULL, "
                "`faction` INT NOT NULL, `level` SMALLINT NOT NULL, `price` DECIMAL(12,2) NOT NULL, "
                "`created` DATETIME NULL, `flags` INT NOT NULL, `comment` VARCHAR(200) NULL"
                ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"
            )
            cursor.execute(_load_sql(rows))
            cursor.execute(f"CREATE INDEX `faction_level` ON `{TABLE}` (`faction`, `level`)")
            cursor.execute(f"ANALYZE TABLE `{TABLE}`")
            cursor.fetchall()
            for host in ("%", "localhost"):
                cursor.execute("CREATE USER %s@%s IDENTIFIED BY %s", (bench.user, host, bench.password))
                cursor.execute(f"GRANT SELECT ON `{bench.database}`.`{TABLE}` TO %s@%s", (bench.user, host))
        yield bench, time.perf_counter() - started
    finally:
        try:
            _drop(root, bench)
        finally:
            root.close()


def _drop(root: Any, bench: BenchDatabase) -> None:
    with root.cursor() as cursor:
        cursor.execute("SELECT id FROM information_schema.processlist WHERE (user = %s OR db = %s)"
                       " AND id <> CONNECTION_ID()", (bench.user, bench.database))
        for (session,) in cursor.fetchall():
            with suppress(Exception):  # the session may have ended on its own
                cursor.execute(f"KILL {int(session)}")
        cursor.execute(f"DROP DATABASE IF EXISTS `{bench.database}`")
        for host in ("%", "localhost"):
            cursor.execute("DROP USER IF EXISTS %s@%s", (bench.user, host))


def research_toml(folder: Path, bench: BenchDatabase) -> Path:
    path = folder / "research.toml"
    path.write_text(
        "[[databases]]\n"
        'name = "bench"\n'
        'dialect = "mariadb"\n'
        f'host = "{bench.host}"\n'
        f"port = {bench.port}\n"
        f'database = "{bench.database}"\n'
        f'user = "{bench.user}"\n'
        f'password_env = "{PASSWORD_ENV}"\n'
        'snapshot = "bench-1"\n'
        f'tables = ["{TABLE}"]\n',
        encoding="utf-8",
    )
    return path


# --- the queries ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """One workload: the project query and the statement Armarius builds for it, with its parameters."""

    label: str
    arguments: dict[str, Any]
    statement: str
    parameters: tuple[Any, ...]


_SELECT = f"SELECT {', '.join(f'`{name}`' for name in COLUMNS)} FROM `{TABLE}`"
_INDEXED = " WHERE `faction` = %s AND `level` >= %s"
_CONTAINS = " WHERE `comment` LIKE %s ESCAPE '!'"
_PAGE = " ORDER BY `id` ASC LIMIT %s OFFSET %s"


def indexed_rows(faction: int, level: int, label: str = "rows") -> Query:
    filters = [{"column": "faction", "op": "eq", "value": faction}, {"column": "level", "op": "ge", "value": level}]
    return Query(label, {"kind": "database.rows", "table": TABLE, "filters": filters, "limit": PAGE},
                 _SELECT + _INDEXED + _PAGE, (faction, level, PAGE + 1, 0))


def indexed_count(faction: int, level: int, label: str = "count") -> Query:
    filters = [{"column": "faction", "op": "eq", "value": faction}, {"column": "level", "op": "ge", "value": level}]
    return Query(label, {"kind": "database.count", "table": TABLE, "filters": filters},
                 f"SELECT COUNT(*) FROM `{TABLE}`" + _INDEXED, (faction, level))


def _like(text: str) -> str:
    return "%" + text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


def contains_rows() -> Query:
    filters = [{"column": "comment", "op": "contains", "value": NEEDLE}]
    return Query("rows contains (scan)", {"kind": "database.rows", "table": TABLE, "filters": filters, "limit": PAGE},
                 _SELECT + _CONTAINS + _PAGE, (_like(NEEDLE), PAGE + 1, 0))


def contains_count() -> Query:
    filters = [{"column": "comment", "op": "contains", "value": NEEDLE}]
    return Query("count contains (scan)", {"kind": "database.count", "table": TABLE, "filters": filters},
                 f"SELECT COUNT(*) FROM `{TABLE}`" + _CONTAINS, (_like(NEEDLE),))


def varying_pairs() -> list[tuple[int, int]]:
    pairs = [(faction, level) for faction in range(FACTIONS) for level in range(20, 60)]
    random.Random(SEED).shuffle(pairs)
    return pairs


@dataclass
class Workload:
    """A row of the table: per layer, the query of each call (one query for 'same')."""

    label: str
    queries: Callable[[int, int], Query]  # (call index, layer index) -> the query
    iterations: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    answer_bytes: dict[str, int] = field(default_factory=dict)
    matched: str = ""


LAYERS = ("bare", "service", "session", "stdio")


# --- the layers -----------------------------------------------------------------------------------


def bare_call(connection: Any, query: Query) -> int:
    with connection.cursor() as cursor:
        cursor.execute(query.statement, query.parameters)
        return len(cursor.fetchall())


def plans(connection: Any, queries: list[Query]) -> None:
    """MariaDB's plan for each statement (EXPLAIN as the reader): which index, how many rows it expects."""
    for query in queries:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + query.statement, query.parameters)
            names = [column[0] for column in cursor.description]
            for row in cursor.fetchall():
                plan = dict(zip(names, row, strict=True))
                print(f"  plan {query.label:<22} type={plan['type']} key={plan['key']} rows~{plan['rows']} "
                      f"{plan['Extra'] or ''}")


def _describe(result: dict[str, Any]) -> str:
    if "count" in result:
        return f"count={result['count']}"
    return f"{len(result['rows'])} rows, next_offset={result['next_offset']}"


def agent(app: Armarius) -> tuple[str, Actor]:
    directory = app.directory
    directory.create_workspace("bench", by=BY)
    directory.add_principal("bench-agent", Kind.AGENT, workspace="bench", role=Role.READER, by=BY)
    token = directory.issue_token("bench-agent", workspace="bench", by=BY).token
    return token, directory.authenticate_token(token)


async def measure(workloads: list[Workload], connection: Any, service: ResearchService, app: Armarius,
                  actor: Actor, client: Client | None, warmup: int) -> None:
    session = app.sessions.open(actor, "database_rows.py", budget=SESSION_BUDGET)["session"]
    remote = None
    if client is not None:
        opened = await client.call_tool("session_open", {"subject": "database_rows.py", "budget": SESSION_BUDGET})
        remote = json.loads(opened.content[0].text)["session"]  # type: ignore[union-attr]
    for workload in workloads:
        layers = [layer for layer in LAYERS if layer != "stdio" or client is not None]
        workload.samples = {layer: [] for layer in layers}
        for index in range(-warmup, workload.iterations):
            call = index + warmup
            for number, layer in enumerate(layers):
                query = workload.queries(call, number if layer != "bare" else 1)
                started = time.perf_counter()
                if layer == "bare":
                    bare_call(connection, query)
                elif layer == "service":
                    answer = service.query(query.arguments)
                elif layer == "session":
                    app.sessions.query(actor, session, query.arguments)
                else:
                    assert client is not None
                    result = await client.call_tool("project_query", {"session": remote, "arguments": query.arguments})
                elapsed = time.perf_counter() - started
                if layer == "stdio" and result.is_error:
                    raise RuntimeError(f"project_query failed: {result.content}")
                if index >= 0:
                    workload.samples[layer].append(elapsed)
                if call == 0 and layer == "service":
                    workload.answer_bytes["service"] = len(canonical_json(answer["result"]).encode("utf-8"))
                    workload.matched = _describe(answer["result"])
                if call == 0 and layer == "stdio":
                    workload.answer_bytes["stdio"] = len(getattr(result.content[0], "text", "").encode("utf-8"))


# --- report ---------------------------------------------------------------------------------------


def report(workloads: list[Workload]) -> None:
    header = (f"{'query':<22} {'n':>4} {'bare p50':>9} {'p95':>7} {'service p50':>12} {'p95':>7} {'ratio':>6} "
              f"{'session p50':>13} {'stdio p50':>10} {'p95':>7} {'ratio':>6} {'bytes':>7}")
    print(header)
    print("-" * len(header))
    for workload in workloads:
        p50 = {layer: percentile(samples, 0.5) * 1000 for layer, samples in workload.samples.items()}
        p95 = {layer: percentile(samples, 0.95) * 1000 for layer, samples in workload.samples.items()}
        stdio = (f"{p50['stdio']:>10.2f} {p95['stdio']:>7.2f} {p50['stdio'] / p50['bare']:>5.1f}x"
                 if "stdio" in p50 else f"{'-':>10} {'-':>7} {'-':>6}")
        print(f"{workload.label:<22} {workload.iterations:>4} {p50['bare']:>9.2f} {p95['bare']:>7.2f} "
              f"{p50['service']:>12.2f} {p95['service']:>7.2f} {p50['service'] / p50['bare']:>5.2f}x "
              f"{p50['session']:>13.2f} {stdio} {workload.answer_bytes.get('service', 0):>7}")
    print()
    print("milliseconds; ratio = layer p50 / bare p50; bytes = canonical JSON of the service's result")
    for workload in workloads:
        line = f"  {workload.label}: {workload.matched}"
        if "stdio" in workload.answer_bytes:
            line += f"; stdio text {workload.answer_bytes['stdio']} bytes"
        print(line)
    for workload in workloads:
        if workload.label.startswith(("rows same", "count same")):
            ratio = percentile(workload.samples["service"], 0.5) / percentile(workload.samples["bare"], 0.5)
            verdict = "meets" if ratio <= TARGET_RATIO else "misses"
            print(f"target service <= {TARGET_RATIO}x bare: {workload.label} {ratio:.2f}x ({verdict})")


def profile(service: ResearchService, calls: int) -> None:
    pairs = varying_pairs()
    for label, queries in (("rows same", lambda _i: indexed_rows(FACTION, LEVEL)),
                           ("rows varying", lambda i: indexed_rows(*pairs[(i + 7) % len(pairs)]))):
        profiler = cProfile.Profile()
        profiler.enable()
        for index in range(calls):
            service.query(queries(index).arguments)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("cumulative").print_stats(30)
        print(f"\n--- cProfile: {calls} service calls, {label} (cumulative) ---")
        print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--iterations", type=int, default=300, help="timed calls per layer, indexed queries")
    parser.add_argument("--scan-iterations", type=int, default=15, help="timed calls per layer, contains scans")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--no-stdio", action="store_true", help="skip armarius mcp over stdio")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N service calls")
    options = parser.parse_args()
    pairs = varying_pairs()
    if (options.iterations + options.warmup) * 3 > len(pairs):
        print(f"note: more than {len(pairs)} varying calls; some repeat a query (capture already written)")

    def varying(call: int, layer: int) -> Query:
        return indexed_rows(*pairs[(call * 3 + layer - 1) % len(pairs)], label="rows varying")

    def varying_count(call: int, layer: int) -> Query:
        return indexed_count(*pairs[(call * 3 + layer - 1) % len(pairs)], label="count varying")

    scan = max(1, min(options.warmup, 3))
    workloads = [
        Workload("rows same", lambda _call, _layer: indexed_rows(FACTION, LEVEL), options.iterations),
        Workload("rows varying", varying, options.iterations),
        Workload("count same", lambda _call, _layer: indexed_count(FACTION, LEVEL), options.iterations),
        Workload("count varying", varying_count, options.iterations),
        Workload("rows contains (scan)", lambda _call, _layer: contains_rows(), options.scan_iterations),
        Workload("count contains (scan)", lambda _call, _layer: contains_count(), options.scan_iterations),
    ]
    with mariadb_table(options.rows) as (bench, setup), tempfile.TemporaryDirectory() as folder:
        print(f"MariaDB {bench.database}: {options.rows:,} rows in `{TABLE}`, set up in {setup:.1f} s")
        base = Path(folder)
        toml = research_toml(base, bench)
        environ = {PASSWORD_ENV: bench.password}
        service = ResearchService(load_research_config(toml, environ))
        settings = Settings(data_dir=base / "data", research_config=toml, environ=environ,
                            session_max_budget=SESSION_BUDGET)
        initialize(settings)
        app = open_app(settings)
        connection = pymysql.connect(host=bench.host, port=bench.port, user=bench.user, password=bench.password,
                                     database=bench.database, charset="utf8mb4", autocommit=True)
        try:
            token, actor = agent(app)
            plans(connection, [indexed_rows(FACTION, LEVEL), indexed_count(FACTION, LEVEL), contains_rows(),
                               contains_count()])
            parameters = StdioServerParameters(
                command=sys.executable, args=["-m", "armarius", "--data-dir", str(settings.data_dir), "mcp"],
                env={"ARMARIUS_TOKEN": token, "ARMARIUS_RESEARCH_CONFIG": str(toml),
                     "ARMARIUS_SESSION_MAX_BUDGET": str(SESSION_BUDGET), **environ},
            )

            async def run() -> None:
                if options.no_stdio:
                    await measure(workloads[:4], connection, service, app, actor, None, options.warmup)
                    await measure(workloads[4:], connection, service, app, actor, None, scan)
                    return
                async with Client(parameters) as client:
                    await measure(workloads[:4], connection, service, app, actor, client, options.warmup)
                    await measure(workloads[4:], connection, service, app, actor, client, scan)

            started = time.perf_counter()
            asyncio.run(run())
            print(f"measured in {time.perf_counter() - started:.0f} s\n")
            report(workloads)
            if options.profile:
                profile(service, options.profile)
        finally:
            connection.close()
            service.close()
            app.close()


if __name__ == "__main__":
    main()
