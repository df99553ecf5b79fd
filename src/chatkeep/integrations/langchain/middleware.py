"""``ChatkeepMiddleware``: LangChain v1 agent middleware that sends chatkeep's history.

Every model call of a ``create_agent`` agent goes out with the session's budgeted,
redacted history instead of the thread's whole message list; the thread's state is
never touched (no ``RemoveMessage``: the state grows as LangGraph's own, the
checkpointer keeps it whole). What the thread adds (the user's input, the model's
answers, tool results) is recorded in the session named by the thread's
``thread_id``, so chatkeep holds the conversation, bills it and folds it into its
summary, and a tool call always goes out with every one of its results.

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

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime

from chatkeep.app import Chatkeep
from chatkeep.errors import ConfigError, InvalidArgument, SessionNotFound
from chatkeep.history.compressor import MEMORY_HEADER
from chatkeep.integrations.context import named_party
from chatkeep.integrations.langchain.keeps import check_keep, is_async_keep
from chatkeep.integrations.langchain.messages import (
    LANGCHAIN_ID,
    drafts_of,
    from_history,
    pending,
)
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession

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

__all__ = ["ChatkeepMiddleware", "Thread"]


@dataclass(frozen=True, slots=True)
class Thread:
    """Where a run's conversation is kept: the session of ``tenant`` named ``key`` (the
    LangGraph ``thread_id``), opened for ``actor`` and ``subject``."""

    key: str
    tenant: Ref
    actor: Ref | None = None
    subject: Ref | None = None


@dataclass(frozen=True, slots=True)
class _Options:
    title: str | None
    anonymize_pii: bool


@dataclass(frozen=True, slots=True)
class _Prepared:
    system: SystemMessage | None
    messages: list[AnyMessage]


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
    """

    def __init__(self, keep: Chatkeep | AsyncChatkeep, *, tenant: Party = None,
                 actor: Party = None, subject: Party = None, title: str | None = None,
                 anonymize_pii: bool = True) -> None:
        self.keep = check_keep(keep, "ChatkeepMiddleware")
        self.tenant, self.actor, self.subject = tenant, actor, subject
        self._options = _Options(title, anonymize_pii)
        self.tools = []
        self._last: OrderedDict[tuple[Ref, str], str | None] = OrderedDict()

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
        """Record what the thread added, then call the model with the session's history."""
        prepared = prepare(self._sync(), self.thread(request.runtime), self._options,
                           request.state["messages"], request.system_message)
        return handler(request.override(messages=prepared.messages,
                                        system_message=prepared.system))

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        """Record the model's answer (the state is left as it is)."""
        thread = self.thread(runtime)
        record(self._sync(), thread, self._options, state["messages"])
        self._recorded(thread, state["messages"])

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        """Record what the run ended with (a ``return_direct`` tool's result); nothing to
        do when it ended with the answer ``after_model`` just recorded."""
        thread = self.thread(runtime)
        if not self._ends_recorded(thread, state["messages"]):
            record(self._sync(), thread, self._options, state["messages"])

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
        prepared = await self._run(prepare, self.thread(request.runtime), self._options,
                                   request.state["messages"], request.system_message)
        return await handler(request.override(messages=prepared.messages,
                                              system_message=prepared.system))

    async def aafter_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        """Async twin of :meth:`after_model`."""
        thread = self.thread(runtime)
        await self._run(record, thread, self._options, state["messages"])
        self._recorded(thread, state["messages"])

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        """Async twin of :meth:`after_agent`."""
        thread = self.thread(runtime)
        if not self._ends_recorded(thread, state["messages"]):
            await self._run(record, thread, self._options, state["messages"])

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
           state: Sequence[BaseMessage]) -> ChatSession:
    """Record the messages of ``state`` the session does not hold yet, in one
    transaction; returns the session."""
    session = open_session(core, thread, options)
    count, repository = session.message_count, session.repository
    recent = repository.marks_after(session.id, LANGCHAIN_ID, max(0, count - TAIL)) \
        if count else None
    new = pending(state, recent,
                  lambda ids: repository.stored_marks(session.id, LANGCHAIN_ID, ids))
    drafts = drafts_of(new, state, lambda payload: core.privacy.restore_payload(session,
                                                                                payload))
    if drafts:
        session.add_drafts(drafts)
    return session


def prepare(core: Chatkeep, thread: Thread, options: _Options,
            state: Sequence[BaseMessage], system: SystemMessage | None) -> _Prepared:
    """Record what the thread added, then build the history the model gets."""
    session = record(core, thread, options, state)
    prompt = str(system.text) if system is not None else ""
    history = list(core.compressor.build_history(session, prompt))
    if system is None:
        return _Prepared(None, from_history(history))
    first = history[0] if history else None
    content = first.get("content") if first is not None and first["role"] == "system" \
        else None
    if not isinstance(content, str) or not (prompt or content.startswith(MEMORY_HEADER)):
        # No system text went out (an empty prompt, no memories): the request's own, scrubbed.
        return _Prepared(_scrubbed(core, session, system, None), from_history(history))
    return _Prepared(_scrubbed(core, session, system, content), from_history(history[1:]))


def _scrubbed(core: Chatkeep, session: ChatSession, system: SystemMessage,
              sent: str | None) -> SystemMessage:
    """The request's system message as it may leave. Text content: the history's system
    text (``sent``, redacted, memories appended). Content blocks (cache control and the
    like) keep their shape, each string through the session's egress, and recalled
    memories follow as a text block of their own."""
    if isinstance(system.content, str):
        return system.model_copy(update={"content": sent if sent is not None
                                         else core.privacy.scrub(session, system.content)})
    blocks: list[Any] = list(core.privacy.scrub(session, list(system.content)))
    if sent is not None and MEMORY_HEADER in sent:
        blocks.append({"type": "text", "text": sent[sent.index(MEMORY_HEADER):]})
    return system.model_copy(update={"content": blocks})


def _party(runtime: Runtime[Any], name: str) -> Ref | None:
    """The party a run's context names, if any (:func:`named_party`)."""
    return named_party(getattr(runtime, "context", None), name)
