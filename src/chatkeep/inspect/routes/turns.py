"""A session's turns (issue 34 part 2): each request chatkeep built for it, what changed
from the turn before ("folded seq 14-48 into summary v7", "memory #12 recalled"), and for
one turn (``?turn=N``) its manifest and the replay check: the request rebuilt from the
store and compared with its recorded SHA-256. Numbers, ids and hashes only: no text."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from chatkeep.errors import ChatkeepError
from chatkeep.history.manifest import Manifest, changes
from chatkeep.inspect.context import Inspector
from chatkeep.inspect.masking import Masker
from chatkeep.inspect.routes.reveal import page_endpoint
from chatkeep.store.replay import turns
from chatkeep.store.rows import SessionRow

TURN_ROWS = 100


def _page(request: Request, ins: Inspector, row: SessionRow, masker: Masker, *,
          reveal_message: str | None = None, status: int = 200) -> Response:
    rows = turns(ins.engine, row.id, limit=TURN_ROWS + 1, newest=True)
    listed: list[dict[str, Any]] = []
    previous: Manifest | None = None
    for index, turn in enumerate(rows):
        manifest = None if turn.manifest is None else Manifest.decode(turn.manifest)
        if index or len(rows) <= TURN_ROWS:
            listed.append({"row": turn, "manifest": manifest, "changes": (
                ["built before replay existed: no manifest"] if manifest is None
                else changes(previous, manifest))})
        previous = manifest
    listed.reverse()  # newest first
    check, error = _check(request, ins, row)
    return ins.render(request, "turns.html", status, row=row, turns=listed, check=check,
                      error=error, masker=masker, reveal_message=reveal_message,
                      tab="turns", limit=TURN_ROWS,
                      title=f"Turns of {ins.labels(row, masker)[0] or row.id}")


def _check(request: Request, ins: Inspector, row: SessionRow) -> tuple[Any, str | None]:
    """The replay of ``?turn=N`` (``None`` when none is asked), or why it cannot be."""
    asked = request.query_params.get("turn")
    if not asked:
        return None, None
    try:
        number = int(asked)
    except ValueError:
        return None, f"turn must be a whole number, got {asked!r}"
    try:
        return ins.keep.replay(ins.keep.sessions.get_unscoped(row.id), turn=number), None
    except ChatkeepError as exc:
        return None, f"{type(exc).__name__}: {exc}"


ROUTES = [Route("/sessions/{session_id}/turns", page_endpoint(_page), name="turns")]
