"""The JSON API under /api: one route table, from which the routes and the OpenAPI document are made.

A route (:class:`ApiRoute`) names who may call it (``callers``): agents with their bearer token,
humans logged in to the web pages with the session cookie, or both. A human's POST must also send
the session's CSRF token in the ``X-CSRF-Token`` header (the pages carry it in
``<meta name="csrf-token">``). That token is bound to the workspace it was read in
(:func:`~armarius.web.auth.workspace_token`): sent after the login switched to another workspace, a write
is refused with 409 ``conflict`` (``reason: workspace_changed``) and does nothing, because the slugs and
unit names it sends would name the other workspace's things. ``POST /api/workspace`` (which names its own
target) takes the token of any workspace of the login and answers with the new workspace's token.
A POST takes a JSON object, checked against the route's ``body``
schema before the call. Every refusal is the one error envelope ``{"error": {code, message,
details}}`` with the code's HTTP status.

To add a page's JSON twin, add an ``ApiRoute`` to ``API_ROUTES`` that calls the same service
function as the page: ``call=lambda c: c.app.drafts.proposal(c.actor, c.path["proposal"])``. Give
its ``parameters`` (OpenAPI parameter objects for path and query), its ``body`` and ``response``
schemas where known. A route that manages identities must require ``principals.manage``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import armarius
from armarius.app import Armarius
from armarius.auth.directory import NAME_PATTERN
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind
from armarius.auth.web_sessions import WebSession, WebSessions
from armarius.errors import ERROR_CODES, InvalidInput, NotAllowed, RequestTooLarge, Unauthenticated
from armarius.evidence.model import BODY_MAX_BYTES as EVIDENCE_BODY_MAX_BYTES
from armarius.memory.model import REASON_MAX
from armarius.memory.service import RECALL_MAX, RECALL_MODES
from armarius.validation import PublishedValidator
from armarius.web.auth import SESSION_COOKIE, authenticate, check_workspace_token, workspace_token
from armarius.web.pages import audit as audit_page
from armarius.web.pages import drafts as drafts_page
from armarius.web.pages import evidence as evidence_pages
from armarius.web.pages import memory as memory_page
from armarius.web.pages import repairs as repair_pages
from armarius.web.pages import sessions as session_pages
from armarius.web.pages.gate import EVERYONE, HUMANS, NO_STORE, optional_number, whole_number
from armarius.web.pages.queue import KINDS, queue

#: The largest JSON body a route accepts: an evidence unit's largest body (1 MiB of UTF-8) even when every
#: byte of it is escaped (``\u00e9``: six bytes for one), and room for the other fields.
BODY_MAX_BYTES = 6 * EVIDENCE_BODY_MAX_BYTES + 64 * 1024
CSRF_HEADER = "X-CSRF-Token"
#: Set in the ASGI scope when a person (the session cookie) calls the API.
HUMAN_CALLER_SCOPE_KEY = "armarius.human_caller"


@dataclass(frozen=True)
class ApiCall:
    """One authenticated call, as a route's ``call`` sees it."""

    app: Armarius
    actor: Actor
    path: Mapping[str, Any]
    query: QueryParams
    body: Any
    sessions: WebSessions
    #: The web session of a human caller (None for an agent token).
    session: WebSession | None = None

    def query_int(self, name: str, default: int = 1) -> int:
        return whole_number(self.query.get(name), name, default)

    def require_session(self) -> WebSession:
        if self.session is None:
            raise NotAllowed("Only a person logged in to the web pages may do this.")
        return self.session


@dataclass(frozen=True)
class ApiRoute:
    path: str
    summary: str
    call: Callable[[ApiCall], Any]
    method: str = "GET"
    callers: frozenset[Kind] = EVERYONE
    #: OpenAPI parameter objects (path and query).
    parameters: tuple[dict[str, Any], ...] = ()
    #: JSON schema of a POST's body (an object), checked before the call.
    body: dict[str, Any] | None = None
    #: JSON schema of the 200 response.
    response: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    #: Refusals it may answer besides 400, 401 and 403, for the OpenAPI document: (HTTP status, description).
    errors: tuple[tuple[int, str], ...] = ()
    #: A person's POST taking the CSRF token of any workspace of the login, not only the current one's: only for
    #: a write that names its own target and acts on no workspace's content (the workspace switch).
    any_workspace: bool = False


