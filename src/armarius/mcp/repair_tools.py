"""Repair tools for agents: read a target, propose alternatives, follow the proposal.

Choosing, rejecting, applying and retrying are human decisions: none of them is a tool here.
"""

from __future__ import annotations

from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.mcp.registry import ToolSpec
from armarius.mcp.research_tools import SESSION
from armarius.memory.model import SLUG_MAX, TAGS_MAX, TITLE_MAX
from armarius.repairs.model import ALTERNATIVES_MAX, EVIDENCE_BODY_MAX, TEXT_MAX, TargetKind
from armarius.validation import INT64_MAX

KIND = {"type": "string", "enum": [kind.value for kind in TargetKind],
        "description": "'entry' (a memory entry) or 'evidence' (an active evidence unit)."}
NAME = {"type": "string", "maxLength": SLUG_MAX, "description": "The entry's slug or the evidence unit's name."}
ALTERNATIVE = {
    "type": "object",
    "required": ["target", "title", "body", "rationale"],
    "additionalProperties": False,
    "properties": {
        "target": {
            "type": "object", "required": ["kind", "name", "revision"], "additionalProperties": False,
            "properties": {"kind": KIND, "name": NAME,
                           "revision": {"type": "integer", "minimum": 1, "maximum": INT64_MAX,
                                        "description": "The revision repair_target showed you."}},
        },
        "title": {"type": "string", "maxLength": TITLE_MAX},
        "body": {"type": "string", "maxLength": EVIDENCE_BODY_MAX,
                 "description": "The complete resulting Markdown body (not a diff)."},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 64}, "maxItems": TAGS_MAX,
                 "description": "Entries only; left out: the entry keeps its tags."},
        "rationale": {"type": "string", "maxLength": TEXT_MAX, "description": "Why this content is right."},
    },
}


def _target(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.repairs.target(actor, arguments["session"], arguments["kind"], arguments["name"])


def _prepare(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.repairs.prepare(actor, arguments["session"], arguments["conflict"], arguments["alternatives"])


def _show(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.repairs.show(actor, arguments["repair"])


def _sessions_offered(app: Armarius) -> bool:
    # A repair needs an open session, and agents open sessions only where research is configured.
    return app.research is not None


TOOLS = [
    ToolSpec(
        name="repair_target",
        description=(
            "Read the complete current content (title, body, tags for an entry) and revision of an entry or an "
            "active evidence unit you believe is wrong, inside your open research session: prepare each "
            "alternative of repair_prepare against exactly this revision."
        ),
        handler=_target,
        permission=Permission.REPAIRS_PROPOSE,
        properties={"session": SESSION, "kind": KIND, "name": NAME},
        required=("session", "kind", "name"),
        available=_sessions_offered,
        store_read=True,
    ),
    ToolSpec(
        name="repair_prepare",
        description=(
            "Propose an archive repair when something you observed in your open session contradicts archived "
            "knowledge. conflict: what you observed and what it contradicts. alternatives: 1 to "
            f"{ALTERNATIVES_MAX} complete alternatives, each {{target: {{kind, name, revision (from "
            "repair_target)}}, title, body (the complete resulting content), tags (entries only, optional), "
            "rationale}}. Nothing changes now: a human chooses one option, rejects all, or asks you for a "
            "reformulation; follow it with repair_show. Entry bodies obey the entry size limit, evidence bodies "
            "1 MB."
        ),
        handler=_prepare,
        permission=Permission.REPAIRS_PROPOSE,
        properties={"session": SESSION,
                    "conflict": {"type": "string", "maxLength": TEXT_MAX},
                    "alternatives": {"type": "array", "minItems": 1, "maxItems": ALTERNATIVES_MAX,
                                     "items": ALTERNATIVE}},
        required=("session", "conflict", "alternatives"),
        read_only=False,
        available=_sessions_offered,
        # Not store_write: with evidence alternatives it reads every active unit's file before its write, which
        # is no time to hold the writers' turn of every process.
    ),
    ToolSpec(
        name="repair_show",
        description=(
            "Your repair proposal: its status (proposed, rejected - with reformulation_requested and the human's "
            "comment -, applying, pending_activation, active, superseded), the alternatives, the chosen option, "
            "the status history and what to do next. It checks the target again: a correction changed since is "
            "superseded."
        ),
        handler=_show,
        permission=Permission.REPAIRS_PROPOSE,
        properties={"repair": {"type": "integer", "minimum": 1, "maximum": INT64_MAX,
                               "description": "The repair id repair_prepare returned."}},
        required=("repair",),
        available=_sessions_offered,
        store_write=True,
    ),
]
