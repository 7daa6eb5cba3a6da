"""Small builders shared by tests: a workspace with an agent and a human in it."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psycopg
from mcp import Client
from mcp.server.context import ServerRequestContext

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.mcp.server import build_server
from armarius.store import Database

OPERATOR = "operator:test"


def read_until_closed(connection: socket.socket) -> bytes:
    """What a raw HTTP connection receives until the server closes it (or resets it, or the socket's timeout
    passes: a hang, which the caller's assertion shows)."""
    answer = b""
    try:
        while chunk := connection.recv(65536):
            answer += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return answer


@dataclass
class Team:
    workspace: str
    agent_token: str
    agent: Actor
    human: Actor
    human_password: str


def make_team(app: Armarius, workspace: str = "alpha", *, agent_role: Role = Role.EDITOR,
              human_role: Role = Role.EDITOR) -> Team:
    directory = app.directory
    directory.create_workspace(workspace, by=OPERATOR)
    directory.add_principal(f"{workspace}-agent", Kind.AGENT, workspace=workspace, role=agent_role, by=OPERATOR)
    password = f"{workspace}-correct horse battery"
    directory.add_principal(f"{workspace}-human", Kind.HUMAN, workspace=workspace, role=human_role, by=OPERATOR,
                            password=password)
    token = directory.issue_token(f"{workspace}-agent", workspace=workspace, by=OPERATOR).token
    return Team(
        workspace=workspace,
        agent_token=token,
        agent=directory.authenticate_token(token),
        human=directory.authenticate_password(f"{workspace}-human", password, workspace=workspace),
        human_password=password,
    )


def tool_payload(result: Any) -> Any:
    """The JSON a tool answered with: its one text content (sent once, with no structured copy)."""
    assert [content.type for content in result.content] == ["text"]
    assert result.structured_content is None
    return json.loads(result.content[0].text)


class OwnerSQL:
    """Direct SQL as the table owner, past Armarius (and past row-level security on PostgreSQL)."""

    def __init__(self, settings: Settings) -> None:
        self._postgres = settings.database_url is not None
        if self._postgres:
            assert settings.database_migrate_url is not None
            self._pg = psycopg.connect(settings.database_migrate_url, autocommit=True)
        else:
            self._lite = sqlite3.connect(settings.sqlite_path, isolation_level=None, timeout=10)

    def __enter__(self) -> OwnerSQL:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._postgres:
            self._pg.close()
        else:
            self._lite.close()

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self._postgres:
            return self._pg.execute(sql.replace("?", "%s"), params).fetchall()
        return self._lite.execute(sql, params).fetchall()

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        if self._postgres:
            return self._pg.execute(sql.replace("?", "%s"), params).rowcount
        return self._lite.execute(sql, params).rowcount

    def count(self, table: str) -> int:
        return int(self.rows(f"SELECT count(*) FROM {table}")[0][0])


class Agent:
    """Calls tools as one actor and keeps the decoded answers."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def __call__(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        payload = tool_payload(result)
        if result.is_error:
            return {"error": payload["code"], **payload}
        return dict(payload)

    async def tools(self) -> set[str]:
        return {tool.name for tool in (await self.client.list_tools()).tools}


@asynccontextmanager
async def agent_of(app: Armarius, actor: Actor) -> AsyncIterator[Agent]:
    def resolve(_ctx: ServerRequestContext[Any]) -> Actor:
        return actor

    async with Client(build_server(app, resolve)) as client:
        yield Agent(client)


@contextmanager
def writing_elsewhere(database: Database, sql: str, params: tuple[Any, ...] = (), *,
                      workspace_id: int | None = None) -> Iterator[None]:
    """For the block, another thread of this process is inside a write transaction that ran ``sql`` (it
    commits after the block)."""
    writing, done = threading.Event(), threading.Event()

    def write() -> None:
        with database.transaction(workspace_id=workspace_id, write=True) as tx:
            tx.execute(sql, params)
            writing.set()
            done.wait(timeout=30)

    other = threading.Thread(target=write)
    other.start()
    try:
        assert writing.wait(timeout=30), "the other thread's write did not begin"
        yield
    finally:
        done.set()
        other.join(timeout=30)
