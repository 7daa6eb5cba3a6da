"""MCP over stdio: on pipes the event loop reads the lines and writes the answers itself
(armarius.mcp.stdio); anything else goes through the SDK's transport. Both answer every request, and a
line over the request limit is answered and skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from armarius.config import Settings
from armarius.mcp.limits import request_body_max_bytes
from tests.e2e.servers import agent_token
from tests.security.fuzz_world import HANG_SECONDS, dumps_escaped, raw_stdio

pytestmark = pytest.mark.anyio

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}


def text_of(answer: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(answer["result"]["content"][0]["text"]))


async def test_a_line_over_the_limit_is_answered_for_its_id_and_the_next_is_read(tmp_path: Path) -> None:
    """Through pipes, as MCP clients start a server: a request one byte over the HTTP limit is refused
    for its id without being read whole; the requests after it are answered, those sent just before
    stdin ends too (the last without a line end), and then the server ends."""
    data = tmp_path / "data"
    token = agent_token(data)
    limit = request_body_max_bytes(Settings(data_dir=data))
    async with raw_stdio(data, {"ARMARIUS_TOKEN": token}, tmp_path / "server.log") as (process, raw):
        assert process.stdin is not None
        frame = json.dumps(call(77, "whoami", {"pad": ""})).encode()
        padded = frame.replace(b'"pad": ""', b'"pad": "' + b"x" * (limit + 1 - len(frame)) + b'"')
        assert len(padded) == limit + 1
        with anyio.fail_after(HANG_SECONDS):
            await process.stdin.send(padded + b"\n")
            refused = await raw.read()
            after = await raw.call("whoami", {})
            last = [call(number, "whoami", {}) if number % 2 else call(number, "recall", {"query": "deploy"})
                    for number in range(78, 100)]
            await process.stdin.send("\n".join(map(json.dumps, last)).encode())  # the last without a line end
            await process.stdin.aclose()
            answered = {answer["id"]: answer for answer in [await raw.read() for _ in last]}
            assert await process.wait() == 0
    assert refused["id"] == 77
    assert refused["error"]["code"] == -32600
    assert str(limit) in refused["error"]["message"]
    assert json.loads(after.text)["principal"] == "bot"
    assert set(answered) == set(range(78, 100))
    assert text_of(answered[79])["principal"] == "bot"
    assert "results" in text_of(answered[78])


#: JSON that is no JSON-RPC message, and the id each is answered for (a batch: none; MCP has no batches).
NOT_JSON_RPC = [
    (b'[{"jsonrpc":"2.0","id":11,"method":"ping"},{"jsonrpc":"2.0","id":12,"method":"ping"}]', None),
    (b'{"jsonrpc":"1.0","id":19,"method":"ping"}', 19),
    (b'{"jsonrpc":"2.0","id":20,"method":"tools/call","params":[1,2]}', 20),
    (b'{"jsonrpc":"2.0","id":21,"method":5}', 21),
    (b'{"jsonrpc":"2.0","id":"x","method":"ping","params":"none"}', "x"),
]


async def test_json_that_is_no_json_rpc_message_is_answered_through_pipes(tmp_path: Path) -> None:
    """Every line gets an answer: JSON that is no JSON-RPC message is answered with an invalid-request error
    for its id (the SDK would drop it, and the client wait forever), and the next request is read."""
    data = tmp_path / "data"
    async with raw_stdio(data, {"ARMARIUS_TOKEN": agent_token(data)}, tmp_path / "server.log") as (process, raw):
        assert process.stdin is not None
        with anyio.fail_after(HANG_SECONDS):
            answers = []
            for line, _ in NOT_JSON_RPC:
                await process.stdin.send(line + b"\n")
                answers.append(await raw.read())
            after = await raw.call("whoami", {})
    assert [(answer.get("id"), answer["error"]["code"]) for answer in answers] == [
        (expected, -32600) for _, expected in NOT_JSON_RPC]
    assert json.loads(after.text)["principal"] == "bot"


def served_from_a_file(tmp_path: Path, lines: list[bytes]) -> list[dict[str, Any]]:
    """The answers of ``armarius mcp`` to these request lines, with stdin and stdout as files (no pipes for the
    event loop to wait on: the SDK's transport), once it ended at the end of stdin."""
    data = tmp_path / "data"
    requests, answers = tmp_path / "requests.jsonl", tmp_path / "answers.jsonl"
    requests.write_bytes(b"".join(line + b"\n" for line in lines))
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        done = subprocess.run([sys.executable, "-m", "armarius", "--data-dir", str(data), "mcp"], stdin=stdin,
                              stdout=stdout, stderr=subprocess.PIPE,
                              env={**os.environ, "ARMARIUS_TOKEN": agent_token(data)}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in answers.read_text().splitlines()]


def test_json_that_is_no_json_rpc_message_is_answered_through_the_sdks_transport(tmp_path: Path) -> None:
    answered = served_from_a_file(tmp_path, [json.dumps(INITIALIZE).encode(), json.dumps(INITIALIZED).encode(),
                                             *(line for line, _ in NOT_JSON_RPC),
                                             json.dumps(call(2, "whoami", {})).encode()])
    refusals = [(answer.get("id"), answer["error"]["code"]) for answer in answered if "error" in answer]
    assert sorted(refusals, key=str) == sorted(((expected, -32600) for _, expected in NOT_JSON_RPC), key=str)
    assert text_of(next(answer for answer in answered if answer.get("id") == 2))["principal"] == "bot"


def test_requests_from_a_file_are_answered_through_the_sdks_transport(tmp_path: Path) -> None:
    """stdin and stdout as files (no pipes for the event loop to wait on): every request is answered
    before the server ends at the end of stdin, a line pydantic's parser refuses (a lone-surrogate
    escape) too."""
    more = [call(number, "recall", {"query": f"deploy host {number}"}) for number in range(4, 40)]
    lines = [INITIALIZE, INITIALIZED, call(2, "whoami", {}), call(3, "recall", {"query": "lone \ud800 surrogate"}),
             *more]
    by_id = {answer["id"]: answer
             for answer in served_from_a_file(tmp_path, [dumps_escaped(line).encode("ascii") for line in lines])}
    assert set(by_id) == set(range(1, 40))
    assert text_of(by_id[2])["principal"] == "bot"
    assert text_of(by_id[3])["details"] == {"field": "query", "rule": "unicode"}


PROBE = """
import os, sys
import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from armarius.mcp.stdio import stdio_streams

async def main():
    blocking = os.get_blocking(0), os.get_blocking(1)
    async with stdio_streams(200) as (lines, answers):
        print("stray", flush=True)
        print("stdin while serving:", os.read(0, 10), file=sys.stderr, flush=True)
        for _ in range(2):
            item = await lines.receive()
            await answers.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=item.message.id,
                                                                    result={"seen": True})))
    restored = (os.get_blocking(0), os.get_blocking(1)) == blocking
    print("restored:", restored, file=sys.stderr)
    print("the wire again", flush=True)

anyio.run(main)
"""


def test_while_serving_fd_0_reads_nothing_and_fd_1_writes_to_stderr(tmp_path: Path) -> None:
    """The transport alone, in a process whose stdin and stdout are pipes: a stray print goes to stderr
    and reading fd 0 gives nothing while it serves; a line over its limit (here 200 bytes) is answered
    with an error for its id; afterwards fd 0 and fd 1 are the wire again, as blocking as before."""
    long_line = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"pad": "x" * 300}})
    requests = [json.dumps({"jsonrpc": "2.0", "id": 4, "method": "ping"}), long_line,
                json.dumps({"jsonrpc": "2.0", "id": 6, "method": "ping"})]
    done = subprocess.run([sys.executable, "-c", PROBE], input="".join(line + "\n" for line in requests),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert [json.loads(line)["id"] for line in out[:3]] == [4, 5, 6]
    assert json.loads(out[1])["error"]["code"] == -32600
    assert out[3:] == ["the wire again"]
    assert "stray" in done.stderr
    assert "stdin while serving: b''" in done.stderr
    assert "restored: True" in done.stderr
