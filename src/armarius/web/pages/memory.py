"""Memory for people: entries that need review (/needs-review), and every entry (/entries).

Each action is the CLI's service call (``armarius memory curate|uncurate|revert|needs-review|list|search|
show|history``):

- **Needs review** lists the entries whose curation an agent overrode (the service's page, by slug,
  ``?after=``); an entry's page (``/needs-review/<slug>``) shows the overrides with their reasons and the
  diff against the curated revision, and offers *Curate this revision* (the form carries the revision
  shown: a newer one is refused by the service, nothing changes) and *Revert to the curated revision*
  (with a reason).
- **Entries** lists entries by slug (prefix, tag, curated, needs review; ``?after=``) or, with ``?q=``,
  searches them with recall, the ranked search agents use, evidence units' hits included. An entry's page
  (``/entries/<slug>``) shows it (or ``?revision=N``), its links, broken links and backlinks, its history,
  and the diff between any two revisions (``?from=A&to=B``); a current revision can be curated there, a
  curated entry uncurated.

Who may curate or revert is the service's rule (a human with ``memory.curate``); its refusal becomes the
error page. Every text an agent may have written is shown through the ``reveal`` filter.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.errors import InvalidInput, NotFound, echo
from armarius.memory.model import REASON_MAX, check_slug
from armarius.memory.service import RECALL_MAX
from armarius.validation import check_storable
from armarius.web.pages.gate import PAGE_SIZE, View, Web, optional_number, whole_number

#: How many hits a search page shows (recall's best).
SEARCH_RESULTS = 20
#: Needs-review entries read at a time while looking for one slug.
_LOOKUP_BATCH = 10
#: The longest text a filter takes (a prefix, a tag, a cursor, search words).
TEXT_MAX = 500


def routes(web: Web) -> list[BaseRoute]:
    return [
        web.page("/needs-review", needs_review_page, name="needs_review"),
        web.page("/needs-review/{slug:path}", needs_review_entry_page, name="needs_review_entry"),
        web.page("/entries", entries_page, name="entries"),
        web.action("/entries/curate", curate_action, name="entry_curate"),
        web.action("/entries/uncurate", uncurate_action, name="entry_uncurate"),
        web.action("/entries/revert", revert_action, name="entry_revert"),
        web.page("/entries/{slug:path}", entry_page, name="entry"),
    ]


# What the pages and their JSON twins show ---------------------------------------------------------


def needs_review(app: Armarius, actor: Actor, *, q: str = "", after: str | None = None) -> dict[str, Any]:
    """One page of the entries that need review, by slug (PAGE_SIZE of them), with their overrides."""
    page = app.memory.needs_review_page(actor, after=text(after, "after"), limit=PAGE_SIZE, q=text(q, "q") or None)
    return {"q": q, "after": after, "items": page["items"], "next": page["next"]}


def needs_review_entry(app: Armarius, actor: Actor, slug: str) -> dict[str, Any]:
    """One entry that needs review, as the service's needs-review page shows it: its overrides since the curated
    revision and the diff against that revision. NotFound when no entry of that slug needs review."""
    wanted = check_slug(text(slug, "slug"))
    after: str | None = None
    while True:
        page = app.memory.needs_review_page(actor, after=after, limit=_LOOKUP_BATCH, diff=True, q=wanted)
        found: dict[str, Any] | None = next((item for item in page["items"] if item["slug"] == wanted), None)
        if found is not None:
            return found
        if page["next"] is None:
            raise NotFound(f"No entry {echo(slug)} needs review in this workspace: nothing overrode its curation "
                           "since, or there is no such entry.", slug=slug)
        after = page["next"]


def entries(app: Armarius, actor: Actor, *, prefix: str = "", tag: str = "", curated: str = "",
            needs_review: str = "", after: str | None = None) -> dict[str, Any]:
    """One page of entries by slug (PAGE_SIZE of them). ``curated``: ``yes``, ``no`` or empty (all);
    ``needs_review``: ``yes`` or empty."""
    if curated not in ("", "yes", "no"):
        raise InvalidInput("curated is yes, no or empty.", field="curated")
    if needs_review not in ("", "yes"):
        raise InvalidInput("needs_review is yes or empty.", field="needs_review")
    page = app.memory.list_entries(actor, prefix=text(prefix, "prefix") or None, tag=text(tag, "tag") or None,
                                   curated=None if not curated else curated == "yes",
                                   needs_review=True if needs_review else None, after=text(after, "after") or None,
                                   limit=PAGE_SIZE)
    return {"prefix": prefix, "tag": tag, "curated": curated, "needs_review": needs_review, "after": after,
            "items": page["entries"], "next": page.get("next_after")}


def search(app: Armarius, actor: Actor, q: str, *, curated_only: bool = False, limit: int = SEARCH_RESULTS,
           mode: str = "hybrid") -> dict[str, Any]:
    """Recall, exactly as agents call it: entries ranked by the words and meaning of ``q`` (``mode``), and
    active evidence units' hits."""
    if not 1 <= limit <= RECALL_MAX:
        raise InvalidInput(f"limit is from 1 to {RECALL_MAX}.", field="limit")
    return app.memory.recall(actor, text(q, "q"), limit=limit, curated_only=curated_only, mode=mode)


