"""Per-tenant token quotas, refused before the call (issue 33): windows (what
``window=`` means), reservations (held, settled, released) and the service
(``keep.quotas``). The SQL is :mod:`chatkeep.store.quotas`."""

from chatkeep.quotas.reservations import Reservation, used_tokens
from chatkeep.quotas.service import PendingReservation, Quota, QuotaService
from chatkeep.quotas.windows import Window, parse_window

__all__ = ["PendingReservation", "Quota", "QuotaService", "Reservation", "Window",
           "parse_window", "used_tokens"]
