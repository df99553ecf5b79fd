"""A reservation as the caller holds it: settle it at the real usage, release it on an
error before the response, or let its context manager do one of the two.

``keep.quotas.reserve(...)`` returns one; ``build_history(..., max_output_tokens=N)``
holds one for the session (its id on ``history.info.reservation``) that
``session.add_assistant_response(reply)`` settles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

from chatkeep.errors import InvalidArgument
from chatkeep.refs import Ref
from chatkeep.store.quotas import Clock, Settlement

log = logging.getLogger("chatkeep.quotas")

Settler = Callable[[str, "int | None"], bool]
"""Settles a reservation id at ``used`` tokens (``None``: its reserved amount; 0: released)."""


def used_tokens(used: object) -> int:
    """The tokens a call used, from an ``int``, a usage object (``prompt_tokens`` and
    ``completion_tokens``, or ``input_tokens`` and ``output_tokens``) or a response
    carrying one in ``.usage``; anything else is ``InvalidArgument``."""
    if isinstance(used, int) and not isinstance(used, bool):
        if used < 0:
            raise InvalidArgument(f"used tokens must not be negative, got {used}")
        return used
    usage: Any = getattr(used, "usage", used)
    if isinstance(usage, dict):
        usage = type("U", (), usage)
    for first, second in (("prompt_tokens", "completion_tokens"),
                          ("input_tokens", "output_tokens")):
        a, b = getattr(usage, first, None), getattr(usage, second, None)
        if isinstance(a, int) and isinstance(b, int):
            return used_tokens(a + b)
    raise InvalidArgument("used must be a token count, a usage (prompt_tokens and "
                          "completion_tokens) or a response with one, got "
                          f"{type(used).__name__}")


class Reservation:
    """Tokens held on a tenant's quota for one call until it is settled.

    ``id`` is ``None`` when no quota applies (nothing was written; settling is a no-op).
    As a context manager: an exception inside the block releases it; leaving the block
    without settling counts it at its reserved amount (never less than it may have cost).
    """

    __slots__ = ("_clock", "_settler", "actor", "done", "id", "purpose", "session_id",
                 "tenant", "tokens")

    def __init__(self, reservation_id: str | None, tokens: int, tenant: Ref,
                 actor: Ref | None, *, purpose: str, session_id: str | None,
                 settler: Settler | None, clock: Callable[[], Clock] | None = None) -> None:
        self.id, self.tokens, self.tenant, self.actor = reservation_id, tokens, tenant, actor
        self.purpose, self.session_id = purpose, session_id
        self._settler = settler
        self._clock = clock
        self.done = reservation_id is None

    def __repr__(self) -> str:
        return (f"Reservation({self.id!r}, tokens={self.tokens}, tenant={self.tenant}, "
                f"purpose={self.purpose!r}, done={self.done})")

    def settle(self, used: object = None) -> bool:
        """Settle at ``used`` (a token count, a usage or a response; ``None``: the
        reserved amount). ``False`` if it was settled already (or its lease ended and the
        sweep counted it)."""
        return self._finish(None if used is None else used_tokens(used))

    def release(self) -> bool:
        """Give the tokens back: the call failed before its response (nothing billed)."""
        return self._finish(0)

    def _settlement(self, used: object = None) -> Settlement | None:
        """This reservation's settle at ``used`` as a value the write that stores the
        call's answer runs in its own transaction (``session.add_assistant_response``:
        the append), so settling costs no commit of its own; call :meth:`_settled` once
        that write committed. ``None`` when there is nothing to settle that way (no
        quota applied, settled already, or no clock given: use :meth:`settle`)."""
        if self.done or self.id is None or self._clock is None:
            return None
        return Settlement(self.id, None if used is None else used_tokens(used), self._clock())

    def _settled(self) -> None:
        """Mark it settled: the write that ran its :meth:`_settlement` committed."""
        self.done = True

    def _finish(self, used: int | None) -> bool:
        if self.done or self.id is None or self._settler is None:
            return False
        self.done = True
        return self._settler(self.id, used)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.done:
            return
        if kind is not None:
            self.release()
        else:
            self.settle()