def _switch_workspace(call: ApiCall) -> dict[str, Any]:
    session = call.require_session()
    call.sessions.switch_workspace(session, call.body["workspace"])
    # The token of the new workspace: the one the next writes send (the old one is refused from now on).
    return {"workspace": call.body["workspace"], "csrf_token": workspace_token(session, call.body["workspace"])}


#: Text the store can look up: no NUL (refused as invalid input, so the document must not call it valid).
_NO_NUL = "^[^\\x00]*$"
_QUEUE_KINDS = [kind.key for kind in KINDS]
_SECTION = {"type": "object", "required": ["kind", "title", "available", "count"], "properties": {
    "kind": {"type": "string", "enum": _QUEUE_KINDS}, "title": {"type": "string"}, "available": {"type": "boolean"},
    "count": {"type": "integer", "minimum": 0}, "oldest": {"type": ["string", "null"]},
    "oldest_seconds": {"type": ["number", "null"]},
}}
_QUEUE_ITEM = {"type": "object", "required": ["id", "label", "detail", "since", "by", "url"], "properties": {
    "id": {"type": ["integer", "string"]}, "label": {"type": "string"}, "detail": {"type": "string"},
    "since": {"type": ["string", "null"]}, "by": {"type": "string"}, "url": {"type": "string"},
}}

API_ROUTES = [
    ApiRoute("/api/whoami", "The authenticated principal, its role, workspace and permissions.",
             lambda call: call.actor.describe(), response={
                 "type": "object", "required": ["principal", "kind", "role", "workspace", "permissions"],
                 "properties": {"principal": {"type": "string"}, "kind": {"type": "string", "enum": ["agent", "human"]},
                                "role": {"type": "string"}, "workspace": {"type": "string"},
                                "permissions": {"type": "array", "items": {"type": "string"}}}}),
    ApiRoute("/api/workspace", "The workspace of the authenticated principal.",
             lambda call: call.app.directory.workspace_info(call.actor), response={
                 "type": "object", "required": ["workspace", "created_at", "members"],
                 "properties": {"workspace": {"type": "string"}, "created_at": {"type": "string"},
                                "members": {"type": "object", "additionalProperties": {"type": "integer"}},
                                "armarius_version": {"type": "string"}}}),
    ApiRoute("/api/workspace", "Switch the web session to another workspace the person belongs to "
             "(the twin of the pages' workspace switcher).", _switch_workspace, method="POST", callers=HUMANS,
             body={"type": "object", "required": ["workspace"], "additionalProperties": False,
                   "properties": {"workspace": {"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$"}}},
             response={"type": "object", "required": ["workspace", "csrf_token"],
                       "properties": {"workspace": {"type": "string"}, "csrf_token": {"type": "string"}}},
             any_workspace=True),
    ApiRoute("/api/queue", "The review queue: each kind's count and oldest item, and one page of one kind "
             "(the twin of the page /).",
             lambda call: queue(call.app, call.actor, kind=call.query.get("kind") or "drafts",
                                q=call.query.get("q", ""), after=call.query_int("after", 0) or None,
                                after_slug=call.query.get("after_slug") or None),
             callers=HUMANS,
             parameters=(
                 {"name": "kind", "in": "query", "schema": {"type": "string", "enum": _QUEUE_KINDS}},
                 {"name": "q", "in": "query", "schema": {"type": "string", "maxLength": 200, "pattern": _NO_NUL}},
                 {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 999_999_999},
                  "description": "Draft proposals, repairs, sessions: where the previous page ended (its 'next')."},
                 {"name": "after_slug", "in": "query", "schema": {"type": "string", "maxLength": 200,
                                                                  "pattern": _NO_NUL},
                  "description": "Needs review: where the previous page ended (its 'next')."},
             ),
             response={"type": "object", "required": ["kind", "after", "next", "sections", "items"],
                       "properties": {"kind": {"type": "string"}, "q": {"type": "string"},
                                      "after": {"type": ["string", "integer", "null"]},
                                      "next": {"type": ["string", "integer", "null"]},
                                      "next_param": {"type": "string", "enum": ["after", "after_slug"]},
                                      "page_size": {"type": "integer"},
                                      "sections": {"type": "array", "items": _SECTION},
                                      "items": {"type": "array", "items": _QUEUE_ITEM}}}),
]


