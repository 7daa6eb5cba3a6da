"""Archive repairs for people: the list (``/repairs``), a proposal (``/repairs/<id>``) and its decisions.

A proposal's page shows the conflict, then each alternative next to its target's current content: the
diff between the two and both complete contents, revealed as the CLI reveals it (``repair-show``). Lines are
split at line feeds only, so every other line separator shows as its marker, and a diff's cost and length
are bounded (:mod:`armarius.repairs.compare`): past them it says so and the complete contents are compared.
The decisions are the CLI's, through the same service functions with the person's current role:

- **Choose** an option = apply it (``RepairService.apply``; administrators: ``memory.manage`` for an entry,
  ``evidence.manage`` for an evidence unit). When the repair's session is another principal's and not
  closed, the form asks to confirm the takeover (``take_over``), so that the receipt names the person.
  An evidence option may be applied with its activation left pending on purpose (``continue_pending``).
- **Reject all** (optional comment) and **Ask for reformulation** (comment required):
  ``RepairService.reject`` (``repairs.propose``: editors too).
- The receipt: status, outcome, decision and status history; **Retry** (``RepairService.retry``) for an
  interrupted application or a pending receipt file, and **Continue with activation pending**
  (``RepairService.continue_pending``), which the page shows as NOT a success.

Buttons a role may not use are not offered, but the services decide: a refusal is the error page with
its status, and nothing changes. The JSON twins are in :data:`API_ROUTES` (spliced into
:data:`armarius.web.api.API_ROUTES`).
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.errors import NotFound
from armarius.memory.model import invisible_in_title
from armarius.repairs import compare
from armarius.repairs.model import TEXT_MAX, Status, TargetKind
from armarius.repairs.service import APPLIER
from armarius.web.pages.gate import HUMANS, PAGE_SIZE, View, Web, optional_number, whole_number

#: The statuses a listing may be filtered by.
STATUSES = tuple(status.value for status in Status)
#: Statuses that are not a success although something may have been written.
NOT_SUCCESS = (Status.APPLYING.value, Status.PENDING_ACTIVATION.value)
#: The largest id a path or query names (as gate.whole_number allows).
ID_MAX = 999_999_999


def routes(web: Web) -> list[BaseRoute]:
    return [
        web.page("/repairs", repairs_page, name="repairs"),
        web.page("/repairs/{repair:int}", repair_page, name="repair"),
        web.action("/repairs/{repair:int}/apply", apply_action, name="repair_apply"),
        web.action("/repairs/{repair:int}/reject", reject_action, name="repair_reject"),
        web.action("/repairs/{repair:int}/reformulate", reformulate_action, name="repair_reformulate"),
        web.action("/repairs/{repair:int}/retry", retry_action, name="repair_retry"),
        web.action("/repairs/{repair:int}/continue-pending", continue_pending_action, name="repair_continue_pending"),
    ]


# Reading -------------------------------------------------------------------------------------------


def listing(app: Armarius, actor: Actor, *, status: str | None, q: str | None, after: int | None) -> dict[str, Any]:
    """One page of repairs, newest first: the CLI's ``repairs`` a page at a time."""
    page = app.repairs.repairs_page(actor, status=status or None, after=after, limit=PAGE_SIZE, newest_first=True,
                                    q=q or None)
    return {"status": status or None, "q": q or "", "after": after, **page}


def repairs_page(view: View) -> Response:
    shown = listing(view.app, view.actor, status=view.query("status") or None, q=view.query("q"),
                    after=optional_number(view.query("after") or None, "after"))
    return view.render("repairs/list.html", title="Repairs", listing=shown, statuses=STATUSES)


def session_of(app: Armarius, actor: Actor, session_id: int) -> dict[str, Any] | None:
    """The repair's session as the person may see it (owner, status), or None when they may not."""
    try:
        shown = app.sessions.show(actor, session_id)
    except NotFound:
        return None
    return {"session": shown["session"], "owner": shown["owner"], "status": shown["status"],
            "subject": shown["subject"]}


