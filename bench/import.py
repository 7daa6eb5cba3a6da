"""Import throughput: entries per second from a knowledge graph and from a Markdown folder, per engine.

Builds a JSONL graph in the reference memory server's format (N entities with five observations
each, and N relations) and a folder of N Markdown notes with front matter, tags and a wikilink in
one of five, from the benchmark corpus; then imports each into an empty workspace (reading,
checking and writing in one transaction, as `armarius import` does), and times a re-run that finds
everything unchanged. Also times `export` of the imported workspace to JSONL and to a folder.

    .venv/bin/python bench/import.py [--entries 10000] [--engines sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corpus import Corpus
from databases import engine_settings, postgres_available

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.store.schema import latest_version
from armarius.transfer.export import write_folder, write_jsonl
from armarius.transfer.graph import read_graph
from armarius.transfer.markdown import read_folder
from armarius.transfer.model import Plan
from armarius.transfer.service import ImportService

BY = "operator:bench"
PASSWORD = "bench password 1"  # noqa: S105 - a scratch store's principal


def build_graph(corpus: Corpus, count: int, path: Path) -> None:
    lines = []
    for document in corpus.documents(0, count):
        sentences = document.body.split(". ")
        lines.append(json.dumps({"type": "entity", "name": document.title + f" {document.index}",
                                 "entityType": document.tags[0], "observations": sentences[:5]}))
    for index in range(count):
        lines.append(json.dumps({"type": "relation", "from": corpus.document(index).title + f" {index}",
                                 "to": corpus.document((index * 7 + 1) % count).title + f" {(index * 7 + 1) % count}",
                                 "relationType": "relates_to"}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_folder(corpus: Corpus, count: int, folder: Path) -> None:
    for document in corpus.documents(0, count):
        note = folder / f"area {document.index % 20}" / f"{document.title} {document.index}.md"
        note.parent.mkdir(parents=True, exist_ok=True)
        link = f"\n\nSee [[{corpus.document(document.index // 2).title} {document.index // 2}]]." \
            if document.index % 5 == 0 else ""
        note.write_text(f"---\ntitle: {json.dumps(document.title)}\ntags: [{document.tags[0]}, notes]\n---\n\n"
                        f"{document.body}{link}\n", encoding="utf-8")


def human(app: Armarius, workspace: str) -> Actor:
    app.directory.create_workspace(workspace, by=BY)
    app.directory.add_principal(f"{workspace}-human", Kind.HUMAN, workspace=workspace, role=Role.EDITOR, by=BY,
                                password=PASSWORD)
    return app.directory.authenticate_password(f"{workspace}-human", PASSWORD, workspace=workspace)


def timed(action: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def run(engine: str, count: int, graph: Path, folder: Path) -> None:
    with tempfile.TemporaryDirectory() as data, engine_settings(engine, Path(data)) as settings:
        app = open_app(settings)
        try:
            service = ImportService(app.database, app.memory, app.memory.limits)
            for kind, read in (("graph", lambda: read_graph(graph)), ("markdown", lambda: read_folder(folder))):
                actor = human(app, kind)
                read_seconds, plan = timed(read)
                assert isinstance(plan, Plan)
                write_seconds, report = timed(lambda actor=actor, plan=plan: service.run(actor, plan))
                again_seconds, _ = timed(lambda actor=actor, plan=plan: service.run(actor, plan))
                total = read_seconds + write_seconds
                print(f"{engine:10s} {kind:8s} {count} entries: {count / total:8.0f} entries/s "
                      f"(read {read_seconds:5.2f} s, write {write_seconds:5.2f} s; "
                      f"re-run {again_seconds:5.2f} s, all unchanged)  {report['counts']}")  # type: ignore[index]
            space = app.directory.workspace("graph")
            version = latest_version(app.database.dialect)
            with tempfile.TemporaryDirectory() as out:
                seconds, _ = timed(lambda: write_jsonl(app.database, space, Path(out) / "x.jsonl",
                                                       schema_version=version))
                folder_seconds, _ = timed(lambda: write_folder(app.database, space, Path(out) / "notes",
                                                               schema_version=version))
            print(f"{engine:10s} export   {count} entries: JSONL {seconds:5.2f} s, "
                  f"Markdown folder {folder_seconds:5.2f} s")
        finally:
            app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--engines", default="sqlite,postgresql")
    options = parser.parse_args()
    corpus = Corpus()
    with tempfile.TemporaryDirectory() as sources:
        graph, folder = Path(sources) / "memory.jsonl", Path(sources) / "vault"
        build_graph(corpus, options.entries, graph)
        build_folder(corpus, options.entries, folder)
        for engine in options.engines.split(","):
            if engine == "postgresql" and not postgres_available():
                print("postgresql: not reachable, skipped")
                continue
            run(engine, options.entries, graph, folder)


if __name__ == "__main__":
    main()