# The review pages' twins: draft proposals, needs review, entries, the audit log ---------------------
# (armarius.web.pages.drafts, .memory and .audit: each calls the function its page calls.)

_NULLABLE_STRING = {"type": ["string", "null"]}
_NULLABLE_INTEGER = {"type": ["integer", "null"]}
#: Text a database can hold: no NUL (PostgreSQL refuses it); a reason or note with a visible character.
_PAGE_CURSOR = {"type": "string", "maxLength": 500, "pattern": _NO_NUL}
_PROPOSAL_PARAMETER = {"name": "proposal", "in": "path", "required": True,
                       "schema": {"type": "integer", "minimum": 1, "maximum": 999_999_999}}
_SLUG = {"type": "string", "minLength": 1, "maxLength": 128,
         "pattern": "^[a-z0-9]+(-[a-z0-9]+)*(/[a-z0-9]+(-[a-z0-9]+)*)*$"}
_REVISION = {"type": "integer", "minimum": 1, "maximum": 999_999_999}
_PROPOSAL_STATES = list(drafts_page.STATUSES[:-1])
_PROPOSAL_REQUIRED = ["proposal", "slug", "title", "fingerprint", "fingerprint_short", "status", "proposed_by",
                      "created_at", "approval"]
_PROPOSAL_PROPERTIES: dict[str, Any] = {
    "proposal": {"type": "integer"}, "slug": {"type": "string"}, "title": {"type": "string"},
    "fingerprint": {"type": "string"}, "fingerprint_short": {"type": "string"},
    "status": {"type": "string", "enum": _PROPOSAL_STATES}, "proposed_by": {"type": "string"},
    "created_at": {"type": "string"}, "decided_by": _NULLABLE_STRING, "decided_at": _NULLABLE_STRING,
    "note": _NULLABLE_STRING,
    "approval": {"type": ["object", "null"], "properties": {
        "approval": {"type": "integer"}, "outcome": {"type": "string"}, "expires_at": {"type": "string"},
        "collected": {"type": "boolean"}}},
}
_PROPOSAL_ITEM = {"type": "object", "required": _PROPOSAL_REQUIRED, "properties": _PROPOSAL_PROPERTIES}
_PROPOSAL = {"type": "object", "required": [*_PROPOSAL_REQUIRED, "text", "shown_fingerprint"],
             "properties": {**_PROPOSAL_PROPERTIES, "text": {"type": "string"},
                            "shown_fingerprint": {"type": "string"}, "shown_fingerprint_short": {"type": "string"},
                            "characters": {"type": "integer"}, "lines": {"type": "integer"},
                            "markers": {"type": "integer"}}}
_OVERRIDE = {"type": "object", "required": ["revision", "author", "reason", "at"], "properties": {
    "revision": {"type": "integer"}, "author": {"type": "string"}, "reason": _NULLABLE_STRING,
    "at": {"type": "string"}}}
_REVIEW_ITEM = {"type": "object", "required": ["slug", "title", "revision", "curated_revision", "overrides"],
                "properties": {"slug": {"type": "string"}, "title": {"type": "string"}, "revision": {"type": "integer"},
                               "curated_revision": {"type": "integer"}, "since": _NULLABLE_STRING,
                               "updated_at": {"type": "string"}, "updated_by": {"type": "string"},
                               "overrides": {"type": "array", "items": _OVERRIDE}, "diff": {"type": "string"}}}
_ENTRY_SUMMARY = {"type": "object", "required": ["slug", "title", "revision", "curated", "needs_review", "tags"],
                  "properties": {"slug": {"type": "string"}, "title": {"type": "string"},
                                 "revision": {"type": "integer"}, "curated": {"type": "boolean"},
                                 "needs_review": {"type": "boolean"},
                                 "tags": {"type": "array", "items": {"type": "string"}},
                                 "updated_at": {"type": "string"}}}
_SLUGS = {"type": "array", "items": {"type": "string"}}
_ENTRY = {"type": "object", "required": ["slug", "title", "body", "tags", "revision", "curated", "links",
                                         "broken_links", "backlinks"],
          "properties": {"slug": {"type": "string"}, "title": {"type": "string"}, "body": {"type": "string"},
                         "tags": _SLUGS, "revision": {"type": "integer"}, "curated": {"type": "boolean"},
                         "curated_revision": _NULLABLE_INTEGER, "curated_by": _NULLABLE_STRING,
                         "needs_review": {"type": "boolean"}, "updated_at": {"type": "string"},
                         "updated_by": {"type": "string"}, "current_revision": {"type": "integer"},
                         "links": _SLUGS, "broken_links": _SLUGS, "backlinks": _SLUGS}}
