"""The inspector's ASGI application: routes, static files, error pages, the access guard.

``create_app`` serves an :class:`~chatkeep.inspect.context.Inspector` (tests build one over
their own store); ``open_app`` opens the database read-only first (what ``chatkeep
inspect`` runs). Every error is a page: an unknown id or another tenant's is 404, a
malformed parameter 400 (both raised as Starlette's ``HTTPException`` with the reason),
a store that cannot answer 503, anything unexpected 500 (logged, never shown).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from chatkeep.config import Config
from chatkeep.errors import ChatkeepError
from chatkeep.inspect.context import STATIC, Inspector
from chatkeep.inspect.readonly import open_read_only
from chatkeep.inspect.routes import (
    lifecycle,
    memories,
    privacy,
    session,
    sessions,
    summary,
    turns,
    usage,
)
from chatkeep.inspect.security import AccessGuard, allowed_hosts, require_token
from chatkeep.inspect.settings import load_settings
from chatkeep.memory.embedders import Embedder
from chatkeep.refs import Ref

log = logging.getLogger("chatkeep.inspect")


def _home(request: Request) -> Response:
    return RedirectResponse("/sessions", status_code=303)


def _error(request: Request, status: int, message: str) -> Response:
    inspector: Inspector = request.app.state.inspector
    return inspector.render(request, "error.html", status, status_code=status,
                            message=message, title=f"{status}")


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = str(getattr(exc, "detail", "") or "")
    if detail in ("", "Not Found"):
        detail = "no such page" if status == 404 else "request refused"
    return _error(request, status, detail)


async def _store_error(request: Request, exc: Exception) -> Response:
    log.warning("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return _error(request, 503, f"the store could not answer: {type(exc).__name__}: {exc}")


async def _internal(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _error(request, 500, "the inspector failed on this page (the error is logged)")


def create_app(inspector: Inspector, *, host: str = "127.0.0.1",
               token: str | None = None) -> Any:
    """The application serving ``inspector``, guarded for a server bound to ``host``
    (``token``: required on every request when given). ``ConfigError`` for a host
    beyond loopback without a token (see ``security.require_token``)."""
    require_token(host, token)
    routes = [Route("/", _home), *sessions.ROUTES, *session.ROUTES, *summary.ROUTES, *turns.ROUTES,
              *privacy.ROUTES, *memories.ROUTES, *usage.ROUTES, *lifecycle.ROUTES,
              Mount("/static", StaticFiles(directory=str(STATIC)), name="static")]
    app = Starlette(routes=routes, exception_handlers={
        HTTPException: _http_error,
        ChatkeepError: _store_error, Exception: _internal})
    app.state.inspector = inspector
    return AccessGuard(app, hosts=allowed_hosts(host), token=token)


def open_app(database_url: str, *, config: Config | None = None,
             config_file: str | None = None, tenant: Ref | None = None,
             reveal: bool = False, host: str = "127.0.0.1", token: str | None = None,
             embedder: Embedder | None = None) -> tuple[Any, Inspector]:
    """Open ``database_url`` read-only and build the application over it; returns it and
    its inspector (close ``inspector.keep`` when done). The settings are ``config``, or
    the application's as ``Config.load`` reads them (``config_file``, the environment):
    the dry run uses their budget and says where it came from. ``ConfigError`` before
    anything is opened for a host beyond loopback without a token; ``StoreError`` when
    the database cannot be opened or has no chatkeep schema."""
    require_token(host, token)
    settings, origin = load_settings(config, config_file)
    keep = open_read_only(database_url, settings, embedder=embedder)
    inspector = Inspector(keep, tenant=tenant, reveal=reveal, budget_origin=origin)
    return create_app(inspector, host=host, token=token), inspector
