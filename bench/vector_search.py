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
(PostgreSQL: Debian 12 packages no pgvector, so it is not measured.)

    .venv/bin/python bench/vector_search.py [--sizes 25000,100000] [--steps 64:2000,128:1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from corpus import Corpus
from recall_quality import CUTS, SET

from armarius.config import one_blas_thread
from armarius.memory import vectors
from armarius.memory.embeddings import WordLlamaEmbedder, entry_text, quantize


def main() -> None:
    one_blas_thread()  # numpy as the server runs it (before numpy loads)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="25000,100000")
    parser.add_argument("--steps", default=f"{vectors.COARSE_DIMENSIONS}:{vectors.CANDIDATES}",
                        help="two-step settings to compare, DIMENSIONS:CANDIDATES,... (default: recall's)")
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
    print(f"{'vectors':>9}  {'way':<10}{header}  {'top-10 kept':>11}  {'p50 ms':>7}")
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


def show(size: int, way: str, figures: dict[str, Any], agreement: str, questions: int) -> None:
    cells = "".join(f"{figures['found'][cut] / questions:>7.1%}" for cut in CUTS)
    print(f"{size:>9,}  {way:<10}{cells}  {agreement:>11}  {figures['p50'] * 1000:>7.2f}", flush=True)


def run(space: vectors._Space, questions: list[tuple[Any, int]], *, exact_up_to: int) -> dict[str, Any]:
    vectors.EXACT_UP_TO = exact_up_to
    found, top, times = dict.fromkeys(CUTS, 0), [], []
    for vector, answer in questions:
        began = time.perf_counter()
        hits = [entry_id for entry_id, _ in space.nearest(vector, 10)]
        times.append(time.perf_counter() - began)
        top.append(hits)
        for cut in CUTS:
            found[cut] += answer in hits[:cut]
    return {"found": found, "top": top, "p50": statistics.median(times)}


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
        found, top, times = dict.fromkeys(CUTS, 0), [], []
        for vector, answer in questions:
            query = quantize(vector)
            began = time.perf_counter()
            hits = [row[0] for row in searcher.execute(
                "SELECT rowid FROM v WHERE embedding MATCH vec_int8(?) AND k = 10 ORDER BY distance", (query,))]
            times.append(time.perf_counter() - began)
            top.append(hits)
            for cut in CUTS:
                found[cut] += answer in hits[:cut]
        searcher.close()
    return {"found": found, "top": top, "p50": statistics.median(times), "vec_mb": sizes["vec"],
            "blob_mb": sizes["blob"]}


if __name__ == "__main__":
    main()
