"""``ChatkeepStore``: a LangGraph ``BaseStore`` over chatkeep's memories.

LangGraph's long-term memory (``create_agent(..., store=...)``, ``runtime.store``,
LangMem's memory tools) reads and writes chatkeep's memories: the same rows distillation
writes and recall serves, namespaced by tenant and scope (see
:mod:`chatkeep.integrations.langchain.namespaces`)::

    store = ChatkeepStore(keep)
    ns = ("organization:7", "actor", "user:3")
    store.put(ns, "new", {"content": "Prefers replies in Spanish"})
    store.search(ns, query="which language?")   # chatkeep's recall: words + meaning
    store.search(("organization:7",))           # every scope of the tenant, newest first

What a memory is decides what the store can do:

* An item's value is ``{"content": text}``: a memory holds one text. Other fields are
  refused (``InvalidArgument``), as is ``filter``.
* A time to live works as in LangGraph's own Postgres store: ``put(..., ttl=minutes)``
  (or ``ttl={"default_ttl": minutes}`` on the store) makes the memory expire that long
  after it was written; ``get`` and ``search`` push the expiry on again (``refresh_ttl``,
  default ``ttl={"refresh_on_read": True}``). Past its expiry a memory is never served
  (not by ``get``, ``search``, ``list_namespaces``, nor chatkeep's own recall), and
  chatkeep's retention sweep deletes it (``keep.retention.sweep``, its CLI command and
  Celery beat task, or this store's ``sweep_ttl``), with its vector and text index entry.
* An item's key is chatkeep's memory id. ``put`` under a key that is the id of a memory
  of that namespace supersedes it (``keep.memory.update``: chatkeep keeps the old text
  out of recall, for the record); the new version has a key of its own, and ``get`` with
  the old key finds the newest version. ``put`` under any other key adds a memory
  (``keep.memory.add``; its key is the id chatkeep gives it: read it back by ``search``).
  ``delete`` erases the memory and its earlier versions (``keep.memory.delete``).
* Every memory is indexed for recall by words, and by meaning when an embedding model is
  configured: ``index=False`` is accepted but does not keep a memory out of recall.
* ``search`` with a ``query`` is chatkeep's recall (full text fused with recall by meaning
  when an embedding model is configured); without one, the newest memories first.
* ``list_namespaces`` names the scopes of one tenant that hold live memories.

Nothing reads or writes across tenants: every namespace starts with its tenant, and a
store made with ``tenant=`` refuses every other tenant's namespace. ``Chatkeep`` serves
the sync methods, ``AsyncChatkeep`` the async ones (``aget``, ``asearch``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from chatkeep.app import Chatkeep
from chatkeep.errors import ConfigError, InvalidArgument, MemoryNotFound
from chatkeep.integrations.langchain.keeps import check_keep, is_async_keep
from chatkeep.integrations.langchain.namespaces import (
    Namespace,
    parse_namespace,
    parse_prefix,
    unmapped,
)
from chatkeep.memory.recall import Memory, Recalled
from chatkeep.memory.scopes import Scope, ScopeTarget
from chatkeep.refs import Ref, is_canonical_int
from chatkeep.validation import INT32_MAX

if TYPE_CHECKING:
    from chatkeep.aio import AsyncChatkeep

__all__ = ["ChatkeepStore"]

#: The value field that holds a memory's text.
CONTENT = "content"
#: Supersessions followed from an old key to the live memory that replaced it.
MAX_HOPS = 64
#: The longest time to live, in minutes (about a century: an expiry stays a date).
MAX_TTL_MINUTES = 36_500 * 24 * 60
#: What a store's ``ttl`` configuration may name (LangGraph's ``TTLConfig``).
TTL_KEYS = frozenset({"default_ttl", "refresh_on_read", "sweep_interval_minutes",
                      "omit_expired"})


def unsupported(reason: str) -> InvalidArgument:
    """The error for a store operation chatkeep's memories cannot honour (a value with
    fields other than ``content``, a ``filter``, a time to live)."""
    return InvalidArgument(f"not supported by chatkeep memories: {reason}")


class ChatkeepStore(BaseStore):
    """LangGraph's ``BaseStore`` over chatkeep memories (see the module docstring).

    ``keep``: a ``Chatkeep`` (sync methods) or an ``AsyncChatkeep`` (async methods).
    ``tenant``: when set, the only tenant this store reads and writes (a namespace of
    another is ``InvalidArgument``): give each request its tenant's store.
    ``ttl``: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes, for a ``put`` that
    names no ``ttl``), ``refresh_on_read`` (default ``True``: reads push the expiry on);
    expired memories are never served, whatever ``omit_expired`` says, and the sweep is
    chatkeep's retention sweep (``sweep_interval_minutes`` is accepted and unused: run
    ``keep.retention.sweep`` on a schedule, or ``sweep_ttl``).
    """

    __slots__ = ("keep", "tenant", "ttl_config")
    supports_ttl = True

    def __init__(self, keep: Chatkeep | AsyncChatkeep, *, tenant: Ref | None = None,
                 ttl: TTLConfig | None = None) -> None:
        self.keep = check_keep(keep, "ChatkeepStore")
        self.tenant = None if tenant is None else Ref.coerce(tenant)
        self.ttl_config = _ttl_config(ttl)

    def sweep_ttl(self) -> int:
        """Delete the expired memories now (this store's tenant's, or every tenant's),
        through chatkeep's retention sweep; how many went. On a ``Chatkeep``."""
        if not isinstance(self.keep, Chatkeep):
            raise ConfigError("this ChatkeepStore holds an AsyncChatkeep: use asweep_ttl")
        return self.keep.retention.sweep_expired(self.tenant).expired

    async def asweep_ttl(self) -> int:
        """Async twin of :meth:`sweep_ttl`, on an ``AsyncChatkeep``."""
        if not is_async_keep(self.keep):
            raise ConfigError("this ChatkeepStore holds a Chatkeep: use sweep_ttl")
        return (await self.keep.retention.sweep_expired(self.tenant)).expired

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order on a ``Chatkeep``."""
        if not isinstance(self.keep, Chatkeep):
            raise ConfigError("this ChatkeepStore holds an AsyncChatkeep: use the async "
                              "methods (aget, asearch, aput, ...), or give it a Chatkeep")
        return run_ops(self.keep, self.tenant, list(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order on an ``AsyncChatkeep`` (the same code, on its bridge)."""
        if not is_async_keep(self.keep):
            raise ConfigError("this ChatkeepStore holds a Chatkeep: use the sync methods "
                              "(get, search, put, ...), or give it an AsyncChatkeep")
        core = await self.keep.core()
        return await self.keep.run(run_ops, core, self.tenant, list(ops))


def _ttl_config(config: object) -> TTLConfig | None:
    """A store's ``ttl`` configuration, checked (``InvalidArgument`` naming the key)."""
    if config is None:
        return None
    if not isinstance(config, Mapping) or not set(config) <= TTL_KEYS:
        named = sorted(config) if isinstance(config, Mapping) else type(config).__name__
        raise InvalidArgument(f"ttl must be a TTLConfig ({', '.join(sorted(TTL_KEYS))}), "
                              f"got {named}")
    if config.get("default_ttl") is not None:
        _ttl_seconds(config["default_ttl"])
    for key in ("refresh_on_read", "omit_expired"):
        if key in config and not isinstance(config[key], bool):
            raise InvalidArgument(f"ttl {key!r} must be True or False")
    interval = config.get("sweep_interval_minutes")
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int)
                                 or interval < 1):
        raise InvalidArgument("ttl 'sweep_interval_minutes' must be a whole number >= 1")
    return TTLConfig(**config)  # type: ignore[typeddict-item]


