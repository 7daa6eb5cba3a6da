"""Research sessions for people: the list (``/sessions``), a session (``/sessions/<id>``), a capture in
full (``/sessions/<id>/captures/<capture id>``) and the human decisions on a session.

A session's page shows what ``armarius sessions show --facts`` prints: its status (and, when blocked, the
reason, ``retry_not_before`` and the state a resume returns to), the budget, every checkpoint, the
evidence records a page at a time (``?page=``) with each record's capture readable in the page, the
newest facts with their provenance, the session's repairs and whether its capture files agree with the
store (``SessionService.verify``). The decisions call the CLI's service functions with the person's
current role: **Resume** (``resume``: refused before ``retry_not_before``, the page showing the wait),
**Take over** (``take_over``, administrators), **Raise budget** (``raise_budget``), **Close**
(``close``) and **Rebuild files** (``rebuild_files``). The takeover's and the close's required checkbox
(``confirm=yes``) is checked here too (``gate.confirmed``): a form without it is refused (400) and nothing is
done.

Captures are read from the session's capture files through ``SessionService.capture_files`` (the person
must be able to read the session, and the capture must be one of its records), each checked against its
id (the SHA-256 of its bytes): a missing or altered file is shown as such, never as the capture. The JSON
is shown pretty-printed, escaped and revealed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.errors import Conflict
from armarius.sessions.model import SUBJECT_MAX, Status
from armarius.web.pages.gate import (
    HUMANS,
    PAGE_SIZE,
    View,
    Web,
    body_int,
    confirmed,
    optional_number,
    paginate,
    whole_number,
)
from armarius.web.pages.repairs import ID_MAX, text_schema

STATUSES = tuple(status.value for status in Status)
#: A capture shown in full inside the session's page up to this many bytes; a larger one is linked.
CAPTURE_INLINE_MAX = 16 * 1024
#: The largest budget a form or body may name (the service refuses above its configured ceiling).
BUDGET_MAX = 1_000_000


def routes(web: Web) -> list[BaseRoute]:
    return [
        web.page("/sessions", sessions_page, name="sessions"),
        web.page("/sessions/{session:int}", session_page, name="session"),
        web.page("/sessions/{session:int}/captures/{capture}", capture_page, name="session_capture"),
        web.action("/sessions/{session:int}/resume", resume_action, name="session_resume"),
        web.action("/sessions/{session:int}/takeover", take_over_action, name="session_take_over"),
        web.action("/sessions/{session:int}/budget", budget_action, name="session_budget"),
        web.action("/sessions/{session:int}/close", close_action, name="session_close"),
        web.action("/sessions/{session:int}/rebuild-files", rebuild_action, name="session_rebuild_files"),
    ]


# Reading -------------------------------------------------------------------------------------------


def listing(app: Armarius, actor: Actor, *, status: str | None, q: str | None, after: int | None) -> dict[str, Any]:
    """One page of sessions, newest first: every session of the workspace for a session manager (as
    ``armarius sessions list``), the person's own otherwise."""
    page = app.sessions.sessions_page(actor, status=status or None, everyone=True, after=after, limit=PAGE_SIZE,
                                      newest_first=True, q=q or None)
    return {"status": status or None, "q": q or "", "after": after, **page}


def sessions_page(view: View) -> Response:
    shown = listing(view.app, view.actor, status=view.query("status") or None, q=view.query("q"),
                    after=optional_number(view.query("after") or None, "after"))
    return view.render("sessions/list.html", title="Sessions", listing=shown, statuses=STATUSES)


def capture_of(app: Armarius, actor: Actor, session_id: int, capture_id: str) -> dict[str, Any]:
    """One capture of the session as its file holds it (``SessionService.capture_files``), with its text."""
    return _with_text(app.sessions.capture_files(actor, session_id, [capture_id])[capture_id])


def _with_text(found: dict[str, Any]) -> dict[str, Any]:
    """The capture and, when its document is shown, the document pretty-printed."""
    if "document" in found:
        found["text"] = json.dumps(found["document"], ensure_ascii=False, indent=2, sort_keys=True)
    return found


def _records(app: Armarius, actor: Actor, history: dict[str, Any], page: int) -> Any:
    """The page's evidence records, each with its capture (inline when small) and the record it repeats."""
    paging = paginate(history["evidence"]["records_list"], page)
    shown = app.sessions.capture_files(actor, history["session"], [record["capture"] for record in paging.items],
                                       inline_max=CAPTURE_INLINE_MAX)
    return paging, [{**record, "capture_view": _with_text(shown[record["capture"]])} for record in paging.items]


def _wait_seconds(retry_not_before: str | None) -> int:
    """How long until a blocked session may be resumed (0: now); the service decides at the resume."""
    if not retry_not_before:
        return 0
    moment = datetime.fromisoformat(retry_not_before.replace("Z", "+00:00"))
    return max(0, int((moment - datetime.now(UTC)).total_seconds() + 0.999))


