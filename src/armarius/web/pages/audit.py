"""The audit log of the current workspace (GET /audit) with its chain's verification status.

The log is core and knows no principals (:mod:`armarius.audit.listing`): who may read it is the
surface's rule, and every network surface asks what it asks for identity administration (SPEC §8): a
human with ``principals.manage`` in the workspace (an administrator). :func:`audit_log` asks it, for
the page and its JSON twin alike.

Filters: ``?action=`` (a prefix: ``memory.`` or ``approval.issued``), ``?actor=`` (exactly an audit name,
``human:ada``), ``?subject=`` (exactly); newest first, ``PAGE_SIZE`` events a page, ``?before=<seq>`` for
the next. The status is the chain walked as ``armarius audit verify`` walks it (links, head, every
event's MAC); anchors, kept in files outside the database, are checked by the CLI only.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from armarius.app import Armarius
from armarius.audit.listing import chain_status, events_page
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.web.pages.gate import PAGE_SIZE, View, Web, optional_number


def routes(web: Web) -> list[BaseRoute]:
    return [web.page("/audit", audit_page, name="audit")]


def audit_log(app: Armarius, actor: Actor, *, action: str = "", by: str = "", subject: str = "",
              before: int | None = None) -> dict[str, Any]:
    """One page of the workspace's events (newest first) and whether its chain verifies; administrators only."""
    actor.require_human(Permission.PRINCIPALS_MANAGE, "read the audit log")
    page = events_page(app.database, actor.workspace_id, before=before, limit=PAGE_SIZE, action=action or None,
                       actor=by or None, subject=subject or None)
    return {"action": action, "actor": by, "subject": subject, "before": before,
            "chain": chain_status(app.database, actor.workspace_id), "items": page["items"], "next": page["next"]}


def audit_page(view: View) -> Response:
    shown = audit_log(view.app, view.actor, action=view.query("action"), by=view.query("actor"),
                      subject=view.query("subject"), before=optional_number(view.query("before"), "before"))
    # An event Armarius did not write (its details not a JSON object, a value that is not text) is listed with
    # what is wrong with it in place of its details: the page must show the newest events whatever they hold.
    details = {item["seq"]: f"(undecodable: {item['malformed']})" if item["malformed"] else
               json.dumps(item["details"], ensure_ascii=False, sort_keys=True) for item in shown["items"]}
    return view.render("audit.html", title="Audit log", log=shown, details=details)
