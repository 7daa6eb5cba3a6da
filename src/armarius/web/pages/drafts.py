"""Draft proposals: the list (GET /drafts), one proposal (GET /drafts/proposals/<id>), Approve and Reject.

Each action is the CLI's service call (``armarius approve --proposal``, ``armarius drafts reject``):

- **What you see is what you sign.** The proposal page shows the complete slug, title and text through
  the ``reveal`` filter (invisible, control, bidirectional and look-alike characters as
  ``⟦U+XXXX NAME⟧`` markers) and the short fingerprint. The fingerprint is computed from exactly the
  content shown, as the CLI computes it, and the Approve form carries it; the approval is issued with
  it as ``reviewed_fingerprint``, so content that changed after the page was rendered is refused
  (``conflict``) and nothing is approved.
- **The token is shown once**, in the response to the Approve form (never in a flash message, which is
  stored with the session): the page that issued it and nowhere else. The proposing agent collects it
  with ``proposal_status`` and its collection key.
- Who may approve or reject is the service's rule: a human with ``approvals.issue`` who did not propose
  the draft. Its refusal becomes the error page (403), and nothing changes.

The list pages by id with the service's cursor (``?after=``), ``PAGE_SIZE`` proposals a page: pending
ones oldest first (the queue's order), the others newest first.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.drafts.model import DraftPayload
from armarius.drafts.service import IssuedApproval
from armarius.drafts.steps import ProposalState, withdrawal_note
from armarius.errors import InvalidInput
from armarius.memory.model import REASON_MAX
from armarius.textview import marked_characters, short_fingerprint
from armarius.web.pages.gate import PAGE_SIZE, View, Web, whole_number
from armarius.web.pages.memory import text

#: The states a list shows (``all``: every proposal).
STATUSES = (*[state.value for state in ProposalState], "all")
#: A reviewed fingerprint: SHA-256 in hexadecimal, as the proposal page carries it.
FINGERPRINT = re.compile(r"[0-9a-f]{64}")
#: The longest note a rejection takes (a reason's length).
NOTE_MAX = REASON_MAX
#: The states in which a proposal can be approved (again): the service decides; the page offers the button.
_APPROVABLE = {ProposalState.PENDING.value, ProposalState.APPROVED.value, ProposalState.EXPIRED.value}


def routes(web: Web) -> list[BaseRoute]:
    return [
        web.page("/drafts", list_page, name="drafts"),
        web.page("/drafts/proposals/{proposal:int}", proposal_page, name="draft_proposal"),
        web.action("/drafts/proposals/{proposal:int}/approve", approve_action, name="draft_approve"),
        web.action("/drafts/proposals/{proposal:int}/reject", reject_action, name="draft_reject"),
    ]


# What the pages and their JSON twins show ---------------------------------------------------------


def proposals(app: Armarius, actor: Actor, *, status: str = "pending", q: str = "", after: int | None = None
              ) -> dict[str, Any]:
    """One page of proposals in one state (``all``: every state), PAGE_SIZE of them, each without its text."""
    if status not in STATUSES:
        raise InvalidInput(f"status is one of {', '.join(STATUSES)}.", field="status")
    state = None if status == "all" else status
    page = app.drafts.proposals_page(actor, status=state, after=after, limit=PAGE_SIZE,
                                     newest_first=state != ProposalState.PENDING.value, q=q or None)
    return {"status": status, "q": q, "after": after, "items": page["items"], "next": page["next"]}


def proposal(app: Armarius, actor: Actor, proposal_id: int) -> dict[str, Any]:
    """A proposal in full, and the fingerprint of exactly that content (what an approval from this view binds)."""
    shown = app.drafts.proposal(actor, proposal_id)
    fingerprint = DraftPayload(shown["slug"], shown["title"], shown["text"]).fingerprint
    return {**shown, "shown_fingerprint": fingerprint, "shown_fingerprint_short": short_fingerprint(fingerprint),
            "characters": len(shown["text"]), "lines": len(shown["text"].splitlines()),
            "markers": sum(_markers(shown[key]) for key in ("slug", "title", "text"))}


def approve(app: Armarius, actor: Actor, proposal_id: int, fingerprint: Any) -> dict[str, Any]:
    """Issue the proposal's single-use approval for the content whose fingerprint the reviewer was shown."""
    if not isinstance(fingerprint, str) or not FINGERPRINT.fullmatch(fingerprint):
        raise InvalidInput("An approval carries the fingerprint (64 hexadecimal digits) of the content that was shown "
                           "for review; reload the proposal and approve what it shows.", field="fingerprint")
    issued = app.drafts.approve(actor, proposal_id=proposal_id, reviewed_fingerprint=fingerprint)
    return issued_view(issued)


def issued_view(issued: IssuedApproval) -> dict[str, Any]:
    """What the approver is shown once (the CLI's answer to approve --proposal)."""
    return {"approval": issued.token, "approval_id": issued.approval_id, "expires_at": issued.expires_at,
            "fingerprint": issued.fingerprint, "fingerprint_short": short_fingerprint(issued.fingerprint),
            "proposal": issued.proposal_id, "replaces": issued.replaces, "replaced_outcome": issued.replaced_outcome}


def reject(app: Armarius, actor: Actor, proposal_id: int, note: Any) -> dict[str, Any]:
    """Reject a proposal no draft was made of (its live approval, if any, is withdrawn), with an optional note
    for the proposing agent (what to change)."""
    return app.drafts.reject(actor, proposal_id, text(note, "note", NOTE_MAX).strip() or None)


def proposal_number(raw: object) -> int:
    """A proposal id from a path (the API's path parameters are text)."""
    return whole_number(None if raw is None else str(raw), "proposal", 0)


# Pages ------------------------------------------------------------------------------------------


def list_page(view: View) -> Response:
    raw_after = view.query("after")
    listing = proposals(view.app, view.actor, status=view.query("status", "pending"), q=view.query("q"),
                        after=whole_number(raw_after, "after", 1) if raw_after else None)
    return view.render("drafts.html", title="Draft proposals", listing=listing, statuses=STATUSES)


def proposal_page(view: View) -> Response:
    shown = proposal(view.app, view.actor, view.path_int("proposal"))
    return view.render("draft_proposal.html", title=f"Draft proposal {shown['proposal']}", proposal=shown,
                       approvable=shown["status"] in _APPROVABLE,
                       rejectable=shown["status"] in _APPROVABLE,
                       may_decide=view.actor.can(Permission.APPROVALS_ISSUE))


def approve_action(view: View) -> Response:
    proposal_id = view.path_int("proposal")
    issued = approve(view.app, view.actor, proposal_id, view.form.get("fingerprint"))
    shown = view.app.drafts.proposal(view.actor, proposal_id)
    # The token is in this response only: never a flash message, never a redirect.
    return view.render("draft_approved.html", title=f"Proposal {proposal_id} approved", issued=issued,
                       proposal=shown)


def reject_action(view: View) -> Response:
    proposal_id = view.path_int("proposal")
    rejection = reject(view.app, view.actor, proposal_id, view.form.get("note"))
    flash = f"Proposal {proposal_id} was rejected.{withdrawal_note(rejection)}"
    return view.redirect(f"/drafts/proposals/{proposal_id}", flash=flash, kind="success")


def _markers(text: str) -> int:
    """How many characters of ``text`` its reveal marks (a run shown as one marker counts each of them; a marker
    typed into the text marks nothing)."""
    return marked_characters(text)
