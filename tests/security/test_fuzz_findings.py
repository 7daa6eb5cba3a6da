"""What fuzzing the MCP tools found, each kept as the smallest call that showed it.

* A value nested about a thousand levels deep made every tool answer ``internal``: the schema
  validator's error message repeats the value, and repeating it recursed past Python's limit.
* A lone surrogate in a field *name* inside a free-form object was named, unescaped, in
  ``details.field``: an answer that no JSON transport can write (stdio's writer fails on it).
* ``armarius mcp`` over stdio never answered a request its JSON parser refuses (a lone-surrogate
  escape, which is valid JSON; nesting deeper than about 200 levels, which the SDK's own client
  writes): the SDK drops such a line, and the client waits forever.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from armarius.app import Armarius
from armarius.validation import MAX_NESTING
from tests.e2e.servers import agent_token
from tests.helpers import make_team
from tests.research.conftest import research_app  # noqa: F401  (a fixture used here)
from tests.research.repos import Repo
from tests.security.fuzz_values import nest
from tests.security.fuzz_world import HANG_SECONDS, Reply, in_memory, raw_stdio

pytestmark = [pytest.mark.security, pytest.mark.anyio]


def _refusal(reply: Reply) -> dict[str, Any]:
    reply.text.encode("utf-8")  # what every JSON transport must be able to write
    payload = json.loads(reply.text)
    assert reply.is_error, payload
    return dict(payload)


@pytest.mark.parametrize("as_object", [False, True], ids=["lists", "objects"])
async def test_an_argument_nested_a_thousand_levels_deep_is_invalid_input(app: Armarius, as_object: bool) -> None:
    team = make_team(app)
    async with in_memory(app, team.agent) as (_client, send):
        refused = _refusal(await send("read", {"slug": nest("x", 1100, as_object)}))
        deep_but_fine = _refusal(await send("read", {"slug": nest("x", MAX_NESTING - 2, as_object)}))
    assert refused["code"] == "invalid_input"
    assert refused["details"] == {"field": "slug", "rule": "nesting"}
    assert deep_but_fine["details"] == {"field": "slug", "rule": "type"}  # just within: the usual refusal


async def test_a_project_query_nested_a_thousand_levels_deep_is_invalid_input(
        research_app: tuple[Armarius, Repo]) -> None:  # noqa: F811
    app, _repo = research_app
    team = make_team(app)
    async with in_memory(app, team.agent) as (_client, send):
        refused = _refusal(await send("project_query", {"session": 1, "arguments": nest({}, 5000, True)}))
    assert (refused["code"], refused["details"]["field"]) == ("invalid_input", "arguments")


async def test_a_lone_surrogate_in_a_field_name_is_named_escaped(research_app: tuple[Armarius, Repo]) -> None:  # noqa: F811
    app, _repo = research_app
    team = make_team(app)
    async with in_memory(app, team.agent) as (_client, send):
        in_value = _refusal(await send("project_query", {"session": 1, "arguments": {"k\ud800": "v\ud800"}}))
        in_name = _refusal(await send("project_query", {"session": 1, "arguments": {"kind\udce9": "source.files"}}))
    assert in_value["code"] == in_name["code"] == "invalid_input"
    assert in_value["details"] == {"field": "arguments.k\\ud800", "rule": "unicode"}
    assert in_name["details"] == {"field": "arguments.kind\\udce9", "rule": "unicode"}


async def test_stdio_answers_every_request_its_json_parser_refuses(tmp_path: Path) -> None:
    """Each request gets an answer for its id: a lone-surrogate escape and nesting that pydantic's
    parser refuses are read again (and refused by the tool as usual, like NaN, which both parsers
    take); nesting deeper than any parser here reads is a JSON-RPC parse error; a line with no id at
    all changes nothing for the next."""
    data = tmp_path / "data"
    async with raw_stdio(data, {"ARMARIUS_TOKEN": agent_token(data)}, tmp_path / "server.log") as (process, raw):
        assert process.stdin is not None
        answers = []
        for arguments in ({"query": "lone \ud800 surrogate"}, {"query": nest("x", 210, False)},
                          {"query": nest("x", 900, True)}, {"query": nest("x", 5000, False)},
                          {"query": float("nan")}):
            await process.stdin.send(b'{"jsonrpc": "2.0", "method": "tools/call", "params": \n')  # no id, not JSON
            with anyio.fail_after(HANG_SECONDS):
                answers.append(await raw.request("tools/call", {"name": "recall", "arguments": arguments}))
        with anyio.fail_after(HANG_SECONDS):
            still = await raw.call("whoami", {})
        process.terminate()
    deeper = answers.pop(3)
    refusals = [json.loads(answer["result"]["content"][0]["text"])["details"] for answer in answers]
    assert refusals == [{"field": "query", "rule": "unicode"}, {"field": "query", "rule": "nesting"},
                        {"field": "query", "rule": "nesting"}, {"field": "query", "rule": "type"}]
    assert deeper["error"]["code"] == -32700
    assert json.loads(still.text)["principal"] == "bot"
