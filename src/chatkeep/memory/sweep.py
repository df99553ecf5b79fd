"""The sweep: catch up on conversations that went quiet before they ever compressed.

Safe from cron every minute: a session is claimed by compare-and-set on its
``distil_lease_until`` column, so overlapping sweeps never dispatch it twice, and
a claim expires after ``lease`` so a job lost with its process (thread pool,
crashed worker) is picked up again later. ``distil`` holds the lease while it runs,
releases it on success and keeps it on failure, which doubles as a back-off: a
session whose distillation keeps failing is retried once per lease, not every minute.
"""

from __future__ import annotations

from datetime import timedelta

from chatkeep.config import MemoryConfig
from chatkeep.errors import InvalidArgument
from chatkeep.store.memories import MemoryStore

DEFAULT_LEASE = timedelta(minutes=10)


class Sweeper:
    """Finds and claims idle sessions with undistilled messages."""

    def __init__(self, store: MemoryStore, config: MemoryConfig,
                 lease: timedelta = DEFAULT_LEASE) -> None:
        self.store = store
        self.config = config
        self.lease = lease

    def claim(self, idle_after: timedelta | None = None,
              batch_size: int | None = None) -> list[str]:
        """Ids of at most ``batch_size`` sessions idle longer than ``idle_after`` with
        ``last_seq > distilled_through``, now leased to the caller; oldest first."""
        idle_after = self.config.sweep_idle_after if idle_after is None else idle_after
        batch_size = self.config.sweep_batch_size if batch_size is None else batch_size
        if idle_after < timedelta(0) or batch_size <= 0:
            raise InvalidArgument(
                "idle_after must not be negative and batch_size must be positive")
        now = self.store.clock()
        return self.store.leases.claim_idle(now - idle_after, now + self.lease, batch_size)

    def hold(self, session_id: str) -> None:
        """Lease the session while a distillation runs (keeps sweeps from re-dispatching)."""
        self.store.leases.set_lease(session_id, self.store.clock() + self.lease)

    def release(self, session_id: str) -> None:
        """Drop the lease after a successful distillation."""
        self.store.leases.set_lease(session_id, None)
