"""Memory figures on SQLite and PostgreSQL: remember per second, recall latency, and our overhead.

The workloads are the project's "Text and queries" and "Memory" benchmarks; the corpus is
bench/corpus.py. For each engine and each corpus size (cumulative: the 100,000 corpus is the
10,000 one plus 90,000 more documents) the benchmark measures

* remember per second from one client through the service layer (``app.memory.remember``, new
  slugs, realistic documents, the duplicate check running) and over MCP stdio
  (``python -m armarius mcp``, the MCP SDK's client);
* recall p50/p95 through the service layer (``app.memory.recall``, limit 10) for each query class
  and the mix, next to the same recall done bare on the driver: recall's own statements (ranking,
  titles and bodies, learned from the memory query module) and its snippet function over the
  bodies (``armarius.memory.snippets``), and their ratio, our overhead; and next to the floor, the
  plain ranked match returning rowids only (SQLite FTS5 bm25, PostgreSQL ts_rank over the stored
  tsvector), which has no snippets to build;
* recall over MCP stdio (the mix).

Bare queries do the same logical work as recall: all words (AND); if that finds nothing and the
query has several words, any word (OR). ``floor AND`` is the floor's first query alone, comparable
to the anchors. The corpus is loaded with the memory query functions in large transactions (no audit
events), so the schema's own triggers fill the FTS5 index and the PostgreSQL search table.

Recall and its floor are timed on settled indexes: PostgreSQL gets ``VACUUM ANALYZE`` after each load
and again after the timed remember calls (service and MCP), before the recall calls, as autovacuum
would do. Until then the entries just written sit in the GIN index's pending list, which every search
reads in full: the floor of a rare word took 59 ms over that list instead of 0.1 ms.

Recall is by words (``memory.embeddings = "off"``, the default here), the search the bare queries
repeat; ``--embeddings wordllama`` gives the loaded entries their vectors, prints what they take on
disk, and times remember and recall (hybrid, the default mode) with vectors as well (the bare "same"
and floor queries still search by words only).

Every timed loop stops at its count or its time budget (``--budget`` seconds), whichever comes
first, so a slow path shows as a rate over fewer calls instead of stalling the run.

The benchmark makes its own temporary SQLite folder and its own temporary PostgreSQL database
with a non-owner login role (admin URL from ARMARIUS_BENCH_PG_URL, default
postgresql://postgres@127.0.0.1:5432/test) and drops them afterwards. It prints figures; it
asserts nothing.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/memory.py [--sizes 10000,100000] [--engines sqlite,postgresql] [--queries 200]
                                     [--embeddings off|wordllama]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import psycopg
from corpus import QUERY_CLASSES, Corpus, Document
from databases import PG_ADMIN_URL, postgres_settings, sqlite_settings

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings, one_blas_thread
from armarius.memory import queries, vectors
from armarius.memory.embeddings import entry_text, quantize
from armarius.memory.model import parse_links, slug_key, words
from armarius.memory.service import RememberRequest
from armarius.memory.snippets import snippet
from armarius.store import Tx, utc_now

OPERATOR = "operator:bench"
WORKSPACE, AGENT = "bench", "bench-agent"
LOAD_BATCH = 5_000
#: New documents for remember get indexes far above the corpus, in a block per size.
NEW_BASE, NEW_BLOCK = 10_000_000, 100_000
WARMUP_WRITES, WARMUP_QUERIES, WARMUP_SECONDS = 30, 10, 3.0
RECALL_LIMIT = 10
GROWTH_BLOCK = 50

SQLITE_BARE = (
    "SELECT rowid, bm25(entries_fts) FROM entries_fts WHERE entries_fts MATCH ? "
    "ORDER BY bm25(entries_fts) LIMIT 10"
)
POSTGRES_BARE = (
    "SELECT entry_id FROM entry_search, to_tsquery('simple', %s) q WHERE tsv @@ q "
    "ORDER BY ts_rank(tsv, q) DESC LIMIT 10"
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
#: Bare top-10 p50 at 100k documents (ms) per engine and class, from the anchors.
BARE_ANCHORS = {
    "sqlite": {"rare": 0.30, "two-word": 0.51, "common": 12.9},
    "postgresql": {"rare": 0.80, "two-word": 0.50, "common": 93.7},
}


# Figures ----------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def passed(self) -> bool:
        return time.perf_counter() >= self.end


@dataclass
class Writes:
    """One client's sequential writes: latencies, wall time, and what the answers said."""

    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else float("nan")


