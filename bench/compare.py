"""Armarius next to its peers and its floors, side by side in one run (issue 17).

Six comparisons, each a function below; each case runs its two sides alternately (A then B, then B
then A, ...) over several rounds, and a pair of calls counts only when both sides returned
equivalent answers. A case where any pair's answers differ is reported as such, with an example,
and not timed.

1. memory: Armarius over MCP stdio against ``@modelcontextprotocol/server-memory`` (npm, run with
   node, both through the MCP SDK's own stdio client): creates at 1k and 10k entries (remember,
   repeated with confirm_distinct and a reason if Armarius asks for it; create_entities), then a
   fixed search mix (recall, limit 10; search_nodes). Each query has a planted entry (its text in a
   short note): both sides must find it.
2. per-call server CPU, from the server process's CPU clock (nanoseconds), of every Armarius tool against a
   no-op tool on the same SDK (bench/noop_server.py, the floor), both over stdio.
3. ``database.rows``, ``database.count`` and an escaped ``contains`` through project_query over
   MCP stdio against DBHub (``@bytebase/dbhub``, npm, its execute_sql over stdio, given the SELECT
   Armarius runs) and the bare driver (PyMySQL), on one MariaDB table (bench/database_rows.py);
   both sides must return the same ids or count. Answer bytes are the MCP text content.
4. ``source.search`` (project_query over MCP stdio) against ``git grep -F`` at the same commit (and
   ``rg -F`` on a checkout when ripgrep is installed) for rare, medium and frequent literals and a
   path prefix, on the django sdist committed by bench/source_search.py; the (path, line) hits must
   agree with git grep's.
5. recall by words (the service layer, mode "lexical") at 100k entries on SQLite and PostgreSQL
   against the bare full-text query, the floor: the same ranking of the same first 1,000 matches
   (FTS5 bm25 with recall's column weights; ts_rank over the stored tsvector, after VACUUM ANALYZE),
   ids only, all words then any word as recall does. The top-10 sets must be equal. The default recall
   (hybrid: words and meaning), whose answers are not the floor's by design, is timed next to them.
6. 32 concurrent MCP clients over streamable HTTP against `armarius serve`, a mixed workload
   (SQLite 50 % remember / 50 % recall; PostgreSQL 20 / 40 / 40 remember / recall / read), with 1
   worker and with N workers: ops/s, p50/p95/p99,
   errors, server CPU per op. Every answer is checked; a wrong one counts as an error. The clients are
   bench/lean_client.py's (the SDK client's requests without its machinery; ``--sdk-clients``: the SDK's).

It prints one table of ratios (A / B: below 1 means Armarius is faster or cheaper) and writes
bench/results/<date>.json (``<date>-quick.json`` with ``--quick``). A human commits results files.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/compare.py [--quick] [--only 1,3] [--reinstall] [--recall-sizes 100000]

The peers' npm packages are installed into /tmp/armarius-bench-npm (once; ``--reinstall`` again),
the source corpus is cached in /tmp/armarius-bench-corpus (bench/source_search.py). PostgreSQL
(ARMARIUS_BENCH_PG_URL) and MariaDB (ARMARIUS_BENCH_MARIADB_URL) get temporary databases, dropped
after; a part whose server is down is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import hashlib
import json
import logging
import math
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pymysql
from corpus import QUERY_CLASSES, Corpus, Document
from database_rows import (
    FACTION,
    LEVEL,
    MARIADB_ADMIN_URL,
    PASSWORD_ENV,
    Query,
    contains_count,
    contains_rows,
    indexed_count,
    indexed_rows,
    mariadb_table,
    research_toml,
    varying_pairs,
)
from databases import PG_ADMIN_URL, engine_settings, environment, postgres_available, snapshot, sqlite_settings
from lean_client import LeanClient
from memory import embed_loaded, load, new_slug, prepare
from processes import (
    NOOP_SERVER,
    StdioServer,
    ToolError,
    armarius_serve,
    cpu_seconds,
    database_cpu_seconds,
    node_version,
    noop_serve,
    npm_bin,
    npm_package,
    refusal_of_serve,
    stdio_server,
    tree_cpu_seconds,
)
from source_search import (
    DEFAULT_PACKAGE,
    GIT_ENV,
    IDENTIFIER,
    SOURCE_NAME,
    choose_prefix,
    corpus_for,
    git_version,
    text_blobs,
    write_config,
)

from armarius.app import Armarius, initialize, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.auth.secrets import new_password
from armarius.config import Settings, one_blas_thread
from armarius.memory.embeddings import Embedder, quantize

SERVER_MEMORY = ("@modelcontextprotocol/server-memory", "2026.8.31")
DBHUB = ("@bytebase/dbhub", "1.4.0")
RESULTS = Path(__file__).parent / "results"
SEED = 20261129
BY = "operator:bench"
WORKSPACE, AGENT, HUMAN = "bench", "bench-agent", "bench-human"
RECALL_LIMIT = 10
#: Timed creates take corpus documents far above any corpus size, a block per use.
NEW_BASE, NEW_BLOCK = 10_000_000, 100_000
#: Planted entries (section 1) and their load indexes.
PLANTED_BASE = 9_000_000
SESSION_BUDGET = 1_000_000
CONFIRM_REASON = "A benchmark document: its text is distinct from the candidates (random words of its own)."


@dataclass(frozen=True)
class Plan:
    """Sizes and repetitions of a run: the full one, or --quick."""

    memory_sizes: tuple[int, ...]
    memory_creates: int  # timed creates per size, each side
    memory_queries: int  # planted queries per class
    memory_rounds: int  # passes over the search mix
    cpu_calls: int  # calls per block (tool, then no-op)
    cpu_rounds: int
    database_rows: int
    database_calls: int  # per indexed case
    database_scans: int  # per full-scan case
    source_words: int  # literals per class
    source_rounds: int
    recall_sizes: tuple[int, ...]
    recall_queries: int  # per class
    recall_rounds: int
    http_seconds: float
    http_rounds: int
    http_clients: int = 32
    http_entries: int = 2_000
    #: Section 6 makes new notes for a run's remember calls before it starts, as many as this many calls a second
    #: would take (more than any server here answers: the note counts the notes a run made on the fly).
    http_rate_max: int = 1_500
    #: Section 6's clients: "lean" (bench/lean_client.py) or "sdk" (the SDK's own client, --sdk-clients).
    http_client: str = "lean"
    #: Seconds after which a timed loop stops early (then fewer pairs are reported).
    budget: float = 60.0


FULL = Plan(memory_sizes=(1_000, 10_000), memory_creates=60, memory_queries=8, memory_rounds=2,
            cpu_calls=150, cpu_rounds=2, database_rows=1_000_000, database_calls=150, database_scans=8,
            source_words=5, source_rounds=2, recall_sizes=(100_000,), recall_queries=40, recall_rounds=2,
            http_seconds=10.0, http_rounds=2)
QUICK = Plan(memory_sizes=(1_000, 5_000), memory_creates=12, memory_queries=2, memory_rounds=1,
             cpu_calls=30, cpu_rounds=2, database_rows=100_000, database_calls=20, database_scans=3,
             source_words=2, source_rounds=1, recall_sizes=(5_000,), recall_queries=6, recall_rounds=1,
             http_seconds=4.0, http_rounds=1, http_entries=500, budget=10.0)


# Results ------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation), NaN without values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass
class Row:
    """One line of the table: side A (Armarius) against side B (a peer or a floor) on one metric."""

    section: int
    case: str
    a: str
    b: str
    metric: str
    a_value: float | None = None
    b_value: float | None = None
    #: Pairs timed (or runs, or calls), and pairs whose answers differed (then nothing is timed).
    n: int = 0
    differ: int = 0
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.a_value is None or self.b_value is None or self.b_value == 0:
            return None
        return self.a_value / self.b_value


@dataclass
class Pairs:
    """Alternate A/B timings of one case; only pairs whose answers agreed are kept."""

    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    def add(self, a_seconds: float, b_seconds: float, difference: str | None) -> None:
        if difference is None:
            self.a.append(a_seconds)
            self.b.append(b_seconds)
        else:
            self.differences.append(difference)

    def extend(self, other: Pairs) -> None:
        self.a += other.a
        self.b += other.b
        self.differences += other.differences

    def row(self, section: int, case: str, a: str, b: str, detail: str = "", **extra: Any) -> Row:
        """p50 in ms of each side, or, if any pair's answers differed, the difference and no timing."""
        if self.differences:
            return Row(section, case, a, b, "p50 ms", n=len(self.a) + len(self.differences),
                       differ=len(self.differences), detail=f"answers differ: {self.differences[0]}"[:300],
                       extra=extra)
        extra |= {"a_p95_ms": percentile(self.a, 0.95) * 1000, "b_p95_ms": percentile(self.b, 0.95) * 1000}
        return Row(section, case, a, b, "p50 ms", percentile(self.a, 0.5) * 1000, percentile(self.b, 0.5) * 1000,
                   n=len(self.a), detail=detail, extra=extra)


def mix_row(by_class: dict[str, Pairs], section: int, case: str, a: str, b: str, detail: str = "") -> Row:
    """The mix of the query classes whose answers all agreed (each class row says what differed in the others)."""
    agreeing = [name for name, pairs in by_class.items() if not pairs.differences] or list(by_class)
    mix = Pairs()
    for name in agreeing:
        mix.extend(by_class[name])
    left_out = [name for name in by_class if name not in agreeing]
    if left_out:
        detail = f"{', '.join(agreeing)} only ({', '.join(left_out)}: answers differ); {detail}"
    return mix.row(section, case, a, b, detail.rstrip("; "), classes=agreeing)


