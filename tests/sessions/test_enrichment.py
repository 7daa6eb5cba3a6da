"""Enrichment over the real game-world database, on every world dialect and every store engine.

Each test opens an application whose research TOML names the world (``world_server``: SQLite,
MariaDB, PostgreSQL), a git source (the ``source.symbol`` target) and an ``[enrichment]`` section
written here, then opens sessions with inputs and checks the facts against the captures they cite:

* the same configuration over the same snapshot gives the same facts on all three dialects
  (kind, subject, predicate, object and pointer; capture ids differ, their origin names the dialect);
* every JSON pointer resolves, inside its capture, to the value the fact states;
* ``ignore_values`` (defaults and an override), ``when_column``/``when_value``, a cycle, and each
  limit, which leaves a ``project_context_coverage`` fact naming what it skipped;
* a value that is no id (a cut cell, bytes, a float) is never looked up, searched or named, but said
  (``value_cut``, ``not_an_id``), and a cut ``when_column`` cell is not compared as if it were whole;
* one evidence record per distinct request, reused by later revisions, which never touch an earlier one;
* a failing provider blocks the session, and a human's resume finishes the enrichment without
  asking again what was recorded;
* invalid inputs write nothing; the MCP tool answers with the facts;
* the enrichment code names nothing of either example domain (``examples/``).
"""

from __future__ import annotations

import io
import json
import re
import tokenize
import tomllib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.canonical import canonical_json
from armarius.config import Settings
from armarius.errors import InvalidInput, SessionBlocked, SessionClosed
from armarius.sessions import service
from armarius.sessions.enrichment import INPUTS_MAX, TEXT_ID_MAX
from tests.cli.test_cli import Cli
from tests.helpers import OwnerSQL, Team, agent_of, make_team
from tests.research.conftest import world_server  # noqa: F401  (a fixture used here)
from tests.research.repos import Repo, build_repo, source_entry, write_config
from tests.research.world import (
    CREATURES,
    LONG_DESCRIPTION,
    QUESTS,
    SCRIPT_NAMES,
    WorldServer,
    database_entry,
    password_environ,
)
from tests.sessions.conftest import Clock

ROOT = Path(__file__).resolve().parents[2]

# --- configuration pieces -------------------------------------------------------------------------

QUEST = {"type": "quest", "table": "quest_template", "id_column": "id",
         "columns": ["title", "min_level", "reward_item", "details"]}
ITEM = {"type": "item", "table": "item_template", "id_column": "entry", "columns": ["name", "quality"]}
CREATURE = {"type": "creature", "table": "creature_template", "id_column": "entry", "columns": ["name", "script_name"]}
QUEST_TEXT = {"entity_type": "quest", "column": "details", "role": "quest text", "origin": "quest_template.details"}
ITEM_TEXT = {"entity_type": "item", "column": "description", "role": "item text", "origin": "item_template.description"}
#: quest -> item, on the quest's own row.
REWARDS_ITEM = {"relation": "rewards_item", "from_table": "quest_template", "from_id_column": "id",
                "from_column": "reward_item", "entity_type": "item"}
#: item -> quest through an origin query (quest_template where reward_item = the item): with
#: REWARDS_ITEM, a cycle.
REWARDED_BY = {"relation": "rewarded_by", "from_entity": "item", "from_table": "quest_template",
               "from_id_column": "reward_item", "from_column": "id", "entity_type": "quest"}
#: creature -> source symbol.
RUNS_SCRIPT = {"relation": "runs_script", "from_table": "creature_template", "from_id_column": "entry",
               "from_column": "script_name", "source": "app"}
#: creature -> item through smart_scripts rows of source_type 0 (entryorguid is a creature entry there).
SMART_ACTION = {"relation": "smart_action", "from_entity": "creature", "from_table": "smart_scripts",
                "from_id_column": "entryorguid", "from_column": "action_type", "when_column": "source_type",
                "when_value": 0, "entity_type": "item"}
#: The same rows' event_type, which is 0 on every creature's first script row (ignored by default).
SMART_EVENT = {**SMART_ACTION, "relation": "smart_event", "from_column": "event_type"}


def enrichment(entities: Sequence[dict[str, Any]], texts: Sequence[dict[str, Any]] = (),
               relationships: Sequence[dict[str, Any]] = (), **limits: int) -> str:
    """An ``[enrichment]`` section (TOML) with these entries."""
    lines = ["", "[enrichment]", *(f"{key} = {value}" for key, value in limits.items())]
    for key, entries in (("entities", entities), ("texts", texts), ("relationships", relationships)):
        for entry in entries:
            lines.append(f"[[enrichment.{key}]]")
            lines += [f"{name} = {json.dumps(value, ensure_ascii=False)}" for name, value in entry.items()]
    return "\n".join(lines) + "\n"


#: The configuration of the determinism and provenance test: texts, relationships on the row and through
#: origin queries, a source symbol, a when filter, a cycle, ignored values and the depth limit.
FULL = enrichment([QUEST, ITEM, CREATURE], [QUEST_TEXT, ITEM_TEXT],
                  [REWARDS_ITEM, REWARDED_BY, RUNS_SCRIPT, SMART_ACTION, SMART_EVENT], max_queries=60, max_depth=2)
FULL_INPUTS = [{"entity_type": "quest", "id": 1}, {"entity_type": "quest", "id": 5},
               {"entity_type": "creature", "id": 1}, {"entity_type": "creature", "id": 2},
               {"entity_type": "creature", "id": 30}, {"entity_type": "creature", "id": 1001},
               {"entity_type": "quest", "id": "first"}]  # a text id for an integer column: refused, said so


# --- the bench: one store, the world, a repository, a clock ------------------------------------------


@dataclass
class Bench:
    settings: Settings
    server: WorldServer
    repo: Repo
    clock: Clock
    apps: list[Armarius] = field(default_factory=list)
    team: Team | None = None

    def open(self, section: str = "", **database: Any) -> Armarius:
        """An application over the world and the repository with this ``[enrichment]`` section (and these
        keys of the world's ``[[databases]]`` entry, a limit say)."""
        name = f"research-{len(self.apps)}.toml"
        path = write_config(self.settings.data_dir / name, [source_entry(self.repo)],
                            databases=[database_entry(self.server, **database)])
        path.write_text(path.read_text(encoding="utf-8") + section, encoding="utf-8")
        app = open_app(replace(self.settings, research_config=Path(name), environ=password_environ(self.server)))
        app.sessions.clock = self.clock
        self.apps.append(app)
        if self.team is None:
            self.team = make_team(app)
        return app

    @property
    def people(self) -> Team:
        assert self.team is not None
        return self.team


