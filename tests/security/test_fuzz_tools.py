"""Fuzzing every MCP tool's arguments, and project_query's query, through the real server.

The cases come from the schemas the server publishes: each tool's ``inputSchema`` from
``tools/list`` and the project-query schema from its resource, so a new tool, field or query kind
is fuzzed without a change here (see :mod:`tests.security.fuzz_values` for what is generated).
At ``--reliability-scale ci`` the calls go through the SDK's in-memory client on SQLite; at
``local`` through ``armarius mcp`` over stdio with the SDK's stdio client, on SQLite and
PostgreSQL. Every call is checked by :class:`tests.security.fuzz_world.Prober`; the planted world
(:func:`tests.security.fuzz_world.plant_world`) must be unchanged afterwards.
"""

from __future__ import annotations

import json
import math
import random
from contextlib import closing
from pathlib import Path
from random import Random
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, Phase, given, seed
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from mcp_types import TextResourceContents

from armarius.app import open_app
from armarius.config import Settings
from armarius.mcp.research_tools import SCHEMA_URI
from armarius.validation import inline_refs
from tests import scale
from tests.conftest import ENGINES
from tests.helpers import make_team
from tests.research.repos import NEWLINE_NAME
from tests.research.world import ALLOWLISTED
from tests.security.fuzz_values import Live, Mutator, SchemaFuzz
from tests.security.fuzz_world import (
    Prober,
    fuzz_settings,
    in_memory,
    over_stdio,
    plant_world,
    stdio_environment,
)

pytestmark = pytest.mark.security

LOCAL = scale.SCALE["name"] == "local"
CASES = scale.pick(ci=10_000, local=100_000)
#: Mutations of each drawn valid call: one hypothesis example buys MUTANTS + 3 calls.
MUTANTS = 6

#: Plausible values by field name (tools and query kinds share names), so that valid calls reach the
#: services: the planted world's paths, tables and columns, and the ids the prober keeps current.
SAMPLES: dict[str, list[Any]] = {
    "slug": ["fuzz/entry", "fuzz/other", "fuzz/new"], "name": ["fuzz/entry", "fuzz/other"],
    "title": ["Fuzz entry", "Другое 🔥"], "body": ["About handle_order. [[fuzz/other]]", "x"],
    "text": ["handle_order", "orders", "CREATE TABLE"], "tags": [["fuzz"], [], ["a", "b"]], "tag": ["fuzz"],
    "expected_revision": [0, 1, 2], "reason": ["Because the source says so."], "query": ["fuzz entry", "handle"],
    "revision": [1, 2], "prefix": ["fuzz/", ""], "after": ["fuzz/a"], "proposal": [Live.PROPOSAL, 1],
    "collection_key": ["key"], "approval": ["approval-token"], "operation": ["op-1"],
    "subject": ["Why does handle_order fail?"], "budget": [1, 10, 1000],
    "inputs": [[{"entity_type": "quest", "id": 1}], [{"entity_type": "item", "id": "3"}],
               [{"entity_type": "quest", "id": 2}, {"entity_type": "creature", "id": 1}]],
    "entity_type": ["quest", "item"], "id": [1, 2, "1"], "session": [Live.SESSION], "repair": [Live.REPAIR, 1],
    "conflict": ["The source says otherwise."], "rationale": ["The source shows it."],
    # project-query-v1
    "source": ["app"], "database": ["world"], "substring": ["app", "src/", ".py", "marker"],
    "path_prefix": ["src/", "docs/", "data/"], "symbol": ["handle_order", "register", "HANDLERS"],
    "path": ["src/app.py", "data/long.txt", "legacy/latin1.txt", "docs/notes.md", "src/cr.txt", NEWLINE_NAME,
             "link.py", "data/logo.bin"],
    "start_line": [1, 2, 4], "end_line": [1, 3, 50], "offset": [0, 1, 5], "limit": [1, 5, 10],
    "table": list(ALLOWLISTED), "column": ["entry", "name", "faction", "id", "title", "comment", "minlevel"],
    "columns": [["entry", "name"], ["id", "title", "reward_money"], ["entryorguid", "comment"]],
    "filters": [[{"column": "faction", "op": "eq", "value": 14}],
                [{"column": "name", "operator": "contains", "value": "%"}],
                [{"column": "entry", "op": "in", "value": [1, 2, 3]}, {"column": "subname", "op": "ne", "value": None}],
                [{"column": "gold_multiplier", "op": "ge", "value": "12345678901234567890.12"}],
                [{"column": "icon", "op": "eq", "value": {"base64": "AP/+"}}]],
    "order_by": [[{"column": "entry", "direction": "desc"}], [{"column": "name"}]],
    "value": [1, "Hogger", None, [1, 2], {"base64": "AA=="}, "12.50", True, -1001, 1.25],
    "base64": ["AA==", "", "not base64!"],
}
#: Tool names that are not tools (or look like one).
NOT_TOOLS = ["approve_draft", "Remember", "remember\u200b", "remember ", "", "\x00", "\ud800", "r\u0113member",
             "session_resume", "repair_apply", "memory.write", "../remember", "x" * 10_000]


