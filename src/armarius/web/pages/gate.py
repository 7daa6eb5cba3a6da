"""The page framework of the review gate: how to add a page.

A page module (``armarius/web/pages/<name>.py``, listed in ``PAGE_MODULES`` in
``armarius/web/pages/__init__.py``) exposes ``routes(web: Web) -> list[BaseRoute]``::

    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from armarius.web.pages.gate import View, Web

    def routes(web: Web) -> list[BaseRoute]:
        return [
            web.page("/drafts/proposals/{proposal:int}", proposal),            # GET
            web.action("/drafts/proposals/{proposal:int}/reject", reject),     # POST, CSRF-checked
        ]

    def proposal(view: View) -> Response:
        shown = view.app.drafts.proposal(view.actor, view.path_int("proposal"))
        return view.render("proposal.html", title=f"Proposal {shown['proposal']}", proposal=shown)

    def reject(view: View) -> Response:
        view.app.drafts.reject(view.actor, view.path_int("proposal"), view.form.get("note") or None)
        return view.redirect("/", flash="The proposal was rejected.", kind="success")

What the gate does before a handler runs, on every request:

- **Only a logged-in human.** The ``armarius_session`` cookie is resolved in the store
  (:class:`~armarius.auth.web_sessions.WebSessions`): the principal's *current* role in the
  session's workspace, read afresh, so a role withdrawn between two requests applies at the next.
  No cookie, or an ended one: a GET is redirected to ``/login?next=…``, a POST gets the same
  redirect (nothing is done). A request with a bearer ``Authorization`` header (an agent token,
  valid or not), or with an agent token in any other header, is refused with 403 on every page and
  form, whatever else it carries.
- **CSRF on every form** (``web.action``): the urlencoded body must carry the session's token in
  the field ``csrf``; missing or wrong: 403, and the handler is never called. Templates put the
  field in with ``{{ csrf_field }}`` (or the ``post_button`` macro of ``macros.html``).
- **Every form is bound to the workspace its page was shown in**: the token in ``csrf_field`` (and
  in ``<meta name="csrf-token">``) is the one of the page's workspace
  (:func:`~armarius.web.auth.workspace_token`). A form posted after the login switched to another
  workspace (in another tab) is refused with 409 ``conflict`` ("This page belongs to workspace A,
  but you now work in workspace B …"), and the handler is never called: its slug, unit name or
  revision would name B's thing, which the page never showed. Only a form that names its own
  target and acts on no workspace's content passes ``any_workspace=True`` (log out, switch).
- **Form text is UTF-8**: a field whose percent-encoded bytes are not UTF-8 is refused (400
  ``invalid_input``) after the CSRF check, never stored with replacement characters; a body longer
  than ``FORM_MAX_BYTES`` is refused with 413 ``request_too_large`` before it is read.
- **A confirmation checkbox is the handler's to check**: a form with a required ``confirm=yes`` box
  (``post_button``'s ``confirm_label``) has a handler that calls ``confirmed(view.form, what)``
  (:func:`confirmed`) before the service, so a form without the box ticked is refused (400
  ``invalid_input``, field ``confirm``) and nothing is done.
- **Handlers are plain functions run in a worker thread**, so they call the services directly,
  exactly as the CLI does: ``view.app.<service>.<function>(view.actor, …)``. Never check
  permissions in the page: the service does, and its refusal becomes the error page.
- **Ids in the path**: ``{name:int}`` in a page's path takes one to nine digits (the JSON twins' ids,
  :func:`whole_number`: 1 to 999,999,999). A longer number names nothing that can exist: it matches
  no route and is answered as an unknown address is, 404 ``not_found`` ("There is nothing at …"),
  before any session or CSRF check; ``view.path_int(name)`` refuses 0 with the same 404. Nothing is
  done either way.
- **Errors**: an :class:`~armarius.errors.ArmariusError` raised by a handler becomes the error page
  with the error's message and HTTP status (``error.html``); anything else is logged and shown as
  a generic internal error.

What a handler gets (:class:`View`): ``view.app`` (the wired services), ``view.actor`` (the human
:class:`~armarius.auth.model.Actor`, kind ``human``, current role), ``view.session`` (workspaces,
CSRF token), ``view.request`` (Starlette's, for headers and the URL), ``view.form`` (a
:class:`Form` of the POST's text fields: ``get(name, default="")``, ``getlist(name)``),
``view.path`` / ``view.path_int``, ``view.query`` / ``view.query_int``, ``view.query_url(**changes)``,
``view.render(template, status=200, **context)``, ``view.redirect(url, flash=…, kind=…)`` (303) and
``view.flash(text, kind)``. Flash messages are stored with the session and shown once, by the next
page rendered; never put a secret in one (render it into the response instead, as approval
tokens are). :func:`paginate` pages a list (``PAGE_SIZE`` a page, ``?page=N``), and the
``pager`` macro renders the links: a page never renders everything.

Templates live in ``armarius/web/templates`` (package data) and extend ``base.html``::

    {% extends "base.html" %}
    {% from "macros.html" import post_button, pager with context %}
    {% block main %}
      <h1>{{ title }}</h1>
      <pre class="revealed">{{ proposal.text | reveal }}</pre>
      {{ post_button("/drafts/proposals/%d/reject" % proposal.proposal, "Reject", {"note": ""}) }}
    {% endblock %}

Autoescaping is on and undefined names are errors. Filters (:mod:`armarius.web.pages.filters`):
``reveal``, ``ago``, ``diff``, ``short_fingerprint``. Every page has the context ``title``,
``session``, ``actor``, ``nav``, ``flashes``, ``csrf_field``, ``query_url`` and ``reveal_note``.
Style with the classes of ``armarius/web/static/armarius.css`` (no inline styles or scripts: the
Content-Security-Policy allows neither).

Every page has a JSON twin: an :class:`~armarius.web.api.ApiRoute` in ``API_ROUTES``
(:mod:`armarius.web.api`) calling the same service function, for agents, people or both.

Tests (``tests/web``): ``visitors.log_in_team(team)`` gives a logged-in httpx client (``person.csrf()``
reads the page's CSRF token), and the ``browser_page`` fixture a Chromium page logged in through the
form (mark such tests ``browser``). Show every refusal with its status and that nothing changed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import ceil
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qsl, urlencode

import anyio
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route, compile_path

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind
from armarius.auth.web_sessions import Flash, WebSession, WebSessions
from armarius.errors import (
    ArmariusError,
    InternalError,
    InvalidInput,
    NotFound,
    RequestTooLarge,
    Unauthenticated,
    echo,
)
from armarius.evidence.model import BODY_MAX_BYTES as EVIDENCE_BODY_MAX_BYTES
from armarius.textview import REVEAL_NOTE
from armarius.web.auth import SESSION_COOKIE, check_workspace_token, refuse_agent_tokens, workspace_token
from armarius.web.pages.filters import FILTERS

logger = logging.getLogger("armarius.web")

#: Items on one page of any list.
PAGE_SIZE = 50
#: The largest form body a page accepts: an evidence unit's largest body (1 MiB of UTF-8) even when every
#: byte of it is percent-encoded (``%C3%A9``: three bytes for one), and room for the other fields.
FORM_MAX_BYTES = 3 * EVIDENCE_BODY_MAX_BYTES + 64 * 1024
#: The main navigation: (label, path). A page module owns the path it implements.
NAVIGATION = (
    ("Queue", "/"), ("Entries", "/entries"), ("Needs review", "/needs-review"), ("Drafts", "/drafts"),
    ("Repairs", "/repairs"), ("Sessions", "/sessions"), ("Evidence", "/evidence"), ("Audit", "/audit"),
)
_ERROR_TITLES = {400: "Invalid request", 401: "Not logged in", 403: "Not allowed", 404: "Not found",
                 409: "Changed meanwhile", 429: "Too many attempts"}
#: Every page's and every API twin's answer: never stored by a browser or proxy (one may show a token, once).
NO_STORE = {"Cache-Control": "no-store"}
#: The largest id a page's path takes: the JSON twins' largest (:func:`whole_number`, nine digits).
ID_MAX = 999_999_999


class PageId(Convertor[int]):
    """``{name:int}`` in a page's path: an id of one to nine digits. A longer number matches no route, so it is
    answered as an unknown address (404), never converted: the database holds no such id (SQLite cannot even
    take one above 2**63 - 1) and Python refuses to convert more than 4,300 digits."""

    regex = f"[0-9]{{1,{len(str(ID_MAX))}}}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(int(value))


register_url_convertor("page_id", PageId())
_INT_PARAMETER = re.compile(r"\{(\w+):int\}")


class PageRoute(Route):
    """A page's or form's route: its path as written (``{name:int}``), each such id matched as a :class:`PageId`."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        super().__init__(path, endpoint, **options)
        self.path_regex, self.path_format, self.param_convertors = compile_path(
            _INT_PARAMETER.sub(r"{\1:page_id}", path))


