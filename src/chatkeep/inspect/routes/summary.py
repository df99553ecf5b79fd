"""A session's structured summary (items by type, narrative) and its folds: each stored
fold's seq range, calls and tokens (``chat_folds``), failed folds and the back-off, the
summarizer calls in the ledger, the fold that last touched each item, and the current
watermark and version."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from chatkeep.history.summary import SECTIONS, StructuredSummary
from chatkeep.inspect.context import Inspector
from chatkeep.inspect.masking import Masker
from chatkeep.inspect.routes.reveal import session_page_routes
from chatkeep.store.inspection_log import last_seq_before
from chatkeep.store.inspection_usage import UsageFilter, ledger_lines
from chatkeep.store.rows import SessionRow

FOLD_ROWS = 200


def _page(request: Request, ins: Inspector, row: SessionRow, masker: Masker, *,
          reveal_message: str | None = None, status: int = 200) -> Response:
    summary = StructuredSummary.load(row.summary)
    sections: list[tuple[str, list[Any]]] = []
    by_fold: dict[int, list[str]] = defaultdict(list)
    narrative = ""
    tokens = 0
    if summary is not None:
        for kind, title in SECTIONS.items():
            items = [(i.id, masker.restore_then_mask(i.text), i.touched)
                     for i in summary.items if i.type is kind]
            if items:
                sections.append((title, items))
        for item in summary.items:
            by_fold[item.touched].append(item.id)
        narrative = masker.restore_then_mask(summary.narrative)
        tokens = ins.keep.counter.count(summary.render())
    calls = list(reversed(ledger_lines(ins.engine, UsageFilter(
        session_id=row.id, purpose="summary"), limit=FOLD_ROWS)))
    folds = [{"line": line, "through": last_seq_before(ins.engine, row,
                                                               line.created_at)}
             for line in calls]
    stored = ins.keep.repository.folds(row.id, limit=FOLD_ROWS)
    return ins.render(request, "summary.html", status, row=row, summary=summary,
                      sections=sections, narrative=narrative, tokens=tokens, folds=folds,
                      stored_folds=stored,
                      by_fold=dict(sorted(by_fold.items())), masker=masker,
                      reveal_message=reveal_message, tab="summary", limit=FOLD_ROWS,
                      title=f"Summary of {ins.labels(row, masker)[0] or row.id}")


ROUTES = session_page_routes("/sessions/{session_id}/summary", "summary", "summary", _page)
