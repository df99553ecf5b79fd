"""Legal holds (``keep.holds``): a held scope refuses delete, erase and retention.

A hold names one session, an actor, a subject, or (none of them) the whole tenant, with a
reason; while it is active, every delete, erasure or sweep that would remove something it
covers raises ``ScopeOnHold`` naming that reason, before anything is removed. A hold on
anything inside a tenant also holds a whole-tenant erasure. Placing and releasing are
recorded in the lifecycle log.
"""

from __future__ import annotations

from chatkeep.errors import InvalidArgument
from chatkeep.refs import Ref, require_ref
from chatkeep.store.lifecycle import HoldRow, LifecycleStore
from chatkeep.validation import NAME_MAX, check_int, check_text

REASON_MAX = 2000


class HoldService:
    """Place, release and list legal holds (``keep.holds``)."""

    def __init__(self, store: LifecycleStore) -> None:
        self._store = store

    def place(self, tenant: Ref, *, actor: Ref | None = None, subject: Ref | None = None,
              session_id: str | None = None, reason: str,
              by: str | None = None) -> HoldRow:
        """Hold ``session_id``, ``actor`` or ``subject`` of ``tenant`` (at most one; none:
        the whole tenant) for ``reason`` (shown in every refusal; say why, not who)."""
        require_ref(tenant, "tenant")
        named = [n for n, v in (("actor", actor), ("subject", subject),
                                ("session_id", session_id)) if v is not None]
        if len(named) > 1:
            raise InvalidArgument(f"a hold covers one scope, got {' and '.join(named)}")
        if actor is not None:
            require_ref(actor, "actor")
        if subject is not None:
            require_ref(subject, "subject")
        if session_id is not None:
            check_text(session_id, "session id")
        check_text(reason, "reason", max_length=REASON_MAX)
        if not reason.strip():
            raise InvalidArgument("a hold needs a reason")
        if by is not None:
            check_text(by, "by", max_length=NAME_MAX)
        return self._store.place_hold(tenant, actor=actor, subject=subject,
                                      session_id=session_id, reason=reason, placed_by=by)

    def release(self, tenant: Ref, hold_id: int, *, by: str | None = None) -> HoldRow:
        """Release ``tenant``'s active hold ``hold_id`` (``HoldNotFound`` if none)."""
        require_ref(tenant, "tenant")
        check_int(hold_id, "hold id", minimum=1, maximum=2**63 - 1)
        if by is not None:
            check_text(by, "by", max_length=NAME_MAX)
        return self._store.release_hold(tenant, hold_id, by=by)

    def list(self, tenant: Ref, *, include_released: bool = False,
             session_id: str | None = None) -> list[HoldRow]:
        """``tenant``'s holds, newest first (active ones unless ``include_released``);
        with ``session_id``, the active holds that cover that session."""
        require_ref(tenant, "tenant")
        if not isinstance(include_released, bool):
            raise InvalidArgument("include_released must be True or False")
        if session_id is not None:
            check_text(session_id, "session id")
        return self._store.list_holds(tenant, include_released=include_released,
                                      session_id=session_id)