@dataclass
class Reads:
    service: list[float] = field(default_factory=list)
    same: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    bare_and: list[float] = field(default_factory=list)
    fallbacks: int = 0
    hits: int = 0

    def ratio(self) -> float:
        """Our overhead: recall over the same statements run bare on the driver."""
        return percentile(self.service, 0.5) / percentile(self.same, 0.5)

    def floor_ratio(self) -> float:
        """Recall over the plain ranked match (no titles, no snippets), the anchors' figure."""
        return percentile(self.service, 0.5) / percentile(self.bare, 0.5)


@dataclass
class SizeFigures:
    engine: str
    size: int
    entries: int
    load_seconds: float
    prepare_seconds: float
    #: VACUUM ANALYZE after the timed remember calls (service, then MCP), before recall is timed.
    settle_seconds: list[float] = field(default_factory=list)
    remember: Writes = field(default_factory=Writes)
    recall: dict[str, Reads] = field(default_factory=dict)
    mcp_remember: Writes = field(default_factory=Writes)
    mcp_recall: list[float] = field(default_factory=list)
    #: With recall by meaning on: remember with and without the vector, alternating (see measure_growth).
    growth: tuple[Writes, Writes] | None = None

    def mix(self) -> Reads:
        mixed = Reads()
        for reads in self.recall.values():
            mixed.service += reads.service
            mixed.same += reads.same
            mixed.bare += reads.bare
            mixed.bare_and += reads.bare_and
            mixed.fallbacks += reads.fallbacks
            mixed.hits += reads.hits
        return mixed


# Bare FTS on the driver -------------------------------------------------------------------------


class _Recorder:
    """A SQLite cursor that only notes the statement it is given: how the bench learns recall's exact SQL
    (PostgreSQL queues it: the bench reads it from the transaction's queue)."""

    def __init__(self) -> None:
        self.statement: tuple[str, tuple[Any, ...]] | None = None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.statement = (sql, tuple(params))

    def fetchall(self) -> list[Any]:
        return []


class BareSearch:
    """Recall's queries straight on the driver, without Armarius around them.

    ``same`` runs the very statements recall runs (ranking, titles, bodies), learned from the
    memory query module itself, and cuts recall's snippets from the bodies; ``floor`` is the
    engine's plain top-10 ranked match (rowids only), the figure the anchors give.
    """

    def __init__(self, settings: Settings, workspace_id: int) -> None:
        self.dialect: Literal["sqlite", "postgresql"] = "sqlite" if settings.database_url is None else "postgresql"
        self.workspace_id = workspace_id
        self._sqlite: sqlite3.Connection | None = None
        self._postgres: psycopg.Connection[Any] | None = None
        if self.dialect == "sqlite":
            self._sqlite = sqlite3.connect(settings.sqlite_path)
        else:
            # The owner (a superuser here): no row-level security. Recall's search function admits only the
            # session's workspace, as the server sets it per transaction.
            self._postgres = psycopg.connect(settings.database_migrate_url or "", autocommit=True)
            self._postgres.execute("SELECT set_config('armarius.workspace_id', %s, false)", (str(workspace_id),))

    def _run(self, sql: str, params: tuple[Any, ...]) -> tuple[list[Any], list[str]]:
        """The rows and the names of their columns."""
        if self._sqlite is not None:
            cursor: Any = self._sqlite.execute(sql, params)
        else:
            assert self._postgres is not None
            cursor = self._postgres.execute(sql, params)
        return cursor.fetchall(), [column[0] for column in cursor.description or ()]

    def _statement(self, expression: str, same: bool) -> tuple[str, tuple[Any, ...]]:
        if not same:
            return (SQLITE_BARE if self.dialect == "sqlite" else POSTGRES_BARE), (expression,)
        recorder = _Recorder()
        tx = Tx(self.dialect, recorder, self.workspace_id)
        queries.search_later(tx, expression, limit=RECALL_LIMIT, curated_only=False, tags=[])
        if self.dialect == "postgresql":
            queued = tx._queued[-1]  # the statement recall would send, in psycopg's format
            return queued.sql, tuple(queued.params)
        assert recorder.statement is not None
        return recorder.statement

    def search(self, query: str, *, same: bool) -> tuple[int, float, bool]:
        """Recall's logical work: all words, else any word. Rows, seconds of the AND query, fell back."""
        terms = list(dict.fromkeys(words(query)))[:32]
        both = [self._statement(queries.match_expression(self.dialect, groups), same)
                for groups in ([terms], [[term] for term in terms])]
        started = time.perf_counter()
        rows, columns = self._run(*both[0])
        first = time.perf_counter() - started
        fell_back = not rows and len(terms) > 1
        if fell_back:
            rows, columns = self._run(*both[1])
        if same and rows:
            # Recall's snippets, cut from the bodies with their word maps (columns named as recall reads them).
            body, word_map = columns.index("body"), columns.index("word_map")
            for row in rows:
                snippet(row[body], terms, row[word_map])
        return len(rows), first, fell_back

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