TEMPLATES = Environment(
    loader=PackageLoader("armarius.web", "templates"), autoescape=True, undefined=StrictUndefined,
    trim_blocks=True, lstrip_blocks=True,
)
TEMPLATES.filters.update(FILTERS)

Handler = Callable[["View"], Response]
T = TypeVar("T")


@dataclass
class Web:
    """The pages' share of the application: the services, the login sessions and the templates."""

    app: Armarius
    sessions: WebSessions
    templates: Environment = field(default=TEMPLATES)

    def page(self, path: str, handler: Handler, *, name: str | None = None) -> Route:
        """A GET page for a logged-in human."""
        async def endpoint(request: Request) -> Response:
            return await self._serve(request, handler, posted=False)

        return PageRoute(path, endpoint, methods=["GET"], name=name)

    def action(self, path: str, handler: Handler, *, name: str | None = None, any_workspace: bool = False) -> Route:
        """A form POST for a logged-in human, refused (403, nothing done) without the session's CSRF token, and
        (409, nothing done) when its page was shown in another workspace than the login's current one.
        ``any_workspace``: only for a form that names its own target and acts on no workspace's content (log
        out, switch workspace)."""
        async def endpoint(request: Request) -> Response:
            return await self._serve(request, handler, posted=True, any_workspace=any_workspace)

        return PageRoute(path, endpoint, methods=["POST"], name=name)

    async def _serve(self, request: Request, handler: Handler, *, posted: bool,
                     any_workspace: bool = False) -> Response:
        try:
            refuse_agent_tokens(request)
            session = await anyio.to_thread.run_sync(self.sessions.resolve, request.cookies.get(SESSION_COOKIE, ""))
        except Unauthenticated:
            return RedirectResponse(login_url(request), status_code=303)
        except ArmariusError as error:
            return self.error_page(request, error)
        view = View(web=self, request=request, session=session, form=Form())
        if posted:
            try:
                view.form = await read_form(request)
                check_workspace_token(session, view.form.get("csrf") or None, any_workspace=any_workspace)
                view.form.require_text()
            except ArmariusError as error:
                refused = await anyio.to_thread.run_sync(view.error, error)
                if isinstance(error, RequestTooLarge):  # the body is never read: nothing more on this connection
                    refused.headers["Connection"] = "close"
                return refused
        return await anyio.to_thread.run_sync(view.run, handler)

    def render(self, request: Request, template: str, *, status: int = 200, session: WebSession | None = None,
               flashes: Sequence[Flash] = (), **context: Any) -> HTMLResponse:
        """Render a template with the base context (``session`` None: the logged-out layout)."""
        path = request.url.path
        base = {
            "title": "Armarius", "session": session, "actor": session.actor if session else None,
            "nav": [{"label": label, "href": href, "current": href == path or (href != "/" and
                                                                               path.startswith(href + "/"))}
                    for label, href in NAVIGATION],
            "flashes": list(flashes), "reveal_note": REVEAL_NOTE,
            "csrf_token": workspace_token(session) if session else "",
            "csrf_field": csrf_field(workspace_token(session)) if session else Markup(""),
            "query_url": lambda **changes: query_url(request, **changes),
        }
        html = self.templates.get_template(template).render({**base, **context})
        return HTMLResponse(html, status_code=status, headers=NO_STORE)

    async def error_page_of(self, request: Request, error: ArmariusError) -> HTMLResponse:
        """The error page for a request outside the pages (an unknown address), in the person's layout if logged in."""
        session = None
        try:
            refuse_agent_tokens(request)
            session = await anyio.to_thread.run_sync(self.sessions.resolve, request.cookies.get(SESSION_COOKIE, ""))
        except ArmariusError:
            pass
        return self.error_page(request, error, session)

    def error_page(self, request: Request, error: ArmariusError, session: WebSession | None = None) -> HTMLResponse:
        title = _ERROR_TITLES.get(error.http_status, "Refused" if error.http_status < 500 else "Error")
        return self.render(request, "error.html", status=error.http_status, session=session, title=title,
                           error=error.to_dict(for_agent=False))


