"""The JSON API under /api: one route table, from which the OpenAPI document is generated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import armarius
from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.errors import ERROR_CODES
from armarius.web.auth import authenticate

ServiceCall = Callable[[Armarius, Actor], Any]


@dataclass(frozen=True)
class ApiRoute:
    path: str
    summary: str
    call: ServiceCall
    method: str = "GET"


API_ROUTES = [
    ApiRoute("/api/whoami", "The authenticated principal, its role, workspace and permissions.",
             lambda _app, actor: actor.describe()),
    ApiRoute("/api/workspace", "The workspace of the authenticated principal.",
             lambda app, actor: app.directory.workspace_info(actor)),
]


def api_routes(app: Armarius) -> list[Route]:
    def endpoint(route: ApiRoute) -> Callable[[Request], Any]:
        async def handle(request: Request) -> JSONResponse:
            actor = await authenticate(app, request.scope)
            return JSONResponse(await anyio.to_thread.run_sync(route.call, app, actor))

        return handle

    routes = [Route(route.path, endpoint(route), methods=[route.method]) for route in API_ROUTES]

    async def openapi(_request: Request) -> JSONResponse:
        return JSONResponse(openapi_document())

    async def index(_request: Request) -> JSONResponse:
        return JSONResponse({
            "openapi": "/api/openapi.json",
            "authentication": "Authorization: Bearer <agent token>",
            "routes": [{"method": route.method, "path": route.path, "summary": route.summary} for route in API_ROUTES],
        })

    routes.append(Route("/api", index, methods=["GET"]))
    routes.append(Route("/api/openapi.json", openapi, methods=["GET"]))
    return routes


def openapi_document() -> dict[str, Any]:
    error = {"$ref": "#/components/schemas/Error"}
    paths: dict[str, Any] = {}
    for route in API_ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = {
            "summary": route.summary,
            "security": [{"bearer": []}],
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
                "401": {"description": "No valid token", "content": {"application/json": {"schema": error}}},
            },
        }
    paths["/api"] = {"get": {"summary": "This API's routes and where its OpenAPI document is.",
                             "responses": {"200": {"description": "OK"}}}}
    paths["/healthz"] = {"get": {"summary": "Liveness and database reachability.",
                                 "responses": {"200": {"description": "OK"}, "503": {"description": "Down"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Armarius API", "version": armarius.__version__},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {
                    "type": "object",
                    "required": ["code", "message", "details"],
                    "properties": {
                        "code": {"type": "string", "enum": sorted(ERROR_CODES)},
                        "message": {"type": "string"},
                        "details": {"type": "object"},
                    },
                }},
            }},
        },
    }
