"""Quota windows: what ``window=`` means, and when a window ends (no I/O).

A window is a calendar ``"day"`` or ``"month"`` (UTC), or a rolling length (a
``timedelta``, or text such as ``"24h"``, ``"7d"``, ``"30m"``). A rolling window starts
with the first reservation after the previous one ended and lasts its length. Ends are
whole epoch seconds, so the store rolls a window over with the same arithmetic on SQLite
and PostgreSQL.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chatkeep.errors import InvalidArgument

CALENDAR = ("day", "month")
"""The calendar windows (UTC)."""
ROLLING = "rolling"
_LENGTH = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_SECONDS = 366 * 86400
"""The longest rolling window (a year)."""


@dataclass(frozen=True, slots=True)
class Window:
    """A quota's window: ``kind`` is ``day``, ``month`` or ``rolling`` (``seconds`` long)."""

    kind: str
    seconds: int = 0

    def __str__(self) -> str:
        return self.kind if self.kind in CALENDAR else f"{self.seconds}s"

    def end_after(self, now: int) -> int:
        """The end (epoch seconds) of the window a reservation at ``now`` opens."""
        if self.kind == ROLLING:
            return now + self.seconds
        return month_end(now) if self.kind == "month" else day_end(now)


def parse_window(window: object) -> Window:
    """``window=`` as a :class:`Window`; anything else is ``InvalidArgument``."""
    if isinstance(window, Window):
        return window
    if isinstance(window, timedelta):
        seconds = window.total_seconds()
        if seconds < 1 or seconds != int(seconds) or seconds > MAX_SECONDS:
            raise InvalidArgument(f"window must be whole seconds between 1s and "
                                  f"{MAX_SECONDS // 86400} days, got {window}")
        return Window(ROLLING, int(seconds))
    if not isinstance(window, str):
        raise InvalidArgument("window must be 'day', 'month', a length such as '24h', or "
                              f"a timedelta, got {type(window).__name__}")
    text = window.strip().lower()
    if not text:
        raise InvalidArgument("window must not be empty: 'day', 'month', or a length such "
                              "as '24h'")
    if text in CALENDAR:
        return Window(text)
    match = _LENGTH.match(text)
    if match is None:
        raise InvalidArgument(f"unknown window {window!r}: use 'day', 'month', or a length "
                              "such as '30m', '24h', '7d'")
    return parse_window(timedelta(seconds=int(match[1]) * _UNIT[match[2]]))


def stored_window(kind: str, seconds: int) -> Window:
    """The window a stored row names."""
    return Window(kind, seconds if kind == ROLLING else 0)


def epoch(moment: datetime) -> int:
    """``moment`` as whole epoch seconds (UTC; a naive time is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


def from_epoch(seconds: int) -> datetime:
    """Epoch seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


def day_end(now: int) -> int:
    """The next UTC midnight after ``now``."""
    return (now // 86400 + 1) * 86400


def month_end(now: int) -> int:
    """The first instant (UTC) of the month after ``now``'s."""
    return _month_end(now // 86400)


@functools.lru_cache(maxsize=4)
def _month_end(day: int) -> int:
    """:func:`month_end` for every instant of UTC day ``day`` (days since the epoch):
    worked out once per day, not per reservation."""
    moment = from_epoch(day * 86400)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year,
                                                                   moment.month + 1)
    return epoch(datetime(year, month, 1, tzinfo=UTC))
