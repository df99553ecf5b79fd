"""``ChatkeepConversationStore``: Pydantic AI's ``ConversationStore`` over chatkeep sessions.

A conversation is the tenant's session named by its ``conversation_id`` (created on
first save, one per tenant and id, race-safe); each message Pydantic AI saves is stored
as chatkeep messages whose text chatkeep can budget, summarize and redact, with the exact
message kept beside them, so a conversation loads exactly as it was saved. Each model
response's usage is billed to the session's tenant as it is stored.

``scope`` is the tenant: ``"organization:7"`` (or a ``Ref``) in ``load``, ``save``,
``list_conversations`` and ``delete``, or the store's ``tenant`` when a call names none.
A conversation id of another tenant is not found; the same id in two tenants names two
conversations.

Chatkeep's log is append-only, so the store keeps a conversation's one history:
``branch`` to an earlier message, a save of a rewritten history and ``fork`` are refused
with ``InvalidArgument`` (nothing is written). ``delete`` removes the record and the
conversation's messages, bytes and all, as Pydantic AI's own stores do
(``privacy.keep_retracted_text`` keeps them retracted instead, for audit: never replayed,
summarized or distilled again).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

import pydantic
import pydantic_core
from pydantic_ai import DeferredToolRequests
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.result import StreamedRunResult
from pydantic_ai.run import AgentRun, AgentRunResultEvent

from chatkeep.aio import AsyncChatkeep
from chatkeep.app import Chatkeep
from chatkeep.errors import ConfigError, InvalidArgument
from chatkeep.integrations.pydantic_ai import _quota, _request, _storage
from chatkeep.integrations.pydantic_ai._convert import OUTPUT_TOOLS
from chatkeep.integrations.pydantic_ai._request import PreparedRequest
from chatkeep.integrations.pydantic_ai._storage import BRANCHING, Place
from chatkeep.privacy.streaming import StreamRestorer
from chatkeep.quotas import Reservation
from chatkeep.refs import Ref, require_ref
from chatkeep.sessions import ChatSession

T = TypeVar("T")
Scope = str | Ref | None
#: What the streaming APIs hand an application, finished, to save.
Streamed = StreamedRunResult[Any, Any] | AgentRun[Any, Any] | AgentRunResultEvent[Any]

#: Conversation heads remembered with their session (what ``read_history`` is handed).
_HEADS_KEPT = 4096
#: The stored messages ``for_run`` loads: the newest request and response, what a run
#: continues from (a response whose calls wait for deferred results included).
RUN_WINDOW = 2

__all__ = ["ChatkeepConversationStore"]


class ChatkeepConversationStore(ConversationStore):
    """Pydantic AI conversations kept in chatkeep sessions.

    ``keep``: an ``AsyncChatkeep`` (every call awaited on its bridge, for servers) or a
    ``Chatkeep`` (its calls run in the caller's thread: scripts, ``run_sync``).
    ``tenant``: the tenant of calls that name no ``scope``; without it every call must
    name one. ``actor``, ``subject``, ``title`` and ``anonymize_pii`` apply to the
    sessions this store creates (a conversation id opened before with another actor or
    subject is ``SessionKeyConflict``). ``output_tools``: output tools whose arguments are
    the model's answer, recorded as its text too (so closed turns keep it).
    """

    def __init__(self, keep: Chatkeep | AsyncChatkeep, *, tenant: Ref | None = None,
                 actor: Ref | None = None, subject: Ref | None = None,
                 title: str | None = None, anonymize_pii: bool = True,
                 output_tools: Collection[str] = OUTPUT_TOOLS) -> None:
        if not isinstance(keep, Chatkeep | AsyncChatkeep):
            raise ConfigError("ChatkeepConversationStore needs a Chatkeep or an "
                              f"AsyncChatkeep, got {type(keep).__name__}")
        for name, ref in (("tenant", tenant), ("actor", actor), ("subject", subject)):
            if ref is not None:
                require_ref(ref, name)
        self.keep = keep
        self.tenant = tenant
        self.actor, self.subject = actor, subject
        self.title, self.anonymize_pii = title, anonymize_pii
        self.output_tools = frozenset(output_tools)
        self._scope: ContextVar[Ref | None] = ContextVar(f"chatkeep_pydantic_ai_{id(self)}",
                                                         default=None)
        self._heads: OrderedDict[str, str] = OrderedDict()
        self._handed: dict[int, tuple[weakref.ref[Any], str | None]] = {}
        #: The revision of each conversation handed out, by its newest message (a
        #: ``run_stream`` result forgets the revision of the conversation it continued).
        self._revisions: dict[int, tuple[weakref.ref[Any], str]] = {}

    # -- the tenant ------------------------------------------------------------------------

    def tenant_for(self, scope: Scope = None) -> Ref:
        """The tenant a call works in: ``scope`` (``"type:id"`` or a ``Ref``), else the
        one the running call named, else the store's own (``InvalidArgument`` if none)."""
        if scope is not None:
            return Ref.coerce(scope)
        named = self._scope.get()
        if named is not None:
            return named
        if self.tenant is None:
            raise InvalidArgument("no tenant: pass scope='type:id' (the tenant) to the call, "
                                  "or tenant= to ChatkeepConversationStore")
        return self.tenant

    def place(self, tenant: Ref) -> Place:
        """Where ``tenant``'s conversations are kept, and what new sessions get."""
        return Place(tenant, self.actor, self.subject, self.title, self.anonymize_pii)

    @contextmanager
    def _scoped(self, scope: Scope) -> Iterator[str | None]:
        """Run the block in ``scope``'s tenant; yields the scope as stored records carry
        it (``None`` when the call named none)."""
        if scope is None:
            yield None
            return
        tenant = Ref.coerce(scope)
        token = self._scope.set(tenant)
        try:
            yield str(tenant)
        finally:
            self._scope.reset(token)

    # -- the public calls, in the tenant their scope names ----------------------------------

    async def load(self, conversation_id: str, *, limit: int | None = None,
                   scope: Scope = None) -> Conversation | None:
        """``ConversationStore.load``; ``scope`` is the tenant."""
        with self._scoped(scope) as named:
            loaded = await super().load(conversation_id, limit=limit, scope=named)
        if loaded is not None and loaded.messages and loaded.revision is not None:
            newest, revisions = loaded.messages[-1], self._revisions
            key = id(newest)
            revisions[key] = (weakref.ref(newest, lambda _: revisions.pop(key, None)),
                              loaded.revision)
        return loaded

    async def for_run(self, conversation_id: str, *, scope: Scope = None) -> Conversation:
        """The conversation to pass to a run that has the :class:`ChatkeepHistory`
        capability: its record (revision, usage, deferred tool requests) and only its
        newest request and response (``load(id, limit=RUN_WINDOW)``), since the capability
        sends chatkeep's budgeted history in their place; a new, unsaved ``Conversation``
        of that id when the store has none. Without the capability a run would see only
        those messages: load the whole conversation with ``load`` there."""
        loaded = await self.load(conversation_id, limit=RUN_WINDOW, scope=scope)
        return loaded if loaded is not None else Conversation(conversation_id=conversation_id)

    async def load_entries(self, conversation_id: str, *, limit: int | None = None,
                           scope: Scope = None) -> list[ConversationEntry] | None:
        """``ConversationStore.load_entries``; ``scope`` is the tenant."""
        with self._scoped(scope) as named:
            return await super().load_entries(conversation_id, limit=limit, scope=named)

    async def save(self, conversation: Conversation | AgentRunResult[Any] | Streamed, *,
                   scope: Scope = None) -> list[ConversationEntry]:
        """``ConversationStore.save``; ``scope`` is the tenant. Only a save that extends
        the stored conversation from its newest message is taken. Besides a
        ``Conversation`` and an ``AgentRunResult`` it takes what the streaming APIs give:
        a finished ``run_stream`` result, an ``iter`` run, the ``AgentRunResultEvent``
        that ends ``run_stream_events`` (an unfinished one is ``InvalidArgument``)."""
        with self._scoped(scope) as named:
            return await super().save(self._settled(conversation), scope=named)

    async def branch(self, conversation_id: str, *, at: int | None = None,
                     from_entry: str | None = None, expected_revision: str | None,
                     scope: Scope = None) -> Conversation:
        """``ConversationStore.branch``: only a branch that keeps every message is taken
        (chatkeep's log is append-only); any other is ``InvalidArgument``."""
        with self._scoped(scope) as named:
            return await super().branch(conversation_id, at=at, from_entry=from_entry,
                                        expected_revision=expected_revision, scope=named)

    async def fork(self, conversation_id: str, *, at: int | None = None,
                   from_entry: str | None = None, new_conversation_id: str | None = None,
                   scope: Scope = None, source_scope: Scope = None) -> Conversation:
        """Refused: a fork shares another conversation's messages, and a chatkeep session
        holds its own (``InvalidArgument``)."""
        raise InvalidArgument(BRANCHING)

    async def list_conversations(self, *, scope: Scope = None,
                                 limit: int | None = None) -> list[ConversationRecord]:
        """``ConversationStore.list_conversations``: the tenant's conversations."""
        with self._scoped(scope) as named:
            return await super().list_conversations(scope=named, limit=limit)

    async def delete(self, conversation_id: str, *, scope: Scope = None) -> None:
        """``ConversationStore.delete``: the record goes, and so do the conversation's
        messages (their bytes, the summary and the vault; ``privacy.keep_retracted_text``
        retracts them instead, for audit)."""
        with self._scoped(scope) as named:
            await super().delete(conversation_id, scope=named)

    # -- the storage primitives -----------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation's record in the current tenant, or ``None``."""
        record, session_id = await self._run(_storage.read_record,
                                             self.place(self.tenant_for()), conversation_id)
        if record is not None and record.head_id is not None and session_id is not None:
            self._remember_head(record.head_id, session_id)
        return record

    async def read_records(self, *, scope: str | None = None,
                           limit: int | None = None) -> Sequence[ConversationRecord]:
        """The tenant's records, most recently saved first."""
        return await self._run(_storage.read_records, self.tenant_for(scope), limit)

    async def write_record(self, record: ConversationRecord, *,
                           new_entries: Sequence[ConversationEntry] = (),
                           expected_revision: str | None) -> None:
        """Store ``record`` and its new entries in one transaction, if the stored revision
        is ``expected_revision`` (``ConversationConflict`` otherwise)."""
        tenant = self.tenant_for()
        session_id = await self._run(_storage.write_record, self.place(tenant), record,
                                     list(new_entries), expected_revision, self.output_tools)
        if record.head_id is not None:
            self._remember_head(record.head_id, session_id)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete the record (if its revision is ``expected_revision``) and the
        conversation's messages; the session stays, with its billed usage."""
        await self._run(_storage.delete_record, self.tenant_for(), conversation_id,
                        expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """One entry of the current tenant's conversations (``SessionNotFound``, a
        ``LookupError``, if none holds it). Histories are read whole by ``read_history``."""
        _, entry = await self._run(_storage.find_entry, self.tenant_for(), entry_id)
        self._remember(entry.message)
        return entry

    async def read_history(self, head_id: str | None, *,
                           limit: int | None = None) -> list[ConversationEntry]:
        """The entries up to ``head_id`` (the last ``limit`` of them), read from its
        session's newest messages in one query (a longer window only when needed)."""
        if head_id is None:
            return []
        tenant = self.tenant_for()
        session_id = self._heads.get(head_id)
        if session_id is None:
            session_id, _ = await self._run(_storage.find_entry, tenant, head_id)
        entries = await self._run(_storage.read_log, tenant, session_id, head_id, limit)
        for entry in entries:
            self._remember(entry.message)
        return entries

    # -- what the history capability asks ---------------------------------------------------

    def holds(self, message: ModelMessage) -> bool:
        """Whether ``message`` is one this store loaded (chatkeep's history stands for it
        in a request), or a copy of one (a run resumed with deferred tool results copies
        the response it resumes); a run's own messages are not."""
        held = self._handed.get(id(message))
        if held is not None and held[0]() is message:
            return True
        conversation = message.conversation_id
        return any(conversation == kept_in and (kept := ref()) is not None and kept == message
                   for ref, kept_in in self._handed.copy().values())

    async def prepare_request(self, tenant: Ref, conversation_id: str,
                              own: Sequence[ModelMessage], instructions: Sequence[str],
                              files: Mapping[str, str] | None = None) -> PreparedRequest:
        """The request for a run of ``conversation_id``: chatkeep's budgeted history of the
        stored conversation, then ``own``, with ``instructions``, all through the
        session's egress (see :class:`ChatkeepHistory`). ``files``: the text of the
        text-like files it names by URL (``PreparedRequest.unread`` lists those missing)."""
        return await self._run(_prepare, self.place(tenant), conversation_id, list(own),
                               list(instructions), dict(files or {}))

    # -- the tenant's quota (issue 33) ------------------------------------------------------

    async def reserve(self, tenant: Ref, conversation_id: str, request_tokens: int,
                      tools: str = "", ceiling: int | None = None) -> Reservation:
        """Reserve one model request of ``conversation_id`` on the tenant's quota (and its
        actor's): ``request_tokens`` (``PreparedRequest.request_tokens``), the count of
        ``tools`` (their definitions as sent) and ``ceiling`` (``None``:
        ``quotas.output_ceiling``). ``QuotaExceeded`` when it does not fit: send nothing."""
        return await self._run(_quota.reserve, self.place(tenant), conversation_id,
                               request_tokens, tools, ceiling)

    async def settle(self, held: Reservation, used: int | None) -> None:
        """Settle ``held`` at ``used`` tokens (``None``: its reserved amount counts)."""
        if held.id is not None:
            await self._run(_quota.settle, held, used)

    async def release(self, held: Reservation) -> None:
        """Give ``held`` back: its request failed before a response."""
        if held.id is not None:
            await self._run(_quota.release, held)

    # -- the user's own values back ---------------------------------------------------------

    async def restore(self, conversation_id: str, value: T, *, scope: Scope = None) -> T:
        """``value`` (a run's output: text, or a structured value) with the real values in
        place of the conversation's placeholders, for the user to see. Only while the
        conversation's session redacts; unknown or mangled placeholders stay as written,
        and ``DeferredToolRequests`` (calls waiting for a result) as the model wrote them."""
        return await self._run(_restore, self.tenant_for(scope), conversation_id, value)

    async def restorer(self, conversation_id: str, *, scope: Scope = None) -> StreamRestorer:
        """A :class:`~chatkeep.privacy.streaming.StreamRestorer` for streamed output of the
        conversation (``feed`` each text delta, ``flush`` at the end): a placeholder split
        across deltas comes back whole. It holds the mapping as it is now: make one per
        model response."""
        return StreamRestorer(await self.restoring(conversation_id, scope=scope))

    async def may_redact(self, conversation_id: str, *, scope: Scope = None) -> bool:
        """Whether the conversation's requests leave redacted: its session's switches, or
        (no session yet) the switches it would be created with."""
        return await self._run(_may_redact, self.tenant_for(scope), conversation_id,
                               self.anonymize_pii)

    async def restoring(self, conversation_id: str, *,
                        scope: Scope = None) -> Callable[[str], str]:
        """A whole-text restore for the conversation, bound to its mapping as it is now
        (no I/O when called: usable inside an event stream)."""
        return await self._run(_restoring, self.tenant_for(scope), conversation_id)

    # -- plumbing ------------------------------------------------------------------------

    def _settled(self, run: Any) -> Conversation | AgentRunResult[Any]:
        """What to save for ``run`` (see :func:`settled`). A ``run_stream`` result's
        conversation lacks the revision of the one it continued, and which of its messages
        were stored: both are known from the newest message this store handed out with
        that conversation."""
        found: Conversation | AgentRunResult[Any] = settled(run)
        if not isinstance(run, StreamedRunResult) or not isinstance(found, AgentRunResult):
            return found
        conversation = found.conversation
        if conversation.revision is None:
            for index in range(len(conversation.messages) - 1, -1, -1):
                message = conversation.messages[index]
                held = self._revisions.get(id(message))
                if held is not None and held[0]() is message:
                    conversation.revision, conversation.new_message_index = held[1], index + 1
                    break
        return conversation

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(core, *args)``: on the async keep's bridge, or in this thread."""
        if isinstance(self.keep, AsyncChatkeep):
            core = await self.keep.core()
            return await self.keep.run(fn, core, *args)
        return fn(self.keep, *args)

    def _remember_head(self, head_id: str, session_id: str) -> None:
        self._heads[head_id] = session_id
        self._heads.move_to_end(head_id)
        while len(self._heads) > _HEADS_KEPT:
            self._heads.popitem(last=False)

    def _remember(self, message: ModelMessage) -> None:
        key = id(message)
        handed = self._handed
        handed[key] = (weakref.ref(message, lambda _: handed.pop(key, None)),
                       message.conversation_id)


def settled(run: Any) -> Any:
    """The ``Conversation`` or ``AgentRunResult`` a streaming API's object stands for
    (``InvalidArgument`` for one that has not finished, or anything else)."""
    if isinstance(run, Conversation | AgentRunResult):
        return run
    if isinstance(run, StreamedRunResult):
        try:
            return run.result
        except UserError as exc:
            raise InvalidArgument(f"this run_stream result cannot be saved yet: {exc}") from exc
    if isinstance(run, AgentRun):
        if run.result is None:
            raise InvalidArgument("this agent.iter run has not finished: save it after the "
                                  "last node (its result is still None)")
        return run.result
    if isinstance(run, AgentRunResultEvent):
        return run.result
    raise InvalidArgument(f"cannot save a {type(run).__name__}: pass a Conversation, an "
                          "AgentRunResult, a finished run_stream result or agent.iter run, "
                          "or the AgentRunResultEvent of run_stream_events")


def _prepare(core: Chatkeep, place: Place, key: str, own: list[ModelMessage],
             instructions: list[str], files: dict[str, str]) -> PreparedRequest:
    session = _storage.open_session(core, place, key)
    _storage.finish_delete(core, session)
    return _request.prepare(core, session, own, instructions, files)


def _redacting(core: Chatkeep, tenant: Ref, key: str) -> ChatSession | None:
    session = _storage.find_session(core, tenant, key)
    return session if session is not None and core.privacy.redacts(session) else None


def _may_redact(core: Chatkeep, tenant: Ref, key: str, anonymize_pii: bool) -> bool:
    session = _storage.find_session(core, tenant, key)
    if session is None:
        return anonymize_pii and core.config.privacy.anonymize_pii
    return core.privacy.redacts(session)


def _restore(core: Chatkeep, tenant: Ref, key: str, value: T) -> T:
    session = _redacting(core, tenant, key)
    if session is None or value is None or isinstance(value, DeferredToolRequests):
        return value  # a paused run's calls keep the arguments the model wrote
    if isinstance(value, str):
        restored: Any = core.privacy.restore(session, value)
        return cast(T, restored)
    data = pydantic_core.to_jsonable_python(value, fallback=str)
    back = core.privacy.restore_payload(session, data)
    if back == data:
        return value
    if isinstance(value, dict | list):
        return cast(T, back)
    return pydantic.TypeAdapter(type(value)).validate_python(back)


def _restoring(core: Chatkeep, tenant: Ref, key: str) -> Callable[[str], str]:
    session = _redacting(core, tenant, key)
    if session is None:
        return _unchanged
    # The mapping is read here, on the keep's own thread or bridge: the function then runs
    # anywhere (an event loop included) without reading the store again.
    vault = core.privacy.vault(session)
    redactor = core.privacy.redactor
    return lambda text: redactor.restore(text, vault)


def _unchanged(text: str) -> str:
    return text