@pytest.fixture
def bench(settings: Settings, world_server: WorldServer, tmp_path: Path) -> Iterator[Bench]:  # noqa: F811
    made = Bench(settings, world_server, build_repo(tmp_path / "repo"), Clock(datetime.now(UTC)))
    yield made
    for app in made.apps:
        app.close()


# --- reading what a session recorded -------------------------------------------------------------


def facts(app: Armarius, actor: Any, session: int, revision: int | None = None) -> list[dict[str, Any]]:
    revisions = app.sessions.history(actor, session)["fact_revisions"]
    return list(revisions[max(revisions) if revision is None else revision])


def canonical_facts(found: Sequence[dict[str, Any]]) -> list[str]:
    """What must not depend on the dialect: everything but the capture id."""
    return [canonical_json([fact[key] for key in ("kind", "subject", "predicate", "object", "pointer")])
            for fact in found]


def stored_captures(settings: Settings) -> dict[str, str]:
    with OwnerSQL(settings) as sql:
        return dict(sql.rows("SELECT capture_id, content FROM captures"))


def evidence(settings: Settings, session: int) -> list[dict[str, Any]]:
    """The session's evidence records in order: request (decoded), capture id, enrichment revision."""
    with OwnerSQL(settings) as sql:
        rows = sql.rows("SELECT seq, request, capture_id, enrichment_revision FROM evidence_records "
                        "WHERE session_id = ? ORDER BY seq", (session,))
    return [{"seq": seq, "request": json.loads(request), "key": request, "capture": capture, "revision": revision}
            for seq, request, capture, revision in rows]


def resolve(document: Any, pointer: str) -> Any:
    """The value at a JSON pointer (RFC 6901); KeyError/IndexError when it does not resolve."""
    assert pointer.startswith("/"), pointer
    value = document
    for escaped in pointer[1:].split("/"):
        token = escaped.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list):
            assert re.fullmatch(r"0|[1-9][0-9]*", token), pointer
            value = value[int(token)]
        else:
            assert isinstance(value, dict), pointer
            value = value[token]
    return value


def name_of(entity_type: str, value: Any) -> str:
    return f"{entity_type}:{value if isinstance(value, str) else canonical_json(value)}"


def assert_facts_resolve(found: Sequence[dict[str, Any]], captures: dict[str, str],
                         folder: Path | None = None) -> int:
    """Every fact with a pointer states exactly the value its capture holds there; the count checked.
    With ``folder``, the capture files there hold the same bytes as the store."""
    by_seq = {fact["seq"]: fact for fact in found}
    checked = 0
    for fact in found:
        if fact["pointer"] is None:
            assert fact["capture"] is None or fact["kind"] == "project_context_coverage", fact
            continue
        assert fact["capture"] in captures, fact
        if folder is not None:
            assert (folder / f"{fact['capture']}.json").read_text(encoding="utf-8") == captures[fact["capture"]]
        document = json.loads(captures[fact["capture"]])
        value = resolve(document, fact["pointer"])
        kind, subject, predicate, stated = fact["kind"], fact["subject"], fact["predicate"], fact["object"]
        if kind == "project_description":
            assert stated["text"] == value, fact
        elif kind == "relationship":
            target_type = stated.partition(":")[0]
            assert stated == name_of(target_type, value), fact
        elif kind == "entity" and predicate == "is":
            assert subject == name_of(stated["type"], value), fact
            assert document["request"]["filters"][0]["value"] == value, fact
        elif kind == "entity" and predicate == "not_found_in":
            assert value == [], fact
            assert document["result"]["complete_filtered_rows"] is True, fact
        elif kind == "entity" and isinstance(stated, dict) and set(stated) == {"see_fact"}:
            text = by_seq[stated["see_fact"]]
            assert text["kind"] == "project_description", fact
            assert (text["subject"], text["capture"], text["pointer"]) == (subject, fact["capture"], fact["pointer"])
            assert text["object"]["text"] == value, fact
        elif kind == "entity":
            assert stated == value, fact
        else:
            assert kind == "project_context_coverage", fact
            if "value" in stated:
                assert stated["value"] == value, fact
        checked += 1
    return checked


def coverage(found: Sequence[dict[str, Any]], reason: str) -> list[dict[str, Any]]:
    return [fact for fact in found if fact["kind"] == "project_context_coverage" and fact["object"]["reason"] == reason]


def relations(found: Sequence[dict[str, Any]], relation: str) -> list[tuple[str, str]]:
    return [(fact["subject"], fact["object"]) for fact in found
            if fact["kind"] == "relationship" and fact["predicate"] == relation]


def looked_up(found: Sequence[dict[str, Any]]) -> Counter[str]:
    """How often each entity was established (``is``) or found missing."""
    return Counter(fact["subject"] for fact in found if fact["kind"] == "entity"
                   and fact["predicate"] in {"is", "not_found_in"})


# --- 1 and 2: determinism and provenance ---------------------------------------------------------

#: The canonical facts of FULL, one JSON array per line: what every world dialect and store engine
#: must give (capture ids aside). A deliberate change to the walk rewrites this file, reviewed as a diff.
EXPECTED_FACTS = Path(__file__).with_name("enrichment_facts.jsonl")


