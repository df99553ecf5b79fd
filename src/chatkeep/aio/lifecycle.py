"""``AsyncHoldService`` and ``AsyncRetentionService``: async twins of ``keep.holds``
(legal holds) and ``keep.retention``.

Each method is the sync core's method run through the bridge (see
:mod:`chatkeep.aio.twins`); the erasure itself is ``AsyncChatkeep.erase``.
"""

# mypy: disable-error-code="empty-body"
# (The bodies of @bridged methods are supplied by the decorator.)

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from chatkeep.aio.twins import Twin, bridged
from chatkeep.lifecycle.holds import HoldService
from chatkeep.lifecycle.retention import RetentionService, SweepReport
from chatkeep.refs import Ref
from chatkeep.store.lifecycle import HoldRow
from chatkeep.store.retention import RetentionPolicy

__all__ = ["AsyncHoldService", "AsyncRetentionService"]


class AsyncHoldService(Twin[HoldService]):
    """Async twin of ``HoldService`` (``keep.holds``)."""

    @bridged
    async def place(self, tenant: Ref, *, actor: Ref | None = None,
                    subject: Ref | None = None, session_id: str | None = None,
                    reason: str, by: str | None = None) -> HoldRow:
        """Hold a session, an actor or a subject of ``tenant`` (none: the whole tenant)."""

    @bridged
    async def release(self, tenant: Ref, hold_id: int, *, by: str | None = None) -> HoldRow:
        """Release ``tenant``'s active hold ``hold_id``."""

    @bridged
    async def list(self, tenant: Ref, *, include_released: bool = False,
                   session_id: str | None = None) -> list[HoldRow]:
        """``tenant``'s holds, newest first."""


class AsyncRetentionService(Twin[RetentionService]):
    """Async twin of ``RetentionService`` (``keep.retention``)."""

    @bridged
    async def set_policy(self, tenant: Ref, *, session_idle_days: int | None = None,
                         memory_idle_days: int | None = None) -> RetentionPolicy:
        """``tenant``'s retention policy (replaces the default)."""

    @bridged
    async def policy(self, tenant: Ref) -> RetentionPolicy:
        """The policy in force for ``tenant``."""

    @bridged
    async def clear_policy(self, tenant: Ref) -> bool:
        """Remove ``tenant``'s own policy."""

    @bridged
    async def sweep(self, now: datetime | None = None, *, batch_size: int = 500,
                    progress: Callable[[SweepReport], None] | None = None) -> SweepReport:
        """Delete what every tenant's policy says is past retention (batches awaited)."""

    @bridged
    async def sweep_expired(self, tenant: Ref | None = None, now: datetime | None = None, *,
                            batch_size: int = 500) -> SweepReport:
        """Only the memories past their own expiry (``tenant``'s, or every tenant's)."""
