"""Logging in and out, and switching workspace: GET/POST /login, POST /logout, POST /workspace.

The login form has a CSRF token too, before any session exists: GET /login sets a token in the
``armarius_login`` cookie (Path=/login) and in the form's hidden ``csrf`` field, and POST /login is
refused (403, nothing checked or recorded) unless the two match *and* the server issued the token
within the last hour. The token is a random nonce, the time it was issued and an HMAC-SHA256 of
both (:func:`login_token`), under a key derived from the installation's audit key: every server
process of the store holds that key (a worker of ``armarius serve --workers N``, or a server on
another machine), so a token served by one is accepted by all, and a token a client made up itself
is refused. After ``armarius audit rotate-key`` a process started before the rotation refuses the
tokens of one started after it until it is restarted too (the person reloads the login page).

POST /login is the one form anyone may send without a session, so its body is held to
``LOGIN_FORM_MAX_BYTES`` (8 KiB: a workspace, a name, a password, the token and where to go next) rather
than the pages' ``FORM_MAX_BYTES`` (3 MiB): a longer declared body is refused with 413
(``request_too_large``) before a byte of it is read, and the connection closed.

A successful login starts a new session (a new secret, whatever cookie the browser had: no session
fixation). Every failed login is told "The principal name or password is wrong." (401), also a right
password in a workspace the person is not a member of (:meth:`WebSessions.start`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from armarius.app import Armarius
from armarius.audit.keys import KeyedDatabase
from armarius.auth.secrets import digests_match
from armarius.auth.web_sessions import StartedSession
from armarius.errors import ArmariusError, InvalidInput, NotAllowed, RequestTooLarge, TooManyAttempts, Unauthenticated
from armarius.web.auth import SESSION_COOKIE, clear_session_cookie, refuse_agent_tokens, set_session_cookie
from armarius.web.pages.gate import View, Web, read_form, safe_next

LOGIN_COOKIE = "armarius_login"
#: The largest login form read (module doc); the fields it holds take a few hundred bytes.
LOGIN_FORM_MAX_BYTES = 8 * 1024
_LOGIN_COOKIE_SECONDS = 3600
#: How far ahead of this server's clock another process's token may be dated (clocks of several machines).
_CLOCK_SKEW_SECONDS = 60
_TOKEN_KEY_LABEL = b"armarius login form token\x00"
#: Without an audit keyring (an app not opened by open_app): a key of this process only.
_PROCESS_KEY = secrets.token_bytes(32)


def routes(web: Web) -> list[BaseRoute]:
    async def login_page(request: Request) -> Response:
        try:
            refuse_agent_tokens(request)
        except ArmariusError as error:
            return web.error_page(request, error)
        if await _logged_in(web, request):
            return RedirectResponse(safe_next(request.query_params.get("next")), status_code=303)
        notice = "You are logged out." if request.query_params.get("ended") else None
        return _form(web, request, notice=notice, next_path=request.query_params.get("next", ""))

    async def login(request: Request) -> Response:
        try:
            refuse_agent_tokens(request)
            length = request.headers.get("content-length", "")
            if length.isdigit() and int(length) > LOGIN_FORM_MAX_BYTES:
                raise RequestTooLarge(f"A login form may send at most {LOGIN_FORM_MAX_BYTES} bytes.",
                                      limit=LOGIN_FORM_MAX_BYTES)
            form = await read_form(request)
            presented, expected = form.get("csrf"), request.cookies.get(LOGIN_COOKIE)
            if not presented or not expected or not digests_match(expected, presented) or not token_is_valid(
                    login_keys(web.app), expected, now=time.time()):
                raise NotAllowed("The login form's security token is missing or expired. Reload the login page "
                                 "and try again.", reason="csrf")
            form.require_text()
        except ArmariusError as error:
            refused = web.error_page(request, error)
            if isinstance(error, RequestTooLarge):  # the body is never read: nothing more on this connection
                refused.headers["Connection"] = "close"
            return refused
        name, workspace, next_path = form.get("name"), form.get("workspace"), form.get("next")
        client = request.client.host if request.client else "unknown"
        try:
            started: StartedSession = await anyio.to_thread.run_sync(
                lambda: web.sessions.start(name, form.get("password"), workspace=workspace, client=client))
        except (Unauthenticated, NotAllowed, TooManyAttempts, InvalidInput) as error:
            response = _form(web, request, problem=error.message, status=error.http_status, name=name,
                             workspace=workspace, next_path=next_path)
            if isinstance(error, TooManyAttempts):
                response.headers["Retry-After"] = str(error.details["retry_after_seconds"])
            return response
        entered = RedirectResponse(safe_next(next_path), status_code=303)
        set_session_cookie(entered, request, started.secret)
        entered.delete_cookie(LOGIN_COOKIE, path="/login", httponly=True, samesite="lax",
                              secure=request.url.scheme == "https")
        return entered

    return [
        Route("/login", login_page, methods=["GET"], name="login_page"),
        Route("/login", login, methods=["POST"], name="login"),
        # Both name their own target and act on no workspace's content: taken from a page of any workspace.
        web.action("/logout", logout, name="logout", any_workspace=True),
        web.action("/workspace", switch_workspace, name="switch_workspace", any_workspace=True),
    ]


def logout(view: View) -> Response:
    view.web.sessions.end(view.session)
    response = RedirectResponse("/login?ended=1", status_code=303)
    clear_session_cookie(response, view.request)
    return response


def switch_workspace(view: View) -> Response:
    workspace = view.form.get("workspace")
    view.web.sessions.switch_workspace(view.session, workspace)
    return view.redirect("/", flash=f"You are now working in workspace {workspace}.", kind="success")


async def _logged_in(web: Web, request: Request) -> bool:
    secret = request.cookies.get(SESSION_COOKIE)
    if not secret:
        return False
    try:
        await anyio.to_thread.run_sync(web.sessions.resolve, secret)
    except Unauthenticated:
        return False
    return True


def _form(web: Web, request: Request, *, notice: str | None = None, problem: str | None = None, status: int = 200,
          name: str = "", workspace: str = "", next_path: str = "") -> HTMLResponse:
    """The login page with a fresh login CSRF token (in its cookie and its hidden field)."""
    token = login_token(login_keys(web.app)[-1], now=time.time())
    response = web.render(request, "login.html", status=status, title="Log in", login_csrf=token, notice=notice,
                          problem=problem, name=name, workspace=workspace, next_path=safe_next(next_path))
    response.set_cookie(LOGIN_COOKIE, token, max_age=_LOGIN_COOKIE_SECONDS, path="/login", httponly=True,
                        samesite="lax", secure=request.url.scheme == "https")
    return response


def login_keys(app: Armarius) -> tuple[bytes, ...]:
    """The keys of the login form's tokens, one for each audit key (the last signs new tokens; every one checks)."""
    database = app.database
    if not isinstance(database, KeyedDatabase):
        return (_PROCESS_KEY,)
    return tuple(hmac.new(key.secret, _TOKEN_KEY_LABEL, hashlib.sha256).digest() for key in database.keyring.keys)


def login_token(key: bytes, *, now: float) -> str:
    """A login form's token: ``<nonce>.<issued, Unix seconds>.<HMAC of both>``."""
    signed = f"{secrets.token_urlsafe(24)}.{int(now)}"
    return f"{signed}.{_mac(key, signed)}"


def token_is_valid(keys: tuple[bytes, ...], token: str, *, now: float) -> bool:
    """Whether ``token`` was issued by a server process of this installation within the last hour."""
    signed, _, mac = token.rpartition(".")
    issued = signed.partition(".")[2]
    if not issued.isascii() or not issued.isdigit() or len(issued) > 12:
        return False
    if not -_CLOCK_SKEW_SECONDS <= now - int(issued) <= _LOGIN_COOKIE_SECONDS:
        return False
    return any(digests_match(_mac(key, signed), mac) for key in keys)


def _mac(key: bytes, signed: str) -> str:
    digest = hmac.new(key, signed.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
