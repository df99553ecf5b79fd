"""LangGraph checkpoints' SQL (issue 37 item 3): ``chat_checkpoints``, one row per
checkpoint of a session's thread (what ``ChatkeepSaver`` stores).

A step's checkpoint is one ``INSERT`` (with its pruning, under ``keep_last``, in the same
transaction), so a write costs the same at the thousandth step as at the first. A row
holds the channel values of the versions its checkpoint made (``blobs``) and names the
rows holding the others it reads (``holders``): reading a checkpoint is its row, then
those rows' values. A pruned checkpoint whose values a kept one still reads stays as a
row without a checkpoint (``checkpoint IS NULL``), never listed. Pending writes are
merged into their checkpoint's row in one transaction (the row locked). Statements are
built once and run through the store's transports, as the quotas' are.

Writes are grouped (:class:`_Group`): LangGraph hands a step's checkpoint and its tasks'
writes to its background threads at about the same moment, and those that arrive while
one transaction commits go together in the next, one commit for them all (each call
still returns once its own write is committed; a group that fails is run again one
write per transaction, so each call gets its own outcome).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine, bindparam, delete, null, select, update
from sqlalchemy.dialects import postgresql, sqlite

from chatkeep.refs import Ref
from chatkeep.store.direct import driver_transport
from chatkeep.store.executor import CoreTransport, Executor, Transport
from chatkeep.store.rows import utcnow
from chatkeep.store.schema import chat_checkpoints, chat_sessions

_C = chat_checkpoints.c
_S = chat_sessions.c
_SPACE = (_C.session_id == bindparam("b_session_id")) & (_C.ns == bindparam("b_ns"))
_ONE = _SPACE & (_C.checkpoint_id == bindparam("b_checkpoint_id"))
_COLUMNS = (_C.ns, _C.checkpoint_id, _C.parent_id, _C.checkpoint, _C.blobs, _C.writes)

NEWEST = (select(*_COLUMNS).where(_SPACE, _C.checkpoint.is_not(None))
          .order_by(_C.checkpoint_id.desc()).limit(1))
ONE = select(*_COLUMNS).where(_ONE, _C.checkpoint.is_not(None))
VALUES = select(_C.blobs).where(_ONE)
_UPSERT_SET = ("parent_id", "checkpoint", "holders", "blobs")
UPSERT = {
    "sqlite": (lambda s: s.on_conflict_do_update(
        index_elements=["session_id", "ns", "checkpoint_id"],
        set_={c: s.excluded[c] for c in _UPSERT_SET}))(sqlite.insert(chat_checkpoints)),
    "postgresql": (lambda s: s.on_conflict_do_update(
        index_elements=["session_id", "ns", "checkpoint_id"],
        set_={c: s.excluded[c] for c in _UPSERT_SET}))(postgresql.insert(chat_checkpoints)),
}
"""Store a checkpoint (again: LangGraph may put one id twice); its writes stay."""
KEPT = (select(_C.checkpoint_id, _C.holders).where(_SPACE, _C.checkpoint.is_not(None))
        .order_by(_C.checkpoint_id.desc()).limit(bindparam("b_keep")))
OLDER = select(_C.checkpoint_id).where(_SPACE, _C.checkpoint_id < bindparam("b_oldest"))
DROP_ONE = delete(chat_checkpoints).where(_ONE)
EMPTY_OLDER = update(chat_checkpoints).where(
    _SPACE, _C.checkpoint_id < bindparam("b_oldest"), _C.checkpoint.is_not(None)).values(
    checkpoint=null(), writes=null())
_STORED = _C.checkpoint.is_not(None)
WRITES_OF = {
    "sqlite": select(_C.writes, _STORED).where(_ONE),
    "postgresql": select(_C.writes, _STORED).where(_ONE).with_for_update(),
}
SET_WRITES = update(chat_checkpoints).where(_ONE).values(writes=bindparam("b_writes"))
INSERT_PLACE = {"sqlite": sqlite.insert(chat_checkpoints).on_conflict_do_nothing(),
                "postgresql": postgresql.insert(chat_checkpoints).on_conflict_do_nothing()}
"""The row of a checkpoint whose writes come first (a concurrent one wins)."""
SPACES = select(_C.ns).where(_C.session_id == bindparam("b_session_id")).distinct()
DROP_SESSION = delete(chat_checkpoints).where(_C.session_id == bindparam("b_session_id"))
_LISTED = (_C.session_id, _S.key, _C.ns, _C.checkpoint_id)
LISTED = (select(*_LISTED).join(chat_sessions, _S.id == _C.session_id)
          .where(_C.tenant_type == bindparam("b_tenant_type"),
                 _C.tenant_id == bindparam("b_tenant_id"), _C.checkpoint.is_not(None))
          .order_by(_C.session_id, _C.ns, _C.checkpoint_id.desc()))
"""Every checkpoint of a tenant's threads (``list`` with no thread)."""
LISTED_SESSION = (select(*_LISTED).join(chat_sessions, _S.id == _C.session_id)
                  .where(_C.session_id == bindparam("b_session_id"),
                         _C.checkpoint.is_not(None))
                  .order_by(_C.ns, _C.checkpoint_id.desc()))
