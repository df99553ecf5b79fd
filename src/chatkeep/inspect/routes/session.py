"""A session: its stored log in windows of seq, and "what the model receives now".

The page's first screen is the session row and one window of its log (an index range,
whatever the session's length); the preview is fetched by htmx once the page is up, so a
long unsummarized tail never delays the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from chatkeep.formats import FORMATS
from chatkeep.history.plan import previous_texts
from chatkeep.inspect.context import (
    Inspector,
    choice_param,
    inspector_of,
    int_param,
    text_param,
)
from chatkeep.inspect.masking import Masker
from chatkeep.inspect.preview import PARTS, preview
from chatkeep.inspect.routes.reveal import session_page_routes
from chatkeep.inspect.svg import stacked_bar
from chatkeep.messages import Message
from chatkeep.store.inspection_log import CallLink, LogWindow, read_log
from chatkeep.store.rows import SessionRow

#: Characters of one message shown (masked first, then cut).
SHOWN_CHARS = 4000
#: Characters of one message masked at most (a longer one is cut before masking).
MASKED_CHARS = 20_000


@dataclass
class LogEntry:
    """One message of the log as the page shows it."""

    message: Message
    text: str
    cut: int
    calls: list[dict[str, Any]] = field(default_factory=list)
    answers: CallLink | None = None


def _shown(masker: Masker, text: str | None, context: str | None) -> tuple[str, int]:
    raw = text or ""
    shown = masker.text(raw[:MASKED_CHARS], context)
    cut = max(0, len(raw) - SHOWN_CHARS)
    return (shown[:SHOWN_CHARS] if cut else shown), cut


def log_entries(window: LogWindow, masker: Masker) -> list[LogEntry]:
    """The window's messages with masked text and their tool calls paired."""
    previous = previous_texts(window.messages)
    entries = []
    for message in window.messages:
        text, cut = _shown(masker, message.content, previous.get(message.seq))
        calls = [{"id": c.id, "name": c.name,
                  "arguments": _shown(masker, c.arguments, None)[0],
                  "link": window.links.get(c.id)} for c in message.tool_calls]
        answers = window.links.get(message.tool_call_id) if message.tool_call_id else None
        entries.append(LogEntry(message, text, cut, calls, answers))
    return entries


def _page(request: Request, ins: Inspector, row: SessionRow, masker: Masker, *,
          reveal_message: str | None = None, status: int = 200) -> Response:
    after = int_param(request, "after")
    before = int_param(request, "before", minimum=1)
    window = read_log(ins.engine, row, after=after, before=before)
    context = {"row": row, "window": window, "entries": log_entries(window, masker),
               "masker": masker, "formats": list(FORMATS), "reveal_message": reveal_message,
               "tab": "log",
               "title": f"Session {ins.labels(row, masker)[0] or row.id}"}
    if request.headers.get("hx-target") == "log":
        return ins.render(request, "_log.html", status, **context)
    return ins.render(request, "session.html", status, **context)


def session_preview(request: Request) -> Response:
    """``GET /sessions/{id}/preview``: the dry run in one wire format, with its budget."""
    ins = inspector_of(request)
    row = ins.session(request.path_params["session_id"])
    wire = choice_param(request, "format", list(FORMATS), "openai_chat") or "openai_chat"
    system = text_param(request, "system", limit=20_000) or ""
    shown = preview(ins.keep, row, system, wire, ins.masker(row.pii_vault))
    budget = shown.info.budget if shown.info else ins.budget
    chart = stacked_bar(shown.parts, budget) if shown.parts else ""
    return ins.render(request, "_preview.html", row=row, p=shown, chart=chart, parts=PARTS,
                      formats=list(FORMATS), system=system)


ROUTES = [
    # GET: the session and a window of its log (the log alone for htmx); POST: reveal.
    *session_page_routes("/sessions/{session_id}", "session", "log", _page),
    Route("/sessions/{session_id}/preview", session_preview, name="preview"),
]
