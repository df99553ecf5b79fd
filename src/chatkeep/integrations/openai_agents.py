"""``ChatkeepSession``: the OpenAI Agents SDK's ``Session`` protocol over chatkeep.

What the SDK's own sessions lack and chatkeep adds: an owner and tenant on every session
(a session id from another tenant is not found), a history that stays inside a token
budget without ever splitting a tool call from its output, compaction into a readable,
billed summary, PII redaction, and a record that is never destroyed (``pop_item`` and
``clear_session`` retract: kept, marked, out of every replay).

    keep = AsyncChatkeep("sqlite:///chat.db", model=openai.AsyncOpenAI())
    session = await ChatkeepSession.open(keep, tenant=Ref("organization", 7),
                                         actor=Ref("user", 3))
    result = await Runner.run(agent, "What's the weather in Paris?", session=session,
                              hooks=session.billing_hooks())

The class is structural (it does not subclass the SDK's ``SessionABC``), so importing
this module needs the SDK only for :meth:`ChatkeepSession.billing_hooks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chatkeep.aio import AsyncChatkeep, AsyncChatSession
from chatkeep.errors import ChatkeepError, SessionNotFound
from chatkeep.formats.openai_responses import message_to_items
from chatkeep.messages import Usage
from chatkeep.refs import Ref

if TYPE_CHECKING:
    from agents import RunHooks
    from agents.items import TResponseInputItem

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
        history = await self.keep.compressor.build_history(session, self.system_prompt,
                                                           format="openai_responses")
        items: list[TResponseInputItem] = list(history)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: list[TResponseInputItem], wrapper: Any = None) -> None:
        """Store the items losslessly, in one transaction (all or none), counted like every
        other message; each keeps its original form, so ``get_items`` hands it back as
        recorded while its text goes out unredacted and unclipped."""
        if not items:
            return
        session = await self._load(wrapper)
        await session.record(list(items), format="openai_responses")

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


def _tenant_of(wrapper: Any) -> Ref | None:
    """The tenant a run context names, if it names one."""
    context = getattr(wrapper, "context", None)
    if context is None:
        return None
    for key in ("chatkeep_tenant", "tenant"):
        value = context.get(key) if isinstance(context, Mapping) else getattr(context, key, None)
        if isinstance(value, Ref):
            return value
    return None
