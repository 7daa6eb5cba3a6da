"""`armarius connect CLIENT`, run as the real command on a real data folder: each client and transport,
the printed configurations connecting for real, and --write merging into a client's file."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.e2e.servers import ARMARIUS, free_port, running, wait_until_healthy
from tests.e2e.test_demo_mcp import http_client, payload

VALID = [("claude-code", "stdio"), ("claude-code", "http"), ("claude-desktop", "stdio"), ("cursor", "stdio"),
         ("cursor", "http"), ("vscode", "stdio"), ("vscode", "http"), ("http", "http")]


class Armarius:
    """The real command, with no ARMARIUS_* variable of the test's own environment, in a folder of its own."""

    def __init__(self, data_dir: Path, cwd: Path) -> None:
        self.data_dir, self.cwd = data_dir, cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ARMARIUS_")}

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*ARMARIUS, "--data-dir", str(self.data_dir), *args], capture_output=True, text=True,
                              timeout=120, env=self.env, cwd=self.cwd, check=False)

    def json(self, *args: str) -> Any:
        result = self("--json", *args)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def tokens(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = self.json("token", "list")
        return listed


@pytest.fixture(scope="module")
def armarius(tmp_path_factory: pytest.TempPathFactory) -> Armarius:
    root = tmp_path_factory.mktemp("connect")
    command = Armarius(root / "data", root)
    command.json("init")
    command.json("workspace", "add", "alpha")
    command.json("principal", "add", "bot", "--kind", "agent", "--workspace", "alpha", "--role", "editor")
    return command


@pytest.fixture
def project(armarius: Armarius, tmp_path: Path) -> Armarius:
    """The same data folder, run from a fresh project folder (where --write puts project files)."""
    return Armarius(armarius.data_dir, tmp_path)


ISSUE = ("--principal", "bot", "--workspace", "alpha")


@pytest.mark.parametrize(("client", "transport"), VALID)
def test_each_client_and_transport(armarius: Armarius, client: str, transport: str) -> None:
    before = len(armarius.tokens())
    data = armarius.json("connect", client, "--transport", transport, *ISSUE)
    token = _token_of(data)
    assert token.startswith("arm_")
    assert (data["client"], data["transport"], data["principal"], data["workspace"], data["issued"]) == (
        client, transport, "bot", "alpha", True)
    assert len(armarius.tokens()) == before + 1
    assert armarius.tokens()[-1]["label"] == f"connect {client}"
    python, data_dir = ARMARIUS[0], str(armarius.data_dir)
    stdio = {"command": python, "args": ["-m", "armarius", "--data-dir", data_dir, "mcp"],
             "env": {"ARMARIUS_TOKEN": token}}
    url = "http://127.0.0.1:8765/mcp"
    http = {"url": url, "headers": {"Authorization": f"Bearer {token}"}}
    entry = stdio if transport == "stdio" else http
    if client == "http":
        assert (data["url"], data["headers"]) == (url, http["headers"])
    elif client == "vscode":
        assert data["file"] == {"servers": {"armarius": {"type": transport, **entry}}}
    elif client == "claude-code":
        assert data["file"] == {"mcpServers": {"armarius": {"type": transport, **entry}}}
        expected = (["claude", "mcp", "add", "--transport", "http", "armarius", url, "--header",
                     f"Authorization: Bearer {token}"] if transport == "http" else
                    ["claude", "mcp", "add", "armarius", "--env", f"ARMARIUS_TOKEN={token}", "--", python, "-m",
                     "armarius", "--data-dir", data_dir, "mcp"])
        assert shlex.split(data["command"]) == expected
    else:
        assert data["file"] == {"mcpServers": {"armarius": entry}}
    # The text output shows the same configuration.
    text = armarius("connect", client, "--transport", transport, *ISSUE)
    assert text.returncode == 0, text.stderr
    assert text.stderr == ""
    assert "Bearer arm_" in text.stdout if transport == "http" else "ARMARIUS_TOKEN" in text.stdout
    if client == "claude-code":
        assert "claude mcp add" in text.stdout
    assert (f"MCP at {url}" in text.stdout) == (transport == "http")


def _token_of(data: dict[str, Any]) -> str:
    tokens = set(re.findall(r"arm_[A-Za-z0-9_-]+", json.dumps(data)))
    assert len(tokens) == 1, tokens
    return tokens.pop()


def test_the_default_transport_and_the_ones_a_client_cannot_use(armarius: Armarius) -> None:
    assert armarius.json("connect", "cursor", *ISSUE)["transport"] == "stdio"
    assert armarius.json("connect", "http", *ISSUE)["transport"] == "http"
    before = armarius.tokens()
    desktop = armarius("connect", "claude-desktop", "--transport", "http", *ISSUE)
    assert desktop.returncode == 3
    assert "Claude Desktop reads only stdio servers" in desktop.stderr
    generic = armarius("connect", "http", "--transport", "stdio", *ISSUE)
    assert generic.returncode == 3
    missing = armarius("connect", "cursor")
    assert missing.returncode == 2
    assert "--principal and --workspace" in missing.stderr
    assert armarius.tokens() == before  # nothing was issued by a refused command


def test_reusing_a_token_issues_none_and_a_bad_token_is_refused(armarius: Armarius) -> None:
    token = armarius.json("token", "issue", "bot", "--workspace", "alpha")["token"]
    before = armarius.tokens()
    data = armarius.json("connect", "cursor", "--transport", "http", "--token", token)
    assert data["issued"] is False
    assert data["file"]["mcpServers"]["armarius"]["headers"]["Authorization"] == f"Bearer {token}"
    assert (data["principal"], data["workspace"]) == ("bot", "alpha")
    assert [t["id"] for t in armarius.tokens()] == [t["id"] for t in before]
    wrong = armarius("connect", "cursor", "--token", "arm_not-a-real-token")
    assert wrong.returncode == 4
    assert "arm_not-a-real-token" not in wrong.stderr


def test_the_token_is_in_no_log_nor_the_audit_trail(armarius: Armarius) -> None:
    result = armarius("connect", "vscode", "--transport", "http", *ISSUE)
    token = result.stdout.split("Bearer ", 1)[1].split('"', 1)[0]
    assert token.startswith("arm_")
    assert result.stderr == ""
    audit = armarius("audit", "tail", "--limit", "100").stdout + armarius("token", "list").stdout
    assert token not in audit
    assert "connect vscode" in armarius("token", "list").stdout


# The printed configurations connect for real -----------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("client", ["claude-desktop", "cursor", "vscode"])
async def test_the_printed_stdio_configuration_starts_armarius_mcp(armarius: Armarius, client: str) -> None:
    data = armarius.json("connect", client, "--transport", "stdio", *ISSUE)
    config = data["file"][data["key"]]["armarius"]
    parameters = StdioServerParameters(command=config["command"], args=config["args"], env=config["env"])
    async with Client(parameters) as client_session:
        tools = {tool.name for tool in (await client_session.list_tools()).tools}
        whoami = payload(await client_session.call_tool("whoami", {}))
    assert {"whoami", "workspace_info"} <= tools
    assert (whoami["principal"], whoami["workspace"]) == ("bot", "alpha")


@pytest.mark.anyio
async def test_the_printed_claude_code_command_line_starts_armarius_mcp(armarius: Armarius) -> None:
    """What `claude mcp add` would record: the command after `--`, with the --env variable."""
    words = shlex.split(armarius.json("connect", "claude-code", *ISSUE)["command"])
    separator = words.index("--")
    variable, value = words[words.index("--env") + 1].split("=", 1)
    parameters = StdioServerParameters(command=words[separator + 1], args=words[separator + 2:],
                                       env={variable: value})
    async with Client(parameters) as client_session:
        whoami = payload(await client_session.call_tool("whoami", {}))
    assert whoami["principal"] == "bot"


@pytest.fixture
def served(armarius: Armarius) -> Iterator[str]:
    port = free_port()
    with running(["--data-dir", str(armarius.data_dir), "serve", "--port", str(port)]) as process:
        wait_until_healthy(f"http://127.0.0.1:{port}", process)
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.anyio
async def test_the_printed_http_configuration_connects(armarius: Armarius, served: str) -> None:
    data = armarius.json("connect", "http", "--url", served, *ISSUE)
    token = data["headers"]["Authorization"].removeprefix("Bearer ")
    async with http_client(data["url"], token) as client_session:
        whoami = payload(await client_session.call_tool("whoami", {}))
    assert whoami["principal"] == "bot"


# --write ------------------------------------------------------------------------------------------------


def test_write_merges_keeping_other_servers_after_a_backup(project: Armarius) -> None:
    target = project.cwd / ".cursor" / "mcp.json"
    target.parent.mkdir()
    original = json.dumps({"mcpServers": {"other": {"command": "other-server", "args": ["--x"]}},
                           "theme": "dark"}, indent=4)
    target.write_text(original)
    target.chmod(0o640)
    data = project.json("connect", "cursor", "--transport", "http", *ISSUE, "--write")
    assert data["written"] == {"path": str(target), "backup": str(target) + ".bak", "replaced": False}
    assert Path(str(target) + ".bak").read_text() == original
    merged = json.loads(target.read_text())
    assert merged["theme"] == "dark"
    assert merged["mcpServers"]["other"] == {"command": "other-server", "args": ["--x"]}
    assert merged["mcpServers"]["armarius"] == data["file"]["mcpServers"]["armarius"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    # Again: the entry is replaced, the other kept, the backup is the previous file.
    previous = target.read_text()
    text = project("connect", "cursor", "--transport", "stdio", *ISSUE, "--write")
    assert text.returncode == 0, text.stderr
    assert f"Replaced server 'armarius' in {target}" in text.stdout
    assert "arm_" not in text.stdout  # the token is in the file, not on the screen
    assert Path(str(target) + ".bak").read_text() == previous
    again = json.loads(target.read_text())
    assert set(again["mcpServers"]) == {"other", "armarius"}
    assert again["mcpServers"]["armarius"]["command"] == ARMARIUS[0]
    assert not list(target.parent.glob(".*.tmp"))


@pytest.mark.parametrize(("client", "path", "key"), [("vscode", ".vscode/mcp.json", "servers"),
                                                     ("claude-code", ".mcp.json", "mcpServers")])
def test_write_creates_the_clients_usual_file_for_its_owner_only(project: Armarius, client: str, path: str,
                                                                 key: str) -> None:
    data = project.json("connect", client, "--transport", "http", *ISSUE, "--write")
    target = project.cwd / path
    assert data["written"] == {"path": str(target), "backup": None, "replaced": False}
    assert json.loads(target.read_text()) == {key: {"armarius": data["file"][key]["armarius"]}}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_write_through_a_link_updates_the_file_it_names_and_keeps_the_link(project: Armarius) -> None:
    """Dotfiles are often links into a repository of them: the link stays, its file gets the server."""
    dotfiles = project.cwd / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "mcp.json").write_text('{"mcpServers": {}, "theme": "dark"}')
    link = project.cwd / ".cursor" / "mcp.json"
    link.parent.mkdir()
    link.symlink_to(Path("..") / "dotfiles" / "mcp.json")
    data = project.json("connect", "cursor", "--transport", "http", *ISSUE, "--write")
    assert link.is_symlink()
    target = (dotfiles / "mcp.json").resolve()
    assert data["written"] == {"path": str(target), "backup": str(target) + ".bak", "replaced": False}
    assert json.loads(target.read_text())["theme"] == "dark"
    assert "armarius" in json.loads(link.read_text())["mcpServers"]
    assert sorted(path.name for path in link.parent.iterdir()) == ["mcp.json"]


def test_write_warns_when_git_would_commit_the_token(project: Armarius) -> None:
    subprocess.run(["git", "init", "-q", str(project.cwd)], check=True)
    data = project.json("connect", "claude-code", *ISSUE, "--write")
    assert "does not ignore it, and it holds the token" in data["warning"]
    text = project("connect", "claude-code", *ISSUE, "--write")
    assert text.returncode == 0, text.stderr
    assert f"Warning: {project.cwd / '.mcp.json'} is in a git work tree" in text.stdout
    assert "(issued now; it is in the file and shown nowhere else)" in text.stdout
    (project.cwd / ".gitignore").write_text(".mcp.json\n")
    assert "warning" not in project.json("connect", "claude-code", *ISSUE, "--write")
    # Outside any work tree there is nothing to warn of (the other tests' folders).
    assert "warning" not in project.json("connect", "cursor", *ISSUE, "--write",
                                          str(project.cwd.parent / f"{project.cwd.name}-outside" / "mcp.json"))

def test_write_to_a_named_path_and_the_generic_client_has_none(project: Armarius) -> None:
    target = project.cwd / "elsewhere" / "claude_desktop_config.json"
    data = project.json("connect", "claude-desktop", *ISSUE, "--write", str(target))
    assert json.loads(target.read_text())["mcpServers"]["armarius"]["env"] == data["file"]["mcpServers"][
        "armarius"]["env"]
    refused = project("connect", "http", *ISSUE, "--write")
    assert refused.returncode == 3
    assert "no configuration file of its own" in refused.stderr


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"mcpServers": ["x"]}', "\xff\xfe"])
def test_write_refuses_a_file_that_is_not_a_json_object_changing_nothing(project: Armarius, content: str) -> None:
    target = project.cwd / ".cursor" / "mcp.json"
    target.parent.mkdir()
    target.write_bytes(content.encode("latin-1"))
    before = project.tokens()
    refused = project("connect", "cursor", *ISSUE, "--write")
    assert refused.returncode == 3, refused.stderr
    assert "nothing was changed" in refused.stderr
    assert target.read_bytes() == content.encode("latin-1")
    assert sorted(p.name for p in target.parent.iterdir()) == ["mcp.json"]
    assert project.tokens() == before  # refused before a token was issued
