"""The decoded-vector cache stays within its entry and byte bounds."""

from __future__ import annotations

from chatkeep.store.memory_ranking import _LruCache


def test_the_oldest_scopes_go_first_when_bytes_run_out() -> None:
    cache = _LruCache(size=10, max_bytes=100)
    cache.put("a", "A", 40)
    cache.put("b", "B", 40)
    assert cache.get("a") == "A"  # now the newest
    cache.put("c", "C", 40)  # 120 bytes: the least recently used ("b") goes
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")


def test_a_scope_larger_than_the_bound_is_not_kept_and_replacing_one_frees_its_bytes(
        ) -> None:
    cache = _LruCache(size=10, max_bytes=100)
    cache.put("big", "X", 101)
    assert cache.get("big") is None
    cache.put("a", "A1", 90)
    cache.put("a", "A2", 10)  # replaced: 10 bytes held, not 100
    cache.put("b", "B", 90)
    assert (cache.get("a"), cache.get("b")) == ("A2", "B")


def test_the_entry_bound_still_holds() -> None:
    cache = _LruCache(size=2, max_bytes=1000)
    for key in "abc":
        cache.put(key, key.upper(), 1)
    assert [cache.get(k) for k in "abc"] == [None, "B", "C"]
