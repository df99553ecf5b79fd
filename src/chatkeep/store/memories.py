"""The memory store: its parts over one engine, composed.

Each part is a module with one job: ``memory_recall`` (text and vector recall, lookups,
listings), ``memory_writes`` (the distillation commit, single writes, the watermark),
``memory_vectors`` (the vector table, its index, filling it in), ``memory_lifecycle``
(deletes, re-keying the sealed values) and ``memory_leases`` (the sweep's claims). The
values they share are in ``memory_rows``. Callers reach a part by its attribute
(``store.recall.search(...)``); the parts share one ``MemoryVectors``, so the vector
table is made ready and indexed once per store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine

from chatkeep.store.memory_leases import DistilLeases
from chatkeep.store.memory_lifecycle import MemoryLifecycle
from chatkeep.store.memory_recall import MemoryRecall
from chatkeep.store.memory_vectors import MemoryVectors
from chatkeep.store.memory_writes import MemoryWrites
from chatkeep.store.repository import utcnow


class MemoryStore:
    """Memory persistence over the same engine as the ``Repository`` (thread-safe): the
    parts, built at once (no I/O)."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock
        self.vectors = MemoryVectors(engine)
        """The vector table: readiness, index, ``store_vectors``, ``missing_vectors``."""
        self.recall = MemoryRecall(engine, self.vectors, self.now)
        """Reads: ``search``, ``vector_search``, ``recent``, ``find_*``, ``list_memories``."""
        self.writes = MemoryWrites(engine, self.vectors, self.now)
        """Writes: ``commit_distillation``, ``add_memory``, ``supersede_memory``, ``rewind``."""
        self.lifecycle = MemoryLifecycle(engine)
        """Deletes and re-keys: ``delete_*``, ``sealed_after``, ``replace_sealed``."""
        self.leases = DistilLeases(engine, self.now)
        """The sweep's claims: ``claim_idle``, ``set_lease``, ``lease_of``."""

    def now(self) -> datetime:
        """The store's time: the parts read it here, so replacing ``clock`` moves them all."""
        return self.clock()
