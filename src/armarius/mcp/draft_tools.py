"""Draft tools for agents: propose, collect the human's approval, create the draft with it.

There is no tool to approve: only a human can, from the CLI (or later the review pages).
"""

from __future__ import annotations

from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.mcp.memory_tools import SLUG
from armarius.mcp.registry import ToolSpec
from armarius.validation import INT64_MAX

_PAYLOAD = {"slug": SLUG, "title": {"type": "string", "description": "No white space at its start or end."},
            "text": {"type": "string", "description": "Markdown."}}
#: An approval token or a collection key as Armarius hands it out (47 and 43 characters): a longer one is
#: refused as malformed, before it is looked up.
_HANDED_OUT = {"type": "string", "maxLength": 128}


def _payload(arguments: dict[str, Any]) -> dict[str, Any]:
    return {key: arguments[key] for key in ("slug", "title", "text")}


def _propose(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.drafts.propose(actor, _payload(arguments))


def _status(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.drafts.proposal_status(actor, arguments["proposal"], arguments.get("collection_key"))


def _create(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.drafts.create_draft(actor, _payload(arguments), arguments["approval"], arguments["operation"])


TOOLS = [
    ToolSpec(
        name="propose_draft",
        description=(
            "File an unpublished draft (slug, title, Markdown text) for a human to review. Writes no draft. "
            "Keep the returned proposal id and collection_key: once a human approves exactly this content, "
            "proposal_status with the collection_key hands you the approval for create_draft."
        ),
        handler=_propose,
        permission=Permission.DRAFTS_CREATE,
        properties=_PAYLOAD,
        required=("slug", "title", "text"),
        read_only=False,
        store_write=True,
    ),
    ToolSpec(
        name="proposal_status",
        description=(
            "Check one of your draft proposals: pending, approved, expired (a human must approve it again), "
            "drafted or rejected; next_step and instruction say what to do. When approved, pass your "
            "collection_key to receive the approval; if the answer got lost, ask again with the same key: you "
            "get the same approval until it is used or expires."
        ),
        handler=_status,
        permission=Permission.DRAFTS_CREATE,
        properties={"proposal": {"type": "integer", "minimum": 1, "maximum": INT64_MAX},
                    "collection_key": _HANDED_OUT},
        required=("proposal",),
        read_only=False,
        store_write=True,
    ),
    ToolSpec(
        name="create_draft",
        description=(
            "Create the draft a human approved: slug, title and text exactly as approved (one changed "
            "character is other content and is refused), the approval token, and an operation id you choose. "
            "Repeating the same call with the same operation id returns the first result with replayed: true "
            "(whatever approval you pass then). An approval works once and expires; every refusal's "
            "details.next_step and message say what works instead."
        ),
        handler=_create,
        permission=Permission.DRAFTS_CREATE,
        properties={**_PAYLOAD, "approval": _HANDED_OUT, "operation": {"type": "string", "maxLength": 128}},
        required=("slug", "title", "text", "approval", "operation"),
        read_only=False,
        store_write=True,
        embeds=True,
    ),
]