_HISTORY = {"type": "object", "required": ["slug", "revision", "curated_revision", "revisions"], "properties": {
    "slug": {"type": "string"}, "revision": {"type": "integer"}, "curated_revision": _NULLABLE_INTEGER,
    "revisions": {"type": "array", "items": {"type": "object", "required": ["revision", "author", "at"], "properties": {
        "revision": {"type": "integer"}, "title": {"type": "string"}, "author": {"type": "string"},
        "at": {"type": "string"}, "reason": _NULLABLE_STRING, "operation": _NULLABLE_STRING,
        "overrode_curated": {"type": "boolean"}, "size": {"type": "integer"}}}}}}
_RANKED_BY = {"type": "array", "items": {"type": "string", "enum": ["lexical", "semantic"]}, "minItems": 1}
_HIT = {"type": "object", "required": ["slug", "title", "snippet", "revision", "curated", "ranked_by"], "properties": {
    "slug": {"type": "string"}, "title": {"type": "string"}, "snippet": {"type": "string"},
    "revision": {"type": "integer"}, "curated": {"type": "boolean"}, "ranked_by": _RANKED_BY}}
_EVIDENCE_HIT = {"type": "object", "required": ["unit", "title", "snippet", "revision", "kind", "ranked_by"],
                 "properties": {"unit": {"type": "string"}, "title": {"type": "string"}, "snippet": {"type": "string"},
                                "revision": {"type": "integer"}, "kind": {"type": "string"}, "ranked_by": _RANKED_BY}}
_CURATION = {"type": "object", "required": ["slug", "curated"], "properties": {
    "slug": {"type": "string"}, "revision": {"type": "integer"}, "curated": {"type": "boolean"},
    "changed": {"type": "boolean"}, "reverted_to": {"type": "integer"}, "operation": {"type": "string"}}}
_EVENT = {"type": "object", "required": ["seq", "at", "actor", "action", "subject", "details", "hash"], "properties": {
    "workspace_id": {"type": "integer"}, "seq": {"type": "integer"}, "at": {"type": "string"},
    "actor": {"type": "string"}, "action": {"type": "string"}, "subject": {"type": "string"},
    "details": {"type": "object"}, "prev_hash": {"type": "string"}, "hash": {"type": "string"},
    "key_id": _NULLABLE_STRING, "mac": _NULLABLE_STRING}}
_CHAIN = {"type": "object", "required": ["intact", "events_checked", "legacy_events", "problems"], "properties": {
    "intact": {"type": "boolean"}, "events_checked": {"type": "integer"}, "legacy_events": {"type": "integer"},
    "problems": {"type": "array", "items": {"type": "object", "required": ["seq", "kind", "problem"], "properties": {
        "seq": {"type": "integer"}, "kind": {"type": "string"}, "problem": {"type": "string"}}}}}}
_NOT_FOUND = (404, "No such proposal, entry or revision in this workspace")
_CHANGED = (409, "The content or state changed since it was shown; nothing was done")


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema}


def _text_query(name: str, maximum: int = 200) -> dict[str, Any]:
    return _query(name, {"type": "string", "maxLength": maximum, "pattern": _NO_NUL})


def _optional_query_int(call: ApiCall, name: str) -> int | None:
    return optional_number(call.query.get(name, ""), name)