def session_page(view: View) -> Response:
    app, actor, session_id = view.app, view.actor, view.path_int("session")
    history = app.sessions.history(actor, session_id)
    paging, records = _records(app, actor, history, view.query_int("page"))
    verified = app.sessions.verify(actor, session_id)
    newest = max(history["fact_revisions"], default=None)
    facts = [{**fact, "object_text": json.dumps(fact["object"], ensure_ascii=False, sort_keys=True)}
             for fact in (history["fact_revisions"][newest] if newest is not None else [])]
    status = history["status"]
    return view.render(
        "sessions/show.html", title=f"Session {session_id}", history=history, records=records, paging=paging,
        verified=verified, facts=facts, facts_revision=newest, repairs=app.repairs.of_session(actor, session_id),
        checkpoints=[{**point, "details_text": json.dumps(point["details"], ensure_ascii=False, sort_keys=True)}
                     for point in history["checkpoints"]],
        resume_state_text=json.dumps(history.get("resume_state"), ensure_ascii=False, sort_keys=True),
        wait_seconds=_wait_seconds(history.get("retry_not_before")) if status == Status.BLOCKED else 0,
        can_manage=actor.can(Permission.SESSIONS_MANAGE),
        can_take_over=(actor.can(Permission.SESSIONS_TAKEOVER) and status != Status.CLOSED
                       and history["owner"] != actor.audit_name),
        budget_max=min(BUDGET_MAX, app.sessions.limits.ceiling), subject_max=SUBJECT_MAX,
    )


def capture_page(view: View) -> Response:
    session_id = view.path_int("session")
    capture = capture_of(view.app, view.actor, session_id, view.path("capture"))
    return view.render("sessions/capture.html", title=f"Capture {capture['capture'][:12]}… of session {session_id}",
                       capture=capture)


# Deciding ------------------------------------------------------------------------------------------


def _note(view: View) -> str | None:
    return view.form.get("note").strip() or None


def _back(view: View, text: str, kind: str = "success") -> Response:
    return view.redirect(f"/sessions/{view.path_int('session')}", flash=text, kind=kind)


def resume_action(view: View) -> Response:
    shown = view.app.sessions.resume(view.actor, view.path_int("session"), _note(view))
    return _back(view, f"Session {shown['session']} resumed: it is {shown['status']} again.")


def take_over_action(view: View) -> Response:
    session_id = view.path_int("session")  # an id that cannot exist: 404 first, as on every form
    confirmed(view.form, "the takeover")
    shown = view.app.sessions.take_over(view.actor, session_id)
    return _back(view, f"Session {shown['session']} is now yours: what follows in it is recorded under your name.")


def budget_action(view: View) -> Response:
    budget = whole_number(view.form.get("budget").strip(), "budget", 0)
    shown = view.app.sessions.raise_budget(view.actor, view.path_int("session"), budget)
    return _back(view, f"Session {shown['session']} has a budget of {shown['budget']['total']} actions now.")


def close_action(view: View) -> Response:
    session_id = view.path_int("session")
    confirmed(view.form, "closing the session")
    shown = view.app.sessions.close(view.actor, session_id, _note(view))
    return _back(view, f"Session {shown['session']} is closed; its evidence stays readable.")


def rebuild_action(view: View) -> Response:
    rebuilt = view.app.sessions.rebuild_files(view.actor, view.path_int("session"))
    restored = len(rebuilt["restored"])
    return _back(view, f"{restored} capture file{'' if restored == 1 else 's'} written again from the store.",
                 "success" if restored else "info")


# The JSON twins (ApiRoute fields; spliced into armarius.web.api.API_ROUTES) --------------------------

_ID = {"type": "integer", "minimum": 1, "maximum": ID_MAX}
_SESSION_PATH = {"name": "session", "in": "path", "required": True, "schema": _ID}
_NOTE = text_schema(SUBJECT_MAX)
_REFUSALS = ((404, "No such session for this caller"), (409, "The session's state does not allow it"))
_BUDGET = {"type": "object", "required": ["total", "used", "running", "held", "left"],
           "properties": {key: {"type": "integer"} for key in ("total", "used", "running", "held", "left")}}
_SUMMARY: dict[str, Any] = {"type": "object", "required": ["session", "subject", "owner", "status", "budget"],
                            "properties": {
    "session": {"type": "integer"}, "subject": {"type": "string"}, "owner": {"type": "string"},
    "status": {"type": "string", "enum": list(STATUSES)}, "budget": _BUDGET, "created_at": {"type": "string"},
    "updated_at": {"type": "string"}, "reason": {"type": ["string", "null"]},
    "retry_not_before": {"type": ["string", "null"]}, "blocked_at": {"type": ["string", "null"]}}}
_VIEW = {"type": "object", "required": [*_SUMMARY["required"], "evidence"], "properties": {
    **_SUMMARY["properties"], "evidence": {"type": "object", "required": ["records", "repeats"]},
    "next_step": {"type": "string"}, "checkpoints": {"type": "array"}, "fact_revisions": {"type": "object"}}}