def test_the_same_configuration_and_snapshot_give_the_same_facts_with_resolving_pointers(bench: Bench) -> None:
    app = bench.open(FULL)
    agent = bench.people.agent
    opened = app.sessions.open(agent, "What do these ids mean?", inputs=FULL_INPUTS)
    session = opened["session"]
    assert opened["status"] == "open"
    found = facts(app, agent, session)
    assert opened["facts"]["revision"] == 1

    # What the walk says, on every dialect.
    entities = opened["facts"]["entities"]
    assert entities["quest:1"] == {"type": "quest", "standing": "input", "values": {
        "title": "The Hogger Hunt", "min_level": 1, "reward_item": 1, "details": {"see_fact": 2}}}
    assert entities["item:1"]["values"]["name"] == "Hearthstone"
    assert entities["creature:1"]["values"]["script_name"] == SCRIPT_NAMES[1]
    assert entities["creature:1001"] == {"not_found_in": "world.creature_template.entry"}
    assert entities[f"symbol:{SCRIPT_NAMES[2]}"] == {"values": {"source_hits": 0}}
    assert ["quest:1", "rewards_item", "item:1"] in opened["facts"]["relationships"]
    assert ["item:1", "rewarded_by", "quest:1"] in opened["facts"]["relationships"]
    assert {"subject": "quest:5", "what": "rewards_item", "reason": "ignored_value", "value": None} in (
        opened["facts"]["not_followed"])
    texts = {description["subject"]: description["text"] for description in opened["facts"]["descriptions"]}
    assert (texts["quest:1"], texts["item:1"]) == (QUESTS[0]["details"], "Description of item 1")
    # A text longer than the database's max_value_length is stated as the captured cell: cut, and saying so.
    assert texts["item:5"] == {"text": LONG_DESCRIPTION[:2000], "chars": len(LONG_DESCRIPTION), "truncated": True}
    assert max(looked_up(found).values()) == 1
    assert coverage(found, "max_depth")
    refused = coverage(found, "refused")
    assert [(fact["subject"], fact["object"]["code"], fact["capture"]) for fact in refused] == [
        ("quest:first", "invalid_input", None)]

    # Every pointer resolves to the stated value, in the store and in the session's capture files.
    captures = stored_captures(bench.settings)
    folder = app.sessions.session_folder(agent.workspace, session)
    checked = assert_facts_resolve(found, captures, folder)
    unpointed = [fact for fact in found if fact["pointer"] is None]
    assert checked == len(found) - len(unpointed)
    assert {(fact["kind"], fact["object"]["reason"]) for fact in unpointed} == {
        ("project_context_coverage", "max_depth"), ("project_context_coverage", "refused")}
    assert {fact["capture"] for fact in found if fact["capture"]} <= {
        record["capture"] for record in evidence(bench.settings, session)}

    # Again in a new session of the same store: the same facts, the same captures, no new capture row.
    again = app.sessions.open(agent, "The same ids again", inputs=FULL_INPUTS)["session"]
    repeated = facts(app, agent, again)
    assert repeated == found
    assert stored_captures(bench.settings) == captures

    # And the same facts on every world dialect and store engine (capture ids aside): each run is held
    # to one recorded answer, so the dialects agree however the runs are spread over workers.
    assert canonical_facts(found) == EXPECTED_FACTS.read_text(encoding="utf-8").splitlines()


# --- 3: ignore_values, when, a cycle, the limits -----------------------------------------------------


def test_ignore_values_defaults_and_an_override(bench: Bench) -> None:
    strict = {**REWARDS_ITEM, "relation": "rewards_item_not_1", "ignore_values": [1]}
    event_from_zero = {**SMART_EVENT, "relation": "smart_event_from_zero", "ignore_values": [3]}
    app = bench.open(enrichment([QUEST, ITEM, CREATURE], [],
                                [REWARDS_ITEM, strict, RUNS_SCRIPT, SMART_EVENT, event_from_zero],
                                max_depth=1, max_queries=60))
    agent = bench.people.agent
    inputs = [{"entity_type": "quest", "id": 1}, {"entity_type": "quest", "id": 5},
              {"entity_type": "creature", "id": 3}]
    session = app.sessions.open(agent, "defaults", inputs=inputs)["session"]
    found = facts(app, agent, session)
    assert_facts_resolve(found, stored_captures(bench.settings))
    ignored = {(fact["subject"], fact["object"]["what"], canonical_json(fact["object"]["value"]))
               for fact in coverage(found, "ignored_value")}
    assert ignored == {
        ("quest:5", "rewards_item", "null"),             # NULL: by default
        ("quest:5", "rewards_item_not_1", "null"),       # NULL: still, with ignore_values = [1]
        ("quest:1", "rewards_item_not_1", "1"),          # the override: 1 is not followed
        ("creature:3", "runs_script", '""'),             # "": by default
        ("creature:3", "smart_event", "0"),              # 0: by default
        ("creature:3", "smart_event_from_zero", "3"),    # the override: 3 is not followed, 0 is
    }
    assert relations(found, "rewards_item") == [("quest:1", "item:1")]
    assert relations(found, "rewards_item_not_1") == []
    assert relations(found, "smart_event") == [("creature:3", "item:3"), ("creature:3", "item:6"),
                                               ("creature:3", "item:9")]
    assert relations(found, "smart_event_from_zero") == [("creature:3", "item:0"), ("creature:3", "item:6"),
                                                         ("creature:3", "item:9")]
    # Followed once though two relationships name it; item 0 does not exist.
    assert looked_up(found)["item:6"] == 1
    assert [fact["object"] for fact in found if fact["subject"] == "item:0"] == ["world.item_template.entry"]
    # Each ignored value is pointed at in its capture (a NULL as null).
    nulls = [fact for fact in coverage(found, "ignored_value") if fact["object"]["value"] is None]
    assert all(fact["pointer"] == "/result/rows/0/3" for fact in nulls)


def test_when_column_takes_only_the_rows_with_the_value(bench: Bench) -> None:
    # The smart_scripts rows whose action_type is 2 are owned by creatures 1 and 2 (source_type 0) and
    # by the spawns -1001 and -1002 (source_type 9): only a filter keeps the spawns out.
    scripted_by = {"relation": "scripted_by", "from_entity": "item", "from_table": "smart_scripts",
                   "from_id_column": "action_type", "from_column": "entryorguid", "when_column": "source_type",
                   "when_value": 0, "entity_type": "creature"}
    spawn_scripted_by = {**scripted_by, "relation": "spawn_scripted_by", "when_value": 9}
    any_scripted_by = {key: value for key, value in scripted_by.items() if not key.startswith("when_")}
    any_scripted_by["relation"] = "any_scripted_by"
    # On the entity's own row: creature 1 has faction 14, creature 2 faction 35.
    runs_script_of_14 = {**RUNS_SCRIPT, "relation": "runs_script_of_14", "when_column": "faction", "when_value": 14}
    app = bench.open(enrichment([ITEM, CREATURE], [],
                                [SMART_ACTION, scripted_by, spawn_scripted_by, any_scripted_by, runs_script_of_14],
                                max_depth=1, max_queries=60))
    agent = bench.people.agent
    inputs = [{"entity_type": "item", "id": 2}, {"entity_type": "creature", "id": 1},
              {"entity_type": "creature", "id": 2}]
    session = app.sessions.open(agent, "when", inputs=inputs)["session"]
    found = facts(app, agent, session)
    assert_facts_resolve(found, stored_captures(bench.settings))
    assert relations(found, "scripted_by") == [("item:2", "creature:1"), ("item:2", "creature:2")]
    assert relations(found, "spawn_scripted_by") == [("item:2", "creature:-1002"), ("item:2", "creature:-1001")]
    assert sorted(relations(found, "any_scripted_by")) == sorted(
        relations(found, "scripted_by") + relations(found, "spawn_scripted_by"))
    assert relations(found, "smart_action") == [("creature:1", f"item:{n}") for n in (1, 2, 3, 4)] + [
        ("creature:2", f"item:{n}") for n in (2, 3, 4, 5)]
    assert relations(found, "runs_script_of_14") == [("creature:1", f"symbol:{SCRIPT_NAMES[1]}")]
    # The origin requests asked for the value; the entity request fetched the column to compare.
    requests = [record["request"] for record in evidence(bench.settings, session)]
    origin_filters = {canonical_json(request["filters"]) for request in requests
                      if request.get("table") == "smart_scripts"}
    assert origin_filters == {
        canonical_json([{"column": "entryorguid", "op": "eq", "value": 1},
                        {"column": "source_type", "op": "eq", "value": 0}]),
        canonical_json([{"column": "entryorguid", "op": "eq", "value": 2},
                        {"column": "source_type", "op": "eq", "value": 0}]),
        canonical_json([{"column": "action_type", "op": "eq", "value": 2},
                        {"column": "source_type", "op": "eq", "value": 0}]),
        canonical_json([{"column": "action_type", "op": "eq", "value": 2},
                        {"column": "source_type", "op": "eq", "value": 9}]),
        canonical_json([{"column": "action_type", "op": "eq", "value": 2}]),
    }
    creature_request = next(request for request in requests if request.get("table") == "creature_template")
    assert "faction" in creature_request["columns"]