class Failed:
    """A side that raised instead of answering (kept as its answer, so the pair is reported as differing)."""

    def __init__(self, error: BaseException) -> None:
        self.message = f"{type(error).__name__}: {error}"[:300]


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    try:
        answer = await call()
    except (ToolError, OSError, RuntimeError, ValueError, KeyError, TypeError, pymysql.MySQLError,
            psycopg.Error) as error:
        answer = Failed(error)
    return time.perf_counter() - started, answer


async def in_turn(turn: int, calls: Sequence[Callable[[], Awaitable[Any]]]) -> list[tuple[float, Any]]:
    """Each side once, each turn starting with the next one (A B, B A, ... or A B C, B C A, C A B, ...):
    (seconds, answer) per side, in the order given."""
    results: list[tuple[float, Any]] = [(0.0, None)] * len(calls)
    shift = turn % len(calls)
    for index in [*range(shift, len(calls)), *range(shift)]:
        results[index] = await timed(calls[index])
    return results


def keep(pairs: Pairs, a: tuple[float, Any], b: tuple[float, Any], compare: Callable[[Any, Any], str | None]) -> None:
    """Add one pair of (seconds, answer): timed if the answers agree, else as a difference."""
    for side, (_, answer) in (("A", a), ("B", b)):
        if isinstance(answer, Failed):
            pairs.add(a[0], b[0], f"{side} failed: {answer.message}")
            return
    pairs.add(a[0], b[0], compare(a[1], b[1]))


async def alternate(pairs: Pairs, turn: int, run_a: Callable[[], Awaitable[Any]], run_b: Callable[[], Awaitable[Any]],
                    compare: Callable[[Any, Any], str | None]) -> tuple[Any, Any]:
    """Run both sides once (A first on even turns, B first on odd ones), compare, keep the pair. The answers."""
    a, b = await in_turn(turn, [run_a, run_b])
    keep(pairs, a, b, compare)
    return a[1], b[1]


def now(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Awaitable[Any]]:
    """A blocking call as one side of a pair (run in this thread, as it would be on its own)."""
    async def run() -> Any:
        return function(*args, **kwargs)
    return run


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def passed(self) -> bool:
        return time.perf_counter() >= self.end


def size_label(size: int) -> str:
    return f"{size // 1000:,}k" if size % 1000 == 0 else f"{size:,}"


def byte_sizes(values: Sequence[int]) -> str:
    """The median and largest of some byte counts, readably."""
    def one(size: float) -> str:
        return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB" if size >= 1e3 else f"{size:.0f} B"
    return f"{one(statistics.median(values))} (max {one(max(values))})" if values else "-"


# The bench's shared state -------------------------------------------------------------------------


