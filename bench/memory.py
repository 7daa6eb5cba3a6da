"""Memory figures on SQLite and PostgreSQL: remember per second, recall latency, and our overhead.

The workloads are those of /work/shared/BENCHMARKS.md ("Text and queries", "Memory"); the corpus
is bench/corpus.py. For each engine and each corpus size (cumulative: the 100,000 corpus is the
10,000 one plus 90,000 more documents) the benchmark measures

* remember per second from one client through the service layer (``app.memory.remember``, new
  slugs, the duplicate check running) and over MCP stdio (``python -m armarius mcp``);
* recall p50/p95 through the service layer (``app.memory.recall``, limit 10) for each query class
  and the mix, next to the same query as a bare FTS query on the driver (SQLite FTS5 bm25,
  PostgreSQL ts_rank over the stored tsvector), and their ratio: our overhead;
* recall p50 over MCP stdio (the mix).

Bare queries do the same logical work as recall: all words (AND); if that finds nothing and the
query has several words, any word (OR). ``bare AND`` is the first query alone, comparable to the
anchors. The corpus is loaded with the memory query functions in large transactions (no audit
events), so the schema's own FTS5 triggers and generated tsvector column fill the indexes;
PostgreSQL gets ``VACUUM ANALYZE`` after each load, as autovacuum would do.

The benchmark makes its own temporary SQLite folder and its own temporary PostgreSQL database
with a non-owner login role (admin URL from ARMARIUS_BENCH_PG_URL, default
postgresql://postgres@127.0.0.1:5432/test) and drops them afterwards. It prints figures; it
asserts nothing.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/memory.py [--sizes 10000,100000] [--engines sqlite,postgresql] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from armarius.app import Armarius, initialize, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.memory import queries
from armarius.memory.model import parse_links, slug_key, words
from armarius.memory.service import RememberRequest
from armarius.store import utc_now
from corpus import QUERY_CLASSES, Corpus, Document

PG_ADMIN_URL = os.environ.get("ARMARIUS_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
OPERATOR = "operator:bench"
WORKSPACE, AGENT = "bench", "bench-agent"
LOAD_BATCH = 5_000
#: New documents for remember get indexes far above the corpus, in a block per engine and size.
NEW_BASE, NEW_BLOCK = 10_000_000, 100_000
WARMUP_WRITES, WARMUP_QUERIES = 50, 20
RECALL_LIMIT = 10

SQLITE_BARE = (
    "SELECT rowid, bm25(entries_fts) FROM entries_fts WHERE entries_fts MATCH ? "
    "ORDER BY bm25(entries_fts) LIMIT 10"
)
POSTGRES_BARE = (
    "SELECT id FROM entries, to_tsquery('simple', %s) q WHERE tsv @@ q ORDER BY ts_rank(tsv, q) DESC LIMIT 10"
)

ANCHORS = (
    ("create, 10k items, one MCP call each, p50", "@modelcontextprotocol/server-memory",
     "45.6 ms, growing linearly with size"),
    ("search at 10k items, p50 all / common / rare", "@modelcontextprotocol/server-memory",
     "35.9 / 84 / 29.6 ms (no ranking, no limit)"),
    ("bm25 top-10 at 100k docs, p50 rare / two-word / common", "bare SQLite FTS5", "0.30 / 0.51 / 12.9 ms"),
    ("ts_rank top-10 at 100k docs, p50 rare / two-word / common", "bare PostgreSQL 15 tsvector + GIN",
     "0.80 / 0.50 / 93.7 ms"),
    ("one document per transaction", "SQLite WAL, synchronous=NORMAL / PG autocommit", "3,571/s / 1,446/s"),
    ("write_note single client / throughput ceiling", "basic-memory", "p50 91 ms / ~6.8 writes/s"),
)


# Figures ----------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


@dataclass
class ClassFigures:
    service: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    bare_and: list[float] = field(default_factory=list)
    fallbacks: int = 0
    hits: int = 0

    def ratio(self) -> float:
        return percentile(self.service, 0.5) / percentile(self.bare, 0.5)


@dataclass
class SizeFigures:
    engine: str
    size: int
    entries: int
    load_seconds: float
    prepare_seconds: float
    remember_rate: float = 0.0
    remember_p50: float = 0.0
    remember_statuses: Counter[str] = field(default_factory=Counter)
    recall: dict[str, ClassFigures] = field(default_factory=dict)
    mcp_remember_rate: float = 0.0
    mcp_remember_p50: float = 0.0
    mcp_remember_statuses: Counter[str] = field(default_factory=Counter)
    mcp_recall: list[float] = field(default_factory=list)

    def mix(self) -> ClassFigures:
        mixed = ClassFigures()
        for figures in self.recall.values():
            mixed.service += figures.service
            mixed.bare += figures.bare
            mixed.bare_and += figures.bare_and
            mixed.fallbacks += figures.fallbacks
            mixed.hits += figures.hits
        return mixed


# Temporary databases ----------------------------------------------------------------------------


def _pg_url(database: str, user: str) -> str:
    """A postgresql:// URL (what Settings accepts) on the admin URL's host and port."""
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)
    return f"postgresql://{user}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{database}"


