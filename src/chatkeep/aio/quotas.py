"""``AsyncQuotaService`` and ``AsyncReservation``: async twins of ``keep.quotas`` and of
the reservation it hands out.

Each method is the sync core's run through the bridge (:mod:`chatkeep.aio.twins`); the
reservation's own decision (does it fit?) is the core's one transaction.
"""

# mypy: disable-error-code="empty-body"
# (The bodies of @bridged methods are supplied by the decorator.)

from __future__ import annotations

from datetime import datetime
from types import TracebackType

from chatkeep.aio.twins import Twin, bridged
from chatkeep.quotas import Quota, QuotaService, Reservation
from chatkeep.quotas.windows import Window
from chatkeep.refs import Ref

__all__ = ["AsyncQuotaService", "AsyncReservation"]


class AsyncReservation(Twin[Reservation]):
    """Async twin of ``Reservation``: ``async with`` releases it on an exception and
    counts it at its reserved amount when the block ends unsettled."""

    @property
    def id(self) -> str | None:
        """The reservation's id (``None``: no quota applied, nothing held)."""
        return self.core.id

    @property
    def tokens(self) -> int:
        """The tokens held."""
        return self.core.tokens

    @property
    def done(self) -> bool:
        """Whether it was settled or released."""
        return self.core.done

    @bridged
    async def settle(self, used: object = None) -> bool:
        """Settle at ``used`` (a count, a usage or a response; ``None``: as reserved)."""

    @bridged
    async def release(self) -> bool:
        """Give the tokens back: the call failed before its response."""

    async def __aenter__(self) -> AsyncReservation:
        return self

    async def __aexit__(self, kind: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.core.done:
            return
        if kind is not None:
            await self.release()
        else:
            await self.settle()


class AsyncQuotaService(Twin[QuotaService]):
    """Async twin of ``QuotaService`` (``keep.quotas``)."""

    @bridged
    async def set(self, tenant: Ref, *, tokens: int, window: str | Window | object = "day",
                  actor: Ref | None = None) -> Quota:
        """Limit ``tenant`` (or its ``actor``) to ``tokens`` per ``window``."""

    @bridged
    async def get(self, tenant: Ref, *, actor: Ref | None = None) -> Quota | None:
        """The quota in force for ``tenant`` (or its ``actor``) now."""

    @bridged
    async def remaining(self, tenant: Ref, *, actor: Ref | None = None) -> int | None:
        """What one call for ``tenant`` (by ``actor``) may reserve now."""

    @bridged
    async def clear(self, tenant: Ref, *, actor: Ref | None = None) -> bool:
        """Remove the quota of ``tenant`` (or of its ``actor``)."""

    @bridged
    async def list(self, tenant: Ref | None = None) -> list[Quota]:
        """Every stored quota (or ``tenant``'s)."""

    @bridged
    async def reserve(self, tenant: Ref, tokens: int, *, actor: Ref | None = None,
                      session_id: str | None = None,
                      purpose: str = "chat") -> AsyncReservation:
        """Hold ``tokens`` on every quota that applies, or raise ``QuotaExceeded``
        having written nothing (``async with`` it around the call)."""

    @bridged
    async def settle(self, reservation_id: str, used: int) -> bool:
        """Settle a reservation by id at ``used`` tokens."""

    @bridged
    async def release(self, reservation_id: str) -> bool:
        """Give a reservation's tokens back (its call failed before the response)."""

    @bridged
    async def sweep(self, now: datetime | None = None, *, batch_size: int = 500) -> int:
        """End every reservation whose lease ended (each batch awaited)."""

    @bridged
    async def run_job(self, _session_id: str = "") -> None:
        """The ``"quota_sweep"`` job: :meth:`sweep` (the session id is unused)."""
