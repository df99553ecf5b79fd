"""``AsyncChatSession`` and ``AsyncSessionService``: async twins of the sync session API.

Each method runs the sync core's own method through the bridge (see
:mod:`chatkeep.aio.bridge`): same names, same arguments, same checks and errors,
awaited. Properties read the row snapshot the last call returned and never do I/O;
what reads the database is a method (``read_messages()`` for ``messages``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chatkeep.messages import Message, MessageDraft, Role, ToolCall, Usage
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.store.repository import SessionRow

if TYPE_CHECKING:
    from chatkeep.aio.app import AsyncChatkeep


class AsyncChatSession:
    """Async twin of ``ChatSession``."""

    def __init__(self, keep: AsyncChatkeep, session: ChatSession) -> None:
        self._keep = keep
        self._session = session

    def __repr__(self) -> str:
        return "Async" + repr(self._session)

    @property
    def core(self) -> ChatSession:
        """The sync session this twin drives (only usable inside the bridge)."""
        return self._session

    # -- identity and state: the row snapshot, no I/O -----------------------------------

    @property
    def id(self) -> str:
        """The session id: all a background job needs."""
        return self._session.id

    @property
    def tenant(self) -> Ref:
        """Who owns the conversation and is billed for it."""
        return self._session.tenant

    @property
    def actor(self) -> Ref | None:
        """Who speaks; ``None`` for an autonomous run."""
        return self._session.actor

    @property
    def subject(self) -> Ref | None:
        """What the conversation lives inside, if anything."""
        return self._session.subject

    @property
    def key(self) -> str | None:
        """The application's own name for the conversation (``sessions.open``), or ``None``."""
        return self._session.key

    @property
    def title(self) -> str | None:
        """An optional label for people."""
        return self._session.title

    @property
    def row(self) -> SessionRow:
        """The database row as of the last call."""
        return self._session.row

    @property
    def total_tokens(self) -> int:
        """Tokens billed to this session (equals its usage ledger)."""
        return self._session.total_tokens

    @property
    def summary(self) -> str | None:
        """The running summary as of the last call."""
        return self._session.summary

    @property
    def summary_watermark(self) -> int:
        """``seq`` of the last message folded into the summary."""
        return self._session.summary_watermark

    @property
    def message_count(self) -> int:
        """How many messages were appended (the last ``seq``)."""
        return self._session.message_count

    @property
    def closed(self) -> bool:
        """Whether the session refuses new messages."""
        return self._session.closed

    @property
    def metadata(self) -> dict[str, Any]:
        """Your own JSON data, stored with the session."""
        return self._session.metadata

    @property
    def anonymize_pii(self) -> bool:
        """This conversation's redaction switch (set it with ``set_anonymize_pii``)."""
        return self._session.anonymize_pii

    # -- reading and state changes --------------------------------------------------------

    async def refresh(self) -> AsyncChatSession:
        """Re-read the row (another process may have written)."""
        await self._keep.run(self._session.refresh)
        return self

    async def close(self) -> None:
        """Refuse further messages; the record stays readable."""
        await self._keep.run(self._session.close)

    async def set_anonymize_pii(self, value: bool) -> None:
        """Switch redaction for this conversation (the app switch must be on too)."""
        await self._keep.run(self._session.set_anonymize_pii, value)

    async def read_messages(self) -> list[Message]:
        """Every message in order, tool plumbing and retracted ones included."""
        return await self._keep.run(self._session.read_messages)

    async def messages_after(self, seq: int) -> list[Message]:
        """Messages with ``seq`` greater than ``seq``."""
        return await self._keep.run(self._session.messages_after, seq)

    async def retract_last(self) -> Message | None:
        """Retract the newest live message (kept, marked, never replayed); returns it."""
        return await self._keep.run(self._session.retract_last)

    async def retract_all(self) -> int:
        """Retract every live message and the summary; returns how many messages."""
        return await self._keep.run(self._session.retract_all)

    # -- writing ---------------------------------------------------------------------------

    async def add_user(self, content: str, *, name: str | None = None,
                       metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a user message."""
        return await self._keep.run(self._session.add_user, content, name=name,
                                    metadata=metadata)

    async def add_system(self, content: str, *,
                         metadata: Mapping[str, Any] | None = None) -> Message:
        """Record an instruction added mid-session (replayed pinned)."""
        return await self._keep.run(self._session.add_system, content, metadata=metadata)

    async def add_assistant(self, content: str | None = None, *,
                            tool_calls: Sequence[ToolCall | Mapping[str, Any]] | None = None,
                            usage: Usage | None = None, model: str | None = None,
                            metadata: Mapping[str, Any] | None = None) -> Message:
        """Record an assistant turn: text, tool calls, or both."""
        return await self._keep.run(self._session.add_assistant, content,
                                    tool_calls=tool_calls, usage=usage, model=model,
                                    metadata=metadata)

    async def add_assistant_response(self, response: Any, *,
                                     metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a model's answer as the provider SDK returned it (any wire format)."""
        return await self._keep.run(self._session.add_assistant_response, response,
                                    metadata=metadata)

    async def record(self, payload: Any, *, format: str) -> list[Message]:
        """Record request-side messages of a wire format, atomically."""
        return await self._keep.run(self._session.record, payload, format=format)

    async def add_drafts(self, drafts: Sequence[MessageDraft]) -> list[Message]:
        """Validate and append several messages in one transaction."""
        return await self._keep.run(self._session.add_drafts, drafts)

    async def add_tool_result(self, tool_call_id: str,
                              content: str | Mapping[str, Any] | list[Any], *,
                              name: str | None = None,
                              metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a tool's result for an earlier, unanswered call."""
        return await self._keep.run(self._session.add_tool_result, tool_call_id, content,
                                    name=name, metadata=metadata)

    async def add_message(self, role: Role | str, content: str | None, *,
                          tool_calls: Sequence[ToolCall | Mapping[str, Any]] | None = None,
                          tool_call_id: str | None = None, name: str | None = None,
                          usage: Usage | None = None, model: str | None = None,
                          metadata: Mapping[str, Any] | None = None) -> Message:
        """Validate and append any message."""
        return await self._keep.run(self._session.add_message, role, content,
                                    tool_calls=tool_calls, tool_call_id=tool_call_id,
                                    name=name, usage=usage, model=model, metadata=metadata)

    async def add_tokens(self, n: int, *, purpose: str = "manual",
                         model: str | None = None) -> int:
        """Bill ``n`` tokens to this session; returns the new total."""
        return await self._keep.run(self._session.add_tokens, n, purpose=purpose, model=model)

    async def record_usage(self, purpose: str, usage: Usage,
                           model: str | None = None) -> int:
        """Bill a model call made on this session's behalf; returns the new total."""
        return await self._keep.run(self._session.record_usage, purpose, usage, model)


class AsyncSessionService:
    """Async twin of ``SessionService`` (``keep.sessions``)."""

    def __init__(self, keep: AsyncChatkeep) -> None:
        self._keep = keep

    def _wrap(self, session: ChatSession) -> AsyncChatSession:
        return AsyncChatSession(self._keep, session)

    async def create(self, tenant: Ref, actor: Ref | None = None, subject: Ref | None = None,
                     *, title: str | None = None, anonymize_pii: bool = True,
                     metadata: Mapping[str, Any] | None = None) -> AsyncChatSession:
        """Start a conversation owned by ``tenant``; ``actor=None`` is an autonomous run."""
        core = await self._keep.core()
        return self._wrap(await self._keep.run(
            core.sessions.create, tenant, actor, subject, title=title,
            anonymize_pii=anonymize_pii, metadata=metadata))

    async def open(self, key: str, tenant: Ref, actor: Ref | None = None,
                   subject: Ref | None = None, *, title: str | None = None,
                   anonymize_pii: bool = True,
                   metadata: Mapping[str, Any] | None = None) -> AsyncChatSession:
        """The tenant's conversation named by the application's ``key``, created on first
        use (see ``SessionService.open``)."""
        core = await self._keep.core()
        return self._wrap(await self._keep.run(
            core.sessions.open, key, tenant, actor, subject, title=title,
            anonymize_pii=anonymize_pii, metadata=metadata))

    async def by_key(self, key: str, tenant: Ref) -> AsyncChatSession:
        """The tenant's conversation named ``key`` (``SessionNotFound`` if none)."""
        core = await self._keep.core()
        return self._wrap(await self._keep.run(core.sessions.by_key, key, tenant))

    async def get(self, session_id: str, tenant: Ref | None = None) -> AsyncChatSession:
        """Load a session (a wrong ``tenant`` is ``SessionNotFound``)."""
        core = await self._keep.core()
        return self._wrap(await self._keep.run(core.sessions.get, session_id, tenant))

    async def tenant_of(self, session_id: str) -> Ref:
        """The tenant that owns ``session_id`` (what a job bills)."""
        core = await self._keep.core()
        return await self._keep.run(core.sessions.tenant_of, session_id)

    async def list(self, tenant: Ref, *, actor: Ref | None = None,
                   subject: Ref | None = None, limit: int = 50) -> list[AsyncChatSession]:
        """A tenant's sessions, most recently active first."""
        core = await self._keep.core()
        found = await self._keep.run(core.sessions.list, tenant, actor=actor, subject=subject,
                                     limit=limit)
        return [self._wrap(s) for s in found]


def core_session(session: ChatSession | AsyncChatSession) -> ChatSession:
    """The sync session behind ``session`` (async services accept either)."""
    return session.core if isinstance(session, AsyncChatSession) else session
