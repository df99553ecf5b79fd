"""``ChatkeepMiddleware``: LangChain v1 agent middleware that sends chatkeep's history.

Every model call of a ``create_agent`` agent goes out with the session's budgeted,
redacted history instead of the thread's whole message list. What the thread adds (the
user's input, the model's answers, tool results) is recorded in the session named by the
thread's ``thread_id``, so chatkeep holds the conversation, bills it and folds it into its
summary, and a tool call always goes out with every one of its results. Once recorded
and folded, a message leaves the thread's state (``RemoveMessage``, see :mod:`.trim`):
a checkpointer of the user's own writes a bounded state, not the whole thread
(``trim_state=False`` keeps LangGraph's whole state).

    keep = Chatkeep("sqlite:///chat.db")
    agent = create_agent(model, tools, middleware=[ChatkeepMiddleware(keep)],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [{"role": "user", "content": "Hi"}]},
                 {"configurable": {"thread_id": "support-42"}},
                 context={"tenant": "organization:7", "actor": "user:3"})

``Chatkeep`` serves ``invoke`` / ``stream``; ``AsyncChatkeep`` serves ``ainvoke`` /
``astream`` (each through the same functions: the async keep runs them on its bridge).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableBinding, RunnableConfig
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import Command

from chatkeep.app import Chatkeep
from chatkeep.errors import ConfigError, ForeignThreadState, InvalidArgument, SessionNotFound
from chatkeep.history.compressor import MEMORY_HEADER
from chatkeep.integrations.context import named_party
from chatkeep.integrations.langchain.keeps import check_keep, is_async_keep
from chatkeep.integrations.langchain.messages import (
    LANGCHAIN_ID,
    continues,
    drafts_of,
    from_history,
    pending,
)
from chatkeep.integrations.langchain.tracing_guard import refuse_traced_content
from chatkeep.integrations.langchain.trim import folded_ids, settled
from chatkeep.messages import Message
from chatkeep.observability import framework_calls, tracing
from chatkeep.observability.framework_calls import CallRecord
from chatkeep.privacy.egress import map_strings
from chatkeep.privacy.streaming import StreamRestorer
from chatkeep.quotas import Reservation
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession, prepare_batch
from chatkeep.validation import check_bool

if TYPE_CHECKING:
    from chatkeep.aio import AsyncChatkeep

log = logging.getLogger("chatkeep.integrations.langchain")

#: Stored messages read to find where a thread's state and its session meet.
TAIL = 32
#: Threads whose last recorded message the middleware remembers (an LRU).
THREADS_KEPT = 4096

#: A party (tenant, actor, subject): a fixed ``Ref``, or read from each run's runtime.
Party = Ref | Callable[[Runtime[Any]], Ref | None] | None
ModelResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]
T = TypeVar("T")
M = TypeVar("M", bound=BaseMessage)

__all__ = ["ChatkeepMiddleware", "Thread"]


@dataclass(frozen=True, slots=True)
class Thread:
    """Where a run's conversation is kept: the session of ``tenant`` named ``key`` (the
    LangGraph ``thread_id``), opened for ``actor`` and ``subject``."""

    key: str
    tenant: Ref
    actor: Ref | None = None
    subject: Ref | None = None


class _Recorded:
    """What this middleware last recorded per session: the LangChain ids of the state it
    recorded, its newest one and the session's last seq after it. While the session's
    last seq is still that (no one appended or deleted since) and a state continues the
    recorded one (:func:`.messages.continues`), those ids anchor its recording without
    asking the store for the session's newest ids (an LRU, thread-safe; the insert still
    skips an id stored meanwhile)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: OrderedDict[str, tuple[int, frozenset[str], str | None]] = (
            OrderedDict())

    def anchors(self, session_id: str, last_seq: int,
                state: Sequence[BaseMessage]) -> set[str] | None:
        """The ids recorded last, if the session is as that recording left it: all of
        them when ``state`` continues that recording, none (ask the store by id) when it
        does not. ``None``: nothing is known of the session."""
        with self._lock:
            found = self._by_session.get(session_id)
        if found is None or found[0] != last_seq:
            return None
        return set(found[1]) if continues(state, found[1], found[2]) else set()

    def note(self, session_id: str, last_seq: int | None,
             state: Sequence[BaseMessage]) -> None:
        """``state`` is recorded and the session's last seq is ``last_seq`` (``None``:
        unknown, so nothing is remembered)."""
        with self._lock:
            if last_seq is None:
                self._by_session.pop(session_id, None)
                return
            ids = [m.id for m in state if m.id]
            self._by_session[session_id] = (last_seq, frozenset(ids),
                                            ids[-1] if ids else None)
            self._by_session.move_to_end(session_id)
            while len(self._by_session) > THREADS_KEPT:
                self._by_session.popitem(last=False)


