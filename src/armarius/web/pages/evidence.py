"""Evidence units for people: the list (``/evidence``), a unit (``/evidence/units/<name>``), a new unit
(``/evidence/new``), editing (``/evidence/edit/<name>``), and the review, activation and restore of a unit.

A unit's page shows what ``armarius evidence show`` prints: its state, the revision in full (title and
body revealed), provenance (the capture ids it was made from), lineage, every revision, and whether its
canonical file holds the latest revision. A unit's name may hold ``/``, so the actions name the unit
after a fixed prefix (``/evidence/review/<name>``) rather than before a suffix.

Every action calls ``EvidenceService`` as the CLI does, with the person's current role: ``create`` and
``edit`` (``memory.write``; the edit form carries the revision it showed, so an edit of a unit changed
meanwhile is refused), ``review`` of exactly the revision shown (``memory.curate``), ``activate`` of the
reviewed revision (administrators: ``evidence.manage``), and ``restore`` of the file. The review form's
required checkbox ("I read revision N as shown", ``confirm=yes``) is checked here too (``gate.confirmed``): a
form without it is refused (400) and nothing is done; the JSON twin, for scripts, takes no such field (as the
sessions' twins). A browser sends a textarea's line breaks as CRLF; the page turns them back into LF, as the
body was shown.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.evidence.model import BODY_MAX_BYTES
from armarius.evidence.model import Status as UnitStatus
from armarius.memory.model import REASON_MAX, SLUG_MAX, SLUG_PATTERN, TITLE_MAX
from armarius.web.pages.gate import (
    HUMANS,
    PAGE_SIZE,
    View,
    Web,
    body_int,
    confirmed,
    optional_number,
    whole_number,
)
from armarius.web.pages.repairs import ID_MAX, forbidden_in_title, text_schema

STATUSES = tuple(status.value for status in UnitStatus)


def routes(web: Web) -> list[BaseRoute]:
    return [
        web.page("/evidence", units_page, name="evidence"),
        web.page("/evidence/new", new_page, name="evidence_new"),
        web.action("/evidence/new", create_action, name="evidence_create"),
        web.page("/evidence/units/{name:path}", unit_page, name="evidence_unit"),
        web.page("/evidence/edit/{name:path}", edit_page, name="evidence_edit"),
        web.action("/evidence/edit/{name:path}", edit_action, name="evidence_save"),
        web.action("/evidence/review/{name:path}", review_action, name="evidence_review"),
        web.action("/evidence/activate/{name:path}", activate_action, name="evidence_activate"),
        web.action("/evidence/restore/{name:path}", restore_action, name="evidence_restore"),
    ]


def unit_url(name: str) -> str:
    return f"/evidence/units/{name}"


# Reading -------------------------------------------------------------------------------------------


def listing(app: Armarius, actor: Actor, *, status: str | None, after: str | None) -> dict[str, Any]:
    """One page of units in name order (``after``: the last name of the previous page), as ``evidence list``."""
    page = app.evidence.list_units(actor, status=status or None, after=after or None, limit=PAGE_SIZE)
    return {"status": status or None, "after": after or None, **page}


def units_page(view: View) -> Response:
    shown = listing(view.app, view.actor, status=view.query("status") or None, after=view.query("after") or None)
    return view.render("evidence/list.html", title="Evidence units", listing=shown, statuses=STATUSES,
                       can_create=view.actor.can(Permission.MEMORY_WRITE))


def unit_context(actor: Actor, unit: dict[str, Any]) -> dict[str, Any]:
    """What the unit's page offers this person: the next step on the latest revision while its file holds it
    (review, activate), or the file's repair (take the file as a new revision, restore it)."""
    latest = unit["revision"] == unit["current_revision"]
    file_ok = unit["file"]["state"] == "matches"
    return {
        "latest": latest, "file_ok": file_ok,
        "can_edit": actor.can(Permission.MEMORY_WRITE),
        "can_review": (latest and file_ok and unit["status"] == UnitStatus.EDITED
                       and actor.can(Permission.MEMORY_CURATE)),
        "can_activate": (latest and file_ok and unit["status"] == UnitStatus.REVIEWED
                         and actor.can(Permission.EVIDENCE_MANAGE)),
        "needs_admin": latest and file_ok and unit["status"] == UnitStatus.REVIEWED
                       and not actor.can(Permission.EVIDENCE_MANAGE),
    }


def unit_page(view: View) -> Response:
    revision = optional_number(view.query("revision") or None, "revision")
    unit = view.app.evidence.show(view.actor, view.path("name"), revision)
    return view.render("evidence/show.html", title=f"Evidence unit {unit['unit']}", unit=unit,
                       **unit_context(view.actor, unit))