@contextmanager
def postgres_settings(data_dir: Path) -> Iterator[Settings]:
    """A fresh database owned by the admin, and a login role for the server that owns nothing."""
    suffix = secrets.token_hex(4)
    name, role = f"armarius_bench_{suffix}", f"armarius_bench_app_{suffix}"
    admin_user = str(psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL).get("user", "postgres"))
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        connection.execute(f'CREATE ROLE "{role}" LOGIN')
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        settings = Settings(data_dir=data_dir, database_url=_pg_url(name, role),
                            database_migrate_url=_pg_url(name, admin_user))
        initialize(settings)
        yield settings
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.execute(f'DROP ROLE IF EXISTS "{role}"')


@contextmanager
def sqlite_settings(data_dir: Path) -> Iterator[Settings]:
    settings = Settings(data_dir=data_dir)
    initialize(settings)
    yield settings


# Bare FTS on the driver -------------------------------------------------------------------------


class BareSearch:
    """The floor: the engine's own top-10 ranked full-text query, without Armarius around it."""

    def __init__(self, settings: Settings) -> None:
        self.dialect = "sqlite" if settings.database_url is None else "postgresql"
        self._sqlite: sqlite3.Connection | None = None
        self._postgres: psycopg.Connection[Any] | None = None
        if self.dialect == "sqlite":
            self._sqlite = sqlite3.connect(settings.sqlite_path)
        else:
            # The owner (a superuser here): no row-level security, no workspace filter.
            self._postgres = psycopg.connect(settings.database_migrate_url or "", autocommit=True)

    def first(self, expression: str) -> list[Any]:
        if self._sqlite is not None:
            return self._sqlite.execute(SQLITE_BARE, (expression,)).fetchall()
        assert self._postgres is not None
        return self._postgres.execute(POSTGRES_BARE, (expression,)).fetchall()

    def search(self, query: str) -> tuple[int, float, bool]:
        """Recall's logical work: all words, else any word. Rows, seconds of the AND query, fell back."""
        terms = list(dict.fromkeys(words(query)))[:32]
        started = time.perf_counter()
        rows = self.first(queries.match_expression(self.dialect, [terms]))
        first = time.perf_counter() - started
        if rows or len(terms) < 2:
            return len(rows), first, False
        return len(self.first(queries.match_expression(self.dialect, [[term] for term in terms]))), first, True

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._postgres is not None:
            self._postgres.close()


# Loading ----------------------------------------------------------------------------------------