def test_a_cycle_ends_and_each_entity_is_looked_up_once(bench: Bench) -> None:
    app = bench.open(enrichment([QUEST, ITEM], [], [REWARDS_ITEM, REWARDED_BY], max_depth=20))
    agent = bench.people.agent
    inputs = [{"entity_type": "quest", "id": 1}, {"entity_type": "quest", "id": 2}, {"entity_type": "item", "id": 2}]
    session = app.sessions.open(agent, "cycle", inputs=inputs)["session"]
    found = facts(app, agent, session)
    assert_facts_resolve(found, stored_captures(bench.settings))
    assert looked_up(found) == {"quest:1": 1, "quest:2": 1, "item:2": 1, "item:1": 1}
    assert relations(found, "rewards_item") == [("quest:1", "item:1"), ("quest:2", "item:2")]
    assert relations(found, "rewarded_by") == [("item:2", "quest:2"), ("item:1", "quest:1")]
    assert coverage(found, "max_depth") == []
    requests = Counter(record["key"] for record in evidence(bench.settings, session))
    assert set(requests.values()) == {1}
    # Four entity lookups and the two items' origin queries.
    assert len(requests) == 6


def test_each_limit_leaves_a_coverage_fact_naming_what_it_skipped(bench: Bench) -> None:
    agent_inputs = [{"entity_type": "quest", "id": 1}, {"entity_type": "quest", "id": 2},
                    {"entity_type": "quest", "id": 3}]

    app = bench.open(enrichment([QUEST, ITEM], [], [REWARDS_ITEM, REWARDED_BY], max_queries=2))
    agent = bench.people.agent
    session = app.sessions.open(agent, "max_queries", inputs=agent_inputs)["session"]
    found = facts(app, agent, session)
    skipped = coverage(found, "max_queries")
    assert [fact["subject"] for fact in skipped] == ["quest:3", "item:1", "item:2"]
    assert all(fact["object"]["what"] == "database.rows" for fact in skipped)
    assert [fact["object"]["request"]["filters"] for fact in skipped] == [
        [{"column": "id", "op": "eq", "value": 3}], [{"column": "entry", "op": "eq", "value": 1}],
        [{"column": "entry", "op": "eq", "value": 2}]]
    assert len(evidence(bench.settings, session)) == 2

    app = bench.open(enrichment([QUEST, ITEM], [], [REWARDS_ITEM, REWARDED_BY], max_depth=1))
    session = app.sessions.open(agent, "max_depth", inputs=agent_inputs[:1])["session"]
    found = facts(app, agent, session)
    assert [(fact["subject"], fact["object"]) for fact in coverage(found, "max_depth")] == [
        ("item:1", {"what": "rewarded_by", "reason": "max_depth", "depth": 1})]
    assert relations(found, "rewards_item") == [("quest:1", "item:1")]
    assert looked_up(found) == {"quest:1": 1, "item:1": 1}

    app = bench.open(enrichment([ITEM, CREATURE], [], [SMART_ACTION], max_relationships=2))
    session = app.sessions.open(agent, "max_relationships", inputs=[{"entity_type": "creature", "id": 1}])["session"]
    found = facts(app, agent, session)
    assert relations(found, "smart_action") == [("creature:1", "item:1"), ("creature:1", "item:2")]
    skipped = coverage(found, "max_relationships")
    assert [(fact["subject"], fact["object"], fact["pointer"]) for fact in skipped] == [
        ("creature:1", {"what": "smart_action", "reason": "max_relationships", "value": 3}, "/result/rows/2/1"),
        ("creature:1", {"what": "smart_action", "reason": "max_relationships", "value": 4}, "/result/rows/3/1")]
    assert looked_up(found) == {"creature:1": 1, "item:1": 1, "item:2": 1}
    assert_facts_resolve(found, stored_captures(bench.settings))


def test_a_stated_follow_up_says_when_its_row_is_missing_or_not_unique(bench: Bench) -> None:
    # A follow-up in another table than the target entity's own: its row is stated, not walked.
    first_script = {"relation": "first_script", "from_table": "creature_template", "from_id_column": "entry",
                    "from_column": "entry", "entity_type": "creature", "table": "smart_scripts",
                    "column": "entryorguid", "columns": ["comment"]}
    reward_script = {**first_script, "relation": "reward_script", "from_table": "quest_template",
                     "from_id_column": "id", "from_column": "reward_item"}
    app = bench.open(enrichment([CREATURE, QUEST], [], [first_script, reward_script]))
    agent = bench.people.agent
    inputs = [{"entity_type": "creature", "id": 1}, {"entity_type": "creature", "id": 40},
              {"entity_type": "quest", "id": 1}]
    session = app.sessions.open(agent, "stated", inputs=inputs)["session"]
    found = facts(app, agent, session)
    assert_facts_resolve(found, stored_captures(bench.settings))
    assert relations(found, "first_script") == [("creature:1", "creature:1"), ("creature:40", "creature:40")]
    assert relations(found, "reward_script") == [("quest:1", "creature:1")]
    # Reached twice (from creature 1 and from quest 1), the row is stated once.
    comments = [fact for fact in found if fact["predicate"] == "comment"]
    assert [fact["object"] for fact in comments] == ["Hogger - On Aggro - Say Line 0 (100% chance)"]
    # Creature 1 has four script rows: the first is stated, and that it was not the only one is said.
    assert [(fact["subject"], fact["object"]) for fact in coverage(found, "id_not_unique")] == [
        ("creature:1", {"what": "first_script", "reason": "id_not_unique", "table": "world.smart_scripts"})]
    # Creature 40 has none: a finding within the table asked.
    assert [(fact["subject"], fact["object"]) for fact in found if fact["predicate"] == "not_found_in"] == [
        ("creature:40", "world.smart_scripts.entryorguid")]
    # Both relationships asked smart_scripts about entry 1 with the same request: one record, one capture.
    records = evidence(bench.settings, session)
    assert len(records) == len({record["key"] for record in records}) == 5
    assert len({fact["capture"] for fact in comments}) == 1