@dataclass
class Bench:
    plan: Plan
    folder: Path
    reinstall: bool
    corpus: Corpus = field(default_factory=lambda: Corpus(seed=1))
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    _documents: list[Document] = field(default_factory=list)
    _vectors: dict[bytes, bytes] = field(default_factory=dict)

    def documents(self, count: int) -> list[Document]:
        """The first ``count`` corpus documents (made once, shared by the sections)."""
        if len(self._documents) < count:
            self._documents += self.corpus.documents(len(self._documents), count)
        return self._documents[:count]

    def embed(self, embedder: Embedder, texts: list[str]) -> list[bytes]:
        """Quantized vectors of the texts, as the product stores them; each text is embedded once per run."""
        keys = [hashlib.blake2b(text.encode(), digest_size=16).digest() for text in texts]
        new = {key: text for key, text in zip(keys, texts, strict=True) if key not in self._vectors}
        if new:
            found = embedder.embed(list(new.values()))
            self._vectors.update((key, quantize(vector)) for key, vector in zip(new, found, strict=True))
        return [self._vectors[key] for key in keys]

    def scratch(self, name: str) -> Path:
        path = self.folder / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def engines(self) -> list[str]:
        if postgres_available():
            return ["sqlite", "postgresql"]
        self.note(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: its parts are skipped")
        return ["sqlite"]

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            print(f"  note: {text}", flush=True)


@dataclass
class Team:
    """The benchmark workspace: one agent (editor) with a token, a human editor who can approve drafts."""

    workspace_id: int
    token: str
    agent: Actor
    human: Actor

    @classmethod
    def create(cls, app: Armarius, agents: int = 1) -> tuple[Team, list[str]]:
        """The team, and the tokens of ``agents`` agents (the first is the team's)."""
        directory = app.directory
        workspace = directory.create_workspace(WORKSPACE, by=BY)
        password = new_password()
        directory.add_principal(HUMAN, Kind.HUMAN, workspace=WORKSPACE, role=Role.EDITOR, by=BY, password=password)
        tokens = []
        for number in range(agents):
            name = AGENT if number == 0 else f"{AGENT}-{number:02d}"
            directory.add_principal(name, Kind.AGENT, workspace=WORKSPACE, role=Role.EDITOR, by=BY)
            tokens.append(directory.issue_token(name, workspace=WORKSPACE, label="bench", by=BY).token)
        team = cls(workspace.id, tokens[0], directory.authenticate_token(tokens[0]),
                   directory.authenticate_password(HUMAN, password, workspace=WORKSPACE))
        return team, tokens


def team_of(settings: Settings) -> Team:
    """A team in a fresh data folder whose server runs in another process."""
    app = open_app(settings)
    try:
        return Team.create(app)[0]
    finally:
        app.close()


def fill(bench: Bench, app: Armarius, workspace_id: int, documents: Sequence[Document]) -> None:
    """Entries as remember leaves them: loaded in large transactions (bench/memory.py), then given their
    vectors (recall by meaning) as `armarius memory reindex` writes them, each text embedded once per run."""
    load(app, workspace_id, documents)
    if app.memory.vectors is not None:
        embedder = app.memory.vectors.embedder
        embed_loaded(app, workspace_id, lambda texts: bench.embed(embedder, texts))


def armarius_stdio(bench: Bench, settings: Settings, token: str, **env: str
                   ) -> AbstractAsyncContextManager[StdioServer]:
    """`armarius mcp` for the agent's token, over stdio through the SDK's client."""
    return stdio_server("armarius", sys.executable,
                        ["-m", "armarius", "--data-dir", str(settings.data_dir), "mcp"],
                        {"ARMARIUS_TOKEN": token, **environment(settings), **env}, bench.folder / "armarius.log")


def node_stdio(bench: Bench, name: str, script: Path, args: list[str], env: dict[str, str]
               ) -> AbstractAsyncContextManager[StdioServer]:
    return stdio_server(name, "node", [str(script), *args], env, bench.folder / f"{name}.log")


# 1. Memory against @modelcontextprotocol/server-memory ----------------------------------------------


@dataclass(frozen=True)
class Planted:
    """A query of the search mix and the short note written for it, which both sides must find."""

    query_class: str
    query: str
    document: Document


def planted_notes(corpus: Corpus, per_class: int, size: int) -> list[Planted]:
    """``per_class`` queries of each class, the classes in turn (so a loop cut short keeps every class)."""
    planted = []
    query_sets = [corpus.queries(name, per_class, size) for name in QUERY_CLASSES]
    for number, queries in enumerate(zip(*query_sets, strict=True)):
        for name, query in zip(QUERY_CLASSES, queries, strict=True):
            index = PLANTED_BASE + len(planted)
            body = f"What we know about {query}: {query}. Noted for the {name} queries ({query})."
            planted.append(Planted(name, query, Document(index, f"planted/{name}-{number:03d}", query.capitalize(),
                                                         body, ("planted",))))
    return planted


def as_entity(document: Document) -> dict[str, Any]:
    """The same note for server-memory: its name is the slug, its observations the title and the body."""
    return {"name": document.slug, "entityType": "note", "observations": [document.title, document.body]}


def write_graph(path: Path, documents: Sequence[Document]) -> None:
    """Append entities to server-memory's JSONL file, exactly as its create_entities saves them."""
    with path.open("a", encoding="utf-8") as graph:
        if path.stat().st_size:
            graph.write("\n")  # it writes no newline after its last line
        graph.write("\n".join(json.dumps({"type": "entity", **as_entity(document)}) for document in documents))


async def remember(server: StdioServer, document: Document) -> dict[str, Any]:
    """remember, repeated with confirm_distinct and a reason when Armarius asks for a judgment."""
    arguments = {"slug": document.slug, "title": document.title, "body": document.body, "tags": list(document.tags)}
    answer: dict[str, Any] = await server.call("remember", arguments)
    if answer.get("status") == "judgment_required":
        answer = await server.call("remember", {**arguments, "confirm_distinct": True, "reason": CONFIRM_REASON})
        answer["confirmed_distinct"] = True
    return answer


def both_created(slug: str) -> Callable[[Any, Any], str | None]:
    def compare(ours: dict[str, Any], theirs: list[dict[str, Any]]) -> str | None:
        if ours.get("status") != "written" or ours.get("slug") != slug:
            return f"remember {slug}: {str(ours)[:120]}"
        names = [entity.get("name") for entity in theirs]  # the entities it created (its text content)
        return None if names == [slug] else f"create_entities {slug}: created {names}"
    return compare


def both_found(slug: str) -> Callable[[Any, Any], str | None]:
    def compare(ours: str, theirs: str) -> str | None:
        found = [result["slug"] for result in json.loads(ours)["results"]]
        names = {entity["name"] for entity in json.loads(theirs)["entities"]}
        if slug not in found:
            return f"recall missed {slug} (found {found[:3]}...)"
        return None if slug in names else f"search_nodes missed {slug} ({len(names)} entities)"
    return compare


async def memory_creates(bench: Bench, ours: StdioServer, theirs: StdioServer, stage: int, size: int) -> Row:
    base = NEW_BASE + stage * NEW_BLOCK
    documents = bench.corpus.documents(base, base + 3 + bench.plan.memory_creates, new_slug)
    for document in documents[:3]:  # warm-up
        await remember(ours, document)
        await theirs.call("create_entities", {"entities": [as_entity(document)]})
    pairs, confirmed, deadline = Pairs(), 0, Deadline(bench.plan.budget)
    for turn, document in enumerate(documents[3:]):
        answer, _ = await alternate(
            pairs, turn, lambda document=document: remember(ours, document),
            lambda document=document: theirs.call("create_entities", {"entities": [as_entity(document)]}),
            both_created(document.slug))
        confirmed += isinstance(answer, dict) and bool(answer.get("confirmed_distinct"))
        if deadline.passed():
            break
    detail = f"{confirmed} remember(s) repeated with confirm_distinct" if confirmed else ""
    return pairs.row(1, f"create, {size_label(size)} entries", "remember (stdio)", "create_entities (stdio)", detail,
                     confirmed_distinct=confirmed)


async def memory_searches(bench: Bench, ours: StdioServer, theirs: StdioServer, planted: list[Planted],
                          size: int) -> list[Row]:
    for note in planted[:2]:  # warm-up
        await ours.call_text("recall", {"query": note.query, "limit": RECALL_LIMIT})
        await theirs.call_text("search_nodes", {"query": note.query})
    by_class = {name: Pairs() for name in QUERY_CLASSES}
    answer_bytes: dict[str, tuple[list[int], list[int]]] = {name: ([], []) for name in QUERY_CLASSES}
    deadline, turn = Deadline(bench.plan.budget), 0
    for _round in range(bench.plan.memory_rounds):
        for note in planted:
            ours_text, theirs_text = await alternate(
                by_class[note.query_class], turn,
                lambda note=note: ours.call_text("recall", {"query": note.query, "limit": RECALL_LIMIT}),
                lambda note=note: theirs.call_text("search_nodes", {"query": note.query}),
                both_found(note.document.slug))
            turn += 1
            for sizes, text in zip(answer_bytes[note.query_class], (ours_text, theirs_text), strict=True):
                if isinstance(text, str):
                    sizes.append(len(text.encode()))
            if deadline.passed():
                break
        if deadline.passed():
            break
    rows = []
    for name, pairs in by_class.items():
        ours_bytes, theirs_bytes = answer_bytes[name]
        rows.append(pairs.row(1, f"search {name}, {size_label(size)} entries", f"recall limit {RECALL_LIMIT}",
                              "search_nodes", f"answer bytes {byte_sizes(ours_bytes)} vs {byte_sizes(theirs_bytes)}",
                              a_bytes=ours_bytes, b_bytes=theirs_bytes))
    everything = [[size for name in QUERY_CLASSES for size in answer_bytes[name][side]] for side in (0, 1)]
    rows.append(mix_row(by_class, 1, f"search mix, {size_label(size)} entries", f"recall limit {RECALL_LIMIT}",
                        "search_nodes", f"answer bytes {byte_sizes(everything[0])} vs {byte_sizes(everything[1])}"))
    return rows


async def compare_memory(bench: Bench) -> list[Row]:
    script = npm_bin(npm_package(*SERVER_MEMORY, reinstall=bench.reinstall))
    folder, plan, rows = bench.scratch("memory"), bench.plan, []
    planted = planted_notes(bench.corpus, plan.memory_queries, max(plan.memory_sizes))
    graph = folder / "memory.jsonl"
    graph.touch()
    with sqlite_settings(folder / "armarius") as settings:
        app = open_app(settings)
        try:
            team, _ = Team.create(app)
            batch, loaded = [planted_note.document for planted_note in planted], 0
            for stage, size in enumerate(plan.memory_sizes):
                batch += bench.documents(size)[loaded:size]
                fill(bench, app, team.workspace_id, batch)
                write_graph(graph, batch)
                batch, loaded = [], size
                print(f"  memory: {size:,} entries on both sides", flush=True)
                async with (armarius_stdio(bench, settings, team.token) as ours,
                            node_stdio(bench, "server-memory", script, [], {"MEMORY_FILE_PATH": str(graph)}) as theirs):
                    rows.append(await memory_creates(bench, ours, theirs, stage, size))
                    rows += await memory_searches(bench, ours, theirs, planted, size)
        finally:
            app.close()
    return rows


# 2. Per-call server CPU against a no-op tool ---------------------------------------------------------


@dataclass
class ToolCase:
    """One tool: its arguments for call number i, and what its answer must show."""

    name: str
    arguments: Callable[[int], dict[str, Any]]
    check: Callable[[Any], bool]
    #: Before a block of calls (first call number, count): make what the calls need (untimed, in this process).
    before: Callable[[int, int], None] | None = None


@dataclass
class CpuFixture:
    """What the tools work on: a few hundred entries, one session with a large budget, a tiny repository."""

    app: Armarius
    team: Team
    documents: list[Document]
    queries: list[str]
    corpus: Corpus
    session: int = 0
    repair: int = 0
    proposal: int = 0
    to_close: list[int] = field(default_factory=list)
    approvals: dict[int, str] = field(default_factory=dict)


def tiny_repository(folder: Path) -> tuple[Path, str]:
    """A bare repository with one commit of three small files; its path and commit."""
    work = folder / "work"
    (work / "src").mkdir(parents=True)
    (work / "README.md").write_text("# App\n\nA tiny project for the benchmark.\n")
    (work / "src" / "app.py").write_text("def main() -> None:\n    print('hello')\n")
    (work / "src" / "schema.sql").write_text("CREATE TABLE item (id INTEGER PRIMARY KEY);\n")
    repo = folder / "repo.git"
    env = {**GIT_ENV, "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@armarius.invalid",
           "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@armarius.invalid"}
    for args in (["init", "--quiet", "--bare", str(repo)],
                 ["--git-dir", str(repo), "--work-tree", str(work), "add", "--all"],
                 ["--git-dir", str(repo), "--work-tree", str(work), "commit", "--quiet", "-m", "tiny"]):
        subprocess.run(["git", "-c", "init.defaultBranch=main", *args], env=env, check=True, capture_output=True)
    commit = subprocess.run(["git", "--git-dir", str(repo), "rev-parse", "HEAD"], env=env, check=True,
                            capture_output=True, text=True).stdout.strip()
    return repo, commit


def draft(index: int) -> dict[str, str]:
    return {"slug": f"drafts/cpu-{index:06d}", "title": f"Draft {index}",
            "text": f"Draft number {index}.\n\nA short paragraph for the benchmark."}


def tool_cases(fx: CpuFixture) -> list[ToolCase]:
    """Every tool Armarius offers an agent here, each called cheaply (writes make new things each call)."""
    slugs = [document.slug for document in fx.documents]
    entry = slugs[0]

    def new_note(index: int) -> dict[str, Any]:
        document = fx.corpus.document(NEW_BASE + 5 * NEW_BLOCK + index, new_slug)
        return {"slug": document.slug, "title": document.title, "body": document.body}

    def approve(first: int, count: int) -> None:
        for index in range(first, first + count):
            fx.approvals[index] = fx.app.drafts.approve(fx.team.human, payload=draft(500_000 + index)).token

    def open_sessions(_first: int, count: int) -> None:
        fx.to_close += [fx.app.sessions.open(fx.team.agent, "To close", 1, None)["session"] for _ in range(count)]

    def repair(index: int) -> dict[str, Any]:
        return {"session": fx.session, "conflict": f"Observation {index} contradicts the entry.",
                "alternatives": [{"target": {"kind": "entry", "name": entry, "revision": 1},
                                  "title": "Corrected", "body": f"The corrected text, take {index}.",
                                  "rationale": "What the session observed."}]}

    return [
        ToolCase("whoami", lambda _i: {}, lambda answer: answer["principal"] == AGENT),
        ToolCase("workspace_info", lambda _i: {}, lambda answer: answer["workspace"] == WORKSPACE),
        ToolCase("recall", lambda i: {"query": fx.queries[i % len(fx.queries)], "limit": RECALL_LIMIT},
                 lambda answer: "results" in answer),
        ToolCase("read", lambda i: {"slug": slugs[i % len(slugs)]}, lambda answer: answer["slug"] in slugs),
        ToolCase("history", lambda i: {"slug": slugs[i % len(slugs)]}, lambda answer: len(answer["revisions"]) >= 1),
        ToolCase("list", lambda _i: {"limit": 20}, lambda answer: len(answer["entries"]) == 20),
        ToolCase("remember", new_note, lambda answer: answer["status"] == "written"),
        ToolCase("propose_draft", draft, lambda answer: answer["proposal"] > 0),
        ToolCase("proposal_status", lambda _i: {"proposal": fx.proposal}, lambda answer: answer["status"] == "pending"),
        ToolCase("create_draft", lambda i: {**draft(500_000 + i), "approval": fx.approvals.pop(i),
                                            "operation": f"cpu-{i}"},
                 lambda answer: not answer.get("replayed"), before=approve),
        ToolCase("session_open", lambda i: {"subject": f"Question {i}", "budget": 10},
                 lambda answer: answer["session"] > 0),
        ToolCase("sessions", lambda _i: {}, lambda answer: len(answer["sessions"]) >= 1),
        ToolCase("session_show", lambda _i: {"session": fx.session}, lambda answer: answer["session"] == fx.session),
        ToolCase("project_query", lambda _i: {"session": fx.session, "arguments": {
            "kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2}},
                 lambda answer: answer["result"]["lines"] is not None),
        ToolCase("session_close", lambda _i: {"session": fx.to_close.pop()},
                 lambda answer: answer["status"] == "closed", before=open_sessions),
        ToolCase("repair_target", lambda _i: {"session": fx.session, "kind": "entry", "name": entry},
                 lambda answer: answer["revision"] == 1),
        ToolCase("repair_prepare", repair, lambda answer: answer["repair"] > 0),
        ToolCase("repair_show", lambda _i: {"repair": fx.repair}, lambda answer: answer["repair"] == fx.repair),
    ]


@dataclass
class Block:
    cpu: float = 0.0
    calls: int = 0
    wall: list[float] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


async def call_block(server: StdioServer, case: ToolCase, first: int, count: int, block: Block) -> None:
    """``count`` calls of one tool; the server's CPU time over them, each call's wall time, wrong answers."""
    if case.before is not None:
        case.before(first, count)
    before = server.cpu()
    for index in range(first, first + count):
        arguments = case.arguments(index)
        started = time.perf_counter()
        try:
            answer = await server.call(case.name, arguments)
            right = case.check(answer)
        except (ToolError, KeyError, TypeError, IndexError) as error:
            answer, right = f"{type(error).__name__}: {error}", False
        block.wall.append(time.perf_counter() - started)
        if not right:
            block.wrong.append(f"{case.name}: {str(answer)[:160]}")
    block.cpu += server.cpu() - before
    block.calls += count


async def cpu_setup(fx: CpuFixture, ours: StdioServer) -> None:
    """The session, draft proposal and repair that the reading tools read."""
    fx.session = (await ours.call("session_open", {"subject": "The benchmark's session", "budget": SESSION_BUDGET}))[
        "session"]
    await ours.call("project_query", {"session": fx.session, "arguments": {"kind": "source.files", "substring": "a"}})
    fx.proposal = (await ours.call("propose_draft", draft(900_000)))["proposal"]
    target = await ours.call("repair_target", {"session": fx.session, "kind": "entry", "name": fx.documents[0].slug})
    fx.repair = (await ours.call("repair_prepare", {
        "session": fx.session, "conflict": "The setup's observation.",
        "alternatives": [{"target": {"kind": "entry", "name": fx.documents[0].slug, "revision": target["revision"]},
                          "title": "Corrected", "body": "The corrected text.", "rationale": "Observed."}]}))["repair"]


NOOP = ToolCase("noop", lambda _i: {}, lambda answer: answer == {})
NOOP_LABEL = "no-op tool, same SDK"


async def cpu_blocks(plan: Plan, cases: list[ToolCase], ours: StdioServer, floor: StdioServer,
                     transport_floor: StdioServer) -> tuple[dict[str, Block], Block, Block]:
    """Per round and tool: a block of no-op calls, then a block of the tool's calls (tools in reverse order
    every other round); per round, a block of no-op calls over Armarius's stdio transport too."""
    for case in [NOOP, *cases]:  # warm-up: imports, caches, each tool's first transaction
        await call_block(floor if case is NOOP else ours, case, 10_000_000 + len(case.name) * 100, 5, Block())
    await call_block(transport_floor, NOOP, 10_000_000, 5, Block())
    ours_blocks, floor_block, transport_block = {case.name: Block() for case in cases}, Block(), Block()
    for round_number in range(plan.cpu_rounds):
        first = round_number * plan.cpu_calls
        for case in cases if round_number % 2 == 0 else cases[::-1]:
            await call_block(floor, NOOP, first, plan.cpu_calls, floor_block)
            await call_block(ours, case, first, plan.cpu_calls, ours_blocks[case.name])
        await call_block(floor, NOOP, first, plan.cpu_calls, floor_block)
        await call_block(transport_floor, NOOP, first, plan.cpu_calls, transport_block)
    return ours_blocks, floor_block, transport_block


async def compare_cpu(bench: Bench) -> list[Row]:
    folder = bench.scratch("cpu")
    repo, commit = tiny_repository(folder)
    config = folder / "research.toml"
    config.write_text(f'[[sources]]\nname = "app"\nrepository = "{repo}"\nurl = "https://example.invalid/app.git"\n'
                      f'commit = "{commit}"\n')
    settings = Settings(data_dir=folder / "armarius", research_config=config, session_max_budget=SESSION_BUDGET)
    initialize(settings)
    env = {"ARMARIUS_RESEARCH_CONFIG": str(config), "ARMARIUS_SESSION_MAX_BUDGET": str(SESSION_BUDGET)}
    floor_server = stdio_server("noop", sys.executable, [str(NOOP_SERVER)], {},
                                bench.folder / "noop.log")
    transport_floor_server = stdio_server("noop (Armarius's stdio)", sys.executable,
                                          [str(NOOP_SERVER), "--armarius-stdio"], {}, bench.folder / "noop.log")
    app = open_app(settings)
    try:
        team, _ = Team.create(app)
        documents = bench.documents(300)
        fill(bench, app, team.workspace_id, documents)
        queries = [query for name in QUERY_CLASSES for query in bench.corpus.queries(name, 10, len(documents))]
        fx = CpuFixture(app, team, documents, queries, bench.corpus)
        async with (armarius_stdio(bench, settings, team.token, **env) as ours, floor_server as floor,
                    transport_floor_server as transport_floor):
            await cpu_setup(fx, ours)
            offered = {tool.name for tool in (await ours.client.list_tools()).tools}
            cases = [case for case in tool_cases(fx) if case.name in offered]
            if offered - {case.name for case in cases}:
                bench.note(f"tools without a CPU case: {', '.join(sorted(offered - {c.name for c in cases}))}")
            ours_blocks, floor_block, transport_block = await cpu_blocks(bench.plan, cases, ours, floor,
                                                                         transport_floor)
    finally:
        app.close()
    return cpu_rows({TRANSPORT_FLOOR: transport_block, **ours_blocks}, floor_block)


#: The no-op tool served over Armarius's own stdio transport (armarius.mcp.stdio): what the transport
#: alone saves against the SDK's.
TRANSPORT_FLOOR = "no-op tool, Armarius's stdio transport"


def cpu_rows(ours_blocks: dict[str, Block], floor_block: Block) -> list[Row]:
    floor_cpu = floor_block.cpu / floor_block.calls * 1000
    floor_wall = percentile(floor_block.wall, 0.5) * 1000
    rows = []
    for name, block in ours_blocks.items():
        wall = percentile(block.wall, 0.5) * 1000
        case, label = ((name, "no-op tool (stdio)") if name == TRANSPORT_FLOOR
                       else (f"server CPU per call: {name}", "Armarius tool (stdio)"))
        wrong = block.wrong or floor_block.wrong
        if wrong:
            rows.append(Row(2, case, label, NOOP_LABEL, "CPU ms/call", n=block.calls,
                            differ=len(block.wrong) + len(floor_block.wrong), detail=f"answers differ: {wrong[0]}"))
            continue
        rows.append(Row(2, case, label, NOOP_LABEL, "CPU ms/call", block.cpu / block.calls * 1000,
                        floor_cpu, n=block.calls, detail=f"wall p50 {wall:.2f} vs {floor_wall:.2f} ms",
                        extra={"a_wall_p50_ms": wall, "b_wall_p50_ms": floor_wall, "b_calls": floor_block.calls}))
    return rows


# 3. Database queries against DBHub and PyMySQL --------------------------------------------------------


def ids_or_count(kind: str, rows: list[Any]) -> list[Any]:
    """What two answers must share: the ids of a page (at most one page of 100), or the count."""
    if kind == "database.count":
        return [int(next(iter(rows[0].values())) if isinstance(rows[0], dict) else rows[0][0])]
    return [int(row["id"] if isinstance(row, dict) else row[0]) for row in rows[:100]]


def ours_answer(text: str) -> list[Any]:
    result = json.loads(text)["result"]
    return [result["count"]] if "count" in result else ids_or_count("database.rows", result["rows"])


def dbhub_answer(kind: str, text: str) -> list[Any]:
    document = json.loads(text)
    if not document.get("success", True):
        raise ToolError(f"DBHub: {text[:200]}")
    return ids_or_count(kind, document["data"]["statements"][0]["rows"])


def same(what: str) -> Callable[[list[Any], list[Any]], str | None]:
    def compare(a: list[Any], b: list[Any]) -> str | None:
        return None if a == b else f"{what}: {a[:3]}... ({len(a)}) vs {b[:3]}... ({len(b)})"
    return compare


@dataclass
class DatabaseCase:
    label: str
    query: Callable[[int], Query]
    calls: int
    vs_dbhub: Pairs = field(default_factory=Pairs)
    vs_driver: Pairs = field(default_factory=Pairs)
    ours_bytes: list[int] = field(default_factory=list)
    dbhub_bytes: list[int] = field(default_factory=list)


async def database_case(case: DatabaseCase, ours: StdioServer, dbhub: StdioServer, driver: Any, session: int,
                        budget: float) -> None:
    """Each turn, the same query on the three sides, each turn starting with the next side."""

    async def run_ours(query: Query) -> list[Any]:
        text = await ours.call_text("project_query", {"session": session, "arguments": query.arguments})
        case.ours_bytes.append(len(text.encode()))
        return ours_answer(text)

    async def run_dbhub(query: Query, sql: str) -> list[Any]:
        text = await dbhub.call_text("execute_sql", {"sql": sql})
        case.dbhub_bytes.append(len(text.encode()))
        return dbhub_answer(query.arguments["kind"], text)

    async def run_driver(query: Query) -> list[Any]:
        with driver.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(query.statement, query.parameters)
            return ids_or_count(query.arguments["kind"], list(cursor.fetchall()))

    deadline = Deadline(budget)
    for turn in range(-2, case.calls):  # two warm-up calls, not kept
        query = case.query(turn)
        with driver.cursor() as cursor:
            sql = cursor.mogrify(query.statement, query.parameters)  # the literal SELECT, as an agent sends it
        armarius_side, dbhub_side, driver_side = await in_turn(turn, [
            lambda query=query: run_ours(query), lambda query=query, sql=sql: run_dbhub(query, sql),
            lambda query=query: run_driver(query)])
        if turn >= 0:
            keep(case.vs_dbhub, armarius_side, dbhub_side, same("ids or count, ours vs DBHub"))
            keep(case.vs_driver, armarius_side, driver_side, same("ids or count, ours vs PyMySQL"))
        if deadline.passed():
            break


async def compare_database(bench: Bench) -> list[Row]:
    plan, folder = bench.plan, bench.scratch("database")
    script = npm_bin(npm_package(*DBHUB, reinstall=bench.reinstall))
    pairs = varying_pairs()

    def varying(make: Callable[[int, int], Query]) -> Callable[[int], Query]:
        return lambda turn: make(*pairs[turn % len(pairs)]) if turn >= 0 else make(FACTION, LEVEL)

    cases = [DatabaseCase("rows, 2 indexed filters, page of 100", varying(indexed_rows), plan.database_calls),
             DatabaseCase("count, 2 indexed filters", varying(indexed_count), plan.database_calls),
             DatabaseCase("rows, escaped contains (scan)", lambda _turn: contains_rows(), plan.database_scans),
             DatabaseCase("count, escaped contains (scan)", lambda _turn: contains_count(), plan.database_scans)]
    with ExitStack() as stack:
        try:
            database, setup = stack.enter_context(mariadb_table(plan.database_rows))
        except pymysql.MySQLError as error:
            bench.note(f"MariaDB is not reachable at {MARIADB_ADMIN_URL} ({error}): section 3 skipped")
            return []
        print(f"  database: {plan.database_rows:,} rows in MariaDB, set up in {setup:.0f} s", flush=True)
        toml = research_toml(folder, database)
        dsn = (f"mariadb://{database.user}:{database.password}@{database.host}:{database.port}/{database.database}"
               "?sslmode=disable")
        env = {"ARMARIUS_RESEARCH_CONFIG": str(toml), PASSWORD_ENV: database.password,
               "ARMARIUS_SESSION_MAX_BUDGET": str(SESSION_BUDGET)}
        driver = stack.enter_context(pymysql.connect(
            host=database.host, port=database.port, user=database.user, password=database.password,
            database=database.database, charset="utf8mb4", autocommit=True))
        bench.versions["mariadb"] = driver.get_server_info().removeprefix("5.5.5-")
        settings = stack.enter_context(sqlite_settings(folder / "armarius"))
        team = team_of(settings)
        async with (armarius_stdio(bench, settings, team.token, **env) as ours,
                    node_stdio(bench, "dbhub", script, ["--transport", "stdio", "--dsn", dsn], {}) as dbhub):
            session = (await ours.call("session_open", {"subject": "Compare", "budget": SESSION_BUDGET}))["session"]
            for case in cases:
                await database_case(case, ours, dbhub, driver, session, plan.budget)
    rows = []
    for case in cases:
        detail = f"answer bytes {byte_sizes(case.ours_bytes)} vs {byte_sizes(case.dbhub_bytes)}"
        rows.append(case.vs_dbhub.row(3, case.label, "project_query (stdio)", "DBHub execute_sql (stdio)", detail,
                                      a_bytes=case.ours_bytes, b_bytes=case.dbhub_bytes))
        rows.append(case.vs_driver.row(3, case.label, "project_query (stdio)", "PyMySQL, bare"))
    return rows


# 4. source.search against git grep ---------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    kind: str
    text: str
    files: int
    path_prefix: str | None = None


#: Literal classes by the number of files holding them, and the path-prefix class (a frequent literal
#: limited to one directory of a few hundred files).
LITERAL_FILES = {"rare": (1, 3), "medium": (10, 99), "frequent": (100, 999)}


def choose_literals(repo: Path, commit: str, per_class: int) -> list[Literal]:
    """Seeded identifiers of the tree, their file counts checked as fixed strings over the text blobs."""
    blobs = list(text_blobs(repo, commit))
    document_frequency: Counter[bytes] = Counter()
    for _path, content in blobs:
        document_frequency.update(set(IDENTIFIER.findall(content)))
    candidates = sorted(document_frequency.items())
    random.Random(SEED).shuffle(candidates)
    prefix = choose_prefix([path for path, _ in blobs])

    def pick(kind: str, low: int, high: int, prefix: str = "") -> list[Literal]:
        chosen: list[Literal] = []
        for word, tokens in candidates:
            if tokens < low or (kind == "rare" and len(word) < 8):
                continue
            files = sum(1 for path, content in blobs if path.startswith(prefix) and word in content)
            if low <= files <= high:
                chosen.append(Literal(kind, word.decode(), files, prefix or None))
                if len(chosen) == per_class:
                    break
        return chosen

    literals = [literal for kind, (low, high) in LITERAL_FILES.items() for literal in pick(kind, low, high)]
    return literals + pick("path prefix", 50, 10**9, prefix)


def grep_hits(repo: Path, commit: str, literal: Literal) -> list[tuple[str, int]]:
    """git grep -z -n -F -I at the commit: (path, line) of every matching line."""
    command = ["git", "--no-pager", "-C", str(repo), "grep", "-z", "-n", "-F", "-I", "-e", literal.text, commit]
    if literal.path_prefix:
        command += ["--", literal.path_prefix]
    completed = subprocess.run(command, env=GIT_ENV, capture_output=True, check=False)
    if completed.returncode not in (0, 1):
        raise RuntimeError(f"git grep: exit {completed.returncode}: {completed.stderr.decode()[-300:]}")
    hits = []
    for line in completed.stdout.split(b"\n"):
        if line:
            name, number, _text = line.split(b"\0", 2)
            hits.append((name.decode().split(":", 1)[1], int(number)))
    return hits


def rg_hits(checkout: Path, literal: Literal) -> list[tuple[str, int]]:
    """rg -F -n over a checkout of the commit (no ignore files: every file, as git grep searches the tree)."""
    command = ["rg", "-F", "-n", "--no-heading", "--null", "--no-ignore", "--hidden", "-e", literal.text,
               literal.path_prefix or "."]
    completed = subprocess.run(command, cwd=checkout, capture_output=True, check=False)
    if completed.returncode not in (0, 1):
        raise RuntimeError(f"rg: exit {completed.returncode}: {completed.stderr.decode()[-300:]}")
    hits = []
    for line in completed.stdout.split(b"\n"):
        if line:
            name, rest = line.split(b"\0", 1)
            hits.append((name.decode().removeprefix("./"), int(rest.split(b":", 1)[0])))
    return sorted(hits)


def search_matches(answer: str, grep: list[tuple[str, int]]) -> str | None:
    """source.search's hits are git grep's, in its order, up to where the page stops; its total is theirs."""
    result = json.loads(answer)["result"]
    ours = [(hit["path"], hit["line"]) for hit in result["hits"]]
    if ours != grep[:len(ours)]:
        first = next((i for i, (x, y) in enumerate(zip(ours, grep, strict=False)) if x != y), min(len(ours), len(grep)))
        return f"hit #{first} differs: {ours[first:first + 1]} vs git grep {grep[first:first + 1]}"
    total = result.get("total_hits")
    if total is not None and total != len(grep):
        return f"total_hits {total}, git grep {len(grep)} lines"
    if total is None and result.get("total_hits_at_least", 0) > len(grep):
        return f"total_hits_at_least {result['total_hits_at_least']}, git grep {len(grep)} lines"
    return None


@contextmanager
def checkout(repo: Path, commit: str, folder: Path) -> Iterator[Path]:
    """The commit's files in a folder (git archive | tar), for rg."""
    target = folder / "checkout"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(repo), "archive", commit], env=GIT_ENV, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    try:
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)


async def compare_source(bench: Bench) -> list[Row]:
    plan, folder = bench.plan, bench.scratch("source")
    corpus = corpus_for(DEFAULT_PACKAGE, rebuild=False)
    literals = choose_literals(corpus.repo, corpus.commit, plan.source_words)
    config = write_config(corpus, folder)
    rg = shutil.which("rg")
    if rg is None:
        bench.note("rg (ripgrep) is not installed: its rows are left out (the bench does not install it)")
    kinds = list(dict.fromkeys(literal.kind for literal in literals))
    vs_grep = {kind: Pairs() for kind in kinds}
    vs_rg = {kind: Pairs() for kind in kinds}
    lines: dict[str, list[int]] = {kind: [] for kind in kinds}
    with ExitStack() as stack, sqlite_settings(folder / "armarius") as settings:
        team = team_of(settings)
        files = stack.enter_context(checkout(corpus.repo, corpus.commit, folder)) if rg else None
        env = {"ARMARIUS_RESEARCH_CONFIG": str(config), "ARMARIUS_SESSION_MAX_BUDGET": str(SESSION_BUDGET)}
        async with armarius_stdio(bench, settings, team.token, **env) as ours:
            session = (await ours.call("session_open", {"subject": "Compare", "budget": SESSION_BUDGET}))["session"]

            async def search(literal: Literal) -> str:
                arguments = {"kind": "source.search", "source": SOURCE_NAME, "text": literal.text}
                if literal.path_prefix:
                    arguments["path_prefix"] = literal.path_prefix
                return await ours.call_text("project_query", {"session": session, "arguments": arguments})

            await search(literals[0])  # warm-up: the tree listing, the page cache
            grep_hits(corpus.repo, corpus.commit, literals[0])
            turn = 0
            for _round in range(plan.source_rounds):
                for literal in literals:
                    sides = [lambda literal=literal: search(literal),
                             now(grep_hits, corpus.repo, corpus.commit, literal)]
                    if files is not None:
                        sides.append(now(rg_hits, files, literal))
                    answers = await in_turn(turn, sides)
                    keep(vs_grep[literal.kind], answers[0], answers[1], search_matches)
                    if files is not None:
                        keep(vs_rg[literal.kind], answers[0], answers[2], search_matches)
                    if isinstance(answers[1][1], list):
                        lines[literal.kind].append(len(answers[1][1]))
                    turn += 1
    rows = []
    for kind in kinds:
        chosen = [literal for literal in literals if literal.kind == kind]
        detail = (f"{len(chosen)} literals in {statistics.median(literal.files for literal in chosen):.0f} files, "
                  f"{statistics.median(lines[kind]) if lines[kind] else 0:.0f} lines (medians)"
                  + (f" under {chosen[0].path_prefix}" if chosen[0].path_prefix else ""))
        rows.append(vs_grep[kind].row(4, f"source.search, {kind}", "project_query (stdio)", "git grep -F", detail,
                                      literals=[literal.text for literal in chosen]))
        if rg is not None:
            rows.append(vs_rg[kind].row(4, f"source.search, {kind}", "project_query (stdio)", "rg -F (checkout)"))
    bench.versions["source corpus"] = f"{corpus.sdist}, {corpus.files:,} files, commit {corpus.commit[:12]}"
    return rows


# 5. Recall at 100k entries against the bare full-text query ----------------------------------------------


class FloorSearch:
    """The bare full-text query recall runs, on the driver: the same ranking, entry ids only, all words
    and then any word. No titles, bodies or snippets: the floor."""

    #: Both engines rank the first RANK_CANDIDATES matches in the index's order, as recall does (all of them
    #: for a word found in fewer entries), so that a common word's answers can be compared at all.
    SQLITE = ("SELECT rowid FROM (SELECT rowid, bm25(entries_fts, 2.0, 4.0, 1.0) AS score FROM entries_fts "
              "WHERE entries_fts MATCH ? LIMIT ?) ORDER BY score, rowid LIMIT ?")
    POSTGRES = ("SELECT entry_id FROM (SELECT entry_id, tsv FROM entry_search WHERE tsv @@ to_tsquery('simple', %s) "
                "LIMIT %s) candidate ORDER BY ts_rank(tsv, to_tsquery('simple', %s)) DESC, entry_id LIMIT %s")

    def __init__(self, settings: Settings) -> None:
        from armarius.memory import queries
        from armarius.memory.model import words

        self._queries, self._words = queries, words
        self.dialect = "sqlite" if settings.database_url is None else "postgresql"
        if self.dialect == "sqlite":
            self._connection: Any = sqlite3.connect(settings.sqlite_path)
        else:  # the owner: no row-level security; one workspace here, so no workspace filter either
            self._connection = psycopg.connect(settings.database_migrate_url or "", autocommit=True)
            # As recall's search function: the candidates from the GIN index, never from a sequential scan.
            self._connection.execute("SET enable_seqscan = off")
            self._connection.execute("SET max_parallel_workers_per_gather = 0")
        self.slugs = {row[0]: row[1] for row in self._connection.execute("SELECT id, slug FROM entries")}

    def search(self, query: str) -> list[str]:
        terms = list(dict.fromkeys(self._words(query)))[:32]
        statement = self.SQLITE if self.dialect == "sqlite" else self.POSTGRES
        for groups in ([terms], [[term] for term in terms]):
            expression = self._queries.match_expression(self.dialect, groups)
            params = ((expression, self._queries.RANK_CANDIDATES, RECALL_LIMIT) if self.dialect == "sqlite"
                      else (expression, self._queries.RANK_CANDIDATES, expression, RECALL_LIMIT))
            rows = self._connection.execute(statement, params).fetchall()
            if rows or len(terms) < 2:
                break
        return [self.slugs[row[0]] for row in rows]

    def close(self) -> None:
        self._connection.close()


def same_top(ours: dict[str, Any], floor: list[str]) -> str | None:
    found = [result["slug"] for result in ours["results"]]
    if set(found) == set(floor):
        return None
    return (f"{ours['query']!r}: {len(set(found) - set(floor))} of recall's {len(found)} entries are not in the "
            f"floor's top {len(floor)}")


async def recall_queries(bench: Bench, app: Armarius, agent: Actor, floor: FloorSearch, size: int
                         ) -> tuple[dict[str, Pairs], dict[str, list[float]]]:
    """Per class: lexical recall and the floor alternately (their answers compared), and the default
    (hybrid) recall timed next to them."""
    plan = bench.plan
    query_sets = {name: bench.corpus.queries(name, plan.recall_queries, size) for name in QUERY_CLASSES}
    for query in [query_set[0] for query_set in query_sets.values()]:  # warm-up
        app.memory.recall(agent, query, limit=RECALL_LIMIT)
        app.memory.recall(agent, query, limit=RECALL_LIMIT, mode="lexical")
        floor.search(query)
    by_class = {name: Pairs() for name in QUERY_CLASSES}
    hybrid: dict[str, list[float]] = {name: [] for name in QUERY_CLASSES}
    deadline, turn = Deadline(plan.budget), 0
    for _round in range(plan.recall_rounds):
        for round_queries in zip(*query_sets.values(), strict=True):
            for name, query in zip(QUERY_CLASSES, round_queries, strict=True):
                await alternate(by_class[name], turn,
                                now(app.memory.recall, agent, query, limit=RECALL_LIMIT, mode="lexical"),
                                now(floor.search, query), same_top)
                started = time.perf_counter()
                app.memory.recall(agent, query, limit=RECALL_LIMIT)
                hybrid[name].append(time.perf_counter() - started)
                turn += 1
            if deadline.passed():
                break
    return by_class, hybrid


async def recall_engine(bench: Bench, engine: str, size: int) -> list[Row]:
    with engine_settings(engine, bench.scratch(f"recall-{engine}-{size}") / "data") as settings:
        app = open_app(settings)
        floor: FloorSearch | None = None
        try:
            team, _ = Team.create(app)
            started = time.perf_counter()
            fill(bench, app, team.workspace_id, bench.documents(size))
            loaded = time.perf_counter()
            prepare(settings)  # PostgreSQL: VACUUM ANALYZE, as autovacuum would after a load
            print(f"  recall: {size:,} entries on {engine} loaded and embedded in {loaded - started:.0f} s"
                  + (f" (+ {time.perf_counter() - loaded:.0f} s VACUUM ANALYZE)" if engine == "postgresql" else ""),
                  flush=True)
            floor = FloorSearch(settings)
            by_class, hybrid = await recall_queries(bench, app, team.agent, floor, size)
        finally:
            if floor is not None:
                floor.close()
            app.close()
    engine_name = "SQLite" if engine == "sqlite" else "PostgreSQL"
    floor_name = "FTS5 bm25, ids" if engine == "sqlite" else "ts_rank + GIN, ids"
    rows = []

    def hybrid_detail(names: list[str]) -> str:
        default = percentile([seconds for name in names for seconds in hybrid[name]], 0.5) * 1000
        return f"default recall (hybrid: words and meaning) p50 {default:.2f} ms"

    for name, pairs in by_class.items():
        rows.append(pairs.row(5, f"recall {name}, {size_label(size)}, {engine_name}", "recall, lexical (service)",
                              floor_name, hybrid_detail([name])))
    rows.append(mix_row(by_class, 5, f"recall mix, {size_label(size)}, {engine_name}", "recall, lexical (service)",
                        floor_name, hybrid_detail(list(QUERY_CLASSES))))
    return rows


async def compare_recall(bench: Bench) -> list[Row]:
    rows = []
    for size in bench.plan.recall_sizes:
        for engine in bench.engines():
            rows += await recall_engine(bench, engine, size)
    if max(bench.plan.recall_sizes) < 1_000_000:
        bench.note("recall at 1M entries was not run: making, loading and embedding 1M documents takes about ten "
                   "times the 100k figures on each engine, longer than the whole run; --recall-sizes 100000,1000000 "
                   "runs it")
    return rows


# 6. 32 concurrent MCP clients over HTTP ------------------------------------------------------------------


#: Section 6's floor in its alternation of runs: the no-op tool on the same SDK over HTTP, the same
#: clients calling it (bench/noop_server.py --http), instead of a number of Armarius workers.
FLOOR = 0


@dataclass
class Load:
    """One run: what the clients got within the measured window."""

    workers: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    #: The same latencies by tool.
    by_tool: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    #: PostgreSQL's own processes, for a store there (0 on SQLite).
    database_cpu: float = 0.0
    #: Connections the lean clients opened again after an answer said ``Connection: close`` (a worker evening out
    #: its connections with the others'), warm-up included.
    reopened: int = 0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else float("nan")

    def figures(self) -> dict[str, Any]:
        ops = max(1, len(self.latencies))
        return {"ops_per_s": self.rate, "ops": len(self.latencies), "errors": dict(self.errors),
                **{f"p{round(f * 100)}_ms": percentile(self.latencies, f) * 1000 for f in (0.5, 0.95, 0.99)},
                "server_cpu_ms_per_op": self.server_cpu / ops * 1000,
                "client_cpu_ms_per_op": self.client_cpu / ops * 1000,
                "database_cpu_ms_per_op": self.database_cpu / ops * 1000, "connections_reopened": self.reopened,
                "by_tool": {tool: {"ops": len(seconds), "p50_ms": percentile(seconds, 0.5) * 1000,
                                   "p99_ms": percentile(seconds, 0.99) * 1000}
                            for tool, seconds in sorted(self.by_tool.items())}}

    def summary(self) -> str:
        ms = [percentile(self.latencies, fraction) * 1000 for fraction in (0.5, 0.95, 0.99)]
        errors = sum(self.errors.values())
        who = "no-op server" if self.workers == FLOOR else f"{self.workers} worker{'s' if self.workers > 1 else ''}"
        return (f"{who}: {self.rate:,.0f} ops/s, p50/p95/p99 "
                f"{ms[0]:.0f}/{ms[1]:.0f}/{ms[2]:.0f} ms, {errors} errors"
                + (f" ({', '.join(f'{code} {n}' for code, n in self.errors.most_common(3))})" if errors else "")
                + f", CPU per op: server {self.server_cpu / max(1, len(self.latencies)) * 1000:.2f} ms, clients "
                f"{self.client_cpu / max(1, len(self.latencies)) * 1000:.2f} ms"
                + (f", PostgreSQL {self.database_cpu / max(1, len(self.latencies)) * 1000:.2f} ms"
                   if self.database_cpu else "")
                + (f", {self.reopened} connections reopened" if self.reopened else "")
                + ("; p50/p99 by tool: " + ", ".join(
                    f"{tool} {percentile(seconds, 0.5) * 1000:.0f}/{percentile(seconds, 0.99) * 1000:.0f} ms"
                    for tool, seconds in sorted(self.by_tool.items())) if len(self.by_tool) > 1 else ""))


class Notes:
    """New notes for section 6's remember calls: made before each run (:meth:`make_ahead`), so that the clients,
    which share the server's cores, spend no CPU making them while the run is timed; made on the fly, and
    counted, should a run take more. (Until 2026-12-07 3,000 notes were made once for all of an engine's runs,
    600 in a quick run: the first run took them all, and each later run made its notes on the fly, about
    0.1 ms of the clients' CPU a note.)"""

    def __init__(self, corpus: Corpus, first: int) -> None:
        self._corpus, self._next = corpus, first
        self._ready: deque[Document] = deque()
        self.made_on_the_fly = 0

    def make_ahead(self, count: int) -> None:
        """At least ``count`` notes ready."""
        missing = count - len(self._ready)
        if missing > 0:
            self._ready.extend(self._corpus.documents(self._next, self._next + missing, new_slug))
            self._next += missing

    def take(self) -> Document:
        if self._ready:
            return self._ready.popleft()
        self.made_on_the_fly += 1
        self._next += 1
        return self._corpus.document(self._next - 1, new_slug)


@dataclass(frozen=True)
class Workload:
    weights: dict[str, int]
    slugs: list[str]
    queries: list[str]
    notes: Notes | None = None

    def make_notes_ahead(self, plan: Plan) -> None:
        """As many new notes as a run of ``plan`` could take (at plan.http_rate_max calls a second)."""
        if self.notes is not None:
            share = self.weights.get("remember", 0) / sum(self.weights.values())
            self.notes.make_ahead(math.ceil(plan.http_seconds * plan.http_rate_max * share))


FLOOR_WORKLOAD = Workload({"noop": 1}, [], [])


def answer_problem(tool: str, result: Any, arguments: dict[str, Any]) -> str | None:
    """What is wrong with an answer (an error code, or a wrong shape), None when it is right."""
    text = getattr(result.content[0], "text", "") if result.content else ""
    answer = json.loads(text) if text else {}
    if result.is_error:
        return str(answer.get("code", "error"))
    if tool == "remember":
        return None if answer.get("status") == "written" else f"remember {answer.get('status')}"
    if tool == "read":
        return None if answer.get("slug") == arguments["slug"] else "read: another entry"
    if tool == "noop":
        return None if answer == {} else "noop: not {}"
    return None if isinstance(answer.get("results"), list) else "recall: no results list"


async def http_agent(url: str, token: str, workload: Workload, rng: random.Random, ready: anyio.Event,
                     start: anyio.Event, window: list[float], run: Load, *, sdk: bool) -> None:
    """One MCP client over streamable HTTP with a connection of its own (``sdk``: the SDK's client, else
    bench/lean_client.py's): calls until the window ends."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    tools, weights = list(workload.weights), list(workload.weights.values())

    def arguments(tool: str) -> dict[str, Any]:
        if tool == "remember":
            assert workload.notes is not None
            note = workload.notes.take()
            return {"slug": note.slug, "title": note.title, "body": note.body}
        if tool == "read":
            return {"slug": rng.choice(workload.slugs)}
        if tool == "noop":
            return {}
        return {"query": rng.choice(workload.queries), "limit": RECALL_LIMIT}

    async with AsyncExitStack() as stack:
        if sdk:
            http = await stack.enter_async_context(create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}))
            client: Client | LeanClient = await stack.enter_async_context(
                Client(streamable_http_client(url, http_client=http)))
        else:
            lean = client = await stack.enter_async_context(LeanClient(url, token))

            def count_reopened() -> None:
                run.reopened += lean.connections - 1

            stack.callback(count_reopened)
        for tool in workload.weights.keys() - {"remember"}:  # warm-up: the connection, the server's caches
            await client.call_tool(tool, arguments(tool))
        ready.set()
        await start.wait()
        while True:
            tool = rng.choices(tools, weights)[0]
            call = arguments(tool)
            started = time.perf_counter()
            if started >= window[1]:
                return
            try:
                problem = answer_problem(tool, await client.call_tool(tool, call), call)
            except Exception as error:  # a transport failure under load is an error of the run, not of the bench
                problem = type(error).__name__
            ended = time.perf_counter()
            if ended > window[1]:
                return
            if problem is None:
                run.latencies.append(ended - started)
                run.by_tool.setdefault(tool, []).append(ended - started)
            else:
                run.errors[problem] += 1


async def run_load(url: str, tokens: list[str], workload: Workload, seconds: float, pids: list[int],
                   run: Load, *, postgres: bool = False, sdk: bool = False) -> None:
    """The clients connect and warm up; then all call for ``seconds``, the servers' CPU measured over that window
    (``postgres``: PostgreSQL's too; ``sdk``: the SDK's clients instead of bench/lean_client.py's)."""
    readies = [anyio.Event() for _ in tokens]
    start, window = anyio.Event(), [0.0, float("inf")]
    async with anyio.create_task_group() as group:
        for number, (token, ready) in enumerate(zip(tokens, readies, strict=True)):
            group.start_soon(partial(http_agent, url, token, workload, random.Random(f"{SEED}:{number}"), ready,
                                     start, window, run, sdk=sdk))
        for ready in readies:
            await ready.wait()
        # The clients' own full garbage collections (50-80 ms over the bench's heap) would stop every client at
        # once and show in the servers' tail: what there is now stays out of them, as the servers do.
        gc.collect()
        gc.freeze()
        server_before, client_before = tree_cpu_seconds(pids), cpu_seconds(os.getpid())
        database_before = database_cpu_seconds() if postgres else 0.0
        window[:] = [time.perf_counter(), time.perf_counter() + seconds]
        start.set()
        await anyio.sleep(seconds)
        run.server_cpu = tree_cpu_seconds(pids) - server_before
        run.client_cpu = cpu_seconds(os.getpid()) - client_before
        run.database_cpu = database_cpu_seconds() - database_before if postgres else 0.0
        run.seconds = seconds


def http_store(bench: Bench, settings: Settings, weights: dict[str, int]) -> tuple[list[str], Workload]:
    """Section 6's store (the plan's entries, one agent a client) and its clients' tokens and workload."""
    plan = bench.plan
    app = open_app(settings)
    try:
        team, tokens = Team.create(app, agents=plan.http_clients)
        documents = bench.documents(plan.http_entries)
        fill(bench, app, team.workspace_id, documents)
    finally:
        app.close()
    prepare(settings)
    return tokens, Workload(weights, [document.slug for document in documents],
                            [query for name in QUERY_CLASSES
                             for query in bench.corpus.queries(name, 50, plan.http_entries)],
                            Notes(bench.corpus, NEW_BASE + 7 * NEW_BLOCK))


async def http_engine(bench: Bench, engine: str, workers: int) -> list[Row]:
    plan = bench.plan
    weights = {"remember": 50, "recall": 50} if engine == "sqlite" else {"remember": 20, "recall": 40, "read": 40}
    engine_name = "SQLite" if engine == "sqlite" else "PostgreSQL"
    case = f"{plan.http_clients} clients, {engine_name}, {'/'.join(map(str, weights.values()))} {'/'.join(weights)}"
    with engine_settings(engine, bench.scratch(f"http-{engine}") / "data") as settings:
        tokens, workload = http_store(bench, settings, weights)
        env = environment(settings)
        refusal = refusal_of_serve(settings.data_dir, env, workers) if engine == "sqlite" else ""
        configurations = [1] if refusal else [1, workers]
        order = [*configurations, FLOOR]
        runs: dict[int, list[Load]] = {count: [] for count in order}
        with snapshot(settings) as restore:
            for round_number in range(plan.http_rounds):
                for count in order if round_number % 2 == 0 else order[::-1]:
                    load = FLOOR_WORKLOAD if count == FLOOR else workload
                    load.make_notes_ahead(plan)
                    if count != FLOOR:
                        restore()  # each run starts from the store as loaded, not as the runs before left it
                    serving = (noop_serve(bench.folder / "noop-http.log") if count == FLOOR
                               else armarius_serve(settings.data_dir, env, bench.folder / f"serve-{engine}.log", count))
                    with serving as server:
                        run = Load(count)
                        await run_load(f"{server.base_url}/mcp", tokens, load, plan.http_seconds, server.pids(), run,
                                       postgres=engine == "postgresql" and count != FLOOR,
                                       sdk=plan.http_client == "sdk")
                    runs[count].append(run)
                    print(f"  http: {engine_name}, {run.summary()}", flush=True)
    if workload.notes is not None and workload.notes.made_on_the_fly:
        bench.note(f"section 6, {engine_name}: {workload.notes.made_on_the_fly} notes were made on the fly, in the "
                   f"clients' process (more remember calls than http_rate_max allows for)")
    return http_rows(case, runs, workers, refusal)


def merged(loads: list[Load]) -> Load:
    total = Load(loads[0].workers)
    for run in loads:
        total.seconds += run.seconds
        total.latencies += run.latencies
        for tool, seconds in run.by_tool.items():
            total.by_tool.setdefault(tool, []).extend(seconds)
        total.errors += run.errors
        total.server_cpu += run.server_cpu
        total.database_cpu += run.database_cpu
        total.client_cpu += run.client_cpu
    return total


def http_rows(case: str, runs: dict[int, list[Load]], workers: int, refusal: str) -> list[Row]:
    one, floor = merged(runs[1]), merged(runs[FLOOR])
    extra = {"runs": {"no-op" if count == FLOOR else count: [run.figures() for run in loads]
                      for count, loads in runs.items()}}
    against_floor = Row(6, case, "1 worker", "no-op tool, same SDK", "ops/s", one.rate, floor.rate, n=len(runs[FLOOR]),
                        differ=sum(one.errors.values()) + sum(floor.errors.values()),
                        detail=f"{floor.summary()} (the same clients calling it)", extra=extra)
    if refusal:
        return [Row(6, case, f"{workers} workers", "1 worker", "ops/s", None, one.rate, n=len(runs[1]),
                    differ=sum(one.errors.values()),
                    detail=f"{one.summary()}; {workers} workers not applicable: serve refuses "
                           f"({refusal.splitlines()[-1][:110]})", extra=extra), against_floor]
    many = merged(runs[workers])
    return [Row(6, case, f"{workers} workers", "1 worker", "ops/s", many.rate, one.rate, n=len(runs[workers]),
                differ=sum(one.errors.values()) + sum(many.errors.values()),
                detail=f"{many.summary()}; {one.summary()}", extra=extra), against_floor]


async def compare_http(bench: Bench) -> list[Row]:
    workers = max(2, os.cpu_count() or 2)
    rows = []
    for engine in bench.engines():
        rows += await http_engine(bench, engine, workers)
    bench.note(f"section 6: the {bench.plan.http_clients} clients run in the bench's own process, on the same "
               f"{os.cpu_count()} cores as the server")
    return rows


# The run ---------------------------------------------------------------------------------------------

SECTIONS: dict[int, tuple[str, Callable[[Bench], Awaitable[list[Row]]]]] = {
    1: ("memory over MCP stdio vs @modelcontextprotocol/server-memory", compare_memory),
    2: ("per-call server CPU vs a no-op tool on the same SDK", compare_cpu),
    3: ("database.rows / count / contains vs DBHub and PyMySQL", compare_database),
    4: ("source.search vs git grep -F", compare_source),
    5: ("recall vs the bare full-text query", compare_recall),
    6: ("32 concurrent MCP HTTP clients, 1 and N workers", compare_http),
}


def value(number: float | None, metric: str) -> str:
    if number is None:
        return "-"
    if metric == "ops/s":
        return f"{number:,.0f}"
    return f"{number:.3f}" if number < 1 else f"{number:.2f}" if number < 100 else f"{number:,.0f}"


def print_table(rows: list[Row]) -> None:
    header = f"{'#':>2}  {'case':<46}{'A':<27}{'B':<27}{'metric':<12}{'A':>9}{'B':>9}{'A/B':>8}{'n':>6}  answers"
    print(header)
    print("-" * len(header))
    for row in rows:
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        if row.metric == "ops/s":  # every answer of a load run is checked; a wrong one is an error
            answers = f"{row.differ} errors"
        else:
            answers = "equal" if not row.differ else f"DIFFER {row.differ}/{row.n}"
        print(f"{row.section:>2}  {row.case[:45]:<46}{row.a[:26]:<27}{row.b[:26]:<27}{row.metric:<12}"
              f"{value(row.a_value, row.metric):>9}{value(row.b_value, row.metric):>9}{ratio:>8}{row.n:>6}  {answers}")
        if row.detail:
            print(f"{'':>4}{row.detail}")


def git_state() -> str:
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # read only: not even the index's stat cache is refreshed
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          env=env, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, env=env, check=False).stdout.strip()
    return f"{head}{' with uncommitted changes' if dirty else ''}"


def machine(load_at_start: tuple[float, float, float]) -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gib": round(memory / 2**20, 1), "kernel": platform.release(),
            "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg()}


def versions(bench: Bench) -> dict[str, str]:
    from importlib import metadata

    found = {"armarius": git_state(), "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version,
             "mcp SDK": metadata.version("mcp"), "git": git_version(), "server-memory": SERVER_MEMORY[1],
             "dbhub": DBHUB[1]}
    try:
        found["node"] = node_version()
    except (OSError, subprocess.CalledProcessError):
        found["node"] = "not installed"
    if postgres_available():
        with psycopg.connect(PG_ADMIN_URL) as connection:
            row = connection.execute("SHOW server_version").fetchone()
            found["postgresql"] = str(row[0]) if row else "?"
    return found | bench.versions


def results_path(quick: bool, only: list[int], when: datetime.datetime) -> Path:
    name = when.strftime("%Y-%m-%d") + ("-quick" if quick else "")
    if only != sorted(SECTIONS):
        name += "-only-" + "-".join(map(str, only))
    return RESULTS / f"{name}.json"


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions (under 3 minutes)")
    parser.add_argument("--only", help="comma-separated section numbers, e.g. 1,3")
    parser.add_argument("--reinstall", action="store_true", help="install the peers' npm packages again")
    parser.add_argument("--recall-sizes", help="section 5's sizes, e.g. 100000,1000000 (default 100000; quick 5000)")
    parser.add_argument("--output", type=Path, help="where to write the JSON (default bench/results/<date>.json)")
    parser.add_argument("--sdk-clients", action="store_true",
                        help="section 6's clients are the MCP SDK's own (default: bench/lean_client.py)")
    options = parser.parse_args(argv)
    try:
        options.only = sorted({int(part) for part in options.only.split(",")}) if options.only else sorted(SECTIONS)
    except ValueError:
        parser.error("--only takes section numbers: 1,2,3,4,5,6")
    if not set(options.only) <= set(SECTIONS):
        parser.error(f"--only takes section numbers from 1 to {len(SECTIONS)}")
    return options


async def run_sections(bench: Bench, only: list[int]) -> tuple[list[Row], dict[int, str]]:
    rows: list[Row] = []
    failures: dict[int, str] = {}
    for number in only:
        title, compare = SECTIONS[number]
        started = time.perf_counter()
        print(f"[{number}] {title}", flush=True)
        try:
            rows += await compare(bench)
        except Exception as error:  # one section's failure is reported; the others still run
            while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
                error = error.exceptions[0]  # what failed inside the SDK's task groups
            failures[number] = f"{type(error).__name__}: {error}"[:500]
            print(f"  FAILED: {failures[number]}", flush=True)
            traceback.print_exception(error, file=sys.stderr)
        print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)
    return rows, failures