def load(app: Armarius, workspace_id: int, documents: Sequence[Document]) -> None:
    """Insert entries, first revisions, tags and links in transactions of LOAD_BATCH documents (no audit)."""
    for start in range(0, len(documents), LOAD_BATCH):
        with app.database.transaction(workspace_id=workspace_id, write=True) as tx:
            now = utc_now()
            for document in documents[start:start + LOAD_BATCH]:
                tags = queries.encode_tags(document.tags)
                entry_id = queries.insert_entry(tx, slug=document.slug, slug_key=slug_key(document.slug),
                                                title=document.title, body=document.body, tags=tags,
                                                by=f"agent:{AGENT}", at=now)
                queries.insert_revision(tx, entry_id, 1, title=document.title, body=document.body, tags=tags,
                                        reason=None, operation_id=f"op_load{document.index:025d}",
                                        author=f"agent:{AGENT}", at=now, overrode_curated=False)
                # replace_tags_and_links without its DELETEs (a new entry has nothing to delete; on SQLite
                # those DELETEs scan the workspace's whole index, which would make the load quadratic).
                for tag in document.tags:
                    tx.execute("INSERT INTO entry_tags (workspace_id, entry_id, tag) VALUES (?, ?, ?)",
                               (workspace_id, entry_id, tag))
                for target in parse_links(document.body):
                    tx.execute("INSERT INTO entry_links (workspace_id, source_id, target_slug) VALUES (?, ?, ?)",
                               (workspace_id, entry_id, target))


def prepare(settings: Settings) -> None:
    """PostgreSQL: what autovacuum does after a bulk load (statistics, GIN pending list)."""
    if settings.database_url is not None:
        with psycopg.connect(settings.database_migrate_url or "", autocommit=True) as connection:
            connection.execute("VACUUM ANALYZE")


def entry_count(app: Armarius, workspace_id: int) -> int:
    with app.database.transaction(workspace_id=workspace_id) as tx:
        return int(tx.scalar("SELECT count(*) AS n FROM entries WHERE workspace_id = ?", (workspace_id,)))


# Service layer ----------------------------------------------------------------------------------


def new_slug(index: int) -> str:
    return f"doc/new-{index:08d}"


def request(document: Document) -> RememberRequest:
    return RememberRequest(slug=document.slug, title=document.title, body=document.body, tags=list(document.tags))


def measure_remember(app: Armarius, actor: Actor, documents: Sequence[Document], figures: SizeFigures,
                     profiler: cProfile.Profile | None) -> None:
    for document in documents[:WARMUP_WRITES]:
        app.memory.remember(actor, request(document))
    timed = [request(document) for document in documents[WARMUP_WRITES:]]
    latencies = []
    if profiler is not None:
        profiler.enable()
    started = time.perf_counter()
    for remember in timed:
        begun = time.perf_counter()
        result = app.memory.remember(actor, remember)
        latencies.append(time.perf_counter() - begun)
        figures.remember_statuses[result["status"]] += 1
    elapsed = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
    figures.remember_rate = len(timed) / elapsed
    figures.remember_p50 = percentile(latencies, 0.5)


def measure_recall(app: Armarius, actor: Actor, bare: BareSearch, query_sets: dict[str, list[str]],
                   figures: SizeFigures, profiler: cProfile.Profile | None) -> None:
    for query_set in query_sets.values():
        for query in query_set[:WARMUP_QUERIES]:
            app.memory.recall(actor, query, limit=RECALL_LIMIT)
            bare.search(query)
    for query_class, query_set in query_sets.items():
        result = figures.recall[query_class] = ClassFigures()
        for number, query in enumerate(query_set):
            # Alternate which side runs first, so neither always finds the pages the other just read.
            for side in (("service", "bare") if number % 2 == 0 else ("bare", "service")):
                begun = time.perf_counter()
                if side == "service":
                    if profiler is not None:
                        profiler.enable()
                    answer = app.memory.recall(actor, query, limit=RECALL_LIMIT)
                    if profiler is not None:
                        profiler.disable()
                    result.service.append(time.perf_counter() - begun)
                    result.hits += bool(answer["results"])
                else:
                    _rows, first, fell_back = bare.search(query)
                    result.bare.append(time.perf_counter() - begun)
                    result.bare_and.append(first)
                    result.fallbacks += fell_back


