"""The review queue (GET /, the landing page) and its JSON twin (GET /api/queue).

Four kinds of work wait for a human: pending draft proposals, proposed repairs, entries that need
review (an agent overrode their curation) and blocked research sessions. The page shows each
kind's count and how long its oldest item has waited (counted in SQL by each service), and lists
one kind (``?kind=``, filtered by ``?q=``: a case-insensitive substring) oldest first, ``PAGE_SIZE``
items a page, a page at a time: ``?after=`` (an id) or, for entries, ``?after_slug=`` (a slug) names
where the previous page ended (its ``next``, in the parameter ``next_param`` names). Nothing reads
more than one page. Each kind is read through its service with the person's current role: a kind the
role may not list is shown as such.

Each item links to its page: ``/drafts/proposals/<id>``, ``/repairs/<id>``, ``/needs-review/<slug>``
and ``/sessions/<id>``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.errors import InvalidInput, NotAllowed
from armarius.web.pages.filters import age_seconds
from armarius.web.pages.gate import PAGE_SIZE, View, Web, whole_number

#: How much of a long text (a repair's conflict, a session's subject) a listing shows; its page shows all.
_SUMMARY_CHARACTERS = 160

Page = Callable[[Armarius, Actor, Any, str | None], dict[str, Any]]


@dataclass(frozen=True)
class Kind:
    key: str
    title: str
    #: ``{count, oldest_at}`` of the kind, with the person's current role (NotAllowed: not for this role).
    summary: Callable[[Armarius, Actor], dict[str, Any]]
    #: One page ``{items, next}`` after a cursor, filtered by a text.
    page: Page
    #: One listed item: id, label, detail, since (ISO time), by, url.
    item: Callable[[dict[str, Any]], dict[str, Any]]
    #: The query parameter of the cursor: ``after`` (an id) or ``after_slug``.
    cursor: str = "after"


def _draft(proposal: dict[str, Any]) -> dict[str, Any]:
    return {"id": proposal["proposal"], "label": proposal["slug"], "detail": proposal["title"],
            "since": proposal["created_at"], "by": proposal["proposed_by"],
            "url": f"/drafts/proposals/{proposal['proposal']}"}


def _repair(repair: dict[str, Any]) -> dict[str, Any]:
    return {"id": repair["repair"], "label": f"Repair {repair['repair']} (session {repair['session']})",
            "detail": _summary(repair["conflict"]), "since": repair["created_at"], "by": repair["proposer"],
            "url": f"/repairs/{repair['repair']}"}


def _needs_review(entry: dict[str, Any]) -> dict[str, Any]:
    overrides = entry["overrides"]
    count = len(overrides)
    return {"id": entry["slug"], "label": entry["slug"],
            "detail": f"{entry['title']} — {count} override{'' if count == 1 else 's'} since curated revision "
                      f"{entry['curated_revision']}",
            "since": entry["since"], "by": overrides[-1]["author"] if overrides else "",
            "url": f"/needs-review/{entry['slug']}"}


def _session(session: dict[str, Any]) -> dict[str, Any]:
    return {"id": session["session"], "label": f"Session {session['session']}",
            "detail": f"{_summary(session['subject'])} — blocked: {session.get('reason') or 'unknown'}",
            "since": session.get("blocked_at") or session["updated_at"], "by": session["owner"],
            "url": f"/sessions/{session['session']}", "retry_not_before": session.get("retry_not_before")}


KINDS = (
    Kind("drafts", "Draft proposals", lambda app, actor: app.drafts.pending_summary(actor),
         lambda app, actor, after, q: app.drafts.proposals_page(actor, after=after, limit=PAGE_SIZE, q=q), _draft),
    Kind("repairs", "Repair proposals", lambda app, actor: app.repairs.proposed_summary(actor),
         lambda app, actor, after, q: app.repairs.repairs_page(actor, status="proposed", after=after,
                                                               limit=PAGE_SIZE, q=q), _repair),
    Kind("needs_review", "Needs review", lambda app, actor: app.memory.needs_review_summary(actor),
         lambda app, actor, after, q: app.memory.needs_review_page(actor, after=after, limit=PAGE_SIZE, q=q),
         _needs_review, cursor="after_slug"),
    Kind("sessions", "Blocked sessions", lambda app, actor: app.sessions.blocked_summary(actor, everyone=True),
         lambda app, actor, after, q: app.sessions.sessions_page(actor, status="blocked", everyone=True,
                                                                 after=after, limit=PAGE_SIZE, q=q), _session),
)
_BY_KEY = {kind.key: kind for kind in KINDS}


def queue(app: Armarius, actor: Actor, *, kind: str = "drafts", q: str = "", after: int | None = None,
          after_slug: str | None = None) -> dict[str, Any]:
    """Counts and oldest age of every kind, and one page of one kind's items (oldest first) after the cursor
    of that kind (``after`` or ``after_slug``: the ``next`` of the page before; none: the first page)."""
    if kind not in _BY_KEY:
        raise InvalidInput(f"kind is one of {', '.join(_BY_KEY)}.", field="kind")
    sections: list[dict[str, Any]] = []
    listed: dict[str, Any] = {"items": [], "next": None}
    for each in KINDS:
        try:
            counted = each.summary(app, actor)
        except NotAllowed:
            sections.append({"kind": each.key, "title": each.title, "available": False, "count": 0,
                             "oldest": None, "oldest_seconds": None})
            continue
        oldest = counted["oldest_at"]
        sections.append({"kind": each.key, "title": each.title, "available": True, "count": counted["count"],
                         "oldest": oldest, "oldest_seconds": age_seconds(oldest)})
        if each.key == kind:
            listed = each.page(app, actor, after if each.cursor == "after" else after_slug, q.strip() or None)
    cursor = _BY_KEY[kind].cursor
    return {"kind": kind, "q": q, "after": after if cursor == "after" else after_slug, "next": listed["next"],
            "next_param": cursor, "page_size": PAGE_SIZE, "sections": sections,
            "items": [_BY_KEY[kind].item(row) for row in listed["items"]]}


def routes(web: Web) -> list[BaseRoute]:
    return [web.page("/", queue_page, name="queue")]


def queue_page(view: View) -> Response:
    after = whole_number(view.query("after") or None, "after", 0) or None
    shown = queue(view.app, view.actor, kind=view.query("kind", "drafts"), q=view.query("q"), after=after,
                  after_slug=view.query("after_slug") or None)
    current = _BY_KEY[shown["kind"]]
    section = next(item for item in shown["sections"] if item["kind"] == current.key)
    return view.render("queue.html", title="Review queue", queue=shown, current=current, section=section)


def _summary(text: str) -> str:
    return text if len(text) <= _SUMMARY_CHARACTERS else text[:_SUMMARY_CHARACTERS] + "…"