_REVIEW_ROUTES = [
    ApiRoute("/api/drafts/proposals", "One page of draft proposals in one state (all: every state), without their "
             "text (the twin of the page /drafts).",
             lambda call: drafts_page.proposals(call.app, call.actor, status=call.query.get("status") or "pending",
                                                q=call.query.get("q", ""), after=_optional_query_int(call, "after")),
             callers=HUMANS,
             parameters=(_query("status", {"type": "string", "enum": list(drafts_page.STATUSES)}), _text_query("q"),
                         _query("after", {"type": "integer", "minimum": 1, "maximum": 999_999_999})),
             response={"type": "object", "required": ["status", "items", "next"], "properties": {
                 "status": {"type": "string"}, "q": {"type": "string"}, "after": _NULLABLE_INTEGER,
                 "items": {"type": "array", "items": _PROPOSAL_ITEM}, "next": _NULLABLE_INTEGER}}),
    ApiRoute("/api/drafts/proposals/{proposal}", "A draft proposal in full, and shown_fingerprint: the fingerprint of "
             "exactly this content, which an approval of what was shown carries (the twin of /drafts/proposals/<id>).",
             lambda call: drafts_page.proposal(call.app, call.actor,
                                               drafts_page.proposal_number(call.path["proposal"])),
             callers=HUMANS, parameters=(_PROPOSAL_PARAMETER,), response=_PROPOSAL, errors=(_NOT_FOUND,)),
    ApiRoute("/api/drafts/proposals/{proposal}/approve", "Approve exactly the content whose fingerprint was shown "
             "(refused, nothing approved, if the content differs); the single-use token is in this answer only. "
             "Never by the proposer.",
             lambda call: drafts_page.approve(call.app, call.actor, drafts_page.proposal_number(call.path["proposal"]),
                                              call.body["fingerprint"]),
             method="POST", callers=HUMANS, parameters=(_PROPOSAL_PARAMETER,),
             body={"type": "object", "required": ["fingerprint"], "additionalProperties": False,
                   "properties": {"fingerprint": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}},
             response={"type": "object", "required": ["approval", "approval_id", "expires_at", "fingerprint",
                                                      "proposal"], "properties": {
                 "approval": {"type": "string"}, "approval_id": {"type": "integer"}, "expires_at": {"type": "string"},
                 "fingerprint": {"type": "string"}, "fingerprint_short": {"type": "string"},
                 "proposal": _NULLABLE_INTEGER, "replaces": _NULLABLE_INTEGER,
                 "replaced_outcome": _NULLABLE_STRING}},
             errors=(_NOT_FOUND, _CHANGED)),
    ApiRoute("/api/drafts/proposals/{proposal}/reject", "Reject a draft proposal no draft was made of, with a note "
             "for the proposing agent; its live approval, if any, is withdrawn (the token stops working).",
             lambda call: drafts_page.reject(call.app, call.actor, drafts_page.proposal_number(call.path["proposal"]),
                                             call.body.get("note")),
             method="POST", callers=HUMANS, parameters=(_PROPOSAL_PARAMETER,),
             body={"type": "object", "additionalProperties": False,
                   "properties": {"note": {"type": ["string", "null"], "maxLength": drafts_page.NOTE_MAX,
                                          "pattern": _NO_NUL}}},
             response={"type": "object", "required": ["proposal", "status", "withdrawn_approval"], "properties": {
                 "proposal": {"type": "integer"}, "status": {"type": "string"},
                 "withdrawn_approval": _NULLABLE_INTEGER}},
             errors=(_NOT_FOUND, _CHANGED)),
    ApiRoute("/api/needs-review", "One page of the entries whose curation an agent overrode, by slug, with the "
             "overrides (the twin of the page /needs-review).",
             lambda call: memory_page.needs_review(call.app, call.actor, q=call.query.get("q", ""),
                                                   after=call.query.get("after") or None),
             callers=HUMANS, parameters=(_text_query("q"), _query("after", _PAGE_CURSOR)),
             response={"type": "object", "required": ["items", "next"], "properties": {
                 "q": {"type": "string"}, "after": _NULLABLE_STRING,
                 "items": {"type": "array", "items": _REVIEW_ITEM}, "next": _NULLABLE_STRING}}),
    ApiRoute("/api/needs-review/entry", "One entry that needs review: its overrides and the diff against its curated "
             "revision (the twin of /needs-review/<slug>).",
             lambda call: memory_page.needs_review_entry(call.app, call.actor, call.query.get("slug", "")),
             callers=HUMANS, parameters=({"name": "slug", "in": "query", "required": True, "schema": _SLUG},),
             response=_REVIEW_ITEM, errors=(_NOT_FOUND,)),
    ApiRoute("/api/entries", "One page of entries by slug, filtered (the twin of the page /entries).",
             lambda call: memory_page.entries(call.app, call.actor, prefix=call.query.get("prefix", ""),
                                              tag=call.query.get("tag", ""), curated=call.query.get("curated", ""),
                                              needs_review=call.query.get("needs_review", ""),
                                              after=call.query.get("after") or None),
             parameters=(_text_query("prefix", 128), _text_query("tag", 64),
                         _query("curated", {"type": "string", "enum": ["", "yes", "no"]}),
                         _query("needs_review", {"type": "string", "enum": ["", "yes"]}),
                         _query("after", _PAGE_CURSOR)),
             response={"type": "object", "required": ["items", "next"], "properties": {
                 "items": {"type": "array", "items": _ENTRY_SUMMARY}, "next": _NULLABLE_STRING}}),
    ApiRoute("/api/entries/search", "Recall: entries ranked by the words and meaning of q (mode: hybrid, lexical or "
             "semantic), and active evidence units' hits "
             "(the twin of /entries?q=).",
             lambda call: memory_page.search(call.app, call.actor, call.query.get("q", ""),
                                             curated_only=call.query.get("curated_only") == "yes",
                                             limit=call.query_int("limit", memory_page.SEARCH_RESULTS),
                                             mode=call.query.get("mode") or "hybrid"),
             parameters=({"name": "q", "in": "query", "required": True,
                          "schema": {"type": "string", "maxLength": 500, "pattern": _NO_NUL}},
                         _query("curated_only", {"type": "string", "enum": ["", "yes"]}),
                         _query("limit", {"type": "integer", "minimum": 1, "maximum": RECALL_MAX}),
                         _query("mode", {"type": "string", "enum": ["", *RECALL_MODES]})),
             response={"type": "object", "required": ["query", "mode", "match", "results", "evidence"], "properties": {
                 "query": {"type": "string"}, "mode": {"type": "string", "enum": list(RECALL_MODES)},
                 "match": {"type": "string", "enum": ["all", "any", "meaning", "none"]},
                 "results": {"type": "array", "items": _HIT}, "evidence": {"type": "array", "items": _EVIDENCE_HIT}}}),
    ApiRoute("/api/entries/entry", "An entry (or one revision) with its links, broken links and backlinks, and its "
             "history (the twin of /entries/<slug>).",
             lambda call: memory_page.entry(call.app, call.actor, call.query.get("slug", ""),
                                            _optional_query_int(call, "revision")),
             parameters=({"name": "slug", "in": "query", "required": True, "schema": _SLUG},
                         _query("revision", _REVISION)),
             response={"type": "object", "required": ["entry", "history"],
                       "properties": {"entry": _ENTRY, "history": _HISTORY}}, errors=(_NOT_FOUND,)),
    ApiRoute("/api/entries/diff", "A unified diff of two revisions of an entry (the twin of "
             "/entries/<slug>?from=&to=).",
             lambda call: memory_page.diff(call.app, call.actor, call.query.get("slug", ""),
                                           call.query_int("from"), call.query_int("to")),
             parameters=({"name": "slug", "in": "query", "required": True, "schema": _SLUG},
                         {"name": "from", "in": "query", "required": True, "schema": _REVISION},
                         {"name": "to", "in": "query", "required": True, "schema": _REVISION}),
             response={"type": "object", "required": ["slug", "from_revision", "to_revision", "diff"], "properties": {
                 "slug": {"type": "string"}, "from_revision": {"type": "integer"}, "to_revision": {"type": "integer"},
                 "current_revision": {"type": "integer"}, "curated_revision": _NULLABLE_INTEGER,
                 "diff": {"type": "string"}}}, errors=(_NOT_FOUND,)),
    ApiRoute("/api/entries/curate", "Curate exactly the revision that was shown (a newer current revision is "
             "refused, nothing changes).",
             lambda call: memory_page.curate(call.app, call.actor, call.body["slug"], call.body["revision"]),
             method="POST", callers=HUMANS,
             body={"type": "object", "required": ["slug", "revision"], "additionalProperties": False,
                   "properties": {"slug": _SLUG, "revision": _REVISION}},
             response=_CURATION, errors=(_NOT_FOUND, _CHANGED)),
    ApiRoute("/api/entries/uncurate", "Remove an entry's curated mark.",
             lambda call: memory_page.uncurate(call.app, call.actor, call.body["slug"]),
             method="POST", callers=HUMANS,
             body={"type": "object", "required": ["slug"], "additionalProperties": False,
                   "properties": {"slug": _SLUG}},
             response=_CURATION, errors=(_NOT_FOUND,)),
    ApiRoute("/api/entries/revert", "Revert an entry to its curated revision's content (a new revision, curated by "
             "the person), with a reason.",
             lambda call: memory_page.revert(call.app, call.actor, call.body["slug"], call.body["reason"]),
             method="POST", callers=HUMANS,
             body={"type": "object", "required": ["slug", "reason"], "additionalProperties": False,
                   "properties": {"slug": _SLUG, "reason": repair_pages.text_schema(REASON_MAX, visible=True)}},
             response=_CURATION, errors=(_NOT_FOUND,)),
    ApiRoute("/api/audit", "One page of the workspace's audit events, newest first, filtered, and whether its chain "
             "verifies; administrators (principals.manage) only (the twin of the page /audit).",
             lambda call: audit_page.audit_log(call.app, call.actor, action=call.query.get("action", ""),
                                               by=call.query.get("actor", ""), subject=call.query.get("subject", ""),
                                               before=_optional_query_int(call, "before")),
             callers=HUMANS,
             parameters=(_text_query("action", 300), _text_query("actor", 300), _text_query("subject", 300),
                         _query("before", {"type": "integer", "minimum": 1, "maximum": 999_999_999})),
             response={"type": "object", "required": ["chain", "items", "next"], "properties": {
                 "chain": _CHAIN, "items": {"type": "array", "items": _EVENT}, "next": _NULLABLE_INTEGER,
                 "before": _NULLABLE_INTEGER, "action": {"type": "string"}, "actor": {"type": "string"},
                 "subject": {"type": "string"}}}),
]
API_ROUTES.extend(_REVIEW_ROUTES)
# The repair, session and evidence pages' twins: each module lists its routes' fields (armarius.web.pages.repairs,
# .sessions and .evidence: each calls the function its page calls).
API_ROUTES.extend(ApiRoute(**fields) for module in (repair_pages, session_pages, evidence_pages)
                  for fields in module.API_ROUTES)


