"""``AsyncHoldService``: the async twin of ``keep.holds`` (legal holds).

Each method is the sync core's method run through the bridge (see
:mod:`chatkeep.aio.twins`); the erasure itself is ``AsyncChatkeep.erase``.
"""

# mypy: disable-error-code="empty-body"
# (The bodies of @bridged methods are supplied by the decorator.)

from __future__ import annotations

from chatkeep.aio.twins import Twin, bridged
from chatkeep.lifecycle.holds import HoldService
from chatkeep.refs import Ref
from chatkeep.store.lifecycle import HoldRow

__all__ = ["AsyncHoldService"]


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