def decision_context(app: Armarius, actor: Actor, repair: dict[str, Any]) -> dict[str, Any]:
    """What the page offers this person for this repair: each alternative's texts and whether its Choose button
    is shown, whether a takeover must be confirmed first, and which receipt actions apply."""
    session = session_of(app, actor, repair["session"])
    take_over = (session is not None and session["status"] != "closed" and session["owner"] != actor.audit_name)
    alternatives = []
    for item in repair["alternatives"]:
        kind = TargetKind(item["target"]["kind"])
        target = item["target"]
        diff = compare.diff(item["current"], item["result"],
                            fromfile=f"{target['name']}@{target['revision']} (current)",
                            tofile=f"{target['name']} ({item['option']})")
        alternatives.append({**item, "before_text": compare.content_text(item["current"]),
                             "after_text": compare.content_text(item["result"]),
                             "before_ending": compare.ending(item["current"]),
                             "after_ending": compare.ending(item["result"]),
                             "diff_text": diff.text, "diff_note": diff.note, "kind": kind.value,
                             "can_apply": actor.can(APPLIER[kind]), "needs": APPLIER[kind].value,
                             "chosen": item["option"] == repair["chosen_option"]})
    status = repair["status"]
    can_retry = actor.can(Permission.MEMORY_MANAGE) or actor.can(Permission.EVIDENCE_MANAGE)
    return {
        "repair_session": session, "take_over": take_over, "alternatives": alternatives,
        "proposed": status == Status.PROPOSED,
        "can_decide": actor.can(Permission.REPAIRS_PROPOSE),
        "can_retry": can_retry and status != Status.PROPOSED and (
            status in NOT_SUCCESS or bool(repair["pending_operations"])),
        "can_continue_pending": actor.can(Permission.EVIDENCE_MANAGE) and status == Status.PENDING_ACTIVATION,
        "not_success": status in NOT_SUCCESS,
        "outcome_kind": "success" if repair["published"] else "warning" if status in NOT_SUCCESS else "neutral",
        "history": [{**event, "details_text": json.dumps(event["details"], ensure_ascii=False, sort_keys=True)}
                    for event in repair["history"]],
    }


def repair_page(view: View) -> Response:
    repair = view.app.repairs.show(view.actor, view.path_int("repair"))
    return view.render("repairs/show.html", title=f"Repair {repair['repair']}", repair=repair,
                       **decision_context(view.app, view.actor, repair))


# Deciding ------------------------------------------------------------------------------------------


def _after_decision(view: View, result: dict[str, Any], done: str) -> Response:
    """Back to the repair's page, saying what happened: a success only when the correction is active."""
    repair = result["repair"]
    if result["status"] == Status.ACTIVE:
        kind = "success"
    elif result["status"] in NOT_SUCCESS or result.get("written") is False:
        kind = "error"
    else:
        kind = "info"
    return view.redirect(f"/repairs/{repair}", flash=f"Repair {repair}: {done} It is {result['status']}. "
                                                     f"{result['outcome']}", kind=kind)


def apply_action(view: View) -> Response:
    option = view.form.get("option")
    result = view.app.repairs.apply(view.actor, view.path_int("repair"), option,
                                    take_over=view.form.get("take_over") == "yes",
                                    continue_pending=view.form.get("continue_pending") == "yes")
    done = f"you chose {option}." if result["written"] else f"you chose {option}, but nothing was written."
    return _after_decision(view, result, done)


def reject_action(view: View) -> Response:
    comment = view.form.get("comment").strip() or None
    result = view.app.repairs.reject(view.actor, view.path_int("repair"), comment)
    return _after_decision(view, result, "you rejected every alternative.")


def reformulate_action(view: View) -> Response:
    result = view.app.repairs.reject(view.actor, view.path_int("repair"), view.form.get("comment"), reformulate=True)
    return _after_decision(view, result, "you asked for a reformulation.")


def retry_action(view: View) -> Response:
    result = view.app.repairs.retry(view.actor, view.path_int("repair"),
                                    continue_pending=view.form.get("continue_pending") == "yes")
    return _after_decision(view, result, "the retry ran.")


def continue_pending_action(view: View) -> Response:
    result = view.app.repairs.continue_pending(view.actor, view.path_int("repair"))
    return _after_decision(view, result, "its activation is left pending on purpose (NOT a success).")


# Helpers -------------------------------------------------------------------------------------------


#: The characters Python's str.strip() takes for white space, as a regular expression class's content,
#: spelt out: engines read ``\s`` differently (Python's holds U+001C-U+001F and U+0085; ECMAScript's,
#: which JSON Schema names, holds U+FEFF and neither of those), so a published pattern must not use it.
WHITE_SPACE = ("\\u0009-\\u000d\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f"
               "\\u205f\\u3000")


