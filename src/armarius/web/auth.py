"""Who is calling over HTTP: agents with bearer tokens, humans with the web session cookie.

Agents present ``Authorization: Bearer <token>`` on /mcp and /api. Humans log in on the web pages
(:mod:`armarius.web.pages.login`) and then carry the ``armarius_session`` cookie: HttpOnly,
SameSite=Lax, Path=/, and Secure when the request came over https (directly, or through a proxy
on this machine that sends ``X-Forwarded-Proto``, which uvicorn honours). An agent token never
opens a page (:func:`refuse_agent_tokens`).
"""

from __future__ import annotations

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
from armarius.auth.secrets import TOKEN_PREFIX
from armarius.errors import NotAllowed, Unauthenticated

ACTOR_SCOPE_KEY = "armarius.actor"
#: The web login session's cookie (its value is the session secret; the store keeps its SHA-256).
SESSION_COOKIE = "armarius_session"
#: An agent token in any header: ``arm_`` and the 43 characters of its secret (just the prefix would also
#: match a cookie named ``swarm_id`` or a Referer of ``/entries?q=farm_``; no secret of the pages is this long).
_AGENT_TOKEN = re.compile(re.escape(TOKEN_PREFIX).encode("ascii") + rb"[A-Za-z0-9_-]{43}")


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
