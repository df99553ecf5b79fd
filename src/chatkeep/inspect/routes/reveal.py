"""What every session page shares: its ``GET`` (placeholders) and the reveal action, a
keyed, logged form post that renders the same page with the stored values instead.

Pages over many sessions (the sessions list, the usage tables and their CSV) have the
same pair: there the key must be one of the configured vault keys, since no one
session's mapping decides."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from chatkeep.inspect.context import (
    Inspector,
    client_of,
    form_field,
    form_fields,
    inspector_of,
)
from chatkeep.inspect.masking import Masker, Reveal, check_reveal, log_reveal
from chatkeep.store.rows import SessionRow


class SessionPage(Protocol):
    """Renders one page of a session with a masker (and a reveal verdict to show)."""

    def __call__(self, request: Request, ins: Inspector, row: SessionRow, masker: Masker, *,
                 reveal_message: str | None = None, status: int = 200) -> Response:
        """The page."""
        ...


def reveal_endpoint(page: str, render: SessionPage) -> Callable[[Request],
                                                                 Awaitable[Response]]:
    """``POST`` handler for the session page ``page`` (named in the audit log): granted,
    the page shows stored values; refused, it shows placeholders and why (403)."""

    def revealed(request: Request, typed: str) -> Response:
        ins = inspector_of(request)
        row = ins.session(request.path_params["session_id"])
        verdict = check_reveal(enabled=ins.reveal, typed_key=typed, blob=row.pii_vault,
                               configured_key=ins.vault_key)
        log_reveal(verdict, page=f"session {row.id} {page}", client=client_of(request))
        if not verdict.granted:
            return render(request, ins, row, ins.masker(row.pii_vault),
                          reveal_message=verdict.message, status=403)
        return render(request, ins, row, Masker(None, verdict.vault),
                      reveal_message=verdict.message)

    async def endpoint(request: Request) -> Response:
        typed = await form_field(request, "key")
        return await run_in_threadpool(revealed, request, typed)

    return endpoint


def page_endpoint(render: SessionPage) -> Callable[[Request], Response]:
    """``GET`` handler for a session page: the session named in the path, placeholders
    only."""

    def endpoint(request: Request) -> Response:
        ins = inspector_of(request)
        row = ins.session(request.path_params["session_id"])
        return render(request, ins, row, ins.masker(row.pii_vault))

    return endpoint


def session_page_routes(path: str, name: str, page: str, render: SessionPage) -> list[Route]:
    """The ``GET`` of a session page at ``path`` and its reveal ``POST`` (logged as
    ``page``)."""
    return [Route(path, page_endpoint(render), name=name),
            Route(path, reveal_endpoint(page, render), methods=["POST"])]



class ListPage(Protocol):
    """Renders a page over many sessions: masked, or (``reveal`` granted) as stored; a
    refused ``reveal`` is shown with placeholders and why. ``form``: the posted fields."""

    def __call__(self, request: Request, ins: Inspector, *, reveal: Reveal | None = None,
                 form: dict[str, str] | None = None, status: int = 200) -> Response:
        """The page."""
        ...


def list_page_routes(path: str, name: str, page: str, render: ListPage) -> list[Route]:
    """The ``GET`` of a page over many sessions at ``path`` (placeholders) and its reveal
    ``POST`` (logged as ``page``): granted only with one of ``privacy.encryption_key``'s
    keys, on an inspector started with ``--reveal``."""

    def get(request: Request) -> Response:
        return render(request, inspector_of(request))

    def revealed(request: Request, form: dict[str, str]) -> Response:
        ins = inspector_of(request)
        verdict = check_reveal(enabled=ins.reveal, typed_key=form.get("key", ""), blob=None,
                               configured_key=ins.vault_key)
        log_reveal(verdict, page=page, client=client_of(request))
        return render(request, ins, reveal=verdict, form=form,
                      status=200 if verdict.granted else 403)

    async def post(request: Request) -> Response:
        form = await form_fields(request)
        return await run_in_threadpool(revealed, request, form)

    return [Route(path, get, name=name), Route(path, post, methods=["POST"])]