def entry(app: Armarius, actor: Actor, slug: str, revision: int | None = None) -> dict[str, Any]:
    """An entry (or one of its revisions) with its links, broken links and backlinks, and its history."""
    shown = app.memory.read(actor, text(slug, "slug"), revision)
    return {"entry": shown, "history": app.memory.history(actor, slug)}


def diff(app: Armarius, actor: Actor, slug: str, from_revision: int, to_revision: int) -> dict[str, Any]:
    return app.memory.diff(actor, text(slug, "slug"), from_revision, to_revision)


def curate(app: Armarius, actor: Actor, slug: Any, revision: Any) -> dict[str, Any]:
    """Curate exactly the revision that was shown (the service refuses any other)."""
    return app.memory.curate(actor, slug, number(revision, "revision"))


def uncurate(app: Armarius, actor: Actor, slug: Any) -> dict[str, Any]:
    return app.memory.uncurate(actor, slug)


def revert(app: Armarius, actor: Actor, slug: Any, reason: Any) -> dict[str, Any]:
    """Back to the curated revision's content, as a new revision curated by this human (a reason is required)."""
    return app.memory.revert_to_curated(actor, slug, text(reason, "reason", REASON_MAX) if reason is not None else None)


def text(value: Any, field: str, maximum: int = TEXT_MAX) -> str:
    """A text parameter as given ("" for none); refused when it is no text a database can hold or too long."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > maximum:
        raise InvalidInput(f"{field} is a text of up to {maximum} characters.", field=field)
    return check_storable(value, field)


def number(value: Any, field: str) -> int:
    """A required whole number from a form or a JSON body (where 3.0 is the integer 3, as JSON Schema has it)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return whole_number(value if isinstance(value, str) and value else "-", field, 1)


# Pages ------------------------------------------------------------------------------------------


def needs_review_page(view: View) -> Response:
    listing = needs_review(view.app, view.actor, q=view.query("q"), after=view.query("after") or None)
    return view.render("needs_review.html", title="Needs review", listing=listing)


def needs_review_entry_page(view: View) -> Response:
    item = needs_review_entry(view.app, view.actor, view.path("slug"))
    return view.render("needs_review_entry.html", title=f"Review {item['slug']}", item=item,
                       may_curate=view.actor.can(Permission.MEMORY_CURATE))


def entries_page(view: View) -> Response:
    q = view.query("q")
    if q.strip():
        mode = view.query("mode") or "hybrid"
        found = search(view.app, view.actor, q, curated_only=view.query("curated_only") == "yes", mode=mode)
        return view.render("entries.html", title="Search entries", q=q, found=found, listing=None,
                           curated_only=view.query("curated_only") == "yes", mode=mode)
    listing = entries(view.app, view.actor, prefix=view.query("prefix"), tag=view.query("tag"),
                      curated=view.query("curated"), needs_review=view.query("needs_review"),
                      after=view.query("after") or None)
    return view.render("entries.html", title="Entries", q="", found=None, listing=listing, curated_only=False,
                       mode="hybrid")


def entry_page(view: View) -> Response:
    slug = view.path("slug")
    revision = optional_number(view.query("revision"), "revision")
    shown = entry(view.app, view.actor, slug, revision)
    compared = None
    from_raw, to_raw = view.query("from"), view.query("to")
    if from_raw or to_raw:
        current = shown["entry"].get("current_revision", shown["entry"]["revision"])
        compared = diff(view.app, view.actor, slug, optional_number(from_raw, "from") or 1,
                        optional_number(to_raw, "to") or current)
    current_revision = shown["history"]["revision"]
    return view.render("entry.html", title=slug, shown=shown["entry"], history=shown["history"], compared=compared,
                       current_revision=current_revision,
                       viewing_current=shown["entry"]["revision"] == current_revision,
                       may_curate=view.actor.can(Permission.MEMORY_CURATE))


def curate_action(view: View) -> Response:
    slug = view.form.get("slug")
    result = curate(view.app, view.actor, slug, view.form.get("revision"))
    message = (f"{slug} revision {result['revision']} is curated." if result["changed"]
               else f"{slug} revision {result['revision']} was curated already.")
    return view.redirect(_entry_url(slug), flash=message, kind="success")


def uncurate_action(view: View) -> Response:
    slug = view.form.get("slug")
    result = uncurate(view.app, view.actor, slug)
    message = f"{slug} is no longer curated." if result["changed"] else f"{slug} was not curated."
    return view.redirect(_entry_url(slug), flash=message, kind="success")


def revert_action(view: View) -> Response:
    slug = view.form.get("slug")
    result = revert(view.app, view.actor, slug, view.form.get("reason"))
    message = (f"{slug} is back to curated revision {result['reverted_to']}'s content as revision "
               f"{result['revision']}, curated by you. The reverted revisions stay in its history."
               if result["changed"] else
               f"{slug} is curated at its current revision {result['revision']}; there was nothing to revert.")
    return view.redirect(_entry_url(slug), flash=message, kind="success")


def _entry_url(slug: str) -> str:
    """The entry's page (the slug was checked by the service that just acted on it)."""
    return f"/entries/{slug}"
