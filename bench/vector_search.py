"""Vector search: the exact scan against the two-step search recall uses above EXACT_UP_TO vectors.

The labelled set of bench/recall_quality.py (300 entries, 300 paraphrased questions) is hidden among
generated entries (bench/corpus.py) up to each size; every question is searched both ways in the same
in-process index. Prints, per size: how often the right entry is in the top 1/5/10 each way, how many
of the exact top 10 the two-step search also returns, and the p50 of a search (query embedding left
out: both ways embed it alike). ``--steps`` compares other settings of the two steps.

The same vectors are also searched in SQLite by the sqlite-vec extension, the vector table issue 18 asked
to measure next to the quantized vectors in a BLOB column that Armarius keeps: a ``vec0`` table of the same
int8 vectors, searched by its brute-force k-nearest query (L2 distance, which ranks vectors of length 1 as
the cosine does, give or take the rounding), with its size on disk next to a table of the same vectors as
BLOBs. It is loaded through apsw, whose SQLite may load extensions (``pip install -e '.[bench]'``).

``--pgvector URL``: the same vectors in PostgreSQL's pgvector extension too, on the server at URL (a login
that may create a database and the extension there; Debian 12 packages no pgvector, see
docs/benchmarks.md for a server that has it). They are stored as ``halfvec(256)`` (the smallest column
that holds them), searched by an HNSW index of each ``--hnsw M:EF_CONSTRUCTION`` setting with cosine
distance, at each ``hnsw.ef_search`` of ``--ef-search``; sizes are the table's and the index's on disk.

    .venv/bin/python bench/vector_search.py [--sizes 25000,100000] [--steps 64:2000,128:1000]
        [--pgvector postgresql://postgres@127.0.0.1:54329/postgres] [--hnsw 16:64,32:200] [--ef-search 40,200]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from corpus import Corpus
from recall_quality import CUTS, SET

from armarius.config import one_blas_thread
from armarius.memory import vectors
from armarius.memory.embeddings import WordLlamaEmbedder, dequantize, entry_text, quantize


def main() -> None:
    one_blas_thread()  # numpy as the server runs it (before numpy loads)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="25000,100000")
    parser.add_argument("--steps", default=f"{vectors.COARSE_DIMENSIONS}:{vectors.CANDIDATES}",
                        help="two-step settings to compare, DIMENSIONS:CANDIDATES,... (default: recall's)")
    parser.add_argument("--pgvector", metavar="URL", help="also measure pgvector on this PostgreSQL server")
    parser.add_argument("--hnsw", default="16:64,32:200", help="pgvector's HNSW settings, M:EF_CONSTRUCTION,...")
    parser.add_argument("--ef-search", default="40,200", help="pgvector's hnsw.ef_search values")
    options = parser.parse_args()
    steps = [tuple(int(part) for part in step.split(":")) for step in options.steps.split(",")]
    sizes = sorted(int(size) for size in options.sizes.split(","))
    labelled = json.loads(SET.read_text(encoding="utf-8"))
    embedder, corpus = WordLlamaEmbedder(), Corpus(seed=1)
    texts = [entry_text(entry["title"], entry["body"]) for entry in labelled["entries"]]
    slugs = [entry["slug"] for entry in labelled["entries"]]
    started = time.perf_counter()
    for document in corpus.documents(0, sizes[-1] - len(texts)):
        texts.append(entry_text(document.title, document.body))
    blobs = [quantize(vector) for vector in embedder.embed(texts)]
    print(f"{len(texts):,} texts embedded in {time.perf_counter() - started:.1f} s; recall takes two steps above "
          f"{vectors.EXACT_UP_TO:,} vectors: {vectors.COARSE_DIMENSIONS} dimensions, then {vectors.CANDIDATES} "
          "candidates in full")
    questions = [(embedder.embed([question["question"]])[0], slugs.index(question["answer"]))
                 for question in labelled["questions"]]
    header = "".join(f"{'R@' + str(cut):>7}" for cut in CUTS)
    print(f"{'vectors':>9}  {'way':<18}{header}  {'top-10 kept':>11}  {'p50 ms':>7}")
    for size in sizes:
        exact: dict[str, Any] = {}
        for dimensions, candidates in steps:
            vectors.COARSE_DIMENSIONS, vectors.CANDIDATES = dimensions, candidates
            space = vectors._Space()
            space.add([{"id": at, "seq": at + 1, "vector": blob} for at, blob in enumerate(blobs[:size])])
            if not exact:
                exact = run(space, questions, exact_up_to=size)
                show(size, "exact", exact, "", len(questions))
            two = run(space, questions, exact_up_to=0)
            kept = statistics.mean(len(set(a) & set(b)) / len(a) for a, b in zip(exact["top"], two["top"], strict=True))
            show(size, f"{dimensions}:{candidates}", two, f"{kept:.1%}", len(questions))
        in_sqlite = run_sqlite_vec(blobs[:size], questions)
        if in_sqlite is not None:
            kept = statistics.mean(len(set(a) & set(b)) / len(a)
                                   for a, b in zip(exact["top"], in_sqlite["top"], strict=True))
            show(size, "sqlite-vec", in_sqlite, f"{kept:.1%}", len(questions))
            print(f"{'':>9}  on disk: sqlite-vec {in_sqlite['vec_mb']:.1f} MB, the same vectors as BLOBs "
                  f"{in_sqlite['blob_mb']:.1f} MB", flush=True)
        if options.pgvector:
            hnsw = [tuple(int(part) for part in setting.split(":")) for setting in options.hnsw.split(",")]
            searches = [int(ef) for ef in options.ef_search.split(",")]
            for (m, construction), ef, figures in run_pgvector(options.pgvector, blobs[:size], questions, hnsw,
                                                               searches):
                kept = statistics.mean(len(set(a) & set(b)) / len(a)
                                       for a, b in zip(exact["top"], figures["top"], strict=True))
                show(size, f"hnsw {m}:{construction} ef {ef}", figures, f"{kept:.1%}", len(questions))
                if ef == searches[-1]:
                    print(f"{'':>9}  on disk: table {figures['table_mb']:.1f} MB, HNSW index "
                          f"{figures['index_mb']:.1f} MB (built in {figures['build_s']:.0f} s)", flush=True)


def show(size: int, way: str, figures: dict[str, Any], agreement: str, questions: int) -> None:
    cells = "".join(f"{figures['found'][cut] / questions:>7.1%}" for cut in CUTS)
    print(f"{size:>9,}  {way:<18}{cells}  {agreement:>11}  {figures['p50'] * 1000:>7.2f}", flush=True)


def searched(questions: list[tuple[Any, int]], search: Any) -> dict[str, Any]:
    """How often each question's entry is in the top 1/5/10 of ``search(vector)``, its top 10, the p50."""
    found, top, times = dict.fromkeys(CUTS, 0), [], []
    for vector, answer in questions:
        began = time.perf_counter()
        hits = search(vector)
        times.append(time.perf_counter() - began)
        top.append(hits)
        for cut in CUTS:
            found[cut] += answer in hits[:cut]
    return {"found": found, "top": top, "p50": statistics.median(times)}


