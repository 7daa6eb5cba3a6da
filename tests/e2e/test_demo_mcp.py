"""The demo command, then the SDK's own MCP client over streamable HTTP and over stdio."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from armarius.auth.directory import TOKEN_RECHECK_SECONDS
from tests.e2e.servers import free_port, read_json_document, run_cli, running, wait_until_healthy
from tests.web.people import post_login

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`armarius demo` on a fresh data folder, serving on a free port."""
    data_dir = tmp_path_factory.mktemp("demo") / ".armarius"
    port = free_port()
    with running(["--json", "--data-dir", str(data_dir), "demo", "--port", str(port)]) as process:
        printed = read_json_document(process.stdout)
        base_url = f"http://127.0.0.1:{port}"
        wait_until_healthy(base_url, process)
        yield {**printed, "base_url": base_url}


@asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP, sending the token as a bearer header."""
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def payload(result: Any) -> Any:
    assert result.content[0].type == "text"
    return json.loads(result.content[0].text)


def test_demo_prints_credentials_once_and_a_client_configuration(demo: dict[str, Any]) -> None:
    assert demo["created"] is True
    assert demo["agent"]["token"].startswith("arm_")
    assert len(demo["admin"]["password"]) >= 16
    assert demo["http"]["mcpServers"]["armarius"]["url"] == demo["url"]
    # The printed web address opens the login page, where the printed password logs the administrator in.
    with httpx.Client(base_url=demo["web"], timeout=10) as browser:
        assert browser.get("/").headers["location"].startswith("/login")
        answer = post_login(browser, demo["admin"]["principal"], demo["admin"]["password"], demo["workspace"])
        assert answer.status_code == 303, answer.text
        assert browser.get("/").status_code == 200
    # A second run on the same folder never shows credentials again.
    again = run_cli("--json", "demo", "--no-serve", data_dir=Path(demo["data_dir"]))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"data_dir": demo["data_dir"], "workspace": "demo", "created": False}
    assert demo["agent"]["token"] not in again.stdout + again.stderr


async def test_streamable_http_with_the_printed_token(demo: dict[str, Any]) -> None:
    async with http_client(demo["url"], demo["agent"]["token"]) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"whoami", "workspace_info"} <= tools
        whoami = payload(await client.call_tool("whoami", {}))
        info = payload(await client.call_tool("workspace_info", {}))
    assert whoami["principal"] == "demo-agent"
    assert whoami["kind"] == "agent"
    assert whoami["role"] == "editor"
    assert whoami["workspace"] == "demo"
    assert "memory.curate" not in whoami["permissions"]
    assert info["workspace"] == "demo"
    assert info["members"] == {"admin": 1, "editor": 1}


async def test_stdio_with_the_printed_configuration(demo: dict[str, Any]) -> None:
    config = demo["stdio"]["mcpServers"]["armarius"]
    parameters = StdioServerParameters(command=config["command"], args=config["args"], env=config["env"])
    async with Client(parameters) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        whoami = payload(await client.call_tool("whoami", {}))
    assert {"whoami", "workspace_info"} <= tools
    assert (whoami["principal"], whoami["workspace"]) == ("demo-agent", "demo")


@pytest.mark.parametrize("header", [None, "Bearer arm_not-a-real-token", "Basic YWRtaW46YWRtaW4=", "Bearer"])
def test_a_wrong_or_missing_token_gets_401_and_nothing_else(demo: dict[str, Any], header: str | None) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if header is not None:
        headers["Authorization"] = header
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    response = httpx.post(demo["url"], json=initialize, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json() == {"error": {
        "code": "unauthenticated", "message": response.json()["error"]["message"], "details": {}}}
    api = httpx.get(f"{demo['base_url']}/api/whoami", headers={"Authorization": header or ""}, timeout=10)
    assert api.status_code == 401


async def test_a_wrong_token_cannot_start_stdio(demo: dict[str, Any]) -> None:
    result = run_cli("mcp", data_dir=Path(demo["data_dir"]), env={"ARMARIUS_TOKEN": "arm_wrong"})
    assert result.returncode == 4
    assert "unauthenticated" in result.stderr
    assert "arm_wrong" not in result.stderr


async def test_the_server_log_never_contains_a_token(demo: dict[str, Any]) -> None:
    token, port = demo["agent"]["token"], free_port()
    with running(["--data-dir", demo["data_dir"], "serve", "--port", str(port)]) as process:
        base_url = f"http://127.0.0.1:{port}"
        wait_until_healthy(base_url, process)
        async with http_client(f"{base_url}/mcp", token) as client:
            await client.call_tool("whoami", {})
            await client.call_tool("no_such_tool", {"token": token})
        with pytest.raises(Exception):  # noqa: B017,PT011  (the SDK reports the 401 in its own error types)
            async with http_client(f"{base_url}/mcp", "arm_forged-token-value") as client:
                await client.list_tools()
        process.terminate()
        output, errors = process.communicate(timeout=15)
    assert "POST /mcp" in output + errors  # the access log ran, and saw the requests
    assert token not in output + errors
    assert "arm_forged-token-value" not in output + errors


async def test_stdio_refuses_calls_once_the_token_is_revoked(demo: dict[str, Any]) -> None:
    data_dir = Path(demo["data_dir"])
    issued = json.loads(run_cli("--json", "token", "issue", "demo-agent", "--workspace", "demo",
                                data_dir=data_dir).stdout)
    parameters = StdioServerParameters(command=sys.executable, args=["-m", "armarius", "--data-dir", str(data_dir),
                                       "mcp"], env={"ARMARIUS_TOKEN": issued["token"]})
    async with Client(parameters) as client:
        assert not (await client.call_tool("whoami", {})).is_error
        assert run_cli("token", "revoke", str(issued["id"]), data_dir=data_dir).returncode == 0
        # Another process revoked it: the server's check of the token may answer for up to a second more.
        deadline = time.monotonic() + TOKEN_RECHECK_SECONDS + 10
        while not (refused := await client.call_tool("whoami", {})).is_error and time.monotonic() < deadline:
            pass
        assert refused.is_error
        assert json.loads(refused.content[0].text)["code"] == "unauthenticated"
        after = await client.call_tool("read", {"slug": "anything"})  # and every call after it
        with pytest.raises(MCPError) as listing:  # a request that is no tool call: a JSON-RPC error with a code
            await client.list_tools()
    assert json.loads(after.content[0].text)["code"] == "unauthenticated"
    assert (listing.value.code, listing.value.data["code"]) == (-32600, "unauthenticated")
    assert listing.value.message == json.loads(after.content[0].text)["message"]
