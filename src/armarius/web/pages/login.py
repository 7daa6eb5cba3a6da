"""Logging in and out, and switching workspace: GET/POST /login, POST /logout, POST /workspace.

The login form has a CSRF token too, before any session exists: GET /login sets a random token in
the ``armarius_login`` cookie (Path=/login) and in the form's hidden ``csrf`` field, and POST /login
is refused (403, nothing checked or recorded) unless the two match. A successful login starts a new
session (a new secret, whatever cookie the browser had: no session fixation).
"""

from __future__ import annotations

import hmac
import secrets

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from armarius.auth.web_sessions import StartedSession
from armarius.errors import ArmariusError, NotAllowed, TooManyAttempts, Unauthenticated
from armarius.web.auth import SESSION_COOKIE, clear_session_cookie, refuse_agent_tokens, set_session_cookie
from armarius.web.pages.gate import View, Web, read_form, safe_next

LOGIN_COOKIE = "armarius_login"
_LOGIN_COOKIE_SECONDS = 3600


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
            form = await read_form(request)
            presented, expected = form.get("csrf"), request.cookies.get(LOGIN_COOKIE)
            if not presented or not expected or not hmac.compare_digest(
                    presented.encode("utf-8"), expected.encode("utf-8")):
                raise NotAllowed("The login form's security token is missing or expired. Reload the login page "
                                 "and try again.", reason="csrf")
        except ArmariusError as error:
            return web.error_page(request, error)
        name, workspace, next_path = form.get("name"), form.get("workspace"), form.get("next")
        client = request.client.host if request.client else "unknown"
        try:
            started: StartedSession = await anyio.to_thread.run_sync(
                lambda: web.sessions.start(name, form.get("password"), workspace=workspace, client=client))
        except (Unauthenticated, NotAllowed, TooManyAttempts) as error:
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
        web.action("/logout", logout, name="logout"),
        web.action("/workspace", switch_workspace, name="switch_workspace"),
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
    token = secrets.token_urlsafe(32)
    response = web.render(request, "login.html", status=status, title="Log in", login_csrf=token, notice=notice,
                          problem=problem, name=name, workspace=workspace, next_path=safe_next(next_path))
    response.set_cookie(LOGIN_COOKIE, token, max_age=_LOGIN_COOKIE_SECONDS, path="/login", httponly=True,
                        samesite="lax", secure=request.url.scheme == "https")
    return response
