"""``ChatkeepSession``: the OpenAI Agents SDK's ``Session`` protocol over chatkeep.

What the SDK's own sessions lack and chatkeep adds: an owner and tenant on every session
(another tenant's session id names another conversation), a history that stays inside a
token budget without ever splitting a tool call from its output, compaction into a
readable, billed summary, PII redaction, and a record that is never destroyed
(``pop_item`` and ``clear_session`` remove the bytes, as the SDK's own sessions do;
``privacy.keep_retracted_text`` keeps them retracted instead, for audit).

    keep = AsyncChatkeep("sqlite:///chat.db", model=openai.AsyncOpenAI())
    session = ChatkeepSession(keep, "support-4711", tenant=Ref("organization", 7),
                              actor=Ref("user", 3))
    result = await session.run(agent, "What's the weather in Paris?",
                               hooks=session.billing_hooks())

The ``session_id`` is the application's key for the conversation, as with the SDK's own
sessions: the tenant's conversation of that key is found, or created on the first write
(``keep.sessions.open``); two tenants' equal keys are two conversations.

``get_items`` returns what the SDK's sessions return: every live item as it was added,
oldest first (closed turns' tool calls, outputs and reasoning included), ``limit`` (or
``session_settings.limit``) the newest of them; once the history outgrows its budget,
the oldest are folded into the summary, which then leads the list.

``session.run`` / ``run_sync`` / ``run_streamed`` are ``Runner.run`` / ``run_sync`` /
``run_streamed`` with this session, plus a ``call_model_input_filter`` that sends every
request of the run through the session's egress: the new input (which the SDK sends
before the session stores it, read with the message it answers), tool outputs within the
run, and the instructions. On a redacting session they also feed input guardrails
scrubbed input, keep content out of traces, and put the user's own values back into
``final_output`` and streamed text (see :mod:`.runs`). A run on a redacting session that
does not go through them is refused before anything is sent (``get_items`` raises
``PrivacyError``): there is no way to forget the filter.

The class is structural (it does not subclass the SDK's ``SessionABC``); the SDK is
imported when its settings, a run, the filter or :meth:`ChatkeepSession.billing_hooks`
need it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from chatkeep import switches
from chatkeep.aio import AsyncChatkeep, AsyncChatSession
from chatkeep.aio.sessions import core_session
from chatkeep.errors import ChatkeepError, InvalidMessage, PrivacyError, SessionNotFound
from chatkeep.formats.base import RECORDED_ITEM, text_of
from chatkeep.formats.openai_responses import _TEXT_PARTS, NAME, message_to_items
from chatkeep.history.plan import CALL_OVERHEAD, MESSAGE_OVERHEAD, message_cost
from chatkeep.integrations.context import named_party
from chatkeep.integrations.openai_agents import billing, graph, runs
from chatkeep.integrations.openai_agents.runs import RunState, as_dict
from chatkeep.messages import Message, Role, ToolCall
from chatkeep.privacy.streaming import StreamRestorer
from chatkeep.refs import Ref
from chatkeep.store.executor import Row
from chatkeep.store.newest import live_message, read_newest_rows
from chatkeep.store.rows import ROLES
from chatkeep.tokens import HeuristicCounter

if TYPE_CHECKING:
    from agents import Agent, RunConfig, RunHooks, RunResult, RunResultStreaming
    from agents.items import TResponseInputItem
    from agents.run_config import ModelInputData

    from chatkeep.aio import AsyncReservation
    from chatkeep.app import Chatkeep
    from chatkeep.formats import History
    from chatkeep.integrations.openai_agents.reserving import RequestQuota
    from chatkeep.sessions import ChatSession
    from chatkeep.tokens import TokenCounter

_INSTALL_HINT = "pip install 'chatkeep[agents]'"

__all__ = ["ChatkeepSession"]


class ChatkeepSession:
    """A chatkeep conversation as an Agents SDK ``Session``.

    ``session_id`` is the application's key for the conversation (``"support-4711"``):
    ``tenant``'s conversation of that key, created on the first write with ``actor``,
    ``subject``, ``title``, ``anonymize_pii`` and ``metadata`` (as ``keep.sessions.open``).
    ``tenant`` is required and checked on every call. All four history methods accept the
    SDK's optional ``wrapper`` (its run context): when the context names a tenant (an
    attribute or key ``tenant``, or ``chatkeep_tenant``), it must be this session's, so a
    run routed to the wrong tenant finds nothing. ``system_prompt`` is sent ahead of the
    history (the agent's own instructions go out separately, as the SDK sends them).
    ``session_settings``: the SDK's ``SessionSettings`` (or a dict of its fields); its
    ``limit`` applies when ``get_items`` is given none.
    """

    def __init__(self, keep: AsyncChatkeep, session_id: str, *, tenant: Ref,
                 actor: Ref | None = None, subject: Ref | None = None,
                 title: str | None = None, anonymize_pii: bool = True,
                 metadata: Mapping[str, Any] | None = None, system_prompt: str = "",
                 session_settings: Any = None) -> None:
        if not isinstance(keep, AsyncChatkeep):
            raise ChatkeepError("ChatkeepSession needs an AsyncChatkeep (the SDK's session "
                                "protocol is async)")
        self.keep = keep
        self.session_id = session_id
        self.tenant = tenant
        self.actor = actor
        self.subject = subject
        self.title = title
        self.anonymize_pii = anonymize_pii
        self.metadata = dict(metadata) if metadata is not None else None
        self.system_prompt = system_prompt
        self.session_settings: Any = _session_settings(session_settings)
        self._session: AsyncChatSession | None = None
        self._last_tail: _Tail | None = None

    @classmethod
    async def open(cls, keep: AsyncChatkeep, *, tenant: Ref, actor: Ref | None = None,
                   subject: Ref | None = None, session_id: str | None = None,
                   title: str | None = None, anonymize_pii: bool = True,
                   metadata: Mapping[str, Any] | None = None, system_prompt: str = "",
                   session_settings: Any = None) -> ChatkeepSession:
        """The tenant's conversation of the key ``session_id``, found or created now (a new
        key when ``session_id`` is ``None``)."""
        session = cls(keep, session_id if session_id is not None else uuid.uuid4().hex,
                      tenant=tenant, actor=actor, subject=subject, title=title,
                      anonymize_pii=anonymize_pii, metadata=metadata,
                      system_prompt=system_prompt, session_settings=session_settings)
        await session.conversation()
        return session

    async def conversation(self) -> AsyncChatSession:
        """The chatkeep session behind this one, found by its key or created now."""
        session = await self._load(None, create=True)
        assert session is not None
        return session

    async def _load(self, wrapper: Any, *, create: bool) -> AsyncChatSession | None:
        """The conversation of this key (``None`` when there is none and ``create`` is
        false: reading an unused key creates nothing)."""
        routed = _tenant_of(wrapper)
        if routed is not None and routed != self.tenant:
            raise SessionNotFound(f"no session {self.session_id!r} for tenant {routed}")
        if self._session is None:
            if create:
                self._session = await self.keep.sessions.open(
                    self.session_id, self.tenant, self.actor, self.subject, title=self.title,
                    anonymize_pii=self.anonymize_pii, metadata=self.metadata)
            else:
                try:
                    self._session = await self.keep.sessions.by_key(self.session_id,
                                                                     self.tenant)
                except SessionNotFound:
                    return None
        return self._session

    async def get_items(self, limit: int | None = None,
                        wrapper: Any = None) -> list[TResponseInputItem]:
        """The session's items as the SDK's sessions hand them back: every live item as it
        was added, oldest first, tool calls, outputs and reasoning of closed turns included,
        redacted on a redacting session; once the history outgrows its budget, the summary
        first and the items it has not folded. ``limit`` (``session_settings.limit`` when
        ``None``) keeps the newest ``limit`` of them (a negative one, all of them); the
        SDK's runner repairs a call cut from its output by the limit."""
        if limit is None:
            limit = getattr(self.session_settings, "limit", None)
        session = await self._load(wrapper, create=False)
        if session is None:
            return []
        run = runs.current_run(self)
        core = await self.keep.core()
        held = core_session(session)
        redacts = core.privacy.redacts(held)
        if run is None and redacts:
            raise PrivacyError(
                f"session {self.session_id} redacts personal data, and this run does not "
                "send through its filter (the SDK would send the new input raw): run it "
                "with session.run(...), session.run_sync(...) or session.run_streamed(...)")
        items: list[TResponseInputItem] | None = [] if limit == 0 else None
        if items is None and limit is not None and limit > 0 and not redacts:
            # The newest items in one statement on the keep's read lane, when they are
            # the replay's tail (a redacting session's text goes out read in context,
            # through the replay's filter): :meth:`_Tail.answer`, in the read's trip.
            items = await self.keep.read(read_newest_rows, held.id, limit,
                                         functools.partial(self._tail(core, limit).answer,
                                                           held.id))
        if items is None:
            items = await self.keep.run(_replayed, core, held, self.system_prompt)
        if run is not None and not run.read and limit != 0:
            # the run's first read: what its new input answers
            run.read, run.context = True, runs.newest_answer(list(items))
        return items[-limit:] if limit is not None and limit > 0 else items

    async def read_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """``get_items`` for reading outside a run (a dashboard, a test): on a redacting
        session ``get_items`` itself answers only inside ``run*``, where the filter that
        redacts the run's new input is installed."""
        with self._filtered():
            return await self.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem], wrapper: Any = None) -> None:
        """Store the items losslessly, in one transaction (all or none), counted like every
        other message; each keeps its original form, so ``get_items`` hands it back as
        recorded while its text goes out unredacted and unclipped. The first write of a
        key creates its conversation."""
        if not items:
            return
        session = await self._load(wrapper, create=True)
        assert session is not None
        # What the model wrote in this session's placeholders is stored with real values,
        # like every other message (replayed, it is redacted again).
        await session.record([await self._restored(session, item) for item in items],
                             format="openai_responses")

    async def pop_item(self, wrapper: Any = None) -> TResponseInputItem | None:
        """Remove the newest item and return it, as the SDK's own sessions do: its bytes
        leave the store (``privacy.keep_retracted_text`` keeps it retracted instead, for
        audit, out of every replay); ``None`` when nothing is live."""
        session = await self._load(wrapper, create=False)
        if session is None:
            return None
        message = await session.pop_last()
        if message is None:
            return None
        items = message_to_items(message)
        return items[-1] if items else None  # type: ignore[return-value]

    async def clear_session(self, wrapper: Any = None) -> None:
        """Remove every item, the summary and the placeholder vault: the next run starts
        from nothing and no byte of the conversation stays (the session keeps its key and
        its billed usage; ``privacy.keep_retracted_text`` retracts instead, for audit)."""
        session = await self._load(wrapper, create=False)
        if session is not None:
            await session.clear()

    # -- runs through the egress ----------------------------------------------------------

    async def run(self, agent: Agent[Any], input: Any, *,
                  run_config: RunConfig | Mapping[str, Any] | None = None,
                  restore: bool = True, restore_arguments: bool = True,
                  **kwargs: Any) -> RunResult:
        """``Runner.run(agent, input, session=self, ...)``, every request of the run sent
        through this session's egress (``run_config``'s own input filter runs first) and
        reserved on the tenant's quota (``QuotaExceeded``, nothing sent, when it does not
        fit; settled at the usage it reports). ``restore``: ``final_output`` shows the
        user's own values, not the placeholders the model wrote (the run's items keep
        them, as the model saw them). ``restore_arguments``: the function tools of the
        run's agents (and a handoff's ``on_handoff``) receive the model's arguments with
        the user's own values; ``False`` hands them the placeholders."""
        _require_sdk()
        from agents import Runner

        await self._load(None, create=False)  # the trace decision reads the row
        with self._running(input):
            result = await Runner.run(self._prepared(agent, restore_arguments), input,
                                      session=self, run_config=self.run_config(run_config),
                                      **kwargs)
        if restore:
            await self._restore_result(result)
        return result

    def run_sync(self, agent: Agent[Any], input: Any, *,
                 run_config: RunConfig | Mapping[str, Any] | None = None,
                 restore: bool = True, restore_arguments: bool = True,
                 **kwargs: Any) -> RunResult:
        """``Runner.run_sync`` with this session, through its egress and reserved (see
        :meth:`run`); ``final_output`` is restored on the loop the SDK ran on."""
        _require_sdk()
        from agents import Runner

        with self._running(input):
            result = Runner.run_sync(self._prepared(agent, restore_arguments), input,
                                     session=self, run_config=self.run_config(run_config),
                                     **kwargs)
        if restore:
            asyncio.get_event_loop_policy().get_event_loop().run_until_complete(
                self._restore_result(result))
        return result

    def run_streamed(self, agent: Agent[Any], input: Any, *,
                     run_config: RunConfig | Mapping[str, Any] | None = None,
                     restore: bool = True, restore_arguments: bool = True,
                     **kwargs: Any) -> RunResultStreaming:
        """``Runner.run_streamed`` with this session, through its egress and reserved (the
        run's task is created here, so it carries the filter's mark; see :meth:`run`; a
        refused request ends the stream with ``QuotaExceeded``). ``restore``:
        ``stream_events()`` yields the text deltas (and each text's ``done`` event) with
        the user's own values, a placeholder split across deltas restored whole, and
        ``final_output`` is restored once the stream ends."""
        _require_sdk()
        from agents import Runner

        with self._running(input):
            result = Runner.run_streamed(self._prepared(agent, restore_arguments), input,
                                         session=self,
                                         run_config=self.run_config(run_config), **kwargs)
        if restore:
            events = result.stream_events
            owner = self

            async def restored_stream() -> AsyncIterator[Any]:
                async for event in runs.restored_events(events(), owner.restorer):
                    yield event
                await owner._restore_result(result)

            # The SDK's documented loop (``async for event in result.stream_events()``)
            # gets the restored events.
            setattr(result, "stream_events", restored_stream)  # noqa: B010
        return result

    async def stream_text(self, result: RunResultStreaming) -> AsyncIterator[str]:
        """The text a streamed run writes, delta by delta, with the user's own values (for
        a result of :meth:`run_streamed`; consumes its events)."""
        async for event in result.stream_events():
            data: Any = getattr(event, "data", None)
            if event.type == "raw_response_event" and \
                    getattr(data, "type", None) == "response.output_text.delta" and data.delta:
                yield data.delta

    async def restorer(self) -> StreamRestorer:
        """A restorer for this session's model output (``feed`` each chunk, ``flush`` at
        the end) over the placeholders stored now: make one per model response, after
        its request was sent (as :meth:`run_streamed` does)."""
        session = await self.conversation()
        if not await self.keep.privacy.redacts(session):
            return StreamRestorer(lambda text: text)
        core = await self.keep.core()
        vault = await self.keep.privacy.vault(session)
        redactor = core.privacy.redactor
        return StreamRestorer(lambda text: redactor.restore(text, vault))

    def run_config(self, base: RunConfig | Mapping[str, Any] | None = None) -> RunConfig:
        """``base`` (or a default ``RunConfig``) as ``run*`` pass it to the SDK: this
        session's input filter chained after its own, ``base``'s input guardrails fed
        scrubbed input, ``ModelSettings(include_usage=True)`` (unless ``base`` says
        ``False``) so streamed calls report usage, ``trace_include_sensitive_data`` off
        when the session may redact, and the models it names or provides reserving every
        request on the tenant's quota. Passing it to ``Runner.run`` yourself is not
        enough on a redacting session: the filter runs only per model call, after the SDK
        has read the history, so use :meth:`run`. Nor for quotas: an agent's own model
        object is wrapped only by :meth:`run` (its clone), so under this config alone the
        filter reserves such a request and counts it at its reserved amount."""
        _require_sdk()
        return runs.chained_run_config(base, self._egress, self._scrub_input,
                                       redacting=self._may_redact(), quota=self._quota())

    def _may_redact(self) -> bool:
        """Whether the session redacts, read from the row loaded (without one: whether
        it would be created redacting; a stored session not yet read counts as
        redacting when this object asks for redaction)."""
        if self._session is None:
            return self.anonymize_pii
        core = core_session(self._session)
        return switches.redacts(core.anonymize_pii, self.keep.config.privacy.anonymize_pii,
                                core.row.pii_protected)

    def _prepared(self, agent: Agent[Any], restore_arguments: bool) -> Agent[Any]:
        """The run's starting agent: its input guardrails fed scrubbed input, and it and
        every agent it hands off to cloned with their models reserving each request and
        (``restore_arguments``, on a session that may redact) their function tools
        receiving restored arguments (:mod:`.graph`)."""
        from chatkeep.integrations.openai_agents.reserving import QuotaModel

        quota = self._quota()

        def reserving(model: Any) -> Any:
            return model if isinstance(model, QuotaModel) else QuotaModel(model, quota)

        restore = self._restore_payload if restore_arguments and self._may_redact() else None
        return graph.RunAgents(restore, reserving).agent(
            runs.guarded_agent(agent, self._scrub_input))

    def _quota(self) -> RequestQuota:
        """What reserves this session's model requests (:mod:`.reserving`)."""
        from chatkeep.integrations.openai_agents.reserving import RequestQuota

        return RequestQuota(self._reserve, self._counter,
                            self.keep.config.quotas.output_ceiling, self._quota_applies,
                            self._owner)

    async def _owner(self) -> tuple[Ref, str]:
        """This session's tenant and id (what its model calls' spans name)."""
        session = await self.conversation()
        return session.tenant, session.id

    async def _quota_applies(self) -> bool:
        """Whether a quota applies to this session's tenant or actor now (a read)."""
        session = await self.conversation()
        remaining = await self.keep.quotas.remaining(session.tenant, actor=session.actor)
        return remaining is not None

    async def _reserve(self, tokens: int) -> AsyncReservation:
        """``tokens`` held on the quotas of this session's tenant and actor (purpose
        ``chat``), or ``QuotaExceeded`` with nothing written."""
        session = await self.conversation()
        return await self.keep.quotas.reserve(session.tenant, tokens, actor=session.actor,
                                              session_id=session.id, purpose="chat")

    async def _restore_payload(self, value: Any) -> Any:
        """A JSON-like value with this session's placeholders put back (as it is when the
        session does not redact)."""
        session = await self.conversation()
        if not await self.keep.privacy.redacts(session):
            return value
        return await self.keep.privacy.restore_payload(session, value)

    async def _scrub(self, payload: Any, context: str | None) -> Any:
        """``payload`` through this session's egress (as it is when the session does not
        redact)."""
        session = await self.conversation()
        if not await self.keep.privacy.redacts(session):
            return payload
        return await self.keep.privacy.scrub(session, payload, context)

    async def _scrub_input(self, value: Any) -> Any:
        """A run's input (a text or items) as a guardrail may see it: scrubbed, the new
        input read with what it answers."""
        run = runs.current_run(self) or RunState()
        if isinstance(value, list):
            value = [as_dict(item) for item in value]
        return await runs.scrub_with_context(self._scrub, value, run.new_input, run.context)

    async def _egress(self, model_data: ModelInputData) -> ModelInputData:
        """The run's request as it may leave: input items and instructions scrubbed in
        one body by the session's egress (the new input read with the message it
        answers), its placeholders stored first."""
        body: dict[str, Any] = {"instructions": model_data.instructions,
                                "input": [as_dict(item) for item in model_data.input]}
        run = runs.current_run(self) or RunState()
        body = await runs.scrub_with_context(self._scrub, body, run.new_input, run.context)
        from agents.run_config import ModelInputData

        return ModelInputData(input=body["input"], instructions=body["instructions"])

    async def _restore_result(self, result: Any) -> None:
        """``result.final_output`` with the user's own values (on a redacting session)."""
        session = await self.conversation()
        if not await self.keep.privacy.redacts(session):
            return

        async def text(value: str) -> str:
            restored: str = await self.keep.privacy.restore(session, value)
            return restored

        async def payload(value: Any) -> Any:
            return await self.keep.privacy.restore_payload(session, value)

        result.final_output = await runs.restore_final_output(result.final_output, text,
                                                              payload)

    async def _restored(self, session: AsyncChatSession,
                        item: TResponseInputItem) -> TResponseInputItem:
        """A model-written item (assistant message, call, reasoning) with this session's
        placeholders put back; anything else as it is (user text is never restored: a
        placeholder the user typed stays literal)."""
        data = as_dict(item)
        if data.get("role") == "assistant" or data.get("type") in _MODEL_ITEMS:
            restored: TResponseInputItem = await self.keep.privacy.restore_payload(
                session, data)
            return restored
        return item

    @contextmanager
    def _filtered(self) -> Iterator[None]:
        """Mark this session's filter as installed for the code run inside (a read
        outside any run: no new input)."""
        with self._running(None):
            yield

    @contextmanager
    def _running(self, input: Any) -> Iterator[RunState]:
        """Mark this session's filter as installed for the code (and tasks) run inside,
        with the run's new input."""
        state = RunState(new_input=runs.new_input_items(input))
        token = runs.running(self, state)
        try:
            yield state
        finally:
            runs.done(token)

    def billing_hooks(self) -> RunHooks[Any]:
        """SDK run hooks that bill every model call of a run to this session (and its
        tenant) under purpose ``chat``, with the model's own usage figures, or estimated
        with the keep's token counter where a call reports none (its ledger line's model
        marked ``" (estimated)"``; :mod:`.billing`)."""
        try:
            import agents  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the extra is in the dev set
            raise ChatkeepError(f"the OpenAI Agents SDK is not installed: {_INSTALL_HINT}") \
                from exc
        return billing.billing_hooks(self.conversation, self._counter)

    def _tail(self, core: Chatkeep, limit: int) -> _Tail:
        """The bounded read's judge for ``limit`` under the current system prompt (the
        last one is kept: a session reads with one limit)."""
        tail = self._last_tail
        if tail is None or tail.limit != limit or tail.prompt != self.system_prompt:
            tail = self._last_tail = _Tail(core, self.system_prompt, limit)
        return tail

    async def _counter(self) -> TokenCounter:
        """The keep's token counter (the one the budget counts with)."""
        return (await self.keep.core()).counter


