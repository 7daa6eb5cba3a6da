"""`armarius init|serve|mcp|demo`."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import click

from armarius.app import Armarius, initialize
from armarius.auth.permissions import Kind, Role
from armarius.auth.secrets import new_password
from armarius.cli.context import CliContext, pass_cli
from armarius.config import write_settings_file
from armarius.errors import NotFound
from armarius.store.schema import latest_version

DEMO_WORKSPACE, DEMO_ADMIN, DEMO_AGENT = "demo", "admin", "demo-agent"


@click.command()
@pass_cli
def init(cli: CliContext) -> None:
    """Create the data folder and create or migrate the database."""
    settings = cli.settings
    if not settings.config_file.exists():
        write_settings_file(settings)
    applied = initialize(settings)
    version = latest_version("sqlite" if settings.database_url is None else "postgresql")
    cli.emit(
        {"data_dir": str(settings.data_dir), "schema_version": version, "applied": applied},
        text=f"Data folder {settings.data_dir}: schema at version {version}"
        + (f" (applied {', '.join(map(str, applied))})." if applied else " (already up to date)."),
    )


def _serve_http(app: Armarius, host: str | None, port: int | None) -> None:
    import uvicorn

    from armarius.web.app import create_web_app

    uvicorn.run(create_web_app(app), host=host or app.settings.host, port=port or app.settings.port,
                log_level="info", server_header=False)


@click.command()
@click.option("--host", help="Address to listen on (default from settings: 127.0.0.1).")
@click.option("--port", type=int, help="Port (default from settings: 8765).")
@pass_cli
def serve(cli: CliContext, host: str | None, port: int | None) -> None:
    """Serve MCP over streamable HTTP at /mcp, the JSON API at /api and /healthz."""
    with cli.app() as app:
        _serve_http(app, host, port)


@click.command()
@click.option("--token", envvar="ARMARIUS_TOKEN", required=True, show_envvar=True,
              help="The agent token the connection acts as (prefer the environment variable).")
@pass_cli
def mcp(cli: CliContext, token: str) -> None:
    """Serve MCP over stdio for one agent principal."""
    from armarius.mcp.stdio import serve_stdio

    with cli.app() as app:
        anyio.run(serve_stdio, app, token)


@click.command()
@click.option("--host", help="Address to listen on.")
@click.option("--port", type=int, help="Port to listen on.")
@click.option("--no-serve", is_flag=True, help="Set up and print, but do not start the server.")
@pass_cli
def demo(cli: CliContext, host: str | None, port: int | None, no_serve: bool) -> None:
    """Set up a demo workspace on the embedded SQLite file, print credentials, and serve."""
    settings = cli.settings
    if not settings.config_file.exists():
        write_settings_file(settings)
    initialize(settings)
    with cli.app() as app:
        try:
            app.directory.workspace(DEMO_WORKSPACE)
            created = None
        except NotFound:
            created = _create_demo(cli, app)
        url = f"http://{host or settings.host}:{port or settings.port}/mcp"
        if created is None:
            cli.emit({"data_dir": str(settings.data_dir), "workspace": DEMO_WORKSPACE, "created": False}, text=(
                f"The demo workspace exists already in {settings.data_dir}; its credentials were shown once.\n"
                f"  New agent token:  armarius --data-dir {settings.data_dir} token issue {DEMO_AGENT} "
                f"--workspace {DEMO_WORKSPACE}\n"
                f"  New admin password: armarius --data-dir {settings.data_dir} principal set-password {DEMO_ADMIN}"
            ))
        else:
            password, token = created
            data = _demo_connection(cli, url, password, token)
            cli.emit(data, text=_demo_instructions(data))
        if not no_serve:
            click.echo(f"\nServing on {url.removesuffix('/mcp')} (Ctrl-C to stop).", err=True)
            _serve_http(app, host, port)


def _create_demo(cli: CliContext, app: Armarius) -> tuple[str, str]:
    directory, by = app.directory, cli.operator
    directory.create_workspace(DEMO_WORKSPACE, by=by)
    password = new_password()
    directory.add_principal(DEMO_ADMIN, Kind.HUMAN, workspace=DEMO_WORKSPACE, role=Role.ADMIN, by=by,
                            password=password)
    directory.add_principal(DEMO_AGENT, Kind.AGENT, workspace=DEMO_WORKSPACE, role=Role.EDITOR, by=by)
    issued = directory.issue_token(DEMO_AGENT, workspace=DEMO_WORKSPACE, label="demo", by=by)
    return password, issued.token


def _demo_connection(cli: CliContext, url: str, password: str, token: str) -> dict[str, Any]:
    data_dir = str(cli.settings.data_dir)
    return {
        "data_dir": data_dir, "workspace": DEMO_WORKSPACE, "created": True, "url": url,
        "admin": {"principal": DEMO_ADMIN, "password": password},
        "agent": {"principal": DEMO_AGENT, "role": Role.EDITOR.value, "token": token},
        "claude_code": f'claude mcp add --transport http armarius {url} --header "Authorization: Bearer {token}"',
        "stdio": {"mcpServers": {"armarius": {
            "command": sys.executable, "args": ["-m", "armarius", "--data-dir", data_dir, "mcp"],
            "env": {"ARMARIUS_TOKEN": token},
        }}},
        "http": {"mcpServers": {"armarius": {"url": url, "headers": {"Authorization": f"Bearer {token}"}}}},
    }


def _demo_instructions(data: dict[str, Any]) -> str:
    def block(config: Any) -> list[str]:
        return ["    " + line for line in json.dumps(config, indent=2).splitlines()]

    return "\n".join([
        f"Armarius demo in {data['data_dir']} (embedded SQLite), workspace '{data['workspace']}'.",
        "These credentials are shown once; store them now.",
        "",
        f"Human login (administrator): principal '{DEMO_ADMIN}', password: {data['admin']['password']}",
        f"Agent token for '{DEMO_AGENT}' (editor): {data['agent']['token']}",
        "",
        "Connect an agent:",
        "  Claude Code (streamable HTTP):",
        f"    {data['claude_code']}",
        "  Claude Desktop (claude_desktop_config.json) or Cursor (.cursor/mcp.json), over stdio:",
        *block(data["stdio"]),
        "  Cursor over HTTP (.cursor/mcp.json):",
        *block(data["http"]),
    ])