def edit_page(view: View) -> Response:
    unit = view.app.evidence.show(view.actor, view.path("name"))
    return view.render("evidence/edit.html", title=f"Edit {unit['unit']}", unit=unit, title_max=TITLE_MAX,
                       reason_max=REASON_MAX)


def new_page(view: View) -> Response:
    return view.render("evidence/new.html", title="New evidence unit", title_max=TITLE_MAX, reason_max=REASON_MAX,
                       name_max=SLUG_MAX)


# Changing ------------------------------------------------------------------------------------------


def text_field(view: View, name: str) -> str:
    """A textarea's text as the person typed it: the CRLF line breaks a browser sends made LF again."""
    return view.form.get(name).replace("\r\n", "\n")


def _reason(view: View) -> str | None:
    return view.form.get("reason").strip() or None


def create_action(view: View) -> Response:
    name = view.form.get("unit").strip()
    view.app.evidence.create(view.actor, name, view.form.get("title"), text_field(view, "body"), _reason(view))
    return view.redirect(unit_url(name), flash=f"Evidence unit {name} was written as revision 1 (edited): review "
                                               "it next.", kind="success")


def edit_action(view: View) -> Response:
    name = view.path("name")
    expected = whole_number(view.form.get("expected_revision"), "expected_revision", 0)
    from_file = view.form.get("source") == "file"
    result = view.app.evidence.edit(view.actor, name, expected, title=view.form.get("title") or None,
                                    body=None if from_file else text_field(view, "body"), reason=_reason(view))
    if not result["changed"]:
        return view.redirect(unit_url(name), flash=f"{name} is unchanged at revision {result['revision']}.")
    return view.redirect(unit_url(name), flash=f"{name} revision {result['revision']} is written (edited): review it "
                                               "next.", kind="success")


def review_action(view: View) -> Response:
    name = view.path("name")
    revision = whole_number(view.form.get("revision"), "revision", 0)
    confirmed(view.form, f"that you read revision {revision} as shown")
    result = view.app.evidence.review(view.actor, name, revision)
    said = "is reviewed" if result["changed"] else f"was {result['status']} already"
    return view.redirect(unit_url(name), flash=f"{name} revision {result['revision']} {said}.", kind="success")


def activate_action(view: View) -> Response:
    name = view.path("name")
    result = view.app.evidence.activate(view.actor, name, whole_number(view.form.get("revision"), "revision", 0))
    said = "is active" if result["changed"] else "was active already"
    return view.redirect(unit_url(name), flash=f"{name} revision {result['revision']} {said}: recall finds it.",
                         kind="success")


def restore_action(view: View) -> Response:
    name = view.path("name")
    result = view.app.evidence.restore(view.actor, name)
    said = (f"The file holds revision {result['revision']} again." if result["restored"]
            else f"The file held revision {result['revision']} already.")
    return view.redirect(unit_url(name), flash=said, kind="success" if result["restored"] else "info")


# The JSON twins (ApiRoute fields; spliced into armarius.web.api.API_ROUTES) --------------------------

_NAME = {"type": "string", "maxLength": SLUG_MAX, "pattern": f"^(?:{SLUG_PATTERN.pattern})$"}
_REVISION = {"type": "integer", "minimum": 1, "maximum": ID_MAX}
_TEXT = text_schema(BODY_MAX_BYTES, not_blank=False)
_REASON = text_schema(REASON_MAX, not_blank=False)


#: A title the service accepts: 1 to TITLE_MAX characters, not blank, one line without control or invisible
#: formatting characters.
_TITLE = text_schema(TITLE_MAX, forbidden=forbidden_in_title())
_SUMMARY: dict[str, Any] = {"type": "object", "required": ["unit", "title", "status", "revision"], "properties": {
    "unit": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "string", "enum": list(STATUSES)},
    "revision": {"type": "integer"}, "reviewed_revision": {"type": ["integer", "null"]},
    "active_revision": {"type": ["integer", "null"]}, "updated_at": {"type": ["string", "null"]},
    "updated_by": {"type": ["string", "null"]}}}
_UNIT = {"type": "object", "required": [*_SUMMARY["required"], "current_revision", "body", "fingerprint",
                                        "provenance", "lineage", "file", "revisions"], "properties": {
    **_SUMMARY["properties"], "current_revision": {"type": "integer"}, "body": {"type": "string"},
    "fingerprint": {"type": "string"}, "provenance": {"type": "array", "items": {"type": "string"}},
    "lineage": {"type": "array", "items": {"type": "object"}},
    "file": {"type": "object", "required": ["state"], "properties": {
        "state": {"type": "string", "enum": ["matches", "differs", "missing"]}}},
    "revisions": {"type": "array", "items": {"type": "object"}}}}
