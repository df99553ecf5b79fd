"""The statements an engine sends while a block runs, as its statement listeners see them
(a listener switches chatkeep's store to its Core executors, which send every statement
through the engine)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event


@contextlib.contextmanager
def captured(engine: sa.Engine, wanted: Callable[[str], bool] = lambda _sql: True,
             ) -> Iterator[list[tuple[str, Any]]]:
    """The statements (and their parameters) ``engine`` sends inside the block that
    ``wanted`` picks (it is given the statement in upper case)."""
    found: list[tuple[str, Any]] = []

    def grab(_conn: Any, _cursor: Any, statement: str, parameters: Any,
             _context: Any, _many: bool) -> None:
        if wanted(statement.upper()):
            found.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", grab)
    try:
        yield found
    finally:
        event.remove(engine, "before_cursor_execute", grab)