@dataclass(frozen=True, slots=True)
class _Options:
    title: str | None
    anonymize_pii: bool
    restore: bool = True
    trim: bool = True
    recorded: _Recorded = dataclasses.field(default_factory=_Recorded)


@dataclass(frozen=True, slots=True)
class _Prepared:
    session: ChatSession
    system: SystemMessage | None
    messages: list[AnyMessage]
    tokens: int = 0
    """The budget's count of what goes out (``history.info.tokens``)."""
    redacting: bool = False
    """Whether the session redacts what goes out."""


class ChatkeepMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Agent middleware keeping a thread's conversation in chatkeep.

    ``keep``: a ``Chatkeep`` (for ``invoke`` / ``stream``) or an ``AsyncChatkeep`` (for
    ``ainvoke`` / ``astream``). ``tenant``, ``actor`` and ``subject`` are each a ``Ref``,
    a function of the run's ``Runtime`` returning one, or ``None``: then they are read
    from the run's context (``context={"tenant": ..., "actor": ..., "subject": ...}``, a
    mapping or an object with those attributes, or ``chatkeep_tenant`` and the like; a
    ``Ref`` or ``"type:id"`` text). The tenant is required; a context naming another
    tenant than the configured one finds nothing (``SessionNotFound``), another actor or
    subject is ``InvalidArgument``. ``title`` and
    ``anonymize_pii`` apply when a thread's session is created.

    On each model call the request's messages are replaced by the session's history
    (``build_history``: budget, summary, redaction), and its system message by the same
    text as it goes out (redacted, with recalled memories when configured). Put it last
    in ``middleware=[...]``, nearest the model, so what it sends is what the model gets.
    Each model call is reserved on the tenant's quota before it is sent (the history's
    and the tools' count plus the call's ``max_tokens``, else ``quotas.output_ceiling``;
    ``QuotaExceeded`` with the model not called), settled at the answer's
    ``usage_metadata`` and released when the call fails before its answer.

    ``trim_state`` (default on): after each model call, the messages chatkeep has recorded
    and folded into the summary leave the thread's state; it then holds the unfolded end
    of the conversation and the current turn (the open tool calls and their results, what
    an interrupt resumes), so its checkpoints stay as small at the thousandth turn as at
    the tenth. Off: the state grows as LangGraph's own.
    """

    def __init__(self, keep: Chatkeep | AsyncChatkeep, *, tenant: Party = None,
                 actor: Party = None, subject: Party = None, title: str | None = None,
                 anonymize_pii: bool = True, restore_output: bool = True,
                 trim_state: bool = True) -> None:
        self.keep = check_keep(keep, "ChatkeepMiddleware")
        self.tenant, self.actor, self.subject = tenant, actor, subject
        self._options = _Options(title, anonymize_pii,
                                 check_bool(restore_output, "restore_output"),
                                 check_bool(trim_state, "trim_state"))
        self.tools = []
        self._last: OrderedDict[tuple[Ref, str], str | None] = OrderedDict()
        refuse_traced_content(anonymize_pii and self.keep.config.privacy.anonymize_pii)

    # -- the thread ----------------------------------------------------------------------

    def thread(self, runtime: Runtime[Any]) -> Thread:
        """The session a run's messages go to: its ``thread_id`` and its parties."""
        info = getattr(runtime, "execution_info", None)
        key = getattr(info, "thread_id", None)
        if key is None:
            try:
                key = (get_config().get("configurable") or {}).get("thread_id")
            except RuntimeError:
                key = None
        return self._thread(key, runtime)

    def thread_for(self, config: RunnableConfig, context: Any = None) -> Thread:
        """The session a run with this ``config`` and ``context`` records into."""
        key = (config.get("configurable") or {}).get("thread_id")
        return self._thread(key, Runtime(context=context))

    def _thread(self, key: Any, runtime: Runtime[Any]) -> Thread:
        if key is None:
            raise InvalidArgument(
                "ChatkeepMiddleware keeps a conversation per LangGraph thread: run the agent "
                "with config={'configurable': {'thread_id': ...}} (a checkpointer is "
                "optional: chatkeep keeps the conversation)")
        routed = _party(runtime, "tenant")
        tenant = self._resolve(self.tenant, runtime)
        if tenant is None:
            tenant = routed
        elif routed is not None and routed != tenant:
            raise SessionNotFound(f"no thread {key!r} for tenant {routed}")
        if tenant is None:
            raise InvalidArgument("no tenant for this run: pass tenant= to ChatkeepMiddleware "
                                  "or context={'tenant': ...} to the run")
        return Thread(str(key), tenant, self._either(self.actor, runtime, "actor"),
                      self._either(self.subject, runtime, "subject"))

    @staticmethod
    def _resolve(party: Party, runtime: Runtime[Any]) -> Ref | None:
        value = party(runtime) if callable(party) else party
        return None if value is None else Ref.coerce(value)

    def _either(self, party: Party, runtime: Runtime[Any], name: str) -> Ref | None:
        """The configured party, else the context's; both, and different: refused."""
        configured, routed = self._resolve(party, runtime), _party(runtime, name)
        if configured is not None and routed is not None and configured != routed:
            raise InvalidArgument(f"the run context names {name} {routed}, and this "
                                  f"ChatkeepMiddleware is for {configured}")
        return configured if configured is not None else routed

    # -- sync: agent.invoke / stream -----------------------------------------------------

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
                        ) -> ModelResult:
        """Record what the thread added, then call the model with the session's history;
        its answer comes back with real values where it wrote placeholders, recorded, and
        with ``trim_state`` with the state update that removes what the session has
        recorded and folded (in the model's own step: no graph step of its own)."""
        core = self._sync()
        thread = self.thread(request.runtime)
        prepared = prepare(core, thread, self._options, request.state["messages"],
                           request.system_message)
        refuse_traced_content(prepared.redacting)
        held = reserve_call(core, prepared, _Call.of(request))
        try:
            with traced(prepared, request) as call:
                response = handler(request.override(messages=prepared.messages,
                                                    system_message=prepared.system))
                call.usage(*tokens_of(response))
        except BaseException:
            held.release()
            raise
        held.settle(usage_of(response))
        out, state = answered(request.state["messages"], restored_response(
            core, prepared.session, response) if self._options.restore else response)
        gone = record_and_trim(core, thread, self._options, state)
        self._recorded(thread, state)
        return with_removal(out, gone)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        """Record what the run ended with (a ``return_direct`` tool's result); nothing to
        do when it ended with the answer :meth:`wrap_model_call` just recorded."""
        thread = self.thread(runtime)
        if not self._ends_recorded(thread, state["messages"]):
            record(self._sync(), thread, self._options, state["messages"], check=True)

    def _sync(self) -> Chatkeep:
        if not isinstance(self.keep, Chatkeep):
            raise ConfigError("this ChatkeepMiddleware holds an AsyncChatkeep: run the agent "
                              "with ainvoke / astream, or give it a Chatkeep for invoke")
        return self.keep

    # -- async: agent.ainvoke / astream --------------------------------------------------

    async def awrap_model_call(
            self, request: ModelRequest[Any],
            handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        """Async twin of :meth:`wrap_model_call`."""
        thread = self.thread(request.runtime)
        prepared = await self._run(prepare, thread, self._options, request.state["messages"],
                                   request.system_message)
        refuse_traced_content(prepared.redacting)
        held = await self._run(reserve_call, prepared, _Call.of(request))
        try:
            with traced(prepared, request) as call:
                response = await handler(request.override(messages=prepared.messages,
                                                          system_message=prepared.system))
                call.usage(*tokens_of(response))
        except BaseException:
            await self._run(_release, held)
            raise
        await self._run(_settle, held, usage_of(response))
        result: ModelResult = response
        if self._options.restore:
            result = await self._run(restored_response, prepared.session, response)
        out, state = answered(request.state["messages"], result)
        gone = await self._run(record_and_trim, thread, self._options, state)
        self._recorded(thread, state)
        return with_removal(out, gone)

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        """Async twin of :meth:`after_agent`."""
        thread = self.thread(runtime)
        if not self._ends_recorded(thread, state["messages"]):
            await self._run(record, thread, self._options, state["messages"], True)

    # -- streamed output, with the user's values -------------------------------------------

    def restored(self, stream: Iterable[Any], config: RunnableConfig, *,
                 context: Any = None) -> Iterator[Any]:
        """``agent.stream(...)`` (the same ``config`` and ``context``) with real values
        where the model streamed placeholders: what the app shows its user. Message
        chunks (``stream_mode="messages"``, alone or among other modes) are restored per
        message, a placeholder split across chunks coming back whole (the held-back
        tail follows as one more chunk of that message); everything else passes as it
        is (the state's model answers are restored already)."""
        core = self._sync()
        thread = self.thread_for(config, context)
        streams = _Streams(lambda: core.privacy.restorer(_session_of(core, thread)))
        for item in stream:
            yield from streams.each(item)
        yield from streams.close()

    async def arestored(self, stream: AsyncIterable[Any], config: RunnableConfig, *,
                        context: Any = None) -> AsyncIterator[Any]:
        """Async twin of :meth:`restored` (around ``agent.astream``)."""
        if not is_async_keep(self.keep):
            raise ConfigError("this ChatkeepMiddleware holds a Chatkeep: use restored() "
                              "around agent.stream")
        keep, thread = self.keep, self.thread_for(config, context)
        core = await keep.core()
        streams = _Streams(lambda: core.privacy.restorer(_session_of(core, thread)))
        async for item in stream:
            for out in await keep.run(lambda it: list(streams.each(it)), item):
                yield out
        for out in await keep.run(lambda: list(streams.close())):
            yield out

    # -- what after_model last recorded, per thread ----------------------------------------

    def _recorded(self, thread: Thread, state: Sequence[BaseMessage]) -> None:
        """Note the state's newest message as recorded (for this run's ``after_agent``)."""
        key = (thread.tenant, thread.key)
        self._last[key] = state[-1].id if state else None
        self._last.move_to_end(key)
        while len(self._last) > THREADS_KEPT:
            self._last.popitem(last=False)

    def _ends_recorded(self, thread: Thread, state: Sequence[BaseMessage]) -> bool:
        """Whether the state ends with the message ``after_model`` just recorded."""
        newest = state[-1].id if state else None
        return newest is not None and self._last.get((thread.tenant, thread.key)) == newest

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if not is_async_keep(self.keep):
            raise ConfigError("this ChatkeepMiddleware holds a Chatkeep: run the agent with "
                              "invoke / stream, or give it an AsyncChatkeep for ainvoke")
        core = await self.keep.core()
        return await self.keep.run(fn, core, *args)


# -- the flow, over the sync core (the async keep runs it on its bridge) -----------------


def open_session(core: Chatkeep, thread: Thread, options: _Options) -> ChatSession:
    """The thread's session (created on first use, race-safe, unique per tenant)."""
    return core.sessions.open(thread.key, thread.tenant, thread.actor, thread.subject,
                              title=options.title, anonymize_pii=options.anonymize_pii)


def record(core: Chatkeep, thread: Thread, options: _Options,
           state: Sequence[BaseMessage], check: bool = False) -> ChatSession:
    """Record the messages of ``state`` the session does not hold yet, in one
    transaction, each LangChain id once however many runs record it at the same time;
    returns the session. ``check``: first refuse a state whose messages another
    tenant's session of the same key recorded (:func:`_refuse_foreign`), asked when the
    new messages are more than tool results (a run's input, or a state the session never
    saw: a tool result whose call is not new answers a call this session recorded)."""
    session = open_session(core, thread, options)
    count, repository = session.message_count, session.repository
    recent: set[str] | None = None
    if count:
        recent = options.recorded.anchors(session.id, count, state)
        if recent is None:
            recent = repository.marks_after(session.id, LANGCHAIN_ID, max(0, count - TAIL))
    new = pending(state, recent,
                  lambda ids: repository.stored_marks(session.id, LANGCHAIN_ID, ids))
    if check and not all(isinstance(m, ToolMessage) for m in new):
        _refuse_foreign(core, session, thread, new)
    appended = _append(core, session, new, state)
    # What the session now holds: the state, its newest messages the session's newest.
    # A recording that appended nothing leaves that unknown: the session's newest may be
    # another run's, stored after what this state holds.
    options.recorded.note(session.id, appended[-1].seq if appended else None, state)
    return session


def record_and_trim(core: Chatkeep, thread: Thread, options: _Options,
                    state: Sequence[BaseMessage]) -> list[str]:
    """:func:`record` ``state``, then the ids of its messages that may leave it (with
    ``options.trim``): recorded and folded into the session's summary, before the
    current turn (:func:`.trim.folded_ids`). No fold yet, or nothing before the current
    turn (a run with no checkpointer, whose state is its own input): nothing is asked."""
    session = record(core, thread, options, state)
    watermark = session.summary_watermark
    if not options.trim or not watermark or not settled(state):
        return []
    repository = session.repository
    unfolded = repository.marks_after(session.id, LANGCHAIN_ID, watermark)
    return folded_ids(state, unfolded,
                      lambda ids: repository.stored_marks(session.id, LANGCHAIN_ID, ids))


def answered(state: Sequence[BaseMessage],
             result: ModelResult) -> tuple[ModelResult, list[BaseMessage]]:
    """The model call's result with an id on each of its messages (the ids the thread's
    state keeps them under: ``add_messages`` gives one to a message without), and the
    state as it is once they join it."""
    if isinstance(result, ExtendedModelResponse):
        inner, after = answered(state, result.model_response)
        assert isinstance(inner, ModelResponse)
        return dataclasses.replace(result, model_response=inner), after
    if isinstance(result, ModelResponse):
        messages = [_with_id(m) for m in result.result]
        return dataclasses.replace(result, result=messages), [*state, *messages]
    message = _with_id(result)
    return message, [*state, message]


def _with_id(message: M) -> M:
    return message if message.id else message.model_copy(update={"id": str(uuid.uuid4())})


def with_removal(result: ModelResult, ids: Sequence[str]) -> ModelResult:
    """``result`` with the state update removing ``ids`` from the thread's messages
    (``ExtendedModelResponse``'s command, applied with the answer in the model's step;
    none: ``result`` as it is). A result carrying a command of its own keeps it, and the
    thread is trimmed at its next model call."""
    if not ids:
        return result
    removal: Command[Any] = Command(update={"messages": [RemoveMessage(id=i) for i in ids]})
    if isinstance(result, ExtendedModelResponse):
        return result if result.command is not None else dataclasses.replace(
            result, command=removal)
    response = result if isinstance(result, ModelResponse) else ModelResponse(result=[result])
    return ExtendedModelResponse(model_response=response, command=removal)


def _append(core: Chatkeep, session: ChatSession, new: Sequence[BaseMessage],
            state: Sequence[BaseMessage]) -> list[Message]:
    """Record ``new`` (messages of ``state`` found new), each LangChain id once (the
    store skips an id any of the session's messages holds); returns what was appended."""
    repository = session.repository
    drafts = drafts_of(new, state,
                       lambda payload: core.privacy.restore_payload(session, payload),
                       lambda ids: repository.calls_taken(session.id, ids))
    if not drafts:
        return []
    return repository.append_unmarked(session.id, LANGCHAIN_ID,
                                      prepare_batch(drafts, core.counter))


def _refuse_foreign(core: Chatkeep, session: ChatSession, thread: Thread,
                    new: Sequence[BaseMessage]) -> None:
    """``ForeignThreadState`` when messages of ``new`` (what this session has not
    recorded) are recorded in another session of the same key: another tenant's thread,
    handed over by a checkpointer keyed by ``thread_id`` alone. Nothing of that state is
    recorded; what follows its last foreign message (this run's own input) is, so that
    the other tenant's next run on the shared state is refused in turn instead of
    recording it."""
    ids = [m.id for m in new if m.id]
    if not ids:
        return
    foreign = session.repository.marks_elsewhere(session.id, thread.key, LANGCHAIN_ID, ids)
    if not foreign:
        return
    last = max(i for i, m in enumerate(new) if m.id in foreign)
    own = list(new[last + 1:])
    _append(core, session, own, own)
    raise ForeignThreadState(
        f"the LangGraph state of thread {thread.key!r} holds messages another tenant's "
        f"session recorded ({len(foreign)} of them): a checkpointer keyed by thread_id "
        f"alone is shared by tenants. Nothing of it was recorded or sent. Scope thread_id "
        f"per tenant (e.g. f'{{tenant}}:{{ticket}}'), or give each tenant its own "
        f"checkpointer (or checkpoint namespace)")


def restored_response(core: Chatkeep, session: ChatSession,
                      response: ModelResult) -> ModelResult:
    """The model's answer with real values where it wrote the session's placeholders
    (text and tool-call arguments): what the graph state keeps, what the app shows and
    what its tools get. The provider's copy stays as it was sent: redacted."""
    if not core.privacy.redacts(session):
        return response
    if isinstance(response, AIMessage):
        return _restored_message(core, session, response)
    if isinstance(response, ModelResponse):
        return dataclasses.replace(response, result=[
            _restored_message(core, session, m) if isinstance(m, AIMessage) else m
            for m in response.result])
    return response


def _restored_message(core: Chatkeep, session: ChatSession, message: AIMessage) -> AIMessage:
    written = core.privacy.restore_payload(session, {
        "content": message.content, "args": [call["args"] for call in message.tool_calls]})
    calls = [{**call, "args": args} for call, args
             in zip(message.tool_calls, written["args"], strict=True)]
    return message.model_copy(update={"content": written["content"], "tool_calls": calls})


def _session_of(core: Chatkeep, thread: Thread) -> ChatSession:
    return core.sessions.by_key(thread.key, thread.tenant)


class _Streams:
    """The streamed message chunks of one run, restored per message (and per content
    block): a restorer for each (``make``: one for the thread's session, made when the
    message starts, so after the run created the session), flushed when its message
    ends, another one starts or the stream ends."""

    def __init__(self, make: Callable[[], StreamRestorer]) -> None:
        self._make = make
        self._open: dict[tuple[str | None, int], StreamRestorer] = {}
        self._last: tuple[AIMessageChunk, Any] | None = None

    def each(self, item: Any) -> Iterator[Any]:
        """What ``item`` (one stream item) becomes: itself, or its chunk restored (and a
        finished message's held-back tail before it)."""
        mode = None
        payload = item
        if isinstance(item, tuple) and len(item) == 2 and item[0] == "messages":
            mode, payload = item
        if not (isinstance(payload, tuple) and len(payload) == 2
                and isinstance(payload[0], AIMessage | AIMessageChunk)):
            yield item
            return
        message, meta = payload
        if self._last is not None and self._last[0].id != message.id:
            yield from self._wrap(mode, self._tail())
        if isinstance(message, AIMessageChunk):
            out = self._chunk(message)
            self._last = (message, meta)
            yield self._wrapped(mode, (out, meta))
            if message.chunk_position == "last":
                yield from self._wrap(mode, self._tail())
        else:
            yield self._wrapped(mode, (self._whole(message), meta))

    def close(self) -> Iterator[Any]:
        """The held-back tail of the message still open when the stream ended."""
        yield from self._wrap(None, self._tail())

    @staticmethod
    def _wrapped(mode: str | None, payload: Any) -> Any:
        return payload if mode is None else (mode, payload)

    def _wrap(self, mode: str | None, payloads: list[Any]) -> Iterator[Any]:
        for payload in payloads:
            yield self._wrapped(mode, payload)

    def _restorer_for(self, key: tuple[str | None, int]) -> StreamRestorer:
        found = self._open.get(key)
        if found is None:
            found = self._open[key] = self._make()
        return found

    def _chunk(self, chunk: AIMessageChunk) -> AIMessageChunk:
        content = chunk.content
        if isinstance(content, str):
            return chunk.model_copy(update={
                "content": self._restorer_for((chunk.id, 0)).feed(content)})
        blocks: list[Any] = []
        for index, block in enumerate(content):
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                key = (chunk.id, 1 + int(block.get("index", index)))
                block = {**block, "text": self._restorer_for(key).feed(block["text"])}
            blocks.append(block)
        return chunk.model_copy(update={"content": blocks})

    def _whole(self, message: AIMessage) -> AIMessage:
        restorer = self._make()

        def restore(text: str) -> str:
            return restorer.feed(text) + restorer.flush()

        return message.model_copy(update={"content": map_strings(message.content, restore)})

    def _tail(self) -> list[Any]:
        """The held-back text of the open message, as one more chunk of it."""
        last, self._last = self._last, None
        held = {key: r.flush() for key, r in self._open.items()}
        self._open.clear()
        if last is None or not any(held.values()):
            return []
        chunk, meta = last
        text = held.get((chunk.id, 0), "")
        blocks = [{"type": "text", "text": t, "index": key[1] - 1}
                  for key, t in held.items() if key[1] > 0 and t]
        content: Any = text if not blocks else ([{"type": "text", "text": text}] if text
                                                else []) + blocks
        return [(AIMessageChunk(content=content, id=chunk.id), meta)]


# -- the tenant's quota: every model call reserved, then settled (issue 33) ---------------

#: Fields naming a call's output ceiling, on the request's model settings or its model
#: (``ChatOpenAI.max_tokens``, ``ChatAnthropic.max_tokens``, Gemini's
#: ``max_output_tokens``, a binding's kwargs).
CEILING_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


@dataclass(frozen=True, slots=True)
class _Call:
    """What a model request reserves beside its messages: its tools' schemas (input the
    provider counts) and its output ceiling, when the request or its model names one."""

    tools: str
    ceiling: int | None

    @classmethod
    def of(cls, request: ModelRequest[Any]) -> _Call:
        """Read on the caller's side (no I/O): the bridge gets values."""
        return cls(_tools_text(request.tools),
                   output_ceiling(request.model, request.model_settings))


def _tools_text(tools: Sequence[Any]) -> str:
    """The tools' schemas as the provider is sent them (JSON), to count as input."""
    if not tools:
        return ""
    schemas = [tool if isinstance(tool, dict) else convert_to_openai_tool(tool)
               for tool in tools]
    return json.dumps(schemas, default=str)


def output_ceiling(model: Any, settings: Mapping[str, Any] | None = None) -> int | None:
    """The output ceiling a model call names: in the request's model settings, else on
    the model (a ``RunnableBinding``'s kwargs, then the bound model's fields); ``None``
    when none does (the caller then reserves ``quotas.output_ceiling``)."""
    sources: list[Mapping[str, Any]] = [settings or {}]
    while isinstance(model, RunnableBinding):
        sources.append(model.kwargs)
        model = model.bound
    for source in sources:
        found = _ceiling_in(source.get)
        if found is not None:
            return found
    return _ceiling_in(lambda name: getattr(model, name, None))


def _ceiling_in(read: Callable[[str], Any]) -> int | None:
    for name in CEILING_FIELDS:
        value = read(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def reserve_call(core: Chatkeep, prepared: _Prepared, call: _Call) -> Reservation:
    """Reserve one model call on the session tenant's quota (and its actor's): the
    budget's count of the history and the tools, plus the output ceiling (the call's, else
    ``quotas.output_ceiling``). ``QuotaExceeded`` when it does not fit: nothing is sent."""
    session = prepared.session
    ceiling = call.ceiling or core.config.quotas.output_ceiling
    tokens = prepared.tokens + (core.counter.count(call.tools) if call.tools else 0)
    quotas = core.quotas
    if quotas.remaining(session.tenant, actor=session.actor) is None:
        # No quota applies (a read, where a reservation is a write transaction): a
        # reservation holding nothing, as reserve() returns then.
        return Reservation(None, tokens + ceiling, session.tenant, session.actor,
                           purpose="chat", session_id=session.id, settler=None)
    return quotas.reserve(session.tenant, tokens + ceiling, actor=session.actor,
                          session_id=session.id, purpose="chat")


def usage_of(response: ModelResult) -> int | None:
    """The tokens a model call used, from its answer's ``usage_metadata`` (input plus
    output); ``None`` when the answer reports none (the reserved amount then counts)."""
    input_tokens, output_tokens = tokens_of(response)
    if input_tokens is None or output_tokens is None:
        return None
    return input_tokens + output_tokens


def traced(prepared: _Prepared, request: ModelRequest[Any]) -> AbstractContextManager[CallRecord]:
    """The ``chat {model}`` span the model call runs in (issue 34; nothing without
    OpenTelemetry): the bound model's name and provider, the session's tenant and id."""
    if not tracing.ON:
        return framework_calls.untraced()
    model: Any = request.model
    while isinstance(model, RunnableBinding):
        model = model.bound
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return framework_calls.model_call(
        prepared.session.tenant, prepared.session.id,
        model=str(name or type(model).__name__), provider=tracing.provider_of(model),
        framework="langchain", max_tokens=output_ceiling(request.model, request.model_settings))


def tokens_of(response: ModelResult) -> tuple[int | None, int | None]:
    """The input and output tokens a model call's answer reports (``None``: not
    reported)."""
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    messages = response.result if isinstance(response, ModelResponse) else [response]
    used = [m.usage_metadata for m in messages
            if isinstance(m, AIMessage) and m.usage_metadata is not None]
    if not used:
        return None, None
    return (sum(int(u.get("input_tokens") or 0) for u in used),
            sum(int(u.get("output_tokens") or 0) for u in used))


def _settle(core: Chatkeep, held: Reservation, used: int | None) -> None:
    held.settle(used)


def _release(core: Chatkeep, held: Reservation) -> None:
    held.release()


def prepare(core: Chatkeep, thread: Thread, options: _Options,
            state: Sequence[BaseMessage], system: SystemMessage | None) -> _Prepared:
    """Record what the thread added, then build the history the model gets."""
    session = record(core, thread, options, state, check=True)
    prompt = str(system.text) if system is not None else ""
    built = core.compressor.build_history(session, prompt)
    tokens, history = built.info.tokens, list(built)
    redacting = core.privacy.redacts(session)
    if system is None:
        return _Prepared(session, None, from_history(history), tokens, redacting)
    first = history[0] if history else None
    content = first.get("content") if first is not None and first["role"] == "system" \
        else None
    if not isinstance(content, str) or not (prompt or content.startswith(MEMORY_HEADER)):
        # No system text went out (an empty prompt, no memories): the request's own, scrubbed.
        return _Prepared(session, _scrubbed(core, session, system, None),
                         from_history(history), tokens, redacting)
    return _Prepared(session, _scrubbed(core, session, system, content),
                     from_history(history[1:]), tokens, redacting)


def _scrubbed(core: Chatkeep, session: ChatSession, system: SystemMessage,
              sent: str | None) -> SystemMessage:
    """The request's system message as it may leave. Text content: the history's system
    text (``sent``, redacted, memories appended). Content blocks (cache control and the
    like) keep their shape, each string through the session's egress, and recalled
    memories follow as a text block of their own."""
    if isinstance(system.content, str) and sent is not None:
        return system.model_copy(update={"content": sent})
    # The egress starts from the session's row: re-read it, so the placeholders the
    # history just stored are known (a value in a form no recognizer reads, a URL's
    # percent-encoding, is then still redacted).
    session.refresh()
    if isinstance(system.content, str):
        return system.model_copy(update={"content": core.privacy.scrub(session,
                                                                       system.content)})
    blocks: list[Any] = list(core.privacy.scrub(session, list(system.content)))
    if sent is not None and MEMORY_HEADER in sent:
        blocks.append({"type": "text", "text": sent[sent.index(MEMORY_HEADER):]})
    return system.model_copy(update={"content": blocks})


def _party(runtime: Runtime[Any], name: str) -> Ref | None:
    """The party a run's context names, if any (:func:`named_party`)."""
    return named_party(getattr(runtime, "context", None), name)
