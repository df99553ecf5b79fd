"""The sessions list: filters, sort, keyset pages; app keys and titles masked like text."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chatkeep.inspect.context import (
    Inspector,
    choice_param,
    date_param,
    ref_param,
    text_param,
)
from chatkeep.inspect.masking import Masker, Reveal
from chatkeep.inspect.routes.reveal import list_page_routes
from chatkeep.store.inspection_sessions import SORTS, STATES, SessionFilter, list_sessions

STATE_LABELS = {
    "active": "not closed",
    "closed": "closed",
    "open": "open turn",
    "waiting": "tool call waiting",
    "over_budget": "over budget (a fold is due)",
    "failed_fold": "failed fold (backing off)",
}


def session_list(request: Request, ins: Inspector, *, reveal: Reveal | None = None,
                 form: dict[str, str] | None = None, status: int = 200) -> Response:
    """``GET /sessions``: the page, or its table alone for htmx; each app key and title
    masked under its session's mapping (``POST`` with the vault key: as stored)."""
    f = SessionFilter(
        tenant=ins.tenant_filter(request), actor=ref_param(request, "actor"),
        subject=ref_param(request, "subject"), key=text_param(request, "key", limit=255),
        since=date_param(request, "since"), until=date_param(request, "until"),
        state=choice_param(request, "state", STATES),
        sort=choice_param(request, "sort", SORTS, "activity") or "activity",
        after=text_param(request, "after", limit=400))
    page = list_sessions(ins.engine, f, budget=ins.budget)
    revealed = reveal is not None and reveal.granted
    shown = Masker(None) if revealed else None
    labels = {line.row.id: ins.labels(line.row, shown) for line in page.lines}
    name = "_sessions_table.html" if request.headers.get("hx-target") == "sessions" \
        else "sessions.html"
    return ins.render(request, name, status, page=page, f=f, states=STATE_LABELS,
                      sorts=SORTS, labels=labels, revealed=revealed,
                      reveal_message=reveal.message if reveal else None, title="Sessions")


ROUTES = list_page_routes("/sessions", "sessions", "sessions list", session_list)