def _ttl_seconds(minutes: object) -> int:
    """A time to live in minutes (LangGraph's unit) as whole seconds, at least one."""
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or \
            not math.isfinite(minutes) or not 0 < minutes <= MAX_TTL_MINUTES:
        raise InvalidArgument(f"ttl must be a number of minutes above 0 and at most "
                              f"{MAX_TTL_MINUTES}, got {minutes!r}")
    return max(1, round(minutes * 60))


def run_ops(core: Chatkeep, tenant: Ref | None, ops: list[Op]) -> list[Result]:
    """Each op's result, in order (over the sync core)."""
    results: list[Result] = []
    for op in ops:
        if isinstance(op, GetOp):
            results.append(_get(core, _checked(parse_namespace(op.namespace), tenant), op.key,
                                op.refresh_ttl))
        elif isinstance(op, SearchOp):
            results.append(_search(core, _checked(parse_prefix(op.namespace_prefix), tenant),
                                   op))
        elif isinstance(op, PutOp):
            _put(core, _checked(parse_namespace(op.namespace), tenant), op)
            results.append(None)
        elif isinstance(op, ListNamespacesOp):
            results.append(_namespaces(core, tenant, op))
        else:
            raise unsupported(f"unknown store operation {type(op).__name__}")
    return results


def _checked(namespace: Namespace, tenant: Ref | None) -> Namespace:
    if tenant is not None and namespace.tenant != tenant:
        raise unmapped(f"{namespace.labels} belongs to another tenant than this "
                       f"store's ({tenant})")
    return namespace


