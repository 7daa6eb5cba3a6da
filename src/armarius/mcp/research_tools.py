"""Research tools for agents: one structured query surface over what the operator configured."""

from __future__ import annotations

import json
from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.mcp.registry import ToolSpec
from armarius.research.service import query_schema

#: The published project-query-v1 schema, offered as an MCP resource next to the tool.
SCHEMA_URI = "armarius://schemas/project-query-v1.json"


def schema_resource() -> tuple[str, str]:
    """(URI, JSON text) of the project-query schema."""
    return SCHEMA_URI, json.dumps(query_schema(), ensure_ascii=False, indent=1)


def _query(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    assert app.research is not None
    return app.research.query(arguments["arguments"], actor)


TOOLS = [
    ToolSpec(
        name="project_query",
        description=(
            "Investigate the project: its source at the commit the operator pinned (never the working tree) and its "
            "databases, read-only. arguments follows the project-query-v1 schema. Source: {kind: 'source.files', "
            "substring} lists paths; {kind: 'source.search', text, path_prefix?} finds a literal text; {kind: "
            "'source.symbol', symbol} finds a whole word; {kind: 'source.registration', symbol} gives starting points"
            " for where it is registered; {kind: 'source.schema', text} searches SQL files; {kind: 'source.read', "
            "path, start_line, end_line} reads lines. Hits are lexical: they prove no definition or execution. "
            "Databases: {kind: 'database.tables'} lists the allowlisted tables; {kind: 'database.schema', table} "
            "gives columns, kinds, keys and indexes (filter on indexed columns); {kind: 'database.rows', table, "
            "columns?, filters?: [{column, op (or operator): eq|ne|lt|le|gt|ge|contains|in, value}], "
            "order_by?: [{column, direction}], offset?, limit?} reads a page; {kind: 'database.count', table, "
            "filters?} counts. Filters "
            "join with AND; null with eq/ne is IS NULL/IS NOT NULL; give decimals as strings to keep them exact. Add "
            "source or database when several are configured. complete: false / complete_filtered_rows: false means "
            "something was cut or paged (see next_offset; a search that stopped counting gives total_hits null and "
            "total_hits_at_least); only a complete answer with nothing found is evidence of "
            "absence, and only for that snapshot and predicate. Every answer is saved as a capture (its id is "
            f"returned). The full JSON schema of arguments is the resource {SCHEMA_URI} (resources/read)."
        ),
        handler=_query,
        permission=Permission.RESEARCH_QUERY,
        properties={"arguments": {"type": "object", "description": "A project-query-v1 query."}},
        required=("arguments",),
        available=lambda app: app.research is not None,
    ),
]
