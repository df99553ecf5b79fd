"""Tables that read at 80 columns (the width when piped) and at 200.

Numbers and ids never wrap or shrink: a table that cuts ``10000`` to ``100…`` lies.
Text wraps within its column instead of being cut. Session ids are shown by their
shortest unique prefix (any unique prefix is accepted back); ``--wide`` shows them whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from rich import box
from rich.table import Table

#: Fewest characters of a session id shown (its time-ordered head, then random bits).
SHORT_ID_MIN = 8


class Grid:
    """A table of ``(header, kind)`` columns; ``kind`` is ``id``, ``number``, ``time`` or
    ``text``. Ids, numbers and times keep their whole width however narrow the terminal
    (past its edge if they must); text columns share what is left and wrap. Without
    vertical rules, so the text gets the width."""

    def __init__(self, *columns: tuple[str, str]) -> None:
        self._table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
        self._whole = [kind != "text" for _, kind in columns]
        self._widths = [len(header) for header, _ in columns]
        for header, kind in columns:
            if kind == "text":
                self._table.add_column(header, overflow="fold")
            else:
                self._table.add_column(header, no_wrap=True, overflow="ignore",
                                       justify="right" if kind == "number" else "left")

    def add_row(self, *cells: str) -> None:
        """One row; each cell is plain text (escaped by the caller where it must be)."""
        self._widths = [max(w, len(c)) for w, c in zip(self._widths, cells, strict=True)]
        self._table.add_row(*cells)

    def __rich__(self) -> Table:
        for column, whole, width in zip(self._table.columns, self._whole, self._widths,
                                        strict=True):
            if whole:
                column.min_width = width
        return self._table


def table(*columns: tuple[str, str]) -> Grid:
    """A :class:`Grid` of these columns."""
    return Grid(*columns)


def number(value: int) -> str:
    """A count as people read it: ``10,000``."""
    return f"{value:,}"


def when(moment: datetime) -> str:
    """A time to the minute (UTC, as stored)."""
    return moment.strftime("%Y-%m-%d %H:%M")


def short_ids(ids: Iterable[str], *, wide: bool = False) -> dict[str, str]:
    """Each id's shortest prefix (at least :data:`SHORT_ID_MIN` characters) that no other
    id shown shares; with ``wide``, the ids whole."""
    unique = list(dict.fromkeys(ids))
    if wide:
        return {i: i for i in unique}
    return {i: i[:_unique_length(i, unique)] for i in unique}


def _unique_length(target: str, ids: Sequence[str]) -> int:
    longest = max((_shared(target, other) for other in ids if other != target), default=0)
    return min(len(target), max(SHORT_ID_MIN, longest + 1))


def _shared(a: str, b: str) -> int:
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count