def _memory_id(key: str) -> int | None:
    return int(key) if is_canonical_int(key) and int(key) <= 2**63 - 1 else None


def _get(core: Chatkeep, namespace: Namespace, key: str, refresh: bool) -> Item | None:
    memory_id = _memory_id(key)
    if memory_id is None:
        return None
    memory = _find(core, namespace.target, memory_id)
    if memory is None or memory.expired(core.memory.store.now()):
        return None
    _refresh(core, namespace.tenant, [memory], refresh)
    return _item(memory)


def _refresh(core: Chatkeep, tenant: Ref, found: Sequence[Memory], refresh: bool) -> None:
    """What serving ``found`` records: their recall time (at recall's granularity), and,
    when the read asks, their expiry pushed on (those with a time to live)."""
    core.memory.recaller.stamp(tenant, Recalled(found))
    if refresh and any(m.expires_at is not None for m in found):
        core.memory.store.writes.refresh_expiry(
            tenant, [m.id for m in found if m.expires_at is not None])


def _find(core: Chatkeep, target: ScopeTarget, memory_id: int) -> Memory | None:
    """The live memory ``memory_id`` of ``target``'s scope, or the version that superseded
    it (an updated item is found by its old key); ``None`` when there is none in that
    scope (another tenant's id is not found)."""
    for _ in range(MAX_HOPS):
        try:
            memory = core.memory.get(target.tenant, memory_id)
        except MemoryNotFound:
            return None
        if _target_of(memory).key != target.key:
            return None
        if memory.superseded_by is None:
            return memory
        memory_id = memory.superseded_by
    return None


def _put(core: Chatkeep, namespace: Namespace, op: PutOp) -> None:
    target = namespace.target
    memory_id = _memory_id(op.key)
    current = None if memory_id is None else _find(core, target, memory_id)
    if op.value is None:
        if current is not None:
            core.memory.delete(target.tenant, current.id)
        return
    ttl = None if op.ttl is None else _ttl_seconds(op.ttl)
    content = _content(op.value)
    if op.index not in (None, False) and not set(op.index or ()) <= {CONTENT, "$"}:
        raise unsupported(f"a memory is indexed by its {CONTENT!r}; "
                          f"index={op.index!r} names other fields")
    if current is not None:
        written = core.memory.update(target.tenant, current.id, content)
    else:
        written = core.memory.add(target.tenant, content, scope=target.scope,
                                  subject=target.subject, actor=target.actor)
    if ttl is not None or written.expires_at is not None:  # a put replaces the expiry too
        core.memory.set_expiry(target.tenant, written.id,
                               None if ttl is None else timedelta(seconds=ttl))


def _content(value: Mapping[str, Any]) -> str:
    if not isinstance(value, Mapping) or set(value) != {CONTENT} or \
            not isinstance(value[CONTENT], str):
        fields = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        raise unsupported(f"a chatkeep memory holds one text: put "
                          f"{{{CONTENT!r}: '...'}}, got {fields}")
    return str(value[CONTENT])