Batch = st.SearchStrategy[list[tuple[str, dict[str, Any]]]]


def _batches(tools: list[Any], query_schema: dict[str, Any], fuzz: SchemaFuzz, mutator: Mutator) -> list[Batch]:
    """For each tool, its calls: a valid call, a valid call carrying hostile text, one of the schema's
    shape with hostile leaves, and MUTANTS mutations of the valid ones (project_query's four times over);
    then calls of tools that do not exist."""
    query = inline_refs(query_schema, query_schema.get("$defs", {}))
    batches: dict[str, Batch] = {}
    for tool in tools:
        schema = dict(tool.input_schema)
        if tool.name == "project_query":  # the tool's schema says only "object": the resource says what
            schema["properties"] = {**schema["properties"], "arguments": query}

        def batch(drawn: tuple[dict[str, Any], dict[str, Any], dict[str, Any], Random], name: str = tool.name
                  ) -> list[tuple[str, dict[str, Any]]]:
            valid, tainted, shaped, rnd = drawn
            mutants = [(name, mutator.mutate(rnd.choice((valid, tainted)), rnd)) for _ in range(MUTANTS)]
            return [(name, valid), (name, tainted), (name, shaped), *mutants]

        batches[tool.name] = st.tuples(fuzz.valid(schema), fuzz.valid(schema, taint=True), fuzz.shaped(schema),
                                       st.randoms(use_true_random=True)).map(batch)
    batches[""] = st.tuples(st.sampled_from(NOT_TOOLS), st.randoms(use_true_random=True)).map(
        lambda drawn: [(drawn[0], {}), (drawn[0], mutator.mutate({"x": 1}, drawn[1]))])
    return [batch for name, batch in batches.items() for _ in range(4 if name == "project_query" else 1)]


def _run(prober: Prober, portal: Any, batches: list[Batch]) -> None:
    """Each batch strategy in turn, for its share of the examples (a batch of calls each), until CASES
    calls were sent or the prober stopped. One hypothesis run per tool, not one choosing the tool: that
    choice would favour the first tools."""
    while prober.fuzzed < CASES and not prober.stopped:
        examples = math.ceil((CASES - prober.fuzzed) / (MUTANTS + 3) / len(batches))
        for batch in batches:
            run_seed = prober.seed = random.randrange(2**32)

            @hypothesis_settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
                                 suppress_health_check=list(HealthCheck))
            @seed(run_seed)
            @given(batch)
            def fuzz(calls: list[tuple[str, dict[str, Any]]]) -> None:
                portal.call(prober.cases, calls)

            fuzz()


@pytest.mark.timeout(scale.pick(ci=600, local=6 * 3600))  # a loaded machine, or 100,000 calls over stdio
@pytest.mark.parametrize("settings", ENGINES if LOCAL else ["sqlite"], indirect=True)
def test_fuzzed_tool_calls_are_answered_with_documented_refusals_and_leak_nothing(
        settings: Settings, tmp_path: Path) -> None:
    world = plant_world(tmp_path, settings.data_dir)
    fuzzed_settings = fuzz_settings(settings)
    before = world.fingerprint()
    app = open_app(fuzzed_settings)
    with closing(app), start_blocking_portal(backend="asyncio") as portal:
        team = make_team(app)
        transport = (over_stdio(settings.data_dir, stdio_environment(fuzzed_settings, team.agent_token),
                                tmp_path / "server.log") if LOCAL else in_memory(app, team.agent))
        with portal.wrap_async_context_manager(transport) as (client, send):
            tools = portal.call(client.list_tools).tools
            resource = portal.call(client.read_resource, SCHEMA_URI).contents[0]
            assert isinstance(resource, TextResourceContents)
            schema = json.loads(resource.text)
            prober = Prober(send, world.forbidden)
            portal.call(prober.prepare)
            fuzz = SchemaFuzz(SAMPLES, world.hostile)
            mutator = Mutator(world.hostile)
            _run(prober, portal, _batches(tools, schema, fuzz, mutator))
    scale.record("MCP fuzz cases", prober.calls)
    if prober.problems:
        pytest.fail(f"{len(prober.problems)} problems in {prober.calls} calls (refusals: {dict(prober.codes)}):\n"
                    f"{prober.report()}")
    assert prober.fuzzed >= CASES
    assert set(prober.per_tool) >= {tool.name for tool in tools}, prober.per_tool
    assert world.fingerprint() == before, "the repository or the research database changed"