# --- 4: one record per request, revisions -----------------------------------------------------------


def test_one_record_per_request_and_a_rerun_reuses_answers_and_leaves_earlier_revisions_alone(bench: Bench) -> None:
    # Both relationships ask smart_scripts the same origin request: one capture, one evidence record.
    action_creature = {**SMART_ACTION, "relation": "smart_action_creature", "entity_type": "creature"}
    app = bench.open(enrichment([QUEST, ITEM, CREATURE], [QUEST_TEXT],
                                [REWARDS_ITEM, REWARDED_BY, SMART_ACTION, action_creature], max_depth=1))
    agent, human = bench.people.agent, bench.people.human
    first = [{"entity_type": "creature", "id": 1}, {"entity_type": "quest", "id": 1}]
    session = app.sessions.open(agent, "revisions", inputs=first)["session"]
    records = evidence(bench.settings, session)
    assert len(records) == len({record["key"] for record in records})
    origin = [record for record in records if record["request"].get("table") == "smart_scripts"]
    assert len(origin) == 1
    found = facts(app, agent, session, 1)
    assert {fact["capture"] for fact in found if fact["predicate"] in {"smart_action", "smart_action_creature"}} == {
        origin[0]["capture"]}
    with OwnerSQL(bench.settings) as sql:
        before = sql.rows("SELECT * FROM session_facts WHERE session_id = ? AND revision = 1 ORDER BY seq", (session,))
        inputs_before = sql.rows("SELECT * FROM session_inputs WHERE session_id = ? ORDER BY revision", (session,))
        captures_before = sql.count("captures")

    # New inputs that include the old ones: only the new requests are asked.
    bench.clock.advance(5)
    second = app.sessions.enrich(human, session, [*first, {"entity_type": "quest", "id": 2}])
    assert second["facts"]["revision"] == 2
    after = evidence(bench.settings, session)
    assert after[: len(records)] == records
    added = after[len(records):]
    assert added
    assert {record["revision"] for record in added} == {2}
    assert not {record["key"] for record in added} & {record["key"] for record in records}
    assert all(record["request"]["filters"][0]["value"] == 2 for record in added)
    revision_two = facts(app, agent, session, 2)
    # The inputs both revisions share come first: their facts are the same, down to capture and pointer.
    shared = {"creature:1", "quest:1"}
    assert [fact for fact in revision_two if fact["subject"] in shared] == [
        fact for fact in found if fact["subject"] in shared]

    # The very same inputs again: nothing is asked, the facts are those of revision 1.
    third = app.sessions.enrich(human, session, first)
    assert third["facts"]["revision"] == 3
    assert evidence(bench.settings, session) == after
    assert facts(app, agent, session, 3) == found
    with OwnerSQL(bench.settings) as sql:
        assert sql.rows("SELECT * FROM session_facts WHERE session_id = ? AND revision = 1 ORDER BY seq",
                        (session,)) == before
        assert sql.rows("SELECT * FROM session_inputs WHERE session_id = ? ORDER BY revision",
                        (session,))[:1] == inputs_before
        assert sql.count("captures") == captures_before + len(added)
        assert sql.rows("SELECT count(*) FROM session_facts WHERE session_id = ? GROUP BY revision ORDER BY revision",
                        (session,)) == [(len(found),), (len(revision_two),), (len(found),)]
    history = app.sessions.history(human, session)
    assert [record.get("enrichment") for record in history["evidence"]["records_list"]] == [
        record["revision"] for record in after]
    assert app.sessions.verify(agent, session)["ok"]
    assert history["budget"]["used"] == 0


# --- values that are no id: cut, floats, bytes ---------------------------------------------------------

#: Creatures looked up by name: a text id.
NAMED = {"type": "named", "table": "creature_template", "id_column": "name", "columns": ["entry"]}
#: item -> named, on the item's own row, from its description: item 5's (5,000 characters) comes back cut.
DESCRIBES = {"relation": "describes", "from_table": "item_template", "from_id_column": "entry",
             "from_column": "description", "entity_type": "named"}
#: The same value, stated (a follow-up that is not the target's own lookup) rather than walked.
SUBNAMES = {**DESCRIBES, "relation": "subnames", "table": "creature_template", "column": "subname",
            "columns": ["entry"]}
#: The same value as a source symbol, for item 5 only (its quality is 5).
DESCRIBED_IN = {**{key: value for key, value in DESCRIBES.items() if key != "entity_type"},
                "relation": "described_in", "source": "app", "when_column": "quality", "when_value": 5}
#: item -> named from the item's bytes: an object ({base64, bytes}), no id.
ITEM_DATA_NAMES = {**DESCRIBES, "relation": "data_names", "from_column": "data"}
#: creature -> item from a float column (1.25, 1.0, 1.5, 2.0): no id, not even 1.0.
WALKS_AT = {"relation": "walks_at", "from_entity": "creature", "from_table": "creature_template",
            "from_id_column": "entry", "from_column": "speed_walk", "entity_type": "item"}
#: quest -> named through an origin query: the item of the quest's id, its description.
DESCRIBED_BY = {"relation": "described_by", "from_entity": "quest", "from_table": "item_template",
                "from_id_column": "entry", "from_column": "description", "entity_type": "named"}


