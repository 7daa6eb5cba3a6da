"""Bearer-token authentication for HTTP requests (agent tokens)."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.datastructures import Headers
from starlette.types import Scope

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.errors import Unauthenticated

ACTOR_SCOPE_KEY = "armarius.actor"


def bearer_token(headers: Headers) -> str:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Send an agent token as 'Authorization: Bearer <token>'.")
    return token.strip()


async def authenticate(app: Armarius, scope: Scope) -> Actor:
    """Resolve the request's principal and record it in the ASGI scope for the handlers below."""
    token = bearer_token(Headers(scope=scope))
    actor = await anyio.to_thread.run_sync(app.directory.authenticate_token, token)
    scope[ACTOR_SCOPE_KEY] = actor
    # The SDK binds each MCP session to the credential that opened it: a session id presented
    # with another token is answered as if it did not exist. The token itself is never kept.
    scope["user"] = AuthenticatedUser(
        AccessToken(token=f"armarius-token-{actor.token_id}", client_id=f"token-{actor.token_id}", scopes=[])
    )
    return actor


def actor_from_scope(scope: Scope | Any) -> Actor:
    actor = scope.get(ACTOR_SCOPE_KEY) if scope is not None else None
    if not isinstance(actor, Actor):
        raise Unauthenticated("This request carries no authenticated principal.")
    return actor
