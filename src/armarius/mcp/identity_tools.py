"""Tools every principal has: who am I, and where am I."""

from __future__ import annotations

from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.mcp.registry import ToolSpec


def _whoami(_app: Armarius, actor: Actor, _arguments: dict[str, Any]) -> dict[str, Any]:
    return actor.describe()


def _workspace_info(app: Armarius, actor: Actor, _arguments: dict[str, Any]) -> dict[str, Any]:
    return app.directory.workspace_info(actor)


TOOLS = [
    ToolSpec(
        name="whoami",
        description=(
            "Tell who you are connected as: your principal name, kind (agent), role, workspace and "
            "the permissions your role gives you right now. Call it first when unsure what you may do."
        ),
        handler=_whoami,
        storeless=True,
    ),
    ToolSpec(
        name="workspace_info",
        description=(
            "Describe the workspace you are connected to: its name, when it was created, how many "
            "principals hold each role, and the Armarius version."
        ),
        handler=_workspace_info,
        store_read=True,
    ),
]
