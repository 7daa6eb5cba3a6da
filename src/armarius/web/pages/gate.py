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
from armarius.auth.web_sessions import Flash, WebSession, WebSessions, check_csrf
from armarius.errors import ArmariusError, InternalError, InvalidInput, NotFound, Unauthenticated, echo
from armarius.evidence.model import BODY_MAX_BYTES as EVIDENCE_BODY_MAX_BYTES
from armarius.textview import REVEAL_NOTE
from armarius.web.auth import SESSION_COOKIE, refuse_agent_tokens
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

    def action(self, path: str, handler: Handler, *, name: str | None = None) -> Route:
        """A form POST for a logged-in human, refused (403, nothing done) without the session's CSRF token."""
        async def endpoint(request: Request) -> Response:
            return await self._serve(request, handler, posted=True)

        return PageRoute(path, endpoint, methods=["POST"], name=name)

    async def _serve(self, request: Request, handler: Handler, *, posted: bool) -> Response:
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
                check_csrf(session, view.form.get("csrf") or None)
            except ArmariusError as error:
                return await anyio.to_thread.run_sync(view.error, error)
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
            "csrf_field": csrf_field(session.csrf_token) if session else Markup(""),
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
    if not length.isdigit() or int(length) > FORM_MAX_BYTES:
        raise InvalidInput(f"A form may send at most {FORM_MAX_BYTES // (1024 * 1024)} MB, with its length stated.",
                           field="form")
    body = await request.body()
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=10_000)
    except (UnicodeDecodeError, ValueError):
        return Form()
    return Form(pairs)

