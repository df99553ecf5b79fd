"""``ChatkeepSession``: the OpenAI Agents SDK's ``Session`` protocol over chatkeep.

What the SDK's own sessions lack and chatkeep adds: an owner and tenant on every session
(a session id from another tenant is not found), a history that stays inside a token
budget without ever splitting a tool call from its output, compaction into a readable,
billed summary, PII redaction, and a record that is never destroyed (``pop_item`` and
``clear_session`` retract: kept, marked, out of every replay).

    keep = AsyncChatkeep("sqlite:///chat.db", model=openai.AsyncOpenAI())
    session = await ChatkeepSession.open(keep, tenant=Ref("organization", 7),
                                         actor=Ref("user", 3))
    result = await session.run(agent, "What's the weather in Paris?",
                               hooks=session.billing_hooks())

``session.run`` / ``run_sync`` / ``run_streamed`` are ``Runner.run`` / ``run_sync`` /
``run_streamed`` with this session, plus a ``call_model_input_filter`` that sends every
request of the run through the session's egress: the new input (which the SDK sends
before the session stores it), tool outputs within the run, and the instructions. A run
on a redacting session that does not go through them is refused before anything is sent
(``get_items`` raises ``PrivacyError``): there is no way to forget the filter.

The class is structural (it does not subclass the SDK's ``SessionABC``); the SDK is
imported when a run, the filter or :meth:`ChatkeepSession.billing_hooks` needs it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from chatkeep.aio import AsyncChatkeep, AsyncChatSession
from chatkeep.errors import ChatkeepError, InvalidReference, PrivacyError, SessionNotFound
from chatkeep.formats.openai_responses import message_to_items
from chatkeep.messages import Usage
from chatkeep.refs import Ref

if TYPE_CHECKING:
    from agents import Agent, RunConfig, RunHooks, RunResult, RunResultStreaming
    from agents.items import TResponseInputItem
    from agents.run_config import CallModelData, ModelInputData

#: The sessions whose filter the running code installed (set by ``ChatkeepSession.run*``).
_FILTERED: ContextVar[frozenset[int]] = ContextVar("chatkeep_agents_filtered",
                                                   default=frozenset())

_INSTALL_HINT = "pip install 'chatkeep[agents]'"

__all__ = ["ChatkeepSession"]


class ChatkeepSession:
    """A chatkeep conversation as an Agents SDK ``Session``.

    ``tenant`` is required and checked on every call. All four history methods accept the
    SDK's optional ``wrapper`` (its run context): when the context names a tenant (an
    attribute or key ``tenant``, or ``chatkeep_tenant``), it must be this session's, so a
    run routed to the wrong tenant finds nothing. ``system_prompt`` is sent ahead of the
    history (the agent's own instructions go out separately, as the SDK sends them).
    """

    def __init__(self, keep: AsyncChatkeep, session_id: str, *, tenant: Ref,
                 system_prompt: str = "", session_settings: Any = None) -> None:
        if not isinstance(keep, AsyncChatkeep):
            raise ChatkeepError("ChatkeepSession needs an AsyncChatkeep (the SDK's session "
                                "protocol is async)")
        self.keep = keep
        self.session_id = session_id
        self.tenant = tenant
        self.system_prompt = system_prompt
        self.session_settings = session_settings
        self._session: AsyncChatSession | None = None

    @classmethod
    async def open(cls, keep: AsyncChatkeep, *, tenant: Ref, actor: Ref | None = None,
                   subject: Ref | None = None, session_id: str | None = None,
                   title: str | None = None, system_prompt: str = "",
                   session_settings: Any = None) -> ChatkeepSession:
        """An existing session of ``tenant`` (``session_id``) or a new one."""
        if session_id is None:
            created = await keep.sessions.create(tenant, actor, subject, title=title)
            session = cls(keep, created.id, tenant=tenant, system_prompt=system_prompt,
                          session_settings=session_settings)
            session._session = created
            return session
        session = cls(keep, session_id, tenant=tenant, system_prompt=system_prompt,
                      session_settings=session_settings)
        await session._load(None)
        return session

    async def _load(self, wrapper: Any) -> AsyncChatSession:
        routed = _tenant_of(wrapper)
        if routed is not None and routed != self.tenant:
            raise SessionNotFound(f"no session {self.session_id!r} for tenant {routed}")
        if self._session is None:
            self._session = await self.keep.sessions.get(self.session_id, tenant=self.tenant)
        return self._session

    async def get_items(self, limit: int | None = None,
                        wrapper: Any = None) -> list[TResponseInputItem]:
        """The budgeted history as Responses input items: the summary, the replay, and the
        open turn's plumbing intact; ``limit`` keeps the newest ``limit`` of them (as the
        SDK's sessions do; its runner repairs a call split from its output by the cut)."""
        session = await self._load(wrapper)
        if id(self) not in _FILTERED.get() and await self.keep.privacy.redacts(session):
            raise PrivacyError(
                f"session {self.session_id} redacts personal data, and this run does not "
                "send through its filter (the SDK would send the new input raw): run it "
                "with session.run(...), session.run_sync(...) or session.run_streamed(...)")
        history = await self.keep.compressor.build_history(session, self.system_prompt,
                                                           format="openai_responses")
        items: list[TResponseInputItem] = list(history)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    async def read_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """``get_items`` for reading outside a run (a dashboard, a test): on a redacting
        session ``get_items`` itself answers only inside ``run*``, where the filter that
        redacts the run's new input is installed."""
        with self._filtered():
            return await self.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem], wrapper: Any = None) -> None:
        """Store the items losslessly, in one transaction (all or none), counted like every
        other message; each keeps its original form, so ``get_items`` hands it back as
        recorded while its text goes out unredacted and unclipped."""
        if not items:
            return
        session = await self._load(wrapper)
        # What the model wrote in this session's placeholders is stored with real values,
        # like every other message (replayed, it is redacted again).
        await session.record([await self._restored(session, item) for item in items],
                             format="openai_responses")

    async def pop_item(self, wrapper: Any = None) -> TResponseInputItem | None:
        """Retract the newest item and return it (kept in the record, marked retracted,
        out of every replay, summary and distillation); ``None`` when nothing is live."""
        session = await self._load(wrapper)
        message = await session.retract_last()
        if message is None:
            return None
        items = message_to_items(message)
        return items[-1] if items else None  # type: ignore[return-value]

    async def clear_session(self, wrapper: Any = None) -> None:
        """Retract every item and drop the summary: the next run starts from nothing, and
        the record stays for audit (``chatkeep sessions show`` marks it retracted)."""
        session = await self._load(wrapper)
        await session.retract_all()

    # -- runs through the egress ----------------------------------------------------------

    async def run(self, agent: Agent[Any], input: Any, *,
                  run_config: RunConfig | Mapping[str, Any] | None = None,
                  **kwargs: Any) -> RunResult:
        """``Runner.run(agent, input, session=self, ...)``, every request of the run sent
        through this session's egress (``run_config``'s own input filter runs first)."""
        _require_sdk()
        from agents import Runner

        with self._filtered():
            return await Runner.run(agent, input, session=self,
                                    run_config=self.run_config(run_config), **kwargs)

    def run_sync(self, agent: Agent[Any], input: Any, *,
                 run_config: RunConfig | Mapping[str, Any] | None = None,
                 **kwargs: Any) -> RunResult:
        """``Runner.run_sync`` with this session, through its egress (see :meth:`run`)."""
        _require_sdk()
        from agents import Runner

        with self._filtered():
            return Runner.run_sync(agent, input, session=self,
                                   run_config=self.run_config(run_config), **kwargs)

    def run_streamed(self, agent: Agent[Any], input: Any, *,
                     run_config: RunConfig | Mapping[str, Any] | None = None,
                     **kwargs: Any) -> RunResultStreaming:
        """``Runner.run_streamed`` with this session, through its egress (the run's task
        is created here, so it carries the filter's mark; see :meth:`run`)."""
        _require_sdk()
        from agents import Runner

        with self._filtered():
            return Runner.run_streamed(agent, input, session=self,
                                       run_config=self.run_config(run_config), **kwargs)

    def run_config(self, base: RunConfig | Mapping[str, Any] | None = None) -> RunConfig:
        """``base`` (or a default ``RunConfig``) with this session's input filter chained
        after its own: what ``run*`` pass to the SDK. Passing it to ``Runner.run``
        yourself is not enough on a redacting session: the filter runs only per model
        call, after the SDK has read the history, so use :meth:`run`."""
        _require_sdk()
        from agents import RunConfig

        config = base if isinstance(base, RunConfig) else RunConfig(**dict(base or {}))
        own = config.call_model_input_filter

        async def through_egress(data: CallModelData[Any]) -> ModelInputData:
            if own is not None:
                updated = own(data)
                model_data = await updated if inspect.isawaitable(updated) else updated
                data = dataclasses.replace(data, model_data=model_data)
            return await self._egress(data.model_data)

        return dataclasses.replace(config, call_model_input_filter=through_egress)

    async def _egress(self, model_data: ModelInputData) -> ModelInputData:
        """The run's request as it may leave: input items and instructions scrubbed in
        one body by the session's egress, its placeholders stored first."""
        session = await self._load(None)
        body: dict[str, Any] = {"instructions": model_data.instructions,
                                "input": [_as_dict(item) for item in model_data.input]}
        if await self.keep.privacy.redacts(session):
            body = await self.keep.privacy.scrub(session, body)
        from agents.run_config import ModelInputData

        return ModelInputData(input=body["input"], instructions=body["instructions"])

    async def _restored(self, session: AsyncChatSession,
                        item: TResponseInputItem) -> TResponseInputItem:
        """A model-written item (assistant message, call, reasoning) with this session's
        placeholders put back; anything else as it is (user text is never restored: a
        placeholder the user typed stays literal)."""
        data = _as_dict(item)
        if data.get("role") == "assistant" or data.get("type") in _MODEL_ITEMS:
            restored: TResponseInputItem = await self.keep.privacy.restore_payload(
                session, data)
            return restored
        return item

    @contextmanager
    def _filtered(self) -> Iterator[None]:
        """Mark this session's filter as installed for the code (and tasks) run inside."""
        token = _FILTERED.set(_FILTERED.get() | {id(self)})
        try:
            yield
        finally:
            _FILTERED.reset(token)

    def billing_hooks(self) -> RunHooks[Any]:
        """SDK run hooks that bill every model call of a run to this session (and its
        tenant) under purpose ``chat``, with the model's own usage figures."""
        try:
            from agents import RunHooks
        except ImportError as exc:  # pragma: no cover - the extra is in the dev set
            raise ChatkeepError(f"the OpenAI Agents SDK is not installed: {_INSTALL_HINT}") \
                from exc
        owner = self

        class _Billing(RunHooks[Any]):
            async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
                usage = getattr(response, "usage", None)
                if usage is None:
                    return
                session = await owner._load(None)
                model = getattr(getattr(agent, "model", None), "model", None) or \
                    (agent.model if isinstance(getattr(agent, "model", None), str) else None)
                await session.record_usage(
                    "chat", Usage(int(usage.input_tokens or 0), int(usage.output_tokens or 0)),
                    model)

        return _Billing()


