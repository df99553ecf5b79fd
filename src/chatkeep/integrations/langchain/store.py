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
  refused (``InvalidArgument``), as are ``filter`` and a time to live.
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

from collections.abc import Iterable, Mapping
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
from chatkeep.memory.recall import Memory
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


def unsupported(reason: str) -> InvalidArgument:
    """The error for a store operation chatkeep's memories cannot honour (a value with
    fields other than ``content``, a ``filter``, a time to live)."""
    return InvalidArgument(f"not supported by chatkeep memories: {reason}")


class ChatkeepStore(BaseStore):
    """LangGraph's ``BaseStore`` over chatkeep memories (see the module docstring).

    ``keep``: a ``Chatkeep`` (sync methods) or an ``AsyncChatkeep`` (async methods).
    ``tenant``: when set, the only tenant this store reads and writes (a namespace of
    another is ``InvalidArgument``): give each request its tenant's store.
    """

    __slots__ = ("keep", "tenant")

    def __init__(self, keep: Chatkeep | AsyncChatkeep, *, tenant: Ref | None = None) -> None:
        self.keep = check_keep(keep, "ChatkeepStore")
        self.tenant = None if tenant is None else Ref.coerce(tenant)

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


def run_ops(core: Chatkeep, tenant: Ref | None, ops: list[Op]) -> list[Result]:
    """Each op's result, in order (over the sync core)."""
    results: list[Result] = []
    for op in ops:
        if isinstance(op, GetOp):
            results.append(_get(core, _checked(parse_namespace(op.namespace), tenant), op.key))
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


def _get(core: Chatkeep, namespace: Namespace, key: str) -> Item | None:
    memory_id = _memory_id(key)
    if memory_id is None:
        return None
    memory = _find(core, namespace.target, memory_id)
    return None if memory is None else _item(memory)


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
    if op.ttl is not None:
        raise unsupported("chatkeep memories do not expire (ttl must be None); "
                          "erase them with delete or keep.memory.forget")
    content = _content(op.value)
    if op.index not in (None, False) and not set(op.index or ()) <= {CONTENT, "$"}:
        raise unsupported(f"a memory is indexed by its {CONTENT!r}; "
                          f"index={op.index!r} names other fields")
    if current is not None:
        core.memory.update(target.tenant, current.id, content)
    else:
        core.memory.add(target.tenant, content, scope=target.scope, subject=target.subject,
                        actor=target.actor)


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
    return [_search_item(m) for m in found[op.offset:want]]


def _listed(core: Chatkeep, prefix: Namespace, limit: int) -> list[Memory]:
    """Live memories under ``prefix``, newest first."""
    scope = prefix.scope
    return core.memory.list(
        prefix.tenant, scope=None if scope is None else scope.value,
        actor=prefix.ref if scope is Scope.PERSONAL else None,
        subject=prefix.ref if scope is Scope.SUBJECT else None, limit=min(limit, INT32_MAX))


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
