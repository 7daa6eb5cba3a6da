"""Memory tools for agents: remember, recall, read, history, list."""

from __future__ import annotations

from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.mcp.registry import ToolSpec
from armarius.memory.model import SLUG_MAX, TITLE_MAX
from armarius.memory.service import LIST_MAX, RECALL_MAX, RECALL_MODES, RememberRequest
from armarius.validation import INT64_MAX

SLUG = {"type": "string", "maxLength": SLUG_MAX,
        "description": "Lowercase segments like 'deploy/staging-server' ([a-z0-9] joined by '-', segments by '/')."}
TAGS = {"type": "array", "items": {"type": "string"}, "maxItems": 20}


def _remember(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.memory.remember(actor, RememberRequest(**arguments))


def _recall(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.memory.recall(actor, **arguments)


def _read(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.memory.read(actor, **arguments)


def _history(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.memory.history(actor, **arguments)


def _list(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.memory.list_entries(actor, **arguments)


TOOLS = [
    ToolSpec(
        name="remember",
        description=(
            "Create or update a memory entry (Markdown body; link other entries with [[slug]]). "
            "Pass expected_revision (the revision you last read; 0 for a new slug) to avoid overwriting a "
            "change you have not seen. The answer may be status 'judgment_required' - nothing was written: "
            "code 'possible_duplicate' (similar entries exist: update one of them, or repeat with "
            "confirm_distinct: true and a reason) or 'curated_entry' (a human reviewed this entry: change it "
            "only if it is demonstrably wrong, by repeating with override_curated: true and a reason). "
            "Follow the 'instruction' field."
        ),
        handler=_remember,
        permission=Permission.MEMORY_WRITE,
        properties={
            "slug": SLUG,
            "title": {"type": "string", "maxLength": TITLE_MAX},
            "body": {"type": "string", "description": "Markdown."},
            "tags": TAGS,
            "expected_revision": {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
            "override_curated": {"type": "boolean"},
            "reason": {"type": "string", "description": "Why: required with override_curated or confirm_distinct."},
            "confirm_distinct": {"type": "boolean"},
        },
        required=("slug", "title", "body"),
        read_only=False,
        store_write=True,
        embeds=True,
    ),
    ToolSpec(
        name="recall",
        description=(
            "Search memory by words and by meaning: ask in your own words. mode 'hybrid' (the default) fuses a "
            "ranked full-text search (query syntax is not interpreted) with a search by meaning; 'lexical' is words "
            "only, 'semantic' meaning only. Returns slug, title, a snippet with **matches**, revision, whether a "
            "human curated it, and ranked_by: which searches found it. By words, all words must match; if nothing "
            "does, entries matching any word count (match: 'any'); match: 'meaning' when only the search by meaning "
            "found something. read(slug) gives the full text. Active evidence units (documents a human reviewed "
            "and activated) found the same ways are listed apart under 'evidence', each marked kind: 'evidence', "
            "with its ranked_by."
        ),
        handler=_recall,
        permission=Permission.MEMORY_READ,
        store_read=True,
        embeds=True,
        properties={
            "query": {"type": "string", "maxLength": 1000},
            "limit": {"type": "integer", "minimum": 1, "maximum": RECALL_MAX},
            "tags": TAGS,
            "curated_only": {"type": "boolean"},
            "mode": {"type": "string", "enum": list(RECALL_MODES)},
        },
        required=("query",),
    ),
    ToolSpec(
        name="read",
        description=(
            "Read one entry in full: body, tags, revision, curation, its [[links]] (and broken_links to slugs "
            "that do not exist yet) and backlinks. Give revision to read an older revision."
        ),
        handler=_read,
        permission=Permission.MEMORY_READ,
        store_read=True,
        properties={"slug": SLUG, "revision": {"type": "integer", "minimum": 1, "maximum": INT64_MAX}},
        required=("slug",),
    ),
    ToolSpec(
        name="history",
        description="List every revision of an entry: who, when, why, and whether it overrode a human's curation.",
        handler=_history,
        permission=Permission.MEMORY_READ,
        store_read=True,
        properties={"slug": SLUG},
        required=("slug",),
    ),
    ToolSpec(
        name="list",
        description=(
            "List entries by slug order, optionally under a slug prefix, with a tag, curated or not, or needing "
            "human review. Pass next_after from the answer as after to get the next page."
        ),
        handler=_list,
        permission=Permission.MEMORY_READ,
        store_read=True,
        properties={
            "prefix": {"type": "string", "maxLength": SLUG_MAX},
            "tag": {"type": "string", "maxLength": 64},
            "curated": {"type": "boolean"},
            "needs_review": {"type": "boolean"},
            "after": {"type": "string", "maxLength": SLUG_MAX},
            "limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX},
        },
    ),
]