def embed_loaded(app: Armarius, workspace_id: int,
                 embed: Callable[[list[str]], list[bytes]] | None = None) -> None:
    """Give the loaded entries their vectors (recall by meaning) as `armarius memory reindex` writes them;
    ``embed`` makes quantized vectors of texts (by default the server's model, one text at a time batched)."""
    index = app.memory.vectors
    if index is None:
        return
    embedder, model = index.embedder, index.embedder.model_id

    def by_model(texts: list[str]) -> list[bytes]:
        return [quantize(vector) for vector in embedder.embed(texts)]

    while True:
        with app.database.transaction(workspace_id=workspace_id, write=True) as tx:
            rows = vectors.missing(tx, model, 5_000)
            if not rows:
                return
            found = (embed or by_model)([entry_text(row["title"], row["body"]) for row in rows])
            vectors.put(tx, [(row["id"], row["revision"], vector) for row, vector in zip(rows, found, strict=True)],
                        model)


def vector_bytes(settings: Settings) -> int:
    """What the entry vectors take on disk: their tables (the vectors and the models' names) and indexes."""
    if settings.database_url is None:
        with sqlite3.connect(settings.sqlite_path) as connection:
            return int(connection.execute(
                "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN "
                "(SELECT name FROM sqlite_master WHERE tbl_name IN ('entry_vectors', 'vector_models'))").fetchone()[0])
    with psycopg.connect(settings.database_migrate_url or "") as connection:
        row = connection.execute(
            "SELECT pg_total_relation_size('entry_vectors') + pg_total_relation_size('vector_models')").fetchone()
        return int(row[0]) if row else 0


def prepare(settings: Settings) -> float:
    """PostgreSQL: what autovacuum does after a bulk load or a run of writes (statistics, and the GIN
    pending list merged into the index, which every search would otherwise read in full). Seconds taken."""
    started = time.perf_counter()
    if settings.database_url is not None:
        with psycopg.connect(settings.database_migrate_url or "", autocommit=True) as connection:
            connection.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def entry_count(app: Armarius, workspace_id: int) -> int:
    with app.database.transaction(workspace_id=workspace_id) as tx:
        return int(tx.scalar("SELECT count(*) AS n FROM entries WHERE workspace_id = ?", (workspace_id,)))


# Service layer ----------------------------------------------------------------------------------


def new_slug(index: int) -> str:
    return f"doc/new-{index:08d}"


def request(document: Document) -> RememberRequest:
    return RememberRequest(slug=document.slug, title=document.title, body=document.body, tags=list(document.tags))


def measure_remember(app: Armarius, actor: Actor, documents: Sequence[Document], budget: float,
                     profiler: cProfile.Profile | None) -> Writes:
    warmup = Deadline(WARMUP_SECONDS)
    for document in documents[:WARMUP_WRITES]:
        app.memory.remember(actor, request(document))
        if warmup.passed():
            break
    timed = [request(document) for document in documents[WARMUP_WRITES:]]
    writes, deadline = Writes(), Deadline(budget)
    if profiler is not None:
        profiler.enable()
    started = time.perf_counter()
    for remember in timed:
        begun = time.perf_counter()
        result = app.memory.remember(actor, remember)
        writes.latencies.append(time.perf_counter() - begun)
        writes.statuses[result["status"]] += 1
        if deadline.passed():
            break
    writes.seconds = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
    return writes