_MODEL_ITEMS = ("function_call", "reasoning")


def _replayed(core: Chatkeep, session: ChatSession,
              system_prompt: str) -> list[TResponseInputItem]:
    """The whole replay's items (inside the bridge)."""
    return list(_replay(core, session, system_prompt))


def _replay(core: Chatkeep, session: ChatSession, system_prompt: str) -> History[Any]:
    """The session's history with the SDK's replay rule: every live item as recorded
    (chatkeep's own default replays closed turns as their text alone)."""
    return core.compressor.round(session, system_prompt, format="openai_responses",
                                 keep_closed_tool_turns=True).build()


class _Rows(NamedTuple):
    """Rows :meth:`_Tail.fast` leaves to :meth:`_Tail.exact`."""

    watermark: int
    rows: list[Row]


class _Stored:
    """What :func:`message_to_items` reads of a message (its role, text, calls, the call
    it answers, its native payloads), for a row read by :meth:`_Tail.fast` (a ``Message``
    costs more to build than the row's conversion)."""

    __slots__ = ("content", "native", "role", "tool_call_id", "tool_calls")

    def __init__(self, role: Role, content: str | None, tool_calls: tuple[ToolCall, ...],
                 tool_call_id: str | None, native: dict[str, Any]) -> None:
        self.role, self.content, self.tool_calls = role, content, tool_calls
        self.tool_call_id, self.native = tool_call_id, native


