"""Vector search: the exact scan against the two-step search recall uses above EXACT_UP_TO vectors.

The labelled set of bench/recall_quality.py (300 entries, 300 paraphrased questions) is hidden among
generated entries (bench/corpus.py) up to each size; every question is searched both ways in the same
in-process index. Prints, per size: how often the right entry is in the top 1/5/10 each way, how many
of the exact top 10 the two-step search also returns, and the p50 of a search (query embedding left
out: both ways embed it alike). ``--steps`` compares other settings of the two steps.

    .venv/bin/python bench/vector_search.py [--sizes 25000,100000] [--steps 64:2000,128:1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
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


if __name__ == "__main__":
    main()