def run(space: vectors._Space, questions: list[tuple[Any, int]], *, exact_up_to: int) -> dict[str, Any]:
    vectors.EXACT_UP_TO = exact_up_to
    return searched(questions, lambda vector: [entry_id for entry_id, _ in space.nearest(vector, 10)])


def run_sqlite_vec(blobs: list[bytes], questions: list[tuple[Any, int]]) -> dict[str, Any] | None:
    """The questions searched in a sqlite-vec table of ``blobs`` (None: sqlite-vec is not installed). The
    extension is loaded through apsw and its own SQLite: the standard library's sqlite3 may be built without
    extension loading, as this project's Python 3.11 is, which is one reason Armarius needs no extension."""
    try:
        import apsw
        import sqlite_vec
    except ImportError:
        print("sqlite-vec or apsw is not installed: pip install -e '.[bench]'")
        return None
    with tempfile.TemporaryDirectory() as folder:
        sizes = {}
        for name, create, insert in (
                ("vec", "CREATE VIRTUAL TABLE v USING vec0(embedding int8[256])",
                 "INSERT INTO v (rowid, embedding) VALUES (?, vec_int8(?))"),
                ("blob", "CREATE TABLE v (id INTEGER PRIMARY KEY, vector BLOB NOT NULL)",
                 "INSERT INTO v VALUES (?, ?)")):
            path = Path(folder) / f"{name}.sqlite"
            connection = apsw.Connection(str(path))
            connection.enable_load_extension(True)
            connection.load_extension(sqlite_vec.loadable_path())
            with connection:
                connection.execute(create)
                connection.executemany(insert, list(enumerate(blobs)))
            sizes[name] = path.stat().st_size / 1e6
            if name == "vec":
                searcher = connection
            else:
                connection.close()
        figures = searched(questions, lambda vector: [row[0] for row in searcher.execute(
            "SELECT rowid FROM v WHERE embedding MATCH vec_int8(?) AND k = 10 ORDER BY distance", (quantize(vector),))])
        searcher.close()
    return {**figures, "vec_mb": sizes["vec"], "blob_mb": sizes["blob"]}