_SCAN: Any = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009 (typeshed omits it)
_UNUSUAL = object()
"""What :func:`_decoded` answers for a text that is not one JSON value."""
_LOCAL = threading.local()


def _float_scanner() -> tuple[Any, list[str]]:
    """This thread's scanner that notes every float it meets (in the list beside it,
    which the caller clears) instead of refusing it: :meth:`_Tail._items`' bound is not
    proved for floats (a float's shortest form can be longer than its text)."""
    found = getattr(_LOCAL, "scanner", None)
    if found is None:
        seen: list[str] = []

        def noted(text: str) -> float:
            seen.append(text)
            return 0.0

        found = _LOCAL.scanner = (getattr(json.JSONDecoder(parse_float=noted),  # noqa: B009
                                          "scan_once"), seen)
    return found


def _decoded(scan: Any, text: str) -> Any:
    """``json.loads(text)``, for a ``text`` that is one JSON value without surrounding
    whitespace (else :data:`_UNUSUAL`): the scanner ``json.loads`` runs, without its
    per-call layers."""
    value, end = scan(text, 0)
    return value if end == len(text) else _UNUSUAL


class _Tail:
    """A bounded read's verdict over its rows (``newest_live``'s, oldest first): the
    items, ``None`` (the whole replay answers), or, from :meth:`fast`, the rows for
    :meth:`exact`."""

    def __init__(self, core: Chatkeep, system_prompt: str, limit: int) -> None:
        config, self.counter = core.compressor.config, core.compressor.counter
        self.limit, self.prompt, self.leading = limit, system_prompt, bool(system_prompt)
        self.most, self.budget = config.max_message_tokens, config.max_history_tokens
        self.fixed = self.counter.count(system_prompt)
        counter = self.counter
        self.per_token: int | None = counter.chars_per_token \
            if type(counter) is HeuristicCounter else None

    def replays(self, watermark: int, rows: list[Row]) -> bool:
        """Whether the replay's tail differs from these rows' without any costing: the
        limit reaches into the summary, a row is pinned (system: it goes first), or the
        rows are all there is and the replay leads with a system prompt or summary."""
        if rows and rows[0][1] <= watermark:
            return True
        if len(rows) < self.limit and (self.leading or watermark):
            return True
        return any(row[2] == "system" for row in rows)

    def fits(self, items: list[Any], rows: list[Row], watermark: int) -> bool:
        """Whether ``items`` hold the replay's tail: ``limit`` of them, or every live
        item of a session whose replay leads with nothing."""
        return len(items) >= self.limit or not (len(rows) == self.limit or self.leading
                                                or watermark)

    def answer(self, session_id: str, watermark: int,
               rows: list[Row]) -> list[TResponseInputItem] | None:
        """The verdict: :meth:`fast`'s, and for the rows it cannot vouch for,
        :meth:`exact`'s (run where the read ran: on the read lane, in its thread)."""
        found = self.fast(watermark, rows)
        if isinstance(found, _Rows):
            return self.exact(session_id, found.watermark, found.rows)
        return found

    def exact(self, session_id: str, watermark: int,
              rows: list[Row]) -> list[TResponseInputItem] | None:
        """The verdict from ``Message``s and their exact costs (``message_cost``)."""
        if self.replays(watermark, rows):
            return None
        messages = [live_message(session_id, row) for row in rows]
        costs = [message_cost(message, self.counter, NAME) for message in messages]
        if any(cost > self.most for cost in costs) or sum(costs) + self.fixed > self.budget:
            return None  # clipped or folded on the way out: the replay does that
        items = [item for message in messages for item in message_to_items(message)]
        if not self.fits(items, rows, watermark):
            return None
        return items[-self.limit:]  # type: ignore[return-value]

    def fast(self, watermark: int,
             rows: list[Row]) -> list[TResponseInputItem] | _Rows | None:
        """The verdict straight from the driver's rows, run inside the read's trip: each
        row's JSON decoded once, its items as ``message_to_items`` makes them, and its
        cost bounded from above without serialising anything (:meth:`_items`); the rows
        go to :meth:`exact` when the counter is not the heuristic one, a bound does not
        fit, or a row is unusual (a float, a payload that is not an object)."""
        if self.replays(watermark, rows):
            return None
        per_token = self.per_token
        if per_token is None:
            return _Rows(watermark, rows)
        try:
            found = self._items(rows, per_token)
        except Exception:  # JSON the scanner refuses: the exact path reads it as always
            found = None
        if found is None:  # an unusual row: the exact path reads it as it always has
            return _Rows(watermark, rows)
        items, total, worst = found
        if worst > self.most or total + self.fixed > self.budget:
            return _Rows(watermark, rows)  # bounds only: the exact costs decide
        if not self.fits(items, rows, watermark):
            return None
        return items[-self.limit:]

    @staticmethod
    def _items(rows: list[Row], per_token: int) -> tuple[list[Any], int, int] | None:
        """The rows' items, the sum of their cost bounds and the largest (every row's
        work written out here: this loop is most of a bounded read's own time); ``None``
        for rows the bound is not proved for (a float, a payload that is not an object).

        A row's bound: ``message_cost`` without the native payload (framing, text, calls,
        answered id) is counted exactly (``counted``); the payload adds
        ``count(json.dumps(extras))`` (the payload without its recorded item, when it has
        extras) and ``max(0, count(json.dumps(item)) - counted)``. Both serialisations
        together are no longer than ``json.dumps`` of the payload, nor that than of the
        column's whole value, nor that than ``len(text) + text.count(",") +
        text.count(":")`` of the column's JSON ``text``: re-encoding a strict JSON text
        (``ensure_ascii=False``) writes every string and key in at most the characters
        the text used for it (it escapes only quotes, backslashes and control
        characters, which the text had to escape too), every integer, literal and
        bracket in as many or fewer, drops whitespace, and adds one space after each
        ``,`` and ``:`` separator; only a float can grow (``1e5`` is ``100000.0``), so
        a text with one is refused (:func:`_float_scanner`) and the row goes to the exact
        path. With ``B`` the ceiling of that over ``chars_per_token``: the cost is at
        most ``max(counted, B)`` when the item is the payload's only key, else at most
        ``counted + B + 1`` (two ceilings exceed the ceiling of their sum by at most
        one)."""
        items: list[Any] = []
        total = worst = 0
        scan, floats = _float_scanner()
        floats.clear()
        name, recorded_key = NAME, RECORDED_ITEM
        for _, _seq, role, content, calls, call_id, _name, native in rows:
            # message_cost's framing, text, calls and answered id, exactly
            cost = MESSAGE_OVERHEAD + (-(-len(content) // per_token) if content else 0)
            tool_calls: tuple[ToolCall, ...] = ()
            if calls is not None and calls != "null":
                decoded = _calls(calls, per_token)
                if decoded is None:
                    return None
                tool_calls, calls_cost = decoded
                cost += calls_cost
            if call_id:
                cost += -(-len(call_id) // per_token)
            if native is None or native == "null":
                payload: Any = {}
                recorded = item = None
            else:  # json.loads(native), floats refused
                payload, end = scan(native, 0)
                if end != len(native) or type(payload) is not dict or floats:
                    return None
                recorded = payload.get(name)
                item = None
                if recorded:
                    if type(recorded) is not dict:
                        return None
                    most = -(-(len(native) + native.count(",") + native.count(":"))
                             // per_token)
                    if len(recorded) == 1 and recorded_key in recorded:
                        if most > cost:
                            cost = most
                    else:
                        cost += most + 1
                    item = recorded.get(recorded_key)
            total += cost
            if cost > worst:
                worst = cost
            said = item.get("content") if type(item) is dict and \
                item.get("type", "message") == "message" and not tool_calls else None
            if said is not None and type(said) is not str:
                said = _text(said)
            if said is not None and said == content:
                items.append(item)  # carried: message_to_items' first case (a fresh object)
            else:
                items.extend(message_to_items(cast("Message", _Stored(
                    ROLES[role], content, tool_calls, call_id, payload))))
        return items, total, worst


def _calls(text: str, per_token: int) -> tuple[tuple[ToolCall, ...], int] | None:
    """A row's stored tool calls and what ``message_cost`` counts for them; ``None`` for
    a text that is not one JSON value."""
    listed = _decoded(_SCAN, text)
    if listed is _UNUSUAL:
        return None
    calls = tuple(ToolCall.from_openai(c) for c in listed) if listed else ()
    return calls, sum(CALL_OVERHEAD + -(-len(call.id + call.name + call.arguments)
                                        // per_token) for call in calls)


def _text(content: Any) -> str | None:
    """What ``message_to_items`` compares a recorded message item's content with the
    stored text by (``text_of``'s, ``None`` where that refuses the content): a list of
    text parts joined here (the Responses API's one ``output_text`` part, mostly),
    anything else by ``text_of`` itself."""
    if type(content) is str:
        return content
    if type(content) is list:
        texts = []
        for part in content:
            text = part.get("text") if type(part) is dict and \
                part.get("type") in _TEXT_PARTS else None
            if type(text) is not str:
                break
            texts.append(text)
        else:
            return "".join(texts)
    try:
        return text_of(content, "item", _TEXT_PARTS)
    except InvalidMessage:
        return None


def _session_settings(value: Any) -> Any:
    """``value`` as the SDK's ``SessionSettings`` (a dict of its fields is read as its
    sessions read it; ``None`` is the default settings), or as given without the SDK."""
    try:
        from agents.memory import SessionSettings
    except ImportError:  # pragma: no cover - the extra is in the dev set
        return value
    if value is None:
        return SessionSettings()
    if isinstance(value, SessionSettings):
        return value
    try:
        from agents.memory.session_settings import coerce_session_settings
    except ImportError:  # an SDK that takes no dict: its fields by name
        return SessionSettings(**dict(value))
    return coerce_session_settings(value)


def _require_sdk() -> None:
    """A ``ChatkeepError`` naming the extra when the SDK is missing."""
    try:
        import agents  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the extra is in the dev set
        raise ChatkeepError(f"the OpenAI Agents SDK is not installed: {_INSTALL_HINT}") \
            from exc


def _tenant_of(wrapper: Any) -> Ref | None:
    """The tenant a run context names, if it names one (:func:`named_party`)."""
    return named_party(getattr(wrapper, "context", None), "tenant")
