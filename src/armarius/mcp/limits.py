"""The largest MCP request a transport reads, over HTTP (:mod:`armarius.web.limits`) and over stdio."""

from __future__ import annotations

from armarius.config import Settings
from armarius.evidence.model import BODY_MAX_BYTES as EVIDENCE_BODY_MAX_BYTES
from armarius.repairs.model import ALTERNATIVES_MAX

#: JSON may write one byte of text as six (a control character as ``\u0001``).
JSON_ESCAPE_FACTOR = 6
#: Room for everything in a request besides its largest texts (titles, rationales, the JSON-RPC frame).
REQUEST_OVERHEAD_BYTES = 1024 * 1024


def request_body_max_bytes(settings: Settings) -> int:
    """The largest request body the server reads (31 MiB with the default settings).

    The largest request a surface accepts is a ``repair_prepare`` with ALTERNATIVES_MAX alternatives, each
    body as large as an evidence unit (1 MiB) or an entry (``memory.body_max_bytes``) may be; an entry's or a
    draft's body alone (``remember``, ``propose_draft``) is smaller. Every byte of those bodies may take six
    in JSON, and the rest of the request fits in REQUEST_OVERHEAD_BYTES.
    """
    largest_text = ALTERNATIVES_MAX * max(EVIDENCE_BODY_MAX_BYTES, settings.memory_body_max_bytes)
    return JSON_ESCAPE_FACTOR * largest_text + REQUEST_OVERHEAD_BYTES