def _session_id(call: Any) -> int:
    return whole_number(str(call.path["session"]), "session", 1)


def _capture(call: Any) -> dict[str, Any]:
    found = capture_of(call.app, call.actor, _session_id(call), str(call.path["capture"]))
    if found["state"] != "ok":
        raise Conflict(f"The capture file {found['file']} of session {found['session']} is {found['state']}: "
                       f"rebuild the session's files (armarius sessions rebuild-files {found['session']}) to write "
                       "it again from the store.", session=found["session"], capture=found["capture"],
                       file=found["state"])
    return {key: found[key] for key in ("session", "capture", "size", "document")}


API_ROUTES: list[dict[str, Any]] = [
    {"path": "/api/sessions", "summary": "Sessions, newest first, a page at a time (the twin of the page /sessions): "
                                         "a session manager's are all of the workspace's; next is the after of "
                                         "the next page.",
     "call": lambda call: listing(call.app, call.actor, status=call.query.get("status") or None,
                                  q=call.query.get("q"), after=optional_number(call.query.get("after"), "after")),
     "parameters": (
         {"name": "status", "in": "query", "schema": {"type": "string", "enum": list(STATUSES)}},
         {"name": "q", "in": "query", "schema": text_schema(200, not_blank=False)},
         {"name": "after", "in": "query", "schema": _ID},
     ),
     "response": {"type": "object", "required": ["items", "next"], "properties": {
         "items": {"type": "array", "items": _SUMMARY}, "next": {"type": ["integer", "null"]}}}},
    {"path": "/api/sessions/{session}", "summary": "A session in full: status, budget, every checkpoint, every "
                                                   "evidence record and every revision's facts (the twin of the "
                                                   "page /sessions/{session}).",
     "call": lambda call: call.app.sessions.history(call.actor, _session_id(call)),
     "parameters": (_SESSION_PATH,), "response": _VIEW, "errors": _REFUSALS[:1]},
    {"path": "/api/sessions/{session}/verify", "summary": "The session's capture files and records checked "
                                                          "against the store (as armarius sessions verify).",
     "call": lambda call: call.app.sessions.verify(call.actor, _session_id(call)),
     "parameters": (_SESSION_PATH,), "errors": _REFUSALS[:1],
     "response": {"type": "object", "required": ["session", "ok", "problems"], "properties": {
         "session": {"type": "integer"}, "ok": {"type": "boolean"},
         "problems": {"type": "array", "items": {"type": "object"}}}}},
    {"path": "/api/sessions/{session}/captures/{capture}",
     "summary": "One capture of the session, read from its file and checked against its id (the twin of the "
                "page /sessions/{session}/captures/{capture}); a missing or altered file is a conflict.",
     "call": _capture,
     "parameters": (_SESSION_PATH, {"name": "capture", "in": "path", "required": True,
                                    "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}),
     "errors": _REFUSALS,
     "response": {"type": "object", "required": ["session", "capture", "size", "document"], "properties": {
         "session": {"type": "integer"}, "capture": {"type": "string"}, "size": {"type": "integer"},
         "document": {"type": "object"}}}},
    {"path": "/api/sessions/{session}/resume", "method": "POST", "callers": HUMANS,
     "summary": "Resume a blocked session (sessions.manage), not before its retry_not_before.",
     "call": lambda call: call.app.sessions.resume(call.actor, _session_id(call), (call.body or {}).get("note")),
     "parameters": (_SESSION_PATH,), "response": _VIEW, "errors": _REFUSALS,
     "body": {"type": "object", "additionalProperties": False, "properties": {"note": _NOTE}}},
    {"path": "/api/sessions/{session}/takeover", "method": "POST", "callers": HUMANS,
     "summary": "Take another principal's session over (administrators: sessions.takeover).",
     "call": lambda call: call.app.sessions.take_over(call.actor, _session_id(call)),
     "parameters": (_SESSION_PATH,), "response": _VIEW, "errors": _REFUSALS},
    {"path": "/api/sessions/{session}/budget", "method": "POST", "callers": HUMANS,
     "summary": "Raise the session's budget to this many actions in all (sessions.manage); never lower.",
     "call": lambda call: call.app.sessions.raise_budget(call.actor, _session_id(call), body_int(call, "budget")),
     "parameters": (_SESSION_PATH,), "response": _VIEW, "errors": _REFUSALS,
     "body": {"type": "object", "required": ["budget"], "additionalProperties": False,
              "properties": {"budget": {"type": "integer", "minimum": 1, "maximum": BUDGET_MAX}}}},
    {"path": "/api/sessions/{session}/close", "method": "POST", "callers": HUMANS,
     "summary": "Close the session: it takes no more queries; its evidence stays readable.",
     "call": lambda call: call.app.sessions.close(call.actor, _session_id(call), (call.body or {}).get("note")),
     "parameters": (_SESSION_PATH,), "response": _VIEW, "errors": _REFUSALS[:1],
     "body": {"type": "object", "additionalProperties": False, "properties": {"note": _NOTE}}},
]