_RESULT = {"type": "object", "required": ["unit", "revision"], "properties": {
    "unit": {"type": "string"}, "revision": {"type": "integer"}, "status": {"type": "string"},
    "changed": {"type": "boolean"}, "fingerprint": {"type": "string"}}}
_REFUSALS = ((404, "No such evidence unit"), (409, "The unit changed meanwhile, its file does not hold the "
                                                   "revision, or the name is taken"))


def _unit(call: Any) -> str:
    return str(call.body["unit"])


API_ROUTES: list[dict[str, Any]] = [
    {"path": "/api/evidence", "summary": "Evidence units in name order, a page at a time (the twin of the page "
                                         "/evidence): next_after is the after of the next page.",
     "call": lambda call: listing(call.app, call.actor, status=call.query.get("status") or None,
                                  after=call.query.get("after") or None),
     "parameters": (
         {"name": "status", "in": "query", "schema": {"type": "string", "enum": list(STATUSES)}},
         {"name": "after", "in": "query", "schema": text_schema(SLUG_MAX, not_blank=False)},
     ),
     "response": {"type": "object", "required": ["units"], "properties": {
         "units": {"type": "array", "items": _SUMMARY}, "next_after": {"type": "string"}}}},
    {"path": "/api/evidence/unit", "summary": "An evidence unit in full: its latest revision (or ?revision=), "
                                              "provenance, lineage, revisions and its file's state (the twin of "
                                              "the page /evidence/units/{name}).",
     "call": lambda call: call.app.evidence.show(call.actor, call.query.get("name", ""), optional_number(
         call.query.get("revision"), "revision")),
     "parameters": ({"name": "name", "in": "query", "required": True, "schema": _NAME},
                    {"name": "revision", "in": "query", "schema": _REVISION}),
     "response": _UNIT, "errors": _REFUSALS[:1]},
    {"path": "/api/evidence/create", "method": "POST", "callers": HUMANS,
     "summary": "Write a new unit by hand: revision 1, edited (memory.write).",
     "call": lambda call: call.app.evidence.create(call.actor, _unit(call), call.body["title"], call.body["body"],
                                                   call.body.get("reason")),
     "response": _RESULT, "errors": _REFUSALS[1:],
     "body": {"type": "object", "required": ["unit", "title", "body"], "additionalProperties": False,
              "properties": {"unit": _NAME, "title": _TITLE, "body": _TEXT, "reason": _REASON}}},
    {"path": "/api/evidence/edit", "method": "POST", "callers": HUMANS,
     "summary": "The unit's next revision (memory.write), from title and body, or without a body from its file as "
                "edited; expected_revision is the revision you read.",
     "call": lambda call: call.app.evidence.edit(call.actor, _unit(call), body_int(call, "expected_revision"),
                                                 title=call.body.get("title"), body=call.body.get("body"),
                                                 reason=call.body.get("reason")),
     "response": _RESULT, "errors": _REFUSALS,
     "body": {"type": "object", "required": ["unit", "expected_revision"], "additionalProperties": False,
              "properties": {"unit": _NAME, "expected_revision": _REVISION, "title": _TITLE, "body": _TEXT,
                             "reason": _REASON}}},
    {"path": "/api/evidence/review", "method": "POST", "callers": HUMANS,
     "summary": "Mark exactly this revision (the latest, its file holding it) reviewed (memory.curate).",
     "call": lambda call: call.app.evidence.review(call.actor, _unit(call), body_int(call, "revision")),
     "response": _RESULT, "errors": _REFUSALS,
     "body": {"type": "object", "required": ["unit", "revision"], "additionalProperties": False,
              "properties": {"unit": _NAME, "revision": _REVISION}}},
    {"path": "/api/evidence/activate", "method": "POST", "callers": HUMANS,
     "summary": "Index the reviewed revision into what recall searches (administrators: evidence.manage).",
     "call": lambda call: call.app.evidence.activate(call.actor, _unit(call), body_int(call, "revision")),
     "response": _RESULT, "errors": _REFUSALS,
     "body": {"type": "object", "required": ["unit", "revision"], "additionalProperties": False,
              "properties": {"unit": _NAME, "revision": _REVISION}}},
    {"path": "/api/evidence/restore", "method": "POST", "callers": HUMANS,
     "summary": "Write the unit's file again from its latest revision in the store (memory.write).",
     "call": lambda call: call.app.evidence.restore(call.actor, _unit(call)),
     "response": {"type": "object", "required": ["unit", "revision", "restored"], "properties": {
         "unit": {"type": "string"}, "revision": {"type": "integer"}, "restored": {"type": "boolean"},
         "path": {"type": "string"}, "was": {"type": "string"}}},
     "errors": _REFUSALS[:1],
     "body": {"type": "object", "required": ["unit"], "additionalProperties": False, "properties": {"unit": _NAME}}},
]
