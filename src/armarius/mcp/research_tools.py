"""Research tools for agents: sessions, and one structured query surface over what the operator configured."""

from __future__ import annotations

import json
from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.mcp.registry import ToolSpec
from armarius.research.service import query_schema
from armarius.sessions.enrichment import INPUTS_MAX, TEXT_ID_MAX
from armarius.sessions.model import SUBJECT_MAX, Status
from armarius.sessions.service import LIST_LIMIT, PAGE_SIZE
from armarius.validation import INT64_MAX

#: The published project-query-v1 schema, offered as an MCP resource next to the tool.
SCHEMA_URI = "armarius://schemas/project-query-v1.json"


def schema_resource() -> tuple[str, str]:
    """(URI, JSON text) of the project-query schema."""
    return SCHEMA_URI, json.dumps(query_schema(), ensure_ascii=False, indent=1)


SESSION = {"type": "integer", "minimum": 1, "maximum": INT64_MAX,
           "description": "The session id session_open returned."}


def _open(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.sessions.open(actor, arguments["subject"], arguments.get("budget"), arguments.get("inputs"))


def _show(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    view = app.sessions.show(actor, arguments["session"])
    # The session's newest repair proposals and how humans decided them (a reformulation's comment included);
    # repairs_more: older ones are left out.
    shown = app.repairs.of_session(actor, arguments["session"])
    return {**view, "repairs": shown["repairs"], **({"repairs_more": True} if shown["more"] else {})}


def _list(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    page = app.sessions.sessions_page(actor, status=arguments.get("status"), after=arguments.get("after"),
                                      limit=arguments.get("limit", PAGE_SIZE), newest_first=True)
    return {"sessions": page["items"], "next_after": page["next"]}


def _close(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.sessions.close(actor, arguments["session"])


def _query(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    return app.sessions.query(actor, arguments["session"], arguments["arguments"])


def _research_configured(app: Armarius) -> bool:
    return app.research is not None


TOOLS = [
    ToolSpec(
        name="session_open",
        description=(
            "Open a research session for one question or bug case before investigating with project_query. "
            "subject: the question. budget (optional): how many queries you expect to need, up to the server's "
            "maximum (a default applies otherwise); every project_query costs one, also a repeated one. "
            "inputs (optional, when the server configures enrichment): the ids the question is about, as "
            "[{entity_type, id}]; they are looked up and returned as facts (names next to ids, texts, related "
            "entities, and what was not followed) before you start - read them instead of guessing what an id is. "
            "Returns the session id. A session that hits a failing source, or too many invalid queries in a row, "
            "blocks until a human resumes it; close it with session_close when you are done."
        ),
        handler=_open,
        permission=Permission.RESEARCH_QUERY,
        properties={"subject": {"type": "string", "maxLength": SUBJECT_MAX, "description": "The question."},
                    "budget": {"type": "integer", "minimum": 1, "maximum": INT64_MAX},
                    "inputs": {"type": "array", "maxItems": INPUTS_MAX, "items": {
                        "type": "object", "required": ["entity_type", "id"], "additionalProperties": False,
                        "properties": {"entity_type": {"type": "string", "maxLength": 64},
                                       "id": {"type": ["integer", "string"], "minimum": -INT64_MAX,
                                              "maximum": INT64_MAX, "maxLength": TEXT_ID_MAX}}}}},
        required=("subject",),
        read_only=False,
        available=_research_configured,
    ),
    ToolSpec(
        name="session_show",
        description=("A session's status (open, blocked with its reason, closed), budget left, a summary of "
                     "its evidence with the latest records, and its newest repair proposals (status, and whether a "
                     "human asked for a reformulation, with the comment; repairs_more: older ones are left out, "
                     "each readable with repair_show)."),
        handler=_show,
        permission=Permission.RESEARCH_QUERY,
        properties={"session": SESSION},
        required=("session",),
        available=_research_configured,
        store_write=True,
    ),
    ToolSpec(
        name="sessions",
        description=("Your research sessions, newest first, optionally only those in one status. Pass next_after "
                     "from the answer as after to get the next page (null: there is none)."),
        handler=_list,
        permission=Permission.RESEARCH_QUERY,
        store_read=True,
        properties={"status": {"type": "string", "enum": [status.value for status in Status]},
                    "after": {**SESSION, "description": "The next_after of the previous page."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT,
                              "description": f"Sessions a page (default {PAGE_SIZE})."}},
        available=_research_configured,
    ),
    ToolSpec(
        name="session_close",
        description="Close your session when the question is answered: it stays readable and takes no more queries.",
        handler=_close,
        permission=Permission.RESEARCH_QUERY,
        properties={"session": SESSION},
        required=("session",),
        read_only=False,
        available=_research_configured,
        store_write=True,
    ),
    ToolSpec(
        name="project_query",
        description=(
            "Investigate the project inside an open session (session_open first): its source at the commit the "
            "operator pinned (never the working tree) and its databases, read-only. arguments follows the project-"
            "query-v1 schema. Source: {kind: 'source.files', substring} lists paths; {kind: 'source.search', text, "
            "path_prefix?} finds a literal text; {kind: 'source.symbol', symbol} finds a whole word; {kind: "
            "'source.registration', symbol} gives starting points for where it is registered; {kind: 'source.schema',"
            " text} searches SQL files; {kind: 'source.read', path, start_line, end_line} reads lines. Hits are "
            "lexical: they prove no definition or execution. Databases: {kind: 'database.tables'} lists the "
            "allowlisted tables; {kind: 'database.schema', table} gives columns, kinds, keys and indexes (filter on "
            "indexed columns); {kind: 'database.rows', table, columns?, filters?: [{column, op (or operator): "
            "eq|ne|lt|le|gt|ge|contains|in, value}], order_by?: [{column, direction}], offset?, limit?} reads a page;"
            " {kind: 'database.count', table, filters?} counts. Filters join with AND; null with eq/ne is IS NULL/IS "
            "NOT NULL; give decimals as strings to keep them exact. Add source or database when several are "
            "configured. complete: false / complete_filtered_rows: false means something was cut or paged (see "
            "next_offset; a search that stopped counting gives total_hits null and total_hits_at_least); only a "
            "complete answer with nothing found is evidence of absence, and only for that snapshot and predicate. "
            "Every answer is recorded as evidence of the session (its capture id and evidence number are returned); "
            "each query costs one action of budget. "
            f"The full JSON schema of arguments is the resource {SCHEMA_URI} (resources/read)."
        ),
        handler=_query,
        permission=Permission.RESEARCH_QUERY,
        properties={"session": SESSION, "arguments": {"type": "object", "description": "A project-query-v1 query."}},
        required=("session", "arguments"),
        read_only=False,
        available=_research_configured,
    ),
]
