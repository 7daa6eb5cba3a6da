"""Recall over entries at the body limit, next to recall over ordinary entries, on SQLite and PostgreSQL.

One workspace holds ``--ordinary`` entries of the benchmark corpus (bench/corpus.py, about 1.2 KB
each) and ``--big`` entries at the body limit (``memory.body_max_bytes``, 64 KiB by default):

* ``zz`` entries: the body is ``zz zz zz …`` up to the limit, about 21,800 hits of the query word;
* ``prose`` entries: corpus text up to the limit with the query word once, at its end;
* planted ``accented`` entries (what a hostile agent may write, to be recalled with a query word of 994
  letters): one word of ``à`` up to the limit and one decomposed accent at its end, so that the body is
  not in composed form (NFC);
* planted ``runs`` entries: ``"a" * 3000`` and the query word (``"a" * 994``) in turn, up to the limit:
  the query word is found inside the runs at every place, and as a whole word once in every map piece.

Each case is one recall (``app.memory.recall``, limit 10, through the service layer) timed
``--calls`` times after two warm-up calls; the figure is its p50 (and p95). The cases run in
rounds, one call of each per round, so that they all meet the machine equally loaded. Cases:

* ordinary, all words: the number of a name fragment (``0042`` of ``entity-0042``), a word in
  exactly ten ordinary entries, so every query has 10 results with snippets, as the limit cases do;
* ordinary, any word: that word and a word that occurs nowhere (nothing has both, so recall falls
  back to any word and finds the same 10);
* limit ``zz``, all words / any word: ``zz``, and ``zz`` with a word that occurs nowhere;
* limit prose, all words / any word: the same with the prose entries' word;
* planted accented, any word: the accented entries' title word and ``"a" * 994`` (no entry holds both, so
  recall falls back to any word and finds the accented entries by their titles);
* planted runs, all words: the runs entries' title word and ``"a" * 994``.

The verdict compares each limit case with the ordinary case of the same kind (the goal: within
2x). A case stops at its count or after ``--budget`` seconds of calls, whichever comes first, so
the old slow path shows as a p50 over fewer calls (its warm-up calls, if no more) instead of
stalling the run.

The benchmark makes its own temporary SQLite folder and PostgreSQL database (admin URL from
ARMARIUS_BENCH_PG_URL) and drops them afterwards. It prints figures; it asserts nothing.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/recall_pathological.py [--engines sqlite,postgresql] [--big 10] [--calls 31]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from corpus import Corpus
from databases import PG_ADMIN_URL, postgres_settings, sqlite_settings
from memory import load, percentile, prepare

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.memory.service import RememberRequest

OPERATOR = "operator:bench"
WORKSPACE, AGENT = "bench", "bench-agent"
RECALL_LIMIT = 10
HEAVY_WORD, PROSE_WORD, ABSENT_WORD = "zz", "quasimodo", "nowhereword"
#: The planted entries' title words, and the query word the attack paired them with.
ACCENTED_WORD, RUNS_WORD, LONG_WORD = "xqaccented", "xqruns", "a" * 994
WARMUP_CALLS = 2


@dataclass
class Case:
    name: str
    kind: str  # "ordinary" or "limit"
    match: str  # "all" or "any"
    queries: list[str]
    calls: list[float] = field(default_factory=list)
    results: int = 0
    answered: str = ""

    @property
    def latencies(self) -> list[float]:
        """The timed calls: all but the warm-up calls, unless the case stopped before it got past them."""
        return self.calls[WARMUP_CALLS:] or self.calls

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 0.5)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f}"


def limit_bodies(limit: int, corpus: Corpus, count: int) -> tuple[list[str], list[str]]:
    """``count`` bodies of ``zz zz …`` and ``count`` of corpus prose ending in PROSE_WORD, each at ``limit`` bytes."""
    heavy = (f"{HEAVY_WORD} " * (limit // (len(HEAVY_WORD) + 1) + 1))[:limit].rstrip()
    prose = []
    for number in range(count):
        text, index = "", 1_000_000 + number * 100
        while len(text.encode("utf-8")) < limit:
            text += corpus.document(index).body + "\n\n"
            index += 1
        ending = f" {PROSE_WORD}."
        prose.append(text.encode("utf-8")[:limit - len(ending)].decode("utf-8", "ignore").rstrip() + ending)
    return [heavy] * count, prose


def planted_bodies(limit: int) -> tuple[str, str]:
    """The accented body (one word of 'à' and a decomposed accent: not NFC) and the runs body, each at ``limit``
    bytes or just under."""
    accented = "\u00e0" * ((limit - 4) // 2) + " e\u0301"
    runs = ("a" * 3000 + " " + LONG_WORD + " ") * (limit // 3996 + 1)
    return accented, runs[:limit].rstrip()


def cases(corpus: Corpus, ordinary: int, calls: int) -> list[Case]:
    count = calls + WARMUP_CALLS
    # The number of a name fragment ("entity-0042"): a word in exactly ten ordinary entries.
    numbers = [query.removeprefix("entity-") for query in corpus.queries("fragment", count, ordinary)]
    return [
        Case("ordinary, all words", "ordinary", "all", numbers),
        Case("ordinary, any word", "ordinary", "any", [f"{number} {ABSENT_WORD}" for number in numbers]),
        Case(f"limit {HEAVY_WORD!r}, all words", "limit", "all", [HEAVY_WORD] * count),
        Case(f"limit {HEAVY_WORD!r}, any word", "limit", "any", [f"{HEAVY_WORD} {ABSENT_WORD}"] * count),
        Case("limit prose, all words", "limit", "all", [PROSE_WORD] * count),
        Case("limit prose, any word", "limit", "any", [f"{PROSE_WORD} {ABSENT_WORD}"] * count),
        Case("planted accented, any word", "limit", "any", [f"{ACCENTED_WORD} {LONG_WORD}"] * count),
        Case("planted runs, all words", "limit", "all", [f"{RUNS_WORD} {LONG_WORD}"] * count),
    ]


def measure(app: Armarius, actor: Actor, measured: list[Case], budget: float) -> None:
    """Rounds of one call of each case, so that every case meets the machine as loaded as the others.
    A case stops after ``budget`` seconds of calls in all."""
    spent = [0.0] * len(measured)
    for number in range(len(measured[0].queries)):
        for index, case in enumerate(measured):
            if spent[index] >= budget:
                continue
            begun = time.perf_counter()
            answer = app.memory.recall(actor, case.queries[number], limit=RECALL_LIMIT)
            elapsed = time.perf_counter() - begun
            spent[index] += elapsed
            case.calls.append(elapsed)
            case.results, case.answered = len(answer["results"]), answer["match"]


def run_engine(engine: str, settings: Settings, corpus: Corpus, options: Options) -> list[Case]:
    app = open_app(settings)
    try:
        workspace = app.directory.create_workspace(WORKSPACE, by=OPERATOR)
        app.directory.add_principal(AGENT, Kind.AGENT, workspace=WORKSPACE, role=Role.EDITOR, by=OPERATOR)
        token = app.directory.issue_token(AGENT, workspace=WORKSPACE, label="bench", by=OPERATOR).token
        actor = app.directory.authenticate_token(token)
        load(app, workspace.id, corpus.documents(0, options.ordinary))
        heavy, prose = limit_bodies(app.settings.memory_body_max_bytes, corpus, options.big)
        accented, runs = planted_bodies(app.settings.memory_body_max_bytes)
        started = time.perf_counter()
        written = [("zz", "", body) for body in heavy] + [("prose", "", body) for body in prose]
        written += [("accented", ACCENTED_WORD, accented)] * options.big + [("runs", RUNS_WORD, runs)] * options.big
        for number, (kind, title_word, body) in enumerate(written):
            app.memory.remember(actor, RememberRequest(
                slug=f"limit/{kind}-{number:02d}", title=f"Entry at the body limit {number} {title_word}".rstrip(),
                body=body, confirm_distinct=True, reason="benchmark: entries at the body limit"))
        print(f"  {engine}: {options.ordinary:,} ordinary entries, {len(heavy)} + {len(prose)} at the body limit "
              f"({len(heavy[0].encode()):,} bytes), {options.big} + {options.big} planted; remembered in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        prepare(settings)
        measured = cases(corpus, options.ordinary, options.calls)
        measure(app, actor, measured, options.budget)
        for case in measured:
            print(f"  {engine}: {case.name}: p50 {ms(case.p50)} ms over {len(case.latencies)} calls", flush=True)
        return measured
    finally:
        app.close()


@dataclass(frozen=True)
class Options:
    engines: list[str]
    ordinary: int
    big: int
    calls: int
    budget: float
    seed: int


def report(results: dict[str, list[Case]]) -> None:
    print(f"recall top-{RECALL_LIMIT} through the service layer, ms; x: p50 over the ordinary case of the same "
          "match (goal: <= 2x)")
    print(f"{'engine':<11}{'case':<30}{'n':>4}{'p50':>10}{'p95':>10}{'x':>8}{'results':>9}  match")
    for engine, measured in results.items():
        ordinary = {case.match: case.p50 for case in measured if case.kind == "ordinary"}
        for case in measured:
            ratio = case.p50 / ordinary[case.match]
            verdict = "" if case.kind == "ordinary" else ("  met" if ratio <= 2 else "  MISSED")
            print(f"{engine:<11}{case.name:<30}{len(case.latencies):>4}{ms(case.p50):>10}"
                  f"{ms(percentile(case.latencies, 0.95)):>10}{ratio:>7.2f}x{case.results:>9}  {case.answered}"
                  f"{verdict}")


def parse_options() -> Options:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--engines", default="sqlite,postgresql", help="sqlite and/or postgresql")
    parser.add_argument("--ordinary", type=int, default=2000, help="ordinary corpus entries")
    parser.add_argument("--big", type=int, default=RECALL_LIMIT, help="entries at the body limit of each kind")
    parser.add_argument("--calls", type=int, default=31, help="timed recalls per case")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds after which a case stops early")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    engines = [engine.strip() for engine in args.engines.split(",")]
    if not set(engines) <= {"sqlite", "postgresql"}:
        parser.error("--engines takes sqlite and/or postgresql")
    if min(args.ordinary, args.big, args.calls) < 1:
        parser.error("counts must be at least 1")
    return Options(engines, args.ordinary, args.big, args.calls, args.budget, args.seed)


def main() -> None:
    options = parse_options()
    began = time.perf_counter()
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, cpus {os.cpu_count()}")
    corpus = Corpus(options.seed)
    absent = {HEAVY_WORD, PROSE_WORD, ABSENT_WORD, ACCENTED_WORD, RUNS_WORD} & set(corpus.vocabulary.words)
    if absent:
        raise SystemExit(f"the corpus vocabulary holds {sorted(absent)}; the cases need words it does not hold")
    runners: dict[str, Callable[[Path], AbstractContextManager[Settings]]] = {
        "sqlite": sqlite_settings, "postgresql": postgres_settings,
    }
    results: dict[str, list[Case]] = {}
    with tempfile.TemporaryDirectory(prefix="armarius-bench-") as temporary:
        for engine in options.engines:
            try:
                with runners[engine](Path(temporary) / engine) as settings:
                    results[engine] = run_engine(engine, settings, corpus, options)
            except psycopg.OperationalError as error:
                print(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {error}; skipping it")
    print()
    report(results)
    print()
    print(f"whole run: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