def text_schema(max_length: int, *, not_blank: bool = True, forbidden: str = "\\u0000",
                visible: bool = False) -> dict[str, Any]:
    """The JSON schema of a text a service accepts: at most ``max_length`` characters, none of the ``forbidden``
    ones (a regular expression class's content; by default NUL), and with ``not_blank`` one that is not white
    space; with ``visible`` one that is neither white space nor invisible (a required reason: see
    :func:`armarius.memory.model.check_reason`). Written so that a pattern never depends on how a regular
    expression engine reads ``$``."""
    schema: dict[str, Any] = {"type": "string", "maxLength": max_length, "not": {"pattern": f"[{forbidden}]"}}
    if visible:
        schema.update(minLength=1, pattern=f"[^{WHITE_SPACE}{forbidden_in_title()}]")
    elif not_blank:
        schema.update(minLength=1, pattern=f"[^{WHITE_SPACE}]")  # a character str.strip() keeps
    return schema


@functools.cache
def forbidden_in_title() -> str:
    """The characters a title may not hold (:func:`armarius.memory.model.invisible_in_title`), as a regular
    expression class's ranges: BMP characters escaped as ``\\uXXXX``, which every
    engine reads alike, the others as themselves. (A lone surrogate, which no engine's class may name, never
    reaches a title: JSON text that holds one is refused as a title by the service.)"""
    ranges: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1):
        if invisible_in_title(chr(code)):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))

    def shown(code: int) -> str:
        return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)

    return "".join(shown(low) if low == high else f"{shown(low)}-{shown(high)}" for low, high in ranges)


# The JSON twins (ApiRoute fields; spliced into armarius.web.api.API_ROUTES) --------------------------

_ID = {"type": "integer", "minimum": 1, "maximum": ID_MAX}
#: A comment the service accepts: 1 to 2,000 characters, not blank, no NUL.
_COMMENT = text_schema(TEXT_MAX)
_CONTENT = {"type": "object", "required": ["title", "body"], "properties": {
    "title": {"type": "string"}, "body": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}}
_SUMMARY: dict[str, Any] = {
            "type": "object", "required": ["repair", "session", "status", "conflict", "proposer", "published"],
            "properties": {
                "repair": {"type": "integer"}, "session": {"type": "integer"},
                "status": {"type": "string", "enum": list(STATUSES)},
                "reformulation_requested": {"type": "boolean"}, "comment": {"type": ["string", "null"]},
                "chosen_option": {"type": ["string", "null"]}, "applied_revision": {"type": ["integer", "null"]},
                "activation_deferred": {"type": "boolean"}, "published": {"type": "boolean"},
                "conflict": {"type": "string"}, "proposer": {"type": "string"},
                "decided_by": {"type": ["string", "null"]}, "created_at": {"type": "string"},
                "updated_at": {"type": "string"}}}
_FULL = {"type": "object",
         "required": [*_SUMMARY["required"], "alternatives", "outcome", "history", "pending_operations"],
         "properties": {
             **_SUMMARY["properties"], "outcome": {"type": "string"}, "next_step": {"type": "string"},
             "written": {"type": "boolean"},
             "alternatives": {"type": "array", "items": {
                 "type": "object", "required": ["option", "target", "rationale", "current", "result"], "properties": {
                     "option": {"type": "string"}, "rationale": {"type": "string"},
                     "target": {"type": "object", "required": ["kind", "name", "revision"], "properties": {
                         "kind": {"type": "string", "enum": [kind.value for kind in TargetKind]},
                         "name": {"type": "string"}, "revision": {"type": "integer"}}},
                     "current": _CONTENT, "result": _CONTENT}}},
             "history": {"type": "array", "items": {
                 "type": "object", "required": ["seq", "event", "status", "actor", "at"], "properties": {
                     "seq": {"type": "integer"}, "event": {"type": "string"}, "status": {"type": "string"},
                     "actor": {"type": "string"}, "details": {"type": "object"}, "at": {"type": "string"}}}},
             "pending_operations": {"type": "array", "items": {"type": "object"}}}}
_REPAIR_PATH = ({"name": "repair", "in": "path", "required": True, "schema": _ID},)
_REFUSALS = ((404, "No such repair for this caller"), (409, "The repair's state does not allow it"))


def _repair_id(call: Any) -> int:
    return whole_number(str(call.path["repair"]), "repair", 1)