def test_a_cut_value_or_one_that_is_no_id_is_not_followed_and_said_so(bench: Bench,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    relationships = [REWARDS_ITEM, DESCRIBES, SUBNAMES, DESCRIBED_IN, ITEM_DATA_NAMES, WALKS_AT, DESCRIBED_BY]
    # Exactly as many relationships as are followed: a value not followed takes none of them.
    app = bench.open(enrichment([QUEST, ITEM, CREATURE, NAMED], [], relationships, max_depth=1,
                                max_queries=60, max_relationships=4))
    agent = bench.people.agent
    real, asked = service.validate_query, []

    def validate_query(request: dict[str, Any]) -> Any:  # every request the walk has not answered yet
        asked.append(request)
        return real(request)

    monkeypatch.setattr(service, "validate_query", validate_query)
    inputs = [{"entity_type": "item", "id": 5}, {"entity_type": "item", "id": 1},
              {"entity_type": "creature", "id": 1}, {"entity_type": "creature", "id": 2},
              {"entity_type": "quest", "id": 5}, {"entity_type": "quest", "id": 1}]
    session = app.sessions.open(agent, "values that are no id", inputs=inputs)["session"]
    found = facts(app, agent, session)
    captures = stored_captures(bench.settings)
    assert_facts_resolve(found, captures)  # each coverage fact's value is the cell its pointer names

    # No lookup or symbol search was asked with a value that is no id (a cut cell, bytes, a float); nothing
    # was refused; no coverage but the values below, two NULLs (item 5's bytes, quest 5's reward) and no
    # relationship over the limit.
    for request in asked:
        if request["kind"] == "database.rows":
            assert all(type(condition["value"]) in (int, str) for condition in request["filters"]), request
    assert [request for request in asked if request["kind"] == "source.symbol"] == []
    assert {fact["object"]["reason"] for fact in found if fact["kind"] == "project_context_coverage"} == {
        "value_cut", "not_an_id", "ignored_value"}
    assert [(fact["subject"], fact["object"]["what"]) for fact in coverage(found, "ignored_value")] == [
        ("item:5", "data_names"), ("quest:5", "rewards_item")]

    # The cut description (on the item's row, and through the quest's origin query), as entity, as a
    # stated row and as a symbol: not followed, pointed at, stated as captured.
    cut = {"text": LONG_DESCRIPTION[:2000], "chars": len(LONG_DESCRIPTION), "truncated": True}
    item_5 = next(fact for fact in found if (fact["subject"], fact["predicate"]) == ("item:5", "is"))
    described = json.loads(captures[item_5["capture"]])["result"]["columns"].index("description")
    skipped = [(fact["subject"], fact["object"]["what"], fact["pointer"]) for fact in coverage(found, "value_cut")]
    assert skipped == [("item:5", relation, f"/result/rows/0/{described}")
                       for relation in ("describes", "subnames", "described_in")] + [
        ("quest:5", "described_by", "/result/rows/0/1")]
    assert all(fact["object"]["value"] == cut for fact in coverage(found, "value_cut"))
    assert all(fact["capture"] == item_5["capture"] for fact in coverage(found, "value_cut")[:3])
    origin = json.loads(captures[coverage(found, "value_cut")[3]["capture"]])
    assert origin["request"]["table"] == "item_template"
    assert origin["request"]["filters"] == [{"column": "entry", "op": "eq", "value": 5}]

    # Bytes and floats (a whole one too) are no id.
    no_id = {(fact["subject"], fact["object"]["what"], canonical_json(fact["object"]["value"]))
             for fact in coverage(found, "not_an_id")}
    item_1_data = {"base64": "AAEC/w==", "bytes": 4}
    assert no_id == {("item:1", "data_names", canonical_json(item_1_data)), ("creature:1", "walks_at", "1.25"),
                     ("creature:2", "walks_at", "1.0")}

    # The rest of the walk is whole: the ids are followed as before.
    named = "named:Description of item 1"
    assert [(fact["subject"], fact["predicate"], fact["object"]) for fact in found
            if fact["kind"] == "relationship"] == [
        ("item:1", "describes", named), ("item:1", "subnames", named), ("quest:1", "rewards_item", "item:1"),
        ("quest:1", "described_by", named)]
    assert [fact["object"] for fact in found if (fact["subject"], fact["predicate"]) == (named, "not_found_in")] == [
        "world.creature_template.subname", "world.creature_template.name"]  # the stated row, then its lookup
    assert looked_up(found) == {"item:5": 1, "item:1": 1, "creature:1": 1, "creature:2": 1, "quest:5": 1,
                                "quest:1": 1, named: 2}
    entities = app.sessions.show(agent, session)["facts"]["entities"]
    assert entities["item:1"]["values"] == {"name": "Hearthstone", "quality": 1}
    assert entities["creature:2"]["values"] == {"name": CREATURES[1]["name"], "script_name": SCRIPT_NAMES[2]}
    assert entities["quest:1"]["values"]["reward_item"] == 1


def test_a_cut_when_value_that_may_be_the_wanted_one_is_said_so(bench: Bench) -> None:
    # With values cut at 16 characters, creature 1's subname "Riverpaw Chieftain" comes back as its first 16.
    chieftain = str(CREATURES[0]["subname"])
    assert len(chieftain) > 16
    of_chieftain = {**RUNS_SCRIPT, "relation": "of_chieftain", "when_column": "subname", "when_value": chieftain}
    # A value the cut cell cannot be (another length): the condition does not hold, as before.
    of_riverpaw = {**of_chieftain, "relation": "of_riverpaw", "when_value": chieftain.split(maxsplit=1)[0]}
    # A short subname, not cut: compared as it is.
    of_subname_2 = {**of_chieftain, "relation": "of_subname_2", "when_value": CREATURES[1]["subname"]}
    app = bench.open(enrichment([CREATURE], [], [of_chieftain, of_riverpaw, of_subname_2]), max_value_length=16)
    agent = bench.people.agent
    inputs = [{"entity_type": "creature", "id": 1}, {"entity_type": "creature", "id": 2}]
    session = app.sessions.open(agent, "cut conditions", inputs=inputs)["session"]
    found = facts(app, agent, session)
    captures = stored_captures(bench.settings)
    assert_facts_resolve(found, captures)
    creature_1 = next(fact for fact in found if (fact["subject"], fact["predicate"]) == ("creature:1", "is"))
    subname = json.loads(captures[creature_1["capture"]])["result"]["columns"].index("subname")
    assert [(fact["subject"], fact["object"], fact["capture"], fact["pointer"]) for fact in coverage(found, "value_cut")
            ] == [("creature:1", {"what": "of_chieftain", "reason": "value_cut", "when_column": "subname",
                                  "value": {"text": chieftain[:16], "chars": len(chieftain), "truncated": True}},
                   creature_1["capture"], f"/result/rows/0/{subname}")]
    assert [(fact["subject"], fact["predicate"], fact["object"]) for fact in found if fact["kind"] == "relationship"
            ] == [("creature:2", "of_subname_2", f"symbol:{SCRIPT_NAMES[2]}")]
    assert {fact["object"]["reason"] for fact in found if fact["kind"] == "project_context_coverage"} == {"value_cut"}


# --- 6: a failing provider ---------------------------------------------------------------------------


def test_a_failing_provider_blocks_and_a_resume_finishes_without_asking_again(bench: Bench) -> None:
    app = bench.open(enrichment([QUEST, ITEM, CREATURE], [], [REWARDS_ITEM, RUNS_SCRIPT, SMART_ACTION], max_depth=1))
    agent, human = bench.people.agent, bench.people.human
    inputs = [{"entity_type": "quest", "id": 1}, {"entity_type": "quest", "id": 2},
              {"entity_type": "creature", "id": 1}]
    moved = bench.repo.path.with_name("moved-away")
    bench.repo.path.rename(moved)
    try:
        opened = app.sessions.open(agent, "failing", inputs=inputs)
    finally:
        moved.rename(bench.repo.path)
    session = opened["session"]
    assert (opened["status"], opened["reason"]) == ("blocked", "research_unavailable")
    symbol = {"kind": "source.symbol", "source": "app", "symbol": SCRIPT_NAMES[1]}
    assert opened["resume_state"] == {"status": "open", "reservation": None, "request": symbol, "enrichment": 1}
    assert opened["facts"] == {"revision": None, "pending": 1}
    before = evidence(bench.settings, session)
    assert [record["request"]["table"] for record in before] == ["quest_template"] * 2 + ["creature_template"]
    with pytest.raises(SessionBlocked):
        app.sessions.query(agent, session, {"kind": "database.tables"})

    bench.clock.advance(app.settings.session_retry_after_seconds + 1)
    resumed = app.sessions.resume(human, session)
    assert resumed["status"] == "open"
    assert resumed["facts"]["revision"] == 1
    after = evidence(bench.settings, session)
    assert after[: len(before)] == before
    assert Counter(record["key"] for record in after) == {record["key"]: 1 for record in after}
    assert canonical_json(symbol) in {record["key"] for record in after[len(before):]}
    found = facts(app, agent, session)
    assert ("creature:1", f"symbol:{SCRIPT_NAMES[1]}") in relations(found, "runs_script")
    assert_facts_resolve(found, stored_captures(bench.settings))
    # The facts are those of a run that never failed.
    clean = app.sessions.open(agent, "not failing", inputs=inputs)["session"]
    assert canonical_facts(facts(app, agent, clean)) == canonical_facts(found)
    assert app.sessions.verify(agent, session)["ok"]


# --- inputs --------------------------------------------------------------------------------------------

STORE_TABLES = ("sessions", "session_checkpoints", "session_inputs", "session_facts", "evidence_records", "captures",
                "audit_events")


def store_state(settings: Settings) -> dict[str, list[str]]:
    with OwnerSQL(settings) as sql:
        return {table: sorted(map(repr, sql.rows(f"SELECT * FROM {table}"))) for table in STORE_TABLES}


def test_invalid_inputs_are_refused_and_write_nothing(bench: Bench) -> None:
    app = bench.open(enrichment([QUEST, ITEM], [], [REWARDS_ITEM]))
    agent = bench.people.agent
    quest = {"entity_type": "quest", "id": 1}
    wrong: list[Any] = [
        [], "quest:1", {"entity_type": "quest", "id": 1}, [quest, quest],
        [{"entity_type": "creature", "id": 1}],             # not a configured entity type
        [{"entity_type": ["quest"], "id": 1}], [{"entity_type": {"quest": 1}, "id": 1}],  # not a name at all
        [{"entity_type": "quest", "id": 1, "extra": 2}], [{"entity_type": "quest"}], ["quest:1"],
        [{"entity_type": "quest", "id": 1.0}], [{"entity_type": "quest", "id": True}],
        [{"entity_type": "quest", "id": None}], [{"entity_type": "quest", "id": [1]}],
        [{"entity_type": "quest", "id": ""}], [{"entity_type": "quest", "id": "x" * (TEXT_ID_MAX + 1)}],
        [{"entity_type": "quest", "id": "a\nb"}], [{"entity_type": "quest", "id": 2**63}],
        [{"entity_type": "quest", "id": n} for n in range(INPUTS_MAX + 1)],
    ]
    session = app.sessions.open(agent, "an open session", inputs=[quest])["session"]
    before = store_state(bench.settings)
    for inputs in wrong:
        with pytest.raises(InvalidInput) as refused:
            app.sessions.open(agent, "refused", inputs=inputs)
        assert refused.value.details["field"].startswith("inputs"), inputs
        with pytest.raises(InvalidInput):
            app.sessions.enrich(bench.people.human, session, inputs)
    assert store_state(bench.settings) == before
    closed = app.sessions.open(agent, "closed", inputs=[quest])["session"]
    app.sessions.close(agent, closed)
    before = store_state(bench.settings)
    with pytest.raises(SessionClosed):  # a closed session takes no new inputs
        app.sessions.enrich(bench.people.human, closed, [quest])
    assert store_state(bench.settings) == before

    plain = bench.open()
    assert plain.research is not None
    for actor_inputs in ([quest], []):
        with pytest.raises(InvalidInput) as refused:
            plain.sessions.open(agent, "no enrichment", inputs=actor_inputs)
        assert refused.value.details["field"] == "inputs"
    with pytest.raises(InvalidInput):
        plain.sessions.enrich(bench.people.human, session, [quest])
    assert store_state(bench.settings) == before


@pytest.mark.anyio
async def test_the_session_open_tool_returns_the_facts(bench: Bench) -> None:
    app = bench.open(enrichment([QUEST, ITEM], [QUEST_TEXT], [REWARDS_ITEM]))
    async with agent_of(app, bench.people.agent) as call:
        opened = await call("session_open", subject="What is quest 1?",
                            inputs=[{"entity_type": "quest", "id": 1}, {"entity_type": "quest", "id": 5}])
        refused = await call("session_open", subject="?", inputs=[{"entity_type": "spell", "id": 1}])
    assert "error" not in opened
    shown = opened["facts"]
    assert shown["revision"] == 1
    assert shown["entities"]["quest:1"]["values"]["title"] == "The Hogger Hunt"
    assert shown["entities"]["item:1"] == {"type": "item", "standing": "referenced by quest:1",
                                           "values": {"name": "Hearthstone", "quality": 1}}
    assert shown["relationships"] == [["quest:1", "rewards_item", "item:1"]]
    assert shown["descriptions"][0]["text"] == QUESTS[0]["details"]
    assert shown["not_followed"] == [{"subject": "quest:5", "what": "rewards_item", "reason": "ignored_value",
                                      "value": None}]
    assert refused["error"] == "invalid_input"


# --- 5: no domain in the code --------------------------------------------------------------------------

ENRICHMENT_CODE = ("src/armarius/sessions/enrichment.py", "src/armarius/research/model.py",
                   "src/armarius/research/enrichment_config.py")
EXAMPLES = ("examples/world-enrichment.toml", "examples/chinook-enrichment.toml")
#: Names of the example configurations that are plain words of any code (a loop's ``item``, a ``name``).
GENERIC = {"id", "name", "item", "entry", "title", "details", "description"}


def example_names() -> set[str]:
    """Every entity type, relation, table and column the example configurations name (lower case)."""
    names: set[str] = set()
    for example in EXAMPLES:
        section = tomllib.loads((ROOT / example).read_text(encoding="utf-8"))["enrichment"]
        for entry in section["entities"]:
            names |= {entry["type"], entry["table"], entry["id_column"], *entry["columns"]}
        for entry in section.get("texts", []):
            names |= {entry["entity_type"], entry["column"]}
        for entry in section.get("relationships", []):
            names |= {value for key, value in entry.items() if isinstance(value, str) and key != "source"}
            names |= set(entry.get("columns", []))
    return {name.lower() for name in names}


def code_words(text: str) -> set[str]:
    """The identifiers and the words of the string literals of Python code, docstrings and comments left out."""
    words: set[str] = set()
    statement_start = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}  # a string there is a docstring
    literal = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}  # f-strings: Python 3.12+
    previous = tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NAME:
            words.add(token.string.lower())
        elif token.type in literal and not (token.type == tokenize.STRING and previous in statement_start):
            words |= {word.lower() for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", token.string)}
        if token.type not in {tokenize.COMMENT, tokenize.NL}:
            previous = token.type
    return words


def service_enrichment_part() -> str:
    text = (ROOT / "src/armarius/sessions/service.py").read_text(encoding="utf-8")
    start, end = text.index("    # Enrichment ---"), text.index("    # Helpers ---")
    assert start < end
    return "class _Part:\n" + text[start:end]


def test_the_enrichment_code_names_nothing_of_either_example_domain() -> None:
    domain = example_names()
    assert {"creature", "quest", "smart_scripts", "source_type", "reward_item", "script_name", "artist", "album",
            "track", "genre", "invoice", "invoiceline", "customer", "employee", "reportsto"} <= domain
    forbidden = [name.split("_") for name in sorted(domain - GENERIC)]
    sources = {path: (ROOT / path).read_text(encoding="utf-8") for path in ENRICHMENT_CODE}
    sources["service.py (enrichment)"] = service_enrichment_part()
    for path, text in sources.items():
        words = code_words(text)
        assert {"entity_type", "relationships_of"} & words, path
        # A domain name inside a longer identifier counts too (creature_id, reward_item_of, ...).
        found = sorted(word for word in words if any(contains(word.split("_"), name) for name in forbidden))
        assert found == [], f"{path} names {found}"


def contains(parts: list[str], name: list[str]) -> bool:
    return any(parts[start:start + len(name)] == name for start in range(len(parts) - len(name) + 1))


def test_a_human_enriches_from_the_command_line_and_reads_every_fact(bench: Bench) -> None:
    app = bench.open(FULL)
    agent, human = bench.people.agent, bench.people.human
    session = app.sessions.open(agent, "from the shell", inputs=[{"entity_type": "quest", "id": 1}])["session"]
    command = Cli(bench.settings)
    command.env = {**command.env, "ARMARIUS_RESEARCH_CONFIG": "research-0.toml",
                   "ARMARIUS_PASSWORD": bench.people.human_password, **password_environ(bench.server)}
    base = ("--workspace", "alpha", "--as", human.principal)
    done = command("--json", "sessions", "enrich", str(session), "--input", "quest:2", "--input", "item:3", *base)
    assert done.exit_code == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["facts"]["revision"] == 2
    assert set(view["facts"]["entities"]) >= {"quest:2", "item:3"}
    shown = command("sessions", "show", str(session), "--facts", *base)
    assert shown.exit_code == 0, shown.stderr
    assert "Facts of input revision 1:" in shown.stdout
    assert "Facts of input revision 2:" in shown.stdout
    assert "rewards_item" in shown.stdout
    assert "/result/rows/0/" in shown.stdout
    bad = command("--json", "sessions", "enrich", str(session), "--input", "quest", *base)
    assert (bad.exit_code, "is not TYPE:ID" in bad.stderr) == (2, True)
    assert facts(app, agent, session, 2) == facts(app, human, session, 2)


def test_the_command_line_resume_completes_the_enrichment(bench: Bench) -> None:
    app = bench.open(enrichment([QUEST, ITEM, CREATURE], [], [REWARDS_ITEM, RUNS_SCRIPT], max_depth=1))
    agent, human = bench.people.agent, bench.people.human
    bench.clock.now -= timedelta(seconds=app.settings.session_retry_after_seconds + 1)  # blocked long enough ago
    moved = bench.repo.path.with_name("moved-away")
    bench.repo.path.rename(moved)
    try:
        session = app.sessions.open(agent, "failing", inputs=[{"entity_type": "creature", "id": 1}])["session"]
    finally:
        moved.rename(bench.repo.path)
    command = Cli(bench.settings)
    command.env = {**command.env, "ARMARIUS_RESEARCH_CONFIG": "research-0.toml",
                   "ARMARIUS_PASSWORD": bench.people.human_password, **password_environ(bench.server)}
    resumed = command("--json", "sessions", "resume", str(session), "--workspace", "alpha", "--as", human.principal)
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["facts"]["revision"] == 1  # completed by the resume, not by the agent later
    records = evidence(bench.settings, session)
    assert Counter(record["key"] for record in records) == {record["key"]: 1 for record in records}


def test_two_runs_of_one_enrichment_record_each_lookup_once(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    app = bench.open(enrichment([QUEST, ITEM], [], [REWARDS_ITEM]))
    agent, human = bench.people.agent, bench.people.human
    session = app.sessions.open(agent, "twice", inputs=[{"entity_type": "quest", "id": 1}])["session"]
    assert app.research is not None
    real, nested = app.research.run, []

    def run_with_a_rival(request: dict[str, Any]) -> Any:
        if not nested:  # while the first run waits for its first answer, a second run does the whole walk
            nested.append(True)
            app.sessions._enrich_pending(human, session)
        return real(request)

    app.sessions.enrich(human, session, [{"entity_type": "quest", "id": 2}])  # revision 2, walked by the rival
    monkeypatch.setattr(app.research, "run", run_with_a_rival)
    app.sessions.enrich(human, session, [{"entity_type": "quest", "id": 3}])
    records = evidence(bench.settings, session)
    assert Counter(record["key"] for record in records) == {record["key"]: 1 for record in records}
    assert app.sessions.show(agent, session)["facts"]["revision"] == 3
