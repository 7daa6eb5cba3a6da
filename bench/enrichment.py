"""Enrichment figures: time to enrich 1, 10 and 100 input ids of the test game world, per research
database engine, and the queries issued against what a naive per-relationship loop would issue.

The world is the test suite's fixture (tests/research/world.py) on SQLite, MariaDB and PostgreSQL
(servers left out when down); the store is SQLite. The configuration is examples/world-enrichment.toml's
shape: quests, their reward items, items back to the quests that reward them (a cycle), creatures
and their script names searched as source symbols. A naive loop asks one query per entity, one
per relationship of each entity and one per followed value, repeats included.

    .venv/bin/python bench/enrichment.py [--dialects sqlite,mariadb,postgresql]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armarius.app import initialize, open_app
from armarius.config import Settings
from armarius.sessions.model import SessionLimits
from tests.helpers import make_team
from tests.research import world
from tests.research.repos import build_repo, source_entry, write_config

ENRICHMENT = """
[enrichment]
max_queries = 1000
max_depth = 3
max_relationships = 1000

[[enrichment.entities]]
type = "quest"
table = "quest_template"
id_column = "id"
columns = ["title", "min_level", "reward_item", "details"]

[[enrichment.entities]]
type = "item"
table = "item_template"
id_column = "entry"
columns = ["name", "quality"]

[[enrichment.entities]]
type = "creature"
table = "creature_template"
id_column = "entry"
columns = ["name", "script_name"]

[[enrichment.texts]]
entity_type = "quest"
column = "details"
role = "quest text"
origin = "quest_template.details"

[[enrichment.relationships]]
relation = "rewards_item"
from_table = "quest_template"
from_id_column = "id"
from_column = "reward_item"
entity_type = "item"

[[enrichment.relationships]]
relation = "rewarded_by"
from_entity = "item"
from_table = "quest_template"
from_id_column = "reward_item"
from_column = "id"
entity_type = "quest"

[[enrichment.relationships]]
relation = "runs_script"
from_table = "creature_template"
from_id_column = "entry"
from_column = "script_name"
source = "app"
"""


@contextmanager
def world_server(dialect: str, folder: Path) -> Iterator[world.WorldServer | None]:
    if dialect == "sqlite":
        yield world.build_sqlite_world(folder / "world.sqlite")
        return
    builder = world.mariadb_world if dialect == "mariadb" else world.postgres_world
    try:
        context = builder()
        server = context.__enter__()
    except Exception as error:  # the server is down: leave this engine out
        print(f"{dialect}: left out ({type(error).__name__})")
        yield None
        return
    try:
        yield server
    finally:
        context.__exit__(None, None, None)


def inputs(count: int) -> list[dict[str, Any]]:
    """The first ``count`` of the world's quests, items and creatures, taken in turn."""
    pools = [[("quest", number) for number in range(1, 31)], [("item", number) for number in range(1, 41)],
             [("creature", number) for number in range(1, 61)]]
    mixed = [pool[index] for index in range(60) for pool in pools if index < len(pool)]
    return [{"entity_type": kind, "id": number} for kind, number in mixed[:count]]


def naive_queries(facts: dict[str, Any], config: Any) -> int:
    """What a loop asking per entity, per relationship and per followed value would have issued."""
    looked = [subject for subject, values in facts["entities"].items() if "type" in values or "not_found_in" in values]
    per_entity = sum(1 + len(config.relationships_of(subject.split(":")[0])) for subject in looked)
    return per_entity + len(facts["relationships"])


def run(dialect: str, server: world.WorldServer, folder: Path, counts: list[int]) -> None:
    repo = build_repo(folder / "repo")
    path = write_config(folder / "research.toml", [source_entry(repo)], databases=[world.database_entry(server)])
    path.write_text(path.read_text() + ENRICHMENT)
    settings = Settings(data_dir=folder / "data", research_config=path, environ=world.password_environ(server))
    initialize(settings)
    app = open_app(settings)
    try:
        app.sessions.limits = SessionLimits(default_budget=10, max_budget=10, invalid_request_limit=5)
        agent = make_team(app, "bench").agent
        assert app.research is not None
        assert app.research.config.enrichment is not None
        config = app.research.config.enrichment
        for count in counts:
            started = time.perf_counter()
            view = app.sessions.open(agent, f"{count} ids", inputs=inputs(count))
            elapsed = time.perf_counter() - started
            facts = view["facts"]
            issued = app.sessions.show(agent, view["session"])["evidence"]["records"]
            print(f"{dialect:<11} {count:>4} ids {elapsed * 1000:>9.1f} ms {issued:>8} queries "
                  f"{naive_queries(facts, config):>8} naive {len(facts['entities']):>6} entities "
                  f"{len(facts['relationships']):>6} links")
    finally:
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialects", default="sqlite,mariadb,postgresql")
    parser.add_argument("--counts", default="1,10,100")
    options = parser.parse_args()
    counts = [int(count) for count in options.counts.split(",")]
    print(f"{'world':<11} {'':>8} {'time':>12} {'issued':>8} {'':>7} {'naive':>8}")
    for dialect in options.dialects.split(","):
        with tempfile.TemporaryDirectory() as folder, world_server(dialect, Path(folder)) as server:
            if server is not None:
                with contextlib.suppress(KeyboardInterrupt):
                    run(dialect, server, Path(folder), counts)


if __name__ == "__main__":
    main()