# MCP stdio --------------------------------------------------------------------------------------


def mcp_environment(settings: Settings, token: str) -> dict[str, str]:
    env = {"ARMARIUS_TOKEN": token}
    if settings.database_url is not None:
        env["ARMARIUS_DATABASE_URL"] = settings.database_url
        env["ARMARIUS_DATABASE_MIGRATE_URL"] = settings.database_migrate_url or settings.database_url
    return env


async def _mcp_session(settings: Settings, token: str, documents: Sequence[Document], mixed: Sequence[str],
                       figures: SizeFigures) -> None:
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters

    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "armarius", "--data-dir", str(settings.data_dir), "mcp"],
        env=mcp_environment(settings, token),
    )

    def arguments(document: Document) -> dict[str, Any]:
        return {"slug": document.slug, "title": document.title, "body": document.body, "tags": list(document.tags)}

    async with Client(parameters) as client:
        for document in documents[:WARMUP_WRITES]:
            await client.call_tool("remember", arguments(document))
        for query in mixed[:WARMUP_QUERIES]:
            await client.call_tool("recall", {"query": query, "limit": RECALL_LIMIT})
        latencies = []
        started = time.perf_counter()
        for document in documents[WARMUP_WRITES:]:
            begun = time.perf_counter()
            result = await client.call_tool("remember", arguments(document))
            latencies.append(time.perf_counter() - begun)
            status = "error" if result.is_error else (result.structured_content or {}).get("status", "?")
            figures.mcp_remember_statuses[status] += 1
        figures.mcp_remember_rate = (len(documents) - WARMUP_WRITES) / (time.perf_counter() - started)
        figures.mcp_remember_p50 = percentile(latencies, 0.5)
        for query in mixed:
            begun = time.perf_counter()
            await client.call_tool("recall", {"query": query, "limit": RECALL_LIMIT})
            figures.mcp_recall.append(time.perf_counter() - begun)


# One engine -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    sizes: list[int]
    engines: list[str]
    queries: int
    remembers: int
    mcp_remembers: int
    mcp_queries: int
    seed: int
    profile: bool