async def api_caller(app: Armarius, sessions: WebSessions, request: Request, route: ApiRoute
                     ) -> tuple[Actor, WebSession | None]:
    """The caller of an API route: an agent's bearer token, or a human's session cookie (and, to write, CSRF)."""
    session = None
    if request.headers.get("authorization", "").split(" ", 1)[0].lower() == "bearer":
        actor = await authenticate(app, request.scope)
    elif SESSION_COOKIE in request.cookies:
        request.scope[HUMAN_CALLER_SCOPE_KEY] = True  # errors are then worded for a person, not an agent
        session = await anyio.to_thread.run_sync(sessions.resolve, request.cookies[SESSION_COOKIE])
        if route.method != "GET":
            check_workspace_token(session, request.headers.get(CSRF_HEADER), any_workspace=route.any_workspace,
                                  api=True)
        actor = session.actor
    else:
        raise Unauthenticated("Send an agent token as 'Authorization: Bearer <token>', or log in to the web pages "
                              "and send their session cookie.")
    if actor.kind not in route.callers:
        who = "people logged in to the web pages" if route.callers == HUMANS else "agents with a token"
        raise NotAllowed(f"This route is only for {who}.")
    return actor, session


async def _json_body(request: Request, route: ApiRoute) -> Any:
    if route.body is None:
        return None
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise InvalidInput("Send the body as JSON (Content-Type: application/json).", field="body")
    length = request.headers.get("content-length", "")
    if not length.isdigit():
        raise InvalidInput(f"A body may have at most {BODY_MAX_BYTES} bytes, with its length stated.", field="body")
    if int(length) > BODY_MAX_BYTES:  # refused before a byte is read (errors.md: request_too_large)
        raise RequestTooLarge(f"A body may have at most {BODY_MAX_BYTES} bytes; this one declares {int(length)}.",
                              limit=BODY_MAX_BYTES)
    try:
        body = json.loads(await request.body())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidInput("The body is not JSON.", field="body") from None
    except ValueError:  # a number of more than 4,300 digits, which Python refuses to convert: no route takes one
        raise InvalidInput("The body's JSON has a number too long to read.", field="body") from None
    except RecursionError:  # nesting deeper than the parser goes: no route takes more than a few levels
        raise InvalidInput("The body's JSON is nested too deeply.", field="body") from None
    problem = next(iter(PublishedValidator(route.body).iter_errors(body)), None)
    if problem is not None:
        where = "/".join(str(part) for part in problem.absolute_path) or "body"
        raise InvalidInput(f"The body does not fit this route: {problem.message[:200]}", field=where)
    return body


