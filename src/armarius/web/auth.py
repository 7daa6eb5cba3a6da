"""Who is calling over HTTP: agents with bearer tokens, humans with the web session cookie.

Agents present ``Authorization: Bearer <token>`` on /mcp and /api. Humans log in on the web pages
(:mod:`armarius.web.pages.login`) and then carry the ``armarius_session`` cookie: HttpOnly,
SameSite=Lax, Path=/, and Secure when the request came over https (directly, or through a proxy
on this machine that sends ``X-Forwarded-Proto``, which uvicorn honours). An agent token never
opens a page (:func:`refuse_agent_tokens`).

A person's forms and JSON writes carry a CSRF token bound to the workspace the page was shown in
(:func:`workspace_token`, checked by :func:`check_workspace_token`): a page of workspace A, posted
after the login switched to workspace B (in another tab), is refused with 409 and does nothing, since
its slugs, unit names and revisions would name B's things, which the person never saw.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from typing import Any

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.auth.secrets import TOKEN_PREFIX, digests_match
from armarius.auth.web_sessions import WebSession
from armarius.errors import Conflict, NotAllowed, Unauthenticated

ACTOR_SCOPE_KEY = "armarius.actor"
#: The web login session's cookie (its value is the session secret; the store keeps its SHA-256).
SESSION_COOKIE = "armarius_session"
#: An agent token in any header: ``arm_`` and the 43 characters of its secret (just the prefix would also
#: match a cookie named ``swarm_id`` or a Referer of ``/entries?q=farm_``; no secret of the pages is this long).
_AGENT_TOKEN = re.compile(re.escape(TOKEN_PREFIX).encode("ascii") + rb"[A-Za-z0-9_-]{43}")
#: What a page's CSRF token authenticates, under the login's CSRF secret: this label and a workspace's name.
_WORKSPACE_TOKEN_LABEL = b"armarius page token of workspace\x00"
#: The longest CSRF token read: a workspace name (64 characters), ":" and 43 of the MAC, with room to spare.
_WORKSPACE_TOKEN_MAX = 200


def bearer_token(headers: Headers) -> str:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Send an agent token as 'Authorization: Bearer <token>'.")
    return token.strip()


async def authenticate(app: Armarius, scope: Scope) -> Actor:
    """Resolve the request's principal and record it in the ASGI scope for the handlers below."""
    token = bearer_token(Headers(scope=scope))
    actor = app.directory.recently_checked(token) or _checked_at_once(app, token)
    if actor is None:
        actor = await anyio.to_thread.run_sync(app.directory.authenticate_token, token)
    scope[ACTOR_SCOPE_KEY] = actor
    # The SDK binds each MCP session to the credential that opened it: a session id presented
    # with another token is answered as if it did not exist. The token itself is never kept.
    scope["user"] = AuthenticatedUser(
        AccessToken(token=f"armarius-token-{actor.token_id}", client_id=f"token-{actor.token_id}", scopes=[])
    )
    return actor


def _checked_at_once(app: Armarius, token: str) -> Actor | None:
    """The token checked here, on the event loop, where the check waits for nobody: the store's writers' turn
    is free now (the check may record when the token was last used; see Database.writes_without_waiting).
    None where it would wait (PostgreSQL, or another writer at work): a worker thread checks it then. A
    worker thread has to win the interpreter from the loop for each of the check's steps, which took
    45-115 ms a check with 32 busy clients (a token is checked again every second), against a fraction of
    a millisecond here."""
    with app.database.writes_without_waiting() as held:
        return app.directory.authenticate_token(token) if held else None


def actor_from_scope(scope: Scope | Any) -> Actor:
    actor = scope.get(ACTOR_SCOPE_KEY) if scope is not None else None
    if not isinstance(actor, Actor):
        raise Unauthenticated("This request carries no authenticated principal.")
    return actor


def refuse_agent_tokens(request: Request) -> None:
    """Pages and forms are for humans who logged in: a bearer credential (or an Authorization holding
    ``arm_``) is refused, valid or not, and so is an agent token in any other header (a custom header, a
    cookie). Other schemes (a proxy's HTTP Basic login) are ignored."""
    value = request.headers.get("authorization", "")
    if (value.split(" ", 1)[0].lower() == "bearer" or TOKEN_PREFIX in value
            or any(_AGENT_TOKEN.search(held) for _name, held in request.headers.raw)):
        raise NotAllowed("The web pages are for people who log in; agent tokens never open them. "
                         "Agents use /mcp (and /api) with their token.", reason="agent_token_on_page")


def set_session_cookie(response: Response, request: Request, secret: str) -> None:
    """The login cookie: HttpOnly, SameSite=Lax, Path=/, Secure over https; no Max-Age (the store ends it)."""
    response.set_cookie(SESSION_COOKIE, secret, path="/", httponly=True, samesite="lax",
                        secure=request.url.scheme == "https")


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax",
                           secure=request.url.scheme == "https")


# CSRF tokens bound to a workspace -------------------------------------------------------------------


def workspace_token(session: WebSession, workspace: str | None = None) -> str:
    """The CSRF token of the pages shown in ``workspace`` (None: the session's current one): the workspace's
    name, ``:`` and an HMAC-SHA256 of it under the login's CSRF secret (which the store keeps with the session,
    so every server process derives the same token). Every form of a page (the ``csrf`` field) and its
    ``<meta name="csrf-token">`` carry the token of the workspace the page was rendered in."""
    name = session.actor.workspace if workspace is None else workspace
    return f"{name}:{_workspace_mac(session, name)}"


def _workspace_mac(session: WebSession, workspace: str) -> str:
    message = _WORKSPACE_TOKEN_LABEL + workspace.encode("utf-8", "surrogatepass")
    digest = hmac.new(session.csrf_token.encode("utf-8"), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def check_workspace_token(session: WebSession, presented: str | None, *, any_workspace: bool = False,
                          api: bool = False) -> None:
    """Refuse a form or a person's JSON write whose CSRF token is not one this login issued (403 ``not_allowed``,
    ``reason: csrf``), or was issued for another workspace than the one the login works in now (409
    ``conflict``, ``reason: workspace_changed``): a page of workspace A posted after a switch to B would act on
    B's entry or unit of the same name, which the person never saw. ``any_workspace``: a form that names its
    own target and is not about a workspace's content (log out, switch workspace) is taken from a page of any
    workspace of the login."""
    name, separator, mac = (presented or "").rpartition(":")
    if (not separator or not presented or len(presented) > _WORKSPACE_TOKEN_MAX
            or not digests_match(_workspace_mac(session, name), mac)):
        raise NotAllowed(
            "The form's security token is missing or does not match your login (it changes when you log in "
            "again). Reload the page and submit it again.",
            reason="csrf",
        )
    current = session.actor.workspace
    if any_workspace or name == current:
        return
    if api:
        message = (f"This CSRF token was read in workspace {name}, but your login now works in workspace "
                   f"{current} (it was switched meanwhile, in another tab perhaps), so nothing was done: the names "
                   f"you send would act on {current}'s things. Check what you act on in {current} and send its "
                   f"token (a page's <meta name=\"csrf-token\">, or the answer of POST /api/workspace), or switch "
                   f"back to {name} first.")
    else:
        message = (f"This page belongs to workspace {name}, but you now work in workspace {current} (you switched "
                   f"in another tab or window), so nothing was done: it would have acted on {current}'s entry or "
                   f"unit of that name, which this page did not show you. Reload the page to see {current}'s, or "
                   f"switch back to {name} first.")
    raise Conflict(message, reason="workspace_changed", shown_in=name, workspace=current)