@dataclass
class View:
    """One request to a page, as its handler sees it."""

    web: Web
    request: Request
    session: WebSession
    form: Form

    @property
    def app(self) -> Armarius:
        return self.web.app

    @property
    def actor(self) -> Actor:
        return self.session.actor

    # Reading the request ------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return str(self.request.path_params[name])

    def path_int(self, name: str) -> int:
        """An id from the path: a whole number from 1 to ID_MAX (as the JSON twins take it). Anything else names
        nothing that can exist, and is not found, as an unknown address is."""
        number = int(self.request.path_params[name])  # one to nine digits: PageId
        if not 1 <= number <= ID_MAX:
            raise NotFound(f"There is nothing at {echo(self.request.url.path)}.")
        return number

    def query(self, name: str, default: str = "") -> str:
        return self.request.query_params.get(name, default)

    def query_int(self, name: str, default: int = 1, *, minimum: int = 1) -> int:
        """An integer query parameter (``?page=3``); a malformed one is refused as invalid_input."""
        return whole_number(self.request.query_params.get(name), name, default, minimum=minimum)

    def query_url(self, **changes: object) -> str:
        return query_url(self.request, **changes)

    # Answering ----------------------------------------------------------------------------------

    def render(self, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        """The template with the base context; shows (and removes) the session's waiting flash messages."""
        flashes = self.web.sessions.take_flashes(self.session)
        return self.web.render(self.request, template, status=status, session=self.session, flashes=flashes,
                               **context)

    def redirect(self, url: str, *, flash: str | None = None, kind: str = "info") -> RedirectResponse:
        """See-other to ``url`` (after a form: the browser then GETs it), with an optional flash message."""
        if flash is not None:
            self.flash(flash, kind)
        return RedirectResponse(url, status_code=303)

    def flash(self, text: str, kind: str = "info") -> None:
        """A message for the next page this person sees: "info", "success" or "error". Never a secret."""
        self.web.sessions.flash(self.session, text, kind)

    def error(self, error: ArmariusError) -> HTMLResponse:
        return self.web.error_page(self.request, error, self.session)

    def run(self, handler: Handler) -> Response:
        try:
            return handler(self)
        except Unauthenticated:
            return RedirectResponse(login_url(self.request), status_code=303)
        except ArmariusError as error:
            return self.error(error)
        except Exception:
            logger.exception("a page failed unexpectedly: %s %s", self.request.method, self.request.url.path)
            return self.error(InternalError())


class Form:
    """The fields of a posted form: text only, in the order sent (a name may repeat)."""

    def __init__(self, pairs: Sequence[tuple[str, str]] = ()) -> None:
        self._pairs = list(pairs)

    def get(self, name: str, default: str = "") -> str:
        """The first value of a field, or ``default`` when the form has none."""
        return next((value for key, value in self._pairs if key == name), default)

    def getlist(self, name: str) -> list[str]:
        return [value for key, value in self._pairs if key == name]

    def __contains__(self, name: object) -> bool:
        return any(key == name for key, _ in self._pairs)

    def require_text(self) -> None:
        """Refuse (invalid_input) a form with a field whose bytes were not UTF-8: read with ``surrogateescape``
        (:func:`read_form`), such a name or value holds a lone surrogate, which valid UTF-8 never decodes to.
        Called after the CSRF check, so a form from elsewhere is refused as such first."""
        for key, value in self._pairs:
            if _not_utf8(key) or _not_utf8(value):
                field_name = key if not _not_utf8(key) else "form"
                raise InvalidInput(f"The form's field {echo(field_name)} is not UTF-8 text; send it as the page "
                                   "does (UTF-8, percent-encoded).", field=field_name)


def _not_utf8(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


@dataclass(frozen=True)
class Paging(Generic[T]):
    """One page of a list: its items, its number (from 1), how many pages and items there are."""

    items: list[T]
    page: int
    pages: int
    total: int
    size: int = PAGE_SIZE


def paginate(items: Sequence[T], page: int, size: int = PAGE_SIZE) -> Paging[T]:
    """The ``page``-th slice of ``size`` items (a page past the end is the last page)."""
    pages = max(1, ceil(len(items) / size))
    page = min(max(1, page), pages)
    return Paging(items=list(items[(page - 1) * size:page * size]), page=page, pages=pages, total=len(items),
                  size=size)


#: Who may call a JSON route (``ApiRoute.callers``): agents by their token, people by their login, or both.
AGENTS = frozenset({Kind.AGENT})
HUMANS = frozenset({Kind.HUMAN})
EVERYONE = AGENTS | HUMANS


def optional_number(raw: str | None, name: str) -> int | None:
    """A whole number of at least 1 from a query or path, or None when absent (malformed: invalid_input)."""
    return whole_number(raw, name, 1) if raw else None


def body_int(call: Any, name: str) -> int:
    """A whole number from a JSON body (JSON Schema counts 3.0 as an integer; the services want an int)."""
    value = call.body[name]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def whole_number(raw: str | None, name: str, default: int, *, minimum: int = 1) -> int:
    """A query parameter's whole number (``default`` when absent); anything else is invalid_input."""
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9 or int(raw) < minimum:
        raise InvalidInput(f"The parameter {name} must be a whole number of at least {minimum}.", field=name)
    return int(raw)


def confirmed(form: Form, what: str) -> None:
    """A form's required confirmation checkbox (``name="confirm" value="yes"``: the sessions' takeover and close,
    the evidence review, ``post_button``'s ``confirm_label``), checked here too: a browser enforces ``required``,
    a script need not. Without ``confirm=yes`` the decision is refused (400 ``invalid_input``, field
    ``confirm``); call it (``confirmed(view.form, …)``) before the service, so that nothing is done. The JSON
    twins take no such field."""
    if form.get("confirm") != "yes":
        raise InvalidInput(f"Tick the box that confirms {what}, then submit the form again.", field="confirm")


def csrf_field(token: str) -> Markup:
    return Markup('<input type="hidden" name="csrf" value="{}">').format(token)


def query_url(request: Request, **changes: object) -> str:
    """This page's path with its query parameters changed (None removes one): for filters and paging."""
    params = dict(request.query_params)
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    return request.url.path + (f"?{urlencode(params)}" if params else "")


def login_url(request: Request) -> str:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return "/login" if target == "/" or request.method != "GET" else f"/login?{urlencode({'next': target})}"


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a path on this site only (never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target or len(target) > 2000:
        return "/"
    if any(ord(char) < 0x21 for char in target):
        return "/"
    return target


async def read_form(request: Request) -> Form:
    """An urlencoded form body of at most FORM_MAX_BYTES (the only kind the pages send)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        return Form()  # no fields: refused by the CSRF check, nothing parsed
    length = request.headers.get("content-length", "")
    if not length.isdigit():
        raise InvalidInput(f"A form may send at most {FORM_MAX_BYTES // (1024 * 1024)} MB, with its length stated.",
                           field="form")
    if int(length) > FORM_MAX_BYTES:  # refused before a byte is read (errors.md: request_too_large)
        raise RequestTooLarge(f"A form may send at most {FORM_MAX_BYTES // (1024 * 1024)} MB "
                              f"({FORM_MAX_BYTES} bytes); this one declares {int(length)}.", limit=FORM_MAX_BYTES)
    body = await request.body()
    try:
        # surrogateescape: a percent-encoded byte that is not UTF-8 stays recognisable (Form.require_text refuses
        # it) instead of turning into U+FFFD, which would be stored as if the person had typed it.
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=10_000,
                          errors="surrogateescape")
    except (UnicodeDecodeError, ValueError):
        return Form()
    return Form(pairs)

