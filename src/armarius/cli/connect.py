"""`armarius connect CLIENT`: an MCP client's configuration for this installation, printed or merged
into the client's own file.

The configuration builders here are also what `armarius demo` prints (one place builds them).
"""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from armarius.cli.context import CliContext, pass_cli, user_config_folder
from armarius.errors import InvalidInput
from armarius.files import write_atomically

SERVER_NAME = "armarius"
CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "http")
TRANSPORTS = ("stdio", "http")


def base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


# Builders ------------------------------------------------------------------------------------------


def stdio_entry(data_dir: Path | str, token: str) -> dict[str, Any]:
    """How a client starts `armarius mcp` itself: this Python's absolute path, so it runs as printed."""
    return {"command": sys.executable, "args": ["-m", "armarius", "--data-dir", str(data_dir), "mcp"],
            "env": {"ARMARIUS_TOKEN": token}}


def http_entry(url: str, token: str) -> dict[str, Any]:
    return {"url": url, "headers": {"Authorization": f"Bearer {token}"}}


def claude_code_http(url: str, token: str, name: str = SERVER_NAME) -> str:
    return shlex.join(["claude", "mcp", "add", "--transport", "http", name, url,
                       "--header", f"Authorization: Bearer {token}"])


def claude_code_stdio(data_dir: Path | str, token: str, name: str = SERVER_NAME) -> str:
    # The name comes before --env: claude's --env takes several values and would swallow it.
    entry = stdio_entry(data_dir, token)
    return shlex.join(["claude", "mcp", "add", name, "--env", f"ARMARIUS_TOKEN={token}", "--",
                       entry["command"], *entry["args"]])


def client_config(client: str, transport: str, *, url: str, data_dir: Path | str, token: str,
                  name: str = SERVER_NAME) -> dict[str, Any]:
    """What the client needs: ``file`` (the JSON its configuration file holds, under ``key``) and, for
    Claude Code, ``command`` (the `claude mcp add` line); for the generic client, ``url`` and ``headers``."""
    entry = stdio_entry(data_dir, token) if transport == "stdio" else http_entry(url, token)
    if client == "http":
        return {"url": url, "headers": entry["headers"]}
    if client == "vscode":
        return {"key": "servers", "file": {"servers": {name: {"type": transport, **entry}}}}
    if client == "claude-code":
        typed = {"type": transport, **entry}
        command = claude_code_http(url, token, name) if transport == "http" else claude_code_stdio(data_dir, token,
                                                                                                   name)
        return {"command": command, "key": "mcpServers", "file": {"mcpServers": {name: typed}}}
    return {"key": "mcpServers", "file": {"mcpServers": {name: entry}}}


def default_path(client: str) -> Path | None:
    """Where the client conventionally reads its configuration (project files are in the current folder)."""
    project = {"cursor": Path(".cursor") / "mcp.json", "vscode": Path(".vscode") / "mcp.json",
               "claude-code": Path(".mcp.json")}
    if client != "claude-desktop":
        return project.get(client)
    return user_config_folder() / "Claude" / "claude_desktop_config.json"


# Writing ---------------------------------------------------------------------------------------------


def read_config(path: Path, key: str) -> tuple[dict[str, Any], bytes | None]:
    """The client file's JSON object (empty when there is no file) and its bytes; a file that is not a
    JSON object, or whose ``key`` is not an object, is refused before anything is issued or written."""
    try:
        original: bytes | None = path.read_bytes()
    except FileNotFoundError:
        original = None
    except OSError as error:
        raise InvalidInput(f"Cannot read {path}: {error.strerror}; nothing was changed.", field="write") from None
    document: Any = {}
    if original is not None and original.strip():
        try:
            document = json.loads(original)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise InvalidInput(f"{path} is not valid JSON ({error}); nothing was changed. Fix or move the file, "
                               "or leave out --write and paste the printed configuration.", field="write") from None
    if not isinstance(document, dict):
        raise InvalidInput(f"{path} holds JSON that is not an object; nothing was changed.", field="write")
    if not isinstance(document.get(key, {}), dict):
        raise InvalidInput(f"{path}: {key!r} is not an object; nothing was changed.", field="write")
    return document, original