def _literal(vector: Any) -> str:
    return "[" + ",".join(f"{value:.5f}" for value in vector) + "]"


@contextmanager
def scratch_database(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A new database on the server at ``url`` with the vector extension, dropped afterwards."""
    name = f"armarius_bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            with psycopg.connect(url, dbname=name, autocommit=True) as connection:
                connection.execute("CREATE EXTENSION vector")
                yield connection
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_pgvector(url: str, blobs: list[bytes], questions: list[tuple[Any, int]], hnsw: list[tuple[int, ...]],
                 searches: list[int]) -> Iterator[tuple[tuple[int, ...], int, dict[str, Any]]]:
    """The questions searched through pgvector's HNSW index of ``blobs`` (as halfvec), per HNSW setting and
    ef_search; each query a prepared statement, as a server would run it."""
    with scratch_database(url) as connection:
        connection.execute("CREATE TABLE v (id bigint PRIMARY KEY, embedding halfvec(256) NOT NULL)")
        with connection.cursor().copy("COPY v (id, embedding) FROM STDIN") as copy:
            for number, vector in enumerate(dequantize(blobs)):
                copy.write_row((number, _literal(vector)))
        connection.execute("SET maintenance_work_mem = '1GB'")
        for m, construction in hnsw:
            connection.execute("DROP INDEX IF EXISTS v_hnsw")
            began = time.perf_counter()
            connection.execute(f"CREATE INDEX v_hnsw ON v USING hnsw (embedding halfvec_cosine_ops) "
                               f"WITH (m = {m}, ef_construction = {construction})")
            build = time.perf_counter() - began
            connection.execute("VACUUM ANALYZE v")
            table, index = connection.execute("SELECT pg_table_size('v'), pg_indexes_size('v') - "
                                              "pg_relation_size('v_pkey')").fetchone() or (0, 0)
            for ef in searches:
                connection.execute(f"SET hnsw.ef_search = {ef}")
                figures = searched(questions, lambda vector: [row[0] for row in connection.execute(
                    "SELECT id FROM v ORDER BY embedding <=> %s::halfvec LIMIT 10", (_literal(vector),),
                    prepare=True).fetchall()])
                plan = connection.execute("EXPLAIN SELECT id FROM v ORDER BY embedding <=> %s::halfvec LIMIT 10",
                                          (_literal(questions[0][0]),)).fetchall()
                if not any("v_hnsw" in row[0] for row in plan):
                    raise SystemExit("pgvector: the search does not use the HNSW index")
                yield (m, construction), ef, {**figures, "table_mb": table / 1e6, "index_mb": index / 1e6,
                                              "build_s": build}


if __name__ == "__main__":
    main()