def _flag(call: Any, name: str) -> bool:
    return bool((call.body or {}).get(name, False))


API_ROUTES: list[dict[str, Any]] = [
    {"path": "/api/repairs", "summary": "Repairs, newest first, a page at a time (the twin of the page /repairs): "
                                        "next is the after of the next page.",
     "call": lambda call: listing(call.app, call.actor, status=call.query.get("status") or None,
                                  q=call.query.get("q"), after=optional_number(call.query.get("after"), "after")),
     "parameters": (
         {"name": "status", "in": "query", "schema": {"type": "string", "enum": list(STATUSES)}},
         {"name": "q", "in": "query", "schema": text_schema(200, not_blank=False)},
         {"name": "after", "in": "query", "schema": _ID},
     ),
     "response": {"type": "object", "required": ["items", "next"], "properties": {
         "status": {"type": ["string", "null"]}, "q": {"type": "string"}, "after": {"type": ["integer", "null"]},
         "items": {"type": "array", "items": _SUMMARY}, "next": {"type": ["integer", "null"]}}}},
    {"path": "/api/repairs/{repair}", "summary": "A repair in full: the conflict, each alternative's current and "
                                                 "resulting content, the decision and its history (the twin of the "
                                                 "page /repairs/{repair}).",
     "call": lambda call: call.app.repairs.show(call.actor, _repair_id(call)),
     "parameters": _REPAIR_PATH, "response": _FULL, "errors": _REFUSALS},
    {"path": "/api/repairs/{repair}/apply", "method": "POST", "callers": HUMANS,
     "summary": "Choose and apply one option (administrators: memory.manage for an entry, evidence.manage for a "
                "unit); take_over: take the session over first; continue_pending: leave an evidence correction's "
                "activation pending (NOT a success).",
     "call": lambda call: call.app.repairs.apply(call.actor, _repair_id(call), call.body["option"],
                                                 take_over=_flag(call, "take_over"),
                                                 continue_pending=_flag(call, "continue_pending")),
     "parameters": _REPAIR_PATH, "response": _FULL, "errors": _REFUSALS,
     "body": {"type": "object", "required": ["option"], "additionalProperties": False, "properties": {
         "option": {"type": "string", "pattern": "^opt-[1-5]$"}, "take_over": {"type": "boolean"},
         "continue_pending": {"type": "boolean"}}}},
    {"path": "/api/repairs/{repair}/reject", "method": "POST", "callers": HUMANS,
     "summary": "Reject every alternative, with an optional comment (repairs.propose).",
     "call": lambda call: call.app.repairs.reject(call.actor, _repair_id(call), (call.body or {}).get("comment")),
     "parameters": _REPAIR_PATH, "response": _FULL, "errors": _REFUSALS,
     "body": {"type": "object", "additionalProperties": False, "properties": {"comment": _COMMENT}}},
    {"path": "/api/repairs/{repair}/reformulate", "method": "POST", "callers": HUMANS,
     "summary": "Ask the agent for a reformulation, saying what to change (repairs.propose).",
     "call": lambda call: call.app.repairs.reject(call.actor, _repair_id(call), call.body["comment"],
                                                  reformulate=True),
     "parameters": _REPAIR_PATH, "response": _FULL, "errors": _REFUSALS,
     "body": {"type": "object", "required": ["comment"], "additionalProperties": False,
              "properties": {"comment": _COMMENT}}},
    {"path": "/api/repairs/{repair}/retry", "method": "POST", "callers": HUMANS,
     "summary": "Go on with an interrupted application and complete pending operations (administrators); "
                "continue_pending: save an evidence correction but leave its activation pending.",
     "call": lambda call: call.app.repairs.retry(call.actor, _repair_id(call),
                                                 continue_pending=_flag(call, "continue_pending")),
     "parameters": _REPAIR_PATH, "response": _FULL, "errors": _REFUSALS,
     "body": {"type": "object", "additionalProperties": False,
              "properties": {"continue_pending": {"type": "boolean"}}}},
    {"path": "/api/repairs/{repair}/continue-pending", "method": "POST", "callers": HUMANS,
     "summary": "Leave a saved evidence correction's activation pending on purpose (evidence.manage): recorded, "
                "and NOT a success.",
     "call": lambda call: call.app.repairs.continue_pending(call.actor, _repair_id(call)),
     "parameters": _REPAIR_PATH, "response": _FULL, "errors": _REFUSALS},
]
