"""The sessions list: filters, sort, keyset pages."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from chatkeep.inspect import queries
from chatkeep.inspect.context import (
    choice_param,
    date_param,
    inspector_of,
    ref_param,
    text_param,
)

STATE_LABELS = {
    "active": "not closed",
    "closed": "closed",
    "open": "open turn",
    "waiting": "tool call waiting",
    "over_budget": "over budget (a fold is due)",
    "failed_fold": "failed fold (backing off)",
}


def session_list(request: Request) -> Response:
    """``GET /sessions``: the page, or its table alone for htmx."""
    ins = inspector_of(request)
    f = queries.SessionFilter(
        tenant=ins.tenant_filter(request), actor=ref_param(request, "actor"),
        subject=ref_param(request, "subject"), key=text_param(request, "key", limit=255),
        since=date_param(request, "since"), until=date_param(request, "until"),
        state=choice_param(request, "state", queries.STATES),
        sort=choice_param(request, "sort", queries.SORTS, "activity") or "activity",
        after=text_param(request, "after", limit=400))
    page = queries.list_sessions(ins.engine, f, budget=ins.budget)
    name = "_sessions_table.html" if request.headers.get("hx-target") == "sessions" \
        else "sessions.html"
    return ins.render(request, name, page=page, f=f, states=STATE_LABELS,
                      sorts=queries.SORTS, title="Sessions")


ROUTES = [Route("/sessions", session_list, name="sessions")]