ALL_VALUES = select(_C.blobs).where(_SPACE)


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """A stored checkpoint: its ``checkpoint`` and ``writes`` as stored (JSON text), its
    own ``blobs`` and, in ``values``, every value it reads by channel-version key."""

    session_id: str
    thread_id: str | None
    ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: dict[str, Any]
    writes: list[Any]
    values: dict[str, Any]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


T = TypeVar("T")


class _Write(Generic[T]):
    """One caller's write, waiting for the transaction that runs it."""

    __slots__ = ("done", "error", "lead", "value", "work")

    def __init__(self, work: Callable[[Executor], T]) -> None:
        self.work = work
        self.done = threading.Event()
        self.lead = False
        """Set when this caller is handed the group's lead (its leader failed)."""
        self.value: T | None = None
        self.error: BaseException | None = None

    def finish(self, value: T | None, error: BaseException | None) -> None:
        self.value, self.error = value, error
        self.done.set()

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class _Group:
    """Group commit: the writes that queue while a transaction runs are run together in
    the next one, by the thread whose write found none running (the leader: it commits
    groups until none waits); the others wait for their write's outcome."""

    def __init__(self, transport: Transport, *, grouping: bool = True) -> None:
        self._transport = transport
        self._grouping = grouping
        """Off under the async API: its calls share the bridge's thread (a waiting one
        would block the leader), and come one at a time there anyway."""
        self._lock = threading.Lock()
        self._queue: list[_Write[Any]] = []
        self._busy = False

    def run(self, work: Callable[[Executor], T]) -> T:
        """``work(ex)`` in a write transaction, maybe beside other callers' writes."""
        if not self._grouping:
            with self._transport.transaction() as ex:
                return work(ex)
        mine: _Write[T] = _Write(work)
        with self._lock:
            self._queue.append(mine)
            lead = not self._busy
            self._busy = True
        if not lead:
            mine.done.wait()
            if not mine.lead:
                return mine.outcome()
        try:
            while True:
                with self._lock:
                    group, self._queue = self._queue, []
                    if not group:
                        self._busy = False
                        break
                self._commit(group)
        except BaseException:
            with self._lock:  # hand the lead over to the next waiting write, if any
                if self._queue:
                    self._queue[0].lead = True
                    self._queue[0].done.set()
                else:
                    self._busy = False
            raise
        return mine.outcome()

    def _commit(self, group: list[_Write[Any]]) -> None:
        try:
            if len(group) > 1:
                try:
                    with self._transport.transaction() as ex:
                        values = [write.work(ex) for write in group]
                except Exception:
                    pass  # rolled back: each write alone below, with its own outcome
                else:
                    for write, value in zip(group, values, strict=True):
                        write.finish(value, None)
                    return
            for write in group:
                try:
                    with self._transport.transaction() as ex:
                        value = write.work(ex)
                except Exception as exc:
                    write.finish(None, exc)
                else:
                    write.finish(value, None)
        except BaseException as exc:  # an interrupt: no write of the group is left waiting
            for write in group:
                if not write.done.is_set():
                    write.finish(None, exc)
            raise