def measure_growth(app: Armarius, actor: Actor, documents: Sequence[Document], budget: float) -> tuple[Writes, Writes]:
    """What the vector adds to remember: calls with it and without it (the server as with memory.embeddings
    = "off"), in alternating blocks of GROWTH_BLOCK calls in this process on this store: each side runs as a
    server so configured runs (each of its calls embeds, or none), and both see the same machine and store.
    The entries written without a vector get it afterwards, as `armarius memory reindex` gives it."""
    index = app.memory.vectors
    assert index is not None
    with_vector, without = Writes(), Writes()
    deadline = Deadline(budget)
    try:
        for number, document in enumerate(documents):
            side = with_vector if number // GROWTH_BLOCK % 2 == 0 else without
            app.memory.vectors = index if side is with_vector else None
            begun = time.perf_counter()
            result = app.memory.remember(actor, request(document))
            side.latencies.append(time.perf_counter() - begun)
            side.statuses[result["status"]] += 1
            if deadline.passed():
                break
    finally:
        app.memory.vectors = index
    embed_loaded(app, actor.workspace_id)
    return with_vector, without


def measure_recall(app: Armarius, actor: Actor, bare: BareSearch, query_set: Sequence[str], budget: float,
                   profiler: cProfile.Profile | None) -> Reads:
    warmup = Deadline(WARMUP_SECONDS)
    for query in query_set[-WARMUP_QUERIES:]:  # the tail: timed only if the budget allows every query
        app.memory.recall(actor, query, limit=RECALL_LIMIT)
        bare.search(query, same=True)
        bare.search(query, same=False)
        if warmup.passed():
            break
    reads, deadline = Reads(), Deadline(budget)
    for number, query in enumerate(query_set):
        # Alternate which side runs first, so neither always finds the pages the other just read.
        sides = ("service", "same", "bare")
        for side in sides if number % 2 == 0 else sides[::-1]:
            begun = time.perf_counter()
            if side == "service":
                if profiler is not None:
                    profiler.enable()
                answer = app.memory.recall(actor, query, limit=RECALL_LIMIT)
                if profiler is not None:
                    profiler.disable()
                reads.service.append(time.perf_counter() - begun)
                reads.hits += bool(answer["results"])
            elif side == "same":
                bare.search(query, same=True)
                reads.same.append(time.perf_counter() - begun)
            else:
                _rows, first, fell_back = bare.search(query, same=False)
                reads.bare.append(time.perf_counter() - begun)
                reads.bare_and.append(first)
                reads.fallbacks += fell_back
        if deadline.passed():
            break
    return reads


# MCP stdio --------------------------------------------------------------------------------------


def mcp_environment(settings: Settings, token: str) -> dict[str, str]:
    env = {"ARMARIUS_TOKEN": token, "ARMARIUS_MEMORY_EMBEDDINGS": settings.memory_embeddings}
    if "PYTHONPATH" in os.environ:  # the server runs the code this benchmark imports
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if settings.database_url is not None:
        env["ARMARIUS_DATABASE_URL"] = settings.database_url
        env["ARMARIUS_DATABASE_MIGRATE_URL"] = settings.database_migrate_url or settings.database_url
    return env


