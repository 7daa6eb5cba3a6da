"""Tool specifications: name, description for a model, permission, JSON schema, service call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.validation import Schema, check

Handler = Callable[[Armarius, Actor, dict[str, Any]], Any]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    handler: Handler
    #: ``None``: any authenticated principal of the workspace may call it.
    permission: Permission | None = None
    properties: Mapping[str, Any] | None = None
    required: tuple[str, ...] = ()
    read_only: bool = True
    #: Whether it only reads the store, in short read transactions, writing nothing and asking no
    #: provider. On an embedded SQLite store (WAL: a reader never waits for a writer) the server runs such a
    #: tool on its event loop when its principal is known without a look in the database (which may write
    #: when a token was last used), saving the hop to a worker thread and back, which costs a call more than
    #: the read itself; anything else, and every tool on PostgreSQL, runs in a worker thread.
    store_read: bool = False
    #: Whether it only reads and writes the store, asking no provider and no other process (a file of its own
    #: may be written). On an embedded SQLite store the server runs such a tool on its event loop when its
    #: principal is at hand and the writers' turn is free at once (nobody in any process writes), holding
    #: the turn until the tool returns; otherwise in a worker thread, where a write queues for its turn.
    store_write: bool = False
    #: Whether it answers from its principal alone, asking neither the store nor anything else. On every store
    #: the server runs such a tool on its event loop when its principal is at hand (on PostgreSQL, where every
    #: other tool runs in a worker thread, the hop was a third of `whoami`'s CPU over stdio).
    storeless: bool = False
    #: Whether it embeds text (recall by meaning, the vector of a revision written). The first text embedded in a
    #: process loads the model (0.6 s): until then the tool runs in a worker thread, never on the event loop,
    #: whose other requests would wait for the load.
    embeds: bool = False
    #: Whether the server offers the tool at all (for tools that need configuration).
    available: Callable[[Armarius], bool] | None = None

    @property
    def input_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": dict(self.properties or {}),
            "required": list(self.required),
            "additionalProperties": False,
        }

    def allowed(self, actor: Actor) -> bool:
        return self.permission is None or actor.can(self.permission)

    def offered(self, app: Armarius) -> bool:
        return self.available is None or self.available(app)

    @cached_property
    def _schema(self) -> Schema:
        """The input schema's validators, built once per tool."""
        return Schema(self.input_schema)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check the arguments against the schema; the message never echoes a value."""
        return check(self._schema, arguments, what=self.name)