_MODEL_ITEMS = ("function_call", "reasoning")


def _require_sdk() -> None:
    """A ``ChatkeepError`` naming the extra when the SDK is missing."""
    try:
        import agents  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the extra is in the dev set
        raise ChatkeepError(f"the OpenAI Agents SDK is not installed: {_INSTALL_HINT}") \
            from exc


def _as_dict(item: Any) -> Any:
    """An input item as a plain dict (the SDK may hand pydantic models)."""
    dump = getattr(item, "model_dump", None)
    return dump(exclude_unset=True) if callable(dump) else item


def _tenant_of(wrapper: Any) -> Ref | None:
    """The tenant a run context names, if it names one: a ``Ref``, ``"type:id"`` text, a
    mapping or an object with ``type`` and ``id``, under ``chatkeep_tenant`` or
    ``tenant``. A tenant named in a shape that cannot be read is refused, never ignored."""
    context = getattr(wrapper, "context", None)
    if context is None:
        return None
    for key in ("chatkeep_tenant", "tenant"):
        value = context.get(key) if isinstance(context, Mapping) else getattr(context, key, None)
        if value is not None:
            try:
                return Ref.coerce(value)
            except InvalidReference as exc:
                raise InvalidReference(f"the run context's {key} is not a tenant "
                                       f"reference: {exc}") from exc
    return None