def api_routes(app: Armarius, sessions: WebSessions) -> list[Route]:
    def endpoint(route: ApiRoute) -> Callable[[Request], Any]:
        async def handle(request: Request) -> JSONResponse:
            actor, session = await api_caller(app, sessions, request, route)
            try:
                body = await _json_body(request, route)
            except RequestTooLarge as error:  # the body is never read: nothing more on this connection
                return JSONResponse({"error": error.to_dict(for_agent=session is None)}, status_code=error.http_status,
                                    headers={"Connection": "close"})
            call = ApiCall(app=app, actor=actor, path=dict(request.path_params), query=request.query_params,
                           body=body, sessions=sessions, session=session)
            return JSONResponse(await anyio.to_thread.run_sync(route.call, call), headers=NO_STORE)

        return handle

    routes = [Route(route.path, endpoint(route), methods=[route.method]) for route in API_ROUTES]

    async def openapi(_request: Request) -> JSONResponse:
        return JSONResponse(openapi_document())

    async def index(_request: Request) -> JSONResponse:
        return JSONResponse({
            "openapi": "/api/openapi.json",
            "authentication": "Agents: Authorization: Bearer <agent token>. People: the armarius_session cookie "
                              f"of a web login, and for a POST the {CSRF_HEADER} header.",
            "routes": [{"method": route.method, "path": route.path, "summary": route.summary,
                        "callers": sorted(kind.value for kind in route.callers)} for route in API_ROUTES],
        })

    routes.append(Route("/api", index, methods=["GET"]))
    routes.append(Route("/api/openapi.json", openapi, methods=["GET"]))
    return routes


