"""What a research session adds to a query, on SQLite and PostgreSQL stores.

For a source query (`source.read` of a git repository) and a database query (`database.rows` of a
SQLite table), the same query runs alternately through the research service alone
(`ResearchService.answer`: run and build the capture) and through a session
(`SessionService.query`: reserve, run, mirror the capture file, commit capture row, evidence
record, budget and audit event), in alternating blocks of 50 calls. Each call reads a different
range, so every answer is a new capture. Prints round trips per second of both paths and their ratio
(session over alone), p50 of both, and what the session adds at p50 (goal: at most 1 ms on SQLite, 2 ms on PostgreSQL).

Every new capture is a new file in the session's folder, so what the session adds includes what
creating a file costs where the data folder is: the bench puts it in a new folder under ``--folder``
(default: the temporary folder, TMPDIR) and prints what creating an empty file there took just
before. On the 2-core VM of docs/benchmarks.md that moved between 0.02 and 0.8 ms from one folder
and one minute to the next, on the same disk.

    .venv/bin/python bench/sessions.py [--calls 400] [--engines sqlite,postgresql] [--folder DIR]
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from databases import engine_settings, percentile, postgres_available

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role

BY = "operator:bench"
LINES = 2000


def build_sources(folder: Path) -> Path:
    """A repository with one long file and a SQLite database with one table; the research configuration."""
    repo = folder / "repo"
    repo.mkdir()
    (repo / "notes.txt").write_text("".join(f"line {number}: some text of the project\n" for number in range(LINES)))
    environ = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid", "GIT_COMMITTER_NAME": "b",
               "GIT_COMMITTER_EMAIL": "b@example.invalid", "PATH": "/usr/bin:/bin"}
    for command in (["init", "-q"], ["add", "notes.txt"], ["commit", "-q", "-m", "bench"]):
        subprocess.run(["git", "-C", str(repo), *command], check=True, env=environ)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    with sqlite3.connect(folder / "world.sqlite") as connection:
        connection.execute("CREATE TABLE item (entry INTEGER PRIMARY KEY, name TEXT NOT NULL, price INTEGER)")
        connection.executemany("INSERT INTO item VALUES (?, ?, ?)",
                               [(number, f"item {number}", number * 7) for number in range(10_000)])
    config = folder / "research.toml"
    config.write_text(
        f'[[sources]]\nname = "app"\nrepository = "{repo}"\nurl = "https://git.example.invalid/app.git"\n'
        f'commit = "{commit}"\n\n'
        f'[[databases]]\nname = "world"\ndialect = "sqlite"\npath = "{folder / "world.sqlite"}"\n'
        'snapshot = "bench-1"\ntables = ["item"]\n'
    )
    return config


def source_query(index: int) -> dict[str, Any]:
    start = 1 + index % (LINES - 10)
    return {"kind": "source.read", "path": "notes.txt", "start_line": start, "end_line": start + 4}


def database_query(index: int) -> dict[str, Any]:
    return {"kind": "database.rows", "table": "item", "columns": ["entry", "name", "price"],
            "filters": [{"column": "entry", "op": "ge", "value": index % 9_000}], "order_by": [
                {"column": "entry", "direction": "asc"}], "limit": 5}


def alternate(calls: int, alone: Callable[[int], Any], in_session: Callable[[int], Any], block: int = 50
              ) -> tuple[list[float], list[float]]:
    """Latencies of both paths, in alternating blocks so that both see the same machine (call by call
    alternation would measure the switching itself: caches, and a database connection gone idle)."""
    timings: tuple[list[float], list[float]] = ([], [])
    for start in range(-block, calls, block):
        for path, call in enumerate((alone, in_session)):
            for index in range(start, min(start + block, calls)):
                started = time.perf_counter()
                call(10_000 * path + index + block)
                if index >= 0:
                    timings[path].append(time.perf_counter() - started)
    return timings


def measure(app: Armarius, agent: Actor, make: Callable[[int], dict[str, Any]], calls: int
            ) -> tuple[list[float], list[float]]:
    """Latencies of one query kind alone and through a session of its own."""
    research = app.research
    assert research is not None
    session = app.sessions.open(agent, "bench", budget=app.sessions.limits.max_budget)["session"]
    return alternate(min(calls, app.sessions.limits.max_budget - 50), lambda index: research.answer(make(index)),
                     lambda index: app.sessions.query(agent, session, make(index)))


def file_creation_ms(folder: Path, files: int = 200) -> float:
    """p50 of creating (and then removing) an empty file in ``folder``, in milliseconds."""
    timings = []
    for number in range(files):
        path = folder / f"probe-{number}"
        started = time.perf_counter()
        path.touch(exist_ok=False)
        timings.append(time.perf_counter() - started)
        path.unlink()
    return percentile(timings, 0.5) * 1000


def report(engine: str, name: str, alone: list[float], in_session: list[float]) -> None:
    a50, s50 = percentile(alone, 0.5), percentile(in_session, 0.5)
    alone_rate, session_rate = len(alone) / sum(alone), len(in_session) / sum(in_session)
    print(f"{engine:<11} {name:<14} {alone_rate:>8.0f} {session_rate:>10.0f} {session_rate / alone_rate:>6.2f}x "
          f"{a50 * 1000:>9.2f}ms {s50 * 1000:>10.2f}ms {(s50 - a50) * 1000:>13.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400,
                        help="per query kind (at most the maximum budget less the 50 warm-up calls)")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--folder", type=Path, help="where the data folders go (default: TMPDIR)")
    options = parser.parse_args()
    engines = [e for e in options.engines.split(",") if e == "sqlite" or postgres_available()]
    print(f"{'engine':<11} {'query':<14} {'alone/s':>8} {'session/s':>10} {'ratio':>7} {'alone p50':>10} "
          f"{'session p50':>12} {'added p50 ms':>13}")
    for engine in engines:
        with (tempfile.TemporaryDirectory(dir=options.folder) as folder,
              engine_settings(engine, Path(folder) / "data") as settings):
            config = build_sources(Path(folder))
            print(f"{engine}: creating a file in {folder} took {file_creation_ms(Path(folder)):.3f} ms (p50; every new "
                  "capture is one)")
            app = open_app(replace(settings, research_config=config))
            try:
                directory = app.directory
                directory.create_workspace("bench", by=BY)
                directory.add_principal("bench-agent", Kind.AGENT, workspace="bench", role=Role.EDITOR, by=BY)
                agent = directory.authenticate_token(directory.issue_token("bench-agent", workspace="bench",
                                                                           by=BY).token)
                for name, make in (("source.read", source_query), ("database.rows", database_query)):
                    report(engine, name, *measure(app, agent, make, options.calls))
            finally:
                app.close()


if __name__ == "__main__":
    main()
