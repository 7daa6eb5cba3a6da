"""Research tools for agents: one structured query surface over what the operator configured."""

from __future__ import annotations

from typing import Any

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.mcp.registry import ToolSpec


def _query(app: Armarius, actor: Actor, arguments: dict[str, Any]) -> Any:
    assert app.research is not None
    return app.research.query(arguments["arguments"], actor)


TOOLS = [
    ToolSpec(
        name="project_query",
        description=(
            "Investigate the project's source at the commit the operator pinned (never the working tree). "
            "arguments follows the project-query-v1 schema: {kind: 'source.files', substring} lists paths; "
            "{kind: 'source.search', text, path_prefix?} finds a literal text; {kind: 'source.symbol', symbol} "
            "finds a whole word; {kind: 'source.registration', symbol} gives starting points for where it is "
            "registered; {kind: 'source.schema', text} searches SQL files; {kind: 'source.read', path, "
            "start_line, end_line} reads lines. Add source when several are configured, offset/limit to page. "
            "Hits are lexical: they prove no definition or execution. complete: false means something was "
            "cut (see next_offset, omitted_files, truncated_lines); only a complete search with no hits is "
            "evidence of absence. Every answer is saved as a capture (its id is returned)."
        ),
        handler=_query,
        permission=Permission.RESEARCH_QUERY,
        properties={"arguments": {"type": "object", "description": "A project-query-v1 query."}},
        required=("arguments",),
        available=lambda app: app.research is not None,
    ),
]