def _security(route: ApiRoute) -> list[dict[str, list[str]]]:
    schemes: list[dict[str, list[str]]] = []
    if Kind.AGENT in route.callers:
        schemes.append({"bearer": []})
    if Kind.HUMAN in route.callers:
        schemes.append({"session": []} if route.method == "GET" else {"session": [], "csrf": []})
    return schemes


def _error_response(description: str) -> dict[str, Any]:
    schema = {"$ref": "#/components/schemas/Error"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def openapi_document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for route in API_ROUTES:
        operation: dict[str, Any] = {
            "summary": route.summary,
            "security": _security(route),
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": route.response}}},
                "401": _error_response("No valid token or session"),
                "403": _error_response("Not allowed for this caller or role, or a wrong CSRF token"),
            },
        }
        if route.parameters or route.body is not None:
            operation["responses"]["400"] = _error_response("Invalid parameters or body")
        for status, description in route.errors:
            operation["responses"][str(status)] = _error_response(description)
        if Kind.HUMAN in route.callers and route.method != "GET" and not route.any_workspace:
            stale = "the CSRF token was read in another workspace than the login's current one"
            known = operation["responses"].get("409", {}).get("description")
            operation["responses"]["409"] = _error_response(f"{known}; or {stale}" if known else stale.capitalize())
        if route.parameters:
            operation["parameters"] = list(route.parameters)
        if route.body is not None:
            operation["requestBody"] = {"required": True,
                                        "content": {"application/json": {"schema": route.body}}}
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    paths["/api"] = {"get": {"summary": "This API's routes and where its OpenAPI document is.",
                             "responses": {"200": {"description": "OK"}}}}
    paths["/healthz"] = {"get": {"summary": "Liveness and database reachability.",
                                 "responses": {"200": {"description": "OK"}, "503": {"description": "Down"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Armarius API", "version": armarius.__version__},
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An agent token."},
                "session": {"type": "apiKey", "in": "cookie", "name": SESSION_COOKIE,
                            "description": "A person's web login (log in at /login)."},
                "csrf": {"type": "apiKey", "in": "header", "name": CSRF_HEADER,
                         "description": "The web session's CSRF token of the workspace it works in (the pages' "
                                        "<meta name=\"csrf-token\">, or the answer of POST /api/workspace)."},
            },
            "schemas": {"Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {
                    "type": "object",
                    "required": ["code", "message", "details"],
                    "properties": {
                        "code": {"type": "string", "enum": sorted(ERROR_CODES)},
                        "message": {"type": "string"},
                        "details": {"type": "object"},
                    },
                }},
            }},
        },
    }