def merge_into(path: Path, document: dict[str, Any], original: bytes | None, key: str, name: str,
               entry: dict[str, Any]) -> dict[str, Any]:
    """Put the ``name`` server into the document's ``key`` object, keeping everything else, and write it
    atomically, the previous file first copied to ``<file>.bak``."""
    servers = document.setdefault(key, {})
    replaced = name in servers
    servers[name] = entry
    backup = None
    mode = stat.S_IMODE(path.stat().st_mode) if original is not None else 0o600
    if original is not None:
        backup = path.with_name(path.name + ".bak")
        write_atomically(backup, original, mode=mode)
    # The file holds a token: a new one is for its owner only, from its first byte on.
    write_atomically(path, (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode(), mode=mode)
    return {"path": str(path), "backup": None if backup is None else str(backup), "replaced": replaced}


def config_file(path: Path) -> Path:
    """Where ``path`` (absolute) is written: the file a symbolic link names (dotfiles are often links into
    a repository of them), so that the link stays a link and its file gets the server."""
    return path.resolve() if path.is_symlink() else path


def unignored_in_git(path: Path) -> bool:
    """Whether ``path`` lies in a git work tree that does not ignore it: a commit would take the token along.
    False outside a work tree, and where git cannot tell (not installed)."""
    try:
        checked = subprocess.run(["git", "-C", str(path.parent), "check-ignore", "-q", "--", path.name],
                                 capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return checked.returncode == 1  # 0: ignored; 128: no work tree here


# The command -----------------------------------------------------------------------------------------


@click.command()
@click.argument("client", type=click.Choice(CLIENTS))
@click.option("--transport", type=click.Choice(TRANSPORTS),
              help="stdio: the client starts `armarius mcp` itself; http: it connects to `armarius serve`. "
                   "Default: http for the generic client, stdio for the others.")
@click.option("--token", envvar="ARMARIUS_TOKEN", show_envvar=True,
              help="Reuse this agent token instead of issuing one (prefer the environment variable).")
@click.option("--principal", help="The agent principal to issue a token for (without --token).")
@click.option("--workspace", help="The workspace the issued token acts in (without --token).")
@click.option("--url", help="The MCP address for http (default from settings: http://HOST:PORT/mcp).")
@click.option("--name", default=SERVER_NAME, show_default=True, help="The server's name in the client.")
@click.option("--write", "write", is_flag=False, flag_value="", default=None, metavar="[PATH]",
              help="Merge into the client's configuration file (PATH, or the client's usual one), after "
                   "writing PATH.bak.")
@pass_cli
def connect(cli: CliContext, client: str, transport: str | None, token: str | None, principal: str | None,
            workspace: str | None, url: str | None, name: str, write: str | None) -> None:
    """Configure an MCP client: Claude Code, Claude Desktop, Cursor, VS Code, or a generic HTTP client.

    Without --token, a token is issued for --principal in --workspace (as `armarius token issue`)."""
    transport = transport or ("http" if client == "http" else "stdio")
    if client == "claude-desktop" and transport == "http":
        raise InvalidInput("Claude Desktop reads only stdio servers from claude_desktop_config.json; remote "
                           "(HTTP) servers are added in its Settings > Connectors instead. Use --transport stdio.",
                           field="transport")
    if client == "http" and transport == "stdio":
        raise InvalidInput("The generic client is streamable HTTP; for stdio name a client, or run the "
                           "command of `armarius connect cursor --transport stdio`.", field="transport")
    if not name.strip():
        raise InvalidInput("--name must not be blank.", field="name")
    target: Path | None = None
    if write is not None:
        target = Path(write) if write else default_path(client)
        target = None if target is None else config_file(target.absolute())
        if target is None:
            raise InvalidInput("The generic client has no configuration file of its own; give --write PATH "
                               "only for a named client, or copy the printed URL and header.", field="write")
    key = "servers" if client == "vscode" else "mcpServers"
    existing = None if target is None else read_config(target, key)
    settings = cli.settings
    url = url or base_url(settings.host, settings.port) + "/mcp"
    with cli.app() as app:
        if token is not None:
            actor = app.directory.authenticate_token(token)  # refuse a token that would not work
            who = {"principal": actor.principal, "workspace": actor.workspace, "token_id": actor.token_id,
                   "issued": False}
        else:
            if not principal or not workspace:
                raise click.UsageError("give --principal and --workspace to issue a token, or --token to reuse one")
            issued = app.directory.issue_token(principal, workspace=workspace, label=f"connect {client}",
                                               by=cli.operator)
            token = issued.token
            who = {"principal": issued.principal, "workspace": issued.workspace, "token_id": issued.id,
                   "issued": True}
    config = client_config(client, transport, url=url, data_dir=settings.data_dir, token=token, name=name)
    data: dict[str, Any] = {"client": client, "transport": transport, "name": name, **who, **config}
    if transport == "http":
        data["url"] = url
    written = None
    if target is not None and existing is not None:
        written = merge_into(target, *existing, key, name, config["file"][key][name])
        data["written"] = written
        if unignored_in_git(target):
            data["warning"] = (f"{target} is in a git work tree that does not ignore it, and it holds the token: "
                               "add it to .gitignore before committing (or revoke the token if it was).")
    cli.emit(data, text=_text(data, written, url=url))


def _text(data: dict[str, Any], written: dict[str, Any] | None, *, url: str) -> str:
    where = "the file" if written is not None else "the configuration below"
    who = (f"Token {data['token_id']} for {data['principal']} in {data['workspace']}"
           + (f" (issued now; it is in {where} and shown nowhere else)." if data["issued"] else "."))
    lines = [who]
    if data["transport"] == "http":
        lines.append(f"Over HTTP the server must be running: `armarius serve` (MCP at {url}).")
    if written is not None:
        action = "Replaced" if written["replaced"] else "Added"
        lines.append(f"{action} server {data['name']!r} in {written['path']}"
                     + (f" (the previous file is in {written['backup']})." if written["backup"] else "."))
        if "warning" in data:
            lines.append(f"Warning: {data['warning']}")
        return "\n".join(lines)
    client = data["client"]
    if client == "http":
        lines += ["", f"URL:    {data['url']}", f"Header: Authorization: {data['headers']['Authorization']}"]
    else:
        if client == "claude-code":
            lines += ["", "Run:", f"  {data['command']}", "", "Or put this in .mcp.json (project scope):"]
        else:
            where = {"claude-desktop": "claude_desktop_config.json", "cursor": ".cursor/mcp.json",
                     "vscode": ".vscode/mcp.json"}[client]
            lines += ["", f"Put this in {where}:"]
        lines.append(json.dumps(data["file"], indent=2, ensure_ascii=False))
    return "\n".join(lines)
