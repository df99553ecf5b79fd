"""What the running process still holds of erased data: its caches, emptied.

The redactor's and the detector's caches are keyed by message text, the retriever's by
query text, the SQLite vector cache holds a scope's decoded vectors, and the vault
patterns are compiled from personal values. After a delete or an erasure every one of
them is emptied whole (they refill from the store on the next turn): finding one
person's entries would need their text, which is exactly what is gone.
"""

from __future__ import annotations

from typing import Any


def _empty(owner: Any) -> None:
    """Clear ``owner``'s ``_cache`` under its ``_lock`` (and its size tally)."""
    cache = getattr(owner, "_cache", None)
    if cache is None:
        return
    lock = getattr(owner, "_lock", None)
    if lock is None:
        cache.clear()
        return
    with lock:
        cache.clear()
        if hasattr(owner, "_cached_chars"):
            owner._cached_chars = 0


def forget_cached(privacy: Any = None, memory: Any = None) -> None:
    """Empty every in-process cache that may hold erased text or values: the privacy
    guard's redactor and detector, the memory service's retriever, the SQLite scope
    vectors and the compiled vault patterns."""
    from chatkeep.privacy.known_values import known_value
    from chatkeep.store import memory_ranking as memory_store

    redactor = getattr(privacy, "redactor", None)
    if redactor is not None:
        _empty(redactor)
        _empty(getattr(redactor, "detector", None))
    _empty(getattr(memory, "retriever", None))
    scope_cache = memory_store._SCOPE_CACHE
    with scope_cache._lock:
        scope_cache._items.clear()
        scope_cache._bytes = 0
    known_value.cache_clear()