def main(argv: Sequence[str] | None = None) -> int:
    one_blas_thread()  # numpy as the server runs it (before numpy loads)
    options = parse_options(argv)
    for name in ("httpx", "httpx2"):  # one line per request otherwise, once something configures logging
        logging.getLogger(name).setLevel(logging.WARNING)
    plan = QUICK if options.quick else FULL
    if options.recall_sizes:
        plan = Plan(**{**asdict(plan), "recall_sizes": tuple(int(size) for size in options.recall_sizes.split(","))})
    if options.sdk_clients:
        plan = Plan(**{**asdict(plan), "http_client": "sdk"})
    began, when, load_at_start = time.perf_counter(), datetime.datetime.now(datetime.UTC), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="armarius-compare-") as scratch:
        bench = Bench(plan, Path(scratch), options.reinstall)
        rows, failures = asyncio.run(run_sections(bench, options.only))
        found = versions(bench)
    seconds = time.perf_counter() - began
    print()
    print(f"Armarius compared ({'quick' if options.quick else 'full'} run, {seconds:.0f} s, {when:%Y-%m-%d}); "
          "A/B below 1: A (Armarius) is faster or cheaper")
    print_table(rows)
    for number, failure in failures.items():
        print(f"section {number} failed: {failure}")
    for note in bench.notes:
        print(f"note: {note}")
    print("versions: " + ", ".join(f"{name} {version}" for name, version in found.items()))
    host = machine(load_at_start)
    print(f"machine: {host['cpus']} CPUs ({host['cpu']}), {host['memory_gib']} GiB, Linux {host['kernel']}; load "
          f"average (1 min) {host['load_average_at_start'][0]:.1f} at the start, {host['load_average_at_end'][0]:.1f} "
          "at the end")
    document = {"date": f"{when:%Y-%m-%d}", "started": when.isoformat(timespec="seconds"), "seconds": round(seconds),
                "mode": "quick" if options.quick else "full", "sections": options.only, "plan": asdict(plan),
                "machine": host, "versions": found, "notes": bench.notes, "failures": failures,
                "rows": [asdict(row) | {"ratio": row.ratio} for row in rows]}
    path = options.output or results_path(options.quick, options.only, when)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"results: {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