class CheckpointStore:
    """``chat_checkpoints`` over one engine (thread-safe; one per keep)."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock
        self._transport: Transport = driver_transport(engine) or CoreTransport(engine)
        self._group = _Group(self._transport, grouping=not engine.dialect.is_async)

    @property
    def integrity_errors(self) -> tuple[type[Exception], ...]:
        """What a write raises for a session that is gone (its foreign key)."""
        return self._transport.integrity_errors

    # -- writes -----------------------------------------------------------------------

    def put(self, session_id: str, tenant: Ref, ns: str, checkpoint_id: str,
            parent_id: str | None, checkpoint: dict[str, Any], holders: Iterable[str],
            blobs: dict[str, Any], keep_last: int | None = None) -> None:
        """Store one checkpoint (``checkpoint`` carries ``h``: which row holds each
        value it reads); with ``keep_last``, drop the namespace's older checkpoints in
        the same transaction (rows whose values a kept one reads stay, emptied)."""
        row = {"session_id": session_id, "tenant_type": tenant.type,
               "tenant_id": tenant.id_text, "tenant_id_int": tenant.id_is_int,
               "ns": ns, "checkpoint_id": checkpoint_id, "parent_id": parent_id,
               "checkpoint": _dumps(checkpoint), "holders": _dumps(sorted(holders)),
               "blobs": _dumps(blobs), "writes": None, "created_at": self.clock()}
        upsert = UPSERT[self._transport.dialect]

        def work(ex: Executor) -> None:
            ex.many(upsert, [row])
            if keep_last is not None:
                self._prune(ex, session_id, ns, keep_last)

        self._group.run(work)

    def _prune(self, ex: Any, session_id: str, ns: str, keep: int) -> None:
        space = {"b_session_id": session_id, "b_ns": ns}
        kept = ex.rows(KEPT, {**space, "b_keep": keep})
        if len(kept) < keep:
            return
        oldest = min(str(r[0]) for r in kept)
        needed = {h for r in kept for h in json.loads(r[1])}
        doomed = [str(r[0]) for r in ex.rows(OLDER, {**space, "b_oldest": oldest})
                  if str(r[0]) not in needed]
        for checkpoint_id in doomed:
            ex.many(DROP_ONE, [{**space, "b_checkpoint_id": checkpoint_id}])
        ex.many(EMPTY_OLDER, [{**space, "b_oldest": oldest}])

    def put_writes(self, session_id: str, tenant: Ref, ns: str, checkpoint_id: str,
                   merge: Callable[[list[Any]], list[Any] | None], *,
                   missing_ok: bool) -> None:
        """Merge a task's writes into its checkpoint's row, the row locked: ``merge``
        gets the stored writes and returns them merged (``None``: unchanged). A
        checkpoint not stored (yet): its writes are kept in a row of their own, or,
        ``missing_ok=False``, dropped (as are those of a checkpoint ``keep_last``
        dropped)."""
        params = {"b_session_id": session_id, "b_ns": ns, "b_checkpoint_id": checkpoint_id}
        dialect = self._transport.dialect

        def work(ex: Executor) -> None:
            found = ex.rows(WRITES_OF[dialect], params)
            if not missing_ok and (not found or not found[0][1]):
                return  # not stored, or dropped: its writes go with it
            if not found:
                ex.many(INSERT_PLACE[dialect], [{
                    "session_id": session_id, "tenant_type": tenant.type,
                    "tenant_id": tenant.id_text, "tenant_id_int": tenant.id_is_int,
                    "ns": ns, "checkpoint_id": checkpoint_id, "parent_id": None,
                    "checkpoint": None, "holders": "[]", "blobs": "{}", "writes": None,
                    "created_at": self.clock()}])
                found = ex.rows(WRITES_OF[dialect], params)
            merged = merge(json.loads(found[0][0]) if found[0][0] else [])
            if merged is not None:
                ex.many(SET_WRITES, [{**params, "b_writes": _dumps(merged)}])

        self._group.run(work)

    def prune(self, session_id: str, keep: int | None) -> None:
        """Keep each namespace's newest ``keep`` checkpoints (``None``: drop them all)."""
        with self._transport.transaction() as ex:
            if keep is None:
                ex.many(DROP_SESSION, [{"b_session_id": session_id}])
                return
            for (ns,) in ex.rows(SPACES, {"b_session_id": session_id}):
                self._prune(ex, session_id, str(ns), keep)

    # -- reads ------------------------------------------------------------------------

    def get(self, session_id: str, ns: str, checkpoint_id: str | None,
            ) -> CheckpointRow | None:
        """The checkpoint ``checkpoint_id`` of the namespace (``None``: the newest)."""
        params: dict[str, Any] = {"b_session_id": session_id, "b_ns": ns}
        with self._transport.reading() as ex:
            if checkpoint_id is None:
                found = ex.rows(NEWEST, params)
            else:
                found = ex.rows(ONE, {**params, "b_checkpoint_id": checkpoint_id})
            if not found:
                return None
            return self._row(ex, session_id, None, found[0])

    def listed(self, tenant: Ref, session_id: str | None,
               ) -> list[tuple[str, str, str, str]]:
        """``(session_id, thread_id, ns, checkpoint_id)`` of the tenant's checkpoints (of
        one session), each thread's namespaces in order, newest checkpoint first."""
        with self._transport.autocommit() as ex:  # one statement
            if session_id is None:
                rows = ex.rows(LISTED, {"b_tenant_type": tenant.type,
                                        "b_tenant_id": tenant.id_text})
            else:
                rows = ex.rows(LISTED_SESSION, {"b_session_id": session_id})
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def _row(self, ex: Any, session_id: str, thread_id: str | None,
             row: Any) -> CheckpointRow:
        ns, checkpoint_id, parent_id, checkpoint, blobs, writes = tuple(row)
        entry = json.loads(checkpoint)
        values: dict[str, Any] = dict(json.loads(blobs))
        holders = sorted({h for h in (entry.get("h") or {}).values() if h != checkpoint_id})
        for holder in holders:
            for (held,) in ex.rows(VALUES, {"b_session_id": session_id, "b_ns": ns,
                                            "b_checkpoint_id": holder}):
                values.update(json.loads(held))
        if any(key not in values for key in entry.get("k") or ()):
            # A version no holder was named for (put beside, not after, the checkpoint
            # that wrote it): the namespace's rows are searched.
            for (held,) in ex.rows(ALL_VALUES, {"b_session_id": session_id, "b_ns": ns}):
                for key, value in json.loads(held).items():
                    values.setdefault(key, value)
        return CheckpointRow(session_id, thread_id, str(ns), str(checkpoint_id),
                             parent_id, entry, json.loads(writes) if writes else [],
                             values)
