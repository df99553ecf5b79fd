"""``keep.quotas``: set, read and clear quotas; reserve before a call, settle after it;
sweep the reservations whose lease ended.

Arguments are checked before anything is written (typed errors); the decisions that
need the database (does the reservation fit?) are one transaction of
:class:`chatkeep.store.quotas.QuotaStore`.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from chatkeep.config import QuotaConfig
from chatkeep.errors import InvalidArgument
from chatkeep.quotas.reservations import Reservation
from chatkeep.quotas.windows import (
    Window,
    day_end,
    epoch,
    from_epoch,
    month_end,
    parse_window,
    stored_window,
)
from chatkeep.refs import Ref, require_ref
from chatkeep.store.executor import Executor
from chatkeep.store.quotas import Boarding, Clock, Held, QuotaRow, QuotaStore
from chatkeep.store.rows import utcnow

log = logging.getLogger("chatkeep.quotas")

PURPOSES = ("chat", "summary", "distil", "embedding", "manual")
"""What a reservation is for (as the ledger's purposes)."""
SWEEP_JOB = "quota_sweep"
"""The dispatcher job that runs :meth:`QuotaService.sweep` (it carries no session)."""


@dataclass(frozen=True, slots=True)
class Quota:
    """A quota as it stands now: ``tokens`` per ``window``, what the current window
    ``spent``, what calls hold ``reserved``, what is ``remaining`` and when the window
    ends (``resets_at``). ``default``: the config's, not stored for this tenant."""

    tenant: Ref
    actor: Ref | None
    tokens: int
    window: str
    spent: int
    reserved: int
    resets_at: datetime
    default: bool = False

    @property
    def remaining(self) -> int:
        """What a reservation may still take."""
        return max(0, self.tokens - self.spent - self.reserved)


@dataclass(frozen=True, slots=True)
class PendingReservation:
    """A reservation checked but not yet written (:meth:`QuotaService.pending`):
    :meth:`boarding` hands it to another write to carry (the request's manifest),
    adding the tokens only known then (the request's estimate)."""

    service: QuotaService
    tenant: Ref
    actor: Ref | None
    tokens: int
    purpose: str
    session_id: str | None

    def boarding(self, more_tokens: int = 0) -> Boarding:
        """Its terms for another write to carry (the request's manifest), holding
        ``tokens`` plus ``more_tokens``, its lease starting now; that write raises
        ``QuotaExceeded`` when a quota cannot hold them, and then writes nothing.
        :meth:`boarded` is the caller's handle once it is written."""
        clock, lease_until, default = self.service._terms()
        return Boarding(self.service.store, self.tenant, self.actor,
                        self.tokens + check_tokens(more_tokens, "more_tokens"), clock,
                        lease_until, self.purpose, self.session_id, default)

    def hold_in(self, ex: Executor, more_tokens: int = 0) -> Reservation:
        """Write it with ``ex``, inside that write's transaction, holding ``tokens`` plus
        ``more_tokens``: ``QuotaExceeded`` when a quota cannot hold them, which rolls
        the whole transaction back (nothing of it is written)."""
        boarding = self.boarding(more_tokens)
        boarding.write(ex)
        return self.boarded(boarding)

    def hold(self, more_tokens: int = 0) -> Reservation:
        """Write it in a transaction of its own (one statement in autocommit on
        PostgreSQL), holding ``tokens`` plus ``more_tokens``: ``QuotaExceeded`` when a
        quota cannot hold them (nothing written)."""
        boarding = self.boarding(more_tokens)
        self.service.store.reserve(boarding)
        return self.boarded(boarding)

    def boarded(self, boarding: Boarding) -> Reservation:
        """The handle on what ``boarding``'s carrier wrote."""
        return self.reservation(boarding.held, boarding.tokens)

    def reservation(self, held: Held | None, tokens: int | None = None) -> Reservation:
        """The caller's handle on what was written (``held``, of ``tokens``, this
        reservation's own when ``None``; ``held`` ``None``: no quota applied, nothing
        written)."""
        return Reservation(None if held is None else held.id,
                           self.tokens if tokens is None else tokens, self.tenant,
                           self.actor, purpose=self.purpose, session_id=self.session_id,
                           settler=self.service._settle, clock=self.service._clock)


def check_tokens(tokens: object, what: str = "tokens") -> int:
    """A token count: a non-negative ``int`` (not a bool), else ``InvalidArgument``."""
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise InvalidArgument(f"{what} must be a whole number of tokens, got {tokens!r}")
    if tokens < 0:
        raise InvalidArgument(f"{what} must not be negative, got {tokens}")
    if tokens > 2 ** 62:
        raise InvalidArgument(f"{what} is too large: {tokens}")
    return tokens


def _actor(actor: object) -> Ref | None:
    return None if actor is None else require_ref(actor, "actor")


class QuotaService:
    """Per-tenant token quotas, optionally narrowed to an actor (docs/quotas.md)."""

    def __init__(self, store: QuotaStore, config: QuotaConfig | None = None,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.config = config or QuotaConfig()
        self.clock = clock
        self._default = (None if self.config.default_tokens is None
                         else parse_window(self.config.default_window))

    def _clock(self, now: datetime | None = None) -> Clock:
        seconds = epoch(now or self.clock())
        return Clock(seconds, day_end(seconds), month_end(seconds))

    # -- quotas ---------------------------------------------------------------------------

    def set(self, tenant: Ref, *, tokens: int, window: str | Window | object = "day",
            actor: Ref | None = None) -> Quota:
        """Limit ``tenant`` (or its ``actor``) to ``tokens`` per ``window``: ``"day"``,
        ``"month"`` (UTC calendar) or a rolling length (``"24h"``, a ``timedelta``).
        Replaces the limit and window; what the current window spent stays."""
        require_ref(tenant, "tenant")
        who = _actor(actor)
        check_tokens(tokens)
        parsed = parse_window(window)
        now = epoch(self.clock())
        self.store.set(tenant, who, tokens, parsed.kind, parsed.seconds,
                       parsed.end_after(now))
        quota = self.get(tenant, actor=who)
        assert quota is not None
        return quota

    def get(self, tenant: Ref, *, actor: Ref | None = None) -> Quota | None:
        """The quota of ``tenant`` (or of its ``actor``) as it stands now; a tenant
        without its own gets the config's default (``default=True``), or ``None``."""
        require_ref(tenant, "tenant")
        who = _actor(actor)
        row = self.store.get(tenant, who)
        if row is not None:
            return self._quota(row)
        if who is None and self._default is not None:
            assert self.config.default_tokens is not None
            now = epoch(self.clock())
            return Quota(tenant, None, self.config.default_tokens, str(self._default), 0, 0,
                         from_epoch(self._default.end_after(now)), default=True)
        return None

    def remaining(self, tenant: Ref, *, actor: Ref | None = None) -> int | None:
        """What one call for ``tenant`` (by ``actor``) may reserve now: the least left
        of the quotas that apply; ``None`` when none does."""
        quotas = [q for q in (self.get(tenant), self.get(tenant, actor=actor)
                              if actor is not None else None) if q is not None]
        return min((q.remaining for q in quotas), default=None)

    def clear(self, tenant: Ref, *, actor: Ref | None = None) -> bool:
        """Remove the quota of ``tenant`` (or of its ``actor``): the config's default, if
        any, applies again. ``False`` when there was none."""
        require_ref(tenant, "tenant")
        return self.store.clear(tenant, _actor(actor))

    def list(self, tenant: Ref | None = None) -> builtins.list[Quota]:
        """Every stored quota (or ``tenant``'s: its own and its actors')."""
        if tenant is not None:
            require_ref(tenant, "tenant")
        return [self._quota(row) for row in self.store.quotas(tenant)]

    def _quota(self, row: QuotaRow) -> Quota:
        window = stored_window(row.window_kind, row.window_seconds)
        now = epoch(self.clock())
        rolled = now >= row.window_end
        return Quota(row.tenant, row.actor, row.tokens, str(window),
                     0 if rolled else row.spent, row.reserved,
                     from_epoch(window.end_after(now) if rolled else row.window_end))

    # -- reservations ---------------------------------------------------------------------

    def reserve(self, tenant: Ref, tokens: int, *, actor: Ref | None = None,
                session_id: str | None = None, purpose: str = "chat") -> Reservation:
        """Hold ``tokens`` (the call's input plus its output ceiling) on every quota that
        applies, or raise ``QuotaExceeded`` having written nothing. Use it around a call
        chatkeep does not build::

            with keep.quotas.reserve(tenant, 1200) as held:
                reply = client.chat.completions.create(..., max_tokens=1000)
                held.settle(reply.usage)
        """
        return self.pending(tenant, tokens, actor=actor, session_id=session_id,
                            purpose=purpose).hold()

    def pending(self, tenant: Ref, tokens: int, *, actor: Ref | None = None,
                session_id: str | None = None, purpose: str = "chat") -> PendingReservation:
        """A reservation checked (typed errors now) and ready to be written inside
        another write (:meth:`PendingReservation.boarding`): how
        ``build_history(max_output_tokens=)`` holds the call's tokens in the transaction
        that records the request's manifest, so holding them adds no commit of its own."""
        require_ref(tenant, "tenant")
        who = _actor(actor)
        check_tokens(tokens)
        if purpose not in PURPOSES:
            raise InvalidArgument(f"purpose must be one of {', '.join(PURPOSES)}, got "
                                  f"{purpose!r}")
        return PendingReservation(self, tenant, who, tokens, purpose, session_id)

    def _terms(self) -> tuple[Clock, int, tuple[int, str, int, int] | None]:
        """A reservation's terms as of now: the clock, its lease's end, and the config's
        default quota ``(tokens, kind, seconds, window_end)`` for a tenant without one."""
        clock = self._clock()
        default = None
        if self._default is not None:
            assert self.config.default_tokens is not None
            default = (self.config.default_tokens, self._default.kind, self._default.seconds,
                       self._default.end_after(clock.now))
        return clock, clock.now + int(self.config.lease + 0.999), default

    def _settle(self, reservation_id: str, used: int | None) -> bool:
        return self.store.settle(reservation_id, used, self._clock())

    def settle(self, reservation_id: str, used: int) -> bool:
        """Settle a reservation by id (held elsewhere: another process) at ``used``
        tokens. ``False`` if it was settled already or swept."""
        if not isinstance(reservation_id, str):
            raise InvalidArgument(f"reservation_id must be a string, got {reservation_id!r}")
        return self.store.settle(reservation_id, check_tokens(used, "used"), self._clock())

    def release(self, reservation_id: str) -> bool:
        """Give a reservation's tokens back (its call failed before the response)."""
        if not isinstance(reservation_id, str):
            raise InvalidArgument(f"reservation_id must be a string, got {reservation_id!r}")
        return self.store.settle(reservation_id, 0, self._clock())

    def sweep(self, now: datetime | None = None, *, batch_size: int = 500) -> int:
        """End every reservation whose lease ended (a worker killed mid-call): counted at
        its reserved amount (``quotas.count_expired``, the default) or released. Returns
        how many it ended; rerunning is a no-op, concurrent sweepers end each once."""
        check_tokens(batch_size, "batch_size")
        if batch_size < 1:
            raise InvalidArgument("batch_size must be at least 1")
        clock = self._clock(now)
        ended = 0
        while True:
            ids = self.store.expired(clock, batch_size)
            for reservation_id in ids:
                if self.store.expire(reservation_id, clock, count=self.config.count_expired):
                    ended += 1
            if len(ids) < batch_size:
                break
        if ended:
            log.info("quotas: ended %d reservation%s whose lease ended", ended,
                     "" if ended == 1 else "s")
        return ended

    def run_job(self, _session_id: str = "") -> None:
        """The ``"quota_sweep"`` job (any dispatcher: inline, thread pool, Celery's
        ``run_job``): :meth:`sweep`; the session id a job carries is unused. Returns
        nothing, so a queue's result backend never has to serialise a result."""
        self.sweep()