async def measure_mcp(settings: Settings, token: str, documents: Sequence[Document], mixed: Sequence[str],
                      budget: float, figures: SizeFigures) -> None:
    """One stdio server process, one client: remember calls, then (indexes settled) recall calls (the mix)."""
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters

    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "armarius", "--data-dir", str(settings.data_dir), "mcp"],
        env=mcp_environment(settings, token),
    )

    def arguments(document: Document) -> dict[str, Any]:
        return {"slug": document.slug, "title": document.title, "body": document.body, "tags": list(document.tags)}

    async with Client(parameters) as client:
        warmup = Deadline(WARMUP_SECONDS)
        for document, query in zip(documents[:WARMUP_WRITES], mixed[::max(1, len(mixed) // WARMUP_WRITES)],
                                   strict=False):
            await client.call_tool("remember", arguments(document))
            await client.call_tool("recall", {"query": query, "limit": RECALL_LIMIT})
            if warmup.passed():
                break
        writes, deadline = figures.mcp_remember, Deadline(budget)
        started = time.perf_counter()
        for document in documents[WARMUP_WRITES:]:
            begun = time.perf_counter()
            result = await client.call_tool("remember", arguments(document))
            writes.latencies.append(time.perf_counter() - begun)
            writes.statuses["error" if result.is_error else json.loads(result.content[0].text).get("status", "?")] += 1
            if deadline.passed():
                break
        writes.seconds = time.perf_counter() - started
        figures.settle_seconds.append(prepare(settings))
        deadline = Deadline(budget)
        for query in mixed:
            begun = time.perf_counter()
            await client.call_tool("recall", {"query": query, "limit": RECALL_LIMIT})
            figures.mcp_recall.append(time.perf_counter() - begun)
            if deadline.passed():
                break


# One engine -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    sizes: list[int]
    engines: list[str]
    queries: int
    remembers: int
    mcp_remembers: int
    mcp_queries: int
    budget: float
    seed: int
    profile: bool
    embeddings: str


def interleave(query_sets: dict[str, list[str]], count: int) -> list[str]:
    """The mix: the classes' queries in turn, ``count`` in all."""
    rounds = zip(*query_sets.values(), strict=False)
    return [query for round_ in rounds for query in round_][:count]


def measure_size(app: Armarius, actor: Actor, token: str, bare: BareSearch, corpus: Corpus, figures: SizeFigures,
                 stage: int, options: Options, profiles: dict[str, cProfile.Profile]) -> None:
    engine, size, budget = figures.engine, figures.size, options.budget
    profiling = options.profile and engine == "sqlite" and size == options.sizes[-1]
    base = NEW_BASE + stage * NEW_BLOCK
    writes = corpus.documents(base, base + WARMUP_WRITES + options.remembers, new_slug)
    figures.remember = measure_remember(app, actor, writes, budget,
                                        profiles.setdefault("remember", cProfile.Profile()) if profiling else None)
    if app.memory.vectors is not None:
        growth_base = base + NEW_BLOCK // 4
        figures.growth = measure_growth(app, actor, corpus.documents(growth_base, growth_base + options.remembers,
                                                                     new_slug), budget)
    figures.settle_seconds.append(prepare(app.settings))
    print(f"  {engine} {size:,}: remember {figures.remember.rate:,.0f}/s over {len(figures.remember.latencies)} "
          "calls" + (f" (+ {figures.settle_seconds[0]:.1f} s VACUUM ANALYZE)" if engine == "postgresql" else ""),
          flush=True)
    query_sets = {name: corpus.queries(name, options.queries, size) for name in QUERY_CLASSES}
    for name, query_set in query_sets.items():
        figures.recall[name] = measure_recall(app, actor, bare, query_set, budget,
                                              profiles.setdefault("recall", cProfile.Profile()) if profiling else None)
    print(f"  {engine} {size:,}: recall mix p50 {ms(percentile(figures.mix().service, 0.5))} ms", flush=True)
    mcp_base = base + NEW_BLOCK // 2
    mcp_writes = corpus.documents(mcp_base, mcp_base + WARMUP_WRITES + options.mcp_remembers, new_slug)
    asyncio.run(measure_mcp(app.settings, token, mcp_writes, interleave(query_sets, options.mcp_queries), budget,
                            figures))
    settled = f" (+ {figures.settle_seconds[-1]:.1f} s VACUUM ANALYZE between)" if engine == "postgresql" else ""
    print(f"  {engine} {size:,}: MCP remember {figures.mcp_remember.rate:,.0f}/s, recall p50 "
          f"{ms(percentile(figures.mcp_recall, 0.5))} ms{settled}", flush=True)


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
        bare = BareSearch(settings, workspace.id)
        loaded = 0
        for stage, size in enumerate(options.sizes):
            started = time.perf_counter()
            load(app, workspace.id, documents[loaded:size])
            embed_loaded(app, workspace.id)
            loaded_at = time.perf_counter()
            prepare(settings)
            figures = SizeFigures(engine, size, entry_count(app, workspace.id), loaded_at - started,
                                  time.perf_counter() - loaded_at)
            loaded = size
            embedded = (f", vectors {vector_bytes(settings) / 1e6:.1f} MB on disk"
                        if app.memory.vectors is not None else "")
            print(f"  {engine} {size:,}: loaded to {figures.entries:,} entries in {figures.load_seconds:.1f} s"
                  + (f" (+ {figures.prepare_seconds:.1f} s VACUUM ANALYZE)" if engine == "postgresql" else "")
                  + embedded, flush=True)
            measure_size(app, actor, token, bare, corpus, figures, stage, options, profiles)
            results.append(figures)
    finally:
        if bare is not None:
            bare.close()
        app.close()
    return results


# Report -----------------------------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def print_writes(results: list[SizeFigures]) -> None:
    print("remember, one client, sequential (new slugs, duplicate check on) - service: app.memory.remember; "
          "MCP: python -m armarius mcp over stdio")
    print(f"{'engine':<11}{'entries':>9}{'calls':>7}{'per s':>8}{'p50 ms':>8}{'p95 ms':>8}"
          f"{'MCP calls':>11}{'per s':>7}{'p50 ms':>8}{'p95 ms':>8}  answers")
    for figures in results:
        service, mcp = figures.remember, figures.mcp_remember
        answers = dict(service.statuses + mcp.statuses)
        print(f"{figures.engine:<11}{figures.entries:>9,}{len(service.latencies):>7}{service.rate:>8,.0f}"
              f"{ms(percentile(service.latencies, 0.5)):>8}{ms(percentile(service.latencies, 0.95)):>8}"
              f"{len(mcp.latencies):>11}{mcp.rate:>7,.0f}{ms(percentile(mcp.latencies, 0.5)):>8}"
              f"{ms(percentile(mcp.latencies, 0.95)):>8}  {answers}")
    for figures in results:
        if figures.growth is not None:
            with_vector, without = (percentile(writes.latencies, 0.5) for writes in figures.growth)
            print(f"{figures.engine} {figures.entries:,}: remember with / without its vector, in alternating blocks "
                  f"({len(figures.growth[0].latencies)} + {len(figures.growth[1].latencies)} calls): p50 "
                  f"{ms(with_vector)} / {ms(without)} ms, the vector adds {ms(with_vector - without)} ms")


def print_reads(results: list[SizeFigures], options: Options) -> None:
    print(f"recall top-{RECALL_LIMIT}, ms - service: app.memory.recall; same: recall's own statements (ranking, "
          "titles, bodies) run bare on the driver, and snippets cut from the bodies; ratio: service / same, our "
          "overhead; floor: the plain ranked match (rowids only) doing the same AND-then-OR work; floor AND: its "
          "first query alone, comparable to the anchor (bare p50 at 100k)")
    print(f"{'engine':<11}{'size':>8}  {'class':<9}{'n':>4}{'p50':>8}{'p95':>8}{'same p50':>10}{'ratio':>8}"
          f"{'floor p50':>11}{'/floor':>8}{'floor AND':>11}{'anchor':>8}{'hits':>6}{'OR':>5}")
    for figures in results:
        for name, reads in [*figures.recall.items(), ("mix", figures.mix())]:
            anchor = BARE_ANCHORS[figures.engine].get(name) if figures.size == 100_000 else None
            print(f"{figures.engine:<11}{figures.size:>8,}  {name:<9}{len(reads.service):>4}"
                  f"{ms(percentile(reads.service, 0.5)):>8}{ms(percentile(reads.service, 0.95)):>8}"
                  f"{ms(percentile(reads.same, 0.5)):>10}{reads.ratio():>7.2f}x"
                  f"{ms(percentile(reads.bare, 0.5)):>11}{reads.floor_ratio():>7.2f}x"
                  f"{ms(percentile(reads.bare_and, 0.5)):>11}{'' if anchor is None else f'{anchor:.2f}':>8}"
                  f"{reads.hits:>6}{reads.fallbacks:>5}")
    print(f"(n: timed queries of {options.queries} per class within the budget; hits: queries answered with "
          "results; OR: queries whose words never occur together, answered by the any-word fallback)")
    print()
    print("recall over MCP stdio, the mix, ms (anchor at 10k: @modelcontextprotocol/server-memory search p50 35.9 ms)")
    print(f"{'engine':<11}{'size':>8}{'calls':>7}{'p50':>8}{'p95':>8}")
    for figures in results:
        print(f"{figures.engine:<11}{figures.size:>8,}{len(figures.mcp_recall):>7}"
              f"{ms(percentile(figures.mcp_recall, 0.5)):>8}{ms(percentile(figures.mcp_recall, 0.95)):>8}")


def print_targets(results: list[SizeFigures]) -> None:
    print("targets")
    for figures in results:
        if figures.engine != "sqlite":
            continue
        rate = figures.remember.rate
        print(f"  remember >= 1,000/s through the service layer on SQLite, {figures.size:,}: {rate:,.0f}/s, "
              f"{_verdict(rate >= 1000)}")
        if figures.size == 100_000:
            mix = figures.mix()
            p50 = percentile(mix.service, 0.5)
            print(f"  recall p50 <= 10 ms at 100k on SQLite, mix: {ms(p50)} ms, {_verdict(p50 <= 0.010)}")
            for name, reads in [*figures.recall.items(), ("mix", mix)]:
                p50 = percentile(reads.service, 0.5)
                print(f"  overhead over the same query bare on the driver <= 1.5x at 100k on SQLite, {name}: "
                      f"{reads.ratio():.2f}x, {_verdict(reads.ratio() <= 1.5)} (p50 {ms(p50)} ms, "
                      f"{_verdict(p50 <= 0.010)} for <= 10 ms; {reads.floor_ratio():.2f}x the plain ranked match)")
    for figures in results:
        if figures.growth is not None:
            added = percentile(figures.growth[0].latencies, 0.5) - percentile(figures.growth[1].latencies, 0.5)
            print(f"  remember p50 grows by <= 0.3 ms with its vector ({figures.engine}, {figures.size:,}): "
                  f"{ms(added)} ms, {_verdict(added <= 0.0003)}")
    for figures in results:
        if figures.size == 10_000:
            print(f"  vs. server-memory at 10k ({figures.engine}): MCP create p50 "
                  f"{ms(percentile(figures.mcp_remember.latencies, 0.5))} ms (anchor 45.6 ms), MCP search p50 "
                  f"{ms(percentile(figures.mcp_recall, 0.5))} ms (anchor 35.9 ms)")
    print()
    print("anchors (BENCHMARKS.md, measured 2026-11-29 on a machine of this kind)")
    for figure, anchor, value in ANCHORS:
        print(f"  {figure}: {anchor}: {value}")


def print_profiles(profiles: dict[str, cProfile.Profile]) -> None:
    for name, profiler in profiles.items():
        print()
        print(f"profile of the timed {name} calls on SQLite at the largest size (top 20 by own time)")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(20)


def parse_options() -> Options:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="corpus sizes, ascending (comma-separated)")
    parser.add_argument("--engines", default="sqlite,postgresql", help="sqlite and/or postgresql")
    parser.add_argument("--queries", type=int, default=200, help="recall queries per class and size")
    parser.add_argument("--remembers", type=int, default=1500, help="timed remember calls (service layer)")
    parser.add_argument("--mcp-remembers", type=int, default=300, help="timed remember calls over MCP stdio")
    parser.add_argument("--mcp-queries", type=int, default=200, help="timed recall calls over MCP stdio (mix)")
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds after which a timed loop stops early (per measurement and query class)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--embeddings", default="off", choices=("off", "wordllama"),
                        help="memory.embeddings of the server timed (default off: recall by words, as the bare "
                             "queries search)")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile the service remember and recall calls on SQLite at the largest size")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    engines = [engine.strip() for engine in args.engines.split(",")]
    if sizes != sorted(set(sizes)) or sizes[0] < 10:
        parser.error("--sizes must be ascending and at least 10")
    if not set(engines) <= {"sqlite", "postgresql"}:
        parser.error("--engines takes sqlite and/or postgresql")
    if min(args.queries, args.remembers, args.mcp_remembers, args.mcp_queries) < 1:
        parser.error("counts must be at least 1")
    return Options(sizes, engines, args.queries, args.remembers, args.mcp_remembers, args.mcp_queries, args.budget,
                   args.seed, args.profile, args.embeddings)


def main() -> None:
    options = parse_options()
    one_blas_thread()  # numpy as the server runs it (before numpy loads)
    began = time.perf_counter()
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, cpus {os.cpu_count()}, "
          f"memory.embeddings {options.embeddings}")
    corpus = Corpus(options.seed)
    documents = corpus.documents(0, options.sizes[-1])
    average = statistics.fmean(len(document.title) + len(document.body) for document in documents)
    print(f"corpus: {len(documents):,} documents (seed {options.seed}) in {time.perf_counter() - began:.1f} s, "
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
                    settings = replace(stack.enter_context(runners[engine](Path(temporary) / engine)),
                                       memory_embeddings=options.embeddings)
                except psycopg.OperationalError as error:
                    print(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {error}; skipping it")
                    continue
                if engine == "postgresql":
                    with psycopg.connect(PG_ADMIN_URL) as connection:
                        row = connection.execute("SHOW server_version").fetchone()
                    print(f"postgresql {row[0] if row else '?'}")
                results += run_engine(engine, settings, corpus, documents, options, profiles)
    print()
    print_writes(results)
    print()
    print_reads(results, options)
    print()
    print_targets(results)
    if profiles:
        print_profiles(profiles)
    print()
    print(f"whole run: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
