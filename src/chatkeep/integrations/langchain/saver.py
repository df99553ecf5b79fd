"""``ChatkeepSaver``: a LangGraph checkpointer on chatkeep's store, scoped by tenant.

A thread's checkpoints belong to the thread's chatkeep session (the session named by its
``thread_id``, the one :class:`~chatkeep.integrations.langchain.ChatkeepMiddleware`
records into), one row each in ``chat_checkpoints`` (:mod:`chatkeep.store.checkpoints`),
written once::

    agent = create_agent(model, tools, middleware=[ChatkeepMiddleware(keep)],
                         checkpointer=ChatkeepSaver(keep))
    agent.invoke(inputs, {"configurable": {"thread_id": "ticket-4711"}},
                 context={"tenant": "organization:7", "actor": "user:3"})

* **Scoped by tenant, by construction.** A checkpoint is found by the session of
  (tenant, ``thread_id``), never by ``thread_id`` alone: two tenants on the same
  ``thread_id`` are two sessions, and no run can be handed another tenant's state. The
  tenant is read as the middleware reads it, from the run's ``context=`` (LangGraph hands
  its checkpointer the run's runtime in the config); or the saver is built for one
  tenant (``tenant=``); or, for calls that carry no context (``get_state``,
  ``get_state_history``), from ``config["configurable"]["tenant"]``. Two of these that
  differ are refused, as is a call naming no tenant (``InvalidArgument``).
* **Each message stored once.** A channel holding LangChain messages (``messages``) is
  stored as references into the session's log: runs of the messages the middleware
  recorded (by their LangChain id, as seq ranges), and inline only what the log does
  not hold yet (the newest step's output) or holds in another form. A checkpoint's size
  is then flat in the thread's length. Read back, a message from the log carries its
  type, id, text, tool calls, tool-call id and name; provider metadata
  (``response_metadata``, ``usage_metadata``, ``additional_kwargs``) is not kept. Other
  channels are stored as they are (LangGraph's serializer), once per version.
* **delete_thread deletes.** It is chatkeep's delete of the thread's session
  (``keep.sessions.delete``): the conversation, its summary, vault and checkpoints.

``Chatkeep`` serves ``get_tuple`` / ``list`` / ``put`` / ``put_writes`` /
``delete_thread``; ``AsyncChatkeep`` their ``a*`` twins (the same functions, on its
bridge).
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import hashlib
import json
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from chatkeep.app import Chatkeep
from chatkeep.errors import ConfigError, InvalidArgument, SessionNotFound
from chatkeep.integrations.context import named_party
from chatkeep.integrations.langchain.keeps import check_keep, is_async_keep
from chatkeep.integrations.langchain.messages import LANGCHAIN_ID
from chatkeep.messages import Message, Role
from chatkeep.refs import Ref
from chatkeep.store.checkpoints import CheckpointRow, CheckpointStore
from chatkeep.validation import check_int

if TYPE_CHECKING:
    from chatkeep.aio import AsyncChatkeep

__all__ = ["ChatkeepSaver"]

#: The serializer type of a messages channel stored as references into the log.
LOG_TYPE = "chatkeep-log"
#: Where LangGraph puts a run's ``Runtime`` in the config it hands a checkpointer
#: (``langgraph._internal._constants.CONFIG_KEY_RUNTIME``): the run's ``context=``.
RUNTIME_KEY = "__pregel_runtime"
#: Sessions whose log index a saver keeps (an LRU).
LOGS_KEPT = 256
#: Sessions whose last written or read messages a saver keeps (an LRU).
STATES_KEPT = 32


@dataclass(frozen=True, slots=True)
class _Parties:
    tenant: Ref
    actor: Ref | None
    subject: Ref | None


@dataclass(frozen=True, slots=True)
class _Log:
    """The LangChain-recorded messages of a session, in seq order: each one's seq, its
    LangChain id and a fingerprint of what it reads back as (never its text)."""

    through: int
    seqs: tuple[int, ...]
    fingerprints: tuple[str, ...]
    positions: Mapping[str, int]


class ChatkeepSaver(BaseCheckpointSaver[int]):
    """LangGraph's ``BaseCheckpointSaver`` on chatkeep's store (see the module docstring).

    ``keep``: a ``Chatkeep`` (sync methods) or an ``AsyncChatkeep`` (``a*`` methods).
    ``tenant``: the one tenant this saver reads and writes; ``None`` reads it from each
    run's context (``context={"tenant": ...}``) or config
    (``config["configurable"]["tenant"]``); a call naming none is refused, and so is one
    naming another tenant than the saver's. ``actor`` and ``subject`` (fixed, or read
    the same way) are what a thread's session is created with when the checkpointer
    opens it first (before the middleware's first recording): the run's own.
    ``keep_last``: keep only the newest checkpoints of each thread and namespace
    (``None``, the default, keeps them all, as LangGraph's savers do; each step's write
    is one row either way), dropped in the step's own transaction.
    """

    def __init__(self, keep: Chatkeep | AsyncChatkeep, *, tenant: Ref | str | None = None,
                 actor: Ref | str | None = None, subject: Ref | str | None = None,
                 keep_last: int | None = None,
                 serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.keep_last = None if keep_last is None else check_int(
            keep_last, "keep_last", minimum=1)
        self.keep = check_keep(keep, "ChatkeepSaver")
        self.tenant = None if tenant is None else Ref.coerce(tenant)
        self.actor = None if actor is None else Ref.coerce(actor)
        self.subject = None if subject is None else Ref.coerce(subject)
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self._encoded: OrderedDict[str, tuple[builtins.list[BaseMessage],
                                              builtins.list[tuple[Any, int]]]] = OrderedDict()
        self._holders: OrderedDict[tuple[str, str], tuple[str, dict[str, str]]] = \
            OrderedDict()
        self._sessions: OrderedDict[tuple[Ref, str], str] = OrderedDict()
        self._checkpoints: CheckpointStore | None = None

    def scoped(self, tenant: Ref | str) -> ChatkeepSaver:
        """This saver for one tenant (what ``delete_thread``, which gets no config, needs
        when the tenant comes from each run's config)."""
        saver = ChatkeepSaver(self.keep, tenant=tenant, actor=self.actor,
                              subject=self.subject, keep_last=self.keep_last,
                              serde=self.serde)
        saver._logs, saver._encoded = self._logs, self._encoded
        saver._holders, saver._checkpoints = self._holders, self._checkpoints
        saver._sessions = self._sessions
        return saver

    # -- whose thread ---------------------------------------------------------------------

    def _parties(self, config: RunnableConfig | None) -> _Parties:
        configurable = (config or {}).get("configurable") or {}
        context = getattr(configurable.get(RUNTIME_KEY), "context", None)
        tenant = self._party(self.tenant, context, configurable, "tenant")
        if tenant is None:
            raise InvalidArgument("no tenant for this checkpoint: build the ChatkeepSaver "
                                  "with tenant=, run with context={'tenant': ...}, or "
                                  "(get_state and the like, which carry no context) with "
                                  "config={'configurable': {'thread_id': ..., 'tenant': "
                                  "...}}")
        return _Parties(tenant, self._party(self.actor, context, configurable, "actor"),
                        self._party(self.subject, context, configurable, "subject"))

    def _party(self, fixed: Ref | None, context: Any, configurable: Mapping[str, Any],
               name: str) -> Ref | None:
        """The saver's own party, the run context's, the config's: any two that differ
        are refused (``InvalidArgument``)."""
        found = [(where, ref) for where, ref in (
            ("this ChatkeepSaver is for", fixed),
            ("the run's context names", named_party(context, name)),
            ("the run's config names", named_party(configurable, name))) if ref is not None]
        for where, ref in found[1:]:
            if ref != found[0][1]:
                raise InvalidArgument(f"{where} {name} {ref}, and {found[0][0]} "
                                      f"{found[0][1]}")
        return found[0][1] if found else None

    def _sync(self) -> Chatkeep:
        if not isinstance(self.keep, Chatkeep):
            raise ConfigError("this ChatkeepSaver holds an AsyncChatkeep: run the graph "
                              "with ainvoke / astream, or give it a Chatkeep")
        return self.keep

    async def _run(self, fn: Any, *args: Any) -> Any:
        if not is_async_keep(self.keep):
            raise ConfigError("this ChatkeepSaver holds a Chatkeep: run the graph with "
                              "invoke / stream, or give it an AsyncChatkeep")
        core = await self.keep.core()
        return await self.keep.run(fn, core, *args)

    # -- sync -----------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the newest)."""
        return self._get(self._sync(), self._parties(config), config)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        """The tenant's checkpoints, newest first (of one thread when ``config`` names
        one; ``filter`` matches metadata, ``before`` a checkpoint id)."""
        yield from self._list(self._sync(), self._parties(config), config, filter, before,
                              limit)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        """Store a checkpoint in its thread's session (created on first use)."""
        return self._put(self._sync(), self._parties(config), config, checkpoint, metadata,
                         new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        """Store a task's pending writes beside its checkpoint."""
        self._put_writes(self._sync(), self._parties(config), config, writes, task_id,
                         task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's session through chatkeep's delete (a missing one: no-op)."""
        self._delete(self._sync(), self._parties(None), thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Drop the threads' older checkpoints (``"keep_latest"``: the newest per
        namespace stays, with its writes) or all of them (``"delete"``); the
        conversation itself stays (``delete_thread`` deletes it)."""
        self._prune(self._sync(), self._parties(None), thread_ids, strategy)

    # -- async ----------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async twin of :meth:`get_tuple`."""
        found: CheckpointTuple | None = await self._run(self._get, self._parties(config),
                                                        config)
        return found

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """Async twin of :meth:`list`."""
        found = await self._run(lambda core, *a: list(self._list(core, *a)),
                                self._parties(config), config, filter, before, limit)
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        """Async twin of :meth:`put`."""
        stored: RunnableConfig = await self._run(self._put, self._parties(config), config,
                                                 checkpoint, metadata, new_versions)
        return stored

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        """Async twin of :meth:`put_writes`."""
        await self._run(self._put_writes, self._parties(config), config, writes, task_id,
                        task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async twin of :meth:`delete_thread`."""
        await self._run(self._delete, self._parties(None), thread_id)

    async def aprune(self, thread_ids: Sequence[str], *,
                     strategy: str = "keep_latest") -> None:
        """Async twin of :meth:`prune`."""
        await self._run(self._prune, self._parties(None), list(thread_ids), strategy)

    # -- the flow, over the sync core ----------------------------------------------------

    def _store(self, core: Chatkeep) -> CheckpointStore:
        store = self._checkpoints
        if store is None or store.engine is not core.engine:
            store = self._checkpoints = CheckpointStore(core.engine, core.repository.clock)
        return store

    def _get(self, core: Chatkeep, parties: _Parties,
             config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        session_id = self._session_of(core, parties, thread_id, create=False)
        if session_id is None:
            return None
        ns = str(configurable.get("checkpoint_ns", ""))
        found = self._store(core).get(session_id, ns, get_checkpoint_id(config))
        return None if found is None else self._tuple(core, thread_id, found)

    def _list(self, core: Chatkeep, parties: _Parties, config: RunnableConfig | None,
              filter: dict[str, Any] | None, before: RunnableConfig | None,
              limit: int | None) -> Iterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable") or {}
        thread_id = configurable.get("thread_id")
        session_id = None
        if thread_id is not None:
            session_id = self._session_of(core, parties, str(thread_id), create=False)
            if session_id is None:
                return
        wanted_ns = configurable.get("checkpoint_ns")
        wanted_id = configurable.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        store = self._store(core)
        for sid, key, ns, checkpoint_id in store.listed(parties.tenant, session_id):
            if (wanted_ns is not None and ns != wanted_ns) or (
                    wanted_id and checkpoint_id != wanted_id) or (
                    before_id and checkpoint_id >= before_id):
                continue
            found = store.get(sid, ns, checkpoint_id)
            if found is None:
                continue  # pruned meanwhile
            if filter:
                metadata = self._load(found.checkpoint["m"])
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            if left is not None:
                if left <= 0:
                    return
                left -= 1
            yield self._tuple(core, key, found)

    def _put(self, core: Chatkeep, parties: _Parties, config: RunnableConfig,
             checkpoint: Checkpoint, metadata: CheckpointMetadata,
             new_versions: ChannelVersions) -> RunnableConfig:
        try:
            return self._put_once(core, parties, config, checkpoint, metadata, new_versions,
                                  cached=True)
        except self._store(core).integrity_errors:
            # The session a remembered id named is gone (deleted): look it up again.
            return self._put_once(core, parties, config, checkpoint, metadata, new_versions,
                                  cached=False)

    def _put_once(self, core: Chatkeep, parties: _Parties, config: RunnableConfig,
                  checkpoint: Checkpoint, metadata: CheckpointMetadata,
                  new_versions: ChannelVersions, *, cached: bool) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        session_id = self._writable(core, parties, thread_id, cached)
        saved: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = saved.pop("channel_values")
        blobs = {_blob_key(channel, version): self._blob(core, session_id, values, channel)
                 for channel, version in new_versions.items()}
        keys = [_blob_key(c, v) for c, v in checkpoint["channel_versions"].items()]
        parent = configurable.get("checkpoint_id")
        inherited = self._holders_of(core, session_id, ns, parent) if parent else {}
        holders = {key: checkpoint["id"] if key in blobs else inherited[key]
                   for key in keys if key in blobs or key in inherited}
        entry = {"c": self._dump(saved),
                 "m": self._dump(get_checkpoint_metadata(config, metadata)),
                 "k": keys, "h": holders}
        self._store(core).put(session_id, parties.tenant, ns, checkpoint["id"], parent,
                              entry, set(holders.values()) - {checkpoint["id"]}, blobs,
                              keep_last=self.keep_last)
        self._remember_holders(session_id, ns, checkpoint["id"], holders)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def _holders_of(self, core: Chatkeep, session_id: str, ns: str,
                    checkpoint_id: str) -> dict[str, str]:
        """Which rows hold the values checkpoint ``checkpoint_id`` reads (remembered from
        this saver's last write of the namespace, else read)."""
        known = self._holders.get((session_id, ns))
        if known is not None and known[0] == checkpoint_id:
            return known[1]
        found = self._store(core).get(session_id, ns, checkpoint_id)
        if found is None:
            return {}
        return {key: str(holder) for key, holder in (found.checkpoint.get("h") or {}).items()}

    def _remember_holders(self, session_id: str, ns: str, checkpoint_id: str,
                          holders: dict[str, str]) -> None:
        self._holders[(session_id, ns)] = (checkpoint_id, holders)
        self._holders.move_to_end((session_id, ns))
        while len(self._holders) > STATES_KEPT:
            self._holders.popitem(last=False)

    def _writable(self, core: Chatkeep, parties: _Parties, thread_id: str,
                  cached: bool) -> str:
        """The id of the session a write goes to: remembered from this saver's last write
        of the thread (``cached``; a write naming a session deleted since fails on its
        foreign key and is retried without it), else looked up or created."""
        key = (parties.tenant, thread_id)
        found = self._sessions.get(key) if cached else None
        if found is None:
            found = self._session_of(core, parties, thread_id, create=True)
            assert found is not None
            self._sessions[key] = found
            while len(self._sessions) > LOGS_KEPT:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return found

    def _session_of(self, core: Chatkeep, parties: _Parties, thread_id: str, *,
                    create: bool) -> str | None:
        """The id of the tenant's session named ``thread_id`` (``create``: opened with
        the run's actor and subject on first use)."""
        row = core.repository.find_session(thread_id, parties.tenant)
        if row is not None:
            return row.id
        if not create:
            return None
        return core.sessions.open(thread_id, parties.tenant, parties.actor,
                                  parties.subject).id

    def _put_writes(self, core: Chatkeep, parties: _Parties, config: RunnableConfig,
                    writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> None:
        try:
            self._put_writes_once(core, parties, config, writes, task_id, task_path, True)
        except self._store(core).integrity_errors:
            self._put_writes_once(core, parties, config, writes, task_id, task_path, False)

    def _put_writes_once(self, core: Chatkeep, parties: _Parties, config: RunnableConfig,
                         writes: Sequence[tuple[str, Any]], task_id: str, task_path: str,
                         cached: bool) -> None:
        configurable = config["configurable"]
        ns = str(configurable.get("checkpoint_ns", ""))
        checkpoint_id = str(configurable["checkpoint_id"])
        session_id = self._writable(core, parties, str(configurable["thread_id"]), cached)
        dumped = [(WRITES_IDX_MAP.get(channel, index), channel, self._dump(value))
                  for index, (channel, value) in enumerate(writes)]

        def merge(stored_writes: builtins.list[Any]) -> builtins.list[Any] | None:
            stored = {(w[0], w[1]): w for w in stored_writes}
            changed = False
            for index, channel, value in dumped:
                key = (task_id, index)
                if index >= 0 and key in stored:
                    continue  # a task's regular writes are stored once
                stored[key] = [task_id, index, channel, value, task_path]
                changed = True
            return list(stored.values()) if changed else None

        # Under keep_last, the writes of a checkpoint it dropped are dropped too.
        self._store(core).put_writes(session_id, parties.tenant, ns, checkpoint_id, merge,
                                     missing_ok=self.keep_last is None)

    def _prune(self, core: Chatkeep, parties: _Parties, thread_ids: Sequence[str],
               strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgument(f"prune strategy must be 'keep_latest' or 'delete', got "
                                  f"{strategy!r}")
        for thread_id in thread_ids:
            session_id = self._session_of(core, parties, str(thread_id), create=False)
            if session_id is not None:
                self._store(core).prune(session_id, None if strategy == "delete" else 1)

    def _delete(self, core: Chatkeep, parties: _Parties, thread_id: str) -> None:
        row = core.repository.find_session(str(thread_id), parties.tenant)
        if row is None:
            return
        with contextlib.suppress(SessionNotFound):  # deleted meanwhile: nothing left
            core.sessions.delete(row.id, parties.tenant, by="langgraph.delete_thread")
        self._logs.pop(row.id, None)
        self._encoded.pop(row.id, None)
        self._sessions.pop((parties.tenant, str(thread_id)), None)

    # -- one checkpoint ------------------------------------------------------------------

    def _tuple(self, core: Chatkeep, thread_id: str,
               found: CheckpointRow) -> CheckpointTuple:
        entry = found.checkpoint
        checkpoint = self._load(entry["c"])
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            blob = found.values.get(_blob_key(channel, version))
            if blob is None or blob[0] == "empty":
                continue
            values[channel] = self._read_log(core, found.session_id, blob[1]) \
                if blob[0] == LOG_TYPE else self._load(blob)
        writes = sorted(found.writes, key=lambda w: (w[4], w[0], w[1]))
        thread = {"thread_id": thread_id, "checkpoint_ns": found.ns}
        parent = found.parent_id
        return CheckpointTuple(
            config={"configurable": {**thread, "checkpoint_id": found.checkpoint_id}},
            checkpoint=cast(Checkpoint, {**checkpoint, "channel_values": values}),
            metadata=self._load(entry["m"]),
            parent_config={"configurable": {**thread, "checkpoint_id": parent}}
            if parent else None,
            pending_writes=[(w[0], w[2], self._load(w[3])) for w in writes])

    def _dump(self, value: Any) -> builtins.list[str]:
        kind, data = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(data).decode("ascii")]

    def _load(self, dumped: Sequence[str]) -> Any:
        return self.serde.loads_typed((dumped[0], base64.b64decode(dumped[1])))

    def _blob(self, core: Chatkeep, session_id: str, values: Mapping[str, Any],
              channel: str) -> builtins.list[str]:
        if channel not in values:
            return ["empty", ""]
        value = values[channel]
        if isinstance(value, list) and value and all(isinstance(m, BaseMessage)
                                                     for m in value):
            return [LOG_TYPE, json.dumps(self._refer(core, session_id, value),
                                         separators=(",", ":"))]
        return self._dump(value)

    # -- a messages channel as references into the session's log ------------------------

    def _log(self, core: Chatkeep, session_id: str) -> _Log:
        """The session's recorded LangChain messages, read since the last call."""
        known = self._logs.get(session_id) or _Log(0, (), (), {})
        fresh = core.repository.read_messages(session_id, after_seq=known.through)
        if fresh:
            seqs, prints = list(known.seqs), list(known.fingerprints)
            positions = dict(known.positions)
            for message in fresh:
                rebuilt = _rebuilt(message)
                if rebuilt is None or rebuilt.id is None:
                    continue
                positions[rebuilt.id] = len(seqs)
                seqs.append(message.seq)
                prints.append(_fingerprint(rebuilt) or "")
            known = _Log(fresh[-1].seq, tuple(seqs), tuple(prints), positions)
        self._logs[session_id] = known
        self._logs.move_to_end(session_id)
        while len(self._logs) > LOGS_KEPT:
            self._logs.popitem(last=False)
        return known

    def _refer(self, core: Chatkeep, session_id: str,
               messages: Sequence[BaseMessage]) -> builtins.list[Any]:
        """``messages`` as parts: ``[from_seq, through_seq]`` for a run of logged messages
        that read back as they are, ``{"inline": ...}`` for the others (serialized).

        The messages this saver last wrote or read for the session, when ``messages``
        starts with those very objects, keep their parts (but trailing inline ones, which
        the log may hold by now): a step's write costs its new messages, not the thread."""
        log = self._log(core, session_id)
        counted, start = self._prefix(session_id, messages)
        run: builtins.list[int] | None = None
        if counted and isinstance(counted[-1][0], list):
            first, last = counted[-1][0]
            low, high = bisect_left(log.seqs, first), bisect_left(log.seqs, last)
            if high < len(log.seqs) and log.seqs[low] == first and log.seqs[high] == last:
                counted.pop()
                run = [low, high]
        inline: builtins.list[BaseMessage] = []

        def close() -> None:
            nonlocal run
            if run is not None:
                counted.append(([log.seqs[run[0]], log.seqs[run[1]]], run[1] - run[0] + 1))
                run = None
            if inline:
                counted.append(({"inline": self._dump(list(inline))}, len(inline)))
                inline.clear()

        for message in messages[start:]:
            position = log.positions.get(message.id) if message.id else None
            if position is not None and log.fingerprints[position] == _fingerprint(message):
                if run is not None and position == run[1] + 1 and not inline:
                    run[1] = position
                else:
                    close()
                    run = [position, position]
            else:
                if run is not None:
                    close()
                inline.append(message)
        close()
        self._remember(session_id, messages, counted)
        return [part for part, _ in counted]

    def _prefix(self, session_id: str,
                messages: Sequence[BaseMessage]) -> tuple[builtins.list[Any], int]:
        """The remembered parts ``messages`` starts with (with their message counts), and
        how many messages they cover."""
        known = self._encoded.get(session_id)
        if known is None:
            return [], 0
        objects, counted = known
        kept = list(counted)
        while kept and isinstance(kept[-1][0], dict):
            kept.pop()
        covered = sum(count for _, count in kept)
        if covered > len(messages) or covered > len(objects) or any(
                messages[i] is not objects[i] for i in range(covered)):
            return [], 0
        return kept, covered

    def _remember(self, session_id: str, messages: Sequence[BaseMessage],
                  counted: builtins.list[tuple[Any, int]]) -> None:
        self._encoded[session_id] = (list(messages), list(counted))
        self._encoded.move_to_end(session_id)
        while len(self._encoded) > STATES_KEPT:
            self._encoded.popitem(last=False)

    def _read_log(self, core: Chatkeep, session_id: str,
                  text: str) -> builtins.list[BaseMessage]:
        parts = json.loads(text)
        ranges = [p for p in parts if isinstance(p, list)]
        seqs: builtins.list[int] = []
        logged: builtins.list[BaseMessage] = []
        if ranges:
            low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
            for message in core.repository.read_messages(
                    session_id, after_seq=low - 1, through_seq=high):
                rebuilt = _rebuilt(message)
                if rebuilt is not None:
                    seqs.append(message.seq)
                    logged.append(rebuilt)
        out: builtins.list[BaseMessage] = []
        counted: builtins.list[tuple[Any, int]] = []
        for part in parts:
            if isinstance(part, list):
                found = logged[bisect_left(seqs, part[0]):bisect_right(seqs, part[1])]
            else:
                found = self._load(part["inline"])
            out.extend(found)
            counted.append((part, len(found)))
        self._remember(session_id, out, counted)
        return out


def _blob_key(channel: str, version: Any) -> str:
    return json.dumps([channel, version], separators=(",", ":"))


def _rebuilt(message: Message) -> BaseMessage | None:
    """A recorded message as the LangChain message it reads back as (``None``: it was
    not recorded from a LangGraph thread)."""
    lc_id = message.metadata.get(LANGCHAIN_ID)
    if not isinstance(lc_id, str):
        return None
    text = message.content or ""
    if message.role is Role.USER:
        return HumanMessage(content=text, id=lc_id, name=message.name)
    if message.role is Role.SYSTEM:
        return SystemMessage(content=text, id=lc_id, name=message.name)
    if message.role is Role.TOOL:
        return ToolMessage(content=text, tool_call_id=message.tool_call_id or "", id=lc_id,
                           name=message.name)
    calls = []
    for call in message.tool_calls:
        try:
            args = json.loads(call.arguments)
        except ValueError:
            args = None
        calls.append({"name": call.name, "args": args if isinstance(args, dict) else {},
                      "id": call.id, "type": "tool_call"})
    return AIMessage(content=text, id=lc_id, name=message.name, tool_calls=calls)


def _fingerprint(message: BaseMessage) -> str | None:
    """A digest of what a message reads back as from the log; ``None`` for one the log
    cannot give back whole (content blocks, an artifact, an error status, invalid calls)."""
    if not isinstance(message.content, str):
        return None
    shape: list[Any] = [message.type, message.id, message.content, message.name]
    if isinstance(message, AIMessage):
        if message.invalid_tool_calls:
            return None
        shape.append([[c["id"], c["name"], c["args"]] for c in message.tool_calls])
    elif isinstance(message, ToolMessage):
        if message.artifact is not None or message.status != "success":
            return None
        shape.append(message.tool_call_id)
    elif not isinstance(message, HumanMessage | SystemMessage):
        return None
    text = json.dumps(shape, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
