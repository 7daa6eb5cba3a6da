"""Archive repairs: prepare + choose + apply cycles per second, for entries and for evidence units, on SQLite
and PostgreSQL stores.

One cycle: an agent prepares a repair with two alternatives against the target's current revision (the
service reads the target, stores both alternatives beside the current content, and mirrors the receipt
file), then an administrator applies option 1 once the session is closed (opening and closing the session
are not timed): for an entry one transaction (the
curated revision and the receipt) and the receipt file; for an evidence unit the recorded choice, the
atomic file replace (with its fsyncs), the saved correction, the activation (indexing into the search
table) and a receipt file after each step. The same target is repaired cycle after cycle, so its history
grows as it would. Prints cycles per second and the p50/p95 of each half.

    .venv/bin/python bench/repairs.py [--cycles 300] [--engines sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from databases import engine_settings, percentile, postgres_available

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.memory.service import RememberRequest

BY = "operator:bench"
PASSWORD = "bench correct horse battery"  # noqa: S105  (a throwaway principal of a temporary store)
ENTRY, UNIT = "ops/staging-host", "incident/dns-outage"
#: About 200 words: the size of a typical entry or unit body.
BODY = " ".join(f"word{index % 97} of the staging notes" for index in range(40))


def setup(app: Armarius) -> tuple[Actor, Actor, Actor]:
    """The bench workspace: an agent, an editor (creates and reviews the unit) and an administrator."""
    directory = app.directory
    directory.create_workspace("bench", by=BY)
    directory.add_principal("bench-agent", Kind.AGENT, workspace="bench", role=Role.EDITOR, by=BY)
    agent = directory.authenticate_token(directory.issue_token("bench-agent", workspace="bench", by=BY).token)
    humans = []
    for name, role in (("bench-editor", Role.EDITOR), ("bench-admin", Role.ADMIN)):
        directory.add_principal(name, Kind.HUMAN, workspace="bench", role=role, by=BY, password=PASSWORD)
        humans.append(directory.authenticate_password(name, PASSWORD, workspace="bench"))
    editor, admin = humans
    app.memory.remember(agent, RememberRequest(ENTRY, "Where staging runs", BODY))
    app.evidence.create(editor, UNIT, "The DNS outage", BODY)
    app.evidence.review(editor, UNIT, 1)
    app.evidence.activate(admin, UNIT, 1)
    return agent, editor, admin


def alternative(app: Armarius, agent: Actor, kind: str, cycle: int, variant: int) -> dict[str, Any]:
    if kind == "entry":
        revision = app.memory.read(agent, ENTRY)["revision"]
    else:
        revision = app.evidence.current(agent, UNIT).revision
    return {"target": {"kind": kind, "name": ENTRY if kind == "entry" else UNIT, "revision": revision},
            "title": "Where staging runs" if kind == "entry" else "The DNS outage",
            "body": f"{BODY} (correction {cycle}.{variant})", "rationale": "The session observed otherwise."}


def measure(app: Armarius, agent: Actor, admin: Actor, kind: str, cycles: int) -> tuple[list[float], list[float]]:
    """Latencies of prepare and of apply, cycle by cycle."""
    prepared: list[float] = []
    applied: list[float] = []
    for cycle in range(cycles):
        # A session of its own per cycle (not timed), closed before the decision: no takeover needed.
        session = app.sessions.open(agent, f"bench {kind} {cycle}")["session"]
        choices = [alternative(app, agent, kind, cycle, 1), alternative(app, agent, kind, cycle, 2)]
        started = time.perf_counter()
        repair = app.repairs.prepare(agent, session, "The observed value differs.", choices)
        middle = time.perf_counter()
        app.sessions.close(agent, session)
        resumed = time.perf_counter()
        answer = app.repairs.apply(admin, repair["repair"], "opt-1")
        ended = time.perf_counter()
        assert answer["status"] == "active", answer["outcome"]
        prepared.append(middle - started)
        applied.append(ended - resumed)
    return prepared, applied


def report(engine: str, kind: str, prepared: list[float], applied: list[float]) -> None:
    cycles = [p + a for p, a in zip(prepared, applied, strict=True)]
    print(f"{engine:<11} {kind:<9} {len(cycles) / sum(cycles):>9.0f} "
          f"{percentile(prepared, 0.5) * 1000:>9.2f} {percentile(prepared, 0.95) * 1000:>9.2f} "
          f"{percentile(applied, 0.5) * 1000:>9.2f} {percentile(applied, 0.95) * 1000:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=300, help="per target kind (after 20 warm-up cycles)")
    parser.add_argument("--engines", default="sqlite,postgresql")
    options = parser.parse_args()
    engines = [e for e in options.engines.split(",") if e == "sqlite" or postgres_available()]
    print(f"{'engine':<11} {'target':<9} {'cycles/s':>9} {'prep p50':>9} {'prep p95':>9} {'apply p50':>9} "
          f"{'apply p95':>9}   (ms)")
    for engine in engines:
        with tempfile.TemporaryDirectory() as folder, engine_settings(engine, Path(folder) / "data") as settings:
            app = open_app(settings)
            try:
                agent, _editor, admin = setup(app)
                for kind in ("entry", "evidence"):
                    measure(app, agent, admin, kind, 20)
                    report(engine, kind, *measure(app, agent, admin, kind, options.cycles))
            finally:
                app.close()


if __name__ == "__main__":
    main()