def _search(core: Chatkeep, prefix: Namespace, op: SearchOp) -> list[SearchItem]:
    if op.filter:
        raise unsupported("chatkeep memories cannot be filtered by value: search by "
                          "namespace and query")
    want = op.offset + op.limit
    if want <= 0:
        return []
    if op.query is not None and op.query.strip():
        if prefix.complete:
            keys = [prefix.target.key]
        else:
            keys = sorted({n.target.key for n in _scopes(core, prefix)})
        found = core.memory.retriever.search(prefix.tenant, keys, op.query, want) \
            if keys else []
    else:
        found = _listed(core, prefix, want)
    page = found[op.offset:want]
    _refresh(core, prefix.tenant, page, op.refresh_ttl)
    return [_search_item(m) for m in page]


def _listed(core: Chatkeep, prefix: Namespace, limit: int) -> list[Memory]:
    """Live memories under ``prefix`` that have not expired, newest first."""
    scope = prefix.scope
    return core.memory.list(
        prefix.tenant, scope=None if scope is None else scope.value,
        actor=prefix.ref if scope is Scope.PERSONAL else None,
        subject=prefix.ref if scope is Scope.SUBJECT else None, include_expired=False,
        limit=min(limit, INT32_MAX))


def _scopes(core: Chatkeep, prefix: Namespace) -> list[Namespace]:
    """The scopes under ``prefix`` holding live memories, in order of their newest."""
    seen: dict[tuple[str, ...], Namespace] = {}
    for memory in _listed(core, prefix, INT32_MAX):
        namespace = _namespace_of(memory)
        seen.setdefault(namespace.labels, namespace)
    return list(seen.values())


def _namespaces(core: Chatkeep, tenant: Ref | None,
                op: ListNamespacesOp) -> list[tuple[str, ...]]:
    """The namespaces of one tenant's scopes that hold live memories, matched, cut to
    ``max_depth``, sorted and paged. The tenant is the first label of a prefix
    condition, or this store's own."""
    conditions = tuple(op.match_conditions or ())
    named = next((c.path[0] for c in conditions if c.match_type == "prefix"
                  and c.path and c.path[0] != "*"), None)
    if named is not None:
        owner = _checked(parse_prefix((named,)), tenant).tenant
    elif tenant is not None:
        owner = tenant
    else:
        raise unmapped("list_namespaces needs prefix=(tenant, ...): chatkeep never "
                       "lists across tenants")
    found: list[tuple[str, ...]] = []
    for namespace in _scopes(core, Namespace(owner)):
        labels = namespace.labels
        if not all(_matches(labels, c) for c in conditions):
            continue
        if op.max_depth is not None:
            labels = labels[:op.max_depth]
        if labels not in found:
            found.append(labels)
    found.sort()
    return found[op.offset:op.offset + op.limit]


def _matches(labels: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(labels):
        return False
    part = labels[:len(path)] if condition.match_type == "prefix" else labels[-len(path):]
    return all(p in ("*", label) for p, label in zip(path, part, strict=True)) \
        if path else True


def _target_of(memory: Memory) -> ScopeTarget:
    return ScopeTarget(memory.tenant, Scope(memory.scope), subject=memory.subject,
                       actor=memory.actor)


def _namespace_of(memory: Memory) -> Namespace:
    scope = Scope(memory.scope)
    ref = memory.subject if scope is Scope.SUBJECT else \
        memory.actor if scope is Scope.PERSONAL else None
    return Namespace(memory.tenant, scope, ref)


def _item(memory: Memory) -> Item:
    return Item(value={CONTENT: memory.content}, key=str(memory.id),
                namespace=_namespace_of(memory).labels, created_at=memory.created_at,
                updated_at=memory.updated_at)


def _search_item(memory: Memory) -> SearchItem:
    return SearchItem(_namespace_of(memory).labels, str(memory.id), {CONTENT: memory.content},
                      memory.created_at, memory.updated_at, score=memory.score)
