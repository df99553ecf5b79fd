"""Exact cosine ranking of a scope's vectors (SQLite), and the cache of decoded scopes.

SQLite has no vector index: recall reads the scope's vectors, decodes them once into a
float32 matrix (numpy when installed) and ranks exactly. The decoded matrix is kept in a
process-local LRU map, reused while the tenant's generation stamp is unchanged.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from typing import Any


class _LruCache:
    """A small process-local LRU map (the decoded vectors of recently searched scopes),
    bounded in entries and in bytes: one 10k-memory scope of 384-dimension vectors is
    15 MB, so an entry count alone would let a busy multi-tenant process hold a gigabyte."""

    def __init__(self, size: int, max_bytes: int) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                return None
            self._items.move_to_end(key)
            return entry[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        """Keep ``value`` (``nbytes`` large) unless it alone exceeds the byte bound."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if nbytes > self.max_bytes:
                return
            self._items[key] = (value, nbytes)
            self._bytes += nbytes
            while len(self._items) > self.size or self._bytes > self.max_bytes:
                self._bytes -= self._items.popitem(last=False)[1][1]


#: Decoded scopes: ``key -> (tenant's generation stamp, ids, matrix)``. Reading and
#: decoding every vector of a 10k-memory scope on each recall cost ~140 ms; a checked
#: cache hit costs one primary-key lookup and one matrix product.
SCOPE_CACHE_BYTES = 256 * 1024 * 1024
"""How many bytes of decoded vectors one process keeps for reuse (64 scopes at most)."""
_SCOPE_CACHE = _LruCache(64, SCOPE_CACHE_BYTES)


def scope_matrix(ids: list[int], blobs: list[bytes], dim: int) -> tuple[list[int], Any]:
    """The scope's vectors as one float32 matrix (numpy), or the blobs (plain Python)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - exercised where numpy is absent
        return ids, blobs
    return ids, np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), dim)


def rank_exact(ids: list[int], vectors: Any, unit: list[float],
               limit: int) -> list[tuple[int, float]]:
    """Exact cosine of unit vectors (a float32 matrix, or float32 blobs without numpy):
    the ``limit`` best ``(id, similarity)``, best first, the newer (higher id) first among
    equals. numpy when installed (``chatkeep[embeddings]``), plain Python otherwise."""
    if isinstance(vectors, list):
        fmt = f"<{len(unit)}f"
        scored = [(i, sum(a * b for a, b in zip(struct.unpack(fmt, blob), unit, strict=True)))
                  for i, blob in zip(ids, vectors, strict=True)]
        scored.sort(key=lambda item: (-item[1], -item[0]))
        return scored[:limit]
    import numpy as np

    # Row by row (numpy >= 2) rather than one matrix product: OpenBLAS threads the product,
    # and a threaded product stalls whenever another process holds a core (10k x 384: 0.2
    # ms idle, 2-7 ms on a busy two-core host, against 0.4-0.8 ms row by row).
    dot = getattr(np, "vecdot", np.matmul)
    similarity = dot(vectors, np.asarray(unit, dtype=np.float32))
    if limit < len(ids):
        best = np.argpartition(-similarity, limit - 1)[:limit]
    else:
        best = np.arange(len(ids))
    picked = [(ids[int(n)], float(similarity[int(n)])) for n in best]
    picked.sort(key=lambda item: (-item[1], -item[0]))
    return picked