def run_engine(engine: str, settings: Settings, corpus: Corpus, documents: Sequence[Document],
               options: Options, profiles: dict[str, cProfile.Profile]) -> list[SizeFigures]:
    app = open_app(settings)
    bare: BareSearch | None = None
    results = []
    try:
        workspace = app.directory.create_workspace(WORKSPACE, by=OPERATOR)
        app.directory.add_principal(AGENT, Kind.AGENT, workspace=WORKSPACE, role=Role.EDITOR, by=OPERATOR)
        token = app.directory.issue_token(AGENT, workspace=WORKSPACE, label="bench", by=OPERATOR).token
        actor = app.directory.authenticate_token(token)
        bare = BareSearch(settings)
        loaded = 0
        for stage, size in enumerate(options.sizes):
            started = time.perf_counter()
            load(app, workspace.id, documents[loaded:size])
            loaded_at = time.perf_counter()
            prepare(settings)
            figures = SizeFigures(engine, size, entry_count(app, workspace.id), loaded_at - started,
                                  time.perf_counter() - loaded_at)
            loaded = size
            print(f"  {engine} {size:,}: loaded {figures.entries:,} entries in {figures.load_seconds:.1f} s "
                  f"(+ {figures.prepare_seconds:.1f} s vacuum/analyze)", flush=True)
            base = NEW_BASE + stage * NEW_BLOCK
            profile = options.profile and engine == "sqlite" and size == options.sizes[-1]
            writes = corpus.documents(base, base + WARMUP_WRITES + options.remembers, new_slug)
            measure_remember(app, actor, writes, figures, profiles.setdefault("remember", cProfile.Profile())
                             if profile else None)
            print(f"  {engine} {size:,}: remember {figures.remember_rate:,.0f}/s", flush=True)
            query_sets = {name: corpus.queries(name, options.queries, size) for name in QUERY_CLASSES}
            measure_recall(app, actor, bare, query_sets, figures, profiles.setdefault("recall", cProfile.Profile())
                           if profile else None)
            print(f"  {engine} {size:,}: recall mix p50 {ms(percentile(figures.mix().service, 0.5))} ms", flush=True)
            mcp_writes = corpus.documents(base + NEW_BLOCK // 2,
                                          base + NEW_BLOCK // 2 + WARMUP_WRITES + options.mcp_remembers, new_slug)
            per_class = max(1, options.mcp_queries // len(QUERY_CLASSES))
            mixed = [query for name in QUERY_CLASSES for query in query_sets[name][:per_class]]
            asyncio.run(_mcp_session(settings, token, mcp_writes, mixed, figures))
            print(f"  {engine} {size:,}: MCP remember {figures.mcp_remember_rate:,.0f}/s, "
                  f"recall p50 {ms(percentile(figures.mcp_recall, 0.5))} ms", flush=True)
            results.append(figures)
    finally:
        if bare is not None:
            bare.close()
        app.close()
    return results


# Report -----------------------------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def print_report(results: list[SizeFigures], options: Options) -> None:
    print()
    print("remember, one client (new slugs, duplicate check on; service: app.memory.remember; "
          "MCP: python -m armarius mcp over stdio)")
    print(f"{'engine':<11}{'entries':>9}{'service/s':>11}{'p50 ms':>8}{'MCP/s':>8}{'MCP p50':>9}  statuses")
    for figures in results:
        statuses = dict(figures.remember_statuses + figures.mcp_remember_statuses)
        print(f"{figures.engine:<11}{figures.entries:>9,}{figures.remember_rate:>11,.0f}{ms(figures.remember_p50):>8}"
              f"{figures.mcp_remember_rate:>8,.0f}{ms(figures.mcp_remember_p50):>9}  {statuses}")
    print()
    print(f"recall top-{RECALL_LIMIT}, ms (service: app.memory.recall; bare: the driver's FTS query doing the "
          "same AND-then-OR work; bare AND: the first query alone)")
    print(f"{'engine':<11}{'size':>8}  {'class':<9}{'p50':>8}{'p95':>8}{'bare p50':>10}{'bare p95':>10}"
          f"{'ratio':>7}{'bare AND':>10}{'hits':>6}{'OR':>5}")
    for figures in results:
        rows = [*figures.recall.items(), ("mix", figures.mix())]
        for name, numbers in rows:
            print(f"{figures.engine:<11}{figures.size:>8,}  {name:<9}{ms(percentile(numbers.service, 0.5)):>8}"
                  f"{ms(percentile(numbers.service, 0.95)):>8}{ms(percentile(numbers.bare, 0.5)):>10}"
                  f"{ms(percentile(numbers.bare, 0.95)):>10}{numbers.ratio():>6.2f}x"
                  f"{ms(percentile(numbers.bare_and, 0.5)):>10}{numbers.hits:>6}{numbers.fallbacks:>5}")
    print(f"({options.queries} queries per class; hits: queries answered with results; OR: queries whose "
          "words never occur together, answered by the any-word fallback)")
    print()
    print("recall over MCP stdio, mix, ms")
    print(f"{'engine':<11}{'size':>8}{'calls':>7}{'p50':>8}{'p95':>8}")
    for figures in results:
        print(f"{figures.engine:<11}{figures.size:>8,}{len(figures.mcp_recall):>7}"
              f"{ms(percentile(figures.mcp_recall, 0.5)):>8}{ms(percentile(figures.mcp_recall, 0.95)):>8}")
    print()
    print("targets")
    for figures in results:
        if figures.engine != "sqlite":
            continue
        print(f"  remember >= 1,000/s through the service layer on SQLite at {figures.size:,}: "
              f"{figures.remember_rate:,.0f}/s, {_verdict(figures.remember_rate >= 1000)}")
        if figures.size == 100_000:
            mix = figures.mix()
            p50 = percentile(mix.service, 0.5)
            print(f"  recall p50 <= 10 ms at 100k on SQLite (mix): {ms(p50)} ms, {_verdict(p50 <= 0.010)}")
            for name, numbers in [*figures.recall.items(), ("mix", mix)]:
                print(f"  overhead over bare FTS <= 1.5x at 100k on SQLite, {name}: {numbers.ratio():.2f}x, "
                      f"{_verdict(numbers.ratio() <= 1.5)}; p50 {ms(percentile(numbers.service, 0.5))} ms")
    print()
    print("anchors (BENCHMARKS.md, measured 2026-11-29 on a machine of this kind)")
    for figure, anchor, value in ANCHORS:
        print(f"  {figure}: {anchor}: {value}")


def print_profiles(profiles: dict[str, cProfile.Profile]) -> None:
    for name, profiler in profiles.items():
        print()
        print(f"profile of the timed {name} calls on SQLite at the largest size (top 25 by own time)")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(25)


def parse_options() -> Options:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="corpus sizes, ascending (comma-separated)")
    parser.add_argument("--engines", default="sqlite,postgresql", help="sqlite and/or postgresql")
    parser.add_argument("--queries", type=int, default=200, help="recall queries per class and size")
    parser.add_argument("--remembers", type=int, default=1500, help="timed remember calls (service layer)")
    parser.add_argument("--mcp-remembers", type=int, default=300, help="timed remember calls over MCP stdio")
    parser.add_argument("--mcp-queries", type=int, default=200, help="timed recall calls over MCP stdio (mix)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="cProfile the service remember and recall calls on SQLite at the largest size")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    engines = [engine.strip() for engine in args.engines.split(",")]
    if sizes != sorted(set(sizes)) or any(size < 10 for size in sizes):
        parser.error("--sizes must be ascending and at least 10")
    if not set(engines) <= {"sqlite", "postgresql"}:
        parser.error("--engines takes sqlite and/or postgresql")
    return Options(sizes, engines, args.queries, args.remembers, args.mcp_remembers, args.mcp_queries, args.seed,
                   args.profile)


def main() -> None:
    options = parse_options()
    began = time.perf_counter()
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, cpus {os.cpu_count()}")
    corpus = Corpus(options.seed)
    started = time.perf_counter()
    documents = corpus.documents(0, options.sizes[-1])
    average = statistics.fmean(len(document.title) + len(document.body) for document in documents)
    print(f"corpus: {len(documents):,} documents (seed {options.seed}) in {time.perf_counter() - started:.1f} s, "
          f"{average:,.0f} characters on average, {len(corpus.vocabulary.words):,} words")
    results: list[SizeFigures] = []
    profiles: dict[str, cProfile.Profile] = {}
    runners: dict[str, Callable[[Path], AbstractContextManager[Settings]]] = {
        "sqlite": sqlite_settings, "postgresql": postgres_settings,
    }
    with tempfile.TemporaryDirectory(prefix="armarius-bench-") as temporary:
        for engine in options.engines:
            with ExitStack() as stack:
                try:
                    settings = stack.enter_context(runners[engine](Path(temporary) / engine))
                except psycopg.OperationalError as error:
                    print(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {error}; skipping it")
                    continue
                if engine == "postgresql":
                    with psycopg.connect(PG_ADMIN_URL) as connection:
                        row = connection.execute("SHOW server_version").fetchone()
                    print(f"postgresql {row[0] if row else '?'}")
                results += run_engine(engine, settings, corpus, documents, options, profiles)
    print_report(results, options)
    if profiles:
        print_profiles(profiles)
    print()
    print(f"whole run: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
