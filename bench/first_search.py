"""A workspace's first search by meaning in a process: every vector of the workspace read from the store and
taken into the process's matrices (armarius.memory.vectors), as after a server starts. On SQLite a recall
runs on the event loop, so the other requests of that worker wait meanwhile.

Per size, a store of that many entries with their vectors (bench/corpus.py's documents, embedded as
`armarius memory reindex` embeds them); then, in a fresh process each run, the embedding model loaded first
(that has its own cost, see docs/benchmarks.md) and one search by meaning timed: wall and CPU.

    .venv/bin/python bench/first_search.py [--sizes 20000,100000] [--engine sqlite|postgresql] [--runs 5]
        [--before SRC]

``--before SRC``: each run also measures the code of another checkout's ``src`` folder on the same store,
the two alternated (a ``git worktree`` of an earlier commit), one line each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus import Corpus
from databases import engine_settings
from memory import AGENT, WORKSPACE, embed_loaded, load

from armarius.app import open_app
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings, one_blas_thread

QUERY = "where do the release builds run before production"


def measure(data_dir: str, database_url: str | None) -> None:
    """In this fresh process: the model loaded, then the first search by meaning timed (printed as JSON)."""
    one_blas_thread()
    app = open_app(Settings(data_dir=Path(data_dir), database_url=database_url))
    try:
        index = app.memory.vectors
        assert index is not None, "recall by meaning is off"
        index.embedder.embed(["the model loaded before the timing"])
        workspace = app.directory.workspace(WORKSPACE).id
        with app.database.transaction(workspace_id=workspace) as tx:
            wall, cpu = time.perf_counter(), time.process_time()
            found = index.nearest(tx, QUERY, 10)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(json.dumps({"wall": wall, "cpu": cpu, "found": len(found)}))
    finally:
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20000,100000")
    parser.add_argument("--engine", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", metavar="SRC", help="also the code of this src folder, alternated")
    parser.add_argument("--measure", nargs=2, metavar=("DATA_DIR", "DATABASE_URL"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.measure:
        measure(options.measure[0], options.measure[1] or None)
        return
    corpus = Corpus(seed=1)
    print(f"{'entries':>9}  {'engine':<10}  {'code':<10}  {'wall p50 (min-max) ms':>24}  {'CPU p50 ms':>10}")
    for size in sorted(int(size) for size in options.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="armarius-first-search-") as folder, \
                engine_settings(options.engine, Path(folder) / "data") as settings:
            app = open_app(settings)
            try:
                workspace = app.directory.create_workspace(WORKSPACE, by="operator:bench")
                app.directory.add_principal(AGENT, Kind.AGENT, workspace=WORKSPACE, role=Role.EDITOR,
                                            by="operator:bench")
                load(app, workspace.id, corpus.documents(0, size))
                embed_loaded(app, workspace.id)
            finally:
                app.close()
            versions = {"this code": dict(os.environ)}
            if options.before:
                versions["--before"] = {**os.environ, "PYTHONPATH": options.before}
            runs: dict[str, list[dict[str, float]]] = {version: [] for version in versions}
            for turn in range(options.runs):
                for version in list(versions)[turn % 2:] + list(versions)[:turn % 2]:
                    answer = subprocess.run([sys.executable, __file__, "--measure", str(settings.data_dir),
                                             settings.database_url or ""], env=versions[version], check=True,
                                            capture_output=True, text=True)
                    runs[version].append(json.loads(answer.stdout.strip().splitlines()[-1]))
            for version, measured in runs.items():
                walls = [run["wall"] * 1000 for run in measured]
                print(f"{size:>9,}  {options.engine:<10}  {version:<10}  {statistics.median(walls):>8.0f} "
                      f"({min(walls):.0f}-{max(walls):.0f}){'':>8}  "
                      f"{statistics.median(run['cpu'] * 1000 for run in measured):>10.0f}", flush=True)

if __name__ == "__main__":
    main()
